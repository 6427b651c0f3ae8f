"""The write-ahead journal: what makes an acknowledged write durable with one
``fdatasync``.

Every ref move vaultmem makes is first appended here as one record holding the
ref, its old and new ids and the whole pack of new objects, and the journal is
synced; only then does the ref move.  Git's own files (the pack, its index, the
ref) are written without syncs of their own: while the machine keeps running
they are exactly what git sees, and after a power cut the records that no
checkpoint has covered yet rebuild whatever of them did not reach the disk
(:mod:`vaultmem.commits`).

The file (``vaultmem/journal``) is allocated once, filled with zeros and synced,
so an append rewrites blocks that already exist: the sync writes the record's
blocks and flushes the disk cache, with no file system metadata to commit.

Layout: two header copies (at 0 and 2048; the valid one with the higher count
wins, so a torn header write loses nothing), then records from ``HEADER``::

    b"VMJR" | generation u64 | seq u64 | kind u8 | length u32 | payload | crc32

A record is read only if its crc holds, its generation is the header's and its
sequence number follows the one before it, so stale bytes from an earlier pass
over the file end the scan.  The header names the offset and sequence number
of the first record not yet covered by a checkpoint: a reader scans from there.
When the file is full, a checkpoint covers everything and the next pass starts
at ``HEADER`` with a new generation (written and synced before its first record).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import struct
import weakref
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from vaultmem.git import durable

NAME = "journal"
SIZE = 8 << 20
HEADER = 4096
_COPY = 2048
_MAGIC = b"vaultmem-journal 1\n"
_HEAD = struct.Struct(">QQQQQ")  # count, generation, scan offset, next seq, checkpointed seq
_REC = struct.Struct(">4sQQBI")
_REC_MAGIC = b"VMJR"

COMMIT, VOID = 1, 3
_ZERO = b"\0" * 20


@dataclass(frozen=True)
class Move:
    """One ref move as the journal records it: what a write acknowledged."""

    seq: int
    ref: str
    old: bytes  # 20 zero bytes: the ref did not exist
    new: bytes
    epoch: bytes  # the machine and mount it was written on (:func:`epoch`)
    pack: bytes  # the whole pack of the move's new objects (empty: synced in place)
    offset: int = 0

    def encode(self) -> bytes:
        ref = self.ref.encode("ascii")
        return b"".join(
            [
                struct.pack(">H", len(ref)),
                ref,
                self.old,
                self.new,
                struct.pack(">H", len(self.epoch)),
                self.epoch,
                self.pack,
            ]
        )

    @classmethod
    def decode(cls, seq: int, payload: bytes, offset: int) -> Move:
        (n,) = struct.unpack_from(">H", payload, 0)
        ref = payload[2 : 2 + n].decode("ascii")
        at = 2 + n
        old, new = payload[at : at + 20], payload[at + 20 : at + 40]
        (m,) = struct.unpack_from(">H", payload, at + 40)
        epoch = payload[at + 42 : at + 42 + m]
        return cls(seq, ref, old, new, epoch, payload[at + 42 + m :], offset)


@dataclass
class _Header:
    count: int
    generation: int
    scan: int  # offset of the first record not covered by a checkpoint
    next_seq: int  # its sequence number
    checkpointed: int  # the last sequence number covered

    def encode(self) -> bytes:
        body = _MAGIC + _HEAD.pack(self.count, self.generation, self.scan, self.next_seq, self.checkpointed)
        return body + struct.pack(">I", zlib.crc32(body))

    @classmethod
    def decode(cls, data: bytes) -> _Header | None:
        size = len(_MAGIC) + _HEAD.size
        body, crc = data[:size], data[size : size + 4]
        if len(crc) != 4 or not body.startswith(_MAGIC) or struct.unpack(">I", crc)[0] != zlib.crc32(body):
            return None
        return cls(*_HEAD.unpack(body[len(_MAGIC) :]))


def epoch(gitdir: Path) -> bytes:
    """What changes when the machine restarts or the file system is mounted
    again (a power cut, a disk image opened elsewhere): the boot id, the
    device and the mount's id.  Records written in the current epoch need no
    repair: the page cache git reads is the one they were written through."""
    parts = []
    try:
        parts.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
    except OSError:
        return b"unknown"
    st = os.stat(gitdir)
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            mounts = [line.split() for line in fh]
    except OSError:
        return b"unknown"
    mount = _mount_of(os.path.realpath(gitdir), f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}", mounts)
    if mount is None:
        return b"unknown"
    mount_id, dev, source = mount
    parts.append(dev + (_disk_sequence(dev) or _source_sequence(source)))
    parts.append(mount_id)
    return "/".join(parts).encode("ascii", "replace")[:200]


def _mount_of(real: str, dev: str, mounts: list[list[str]]) -> tuple[str, str, str] | None:
    """``(mount id, device, source)`` of the mount holding the folder
    ``real``: the one with the longest mount point above it, among the mounts
    of its device.  A file system whose files report another device than its
    mount (btrfs: each subvolume has a device number of its own) has no such
    mount; the mount with the longest mount point above the folder is taken
    then.  None if nothing is mounted above it."""
    best: tuple[str, str, str] | None = None
    for own_device in (True, False):
        longest = ""
        for fields in mounts:
            if len(fields) < 5 or (own_device and fields[2] != dev):
                continue
            point = _unescape(fields[4])
            if real.startswith(point.rstrip("/") + "/") and len(point) >= len(longest):
                longest = point
                rest = fields[fields.index("-", 6) + 1 :] if "-" in fields[6:] else []
                best = (fields[0], fields[2], rest[1] if len(rest) > 1 else "")
        if best is not None:
            return best
    return None


def _unescape(field: str) -> str:
    """A field of /proc/self/mountinfo as the path it names: the kernel
    writes a space, a tab, a newline and a backslash as ``\\ooo``."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


