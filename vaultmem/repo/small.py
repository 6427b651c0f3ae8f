"""A file of a commit on one of the vault's own branches (the keyring, the
policy, the signers list), read with every object's size checked from its
header first (:func:`vaultmem.repo.history.check_size`): a zlib bomb put
there (a few MB that inflate to gigabytes) is refused before it is inflated,
as one in the memory's history is."""

from __future__ import annotations

import pygit2

from vaultmem.repo.history import check_size, read_object


def read(repo: pygit2.Repository, oid: pygit2.Oid) -> bytes:
    """The bytes of object ``oid``, its size checked first."""
    return read_object(repo, oid)[1]


def file_of(repo: pygit2.Repository, commit_id: pygit2.Oid, name: str) -> tuple[pygit2.Commit, bytes]:
    """The commit ``commit_id`` and the bytes of its tree's file ``name``;
    KeyError, ValueError (:class:`OversizedObject` among them) or
    pygit2.GitError when any of them is missing, damaged or too large."""
    check_size(repo, commit_id)
    commit = repo[commit_id].peel(pygit2.Commit)
    check_size(repo, commit.tree_id)
    entry = commit.tree[name]
    check_size(repo, entry.id)
    return commit, bytes(entry.read_raw())
