"""Git objects and packs, written by vaultmem itself.

The write path builds every object of a commit in memory and stores them all in
one small pack file (``.pack`` + ``.idx``, git's version 2 formats) instead of
one loose file per object: two files per mutation instead of five or more, and
nothing for stock git to do differently.  Small packs are merged geometrically
(like ``git repack --geometric=2``) so their number stays logarithmic.

Pure byte formats here; the only I/O is reading packs to list and merge:
:mod:`vaultmem.commits` installs what is built here, and retires packs.
"""

from __future__ import annotations

import hashlib
import itertools
import mmap
import os
import re
import struct
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from vaultmem.core.lru import LRU
from vaultmem.core.paths import MAX_SEGMENT_BYTES
from vaultmem.git import midx

COMMIT, TREE, BLOB = 1, 2, 3
_TYPE_NAMES = {COMMIT: b"commit", TREE: b"tree", BLOB: b"blob"}
MODE_TREE = 0o040000
MODE_BLOB = 0o100644

# One tree entry: "<octal mode> <name>\0<20-byte id>".
_TREE_ENTRY = re.compile(rb"([0-7]+) ([^\0]+)\0(.{20})", re.DOTALL)
_HEX_ID = re.compile(rb"[0-9a-f]{40}")


def object_id(kind: int, data: bytes) -> bytes:
    return hashlib.sha1(b"%s %d\0" % (_TYPE_NAMES[kind], len(data)) + data).digest()


def _sort_key(item: tuple[bytes, tuple[int, bytes]]) -> bytes:
    name, (mode, _) = item
    return name + b"/" if mode == MODE_TREE else name


def in_tree_order(entries: Mapping[bytes, tuple[int, bytes]]) -> dict[bytes, tuple[int, bytes]]:
    """``entries`` in git's canonical order (a dict keeps it)."""
    return dict(sorted(entries.items(), key=_sort_key))


def encode_tree(entries: Mapping[bytes, tuple[int, bytes]]) -> bytes:
    """Serialise entries ``name -> (mode, id)`` in git's canonical order."""
    return encode_ordered(in_tree_order(entries))


def encode_ordered(entries: Mapping[bytes, tuple[int, bytes]]) -> bytes:
    """Serialise entries that :func:`in_tree_order` gave, in their order."""
    return b"".join([b"%o %s\0%s" % (mode, name, oid) for name, (mode, oid) in entries.items()])


def decode_tree(data: bytes) -> dict[bytes, tuple[int, bytes]]:
    return {m.group(2): (int(m.group(1), 8), m.group(3)) for m in _TREE_ENTRY.finditer(data)}


# The most bytes an object of a vault may hold: the blob of a 512 MiB file
# (base64 Fernet, a third larger) with room to spare, and far more than any
# tree or commit vaultmem writes.  A larger object (a zlib bomb: a few MB on
# the disk that inflate to gigabytes) was not written by vaultmem, and is
# refused from its header, before anything is inflated.
MAX_OBJECT_BYTES = 768 << 20


# How deep folders may nest below ``memories/``: a memory path holds at most
# 1,024 bytes, so at most 507 names ("/memories" and "/x" 507 times).  A
# deeper tree was not written by vaultmem, and is refused before reading it
# would run out of stack.
MAX_DEPTH = 512


def entry_name(name: bytes) -> str:
    """A tree entry's name as text; ValueError for one no memory path may
    hold and vaultmem never writes: not UTF-8, empty, ``.``, ``..``, holding
    a ``/`` (git itself refuses these in a tree), or over 255 bytes."""
    try:
        text = name.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    if text in ("", ".", "..") or "/" in text or len(name) > MAX_SEGMENT_BYTES:
        shown = repr(name[:48]) + (f" (of {len(name):,} bytes)" if len(name) > 48 else "")
        raise ValueError(f"named {shown}, which no memory path may hold")
    return text


