"""vaultmem: an encrypted, versioned, auditable backend for Claude's memory tool.

Every memory mutation is a Fernet-encrypted blob committed to a local git
repository: ``git log`` is the audit trail, any earlier state can be restored,
and nothing readable sits at rest.
"""

from typing import TYPE_CHECKING, Any

from .agent import MEMORY_BETA, context_management, memory_request, memory_system_prompt
from .crypto import generate_key
from .diff import FileChange
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
from .expiry import ExpireResult, StaleFile
from .history import Version
from .keys import KeyInfo
from .policy import Policy, PolicyVersion
from .store import Change, Entry, Vault
from .transfer import ExportResult, ImportResult
from .verify import Finding, VerifyReport

if TYPE_CHECKING:
    from .tool import AsyncVaultMemoryTool, VaultMemoryTool

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # The tool classes import the Anthropic SDK (most of a second); commands
    # that never talk to Claude, such as git's textconv driver, skip it.
    if name in ("VaultMemoryTool", "AsyncVaultMemoryTool"):
        from . import tool

        return getattr(tool, name)
    raise AttributeError(f"module 'vaultmem' has no attribute {name!r}")


__all__ = [
    "MEMORY_BETA",
    "AlreadyExistsError",
    "AsyncVaultMemoryTool",
    "BadKeyError",
    "Change",
    "ConflictError",
    "Entry",
    "ExpireResult",
    "ExportResult",
    "FileChange",
    "Finding",
    "ImportResult",
    "IntegrityError",
    "InvalidPathError",
    "KeyInfo",
    "LimitError",
    "NotAVaultError",
    "NotFoundError",
    "Policy",
    "PolicyVersion",
    "StaleFile",
    "Vault",
    "VaultError",
    "VaultMemoryTool",
    "VerifyReport",
    "Version",
    "WrongKeyError",
    "__version__",
    "context_management",
    "generate_key",
    "memory_request",
    "memory_system_prompt",
]