def _source_sequence(source: str) -> str:
    """``@N`` of the block device a mount names as its source (``/dev/loop3``),
    for a mount whose own device number is no disk's (btrfs's); "" otherwise."""
    source = _unescape(source)
    if not source.startswith("/dev/"):
        return ""
    try:
        st = os.stat(source)
    except OSError:
        return ""
    if not stat.S_ISBLK(st.st_mode):
        return ""
    return _disk_sequence(f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}")


def _disk_sequence(dev: str) -> str:
    """``@N``: the sequence number Linux gave the disk holding device
    ``dev`` when it appeared (``diskseq``, Linux 5.15), never given twice in
    one boot; "" where there is none (tmpfs, older kernels).  Without it, a
    disk image attached on the device number a live disk had a moment ago,
    and mounted with the mount id it had (both are given again), would read
    as the live disk's epoch and never be repaired."""
    for path in (f"/sys/dev/block/{dev}/diskseq", f"/sys/dev/block/{dev}/../diskseq"):  # a disk, a partition's disk
        try:
            with open(path, encoding="ascii") as fh:
                number = fh.read().strip()
        except (OSError, UnicodeDecodeError):
            continue
        return f"@{number}" if number.isdigit() else ""
    return ""


def same_epoch(recorded: bytes, current: bytes) -> bool:
    """Whether a record written in epoch ``recorded`` was written through the
    page cache of the epoch ``current``: the same epoch, or the same boot
    and device through a mount of it that is still mounted here (a bind
    mount, or the same folder reached by another path), so no power cut or
    second mount came between.  A mount that is gone means the file system
    was mounted again: that record may need its repair."""
    if recorded == current:
        return True
    if current == b"unknown" or recorded == b"unknown":
        return False
    boot, dev, mount_id = [*recorded.decode("ascii", "replace").split("/"), "", "", ""][:3]
    here = current.decode("ascii", "replace").split("/")
    if len(here) != 3 or here[0] != boot or not mount_id:
        return False
    dev, _, sequence = dev.partition("@")
    here_dev, _, here_sequence = here[1].partition("@")
    if here_dev != dev or (sequence and here_sequence and sequence != here_sequence):
        return False  # another disk, or the disk attached again (a record without a sequence: an earlier vaultmem's)
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            return any(fields[:1] == [mount_id] and fields[2:3] == [dev] for fields in (line.split() for line in fh))
    except OSError:
        return False


