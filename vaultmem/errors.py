"""The one exception family of the library.

Every failure the library reports is a :class:`VaultError`.  The subclasses say
what kind of failure it was so callers (the tool, the CLI) can map them to the
right words; the message always says what to do next.
"""

from __future__ import annotations


class VaultError(Exception):
    """Base class for everything vaultmem raises on purpose."""


class InvalidPathError(VaultError):
    """A memory path broke one of the path rules; nothing was touched."""

    rule: str = "the path is not valid"


class NotFoundError(VaultError):
    """The path (or version) asked for does not exist."""


class AlreadyExistsError(VaultError):
    """The path asked for already exists and would be overwritten."""


class ConflictError(VaultError):
    """The change cannot be applied to the vault as it is (a file in the way, ...)."""


class LimitError(VaultError):
    """The change would exceed a configured limit; nothing was written."""


class BadKeyError(VaultError):
    """No usable key was given, or the key material is malformed."""


class WrongKeyError(VaultError):
    """The key given does not open this vault."""


class NotAVaultError(VaultError):
    """The folder is not a vaultmem vault (or is a newer format than this version reads)."""


class IntegrityError(VaultError):
    """Stored data failed authentication: it was altered, moved or truncated."""


class BusyError(VaultError):
    """Another program (a git command) holds a lock vaultmem needs; nothing was changed."""


class StorageError(VaultError):
    """The disk refused a write (full, read-only, not permitted); nothing was changed."""


class CommandError(VaultError):
    """A memory command refused; the message is exactly what the model sees
    (SPEC.md).  The SDK's tool classes raise it as the SDK's ``ToolError``."""
