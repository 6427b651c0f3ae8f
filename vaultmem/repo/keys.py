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
from typing import Any

import pygit2

from vaultmem.core.crypto import Keyring
from vaultmem.errors import ConflictError, NotAVaultError
from vaultmem.git import objects
from vaultmem.git.commits import COMMITTER, CommitPath, Damaged, Draft, read_ref

KEYRING_REF = "refs/heads/vaultmem-keyring"
KEYRING_FILE = "keyring.json"


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


def write_keyring(
    commits: CommitPath, keyring: Keyring, message: str, now: int, merged_from: bytes | None = None
) -> None:
    """Replace the keyring through the commit path, synced before returning
    (the data keys are the only copy there is).  The caller holds the writer lock."""
    blob = objects.packed(objects.BLOB, keyring.to_bytes())
    tree = objects.packed(objects.TREE, objects.encode_tree({KEYRING_FILE.encode(): (objects.MODE_BLOB, blob.id)}))
    try:
        current = read_ref(commits.gitdir, KEYRING_REF)
    except Damaged as err:
        raise NotAVaultError("Error: the vault's keyring ref is damaged; restore it from a clone.") from err
    # Each keyring commit follows the one before it, so the branch only grows:
    # a clone pulls and pushes it as a fast-forward, like main.
    parents = [current] if current is not None else []
    if merged_from is not None:  # a merge of two clones' keyrings: both are its parents
        parents.append(merged_from)
    draft = Draft(tree.id, parents, COMMITTER, now, message + "\n")
    commits.commit(KEYRING_REF, current, [blob, tree], draft, checkpoint=True)


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
