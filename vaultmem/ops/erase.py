"""Erasure without rewriting history: ``forget``, ``redact`` and
``forget_matching`` destroy the keys of file versions, never commits.

In storage format 2 every file version is encrypted under a key of its own
(:mod:`vaultmem.core.shred`).  An erasure is two steps:

1. one ``forget`` commit on ``main``: who, when, the reason given and which
   file versions (``Vaultmem-Erased: <version> <blob>``, ids only: never the
   content, never the file's name); a file whose current content is erased
   leaves the memory in that same commit;
2. the keyring replaced by one without those keys (a new root commit: the
   keyring's history before it goes), and every copy of the keyrings before
   it removed from the disk: loose objects, packs, the journal, the trash.

The file versions to erase are listed on a first look (all a dry run
does), then listed again under the writer lock, on the memory the commit is
made on, whenever ``main`` moved in between (another process wrote, restored
or pushed): the commit records, and the result reports, exactly the versions
erased, and a file's current content is judged as the commit leaves it.

A crash between the two leaves the commit recorded and the keys alive: the
erasure is re-run by calling the same verb again (it finds the versions
still readable, and removes any keyring copy left behind).  The audit chain
stays whole: every commit keeps its id and its seal, and ``verify`` reports
erased versions as erased.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import pygit2

from vaultmem.core import paths
from vaultmem.core.crypto import Erasure
from vaultmem.core.paths import MemoryPath
from vaultmem.core.values import check_flag, check_moment, is_unicode
from vaultmem.core.versions import Filters, Version
from vaultmem.errors import ConflictError, NotFoundError, VaultError
from vaultmem.git import commits, objects
from vaultmem.git.snapshot import Snapshot
from vaultmem.ops import find as finding
from vaultmem.repo import keys
from vaultmem.repo.engine import _check_label
from vaultmem.repo.history import before_rename, walk_named
from vaultmem.repo.store import Change, Store

ERASED = "Vaultmem-Erased"
REASON = "Vaultmem-Reason"
MAX_REASON = 500


@dataclass(frozen=True)
class FileVersion:
    """One file version to erase: the version (commit) that wrote it, the
    path it was written at, its blob, and whether it is the file's content now."""

    version: str
    path: str
    blob: str
    current: bool

    def to_dict(self) -> dict[str, object]:
        return {"version": self.version, "path": self.path, "blob": self.blob, "current": self.current}


@dataclass(frozen=True)
class ErasureResult:
    """What an erasure did (or, with ``dry_run``, would do)."""

    dry_run: bool
    versions: tuple[FileVersion, ...]  # erased now (or to be erased)
    already: tuple[FileVersion, ...] = ()  # found, but erased before
    removed: tuple[str, ...] = ()  # current files that leave the memory
    commit: Version | None = None  # the forget commit (None: dry run, or nothing to erase)
    names_visible: bool = True  # file names stay readable in the trees (no sealed names)
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, object]:
        return {
            "dry_run": self.dry_run,
            "erased": [v.to_dict() for v in self.versions],
            "already_erased": [v.to_dict() for v in self.already],
            "removed": list(self.removed),
            "commit": self.commit.id if self.commit is not None else None,
            "names_visible": self.names_visible,
            "notes": list(self.notes),
        }


def check_reason(reason: object, dry_run: bool = False) -> str:
    if dry_run and reason is None:
        return ""
    if not isinstance(reason, str) or not reason.strip():
        raise VaultError("Error: an erasure needs a reason (for the audit record), such as 'GDPR request 4411'.")
    if len(reason) > MAX_REASON:
        raise VaultError(f"Error: the reason is longer than {MAX_REASON} characters.")
    if any(ord(ch) < 32 or ord(ch) == 127 or ch in "\u2028\u2029\u0085" for ch in reason):
        raise VaultError("Error: the reason must be one line without control characters.")
    if not is_unicode(reason):
        raise VaultError("Error: the reason is not valid Unicode text (it holds bytes that are not UTF-8).")
    return reason.strip()


Collect = Callable[[Snapshot], Sequence[FileVersion]]
"""Lists the file versions an erasure erases, as the memory ``main`` holds at
the snapshot given (the commit is made on that snapshot)."""


# -- finding what to erase ---------------------------------------------------------


