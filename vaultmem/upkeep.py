"""Upkeep after the calls return: merging small packs and checkpointing the
journal, in a background thread, so no acknowledged call waits for it.

Each write adds one small pack.  Once writes pause (``IDLE`` seconds without
one), or every ``EVERY`` writes during a long burst, the thread takes the
writer lock, merges the smallest packs geometrically (as ``git repack
--geometric=2`` would) into one new pack, and lets go; then it syncs the file
system *without* the lock, and takes it once more to record the checkpoint in
the journal and remove the packs the merge replaced (only now that the merged
pack is durable).  A thread runs only while there is work: it ends after
``IDLE`` seconds with nothing to do, and a forked child starts its own.
Everything it does is crash-safe: a merged pack is complete and synced
before it is renamed into place, and the packs it replaces go only after that.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from pathlib import Path

from . import durable, objects
from .commits import CommitPath

IDLE = 0.05  # seconds without a write before upkeep runs
EVERY = 32  # writes after which upkeep runs even without a pause
MERGE_AT = 16  # packs that make a merge worth it
# Packs of more objects than this are no longer merged: copying them would
# hold the writer lock for long.  A vault gains such a pack about every 3,000
# commits (five objects a commit); `git gc` packs them properly.
MERGE_LIMIT = 16_384

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
        self._redundant: list[Path] = []  # packs a merge replaced, removed by the next write
        _ALL.add(self)

    def poke(self) -> None:
        """A write happened: schedule upkeep."""
        with self._wake:
            self._pokes += 1
            self._since_run += 1
            if self._thread is None or not self._thread.is_alive():
                self._stopping = False
                self._thread = threading.Thread(target=self._loop, name="vaultmem-upkeep", daemon=True)
                self._thread.start()
            self._wake.notify()

    def stop(self) -> None:
        """Run what is pending now and end the thread (``Vault.close``)."""
        with self._wake:
            thread, self._stopping = self._thread, True
            self._wake.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._stopping and self._since_run < EVERY:
                    seen = self._pokes
                    self._wake.wait(IDLE)
                    if self._pokes == seen:
                        break  # a quiet pause: time for upkeep
                self._since_run = 0
                started = self._pokes
            # Upkeep is optional: whatever stops it (a full disk, a damaged
            # ref) stops the next write too, which reports it to its caller.
            with contextlib.suppress(Exception):
                self.run_once()
            with self._wake:
                if self._stopping or self._pokes == started:  # nothing came in meanwhile
                    if self._thread is threading.current_thread():
                        self._thread = None
                    return

    def run_once(self) -> None:
        """Merge packs if worth it, then checkpoint the journal."""
        with self.lock.hold():
            self.commits.recover()
            self._merge()
            through = self.commits.journal.last_seq()
            covered = self.commits.journal.checkpointed()
        if through > covered:
            durable.sync_filesystem(self.gitdir)  # without the lock: writers go on meanwhile
            with self.lock.hold():
                self.commits.journal.checkpoint(through)

    def _merge(self) -> None:
        """One merge under the writer lock: the merged pack is synced before
        it is renamed into place, so the packs it replaces may go (see
        :meth:`remove_redundant`)."""
        packs = [p for p in objects.list_packs(self.gitdir / "objects") if p.count <= MERGE_LIMIT]
        if len(packs) < MERGE_AT:
            return
        victims = objects.geometric_rollup(packs)
        merged = objects.merge(victims) if victims else None
        if merged is None:
            return
        pack, replaced = merged
        self.commits.install(pack, sync=True)
        objects.remember(pack)
        objects.forget(replaced)
        mine = f"pack-{pack.name}.pack"  # the same objects merged again make the same pack
        self._redundant += [info.pack for info in replaced if info.pack.name != mine]

    def remove_redundant(self) -> None:
        """Remove the packs the last merge replaced (their objects are in a
        synced pack).  Called at the start of a write, under the writer lock:
        never in the background, where it could pull a pack from under a git
        command that has just listed it."""
        redundant, self._redundant = self._redundant, []
        for pack in redundant:
            objects.remove_pack(pack)


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
