"""Expiry: delete memory files nobody has read for a while, as one audited commit.

When a file was last *used* is the later of when it was last read and last
written.  Reads are not history, so they are kept outside it, in
``<vault>/vaultmem/reads``: an append-only log of ``<unix time>\\t<path>`` lines
(paths only, never content; paths are already visible in the git trees).  It
is disposable: a lost log loses no memory, and use falls back to the time of
the last commit that wrote the file, read from the history.  A path's read is
logged at most once a minute per process, so a busy view loop costs nothing.

:func:`expire` deletes every file unused for longer than a given time as one
commit (command ``expire``, one ``Vaultmem-Path`` per file), which ``restore``
can undo like any other.  Time comes from the vault's clock or ``now=``, so
tests never sleep.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

import pygit2

from vaultmem.core.paths import MemoryPath
from vaultmem.core.policy import parse_duration
from vaultmem.core.values import check_flag, check_moment
from vaultmem.git.snapshot import Snapshot
from vaultmem.repo.store import Change, Store

if TYPE_CHECKING:
    from vaultmem.core.versions import Version


@dataclass(frozen=True)
class StaleFile:
    """A file unused (unread and unwritten) since ``last_used``."""

    path: str
    last_used: datetime


@dataclass(frozen=True)
class ExpireResult:
    """The files found stale, and the commit that deleted them (None on a dry
    run, or when there was nothing to delete)."""

    stale: tuple[StaleFile, ...]
    version: Version | None


def last_written(vault: Store, snap: Snapshot, wanted: dict[MemoryPath, bytes]) -> dict[MemoryPath, int]:
    """For each file of ``wanted`` (path -> its blob id now), the time of the
    newest commit that wrote it: walk back while a parent holds the same blob.
    A merge that took a file whole from its other side passes the search on to
    that side, so a file another clone wrote keeps the time it was written."""
    found: dict[MemoryPath, int] = {}
    if snap.commit_id is None:
        return found
    repo = vault.repo
    waiting: dict[bytes, dict[MemoryPath, bytes]] = {snap.commit_id: dict(wanted)}
    queue: list[tuple[int, bytes]] = []
    commit = repo[pygit2.Oid(raw=snap.commit_id)].peel(pygit2.Commit)
    heapq.heappush(queue, (-commit.commit_time, snap.commit_id))
    while queue and len(found) < len(wanted):
        _, commit_id = heapq.heappop(queue)
        open_paths = waiting.pop(commit_id, None)
        if not open_paths:
            continue
        commit = repo[pygit2.Oid(raw=commit_id)].peel(pygit2.Commit)
        parents = [
            Snapshot(snap.read_raw, snap.keyring, snap.sizes, snap.trees, parent.raw) for parent in commit.parent_ids
        ]
        for path, oid in open_paths.items():
            source = next((parent for parent in parents if (parent.entry(path) or (0, b""))[1] == oid), None)
            if source is None:
                found[path] = commit.author.time
                continue
            assert source.commit_id is not None
            if source.commit_id not in waiting:
                parent_commit = repo[pygit2.Oid(raw=source.commit_id)].peel(pygit2.Commit)
                heapq.heappush(queue, (-parent_commit.commit_time, source.commit_id))
                waiting[source.commit_id] = {}
            waiting[source.commit_id][path] = oid
    return found


def _logged(vault: Store, used: dict[str, int], path: MemoryPath) -> int:
    """The last use the read log holds for ``path`` (-1: none); a write logged
    for a folder (a restore, a moved folder) counts for every file in it."""
    return max(
        used.get(vault.reads.stored(MemoryPath(path.parts[:depth]).text), -1) for depth in range(len(path.parts) + 1)
    )


def find_stale(vault: Store, snap: Snapshot, unread_for: int, now: float) -> list[tuple[MemoryPath, bytes, int]]:
    """Files of ``snap`` whose last use is ``unread_for`` seconds or more before ``now``."""
    files = dict(snap.files(MemoryPath(())))
    used = vault.reads.load()
    logged = {p: _logged(vault, used, p) for p in files}
    cutoff = now - unread_for
    # The history decides for every file the log alone would expire: a write
    # pulled from another clone is in the history, never in this clone's log.
    unknown = {p: oid for p, oid in files.items() if logged[p] <= cutoff}
    written = last_written(vault, snap, unknown) if unknown else {}
    stale = []
    for path, oid in sorted(files.items(), key=lambda item: item[0].text):
        last = max(logged[path], written.get(path, -1))
        if last <= cutoff:
            stale.append((path, oid, last))
    return stale


def expire(
    vault: Store,
    unread_for: int | str | timedelta,
    *,
    dry_run: bool = False,
    actor: str = "vaultmem",
    session: str | None = None,
    now: float | None = None,
) -> ExpireResult:
    """Delete every file unused for ``unread_for`` (``"30d"``, seconds, a
    timedelta) as one commit; with ``dry_run``, only say which."""
    check_flag("dry_run", dry_run)
    seconds = parse_duration(unread_for)
    moment = vault.clock() if now is None else check_moment("now", now)
    stale = find_stale(vault, vault.snapshot(), seconds, moment)
    listed = tuple(StaleFile(p.text, datetime.fromtimestamp(max(last, 0), tz=timezone.utc)) for p, _, last in stale)
    if dry_run or not stale:
        return ExpireResult(listed, None)

    cutoff = moment - seconds

    def build(snap: Snapshot) -> Change:
        # A file written (or replaced) or read since it was found stale is in use again: keep it.
        used = vault.reads.load()
        gone = [
            p
            for p, oid, _ in stale
            if (entry := snap.entry(p)) is not None and entry[1] == oid and _logged(vault, used, p) <= cutoff
        ]
        change = Change("expire", tuple(gone))
        for path in gone:
            change.delete(path)
        return change

    version = vault.mutate(build, actor=actor, session=session, skip_if_unchanged=True)
    if version is None:
        return ExpireResult((), None)  # every stale file was written again meanwhile
    kept = vault.reads.load()
    gone = {vault.reads.stored(p) for p in version.paths}
    vault.reads.compact({p: t for p, t in kept.items() if p not in gone})
    deleted = set(version.paths)
    return ExpireResult(tuple(s for s in listed if s.path in deleted), version)
