"""Files made ahead: new, unnamed files a background thread creates, so that
a write allocates no inode inside the call.

Creating a file is the dearest step of a write on some file systems: on
ext4 without a journal the kernel skips every recently deleted inode while
it looks for a free one, and a create measured 55-650 µs on this project's
machines against 4-12 µs on a fresh file system.  A write makes three files
(its pack, its index, its ref lock), so once a process writes a second time,
a thread of its vault instance creates them between the calls with
``O_TMPFILE``: new inodes in the vault's file system with no name at all,
read-only, each kept open for writing.  A write takes one, writes its data,
and links it under its final name (``linkat`` through ``/proc/self/fd``),
which fails if the name exists, exactly as git's exclusive create does.

No file is written twice: a file made ahead is new, has no name until the
write that filled it links it, and is linked once.  Nothing of it can be seen
before, or survive a crash: an unnamed file goes when its descriptor closes,
and after a power cut ``e2fsck`` clears it.  Where ``O_TMPFILE`` or
``/proc`` is missing, writes create their files themselves, as before.

The pool starts empty and grows with demand (a process that writes once makes
none), up to ``MOST`` files an instance and ``BUDGET`` a process (each an
open descriptor); ``close`` closes what is left.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import threading
import weakref
from pathlib import Path

MOST = 48  # files an instance keeps ready at most
FIRST = 12  # files kept ready once a second write finds none
BUDGET = 192  # descriptors all instances of a process keep at most
IDLE = 2.0  # seconds the thread waits for more demand before it ends

_TMPFILE: int | None = getattr(os, "O_TMPFILE", None)
_held = 0  # descriptors this process's pools hold
_held_lock = threading.RLock()  # reentrant: a finalizer the GC runs inside it takes it again


class FreshFiles:
    """The files made ahead for one vault instance, in ``folder``'s file system."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._pool: collections.deque[int] = collections.deque()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._target = 0
        self._writes = 0
        self._grown_at = 0
        self._closed = False
        self._usable = _TMPFILE is not None and os.path.isdir("/proc/self/fd")
        self._probed = False
        self._pid = os.getpid()
        self._finalizer = weakref.finalize(self, _discard, self._pool)

    def begin(self) -> None:
        """A write starts (files are made ahead from the second one on)."""
        self._writes += 1

    def take(self) -> int | None:
        """A descriptor of a new, empty, unnamed file this instance made, open
        for writing; None when none is ready (the caller creates its file)."""
        if self._pid != os.getpid():
            self._after_fork()
        try:
            fd = self._pool.popleft()
        except IndexError:
            self._missed()
            return None
        _release(1)
        if len(self._pool) < self._target // 2:
            self._start()
        return fd

    def link(self, fd: int, path: str) -> None:
        """Give the file ``fd`` (from :meth:`take`) its first name, ``path``;
        FileExistsError if the name exists.  The caller closes ``fd``."""
        os.link(f"/proc/self/fd/{fd}", path, src_dir_fd=_root(), follow_symlinks=True)

    def close(self) -> None:
        """End the thread and close the files not used."""
        with self._wake:
            self._closed = True
            thread = self._thread
            self._wake.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        if self._pid == os.getpid():
            _discard(self._pool)

    # -- the thread --------------------------------------------------------------

    def _missed(self) -> None:
        """A write found no file ready: from the second write on, start
        making them; each later write that finds none doubles how many are
        kept ready."""
        if not self._usable or self._writes < 2 or self._closed or self._grown_at == self._writes:
            return
        self._grown_at = self._writes
        self._target = min(MOST, max(FIRST, self._target * 2))
        self._start()

    def _start(self) -> None:
        with self._wake:
            if self._closed:
                return
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="vaultmem-fresh", daemon=True)
                self._thread.start()
            self._wake.notify()

    def _loop(self) -> None:
        if not self._probed:
            self._probed = True
            self._usable = self._probe()
        if not self._usable:
            with self._wake:
                self._end_thread()
            return
        while True:
            with self._wake:
                while not self._closed and len(self._pool) >= self._target:
                    if not self._wake.wait(IDLE):
                        self._end_thread()
                        return
                if self._closed:
                    return
                wanted = self._target - len(self._pool)
            for _ in range(wanted):
                fd = self._make()
                if fd is None:  # a full disk, a descriptor limit: the writes create their own
                    with self._wake:
                        self._end_thread()
                    return
                with self._wake:
                    if self._closed:
                        _discard(collections.deque([fd]))
                        return
                    self._pool.append(fd)

    def _end_thread(self) -> None:
        if self._thread is threading.current_thread():
            self._thread = None

    def _probe(self) -> bool:
        """Whether this file system and this process can make a file ahead and
        link it (once an instance, with a name of its own that goes at once)."""
        fd = self._make()
        if fd is None:
            return False
        probe = os.path.join(self.folder, f"fresh-probe-{os.getpid()}-{threading.get_ident()}")
        try:
            self.link(fd, probe)
            os.unlink(probe)
            return True
        except OSError:
            return False
        finally:
            os.close(fd)
            _release(1)

    def _make(self) -> int | None:
        if _TMPFILE is None or not _reserve():
            return None
        try:
            return os.open(self.folder, _TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o444)
        except OSError as err:
            _release(1)
            if err.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                self._usable = False  # no O_TMPFILE on this file system
            return None

    def _after_fork(self) -> None:
        """A forked child shares the parent's descriptors: it closes its
        copies (the files stay the parent's) and makes its own."""
        global _held
        while self._pool:
            with contextlib.suppress(OSError, IndexError):
                os.close(self._pool.popleft())
        _held = 0
        self._pid = os.getpid()
        self._wake = threading.Condition()
        self._thread = None
        self._target = 0
        self._writes = 0
        self._grown_at = 0


def _reserve() -> bool:
    global _held
    with _held_lock:
        if _held >= BUDGET:
            return False
        _held += 1
        return True


def _release(count: int) -> None:
    global _held
    with _held_lock:
        _held = max(0, _held - count)


def _discard(pool: collections.deque[int]) -> None:
    closed = 0
    while pool:
        try:
            fd = pool.popleft()
        except IndexError:
            break
        with contextlib.suppress(OSError):
            os.close(fd)
        closed += 1
    _release(closed)


_root_fd: int | None = None


def _root() -> int:
    """A directory descriptor, so that ``os.link`` calls ``linkat`` (which
    can follow ``/proc/self/fd``; the source path is absolute, so which
    directory does not matter).  A forked child keeps it."""
    global _root_fd
    if _root_fd is None:
        _root_fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    return _root_fd
