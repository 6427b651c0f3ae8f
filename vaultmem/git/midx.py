"""The packs git's multi-pack-index lists, and why vaultmem leaves them alone.

``git multi-pack-index write`` (and ``git maintenance run
--task=incremental-repack``, which runs it) writes
``objects/pack/multi-pack-index``, or an incremental chain of them
(``objects/pack/multi-pack-index.d/multi-pack-index-chain`` naming one
``multi-pack-index-<hash>.midx`` a line).  Each names a set of packs (its
``PNAM`` chunk) and attributes every object it covers to one of them.  Git
then reads those objects only from the pack the index attributes them to,
and a later ``multi-pack-index write`` copies the list forward without
looking whether the packs are still there.  A listed pack that vaultmem
took away would break stock git (``git fsck`` and ``git log`` fail) for good.

So vaultmem never merges away, retires or deletes a pack an index lists:

- its upkeep takes no listed pack as a merge source
  (:func:`vaultmem.git.objects.list_packs`);
- retiring a pack checks before and after its files move into the trash, and
  puts it back if an index lists it by then
  (:meth:`vaultmem.git.commits.CommitPath.retire`);
- emptying the trash checks again and puts a listed pack back into
  ``objects/pack``.  An index is written in two phases: git reads the pack
  folder (opening each pack's index file), works out the index, and only
  then takes ``multi-pack-index.lock`` and renames the new index into place.
  A pack retired during the first phase is named by an index that appears
  later, so while git uses an index, a retired pack stays in the trash for
  ``TRASH_GRACE`` seconds, and every retired pack stays while the lock is
  held.  Git itself removes a listed pack only while it rewrites or removes
  the index (``git repack -d``, ``git multi-pack-index expire``).

Why no object is lost, although ``git multi-pack-index expire`` unlinks,
before it takes any lock, every pack an index lists but attributes no object
to (a pack with a ``.keep``, or a cruft pack, excepted).  Say vaultmem merged
packs A and B into M, and retires A and B.  Git can expire M only if an index
lists M and attributes each of M's objects to another pack it lists.  That
pack is kept: vaultmem keeps every pack an index lists, and git does not
expire a pack it attributes an object to.  So one copy of each of M's objects
stays on disk when M goes.  The same holds for every pack vaultmem writes or
retires: each is either named by no index (no index reads objects from it,
so its removal cannot break git) or kept.

One more guard covers an index whose writing began before vaultmem could
see it (the very first one, or one that took longer than the grace): git
gives an object that several packs new to the index hold to the most
recently modified pack, by the second, so a merged pack is dated a second
after the newest pack it merged (:mod:`vaultmem.git.upkeep`).  An index that
found both M and A then attributes their objects to M, never to A: at worst
it names a pack that is gone and to which it attributes nothing, which ``git
fsck`` and ``vault.verify()`` report, and no object is lost.

What "listed" means here is deliberately wide: the single index and every
layer of a chain count, whichever git would read first, and an index that
exists but cannot be read (a version this module does not know, a file cut
short, a chain naming a layer that is missing) means every pack may be
listed (:func:`listed` returns None).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import struct
from pathlib import Path

MIDX = "multi-pack-index"
CHAIN_DIR = "multi-pack-index.d"
CHAIN = "multi-pack-index-chain"

_SIGNATURE = b"MIDX"
_VERSIONS = (1, 2)  # the file versions git writes (midx.version) and reads
_HASH_LENGTHS = {1: 20, 2: 32}  # object id version -> hash length (SHA-1, SHA-256)
_HEADER = 12
_CHUNK_ROW = 12  # a chunk's id (4 bytes) and its offset (8)
_PNAM = b"PNAM"
_LAYER = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_COMPANION = re.compile(r"multi-pack-index-[0-9a-f]+\.(?:midx|rev|bitmap)")  # a layer, a reverse index, a bitmap


def pack_names(data: bytes) -> list[str]:
    """The packs one multi-pack-index file (``data``, whole) lists, by their
    ``pack-<hash>`` stems; ValueError if it is not one this module can read."""
    count, start, end = _pack_name_chunk(data, len(data))
    return _names(data[start:end], count)


def read_pack_names(path: Path) -> list[str]:
    """:func:`pack_names` of the file at ``path``, reading only its header,
    its table of chunks and its pack names (the rest, object ids and
    offsets, can run to megabytes)."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        head = fh.read(_HEADER)
        if len(head) == _HEADER and head[:4] == _SIGNATURE:
            head += fh.read((head[6] + 1) * _CHUNK_ROW)
        count, start, end = _pack_name_chunk(head, size)
        fh.seek(start)
        chunk = fh.read(end - start)
    if len(chunk) != end - start:
        raise ValueError("a multi-pack-index cut short")
    return _names(chunk, count)


