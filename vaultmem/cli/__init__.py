"""The ``vaultmem`` command: parsers and handlers (app), chat, demo, progress."""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command (the console script's entry point).  Ctrl-C while
    the command's modules are still loading ends it with 130 and no
    traceback, as an interrupt does anywhere in the command."""
    try:
        from vaultmem.cli import app
    except KeyboardInterrupt:
        return 130
    return app.main(argv)


__all__ = ["main"]