def datasync(fd: int) -> None:
    """The one sync of an acknowledged write (a seam for tests of a failing disk)."""
    os.fdatasync(fd)


class DamagedJournal(OSError):
    """Neither copy of the journal's header can be read (the disk returned
    other bytes): its records cannot be read, so no write may be made."""


DAMAGED_JOURNAL = (
    "vaultmem's journal (vaultmem/journal in the vault) is damaged: neither copy of its header can be read, "
    "so writes are refused. If the vault's versions are all there (`vaultmem log`), move vaultmem/journal out "
    "of the vault and the next write starts a new one; otherwise restore the vault from a clone"
)


def header_damaged(gitdir: Path) -> bool:
    """Whether ``gitdir``'s journal exists and has no readable header (reads only)."""
    try:
        fd = os.open(gitdir / "vaultmem" / NAME, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        block = os.pread(fd, HEADER, 0)
    except OSError:
        return True
    finally:
        os.close(fd)
    return _Header.decode(block[:_COPY]) is None and _Header.decode(block[_COPY:]) is None


class JournalFullError(Exception):
    """A record that does not fit: after a checkpoint that starts a new pass
    (``ever``), or never (the caller syncs in place instead)."""

    def __init__(self, ever: bool) -> None:
        super().__init__("the journal has no room for this record" if ever else "the record exceeds the journal")
        self.ever = ever


class Journal:
    """The journal of one vault, used under the writer lock (by one thread)."""

    def __init__(self, gitdir: Path) -> None:
        self.gitdir = gitdir
        self.path = gitdir / "vaultmem" / NAME
        self._fd = -1
        self._pid = 0
        self._header: _Header | None = None
        self._end = 0  # offset after the last record read or written
        self._seq = 0  # sequence number the next record gets
        self._finalizer: weakref.finalize[[int], Journal] | None = None

    # -- opening -------------------------------------------------------------

    def _open(self, create: bool) -> int:
        if self._fd >= 0 and self._pid == os.getpid():
            return self._fd
        if self._finalizer is not None:  # a forked child: close its copy of the parent's descriptor
            self._finalizer()
            self._finalizer = None
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            if not create:
                return -1
            fd = self._create()
        self._fd, self._pid, self._header = fd, os.getpid(), None
        self._finalizer = weakref.finalize(self, os.close, fd)
        return fd

    def _create(self) -> int:
        """A new, zero-filled, synced journal, put in place by rename."""
        tmp = self.path.with_name(f"{NAME}.new-{os.getpid()}")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            header = _Header(1, 1, HEADER, 1, 0).encode()
            block = bytearray(HEADER)
            block[: len(header)] = header
            block[_COPY : _COPY + len(header)] = header
            os.pwrite(fd, bytes(block), 0)
            zeros = b"\0" * (1 << 20)
            for offset in range(HEADER, SIZE, len(zeros)):
                if os.pwrite(fd, zeros[: SIZE - offset], offset) <= 0:
                    raise OSError(errno.ENOSPC, "short write to the journal")
            os.fsync(fd)
            os.rename(tmp, self.path)
            durable.sync_dir(self.path.parent)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return fd

    def close(self) -> None:
        if self._finalizer is not None:
            if self._pid == os.getpid():
                self._finalizer()
            else:
                self._finalizer.detach()  # the parent's descriptor: the parent closes it
        self._finalizer = None
        self._fd = -1
        self._header = None

    # -- reading -------------------------------------------------------------

    def _read_header(self, fd: int) -> _Header:
        block = os.pread(fd, HEADER, 0)
        found = [h for h in (_Header.decode(block[:_COPY]), _Header.decode(block[_COPY:])) if h is not None]
        if not found:
            raise DamagedJournal(errno.EIO, f"the journal {self.path} has no readable header")
        return max(found, key=lambda h: h.count)

    def _records(self, fd: int, header: _Header) -> Iterator[tuple[int, int, bytes, int]]:
        """``(seq, kind, payload, offset)`` from the header's scan offset on."""
        offset, seq = header.scan, header.next_seq
        while offset + _REC.size + 4 <= SIZE:
            head = os.pread(fd, _REC.size, offset)
            magic, generation, got, kind, length = _REC.unpack(head)
            if magic != _REC_MAGIC or generation != header.generation or got != seq:
                break
            end = offset + _REC.size + length + 4
            if end > SIZE:
                break
            rest = os.pread(fd, length + 4, offset + _REC.size)
            payload, crc = rest[:length], rest[length:]
            if struct.unpack(">I", crc)[0] != zlib.crc32(head + payload):
                break
            yield seq, kind, payload, offset
            offset, seq = end, seq + 1

    def _end_of(self, fd: int, header: _Header) -> tuple[int, int]:
        """The offset after the last record read from ``header`` on, and the
        sequence number the next record gets."""
        offset, seq = header.scan, header.next_seq
        for got, _, payload, at in self._records(fd, header):
            offset, seq = at + _REC.size + len(payload) + 4, got + 1
        return offset, seq

    def pending(self) -> list[Move]:
        """The moves no checkpoint covers yet, oldest first, without the ones
        a later record voided.  Reads only (through a read-only descriptor of
        its own): opening a vault never writes, and works on a read-only disk."""
        if self._fd >= 0 and self._pid == os.getpid():
            return self._pending(self._fd)
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return []
        try:
            return self._pending(fd)
        finally:
            os.close(fd)

    def latest(self, ref: str) -> Move | None:
        """The newest move of ``ref`` this pass of the journal still holds,
        covered by a checkpoint or not (for a ref a power cut garbled)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            header = self._read_header(fd)
            first = _Header(header.count, header.generation, HEADER, self._first_seq(fd, header), 0)
            moves = self._pending_from(fd, first)
        finally:
            os.close(fd)
        return next((m for m in reversed(moves) if m.ref == ref), None)

    def _first_seq(self, fd: int, header: _Header) -> int:
        """The sequence number of this pass's first record (read from the record)."""
        magic, generation, seq, _, _ = _REC.unpack(os.pread(fd, _REC.size, HEADER))
        return seq if magic == _REC_MAGIC and generation == header.generation else header.next_seq

    def _pending(self, fd: int) -> list[Move]:
        header = self._read_header(fd)
        moves = self._pending_from(fd, header)
        if fd == self._fd:
            self._header = header
        return moves

    def _pending_from(self, fd: int, header: _Header) -> list[Move]:
        moves: list[Move] = []
        for seq, kind, payload, offset in self._records(fd, header):
            if kind == COMMIT:
                moves.append(Move.decode(seq, payload, offset))
            elif kind == VOID:
                (voided,) = struct.unpack(">Q", payload)
                moves = [m for m in moves if m.seq != voided]
        return moves

    # -- writing -------------------------------------------------------------

    def append(self, move: Move, between: Callable[[], None] | None = None) -> Move:
        """Append a move and sync it: when this returns, the move is durable.
        Raises JournalFullError if the record does not fit now (its ``ever``
        says whether it would fit a journal that starts a new pass).
        ``between`` runs after the write and before the sync."""
        payload = move.encode()
        if HEADER + _REC.size + len(payload) + 4 > SIZE:
            raise JournalFullError(ever=False)
        fd = self._open(create=True)
        self._find_end(fd)
        if self._end + _REC.size + len(payload) + 4 > SIZE:
            raise JournalFullError(ever=True)  # the caller checkpoints with a new pass, then appends again
        seq = self._seq
        written = self._write(fd, COMMIT, seq, payload, between)
        return Move(seq, move.ref, move.old, move.new, move.epoch, move.pack, written)

    def void(self, move: Move) -> None:
        """Cancel a move whose ref never moved (the call failed): one more
        record, synced, so the move is never repaired into place."""
        fd = self._open(create=True)
        self._find_end(fd)
        if self._end + _REC.size + 8 + 4 > SIZE:
            # No room for the void record: wipe the record itself.
            os.pwrite(fd, b"\0" * _REC.size, move.offset)
            datasync(fd)
            return
        self._write(fd, VOID, self._seq, struct.pack(">Q", move.seq))

    def _write(self, fd: int, kind: int, seq: int, payload: bytes, between: Callable[[], None] | None = None) -> int:
        assert self._header is not None
        head = _REC.pack(_REC_MAGIC, self._header.generation, seq, kind, len(payload))
        record = head + payload + struct.pack(">I", zlib.crc32(head + payload))
        offset = self._end
        try:
            if os.pwrite(fd, record, offset) != len(record):
                raise OSError(errno.EIO, "short write to the journal")
            if between is not None:
                between()
            datasync(fd)
        except BaseException:
            # The record may sit whole in the page cache: wipe it, so that it
            # can never be read as a move that happened.
            with contextlib.suppress(OSError):
                os.pwrite(fd, b"\0" * _REC.size, offset)
                datasync(fd)
            raise
        self._end, self._seq = offset + len(record), seq + 1
        return offset

    def _find_end(self, fd: int) -> None:
        """Where the next record goes: after the last one this process wrote,
        unless another process appended since (checked by reading there)."""
        header = self._read_header(fd)
        if self._header is None or header != self._header or self._end < header.scan:
            self._header = header
            self._end, self._seq = self._end_of(fd, header)
            return
        # Same header: records are only ever appended, so continue from where we were.
        self._end, self._seq = self._end_of(fd, _Header(0, header.generation, self._end, self._seq, 0))

    def last_seq(self) -> int:
        """The sequence number of the last record (0: none)."""
        fd = self._open(create=True)
        self._find_end(fd)
        return self._seq - 1

    def checkpoint(self, through: int, restart: bool = False) -> None:
        """Record that every record up to ``through`` is covered: git's own
        files for them are durable (the caller synced them).  With ``restart``
        (everything is covered), the next record starts a new pass at the top;
        that header is synced before any record of the pass is written."""
        fd = self._open(create=True)
        self._find_end(fd)
        header = self._read_header(fd)
        if restart:
            if through != self._seq - 1:
                raise ValueError("a journal restarts only when every record is covered")
            new = _Header(header.count + 1, header.generation + 1, HEADER, self._seq, through)
        else:
            offset, seq = self._end, self._seq  # every record covered, unless one after ``through`` is found
            for got, _, _, at in self._records(fd, header):
                if got > through:
                    offset, seq = at, got
                    break
            new = _Header(header.count + 1, header.generation, offset, seq, max(through, header.checkpointed))
        data = new.encode()
        os.pwrite(fd, data, _COPY if new.count % 2 else 0)
        if restart:
            datasync(fd)
        self._header = new
        if restart:
            self._end, self._seq = HEADER, new.next_seq  # the next pass starts at the top
        else:
            self._find_end(fd)

    def wipe(self) -> None:
        """Overwrite every record with zeros and sync (after a checkpoint with
        ``restart``: every record is covered and the next pass starts at the top)."""
        fd = self._open(create=True)
        self._find_end(fd)
        if self._end != HEADER:
            raise ValueError("the journal is wiped only right after a restart")
        zeros = b"\0" * (1 << 20)
        for offset in range(HEADER, SIZE, len(zeros)):
            if os.pwrite(fd, zeros[: SIZE - offset], offset) <= 0:
                raise OSError(errno.ENOSPC, "short write to the journal")
        datasync(fd)

    def checkpointed(self) -> int:
        fd = self._open(create=True)
        return self._read_header(fd).checkpointed
