"""A file of a commit on one of the vault's own branches (the keyring, the
policy, the signers list), read with every object's size checked from its
header first: a zlib bomb put there (a few MB that inflate to gigabytes) is
refused before it is inflated, as :func:`vaultmem.repo.history.read_object`
refuses one in the memory's history."""

from __future__ import annotations

import pygit2

from vaultmem.git import objects


class TooLarge(ValueError):
    """An object declares more bytes than vaultmem ever writes."""


def _checked(repo: pygit2.Repository, oid: pygit2.Oid) -> None:
    _, size = repo.odb.read_header(oid)
    if size > objects.MAX_OBJECT_BYTES:
        raise TooLarge(f"object {oid} declares {size:,} bytes, more than vaultmem ever writes")


def read(repo: pygit2.Repository, oid: pygit2.Oid) -> bytes:
    """The bytes of object ``oid``, its size checked first."""
    _checked(repo, oid)
    return bytes(repo.odb.read(oid)[1])


def file_of(repo: pygit2.Repository, commit_id: pygit2.Oid, name: str) -> tuple[pygit2.Commit, bytes]:
    """The commit ``commit_id`` and the bytes of its tree's file ``name``;
    KeyError, ValueError (:class:`TooLarge` among them) or pygit2.GitError
    when any of them is missing, damaged or too large."""
    _checked(repo, commit_id)
    commit = repo[commit_id].peel(pygit2.Commit)
    _checked(repo, commit.tree_id)
    entry = commit.tree[name]
    _checked(repo, entry.id)
    return commit, bytes(entry.read_raw())
