"""The writer lock, the record of what its holder is about to take, and the
file-system sync used for checkpoints.

Writers serialise on ``vaultmem/lock`` (a mutex across threads, ``flock``
across processes).  The file's first byte says whether its last holder
finished; the bytes after it hold the holder's *intent*: the ref lock and the
pack it is about to create, written before it creates them.  A writer that
finds the previous holder died mid-write (first byte ``1``) removes exactly
those files, and only if they are still what the intent names (the ref lock
holding the intended id, the ``.keep`` linked to vaultmem's own marker):
never a lock or temporary file of another program.  See :mod:`vaultmem.commits`.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import signal
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import cast

from vaultmem.errors import StorageError

STATE_DIR = "vaultmem"


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


def _load_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):  # pragma: no cover - non-Linux
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return cast(Callable[[int, int, int, int], int], fn)


_sync_file_range = _load_sync_file_range()
_WRITE_AND_WAIT = 1 | 2 | 4  # SYNC_FILE_RANGE_WAIT_BEFORE | _WRITE | _WAIT_AFTER


def write_out(fd: int) -> None:
    """Write a file's data to the device and wait until the device has it,
    with no journal commit and no cache flush: on ext4 a later commit that
    names the file (a rename) then finds its data on disk and its blocks
    marked written (ext4 marks them so when the write completes, before it
    reports the write done).  Where the call is missing, ``fdatasync``."""
    if _sync_file_range is None:  # pragma: no cover - non-Linux
        os.fdatasync(fd)
    elif _sync_file_range(fd, 0, 0, _WRITE_AND_WAIT) != 0:
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EINVAL, errno.ESPIPE):  # pragma: no cover - not a file system that has it
            os.fdatasync(fd)
        else:
            raise OSError(err, os.strerror(err))


def write_out_path(path: str) -> None:
    """:func:`write_out` for a file named ``path``."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        write_out(fd)
    finally:
        os.close(fd)