def _pack_name_chunk(head: bytes, size: int) -> tuple[int, int, int]:
    """From a multi-pack-index's first bytes (at least its header and table
    of chunks) and its size: how many packs it lists, and where its pack
    names (the ``PNAM`` chunk) start and end."""
    if len(head) < _HEADER or head[:4] != _SIGNATURE:
        raise ValueError("not a multi-pack-index")
    version, hash_version, chunks = head[4], head[5], head[6]
    if version not in _VERSIONS or hash_version not in _HASH_LENGTHS:
        raise ValueError(f"a multi-pack-index of version {version} (hash {hash_version})")
    (count,) = struct.unpack(">I", head[8:12])
    table_end = _HEADER + (chunks + 1) * _CHUNK_ROW
    if len(head) < table_end or size < table_end + _HASH_LENGTHS[hash_version]:
        raise ValueError("a multi-pack-index cut short")
    rows = [
        (head[at : at + 4], struct.unpack(">Q", head[at + 4 : at + 12])[0])
        for at in range(_HEADER, table_end, _CHUNK_ROW)
    ]
    # The chunks lie in file order: each ends where the next row's begins
    # (the last row, id zero, marks where the last chunk ends, and the
    # checksum follows it).
    offsets = [table_end, *(at for _, at in rows), size - _HASH_LENGTHS[hash_version]]
    if rows[-1][0] != b"\0\0\0\0" or any(a > b for a, b in itertools.pairwise(offsets)):
        raise ValueError("a multi-pack-index cut short, or its table of chunks damaged")
    found = [(start, end) for (name, start), (_, end) in itertools.pairwise(rows) if name == _PNAM]
    if len(found) != 1:
        raise ValueError("a multi-pack-index without its pack names")
    start, end = found[0]
    return count, start, end


def _names(chunk: bytes, count: int) -> list[str]:
    """The first ``count`` NUL-terminated names of a ``PNAM`` chunk, as stems."""
    names = chunk.split(b"\0")
    if len(names) <= count or any(not name for name in names[:count]):
        raise ValueError("a multi-pack-index whose pack names are cut short")
    return [_stem(name.decode("utf-8", "surrogateescape")) for name in names[:count]]


