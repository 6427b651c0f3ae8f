"""vaultmem: an encrypted, versioned, auditable backend for Claude's memory tool.

Every memory mutation is a Fernet-encrypted blob committed to a local git
repository: ``git log`` is the audit trail, any earlier state can be restored,
and nothing readable sits at rest.
"""

from .crypto import generate_key
from .errors import (
    AlreadyExistsError,
    BadKeyError,
    ConflictError,
    IntegrityError,
    InvalidPathError,
    LimitError,
    NotAVaultError,
    NotFoundError,
    VaultError,
    WrongKeyError,
)
from .store import Change, Vault, VerifyReport, Version
from .tool import AsyncVaultMemoryTool, VaultMemoryTool

__version__ = "0.1.0"

__all__ = [
    "AlreadyExistsError",
    "AsyncVaultMemoryTool",
    "BadKeyError",
    "Change",
    "ConflictError",
    "IntegrityError",
    "InvalidPathError",
    "LimitError",
    "NotAVaultError",
    "NotFoundError",
    "Vault",
    "VaultError",
    "VaultMemoryTool",
    "VerifyReport",
    "Version",
    "WrongKeyError",
    "__version__",
    "generate_key",
]