def commit_tree(data: bytes) -> bytes:
    """The root tree id a commit object names (its first line); ValueError
    when ``data`` is no commit (a blob, a tree or a tag where a commit must be)."""
    if data[:5] != b"tree " or data[45:46] != b"\n" or _HEX_ID.fullmatch(data[5:45]) is None:
        raise ValueError("no commit naming a tree")
    return bytes.fromhex(data[5:45].decode("ascii"))


def tree_id_offsets(data: bytes) -> dict[bytes, int]:
    """Where each entry's 20-byte id starts in an encoded tree, by name."""
    return {m.group(2): m.start(3) for m in _TREE_ENTRY.finditer(data)}


def encode_commit(
    tree: bytes,
    parents: Sequence[bytes],
    author: bytes,
    committer: bytes,
    when: int,
    message: str,
    extra: Sequence[tuple[bytes, bytes]] = (),
) -> bytes:
    """A commit object; ``author``/``committer`` are ``Name <email>`` bytes, time
    in UTC; ``extra`` headers follow the committer (as git's ``gpgsig`` does)."""
    lines = [b"tree " + tree.hex().encode()]
    lines += [b"parent " + p.hex().encode() for p in parents]
    lines.append(b"author %s %d +0000" % (author, when))
    lines.append(b"committer %s %d +0000" % (committer, when))
    lines += [name + b" " + value for name, value in extra]
    return b"\n".join(lines) + b"\n\n" + message.encode("utf-8")


@dataclass(frozen=True)
class PackedObject:
    kind: int
    data: bytes
    id: bytes


def packed(kind: int, data: bytes) -> PackedObject:
    return PackedObject(kind, data, object_id(kind, data))


def _entry_header(kind: int, size: int) -> bytes:
    out = bytearray()
    byte = (kind << 4) | (size & 0x0F)
    size >>= 4
    while size:
        out.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    out.append(byte)
    return bytes(out)


def deflate_stored(data: bytes) -> bytes:
    """``data`` as a zlib stream of stored (uncompressed) blocks.

    Pack entries must be zlib streams, but compressing buys little here: blobs
    are base64 ciphertext and trees mostly object ids, while setting up zlib
    costs tens of microseconds per object, the largest CPU cost of a write.
    ``git gc`` recompresses if an operator wants smaller packs.
    """
    out = [b"\x78\x01"]
    end = len(data)
    start = 0
    while True:
        chunk = data[start : start + 0xFFFF]
        start += len(chunk)
        final = start >= end
        out.append(struct.pack("<BHH", final, len(chunk), len(chunk) ^ 0xFFFF))
        out.append(chunk)
        if final:
            break
    out.append(struct.pack(">I", zlib.adler32(data)))
    return b"".join(out)


def _build_idx(entries: Sequence[tuple[bytes, int, int]], pack_sum: bytes) -> bytes:
    """Index v2 for ``(id, crc32, offset)`` entries."""
    ordered = sorted(entries)
    count = len(ordered)
    per_byte = [0] * 256
    for oid, _, _ in ordered:
        per_byte[oid[0]] += 1
    large = [offset for _, _, offset in ordered if offset >= 0x80000000]
    small: list[int] = []
    spilled = 0
    for _, _, offset in ordered:
        if offset < 0x80000000:
            small.append(offset)
        else:
            small.append(0x80000000 | spilled)
            spilled += 1
    body = b"".join(
        [
            b"\377tOc\0\0\0\2",
            struct.pack(">256I", *itertools.accumulate(per_byte)),
            b"".join(oid for oid, _, _ in ordered),
            struct.pack(f">{count}I", *(crc for _, crc, _ in ordered)),
            struct.pack(f">{count}I", *small),
            struct.pack(f">{len(large)}Q", *large),
            pack_sum,
        ]
    )
    return body + hashlib.sha1(body).digest()


@dataclass(frozen=True)
class Pack:
    """A pack and its index as bytes, with its entries ``(id, crc, raw entry)``."""

    data: bytes
    idx: bytes
    whole: list[tuple[bytes, int, bytes]]

    @property
    def name(self) -> str:
        return pack_name(self.data)


