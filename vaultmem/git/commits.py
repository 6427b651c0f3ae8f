"""The one commit path: every ref vaultmem moves (``main``, the policy
branch, the keyring branch) moves here, following git's own protocols.

A write, under vaultmem's writer lock (the step names are what ``on_step``
reports; docs/format.md, "The one commit path"):

1. ``locked``: the commit is built and sealed on a fresh read of the ref; the
   writer lock records the intent (the ref and the pack about to be written).
2. ``kept``: ``pack-<name>.keep`` protects the new pack from ``git repack``
   and ``git gc`` until a ref reaches it, as git's receive-pack does.  It is
   a hard link to ``vaultmem/keep``, which is how a later writer knows it
   is vaultmem's.
3. ``packed`` / ``indexed``: the pack and its index are written under
   temporary names in vaultmem's state folder (where ``git prune`` does not
   look) and renamed into ``objects/pack``, the index last.
4. ``journaled`` / ``durable``: the move and the whole pack are appended to
   the journal, which is synced (:mod:`vaultmem.journal`): from here on the
   write survives a power cut.
5. ``ref-locked``: ``<ref>.lock`` is created exclusively, as git does, but
   without write permission bits (which is how a later writer knows it is
   vaultmem's); a lock held by another program (a git command) is waited for,
   up to ``LOCK_WAIT`` seconds, and never removed.  The ref is read again
   under it: if someone else moved it, the record is voided and the caller
   builds the change again.
6. ``moved``: the ref lock is renamed over the ref; ``unkept``: the keep goes.

Git's files get no sync of their own: the page cache is what every reader
sees while the machine runs, and after a power cut (a new *epoch*) the first
writer rebuilds from the journal whatever did not reach the disk.  A
checkpoint (one ``syncfs``, in the background) makes them durable and lets
the journal forget the records it covers.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from vaultmem.core.signing import GPGSIG, gpgsig_value
from vaultmem.errors import BusyError, IntegrityError, StorageError, VaultError
from vaultmem.git import durable, midx, objects
from vaultmem.git.fresh import FreshFiles
from vaultmem.git.journal import DAMAGED_JOURNAL, DamagedJournal, Journal, JournalFullError, Move, same_epoch
from vaultmem.git.journal import epoch as epoch

LOCK_WAIT = 2.0  # seconds to wait for another program's ref lock
COMMITTER = b"vaultmem <vaultmem@localhost>"
ZERO = b"\0" * 20
STEPS = ("locked", "kept", "packed", "indexed", "journaled", "durable", "ref-locked", "moved", "unkept")
KEEP_MARKER = "keep"
PRUNED = "pruned"  # in the state folder: see CommitPath.pruned
HELD = "held"  # in the state folder: the packs the upkeep never merges (format 2 keyrings)
TRASH = "trash"  # in the state folder: files of retired packs and old ref files, removed by the upkeep
# Seconds a retired pack stays in the trash while git's multi-pack-index is in
# use: a write of one that found the pack before it was retired names it
# only when it is done (vaultmem.git.midx).
TRASH_GRACE = 10.0
# Seconds after which a merge's temporary file whose process is gone is a
# leftover (a merge writes its files in well under a second).
MERGE_LEFTOVER_AGE = 60.0
_MERGE_TMP = re.compile(r"tmp-([0-9]+)-[0-9]+-merge\.(?:pack|idx)")
LOCK_MODE = 0o444  # vaultmem's ref locks: no write bit, unlike every lock git makes
_HEX = frozenset(b"0123456789abcdef")

MAIN_REF = "refs/heads/main"
EXTRA_REFS = ("refs/heads/vaultmem-keyring", "refs/heads/vaultmem-policy", "refs/heads/vaultmem-shadows")

_log = logging.getLogger("vaultmem")
on_step: Callable[[str], None] | None = None  # tests run stock git at a named step


def step(name: str) -> None:
    """A named point of a write, for tests that run stock git or die there."""
    _step(name)


def _step(name: str) -> None:
    if on_step is not None:
        on_step(name)


class RefMoved(VaultError):
    """The ref is not where the change was built on (someone else moved it)."""


class Damaged(Exception):
    """A ref file that holds no id."""


@dataclass(frozen=True)
class Draft:
    """A commit to make: its tree, parents, author and message.  The commit
    path adds the committer, the time and the headers (the seal, and later a
    signature) through ``headers``."""

    tree: bytes
    parents: Sequence[bytes]
    author: bytes
    when: int
    message: str


Headers = Callable[[bytes], list[tuple[bytes, bytes]]]
Sign = Callable[[bytes], bytes]  # the commit's bytes -> an armored SSH signature


def encode(draft: Draft, headers: Headers | None, sign: Sign | None = None) -> objects.PackedObject:
    """The commit object: ``headers`` get the bytes without them (what a seal
    covers); ``sign`` gets the bytes with them, and its signature becomes the
    ``gpgsig`` header, last, as ``git commit -S`` writes it."""
    plain = objects.encode_commit(draft.tree, draft.parents, draft.author, COMMITTER, draft.when, draft.message)
    extra = headers(plain) if headers is not None else []
    body = plain
    if extra:
        body = objects.encode_commit(
            draft.tree, draft.parents, draft.author, COMMITTER, draft.when, draft.message, extra=extra
        )
    if sign is not None:
        extra = [*extra, (GPGSIG, gpgsig_value(sign(body)))]
        body = objects.encode_commit(
            draft.tree, draft.parents, draft.author, COMMITTER, draft.when, draft.message, extra=extra
        )
    return objects.packed(objects.COMMIT, body)


def ident(name: str, email: str) -> bytes:
    """A commit's ``Name <email>`` (vaultmem records the actor as both)."""
    return f"{name} <{email}>".encode()


# -- refs on disk -------------------------------------------------------------


