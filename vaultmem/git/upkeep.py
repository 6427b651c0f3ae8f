"""Upkeep after the calls return: merging small packs and checkpointing the
journal, in a background thread, so no acknowledged call waits for it.

Each write adds one small pack.  Once writes pause (``IDLE`` seconds without
one), or every ``EVERY`` writes during a long burst, the thread takes the
writer lock just long enough to read how far the journal goes, merges the
smallest packs geometrically (as ``git repack --geometric=2`` would) into one
new pack without the lock, syncs the file system, and takes the lock once more
to record the checkpoint in the journal.  The packs the merge replaced are
retired by the next writes, a few each (two renames a pack, into the state folder's trash,
so no git command loses a pack it listed after a call returned), and the
thread empties the trash.  A thread runs only while there is work: it ends after ``LINGER``
seconds with nothing to do, and a forked child starts its own.  Everything it
does is crash-safe: a merged pack is complete and synced before it is renamed
into place, and the packs it replaces go only after the file system is synced.

A pack that git's multi-pack-index lists is never merged, retired or removed
(``git multi-pack-index write``, ``git maintenance run
--task=incremental-repack``): git reads the objects it indexed only from the
packs it names.  :mod:`vaultmem.git.midx` says why that keeps every object.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

from vaultmem.git import durable, objects
from vaultmem.git.commits import CommitPath

IDLE = 0.05  # seconds without a write before upkeep runs
EVERY = 32  # writes after which upkeep runs even without a pause
RETIRE_EACH = 8  # packs a write retires at most: a merge's 30-odd go over a few writes
LINGER = 0.0  # seconds with nothing to do before the thread ends (2 s: no faster direct writes, measured)
MERGE_AT = 16  # packs that make a merge worth it
# Packs of more objects than this are no longer merged: copying them would
# hold the writer lock for long.  A vault gains such a pack about every 3,000
# commits (five objects a commit); `git gc` packs them properly.
MERGE_LIMIT = 16_384
# During a burst (a round that EVERY writes started, with no pause between
# them) only packs of at most this many objects are merged.  A merge is
# Python work that holds the interpreter lock, and a call that needs it back
# meanwhile can wait the interpreter's whole switch interval (5 ms) each time:
# a merge that takes in the vault's largest pack (a 10,000-file import) takes
# tens of milliseconds, so it waits for a pause, when no call is running.
BURST_LIMIT = 1_024

_ALL: weakref.WeakSet[Upkeep] = weakref.WeakSet()


class Upkeep:
    """The upkeep of one vault instance."""

    def __init__(self, gitdir: Path, lock: durable.WriterLock, commits: CommitPath) -> None:
        self.gitdir = gitdir
        self.lock = lock
        self.commits = commits
        self._wake = threading.Condition()
        self._pokes = 0
        self._since_run = 0
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._last_poke = 0.0
        self._redundant: list[objects.PackInfo] = []  # replaced by a durable merge, retired by the next writes
        self.after_round: Callable[[], None] | None = None  # the vault's own upkeep, after each round
        _ALL.add(self)

    def poke(self) -> None:
        """A write happened: schedule upkeep."""
        with self._wake:
            self._pokes += 1
            self._since_run += 1
            self._last_poke = time.monotonic()
            if self._thread is None or not self._thread.is_alive():
                self._stopping = False
                self._thread = threading.Thread(target=self._loop, name="vaultmem-upkeep", daemon=True)
                self._thread.start()
            elif self._since_run >= EVERY:
                # Only a burst's end of EVERY writes wakes the thread early:
                # waking it on every write would hand it the GIL in the
                # middle of the call.  Otherwise its wait ends IDLE seconds
                # after the write it last saw, and it waits on from the last
                # write then.
                self._wake.notify()

    def stop(self) -> None:
        """Run what is pending now and end the thread (``Vault.close``)."""
        with self._wake:
            thread, self._stopping = self._thread, True
            self._wake.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        if self.commits.trashed:  # an instance that only read never writes, not even to empty the trash
            with contextlib.suppress(OSError):
                self.commits.empty_trash()  # what writes retired during the last round

    def _loop(self) -> None:
        while True:
            with self._wake:
                idle_since = time.monotonic()
                while not self._stopping and self._since_run < EVERY:
                    now = time.monotonic()
                    if self._since_run > 0:
                        left = self._last_poke + IDLE - now
                        if left <= 0:
                            break  # IDLE seconds without a write since the last one: time for upkeep
                        self._wake.wait(left)
                    elif now - idle_since >= LINGER:  # nothing to do for a while: the thread ends
                        if self._thread is threading.current_thread():
                            self._thread = None
                        return
                    else:
                        self._wake.wait(min(IDLE, LINGER - (now - idle_since)))
                burst = self._since_run >= EVERY and not self._stopping
                self._since_run = 0
            # Upkeep is optional: whatever stops it (a full disk, a damaged
            # ref) stops the next write too, which reports it to its caller.
            with contextlib.suppress(Exception):
                self.run_once(merge=not self._stopping, burst=burst)
            with self._wake:
                if self._stopping:
                    if self._thread is threading.current_thread():
                        self._thread = None
                    return

    def run_once(self, merge: bool = True, burst: bool = False) -> None:
        """Merge packs if worth it, checkpoint the journal and empty the
        trash.  The writer lock is held only to read and record the
        journal's progress: a call waits for no copy, sync or removal.  The
        last round before ``Vault.close`` does not merge: no write would come
        to retire the packs the merge replaced.  During a ``burst`` of
        writes, only packs of up to BURST_LIMIT objects are merged."""
        with self.lock.hold():
            self.commits.recover()
            through = self.commits.journal.last_seq()
            covered = self.commits.journal.checkpointed()
        try:
            replaced = self._merge(BURST_LIMIT if burst else MERGE_LIMIT) if merge else []
        except (OSError, ValueError):
            replaced = []  # packs retired or removed while it read them, or an index a power cut cut short
        if through > covered or replaced:
            # One sync makes the merged pack's name and every journaled move's
            # files durable; only then may the journal forget those moves and
            # the replaced packs go.
            durable.sync_filesystem(self.gitdir)
            if through > covered:
                with self.lock.hold():
                    self.commits.journal.checkpoint(through)
            with self._wake:
                self._redundant += replaced
        self.commits.empty_trash()
        if self.after_round is not None:
            self.after_round()

    def _merge(self, limit: int = MERGE_LIMIT) -> list[objects.PackInfo]:
        """Merge the smallest packs into one (without the writer lock: packs
        are never changed, and a pack still being written has its keep, so
        the merge never lists it) and return the packs it replaced.  The
        merged pack is synced before its rename; the replaced packs go only
        after the file system is synced (see :meth:`run_once`).  Packs of
        more than ``limit`` objects are left as they are."""
        held = {f"pack-{name}.pack" for name in self.commits.held()}
        with self._wake:  # replaced by the last merge already, waiting for a write to retire them
            held |= {info.pack.name for info in self._redundant}
        packs = [
            p
            for p in objects.list_packs(self.gitdir / "objects")
            if p.count <= min(limit, MERGE_LIMIT) and p.pack.name not in held
        ]
        if len(packs) < MERGE_AT:
            return []
        pruned = self.commits.pruned
        victims = objects.geometric_rollup(packs)
        merged = objects.merge(victims) if victims else None
        if merged is None or self.commits.pruned != pruned:
            return []
        pack, replaced = merged
        self.commits.install(pack)
        if self.commits.pruned != pruned:
            # An erasure removed objects while this merge copied them: the
            # merged pack may hold one again.  Everything else in it is still
            # in the packs it would have replaced, so it goes.
            stem = _stem_of(self.gitdir, pack)
            for suffix in (".idx", ".pack"):
                with contextlib.suppress(OSError):
                    os.unlink(stem.with_suffix(suffix))
            return []
        _date_after(_stem_of(self.gitdir, pack).with_suffix(".pack"), replaced)
        objects.remember(pack)
        objects.forget(replaced)
        mine = f"pack-{pack.name}.pack"  # the same objects merged again make the same pack
        return [info for info in replaced if info.pack.name != mine]

    def remove_redundant(self) -> None:
        """Retire the packs the last merge replaced: called at the start of a
        write, under the writer lock, so a git command started after a call
        returns never loses a pack it has listed.  Retiring is two renames a
        pack, into the trash; the upkeep removes the files later.  A write
        retires at most RETIRE_EACH packs, so no one call pays for a whole
        merge; the rest wait for the next writes (git finds their objects in
        the merged pack as well)."""
        with self._wake:
            redundant, self._redundant = self._redundant[:RETIRE_EACH], self._redundant[RETIRE_EACH:]
        if not redundant:
            return
        try:
            with self.commits.retiring():  # checked against git's multi-pack-index together
                for info in redundant:
                    self.commits.retire(info.pack)
        except OSError:
            # The disk refused a rename into the trash (xfs on a full disk;
            # a folder that cannot be written).  Housekeeping never fails
            # the write it comes before: the packs stay in git's sight,
            # whole (their objects are in the merged pack too), and a
            # later write retires them.
            with self._wake:
                self._redundant[:0] = redundant


def _stem_of(gitdir: Path, pack: objects.Pack) -> Path:
    return gitdir / "objects" / "pack" / f"pack-{pack.name}"


def _date_after(merged: Path, sources: list[objects.PackInfo]) -> None:
    """Date the merged pack a whole second after the newest pack it merged.
    Git's multi-pack-index gives an object found in several packs new to it
    to the most recently modified one (by the second; a tie goes by name),
    so an index that finds the merged pack and one it replaced beside each
    other attributes their objects to the merged pack, never to the pack
    vaultmem retires (:mod:`vaultmem.git.midx`)."""
    newest = 0
    for info in sources:
        with contextlib.suppress(OSError):
            newest = max(newest, int(os.stat(info.pack).st_mtime))
    with contextlib.suppress(OSError):
        st = os.stat(merged)
        if int(st.st_mtime) <= newest:
            os.utime(merged, (st.st_atime, newest + 1))


def _after_fork() -> None:
    """A forked child has no upkeep thread, and must not inherit a writer-lock
    mutex that the parent's thread held at the fork."""
    for upkeep in list(_ALL):
        upkeep.lock.reset_after_fork()
        upkeep._thread = None
        upkeep._wake = threading.Condition()
        upkeep._redundant = []


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