def _assemble(whole: Sequence[tuple[bytes, int, bytes]]) -> Pack:
    entries: list[tuple[bytes, int, int]] = []
    offset = 12
    for oid, crc, raw in whole:
        entries.append((oid, crc, offset))
        offset += len(raw)
    body = b"PACK" + struct.pack(">II", 2, len(whole)) + b"".join(raw for _, _, raw in whole)
    pack_sum = hashlib.sha1(body).digest()
    return Pack(body + pack_sum, _build_idx(entries, pack_sum), list(whole))


def build_pack(objects: Iterable[PackedObject]) -> Pack:
    """A pack holding ``objects`` (each once)."""
    whole = []
    for obj in {o.id: o for o in objects}.values():
        raw = _entry_header(obj.kind, len(obj.data)) + deflate_stored(obj.data)
        whole.append((obj.id, zlib.crc32(raw), raw))
    return _assemble(whole)


def pack_name(pack: bytes) -> str:
    return pack[-20:].hex()


def entry_header(pack: bytes | mmap.mmap, at: int) -> tuple[int, int, int]:
    """The kind and the size a pack entry's header at ``at`` gives (for a
    delta, its own kind and size, not its object's), and where its data starts."""
    byte = pack[at]
    kind, size, shift = (byte >> 4) & 7, byte & 15, 4
    at += 1
    while byte & 0x80:
        byte = pack[at]
        size |= (byte & 0x7F) << shift
        shift += 7
        at += 1
    return kind, size, at


def _entries(pack: bytes) -> Iterator[tuple[int, int, int, bytes]]:
    """``(kind, start, end, data)`` of each whole (non-delta) entry of ``pack``."""
    if pack[:4] != b"PACK" or len(pack) < 32 or hashlib.sha1(pack[:-20]).digest() != pack[-20:]:
        raise ValueError("not a whole pack")
    (count,) = struct.unpack(">I", pack[8:12])
    offset = 12
    for _ in range(count):
        start = offset
        kind, _, offset = entry_header(pack, offset)
        if kind not in _TYPE_NAMES:
            raise ValueError("a pack entry vaultmem did not write")
        inflater = zlib.decompressobj()
        data = inflater.decompress(pack[offset : len(pack) - 20])
        if not inflater.eof:
            raise ValueError("a truncated pack entry")
        offset = len(pack) - 20 - len(inflater.unused_data)
        yield kind, start, offset, data


def valid_pack(pack: bytes) -> bool:
    """Whether ``pack`` is a whole pack: its header and its trailing checksum."""
    return len(pack) >= 32 and pack[:4] == b"PACK" and hashlib.sha1(pack[:-20]).digest() == pack[-20:]


def valid_index(idx: bytes) -> bool:
    """Whether ``idx`` is a whole pack index, of version 2 (what vaultmem and
    git write) or 1 (git with ``pack.indexVersion=1``): header, a fan-out
    table that never decreases, its size for that count, its checksum."""
    if idx[:4] != b"\377tOc":
        return _valid_index_v1(idx)
    if len(idx) < 8 + 256 * 4 + 40 or idx[:8] != b"\377tOc\x00\x00\x00\x02":
        return False
    fanout = struct.unpack(">256I", idx[8 : 8 + 256 * 4])
    if any(a > b for a, b in itertools.pairwise(fanout)):
        return False
    count = fanout[-1]
    large = sum(1 for i in range(count) if idx[8 + 1024 + 24 * count + 4 * i] & 0x80) if count else 0
    if len(idx) != 8 + 1024 + 28 * count + 8 * large + 40:
        return False
    return hashlib.sha1(idx[:-20]).digest() == idx[-20:]


def _valid_index_v1(idx: bytes) -> bool:
    if len(idx) < 256 * 4 + 40:
        return False
    fanout = struct.unpack(">256I", idx[: 256 * 4])
    if any(a > b for a, b in itertools.pairwise(fanout)) or len(idx) != 256 * 4 + 24 * fanout[-1] + 40:
        return False
    return hashlib.sha1(idx[:-20]).digest() == idx[-20:]