def read_loose(path: str) -> bytes | None:
    """The id a loose ref file holds (20 bytes); None when there is no such
    file; raises Damaged when it holds anything else (symbolic refs included)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)  # a FIFO put there: no wait for a writer
    except FileNotFoundError:
        return None
    except IsADirectoryError as err:
        raise Damaged(path) from err
    try:
        data = os.read(fd, 64)
    except IsADirectoryError as err:  # refs/heads/main/x made by git where main is not yet
        raise Damaged(path) from err
    finally:
        os.close(fd)
    if len(data) != 41 or data[40:] != b"\n" or not _HEX.issuperset(data[:40]):
        raise Damaged(path)
    return bytes.fromhex(data[:40].decode("ascii"))


def read_packed(gitdir: Path, ref: str) -> bytes | None:
    """The id ``packed-refs`` gives ``ref``, None if it names no such ref;
    raises Damaged when the ref's line holds anything but an id (read as
    "no such ref", the next write would start a new history)."""
    path = os.path.join(gitdir, "packed-refs")
    packed = _packed(path)
    if packed is None:
        return None
    found = packed.answers.get(ref, _UNREAD)
    if found is _UNREAD:
        found = packed.answers[ref] = _packed_line(packed.text, ref)
    if found is _DAMAGED_LINE:
        raise Damaged(path)
    return found if isinstance(found, bytes) else None


_UNREAD = object()
_DAMAGED_LINE = object()


def _packed_line(text: bytes, ref: str) -> object:
    """What ``packed-refs``' ``text`` gives ``ref``: its id, None, or _DAMAGED_LINE."""
    want = b" " + ref.encode("ascii")
    for line in text.split(b"\n"):
        if line.endswith(want):
            if len(line) == 40 + len(want) and _HEX.issuperset(line[:40]):
                return bytes.fromhex(line[:40].decode("ascii"))
            return _DAMAGED_LINE
    return None


@dataclass
class _PackedRefs:
    """``packed-refs`` as read once: which file it was, its text, and the
    answers given from it (ref -> id, None, or _DAMAGED_LINE)."""

    stamp: tuple[int, int, int, int, int]
    text: bytes
    answers: dict[str, object]


# packed-refs as last read, by its path.  Git never writes packed-refs in
# place: it writes packed-refs.lock and renames it over, a new inode, so a
# stat of the path tells the file read before from a new one (device, inode,
# size, modification and change times).  Two writes in one tick of the file
# system's clock can share their times, and a new file can get the inode
# number of one freed a moment before; so a file is remembered only when its
# times are PACKED_SETTLED older than the moment it was read, as git treats
# a "racily clean" index entry: any write after that moment dates its file
# later, and the stat differs.
PACKED_SETTLED = 2_000_000_000  # nanoseconds (more than any file system's clock tick)
_PACKED_KEPT = 16  # files remembered (the vaults a process opened)
_PACKED: dict[str, _PackedRefs] = {}