def versions_of(store: Store, path: str, snap: Snapshot | None = None) -> list[FileVersion]:
    """Every file version ever stored at ``path`` (a file or a folder),
    following renames back, oldest first, in the history of ``snap``
    (default: ``main`` now)."""
    target = paths.parse(path, existing=True)
    if target.is_root:
        raise VaultError(
            "Error: forget takes a file or a folder below /memories; to erase everything a text matches, "
            "use forget_matching (`vaultmem forget --matching`)."
        )
    snap = store.snapshot() if snap is None else snap
    if snap.commit_id is None:
        raise NotFoundError(f"Error: no version of {target} in this vault: it has no history yet.")
    head = pygit2.Oid(raw=snap.commit_id)
    current_blobs = {oid for _, oid in snap.files(MemoryPath(()))}
    found: dict[bytes, FileVersion] = {}
    _collect(store, head, target, current_blobs, found, MOVED_IN_DEPTH)
    if not found:
        raise NotFoundError(f"Error: no version of {target} in this vault's history.", step="versions")
    return list(reversed(found.values()))


MOVED_IN_DEPTH = 64  # files moved into a folder, from a folder they were moved into, ... followed back this far


def _collect(
    store: Store,
    head: pygit2.Oid,
    target: MemoryPath,
    current_blobs: set[bytes],
    found: dict[bytes, FileVersion],
    depth: int,
) -> None:
    """Add to ``found`` every file version stored at ``target`` in the
    history of ``head``, following ``target``'s renames back, and, for a
    folder, each file moved into it from elsewhere back to where it came from."""
    repo = store.repo
    sealed = store.sealed_history()
    first: dict[MemoryPath, tuple[Version, pygit2.Commit, MemoryPath]] = {}  # each file's oldest version here
    for version, here in walk_named(repo, head, Filters(path=target), sealed):
        assert here is not None
        commit = repo[version.id].peel(pygit2.Commit)
        snap = store.snapshot_of(commit)
        for file_path, oid in _files_at(snap, here):
            # newest first: the last one seen is the oldest, the version that wrote it
            found[oid] = FileVersion(version.id, file_path.text, oid.hex(), oid in current_blobs)
            first[file_path] = (version, commit, here)
    if depth == 0:
        return
    for file_path, (version, commit, here) in first.items():
        if file_path == here or version.command != "rename" or not commit.parent_ids:
            continue
        came_from = before_rename(version, file_path, commit, sealed)
        folder_was = before_rename(version, here, commit, sealed)
        if came_from != file_path and came_from.parts[: len(folder_was.parts)] != folder_was.parts:
            _collect(store, commit.parent_ids[0], came_from, current_blobs, found, depth - 1)


def listing_versions_of(store: Store, path: str) -> Collect:
    """What lists :func:`versions_of` ``path`` on a snapshot (for :func:`erase`)."""
    return lambda snap: versions_of(store, path, snap)


def _files_at(snap: Snapshot, here: MemoryPath) -> Iterable[tuple[MemoryPath, bytes]]:
    entry = snap.entry(here) if not here.is_root else None
    if entry is None:
        return []
    if entry[0] != objects.MODE_TREE:
        return [(here, entry[1])]
    return list(snap.files(here))


def version_at(store: Store, version: str | datetime, path: str) -> FileVersion:
    """The file version of ``path`` in ``version`` (the content the file had then)."""
    target = paths.parse(path, existing=True)
    commit = store.commit_at(version)
    snap = store.snapshot_of(commit)
    entry = snap.entry(target)
    if entry is None or entry[0] == objects.MODE_TREE:
        raise NotFoundError(f"Error: no file {target} at version {version}.")
    oid = entry[1]
    writer = _writer(store, commit, target, oid)
    current = store.snapshot().entry(target)
    return FileVersion(writer, target.text, oid.hex(), current is not None and current[1] == oid)


def _writer(store: Store, commit: pygit2.Commit, target: MemoryPath, oid: bytes) -> str:
    """The version that wrote ``oid`` at ``target``: the oldest first-parent
    ancestor of ``commit`` still holding it there."""
    writer = commit
    repo = store.repo
    while writer.parent_ids:
        parent = repo[writer.parent_ids[0]].peel(pygit2.Commit)
        entry = store.snapshot_of(parent).entry(target)
        if entry is None or entry[1] != oid:
            break
        writer = parent
    return str(writer.id)