def damaged_indexes(gitdir: Path) -> list[tuple[str, bool]]:
    """The pack indexes in ``gitdir``'s pack folder that stock git refuses, as
    (name, whether the index is whole but names another pack than the one
    beside it: the pack was cut short or changed)."""
    folder = gitdir / "objects" / "pack"
    try:
        names = sorted(name for name in os.listdir(folder) if name.startswith("pack-") and name.endswith(".idx"))
    except OSError:
        return []
    damaged: list[tuple[str, bool]] = []
    for name in names:
        try:
            idx = (folder / name).read_bytes()
            with open(folder / (name[: -len(".idx")] + ".pack"), "rb") as pack:
                pack.seek(-20, os.SEEK_END)
                pack_sum = pack.read(20)
        except OSError:
            continue  # retired meanwhile, or a pack gone: its objects are missing, not its index
        if not valid_index(idx):
            damaged.append((name, False))
        elif idx[-40:-20] != pack_sum:
            damaged.append((name, True))
    return damaged


def index_ids(idx: bytes) -> list[bytes]:
    """The object ids a valid pack index (version 1 or 2) lists."""
    if idx[:4] != b"\377tOc":
        count = struct.unpack(">I", idx[255 * 4 : 256 * 4])[0]
        return [idx[256 * 4 + 24 * i + 4 : 256 * 4 + 24 * i + 24] for i in range(count)]
    return [oid for oid, _, _ in read_index(idx)]


def index_of(pack: bytes) -> bytes:
    """The index of a pack vaultmem wrote, byte for byte as :func:`build_pack` made it."""
    entries = [(object_id(kind, data), zlib.crc32(pack[start:end]), start) for kind, start, end, data in _entries(pack)]
    return _build_idx(entries, pack[-20:])


# The entries of packs this process wrote lately, by name, at most 256 packs
# (least recently used dropped first): merging them needs no reads (a pack's
# name is its checksum, so a name always means these bytes).
_RECENT_LIMIT = 256
_RECENT_PACKS: LRU[str, list[tuple[bytes, int, bytes]]] = LRU(_RECENT_LIMIT)


def remember(pack: Pack) -> None:
    """Keep a pack's entries for a later merge."""
    _RECENT_PACKS.put(pack.name, pack.whole)


@dataclass(frozen=True)
class PackInfo:
    pack: Path
    count: int


def read_index(idx: bytes) -> list[tuple[bytes, int, int]]:
    """``(id, crc, offset)`` of each object a version 2 index lists."""
    if idx[:8] != b"\377tOc\x00\x00\x00\x02":
        raise ValueError("not a version 2 pack index")
    count = struct.unpack(">I", idx[8 + 255 * 4 : 8 + 256 * 4])[0]
    base = 8 + 256 * 4
    ids = [idx[base + 20 * i : base + 20 * i + 20] for i in range(count)]
    crc_at = base + 20 * count
    crcs = struct.unpack(f">{count}I", idx[crc_at : crc_at + 4 * count])
    off_at = crc_at + 4 * count
    small = struct.unpack(f">{count}I", idx[off_at : off_at + 4 * count])
    large_at = off_at + 4 * count
    offsets = [
        struct.unpack(">Q", idx[large_at + 8 * (o & 0x7FFFFFFF) : large_at + 8 * (o & 0x7FFFFFFF) + 8])[0]
        if o & 0x80000000
        else o
        for o in small
    ]
    return list(zip(ids, crcs, offsets, strict=True))


_IDX_V2 = b"\377tOc\x00\x00\x00\x02"  # a version 2 index's magic and version
_IDX_HEAD = 8 + 256 * 4  # ... and its fan-out table, whose last entry is the object count


def _name_of(pack: Path) -> str:
    return pack.stem.removeprefix("pack-")