def _packed(path: str) -> _PackedRefs | None:
    """``packed-refs`` at ``path`` (None if there is none): the one read
    before while a stat says it is the same file, else read again."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    known = _PACKED.get(path)
    if known is not None and known.stamp == _stamp(st):
        return known
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        chunks = []
        while chunk := os.read(fd, max(st.st_size, 4096)):
            chunks.append(chunk)
    finally:
        os.close(fd)
    packed = _PackedRefs(_stamp(st), b"".join(chunks), {})
    settled = time.time_ns() - PACKED_SETTLED
    if stat.S_ISREG(st.st_mode) and len(packed.text) == st.st_size and max(st.st_mtime_ns, st.st_ctime_ns) < settled:
        if len(_PACKED) >= _PACKED_KEPT:
            _PACKED.clear()
        _PACKED[path] = packed
    return packed


def _stamp(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def read_ref(gitdir: Path, ref: str) -> bytes | None:
    """The id ``ref`` holds (loose file first, then ``packed-refs``), None if
    there is no such ref; raises Damaged for a loose file that holds no id."""
    raw = read_loose(os.path.join(gitdir, ref))
    return raw if raw is not None else read_packed(gitdir, ref)


# -- the commit path --------------------------------------------------------------


class CommitPath:
    """Moves the refs of one vault.  Every method runs under the writer lock."""

    def __init__(self, gitdir: Path, lock: durable.WriterLock, *, never_finished: Collection[str] = ()) -> None:
        self.gitdir = gitdir
        self.lock = lock
        # Refs whose move a writer killed after its record was durable is
        # taken back, not finished (the keyring: see _clear_dead_writer);
        # after a power cut it is finished, as the journal's replay reads it.
        self.never_finished = frozenset(never_finished)
        self.journal = Journal(gitdir)
        self.pack_dir = gitdir / "objects" / "pack"
        self.state = gitdir / durable.STATE_DIR
        self.trash = self.state / TRASH
        self.trashed = False  # whether this instance put anything in the trash (only a write does)
        self._retiring: tuple[int, list[Path]] | None = None  # see retiring()
        self._epoch: bytes | None = None
        self._checked_epoch = False
        self.fresh = FreshFiles(self.state)
        lock.on_dirty = self._clear_dead_writer

    @property
    def epoch(self) -> bytes:
        if self._epoch is None:
            self._epoch = epoch(self.gitdir)
        return self._epoch

    def close(self) -> None:
        self.fresh.close()
        self.journal.close()

    # -- a commit ------------------------------------------------------------

    def commit(
        self,
        ref: str,
        expected: bytes | None,
        new_objects: Sequence[objects.PackedObject],
        draft: Draft,
        headers: Headers | None = None,
        *,
        sign: Sign | None = None,
        checkpoint: bool = False,
        hold: bool = False,
    ) -> objects.PackedObject:
        """Make ``draft`` the new tip of ``ref`` with ``new_objects``, durably.

        ``expected`` is the tip the change was built on (None: the ref does not
        exist yet); if the ref holds anything else under its lock, RefMoved is
        raised and nothing is changed (the record is voided).  With ``checkpoint``, git's own files are synced
        too before returning (rare writes whose ref must never need repair:
        the keyring, the policy).  With ``hold``, the pack keeps a ``.keep``
        of its own for good: neither the upkeep's merges nor git's repack
        fold it into a larger pack, so :mod:`vaultmem.git.prune` can remove
        it whole (format 2's keyring, whose superseded copies an erasure
        destroys).  ``sign`` signs the commit (:func:`encode`).  On any
        failure nothing is changed."""
        commit = encode(draft, headers, sign)
        pack = objects.build_pack([*new_objects, commit])
        self.fresh.begin()
        made: list[str] = []
        keep: str | None = None
        move: Move | None = None
        lock_file: int | str | None = None
        moved = False
        with durable.HeldSignals():  # Ctrl-C: after the move is whole, made or not
            self._intend(durable.Intent(ref, commit.id.hex(), pack.name))
            _step("locked")
            try:
                keep = self._keep(pack.name)
                if keep is not None:
                    made.append(keep)
                _step("kept")
                self._install(pack, made=made)
                # The ref lock's file, written now: its data goes to the device while the journal syncs.
                lock_file = self._new_file(commit.id.hex().encode("ascii") + b"\n", ".ref", allocate=True)
                move = self._journal(Move(0, ref, expected or ZERO, commit.id, self.epoch, pack.data), pack)
                _step("durable")
                stem = os.path.join(self.pack_dir, f"pack-{pack.name}")
                for written in (stem + ".pack", stem + ".idx", lock_file):
                    _write_out(written)
                self._move(ref, expected, commit.id, lock_file=lock_file)
                moved = True
                _step("moved")
            except OSError as err:
                raise _storage_error(err) from err
            finally:
                if lock_file is not None:
                    _drop(lock_file)  # the ref lock keeps the file (or it was never linked)
                if not moved and move is not None and self._now_at(ref, commit.id):
                    # The rename was made, and something raised after it (a
                    # signal handler's timeout): the write stands, whole.
                    moved = True
                    if keep is not None:
                        with contextlib.suppress(OSError):
                            os.unlink(keep)
                if not moved:
                    if move is not None:
                        self._void(move)  # durable, but the ref never moved: never repair it into place
                    _remove(made)  # the keep, and a pack nothing refers to
        if hold:
            self.held_add(pack.name)
        if keep is not None:
            with contextlib.suppress(OSError):
                os.unlink(keep)
        with contextlib.suppress(OSError):
            self.lock.clear_intent()  # whole: nothing of it for a later holder to finish or remove
        _step("unkept")
        objects.remember(pack)
        if checkpoint:
            try:
                self.checkpoint()
            except OSError as err:  # the move is made and its record durable: a power cut replays it
                _log.warning("vaultmem: the checkpoint after a write failed (the next one makes it): %s", err)
        return commit

    def _intend(self, intent: durable.Intent) -> None:
        """Record the intent of a move about to be made: the first write of
        a commit, so a refusal here has changed nothing."""
        try:
            self.lock.write_intent(intent)
        except OSError as err:
            raise _storage_error(err) from err

    def advance(self, ref: str, expected: bytes | None, new: bytes) -> None:
        """Move ``ref`` from ``expected`` to ``new``, a commit whose objects are
        already in the repository (a pull's fetch put them there), durably:
        the file system is synced so those objects are on disk, the move is
        journaled (without a pack: nothing to rebuild), then made.  RefMoved if
        the ref holds anything but ``expected``; on any failure nothing is
        changed.  The caller holds the writer lock and checked ``new``."""
        move: Move | None = None
        moved = False
        with durable.HeldSignals():
            self._intend(durable.Intent(ref, new.hex(), ""))
            try:
                durable.sync_filesystem(self.gitdir)
                move = self._append(Move(0, ref, expected or ZERO, new, self.epoch, b""))
                self._move(ref, expected, new)
                moved = True
                with contextlib.suppress(OSError):
                    self.lock.clear_intent()
            except OSError as err:
                raise _storage_error(err) from err
            finally:
                if not moved and move is not None and not self._now_at(ref, new):
                    self._void(move)

    def _now_at(self, ref: str, new: bytes) -> bool:
        """Whether ``ref`` holds ``new``: its move was made, whatever
        interrupted the write after it."""
        try:
            return read_ref(self.gitdir, ref) == new
        except (Damaged, OSError):
            return False

    def _move(
        self, ref: str, expected: bytes | None, new: bytes, *, check: bool = True, lock_file: int | str | None = None
    ) -> None:
        """Move ``ref`` from ``expected`` to ``new`` as git does: its lock,
        a re-read under it (RefMoved if someone else moved it; not with
        ``check=False``, a repair), a rename.  ``lock_file``: the lock's
        file, made and written out already (see :meth:`_take_ref_lock`).

        The ref's old file keeps a second name in the trash across the
        rename, so the call frees no file (on some file systems freeing
        costs a synchronous discard); the upkeep removes it later.  No file
        is ever written twice: after a power cut a ref file holds the id it
        was made with, or nothing (docs/format.md, "Files freed after the
        call, never written twice")."""
        ref_path = os.path.join(self.gitdir, ref)
        with durable.HeldSignals():  # a repair's move too: never a lock left or a move half taken back
            lock_path = self._take_ref_lock(ref, new, lock_file)
            old = os.path.join(self.trash, f"ref-{new.hex()}")
            kept = False
            try:
                _step("ref-locked")
                if check and self._current(ref) != expected:
                    raise RefMoved(
                        f"Error: {ref} moved while the change was being made (another program moved it). "
                        "Nothing was changed. Try again."
                    )
                kept = self._link_into_trash(ref_path, old)
                os.rename(lock_path, ref_path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(lock_path)
                if kept:
                    with contextlib.suppress(OSError):
                        os.unlink(old)
                raise

    def _link_into_trash(self, target: str, name: str) -> bool:
        """Give ``target`` the extra name ``name`` in the trash; False when
        there is no ``target`` (a ref only in packed-refs, or a new one) or
        the link cannot be made (the rename then frees the file at once)."""
        self.trashed = True
        for _ in range(2):
            try:
                os.link(target, name)
                return True
            except FileNotFoundError:
                if not os.path.exists(target):
                    return False
                os.makedirs(self.trash, exist_ok=True)
            except FileExistsError:
                os.unlink(name)  # a leftover of a killed writer: this name is for this move
            except OSError:
                return False
        return False

    def _current(self, ref: str) -> bytes | None:
        try:
            return read_ref(self.gitdir, ref)
        except Damaged as err:
            target = _symbolic_target(os.path.join(self.gitdir, ref))
            if target is not None:
                raise IntegrityError(
                    f"Error: the vault's {ref} is a symbolic ref (to {target}), which vaultmem does not move, so "
                    f"nothing was changed. Make it a plain ref again: git update-ref --no-deref {ref} {target}"
                ) from err
            raise IntegrityError(
                f"Error: the vault's {ref} does not hold a commit id; run `vaultmem verify` and restore it."
            ) from err

    def _take_ref_lock(self, ref: str, new: bytes, made: int | str | None = None) -> str:
        """Create ``<ref>.lock`` holding ``new``, exclusively, as git does; wait
        for another program's lock up to LOCK_WAIT seconds, then fail (never
        removing it).  ``made``: the lock's file, written out already (from
        :meth:`_new_file`; the caller drops it); without it the file is made
        here.

        The file's data is on the device before the lock is taken
        (:func:`durable.write_out`): renamed over the ref, the lock must never
        reach the disk as a name without its data, which stock git reads as a
        broken ref after a power cut.

        The lock is written under a temporary name in the state folder and
        hard linked into place: a link fails if the name exists,
        exactly as git's exclusive create does.  vaultmem's ref locks have no
        write permission bit.  Git's always have one (git writes its lock
        through the descriptor it creates it with, mode 0666 less the umask),
        so even a lock that a kill or a power cut left empty or garbled is
        provably vaultmem's."""
        path = os.path.join(self.gitdir, ref + ".lock")
        own = made is None
        if made is None:
            try:
                made = self._new_file(new.hex().encode("ascii") + b"\n", ".ref")
            except OSError as err:
                raise _storage_error(err) from err
        try:
            if own:
                _write_out(made)
            deadline = time.monotonic() + LOCK_WAIT
            pause = 0.001
            while True:
                try:
                    self._link(made, path)
                    return path
                except FileNotFoundError as missing:
                    if os.path.isdir(os.path.dirname(path)):
                        raise _storage_error(missing) from missing  # the file made for it went
                    try:
                        os.makedirs(os.path.dirname(path), exist_ok=True)
                    except OSError as err:
                        raise _storage_error(err) from err
                except FileExistsError:
                    if time.monotonic() >= deadline:
                        raise BusyError(
                            f"Error: {ref}.lock exists: another program (a git command?) is updating the vault, "
                            "so nothing was changed. Try again when it has finished; if no git command is "
                            f"running, that file was left by one that died: remove {ref}.lock from the vault's folder."
                        ) from None
                    durable.deliver_held()  # nothing made yet: a Ctrl-C while waiting stops the write now
                    time.sleep(pause)
                    pause = min(pause * 2, 0.05)
                except OSError as err:
                    raise _storage_error(err) from err
        finally:
            if own:
                _drop(made)  # the lock keeps the file

    def _our_lock(self, lock_path: str, ids: Collection[bytes], *, garbled: bool = False) -> bool:
        """Whether ``lock_path`` is a ref lock vaultmem made: no write
        permission bit, and holding one of the ``ids`` vaultmem recorded
        moving that ref to.  The mode alone is no proof: git makes its locks
        with mode 0666 less the umask, so under a umask of 0222 they have no
        write bit either, and they hold the id git is moving the ref to.
        After a power cut (``garbled``), a lock holding no id at all is
        vaultmem's too: its lock reached the disk without its data, and no
        git command outlives a power cut."""
        try:
            st = os.lstat(lock_path)
            if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o222 != 0 or st.st_size > 4096:
                return False
            with open(lock_path, "rb") as fh:
                held = fh.read(4096)
        except OSError:
            return False
        if re.fullmatch(rb"[0-9a-f]{40}\n", held) is not None:
            return bytes.fromhex(held[:40].decode("ascii")) in ids
        return garbled

    def _keep(self, name: str) -> str | None:
        """Protect the pack about to be written from repack and gc; None if a
        keep for it exists already (it protects the pack just as well)."""
        keep = os.path.join(self.pack_dir, f"pack-{name}.keep")
        marker = os.path.join(self.state, KEEP_MARKER)
        for _ in range(2):
            try:
                os.link(marker, keep)
                return keep
            except FileExistsError:
                return None
            except FileNotFoundError:
                if not os.path.exists(marker):
                    _write_file(marker, b"vaultmem: packs linked to this file are being written by vaultmem\n")
                else:
                    os.makedirs(self.pack_dir, exist_ok=True)
        raise OSError(errno.ENOENT, "cannot create a keep file", keep)

    @property
    def pruned(self) -> int:
        """How many times an erasure began or ended removing objects, in any
        process (the state folder's ``pruned`` file): a pack merge that spans
        a change of it is dropped, since it may have copied a removed object."""
        try:
            with open(os.path.join(self.state, PRUNED), "rb") as fh:
                return int(fh.read().strip() or b"0")
        except (OSError, ValueError):
            return 0

    def mark_pruning(self) -> None:
        """Count one more start or end of a removal (under the writer lock)."""
        tmp = os.path.join(self.state, f"tmp-{os.getpid()}.pruned")
        _write_file(tmp, b"%d\n" % (self.pruned + 1))
        os.rename(tmp, os.path.join(self.state, PRUNED))

    def held(self) -> set[str]:
        """The names of the packs the upkeep leaves alone (see ``hold``)."""
        try:
            with open(os.path.join(self.state, HELD), encoding="ascii") as fh:
                return {line.strip() for line in fh if len(line.strip()) == 40}
        except (OSError, UnicodeDecodeError):
            return set()

    def held_set(self, names: set[str]) -> None:
        tmp = os.path.join(self.state, f"tmp-{os.getpid()}.held")
        _write_file(tmp, "".join(f"{name}\n" for name in sorted(names)).encode("ascii"))
        os.rename(tmp, os.path.join(self.state, HELD))

    def held_add(self, name: str) -> None:
        """Hold pack ``name``, and forget held packs that are gone."""
        names = {n for n in self.held() if os.path.exists(os.path.join(self.pack_dir, f"pack-{n}.idx"))}
        with contextlib.suppress(OSError):  # at worst the upkeep merges it: an erasure then rewrites that pack
            self.held_set(names | {name})

    def install(self, pack: objects.Pack) -> None:
        """Put a pack whose objects are all reachable already in place (a
        merge): synced before its rename, and safe without the writer lock
        (its temporary name is its own)."""
        self._install(pack, sync=True, tmp=f"tmp-{os.getpid()}-{threading.get_ident()}-merge", steps=False)

    def _install(
        self,
        pack: objects.Pack,
        sync: bool = False,
        made: list[str] | None = None,
        tmp: str | None = None,
        steps: bool = True,
    ) -> None:
        """Put the pack and its index in place (index last); each path created
        is added to ``made`` at once, for removal if the write fails."""
        stem = os.path.join(self.pack_dir, f"pack-{pack.name}")
        if os.path.exists(stem + ".idx") and os.path.exists(stem + ".pack"):
            return
        made = made if made is not None else []
        if tmp is not None:
            self._install_written(pack, stem, tmp, sync, made)
            return
        for suffix, data in ((".pack", pack.data), (".idx", pack.idx)):
            self._put(data, stem + suffix, suffix)
            made.append(stem + suffix)
            if steps:
                _step("packed" if suffix == ".pack" else "indexed")

    def _install_written(self, pack: objects.Pack, stem: str, tmp: str, sync: bool, made: list[str]) -> None:
        """Both files written in full under temporary names first, then
        renamed into place, the index last: a full disk, or a process killed
        while it writes them, leaves nothing in ``objects/pack`` (a pack
        without its index there is one that no git command reads, and that
        nothing but ``git gc`` would remove)."""
        written: list[str] = []
        try:
            for suffix, data in ((".pack", pack.data), (".idx", pack.idx)):
                path = os.path.join(self.state, tmp + suffix)
                _write_file(path, data, sync=sync, allocate=True)
                written.append(path)
            os.rename(written[0], stem + ".pack")
            try:
                os.rename(written[1], stem + ".idx")
            except OSError:
                _drop(stem + ".pack")
                raise
        finally:
            for path in written:
                _drop(path)  # what was not renamed
        made += [stem + ".pack", stem + ".idx"]

    def _new_file(self, data: bytes, suffix: str, allocate: bool = False) -> int | str:
        """A new read-only file holding ``data``, for the caller to link or
        rename into place (with :meth:`_link`, then :func:`_drop`): a file
        made ahead, as its descriptor, when one is ready
        (:mod:`vaultmem.fresh`), else ``tmp-<pid><suffix>`` in the state
        folder, as its path."""
        fd = self.fresh.take()
        if fd is None:
            path = os.path.join(self.state, f"tmp-{os.getpid()}{suffix}")
            _write_file(path, data, allocate=allocate)
            return path
        try:
            _write_all(fd, data, suffix)
            if allocate:
                _allocate(fd)
        except OSError:
            os.close(fd)
            raise
        return fd

    def _put(self, data: bytes, final: str, suffix: str) -> None:
        """A new file holding ``data`` named ``final`` (replacing a file of
        that name, a piece an earlier attempt left)."""
        made = self._new_file(data, suffix, allocate=True)
        if isinstance(made, int):
            try:
                self.fresh.link(made, final)
                return
            except FileExistsError:
                path = os.path.join(self.state, f"tmp-{os.getpid()}{suffix}")
                _write_file(path, data, allocate=True)
            finally:
                os.close(made)
            made = path
        try:
            os.rename(made, final)
        except OSError:
            _drop(made)
            raise

    def _link(self, made: int | str, path: str) -> None:
        """Link ``made`` (from :meth:`_new_file`) at ``path``; FileExistsError
        if the name exists.  The caller drops ``made`` afterwards."""
        if isinstance(made, int):
            self.fresh.link(made, path)
        else:
            os.link(made, path)

    def retire(self, pack: Path) -> None:
        """Take a pack out of git's sight (its index first, as git's own
        repack removes them) by renaming its files into the trash: a rename
        frees nothing, so it costs no discard or inode bookkeeping in the
        call; the upkeep removes the trash.  A pack a multi-pack-index of
        git's lists is never retired, and one an index starts to list while
        it is being retired goes back (:mod:`vaultmem.git.midx`).

        Inside :meth:`retiring`, the pack is retired when that block ends,
        with the others retired in it."""
        batch = self._retiring
        if batch is not None and batch[0] == threading.get_ident():
            batch[1].append(pack)
            return
        if midx.lists(self.pack_dir, pack):
            return
        self._into_trash(os.fspath(pack))
        if midx.lists(self.pack_dir, pack):
            self._put_back(pack.stem)

    @contextlib.contextmanager
    def retiring(self) -> Iterator[None]:
        """Retire the packs :meth:`retire` is given in this block (in this
        thread) together when it ends.  Each is still checked against git's
        multi-pack-indexes before its files move and again after they moved,
        by one look before the first pack moves and one after the last (a
        look made later than a pack's own move only sees more of what git
        wrote since): eight packs cost four stats rather than thirty-two."""
        packs: list[Path] = []
        self._retiring = (threading.get_ident(), packs)
        try:
            yield
        finally:
            self._retiring = None
            if packs:
                self._retire_together(packs)

    def _retire_together(self, packs: Sequence[Path]) -> None:
        listed = midx.listed(self.pack_dir)
        going = [pack for pack in packs if not midx.may_list(listed, pack)]
        moved: list[Path] = []
        try:
            for pack in going:
                moved.append(pack)
                self._into_trash(os.fspath(pack))
        finally:
            if moved:
                listed = midx.listed(self.pack_dir)
                for pack in moved:
                    if midx.may_list(listed, pack):
                        self._put_back(pack.stem)

    def _into_trash(self, pack: str) -> None:
        """Rename a pack's files (``pack-<hash>.pack`` and its index) into the
        trash, the index first."""
        self.trashed = True
        stem = pack.removesuffix(".pack")
        for suffix in (".idx", ".pack"):
            path = stem + suffix
            target = os.path.join(self.trash, os.path.basename(path))
            try:
                try:
                    os.rename(path, target)
                except FileNotFoundError:
                    if not os.path.isdir(self.trash):
                        os.makedirs(self.trash, exist_ok=True)
                        with contextlib.suppress(FileNotFoundError):
                            os.rename(path, target)
            except OSError:
                if suffix == ".pack":  # its index went already: back beside its pack, so git still reads it
                    with contextlib.suppress(OSError):
                        os.rename(os.path.join(self.trash, os.path.basename(stem + ".idx")), stem + ".idx")
                raise

    def empty_trash(self, wait: bool = True) -> None:
        """Remove retired packs' files and old ref files (the upkeep, without the writer lock:
        nothing but vaultmem writes in the trash, and nothing reads it).  A
        retired pack that a multi-pack-index of git's lists (one written
        after the pack was retired, or every pack while an index cannot be
        read) goes back into ``objects/pack`` instead; while git uses such
        an index, a pack retired less than ``TRASH_GRACE`` seconds ago, or
        any while git holds the index's lock, waits for a later round
        (:mod:`vaultmem.git.midx`), unless ``wait`` is False (an erasure)."""
        try:
            names = os.listdir(self.trash)
        except FileNotFoundError:
            return
        packs = {name.rpartition(".")[0] for name in names if name.startswith("pack-")}
        listed = midx.listed(self.pack_dir) if packs else frozenset()
        back = {stem for stem in packs if listed is None or stem in listed}
        for stem in sorted(back):
            self._put_back(stem)
        later: set[str] = set()
        if wait and packs - back and midx.in_use(self.pack_dir):
            young = time.time() - TRASH_GRACE
            writing = midx.being_written(self.pack_dir)
            later = {stem for stem in packs - back if writing or self._retired_after(stem, young)}
        for name in names:
            if name.rpartition(".")[0] not in back | later:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self.trash, name))

    def _retired_after(self, stem: str, when: float) -> bool:
        """Whether a file of the retired pack ``stem`` came into the trash
        after ``when`` (a rename sets a file's change time)."""
        for suffix in (".idx", ".pack"):
            with contextlib.suppress(FileNotFoundError):
                if os.stat(os.path.join(self.trash, stem + suffix)).st_ctime > when:
                    return True
        return False

    def _put_back(self, stem: str) -> None:
        """Bring a retired pack's files back from the trash into
        ``objects/pack``, the pack before its index (git looks for a pack
        through its index): each is linked under its name, unless that name
        is there already, then removed from the trash once the links are
        durable."""
        linked = False
        for suffix in (".pack", ".idx"):
            retired = os.path.join(self.trash, stem + suffix)
            with contextlib.suppress(FileExistsError, FileNotFoundError):
                os.link(retired, os.path.join(self.pack_dir, stem + suffix))
                linked = True
        if linked:
            durable.sync_dir(self.pack_dir)
        for suffix in (".pack", ".idx"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.trash, stem + suffix))

    def _journal(self, move: Move, pack: objects.Pack) -> Move:
        """Append the move and sync it (starting a new pass of the journal if
        it is full); a move too large for any journal is synced in place
        instead: its pack, then a record without it."""
        try:
            return self._append(move)
        except JournalFullError:
            stem = os.path.join(self.pack_dir, f"pack-{pack.name}")
            for suffix in (".pack", ".idx"):  # installed already: sync it where it is
                fd = os.open(stem + suffix, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            durable.sync_dir(self.pack_dir)
            return self._append(Move(0, move.ref, move.old, move.new, move.epoch, b""))

    def _append(self, move: Move) -> Move:
        try:
            return self.journal.append(move, between=lambda: _step("journaled"))
        except JournalFullError as full:
            if not full.ever:
                raise
            self.checkpoint(restart=True)
            return self.journal.append(move, between=lambda: _step("journaled"))

    def _void(self, move: Move) -> None:
        try:
            self.journal.void(move)
        except OSError as err:
            raise StorageError(
                "Error: the storage failed while cancelling a change that could not be completed; it may "
                "still appear the next time the vault is written. Check with `vaultmem log`."
            ) from err

    # -- checkpoints -------------------------------------------------------------

    def checkpoint(self, restart: bool = False) -> None:
        """Sync git's files and let the journal forget what is now durable."""
        through = self.journal.last_seq()
        durable.sync_filesystem(self.gitdir)
        self.journal.checkpoint(through, restart=restart)

    def scrub(self) -> None:
        """Checkpoint everything and overwrite the journal's records with
        zeros, synced: after an erasure no record still holds a pack of a
        superseded keyring.  Also empties the trash (retired packs), at once:
        the erasure removed git's multi-pack-index before it removed packs."""
        self.checkpoint(restart=True)
        self.journal.wipe()
        self.empty_trash(wait=False)

    # -- after a crash -------------------------------------------------------------

    def recover(self) -> None:
        """Called with the writer lock held, before a write: once per process,
        repair the moves of an earlier epoch (a power cut) from the journal.
        (What a killed writer left is cleared when the lock is taken.)"""
        if not self._checked_epoch:
            self._clear_own_leftovers()
            try:
                self._repair_epoch()
            except OSError as err:
                raise _storage_error(err) from err
            self._finish_legacy()
            self._checked_epoch = True

    def _clear_dead_writer(self) -> None:
        """Called by the writer lock when its previous holder died: remove
        exactly what that writer made, and only what is provably vaultmem's (a
        ref lock without write permission bits, a keep linked to the marker);
        finish its move if it was durable."""
        intent = self.lock.read_intent()
        if intent is not None:
            new = bytes.fromhex(intent.new)
            lock_path = os.path.join(self.gitdir, intent.ref + ".lock")
            # After a power cut the intent (never synced) may name an earlier
            # write; the journal names every id a lock of vaultmem's can hold.
            pending = [m for m in self.journal.pending() if m.ref == intent.ref]
            cut = any(not same_epoch(m.epoch, self.epoch) for m in pending)
            if self._our_lock(lock_path, {new, *(m.new for m in pending)}, garbled=cut):
                os.unlink(lock_path)
            journaled = next((m for m in pending if m.new == new), None)
            current = read_ref_or_damaged(self.gitdir, intent.ref)  # garbled by a power cut: the repair decides
            if journaled is not None:
                old = None if journaled.old == ZERO else journaled.old
                killed = same_epoch(journaled.epoch, self.epoch)
                if current == old and current != DAMAGED and intent.ref in self.never_finished and killed:
                    # A key change nobody was told of: the key that opened the
                    # vault a moment ago must go on opening it, so the move is
                    # taken back (voided: no power cut replays it), not made.
                    # After a power cut it is finished like any other: every
                    # open since the reboot has read the keyring as the
                    # journal replays it (engine._power_cut_view), so the new
                    # key is the one that opened this vault.
                    self._void(journaled)
                elif current == old and current != DAMAGED:
                    if not killed and journaled.pack:
                        self._restore_pack(journaled.pack)  # a power cut may have lost git's copy
                    with contextlib.suppress(RefMoved):
                        self._move(intent.ref, old, new)  # durable already: finish it
            # Its keep goes; its pack stays: if the move was never made, the pack
            # only holds dangling objects (ciphertext, which `git gc` removes),
            # and removing a pack could pull it from under a git command that
            # has just listed it (this may run in the background upkeep).
            keep = os.path.join(self.pack_dir, f"pack-{intent.pack}.keep")
            if self._is_our_keep(keep):
                os.unlink(keep)
            # A pack it renamed into place without its index (killed between
            # the two renames) is one no git command reads or lists (git finds
            # packs by their index) and that nothing else removes: it goes.
            stem = os.path.join(self.pack_dir, f"pack-{intent.pack}")
            if intent.pack and not os.path.exists(stem + ".idx"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(stem + ".pack")
        for leftover in self.state.glob("tmp-*"):  # only vaultmem writes in its state folder
            with contextlib.suppress(OSError):
                leftover.unlink()

    def _clear_own_leftovers(self) -> None:
        """Temporary files named for this process's writes (``tmp-<pid>.pack``
        and the like): under the writer lock none is being written, so any is
        a leftover of an earlier process that had this pid.  A merge's
        (``tmp-<pid>-<thread>-merge``) runs without the lock: one is removed
        only when its process is gone and it is older than
        ``MERGE_LEFTOVER_AGE`` (a process killed while its upkeep merged
        packs; no dirty lock tells anyone, so nothing else would remove it)."""
        for suffix in (".pack", ".idx", ".ref", ".held", ".pruned"):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.state, f"tmp-{os.getpid()}{suffix}"))
        try:
            names = os.listdir(self.state)
        except OSError:
            names = []
        for name in names:
            match = _MERGE_TMP.fullmatch(name)
            if match is None or int(match[1]) == os.getpid() or _alive(int(match[1])):
                continue
            path = os.path.join(self.state, name)
            with contextlib.suppress(OSError):
                if time.time() - os.lstat(path).st_mtime > MERGE_LEFTOVER_AGE:
                    os.unlink(path)

    def _is_our_keep(self, keep: str) -> bool:
        try:
            mine = os.lstat(os.path.join(self.state, KEEP_MARKER))
            theirs = os.lstat(keep)
        except OSError:
            return False
        return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)

    def _repair_epoch(self) -> None:
        """Rebuild what a power cut may have lost: for each move of an earlier
        epoch not covered by a checkpoint, its pack and index byte for byte,
        and its ref if the ref still holds the move's old id (or is damaged)."""
        moves = [m for m in self.journal.pending() if not same_epoch(m.epoch, self.epoch)]
        if not moves:
            self._repair_garbled_refs()
            return
        for move in moves:
            if move.pack:
                self._restore_pack(move.pack)
        self._repair_indexes()
        self._retire_damaged_packs()
        for ref in {m.ref for m in moves}:  # a lock of ours the power cut left behind, moved or not
            lock_path = os.path.join(self.gitdir, ref + ".lock")
            if self._our_lock(lock_path, {m.new for m in moves if m.ref == ref}, garbled=True):
                os.unlink(lock_path)
        for ref, target in replay(self.gitdir, moves).items():
            self._move(ref, None, target, check=False)
        self.checkpoint()

    def _repair_garbled_refs(self) -> None:
        """A ref that is missing or holds no id although every move is covered
        (a file system without a journal can lose a file's data, or both names
        of a rename): the newest move the journal still holds for it, when
        that move was made before this epoch."""
        for ref in (MAIN_REF, *EXTRA_REFS):
            if read_ref_or_damaged(self.gitdir, ref) not in (None, DAMAGED):
                continue
            move = self.journal.latest(ref)
            if move is None or same_epoch(move.epoch, self.epoch):
                continue
            if move.pack:
                self._restore_pack(move.pack)
            lock_path = os.path.join(self.gitdir, ref + ".lock")
            if self._our_lock(lock_path, {move.new}, garbled=True):
                os.unlink(lock_path)
            self._move(ref, None, move.new, check=False)

    def _repair_indexes(self) -> None:
        """After a power cut, an index whose name reached the disk but whose
        data did not (a file system without a journal) is rebuilt from its
        pack, when the pack checks out; one that cannot be is left for verify."""
        for idx in self.pack_dir.glob("pack-*.idx"):
            try:
                if objects.valid_index(idx.read_bytes()):
                    continue
                rebuilt = objects.index_of(idx.with_suffix(".pack").read_bytes())
            except (OSError, ValueError, IndexError):
                continue
            tmp = os.path.join(self.state, f"tmp-{os.getpid()}.idx")
            _write_file(tmp, rebuilt)
            os.rename(tmp, idx)

    def _retire_damaged_packs(self) -> None:
        """After a power cut, a pack whose bytes fail their checksum or do
        not match their index, and that the journal could not restore (a
        merged pack's victim or a retired pack whose removal reached the
        disk only in part), is retired when every object its index lists is
        in a whole pack too, or when neither file holds anything readable.
        Any other damaged pack is left for verify to report, and so is any
        pack whose own bytes are whole (its index may be of a kind this
        repair does not rebuild)."""
        whole: set[bytes] = set()
        damaged: list[tuple[Path, list[bytes] | None]] = []
        for pack in sorted(self.pack_dir.glob("pack-*.pack")):
            try:
                data = pack.read_bytes()
                idx = pack.with_suffix(".idx").read_bytes()
            except OSError:
                continue  # no index: git does not look at it
            ids = objects.index_ids(idx) if objects.valid_index(idx) else None
            if objects.valid_pack(data):
                if ids is not None and idx[-40:-20] == data[-20:]:
                    whole.update(ids)
                continue
            damaged.append((pack, ids))
        for pack, ids in damaged:
            if ids is None or whole.issuperset(ids):
                self.retire(pack)

    def _restore_pack(self, data: bytes) -> None:
        name = objects.pack_name(data)
        stem = os.path.join(self.pack_dir, f"pack-{name}")
        try:
            idx = objects.index_of(data)
        except ValueError:
            return
        for suffix, want in ((".pack", data), (".idx", idx)):
            if _holds_bytes(stem + suffix, want):
                continue
            tmp = os.path.join(self.state, f"tmp-{os.getpid()}{suffix}")
            _write_file(tmp, want)
            os.rename(tmp, stem + suffix)

    def _finish_legacy(self) -> None:
        """A move an earlier vaultmem made durable before a kill: its lock file
        still holds the new id (that version synced before moving)."""
        legacy = durable.read_legacy_pending(self.gitdir)
        if legacy is None:
            return
        lock_path = os.path.join(self.gitdir, legacy.ref + ".lock")
        new = bytes.fromhex(legacy.new)
        if _holds(lock_path, new) and self._current(legacy.ref) == (
            bytes.fromhex(legacy.old) if legacy.old != "0" * 40 else None
        ):
            os.rename(lock_path, os.path.join(self.gitdir, legacy.ref))
        durable.remove_legacy_pending(self.gitdir)