def sync_dir(path: os.PathLike[str] | str) -> None:
    """Make a folder's entries (files created, renamed or removed in it) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def storage_advice(err: OSError) -> str:
    """What to do about a failed file operation, in one sentence."""
    if err.errno == errno.EROFS:
        return "Mount it with write access, then try again."
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return "Free space, then try again."
    if err.errno in (errno.EACCES, errno.EPERM):
        return "Fix the permissions, then try again."
    return "Free space or fix the permissions, then try again."


def storage_reason(err: OSError) -> str:
    """What a failed file operation means to a user, in a few words."""
    return {
        errno.ENOSPC: "the disk is full",
        errno.EDQUOT: "the disk quota is used up",
        errno.EROFS: "the vault is on a read-only file system",
        errno.EACCES: "a folder of the vault is not writable",
        errno.EPERM: "a folder of the vault is not writable",
        # A folder inside the vault (objects, refs, vaultmem) is a link to
        # another file system: vaultmem renames and links its new files from
        # one of them into another, and syncs the vault's file system.
        errno.EXDEV: (
            "the vault's folders are on more than one file system (a folder inside it is a link to another disk?)"
        ),
    }.get(err.errno or 0, f"the storage failed ({os.strerror(err.errno) if err.errno else err})")


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
        self.on_dirty: Callable[[], None] | None = None  # clears what a dead holder left

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

    def close(self, then: Callable[[], None] | None = None) -> None:
        """Release the lock file; ``then`` releases what writers use under
        the lock (the journal, the files made ahead), in the same hold of
        the mutex: a write another thread starts meanwhile waits, then opens
        them again, rather than using a descriptor closed under it."""
        with self._mutex:
            self._drop()
            if then is not None:
                then()

    def reset_after_fork(self) -> None:
        """In a forked child: a fresh mutex (another thread of the parent may
        have held this one), and the lock file is opened again on first use."""
        self._mutex = threading.Lock()

    def write_intent(self, intent: Intent) -> None:
        """Record what the holder is about to create (the lock must be held).
        Written in place, never truncated, and checksummed: stale bytes after
        it are ignored.  Not synced: it matters only while this boot's page
        cache does (a killed writer); after a power cut the journal decides."""
        os.pwrite(self._fd, intent.encode() + b"end\n", 1)

    def clear_intent(self) -> None:
        """The holder's write is whole (the lock must be held): its intent
        no longer names anything to finish or remove.  Without this, a later
        holder that dies before it records an intent of its own (while it
        builds its change, or in the upkeep) would leave this finished
        write's intent behind, and the next holder would make its move
        again, over an operator who has moved the ref back since."""
        os.pwrite(self._fd, b"\0", 1)

    def read_intent(self) -> Intent | None:
        """The intent of the last holder (the lock must be held)."""
        return _decode_intent(os.pread(self._fd, 512, 1))

    def _take(self) -> int:
        """Open and lock the lock file.  A vault whose lock cannot be opened
        for writing (a read-only mount, a file this user may not write) is a
        StorageError saying why, like any other write the disk refuses."""
        try:
            fd = self._open()
            fcntl.flock(fd, fcntl.LOCK_EX)
            while not self._still_the_lock_file(fd):
                self._drop()
                fd = self._open()
                fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as err:
            raise StorageError(f"Error: {storage_reason(err)}, so nothing was changed. {storage_advice(err)}") from err
        return fd

    def busy(self) -> bool:
        """Whether :meth:`hold` would wait now: another thread of this
        process holds the lock, or another process its file.  Nothing is
        held after it; a lock file that cannot be opened is left for the
        hold to report."""
        if not self._mutex.acquire(blocking=False):
            return True
        try:
            try:
                fd = self._open()
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            except OSError:
                return False
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        finally:
            self._mutex.release()

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Hold the lock.  When the previous holder died mid-write, ``on_dirty``
        clears what it left first; if that fails, the flag stays set for the next holder."""
        with self._mutex:
            fd = self._take()
            try:
                try:
                    if os.pread(fd, 1, 0) == b"1":
                        if self.on_dirty is not None:
                            self.on_dirty()
                    else:
                        os.pwrite(fd, b"1", 0)
                except OSError as err:  # before anything of this holder's: a refusal that changed nothing
                    raise StorageError(
                        f"Error: {storage_reason(err)}, so nothing was changed. {storage_advice(err)}"
                    ) from err
                try:
                    yield
                finally:
                    # Rewriting one byte in place can need free space (btrfs
                    # copies on write): on a full disk it fails after a write
                    # was made, which must not then read as refused.  The
                    # flag stays set, and the next holder clears after this
                    # one as after a writer that died: its write is whole
                    # and its intent cleared, so there is nothing to finish.
                    with contextlib.suppress(OSError):
                        os.pwrite(fd, b"0", 0)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)