def list_packs(objects_dir: Path) -> list[PackInfo]:
    """Packs that only vaultmem-style files belong to (no .keep, .bitmap, ...),
    with a version 2 index, and that no multi-pack-index of git's lists
    (none at all while one exists that cannot be read): the packs the upkeep
    may merge and retire (:mod:`vaultmem.git.midx`)."""
    pack_dir = objects_dir / "pack"
    try:
        names = os.listdir(pack_dir)
    except FileNotFoundError:
        return []
    listed = midx.listed(pack_dir)
    if listed is None:
        return []  # every pack may be listed
    out: list[PackInfo] = []
    files: dict[str, set[str]] = {}  # a pack's name -> its files (one pass: a folder may list thousands)
    for n in names:
        if n.startswith("pack-"):
            stem, dot, _ = n.partition(".")
            files.setdefault(stem, set())
            if dot:
                files[stem].add(n)
    for stem in sorted(files):
        if files[stem] != {stem + ".pack", stem + ".idx"} or stem in listed:
            continue
        pack = pack_dir / (stem + ".pack")
        known = _RECENT_PACKS.get(_name_of(pack))
        if known is not None:
            count = len(known)
        else:
            try:
                with open(pack_dir / (stem + ".idx"), "rb") as fh:
                    head = fh.read(_IDX_HEAD)
            except FileNotFoundError:
                continue  # retired or removed since the folder was listed
            if len(head) != _IDX_HEAD:
                continue  # an index cut short (after a power cut): not a pack to merge
            if head[:8] != _IDX_V2:
                continue  # a version 1 index (pack.indexVersion=1): git's own pack, left as it is
            count = struct.unpack(">I", head[-4:])[0]
        out.append(PackInfo(pack, count))
    return out


def geometric_rollup(packs: Sequence[PackInfo], factor: int = 2) -> list[PackInfo]:
    """The smallest packs to merge so every remaining pack is at least
    ``factor`` times the size of all smaller ones together."""
    ordered = sorted(packs, key=lambda p: p.count)
    split = 0
    total = 0
    for i, pack in enumerate(ordered):
        if i and pack.count < factor * total:
            split = i + 1
        total += pack.count
    return ordered[:split] if split >= 2 else []


def _whole_entries(info: PackInfo) -> list[tuple[bytes, int, bytes]] | None:
    """``(id, crc, raw entry)`` in pack order, or None when the pack holds a
    delta (git's own packs may): a delta's base offset is relative, so such a
    pack is left as it is rather than copied entry by entry."""
    known = _RECENT_PACKS.get(_name_of(info.pack))
    if known is not None:
        return known
    data = info.pack.read_bytes()
    by_offset = sorted(read_index(info.pack.with_suffix(".idx").read_bytes()), key=lambda e: e[2])
    ends = [e[2] for e in by_offset[1:]] + [len(data) - 20]
    out: list[tuple[bytes, int, bytes]] = []
    for (oid, crc, start), end in zip(by_offset, ends, strict=True):
        if (data[start] >> 4) & 7 not in (COMMIT, TREE, BLOB, 4):  # 4 = tag; 6, 7 = deltas
            return None
        out.append((oid, crc, data[start:end]))
    return out


def merge(packs: Sequence[PackInfo]) -> tuple[Pack, list[PackInfo]] | None:
    """One pack holding the entries of ``packs`` (copied unchanged, no
    recompression) and the packs it replaces; packs holding deltas are
    skipped, and None unless at least two packs can be merged.  Reads only:
    the caller installs the new pack and removes the old ones once it is durable."""
    merged: list[PackInfo] = []
    whole: list[tuple[bytes, int, bytes]] = []
    seen: set[bytes] = set()
    for info in packs:
        entries = _whole_entries(info)
        if entries is None:
            continue
        merged.append(info)
        for entry in entries:
            if entry[0] not in seen:
                seen.add(entry[0])
                whole.append(entry)
    if len(merged) < 2:
        return None
    return _assemble(whole), merged


def forget(packs: Sequence[PackInfo]) -> None:
    """Drop the entries :func:`remember` kept for ``packs`` (merged away)."""
    for info in packs:
        _RECENT_PACKS.pop(_name_of(info.pack))