def replay(gitdir: Path, moves: Sequence[Move]) -> dict[str, bytes]:
    """Where each ref must be after ``moves`` of an earlier epoch.  Records are
    synced; git's files are not, so after a power cut a ref may hold any id
    the journal passed through, garbage, or be missing: it then takes the last
    journaled id.  A ref holding an id the journal never named was moved by someone
    else after the last record, and is left alone.  Reads only."""
    last: dict[str, bytes] = {}
    seen: dict[str, set[bytes]] = {}
    for move in moves:
        last[move.ref] = move.new
        seen.setdefault(move.ref, set()).update((move.old, move.new))
    out: dict[str, bytes] = {}
    for ref, target in last.items():
        try:
            current = read_ref(gitdir, ref)
        except Damaged:
            current = None  # a ref file the power cut garbled
        # Missing counts as garbled: without a file-system journal a power cut
        # can lose both names of a rename, and the journal knows this ref.
        if current != target and (current is None or current in seen[ref]):
            out[ref] = target
    return out


DAMAGED = b"damaged"  # what a ref file that holds no id reads as through read_ref_or_damaged


def read_ref_or_damaged(gitdir: Path, ref: str) -> bytes | None:
    """The ref's id, None if missing, DAMAGED if its file holds no id."""
    try:
        return read_ref(gitdir, ref)
    except Damaged:
        return DAMAGED