def _stem(name: str) -> str:
    """``pack-<hash>`` of ``pack-<hash>.idx`` or ``pack-<hash>.pack`` (an
    index names its packs by either)."""
    for suffix in (".idx", ".pack"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


_Stat = tuple[int, int, int, int] | None
_LAST: dict[Path, tuple[_Stat, frozenset[str] | None]] = {}  # per folder: the single index read last, and its answer


def _stat(path: str) -> _Stat:
    """Which file ``path`` is now (None: there is none); git replaces an
    index by renaming a new file over it, so the same file reads the same."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def listed(pack_dir: Path) -> frozenset[str] | None:
    """The ``pack-<hash>`` stems every multi-pack-index of ``pack_dir``
    lists (the single index and each layer of a chain); empty when there is
    none, None when one exists that cannot be read: every pack may be listed.
    Two ``stat`` calls when there is none, or only the single index read last."""
    try:
        single, chain = _stat(os.path.join(pack_dir, MIDX)), _stat(os.path.join(pack_dir, CHAIN_DIR, CHAIN))
    except OSError:
        return None
    if single is None and chain is None:
        return frozenset()
    last = _LAST.get(pack_dir)
    if chain is None and last is not None and last[0] == single:
        return last[1]
    names = _read(pack_dir)
    if chain is None:
        with contextlib.suppress(OSError):
            if _stat(os.path.join(pack_dir, MIDX)) == single:  # not replaced while it was read
                _LAST[pack_dir] = (single, names)
    return names


def _read(pack_dir: Path) -> frozenset[str] | None:
    """The packs the single index and the chain list; None if either is unreadable."""
    try:
        names = set(read_pack_names(pack_dir / MIDX))
    except FileNotFoundError:
        names = set()  # no single index: only a chain, if any
    except (OSError, ValueError):
        return None
    layers = _chain(pack_dir / CHAIN_DIR)
    return None if layers is None else frozenset(names | layers)


def _chain(chain_dir: Path) -> set[str] | None:
    """The packs the layers of an incremental chain list; None when the
    chain cannot be read.  Git writes a chain's new layers before the chain
    file and removes the layers it dropped after, so a layer that is gone
    is looked for once more in the chain as it is then."""
    for _ in range(2):
        try:
            chain = (chain_dir / CHAIN).read_text(encoding="ascii")
        except FileNotFoundError:
            return set()
        except (OSError, ValueError):
            return None
        names: set[str] = set()
        try:
            for line in chain.split():
                if not _LAYER.fullmatch(line):
                    return None
                names.update(read_pack_names(chain_dir / f"{MIDX}-{line}.midx"))
        except FileNotFoundError:
            continue  # replaced meanwhile, or a layer really missing: git reads only part of the chain
        except (OSError, ValueError):
            return None
        return names
    return None


def lists(pack_dir: Path, pack: Path | str) -> bool:
    """Whether a multi-pack-index of ``pack_dir`` may list ``pack`` (a
    ``pack-<hash>`` file or stem): True when one cannot be read."""
    return may_list(listed(pack_dir), pack)


def may_list(names: frozenset[str] | None, pack: Path | str) -> bool:
    """Whether ``names`` (from :func:`listed`) may list ``pack`` (a
    ``pack-<hash>`` file or stem): True when an index could not be read."""
    return names is None or _stem(os.path.basename(pack)) in names


def in_use(pack_dir: Path) -> bool:
    """Whether git indexes ``pack_dir`` with a multi-pack-index (one is there,
    or a chain's folder), so a write of one may be under way unseen."""
    return (pack_dir / MIDX).exists() or (pack_dir / CHAIN_DIR).is_dir() or being_written(pack_dir)


def being_written(pack_dir: Path) -> bool:
    """Whether git holds the lock of a multi-pack-index (single or chain):
    it is writing one, which may list any pack that was in the folder when
    it started."""
    return (pack_dir / f"{MIDX}.lock").exists() or (pack_dir / CHAIN_DIR / f"{CHAIN}.lock").exists()


def missing(pack_dir: Path) -> list[str]:
    """The packs a multi-pack-index of ``pack_dir`` lists that are not
    there (no ``.idx`` or no ``.pack``): stock git fails to read what the
    index attributes to them.  Reads only."""
    names = listed(pack_dir)
    if not names:
        return []
    try:
        present = set(os.listdir(pack_dir))
    except FileNotFoundError:
        present = set()
    return sorted(name for name in names if f"{name}.idx" not in present or f"{name}.pack" not in present)


def clear(pack_dir: Path) -> None:
    """Remove every multi-pack-index of ``pack_dir`` and the files that go with
    it (``.rev``, ``.bitmap``; a chain's file first, then its layers), as git's
    own ``repack -d`` does before it deletes a pack the index lists.  Git
    writes it again at its next ``multi-pack-index write``; nothing is lost."""
    chain_dir = pack_dir / CHAIN_DIR
    for folder, first in ((pack_dir, MIDX), (chain_dir, CHAIN)):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(folder / first)
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            continue
        for name in names:
            if _COMPANION.fullmatch(name):  # never a lock of git's
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(folder / name)
