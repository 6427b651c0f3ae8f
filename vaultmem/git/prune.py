"""Removing objects for good: what an erasure does to the superseded keyring.

Crypto-shredding destroys keys, and a key destroyed in the keyring document
is destroyed only once no copy of an older keyring is left on the disk:
not as a loose object, not inside a pack, not in a pack retired to the
trash, not in the journal (:meth:`CommitPath.scrub`).  :func:`drop` removes
the given objects from the loose objects and every pack: a pack holding only
them is removed whole (format 2 keyring packs are *held*: vaultmem's upkeep
never merges them with other objects, see :meth:`CommitPath.held`); any other
pack (one ``git gc`` made, say) holding one of them is rewritten without it (its other objects
copied whole into a new pack, synced and renamed into place before the old
pack goes).  A pack another program keeps (``.keep``) is left alone and
reported.  Called under the writer lock; a pack merge of vaultmem's upkeep
running at the same moment is dropped (:attr:`CommitPath.pruned`).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import struct
from collections.abc import Collection
from pathlib import Path

import pygit2

from vaultmem.git import commits, durable, midx, objects

_IDX_MAGIC = b"\377tOc\x00\x00\x00\x02"


def _ids(idx: bytes) -> list[bytes]:
    if idx[:8] != _IDX_MAGIC:
        raise ValueError("not a version 2 pack index")
    count = struct.unpack(">I", idx[8 + 255 * 4 : 8 + 256 * 4])[0]
    base = 8 + 256 * 4
    return [idx[base + 20 * i : base + 20 * i + 20] for i in range(count)]


def _contains(ids: list[bytes], oid: bytes) -> bool:
    at = bisect.bisect_left(ids, oid)
    return at < len(ids) and ids[at] == oid


def drop(gitdir: Path, doomed: Collection[bytes], repo: pygit2.Repository) -> list[str]:
    """Remove ``doomed`` (object ids, raw) from the loose objects and the
    packs; the packs it had to leave holding one: a pack another program
    protects with a ``.keep`` (git's receive-pack while a push lands) is
    never touched, and a pack whose index cannot be read is not rewritten."""
    if not doomed:
        return []
    objects_dir = gitdir / "objects"
    # git's indexes over the objects go first: killed after any removal below,
    # none names an object that is gone (git fsck fails on such a one).
    _drop_indexes_naming(objects_dir, set(doomed))
    for oid in doomed:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(objects_dir / oid.hex()[:2] / oid.hex()[2:])
    pack_dir = objects_dir / "pack"
    try:
        names = sorted(os.listdir(pack_dir))
    except FileNotFoundError:
        return []
    doomed_set = set(doomed)
    left: list[str] = []
    for name in names:
        if not name.endswith(".idx"):
            continue
        stem = pack_dir / name[: -len(".idx")]
        try:
            ids = _ids((pack_dir / name).read_bytes())
        except FileNotFoundError:
            continue  # removed meanwhile
        except (OSError, ValueError):
            left.append(str(stem.with_suffix(".pack")))
            continue
        if not any(_contains(ids, oid) for oid in doomed_set):
            continue
        if stem.with_suffix(".keep").exists():
            left.append(str(stem.with_suffix(".pack")))  # another program's: waited for, never removed
            continue
        rest = [oid for oid in ids if oid not in doomed_set]
        if rest:
            _rewrite(stem, rest, repo)
            commits.step("prune-rewritten")
        if midx.lists(pack_dir, stem):
            midx.clear(pack_dir)  # as git's repack -d does before it deletes a pack the index lists
        _remove_pack(stem)
        commits.step("prune-removed")
    _drop_indexes_naming(objects_dir, doomed_set)  # again: git may have written one meanwhile
    durable.sync_dir(pack_dir)
    return left


def _drop_indexes_naming(objects_dir: Path, doomed: set[bytes]) -> None:
    """git's optional indexes over the objects (the commit-graph, a
    multi-pack index, single or a chain) name objects and packs by id: one
    that names a removed object would make ``git fsck`` fail, so it goes (git
    writes it again at its next ``gc``; nothing is lost)."""
    info = objects_dir / "info"
    graphs = [info / "commit-graph"]
    with contextlib.suppress(FileNotFoundError):
        graphs += [info / "commit-graphs" / name for name in os.listdir(info / "commit-graphs")]
    for graph in graphs:
        try:
            data = graph.read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            continue
        if any(oid in data for oid in doomed):
            for stale in graphs:
                with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                    os.unlink(stale)
            break
    midx.clear(objects_dir / "pack")  # it lists packs by name, and a pack was rewritten or removed


def _rewrite(stem: Path, rest: list[bytes], repo: pygit2.Repository) -> None:
    """Put a pack holding ``rest`` (read through libgit2, whole) in place,
    synced, before the pack ``stem`` goes."""
    kept: list[objects.PackedObject] = []
    for oid in rest:
        kind, data = repo.odb.read(pygit2.Oid(raw=oid))
        kept.append(objects.packed(int(kind), bytes(data)))
    pack = objects.build_pack(kept)
    target = stem.with_name(f"pack-{pack.name}")
    if target == stem:
        return
    for suffix, data in ((".pack", pack.data), (".idx", pack.idx)):
        tmp = stem.with_name(f"tmp_vaultmem_prune_{os.getpid()}{suffix}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o444)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, target.with_suffix(suffix))
    durable.sync_dir(stem.parent)


def _remove_pack(stem: Path) -> None:
    """The index first (git then no longer lists the pack), the keep last."""
    for suffix in (".idx", ".pack", ".rev", ".bitmap", ".mtimes", ".promisor", ".keep"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stem.with_suffix(suffix))