def wait_for_writer(gitdir: Path, limit: float) -> None:
    """Wait until no writer holds the vault's writer lock (at most ``limit``
    seconds), for a reader that must not see a write between its steps.
    Takes the lock shared, on a descriptor opened for reading only, and lets
    it go at once: nothing is written, and a vault without a lock file (one
    never written, or read-only) is not waited for."""
    try:
        fd = os.open(gitdir / STATE_DIR / "lock", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        deadline = time.monotonic() + limit
        pause = 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
            except OSError:
                return
            else:
                fcntl.flock(fd, fcntl.LOCK_UN)
                return
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Intent:
    """What a writer is about to create: ``<ref>.lock`` holding ``new``, and
    ``pack-<pack>.keep`` (with the pack) in ``objects/pack``."""

    ref: str
    new: str
    pack: str

    def encode(self) -> bytes:
        body = f"vaultmem-intent 1\nref {self.ref}\nnew {self.new}\npack {self.pack}\n".encode("ascii")
        return body + b"crc %08x\n" % zlib.crc32(body)


def _decode_intent(data: bytes) -> Intent | None:
    record, sep, _ = data.partition(b"end\n")
    body, _, tail = record.rpartition(b"crc ")
    if not sep or not body or tail.strip() != b"%08x" % zlib.crc32(body):
        return None
    try:
        lines = body.decode("ascii").split("\n")
        if lines[0] != "vaultmem-intent 1":
            return None
        fields = dict(line.split(" ", 1) for line in lines[1:4])
        return Intent(fields["ref"], fields["new"], fields["pack"])
    except (UnicodeDecodeError, KeyError, ValueError):
        return None


@dataclass(frozen=True)
class LegacyPending:
    """The pending record an earlier vaultmem kept (``vaultmem/pending``, or
    after the lock file's first byte): read once, to finish a move a killed
    writer of that version made durable."""

    ref: str
    old: str
    new: str


def read_legacy_pending(gitdir: Path) -> LegacyPending | None:
    for path, skip in ((gitdir / STATE_DIR / "lock", 1), (gitdir / STATE_DIR / "pending", 0)):
        try:
            data = path.read_bytes()[skip:]
        except OSError:
            continue
        record, sep, _ = data.partition(b"end\n")
        body, _, tail = (record if sep else data).rpartition(b"crc ")
        if not body.startswith(b"vaultmem-pending 1\n") or tail.strip()[:8] != b"%08x" % zlib.crc32(body):
            continue
        try:
            fields = dict(line.split(" ", 1) for line in body.decode("ascii").split("\n")[1:4])
            return LegacyPending(fields["ref"], fields["old"], fields["new"])
        except (UnicodeDecodeError, KeyError, ValueError):
            continue
    return None


def remove_legacy_pending(gitdir: Path) -> None:
    with contextlib.suppress(OSError):
        (gitdir / STATE_DIR / "pending").unlink()


_HELD_SIGNALS = (int(signal.SIGINT), int(signal.SIGTERM))
# The C functions behind signal.getsignal and signal.signal: those turn each
# handler they return into an enum member when they can, and a Python
# function fails that conversion with an exception every time (microseconds
# a call, and a write holds signals once).
_raw_signal = getattr(signal, "_signal", signal)
_held_depth = 0  # nested holds in the main thread (only it runs signal handlers)
_held_handlers: dict[int, Callable[[int, FrameType | None], object]] = {}  # what the outermost hold replaced
_caught: list[tuple[int, FrameType | None]] = []


def _catch(signum: int, frame: FrameType | None) -> None:
    _caught.append((signum, frame))


class HeldSignals:
    """Hold Ctrl-C (SIGINT) and SIGTERM while a ref moves: a Python handler
    for them (KeyboardInterrupt, or the application's own) runs only once
    the move is whole, made or not made, or at a point of the move where
    nothing is half done (:func:`deliver_held`).  A handler run between two
    other steps (the ref lock made and not yet renamed, the ref renamed and
    not yet recorded as moved) would leave a lock no writer removes, or
    take back the pack of a move that was made.  A signal whose action is
    not a Python function (SIGTERM's default: the process ends) is not
    held: that is a kill, which the journal repairs.  Only the main thread
    runs Python's signal handlers, so a hold in another thread holds
    nothing, and needs nothing."""

    __slots__ = ("_holding",)

    def __init__(self) -> None:
        self._holding = False

    def __enter__(self) -> None:
        global _held_depth
        if threading.current_thread() is not threading.main_thread():
            return
        self._holding = True
        _held_depth += 1
        if _held_depth > 1:
            return
        for signum in _HELD_SIGNALS:
            handler = _raw_signal.getsignal(signum)
            if callable(handler):
                _held_handlers[signum] = handler
                _raw_signal.signal(signum, _catch)

    def __exit__(self, *exc: object) -> None:
        global _held_depth
        if not self._holding:
            return
        self._holding = False
        _held_depth -= 1
        if _held_depth:
            return
        handlers = dict(_held_handlers)
        _held_handlers.clear()
        for signum, handler in handlers.items():
            _raw_signal.signal(signum, handler)
        _run_caught(handlers)


def deliver_held() -> None:
    """Run now the handlers of the signals held so far: called where the
    write has nothing half done (waiting for another program's lock), so a
    Ctrl-C there is not held for the whole wait."""
    if _caught and _held_depth and threading.current_thread() is threading.main_thread():
        _run_caught(_held_handlers)


def _run_caught(handlers: dict[int, Callable[[int, FrameType | None], object]]) -> None:
    caught = _caught[:]
    _caught.clear()
    for signum, frame in caught:
        handler = handlers.get(signum)
        if handler is not None:
            handler(signum, frame)  # Python's own SIGINT handler raises KeyboardInterrupt
