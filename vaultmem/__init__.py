"""vaultmem: an encrypted, versioned, auditable backend for Claude's memory tool.

Every memory mutation is a Fernet-encrypted blob committed to a local git
repository: ``git log`` is the audit trail, any earlier state can be restored,
and nothing readable sits at rest.
"""

import importlib
from typing import TYPE_CHECKING, Any

from vaultmem import _moved

if TYPE_CHECKING:
    from vaultmem.anthropic.agent import MEMORY_BETA, context_management, memory_request, memory_system_prompt
    from vaultmem.anthropic.tool import AsyncVaultMemoryTool, ToolError, VaultMemoryTool
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

__version__ = "0.1.0"

_moved.install()  # the 0.1 module names, such as vaultmem.commits, still import

# Each public name, and the module it comes from, imported on first use: a
# command's start (and Ctrl-C during it, which the command then catches, see
# vaultmem.cli) runs no more than the command needs.  The tool classes import
# the Anthropic SDK (most of a second); commands that never talk to Claude,
# such as git's textconv driver, never load it.
_HOMES = {
    **dict.fromkeys(
        ("MEMORY_BETA", "context_management", "memory_request", "memory_system_prompt"), "vaultmem.anthropic.agent"
    ),
    # ToolError: the SDK's, which the tool classes raise
    **dict.fromkeys(("AsyncVaultMemoryTool", "ToolError", "VaultMemoryTool"), "vaultmem.anthropic.tool"),
    "generate_key": "vaultmem.core.crypto",
    "Policy": "vaultmem.core.policy",
    **dict.fromkeys(("Signer", "Signers"), "vaultmem.core.signers"),
    **dict.fromkeys(("PublicKey", "SigningKey"), "vaultmem.core.signing"),
    "Version": "vaultmem.core.versions",
    **dict.fromkeys(
        (
            "AlreadyExistsError",
            "BadKeyError",
            "ConflictError",
            "IntegrityError",
            "InvalidPathError",
            "LimitError",
            "NotAVaultError",
            "NotFoundError",
            "SigningError",
            "VaultError",
            "WrongKeyError",
        ),
        "vaultmem.errors",
    ),
    "FileChange": "vaultmem.ops.diff",
    **dict.fromkeys(("ExpireResult", "StaleFile"), "vaultmem.ops.expiry"),
    **dict.fromkeys(("ExportResult", "ImportResult"), "vaultmem.ops.transfer"),
    "KeyInfo": "vaultmem.repo.keys",
    "PolicyVersion": "vaultmem.repo.policy",
    **dict.fromkeys(("Finding", "VerifyReport"), "vaultmem.repo.verify"),
    **dict.fromkeys(("Change", "Entry", "Vault"), "vaultmem.vault"),
}
# The subpackages `import vaultmem` used to load: attributes as before.  The
# others (cli, mcp, testing) are one only once imported, as they always were.
_PACKAGES = frozenset({"anthropic", "core", "errors", "git", "ops", "repo", "vault"})


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is not None:
        value = getattr(importlib.import_module(home), name)
        globals()[name] = value  # the next use is a plain lookup
        return value
    if name in _PACKAGES:  # `import vaultmem; vaultmem.repo...`, as when the package imported them all
        return importlib.import_module(f"vaultmem.{name}")
    raise AttributeError(f"module 'vaultmem' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


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