def matching(
    store: Store, pattern: str, *, regex: bool = False, ignore_case: bool = False, path: str | None = None
) -> list[FileVersion]:
    """Every file version whose content (or path) matches, as :func:`find`
    finds them in ``main``'s history (under the writer lock: the history of
    the snapshot a write is built on; if another program moves ``main``
    meanwhile, the commit is refused and the erasure lists them again)."""
    out: dict[str, FileVersion] = {}
    for match in finding.find(store, pattern, regex=regex, ignore_case=ignore_case, path=path):
        out.setdefault(match.blob, FileVersion(match.version, match.path, match.blob, match.current))
    return list(out.values())


def listing_matches(
    store: Store, pattern: str, *, regex: bool = False, ignore_case: bool = False, path: str | None = None
) -> Collect:
    """What lists the :func:`matching` file versions (for :func:`erase`)."""
    return lambda _snap: matching(store, pattern, regex=regex, ignore_case=ignore_case, path=path)


def retention_targets(
    store: Store, keep_for: int, now: float, snap: Snapshot | None = None
) -> tuple[list[FileVersion], int]:
    """The file versions written more than ``keep_for`` seconds before
    ``now`` that are not a file's current content in ``snap`` (default:
    ``main`` now) and whose key still exists; and how many such versions
    were written before the vault moved to format 2 (their shared keys
    cannot be destroyed one by one)."""
    cutoff = now - keep_for
    current = {oid for _, oid in (store.snapshot() if snap is None else snap).files(MemoryPath(()))}
    out: dict[bytes, FileVersion] = {}
    shared = 0
    for file_path, oid, commit in finding.file_versions(store, MemoryPath(())):
        if commit.author.time >= cutoff or oid in current or oid in out:
            continue
        blob = store.read_blob(oid)
        if store.keyring.nonce_of(blob) is None:
            shared += 1
        elif store.keyring.erasure_of(blob) is None:
            out[oid] = FileVersion(str(commit.id), file_path.text, oid.hex(), False)
    return list(out.values()), shared


def apply_retention(
    store: Store,
    keep_for: int | None = None,
    *,
    now: float | None = None,
    dry_run: bool = False,
    actor: str = "vaultmem-retention",
    session: str | None = None,
) -> ErasureResult:
    """Forget every version older than the policy's ``content_retention``
    (or ``keep_for`` seconds), other than each file's current one, as one
    audited ``forget`` commit (``Vaultmem-Erasure: retention``)."""
    check_flag("dry_run", dry_run)
    if now is not None:
        check_moment("now", now)
    if keep_for is None:
        keep_for = store.policy.content_retention
        if keep_for is None:
            raise VaultError(
                "Error: this vault's policy sets no content_retention; set one (`vaultmem policy set "
                "content_retention=365d`) or give keep_for."
            )
    when = store.clock() if now is None else now
    period = keep_for
    shared = 0

    def collect(snap: Snapshot) -> list[FileVersion]:
        nonlocal shared
        targets, shared = retention_targets(store, period, when, snap)
        return targets

    days, rest = divmod(keep_for, 86400)
    count, unit = (days, "day") if rest == 0 else (keep_for, "second")
    older = f"{count} {unit}{'' if count == 1 else 's'}"
    result = erase(
        store,
        collect,
        reason=f"content retention: older than {older}",
        actor=actor,
        session=session,
        dry_run=dry_run,
        what="retention",
    )
    if shared:
        note = (
            "1 older version is in storage format 1 with no shadow; its key is shared and cannot be destroyed "
            "alone, so retention leaves it."
            if shared == 1
            else f"{shared} older versions are in storage format 1 with no shadow; their shared keys cannot be "
            "destroyed one by one, so retention leaves them."
        )
        result = dataclasses.replace(result, notes=(*result.notes, note))
    return result


