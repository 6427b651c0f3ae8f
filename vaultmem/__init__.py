"""vaultmem: an encrypted, versioned, auditable backend for Claude's memory tool.

Every memory mutation is a Fernet-encrypted blob committed to a local git
repository: ``git log`` is the audit trail, any earlier state can be restored,
and nothing readable sits at rest.
"""

from typing import TYPE_CHECKING, Any

from vaultmem import _moved
from vaultmem.anthropic.agent import MEMORY_BETA, context_management, memory_request, memory_system_prompt
from vaultmem.core.crypto import generate_key
from vaultmem.core.policy import Policy
from vaultmem.core.signers import Signer, Signers
from vaultmem.core.signing import PublicKey, SigningKey
from vaultmem.core.versions import Version
from vaultmem.errors import (
    AlreadyExistsError,
    BadKeyError,
    ConflictError,
    IntegrityError,
    InvalidPathError,
    LimitError,
    NotAVaultError,
    NotFoundError,
    SigningError,
    VaultError,
    WrongKeyError,
)
from vaultmem.ops.diff import FileChange
from vaultmem.ops.expiry import ExpireResult, StaleFile
from vaultmem.ops.transfer import ExportResult, ImportResult
from vaultmem.repo.keys import KeyInfo
from vaultmem.repo.policy import PolicyVersion
from vaultmem.repo.verify import Finding, VerifyReport
from vaultmem.vault import Change, Entry, Vault

if TYPE_CHECKING:
    from vaultmem.anthropic.tool import AsyncVaultMemoryTool, ToolError, VaultMemoryTool

__version__ = "0.1.0"

_moved.install()  # the 0.1 module names, such as vaultmem.commits, still import


def __getattr__(name: str) -> Any:
    # The tool classes import the Anthropic SDK (most of a second); commands
    # that never talk to Claude, such as git's textconv driver, skip it.
    if name in ("VaultMemoryTool", "AsyncVaultMemoryTool", "ToolError"):
        from vaultmem.anthropic import tool

        return getattr(tool, name)  # ToolError: the SDK's, which the tool classes raise
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
    "PublicKey",
    "Signer",
    "Signers",
    "SigningError",
    "SigningKey",
    "StaleFile",
    "ToolError",
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
