"""The ``vaultmem`` command: parsers and handlers (app), chat, demo, progress."""

from vaultmem.cli.app import main

__all__ = ["main"]
