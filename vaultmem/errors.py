"""The one exception family of the library.

Every failure the library reports is a :class:`VaultError`.  The subclasses say
what kind of failure it was so callers (the tool, the CLI) can map them to the
right words; the message always says what to do next.
"""

from __future__ import annotations

# What to do next, in the library's words.  An error names its next step by
# one of these keys (``step``), so that the command line can say the same step
# in its own words: its commands and flags (see ``vaultmem.cli.app``).
STEPS = {
    "create": "Create a vault there first.",
    "versions": "The vault's history lists its versions.",
    "use-key": "Open it with its key or key file, or set VAULTMEM_KEY.",
    "give-key": "Give its key, a key file or its passphrase, or set VAULTMEM_KEY.",
    "is-passphrase": "If it is a passphrase, open the vault with the passphrase instead.",
    "give-passphrase": "Open it with its passphrase.",
    "new-key": "Pull with the new key.",
    "choose-policy": "Pull again with policy_from='ours' or policy_from='theirs' to say which side's values win.",
    "import-replace": "Import into an empty vault, remove them first, or import with replace=True to make the memory "
    "exactly the folder. Nothing was imported.",
}


class VaultError(Exception):
    """Base class for everything vaultmem raises on purpose.

    ``fact`` is what went wrong; ``step``, when set, names the next step (a
    key of ``STEPS``), which ``str()`` appends in the library's words."""

    def __init__(self, *args: object, step: str | None = None) -> None:
        super().__init__(*args)
        self.step = step if step in STEPS else None

    @property
    def fact(self) -> str:
        return super().__str__()

    def __str__(self) -> str:
        fact = super().__str__()
        return f"{fact} {STEPS[self.step]}" if self.step else fact


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


class ErasedError(IntegrityError):
    """The version asked for was erased (its key destroyed by ``forget`` or
    ``redact``): deliberate and audited, not damage.  ``commit`` is the
    erasure's commit id (empty when the record is lost)."""

    def __init__(self, message: str, commit: str = "", **kwargs: object) -> None:
        super().__init__(message, **kwargs)  # type: ignore[arg-type]
        self.commit = commit


class SigningError(VaultError):
    """The write needs a signature it cannot get: the vault requires signed
    commits and the writer has no valid signing key; nothing was written."""


class BusyError(VaultError):
    """Another program (a git command) holds a lock vaultmem needs; nothing was changed."""


class StorageError(VaultError):
    """The disk refused a write (full, read-only, not permitted); nothing was changed."""


class CommandError(VaultError):
    """A memory command refused; the message is exactly what the model sees
    (SPEC.md).  The SDK's tool classes raise it as the SDK's ``ToolError``."""
