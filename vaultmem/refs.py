"""``refs/heads/main`` on disk: reading it, and moving it the way git does
without freeing a file each time.

Git moves a ref by writing ``<ref>.lock`` (created exclusively: git refuses
to move the ref while it exists) and renaming it over the ref.  The rename
frees the old ref file, and on ext4 freeing a file whose data was synced
costs about as much as all the other file operations of a write together.

So the files that hold ``main`` come from a ring of three in the state
folder, ``vaultmem/head-0`` to ``head-2``, each also linked as ``main`` in
turn.  To move ``main`` from ring file *k*, the writer rewrites ring file
*k + 1* in place (41 bytes), links it as ``main.lock`` (``link`` fails if
the lock exists, as git's exclusive create does), syncs, and renames the
lock over ``main``.  The rename frees nothing: the old file keeps its ring
name.

Rewriting a file in place is safe only if no durable state can still name it
as ``main``.  Ring file *k + 1* was ``main`` two moves ago, and every move is
preceded by a full sync, so once ``main`` is ring file *k* the disk already
records ``main`` as *k - 1* or *k*: never *k + 1*.  Whenever ``main`` is not a
ring file (a new vault, git moved it, the state folder was removed), or a ring
file is not as expected, the move creates a new lock file as git does and
restarts the ring with it as ``head-0``; only the move after that rewrites a
ring file, and by then that move's sync has made the foreign change durable.

``main`` itself is never written in place, so a reader always reads a whole
id.  The ring files are state-folder files like the rest: disposable.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

import pygit2

from . import durable

MAIN = "refs/heads/main"
RING = tuple(f"head-{k}" for k in range(3))
_NEW = "head-new"  # a ring file being put in place (cleared if a writer dies)
_HEX = frozenset(b"0123456789abcdef")
_BLANK = b"0" * 40 + b"\n"


def read_loose(path: str) -> bytes | None:
    """The id a loose ref file holds (20 bytes), or None when there is no
    such file or it holds anything else (a symbolic ref, damage): the caller
    then asks libgit2, which also knows ``packed-refs``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, 64)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) != 41 or data[40:] != b"\n" or not _HEX.issuperset(data[:40]):
        return None
    return bytes.fromhex(data[:40].decode("ascii"))


def lookup(repo: pygit2.Repository, gitdir: str, name: str) -> bytes | None:
    """The id ref ``name`` holds, or None if there is no such ref: its loose
    file read directly, and libgit2 asked only when the ref may be packed,
    symbolic or damaged (libgit2 then raises for damage, as always)."""
    path = os.path.join(gitdir, name)
    raw = read_loose(path)
    if raw is not None:
        return raw
    if not os.path.lexists(path) and not os.path.lexists(os.path.join(gitdir, "packed-refs")):
        return None
    ref = repo.references.get(name)
    if ref is None:
        return None
    target = ref.resolve().target
    return target.raw if isinstance(target, pygit2.Oid) else None


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _usable_spare(path: str) -> bool:
    """A ring file that may be rewritten in place: a plain 41-byte file linked nowhere else."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_size == len(_BLANK)


class MainRef:
    """Moves ``main`` for one vault; every method runs under the writer lock."""

    def __init__(self, gitdir: Path) -> None:
        self.path = os.path.join(gitdir, MAIN)
        self.lock_path = self.path + ".lock"
        state = os.path.join(gitdir, durable.STATE_DIR)
        self._ring_paths = tuple(os.path.join(state, name) for name in RING)
        self._new_path = os.path.join(state, _NEW)
        self._ring: tuple[tuple[int, int], ...] | None = None  # (st_dev, st_ino) of each ring file
        self._linkable = True  # False on a filesystem without hard links

    def read(self) -> bytes | None:
        return read_loose(self.path)

    def lock(self, target: bytes) -> None:
        """Write ``main.lock`` holding ``target`` (a 20-byte id); raises
        FileExistsError if the lock exists (someone else's, or a dead writer's)."""
        content = target.hex().encode("ascii") + b"\n"
        if self._linkable and self._lock_from_ring(content):
            return
        self._lock_new(content)
        if self._linkable:
            self._restart_ring()

    def lock_plain(self, target: bytes) -> None:
        """Write ``main.lock`` as git does, leaving the ring alone (the move
        after this one restarts it)."""
        self._lock_new(target.hex().encode("ascii") + b"\n")

    def unlock(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.lock_path)

    def commit(self) -> None:
        """Rename the lock over ``main``."""
        os.rename(self.lock_path, self.path)

    # -- the ring ------------------------------------------------------------

    def _load_ring(self) -> tuple[tuple[int, int], ...] | None:
        ids = []
        for path in self._ring_paths:
            try:
                st = os.lstat(path)
            except OSError:
                return None
            if not stat.S_ISREG(st.st_mode):
                return None
            ids.append((st.st_dev, st.st_ino))
        return tuple(ids)

    def _main_index(self) -> int | None:
        """Which ring file ``main`` is, checked against the disk (not just the
        remembered ids: a removed file's inode number can be reused)."""
        try:
            main = os.lstat(self.path)
        except OSError:
            return None
        here = (main.st_dev, main.st_ino)
        # The remembered ids first, then once more from the disk: another
        # process may have restarted the ring.
        for reload in (self._ring is None, True):
            if reload:
                self._ring = self._load_ring()
            if self._ring is None:
                return None
            if here in self._ring:
                k = self._ring.index(here)
                if _identity(self._ring_paths[k]) == here:
                    return k
        return None

    def _lock_from_ring(self, content: bytes) -> bool:
        k = self._main_index()
        if k is None or self._ring is None:
            return False
        spare = (k + 1) % len(RING)
        try:
            fd = os.open(self._ring_paths[spare], os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            self._ring = None
            return False
        try:
            st = os.fstat(fd)
            usable = (
                (st.st_dev, st.st_ino) == self._ring[spare]
                and stat.S_ISREG(st.st_mode)
                and st.st_nlink == 1  # neither main nor a leftover lock
                and st.st_size == len(content)
            )
            if not usable:
                self._ring = None
                return False
            if os.pwrite(fd, content, 0) != len(content):
                raise OSError(errno.EIO, "short write to the ref ring")
        finally:
            os.close(fd)
        try:
            os.link(self._ring_paths[spare], self.lock_path)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(self.lock_path), exist_ok=True)  # `git pack-refs` removed refs/heads
            os.link(self._ring_paths[spare], self.lock_path)
        except OSError as err:
            if err.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV):
                raise
            self._linkable = False
            return False
        return True

    def _lock_new(self, content: bytes) -> None:
        try:
            fd = os.open(self.lock_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(self.lock_path), exist_ok=True)
            fd = os.open(self.lock_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            if os.write(fd, content) != len(content):
                raise OSError(errno.EIO, "short write to the ref lock")
        except OSError:
            os.close(fd)
            self.unlock()
            raise
        os.close(fd)

    def _restart_ring(self) -> None:
        """Make the new lock file ``head-0`` and make sure ``head-1`` and
        ``head-2`` exist.  Best effort: without a ring, moves stay plain."""
        self._ring = None
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._new_path)
            os.link(self.lock_path, self._new_path)
            os.rename(self._new_path, self._ring_paths[0])
            for path in self._ring_paths[1:]:
                if not _usable_spare(path):
                    self._put_blank(path)
        except OSError as err:
            if err.errno in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV):
                self._linkable = False

    def _put_blank(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._new_path)
        fd = os.open(self._new_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, _BLANK)
        finally:
            os.close(fd)
        os.rename(self._new_path, path)