def _holds_bytes(path: str, want: bytes) -> bool:
    """Whether the file at ``path`` exists and holds exactly ``want``."""
    try:
        with open(path, "rb") as fh:
            return fh.read() == want
    except OSError:
        return False


def _holds(lock_path: str, new: bytes) -> bool:
    return _holds_bytes(lock_path, new.hex().encode("ascii") + b"\n")


def _remove(paths: Sequence[str]) -> None:
    for path in reversed(paths):  # the index before its pack
        with contextlib.suppress(OSError):
            os.unlink(path)


_ALLOC_DELAYED = 0x660C  # ext4's EXT4_IOC_ALLOC_DA_BLKS: _IO('f', 12)


def _allocate(fd: int) -> None:
    """On ext4, allocate the file's blocks now rather than at writeback, as
    ext4 does itself for a file renamed over another: that starts the write
    of its data to the device, which then runs while the journal syncs, and
    :func:`_write_out` before the rename that names the file waits for less.
    Elsewhere it does nothing."""
    with contextlib.suppress(OSError):
        fcntl.ioctl(fd, _ALLOC_DELAYED)


def _write_file(path: str, data: bytes, sync: bool = False, allocate: bool = False) -> None:
    """A new read-only file at ``path`` (a temporary name in the state folder).
    Created exclusively: a leftover of the same name (a dead process with the
    same pid) is removed first, since a read-only file cannot be reopened for
    writing by anyone but root."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o444)
    except FileExistsError:
        os.unlink(path)
        fd = os.open(path, flags, 0o444)
    try:
        _write_all(fd, data, path)
        if sync:
            os.fsync(fd)
        elif allocate:
            _allocate(fd)
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    os.close(fd)


def _write_out(made: int | str) -> None:
    """:func:`durable.write_out` for a file made by ``_new_file`` or named by a path."""
    if isinstance(made, int):
        durable.write_out(made)
    else:
        durable.write_out_path(made)


def _drop(made: int | str) -> None:
    """Close a file made ahead (unnamed, it goes) or remove a temporary name."""
    with contextlib.suppress(OSError):
        if isinstance(made, int):
            os.close(made)
        else:
            os.unlink(made)


def _write_all(fd: int, data: bytes, path: str) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, "short write", path)
        view = view[written:]


def _symbolic_target(path: str) -> str | None:
    """The ref a symbolic ref file (``ref: refs/heads/...``, as ``git
    symbolic-ref`` writes it) points to; None for anything else."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(4096)
    except OSError:
        return None
    match = re.fullmatch(rb"ref: (refs/[\x21-\x7e]+)\n?", data)
    return match[1].decode("ascii") if match is not None else None


def _alive(pid: int) -> bool:
    """Whether a process of that id runs (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _storage_error(err: OSError) -> VaultError:
    if isinstance(err, DamagedJournal):
        return StorageError(f"Error: {DAMAGED_JOURNAL}. Nothing was changed.")
    if err.errno == errno.EXDEV:
        return StorageError(
            f"Error: {storage_reason(err)}, so nothing was changed: vaultmem writes a vault only when it is whole "
            "on one file system. Move the whole vault folder instead, or put that folder back, then try again."
        )
    return StorageError(f"Error: {storage_reason(err)}, so nothing was changed. {durable.storage_advice(err)}")


def storage_reason(err: OSError) -> str:
    """What a failed file operation means to a user, in a few words."""
    return durable.storage_reason(err)
