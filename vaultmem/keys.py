"""Key administration on disk: the keyring branch, listing data keys,
rewrapping and rotating them, re-encrypting the current memory.

The keyring lives on its own branch (``refs/heads/vaultmem-keyring``) so it
travels with a clone.  Each keyring commit has no parent: a superseded keyring
(data keys wrapped under an old user key) becomes unreachable instead of staying
in a history that every clone would carry, and ``git gc --prune=now`` removes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pygit2

from . import durable
from .crypto import Keyring
from .errors import ConflictError, NotAVaultError

KEYRING_REF = "refs/heads/vaultmem-keyring"
KEYRING_FILE = "keyring.json"
COMMITTER = ("vaultmem", "vaultmem@localhost")


@dataclass(frozen=True)
class KeyInfo:
    """A data key as an operator sees it (never the key itself)."""

    id: str
    created: datetime
    active: bool


def list_keys(keyring: Keyring) -> list[KeyInfo]:
    active = keyring.doc.get("active")
    return [
        KeyInfo(entry["id"], datetime.fromtimestamp(entry["created"], tz=timezone.utc), entry["id"] == active)
        for entry in keyring.doc["data_keys"]
    ]


def keyring_blob(repo: pygit2.Repository, target: Any) -> bytes:
    try:
        commit = repo[target]
        blob = commit.peel(pygit2.Commit).tree[KEYRING_FILE]
        return bytes(blob.read_raw())
    except (KeyError, ValueError, pygit2.GitError) as err:
        raise NotAVaultError("Error: the vault's keyring ref is damaged; restore it from a clone.") from err


def write_keyring(repo: pygit2.Repository, gitdir: Path, keyring: Keyring, message: str, now: int) -> None:
    """Replace the keyring, durably: its objects are synced before the ref
    points at them, and the ref is synced before the call returns (the data
    keys are the only copy there is)."""
    blob = repo.create_blob(keyring.to_bytes())
    builder = repo.TreeBuilder()
    builder.insert(KEYRING_FILE, blob, pygit2.enums.FileMode.BLOB)
    sig = pygit2.Signature(*COMMITTER, now, 0)
    commit = repo.create_commit(None, sig, sig, message + "\n", builder.write(), [])
    durable.sync_filesystem(gitdir)
    repo.references.create(KEYRING_REF, commit, force=True)
    durable.sync_filesystem(gitdir)


def check_unchanged(repo: pygit2.Repository, keyring: Keyring) -> None:
    """Key changes start from the keyring on disk: another process may have
    changed it since this vault was opened."""
    ref = repo.references.get(KEYRING_REF)
    if ref is None or Keyring.parse(keyring_blob(repo, ref.target)) != keyring.doc:
        raise ConflictError(
            "Error: the keyring changed since this vault was opened (another process changed a key); "
            "open the vault again and retry."
        )
    if not keyring.intact:
        keyring.active  # raises, naming what is wrong  # noqa: B018