def from_matches(store: Store, matches: Sequence[finding.Match]) -> list[FileVersion]:
    """The file versions of matches a :func:`find` returned (checked: each must
    be a file version of this vault's history)."""
    out: dict[str, FileVersion] = {}
    for match in matches:
        if not isinstance(match, finding.Match) or not match.blob:
            raise VaultError("Error: forget_matching takes a text, or the list vault.find() returned.")
        entry = store.snapshot_of(store.commit_at(match.version)).entry(paths.parse(match.path))
        if entry is None or entry[1].hex() != match.blob:
            raise NotFoundError(f"Error: {match.path} at version {match.version[:10]} is not that file version.")
        out.setdefault(match.blob, FileVersion(match.version, match.path, match.blob, match.current))
    return list(out.values())


# -- erasing -------------------------------------------------------------------------


class _NothingLeft(Exception):
    """Raised by an erasure's ``build`` when, under the writer lock, none of
    its file versions is left to erase: no commit is made."""


@dataclass(frozen=True)
class _Plan:
    """What an erasure erases, judged on one snapshot of the memory."""

    live: tuple[FileVersion, ...]
    already: tuple[FileVersion, ...]
    blobs: dict[str, tuple[str, int]]  # each live version's key: (epoch, nonce)
    removed: tuple[MemoryPath, ...]  # current files holding erased content
    named: bool  # some erased version's name stays readable in the trees
    notes: tuple[str, ...]

    def result(self, dry_run: bool, commit: Version | None = None) -> ErasureResult:
        return ErasureResult(
            dry_run,
            self.live,
            self.already,
            tuple(p.text for p in self.removed),
            commit=commit,
            names_visible=self.named,
            notes=self.notes,
        )


def _plan(store: Store, snap: Snapshot, targets: Sequence[FileVersion]) -> _Plan:
    """Sort ``targets`` into the versions to erase and those erased before,
    each marked current or not, as ``snap`` (and its keyring) holds them."""
    keyring = snap.keyring
    files = list(snap.files(MemoryPath(())))
    current = {oid for _, oid in files}
    live: list[FileVersion] = []
    already: list[FileVersion] = []
    shared = 0
    blobs: dict[str, tuple[str, int]] = {}
    for target in targets:
        oid = bytes.fromhex(target.blob)
        target = dataclasses.replace(target, current=oid in current)
        blob = store.read_blob(oid)
        located = keyring.nonce_of(blob)
        if located is None:
            shared += 1
        elif keyring.erasure_of(blob) is not None:
            already.append(target)
        else:
            live.append(target)
            blobs[target.blob] = located
    if shared:
        raise VaultError(
            f"Error: {shared} of these file versions are in storage format 1 with no shadow (written "
            "after this vault's migration, by a clone still in format 1), under a data key they share with "
            "other versions, so they cannot be erased one by one. Nothing was erased."
        )
    doomed = {bytes.fromhex(t.blob) for t in live}
    removed = tuple(file_path for file_path, oid in files if oid in doomed)
    visible = [t for t in live if _name_visible(store, t)]
    notes = _notes(removed, visible, sealed=store.sealed_names)
    return _Plan(tuple(live), tuple(already), blobs, removed, bool(visible), notes)


