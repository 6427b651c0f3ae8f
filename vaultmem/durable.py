"""Crash safety for the write path: the writer lock, the pending-head record and
the one filesystem sync each acknowledged mutation costs.

A mutation is made durable in this order (see docs/format.md):

1. its new objects are written as one pack (no sync);
2. the writer lock file records ``old head -> new head`` and the new object ids
   after its first byte (one small in-place write to a file already open);
3. one ``syncfs`` makes the objects and the record durable together;
4. ``refs/heads/main`` is moved to the new head (no sync: if it is lost, the
   pending record moves it again on the next open).

So after a crash stock git sees the state before or after the call (the objects
a ref points to are always already on disk), and vaultmem rolls an acknowledged
change forward from the record.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import threading
import weakref
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

STATE_DIR = "vaultmem"
_GIT_LOCKS = (
    "refs/heads/main.lock",
    "refs/heads/vaultmem-keyring.lock",
    "packed-refs.lock",
    "HEAD.lock",
    "config.lock",
)


def _load_syncfs() -> Callable[[int], int] | None:
    try:
        fn = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):  # pragma: no cover - non-Linux
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return cast(Callable[[int], int], fn)


_syncfs = _load_syncfs()


def sync_filesystem(gitdir: Path) -> None:
    """Flush every pending write on the vault's filesystem, in one call."""
    fd = os.open(gitdir, os.O_RDONLY)
    try:
        if _syncfs is None:  # pragma: no cover - non-Linux
            os.sync()
        elif _syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
    finally:
        os.close(fd)


class WriterLock:
    """Serialises writers across threads (a mutex) and processes (``flock``).

    The lock file's first byte says whether its last holder finished: a writer
    that finds ``1`` knows the previous one died mid-write and clears what it
    left behind before doing anything else.  The bytes after it hold the
    pending record of the last mutation (:class:`Pending`), written in place
    by the holder: one file for both, so a write dirties one page, not two.
    """

    def __init__(self, gitdir: Path) -> None:
        self.gitdir = gitdir
        self.path = gitdir / STATE_DIR / "lock"
        self._mutex = threading.Lock()
        self._fd = -1
        self._pid = 0
        self._finalizer: weakref.finalize[[int], WriterLock] | None = None
        self._legacy_cleared = False

    def _open(self) -> int:
        """The lock file, opened once per process (a forked child opens its own:
        ``flock`` belongs to the open file, which a child would share)."""
        if self._fd >= 0 and self._pid == os.getpid():
            return self._fd
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:  # a clone, or the disposable state folder was removed
            self.path.parent.mkdir(mode=0o700, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._fd, self._pid = fd, os.getpid()
        self._finalizer = weakref.finalize(self, os.close, fd)
        return fd

    def _still_the_lock_file(self, fd: int) -> bool:
        """A lock on a file someone removed or replaced excludes nobody."""
        try:
            here = os.stat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)

    def _drop(self) -> None:
        if self._finalizer is not None and self._pid == os.getpid():
            self._finalizer()
        elif self._finalizer is not None:
            self._finalizer.detach()  # the parent's descriptor: the parent closes it
        self._finalizer = None
        self._fd = -1

    def close(self) -> None:
        with self._mutex:
            self._drop()

    def write_pending(self, pending: Pending) -> None:
        """Record a ref move about to be made durable (the lock must be held).
        Written in place, never truncated: truncating (or renaming over) a
        file makes ext4 flush it at once, and the record carries its own
        checksum, so stale bytes after it are ignored."""
        os.pwrite(self._fd, pending.encode() + b"end\n", 1)
        if not self._legacy_cleared:  # the record of an earlier version: rolled forward at open
            with contextlib.suppress(OSError):
                _legacy_pending_path(self.gitdir).unlink()
            self._legacy_cleared = True

    def void_pending(self) -> None:
        """Make the pending record unreadable (a failed call must not come back)."""
        os.pwrite(self._fd, b"void\n", 1)

    @contextlib.contextmanager
    def hold(self) -> Iterator[bool]:
        """Hold the lock; yields True when the previous holder died mid-write
        (after clearing what it left behind)."""
        with self._mutex:
            fd = self._open()
            fcntl.flock(fd, fcntl.LOCK_EX)
            while not self._still_the_lock_file(fd):
                self._drop()
                fd = self._open()
                fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                dirty = os.pread(fd, 1, 0) == b"1"
                if dirty:
                    clear_leftovers(self.gitdir)
                os.pwrite(fd, b"1", 0)
                try:
                    yield dirty
                finally:
                    os.pwrite(fd, b"0", 0)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)


def clear_leftovers(gitdir: Path) -> None:
    """Remove what a killed writer can leave: git lock files, temp objects and
    a pack whose index was never written."""
    for name in _GIT_LOCKS:
        with contextlib.suppress(FileNotFoundError):
            (gitdir / name).unlink()
    with contextlib.suppress(FileNotFoundError):
        (gitdir / STATE_DIR / "head-new").unlink()  # a ref ring file being put in place (vaultmem.refs)
    objects = gitdir / "objects"
    for leftover in objects.glob("tmp_object_git2_*"):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()
    for leftover in (objects / "pack").glob("tmp_*"):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()
    for pack in (objects / "pack").glob("pack-*.pack"):
        if not pack.with_suffix(".idx").exists():  # written before its index; never visible to git
            with contextlib.suppress(FileNotFoundError):
                pack.unlink()


@dataclass(frozen=True)
class Pending:
    """A ref move that was made durable but may not have reached the ref yet."""

    ref: str
    old: str
    new: str
    objects: tuple[str, ...]

    def encode(self) -> bytes:
        body = "vaultmem-pending 1\nref {}\nold {}\nnew {}\n{}".format(
            self.ref, self.old, self.new, "".join(f"obj {o}\n" for o in self.objects)
        ).encode("ascii")
        return body + b"crc %08x\n" % zlib.crc32(body)

    @classmethod
    def decode(cls, data: bytes) -> Pending | None:
        body, _, tail = data.rpartition(b"crc ")
        try:
            if not body or tail.strip() != b"%08x" % zlib.crc32(body):
                return None
            lines = body.decode("ascii").splitlines()
            if lines[0] != "vaultmem-pending 1":
                return None
            fields = [line.split(" ", 1) for line in lines[1:]]
            ref, old, new = fields[0][1], fields[1][1], fields[2][1]
            objects = tuple(value for key, value in fields[3:] if key == "obj")
        except (UnicodeDecodeError, IndexError, ValueError):
            return None
        return cls(ref, old, new, objects)


def pending_path(gitdir: Path) -> Path:
    """The file holding the pending record: the writer lock file, after its first byte."""
    return gitdir / STATE_DIR / "lock"


def _legacy_pending_path(gitdir: Path) -> Path:
    return gitdir / STATE_DIR / "pending"  # where earlier versions kept the record


def _decode_record(data: bytes) -> Pending | None:
    record, sep, _ = data.partition(b"end\n")
    return Pending.decode(record) if sep else None


def read_pending(gitdir: Path) -> Pending | None:
    try:
        found = _decode_record(pending_path(gitdir).read_bytes()[1:])
    except FileNotFoundError:
        found = None
    if found is not None:
        return found
    try:  # a vault last written by an older vaultmem keeps its record in a file of its own
        return _decode_record(_legacy_pending_path(gitdir).read_bytes())
    except FileNotFoundError:
        return None
