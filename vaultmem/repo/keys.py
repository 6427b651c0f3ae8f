"""Key administration on disk: the keyring branch, listing data keys,
rewrapping and rotating them, re-encrypting the current memory.

The keyring lives on its own branch (``refs/heads/vaultmem-keyring``) so it
travels with a clone.  Each keyring commit follows the one before it, so the
branch grows as a fast-forward, except after an erasure (format 2): the
punctured keyring is then a new root commit, and every copy of the keyrings
before it is removed from the disk (:func:`replace_keyring`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pygit2

from vaultmem.core.crypto import Keyring
from vaultmem.errors import ConflictError, NotAVaultError
from vaultmem.git import objects
from vaultmem.git.commits import COMMITTER, CommitPath, Damaged, Draft, read_ref

KEYRING_REF = "refs/heads/vaultmem-keyring"
SHADOWS_REF = "refs/heads/vaultmem-shadows"  # a migrated vault's format 1 versions, re-encrypted
KEYRING_FILE = "keyring.json"


@dataclass(frozen=True)
class KeyInfo:
    """A data key as an operator sees it (never the key itself)."""

    id: str
    created: datetime
    active: bool


def list_keys(keyring: Keyring) -> list[KeyInfo]:
    """Data keys (format 1) and epochs (format 2), oldest first."""
    active = keyring.doc.get("active")
    entries = [*keyring.doc["data_keys"], *(keyring.doc.get("epochs") or [])]
    return [
        KeyInfo(entry["id"], datetime.fromtimestamp(entry["created"], tz=timezone.utc), entry["id"] == active)
        for entry in sorted(entries, key=lambda e: (e["created"], e["id"]))
    ]


def keyring_blob(repo: pygit2.Repository, target: Any) -> bytes:
    try:
        commit = repo[target]
        blob = commit.peel(pygit2.Commit).tree[KEYRING_FILE]
        return bytes(blob.read_raw())
    except (KeyError, ValueError, pygit2.GitError) as err:
        raise NotAVaultError("Error: the vault's keyring ref is damaged; restore it from a clone.") from err


def write_keyring(
    commits: CommitPath,
    keyring: Keyring,
    message: str,
    now: int,
    merged_from: bytes | None = None,
    *,
    root: bool = False,
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
    parents = [current] if current is not None and not root else []
    if merged_from is not None and not root:  # a merge of two clones' keyrings: both are its parents
        parents.append(merged_from)
    draft = Draft(tree.id, parents, COMMITTER, now, message + "\n")
    # Format 2 keyrings hold key covers an erasure must be able to destroy:
    # their packs stay apart from everything else (hold).
    commits.commit(KEYRING_REF, current, [blob, tree], draft, checkpoint=True, hold=keyring.format >= 2)


def keyring_objects(repo: pygit2.Repository, tips: list[pygit2.Oid]) -> set[bytes]:
    """Every object of the keyring histories ending at ``tips`` (raw ids)."""
    out: set[bytes] = set()
    stack = list(tips)
    while stack:
        oid = stack.pop()
        if oid.raw in out:
            continue
        try:
            commit = repo[oid].peel(pygit2.Commit)
        except (KeyError, ValueError, pygit2.GitError):
            continue
        out.add(commit.id.raw)
        out.add(commit.tree_id.raw)
        for entry in commit.tree:
            out.add(entry.id.raw)
        stack.extend(commit.parent_ids)
    return out


def keyring_tips(repo: pygit2.Repository) -> list[pygit2.Oid]:
    """The keyring branch and every other ref naming a keyring (a remote's,
    an incoming push's)."""
    tips: list[pygit2.Oid] = []
    for name in repo.references:
        if name == KEYRING_REF or name.endswith("/vaultmem-keyring"):
            with contextlib.suppress(KeyError, ValueError, pygit2.GitError):
                target = repo.references[name].resolve().target
                if isinstance(target, pygit2.Oid):
                    tips.append(target)
    return tips


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