def erase(
    store: Store,
    targets: Sequence[FileVersion] | Collect,
    *,
    reason: str | None,
    actor: str,
    session: str | None,
    dry_run: bool,
    what: str,
) -> ErasureResult:
    """Erase ``targets`` (file versions, or what lists them on a snapshot):
    one ``forget`` commit, then their keys destroyed.

    They are listed first without the writer lock (a dry run stops there);
    under the lock, on the snapshot the commit is built on, they are listed
    again if ``main`` moved since, and judged again (erased meanwhile,
    current or not): the commit records, and the result reports, exactly
    what is erased."""
    check_flag("dry_run", dry_run)
    reason = check_reason(reason, dry_run)
    if not dry_run:  # before any listing: the commit would refuse them
        _check_label("actor", actor)
        _check_label("session", session, optional=True)
    if store.keyring.format < 2:
        raise VaultError(
            "Error: this vault is in storage format 1, where file versions share their keys, so none can be "
            "erased alone. Run `vaultmem migrate` (Vault.migrate()) first: versions written after it can be erased."
        )
    checked_out = keys.keyring_worktrees(store.repo)
    if checked_out and not dry_run:
        raise ConflictError(
            f"Error: the git worktree {checked_out[0]}{' and more' if len(checked_out) > 1 else ''} has the "
            "vault's keyring checked out: its files hold a copy of the keys this erasure would destroy. Remove it "
            f"(`git worktree remove --force {checked_out[0]}`), then run the erasure again; nothing was changed."
        )
    if callable(targets):
        collect: Collect = targets
    else:
        fixed = list(targets)

        def collect(snap: Snapshot) -> list[FileVersion]:
            return fixed

    seen = store.snapshot()
    listed_at, listed = seen.commit_id, collect(seen)
    plan = _plan(store, seen, listed)
    if dry_run or not plan.live:
        if not dry_run:
            store.finish_erasure()  # an earlier run of this erasure may have left work: finish it
            store.finish_removal()
        return plan.result(dry_run)
    commits.step("erase-listed")  # listed; the writer lock is not held yet

    def build(snap: Snapshot) -> Change:
        nonlocal plan, listed_at, listed
        if snap.commit_id != listed_at:  # main moved since the versions were listed: list them again
            listed_at, listed = snap.commit_id, collect(snap)
        plan = _plan(store, snap, listed)
        if not plan.live:
            raise _NothingLeft
        live = plan.live
        files = "file version" if len(live) == 1 else "file versions"
        change = Change("forget", (MemoryPath(()),), subject=f"{len(live)} {files} ({what})")
        change.trailers.append(("Vaultmem-Erasure", what))
        change.trailers.append((REASON, reason))
        change.trailers.extend((ERASED, f"{t.version} {t.blob}") for t in live)
        change.deletes.extend(plan.removed)
        store.begin_erasure(plan.blobs)  # synced: a killed erasure is finished by the next writer
        commits.step("erase-begun")
        return change

    def destroy(version: Version) -> None:
        erasure = Erasure(version.id, actor, int(version.time.timestamp()), reason)
        store.destroy_keys_locked(plan.blobs, erasure)
        commits.step("erase-destroyed")
        store.end_erasure()

    try:
        version = store.mutate(build, actor=actor, session=session, after=destroy)
    except _NothingLeft:
        version = None
    except BaseException:
        with contextlib.suppress(VaultError, OSError):  # the first error is the one to report
            store.finish_erasure()  # the commit may have landed: finish it, or drop the record
        raise
    if version is None:  # erased meanwhile: nothing to commit
        store.finish_erasure()  # drops what an earlier attempt of this build recorded
        store.finish_removal()
    result = plan.result(False, version)
    bundles = keys.keyring_bundles(store.repo) if version is not None else []
    if bundles:
        kept = ", ".join(bundles[:3]) + (f" and {len(bundles) - 3} more" if len(bundles) > 3 else "")
        note = (
            f"The git bundle {kept} in the vault folder holds a keyring from before this erasure, with the keys it "
            "destroyed: vaultmem leaves files it did not write; move it out of the vault folder, or delete it."
        )
        result = dataclasses.replace(result, notes=(*result.notes, note))
    return result


def _name_visible(store: Store, target: FileVersion) -> bool:
    """Whether the name of ``target`` stays readable once it is erased: the
    version was written where names are not sealed (a vault without sealed
    names, or a commit from before it sealed them)."""
    if not store.sealed_names:
        return True
    try:
        return not store.snapshot(target.version).sealed
    except VaultError:
        return True


def _notes(removed: Sequence[MemoryPath], visible: Sequence[FileVersion], sealed: bool) -> tuple[str, ...]:
    notes = []
    if removed:
        held = "file holds erased content and leaves" if len(removed) == 1 else "files hold erased content and leave"
        notes.append(f"{len(removed)} current {held} the memory in the same commit.")
    if visible:
        names = sorted({t.path for t in visible})
        where = (
            "File names are not sealed in this vault"
            if not sealed
            else "These versions were written before this vault sealed its names"
        )
        one = len(names) == 1
        notes.append(
            f"{where}: the name{'' if one else 's'} "
            + ", ".join(names[:5])
            + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            + f" {'stays' if one else 'stay'} readable, without the key, in the trees of the versions that held "
            f"{'it' if one else 'them'} (`git log --stat`); the content does not."
        )
    elif sealed:
        notes.append("Names are sealed in this vault: each erased version's name is erased with its content.")
    return tuple(notes)
