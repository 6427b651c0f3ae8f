"""Restore and undo: make the memory (or one path) as it was at an earlier
version, as one new commit.  History is never rewritten; undoing an undo
brings the change back."""

from __future__ import annotations

from datetime import datetime

import pygit2

from vaultmem.core import paths
from vaultmem.core.paths import MemoryPath
from vaultmem.core.values import is_int
from vaultmem.core.versions import RESTORED_FROM, Version
from vaultmem.errors import ConflictError, ErasedError, VaultError
from vaultmem.git import objects
from vaultmem.git.snapshot import Snapshot
from vaultmem.repo.engine import file_named_as_folder
from vaultmem.repo.history import read_commit
from vaultmem.repo.store import Change, Store


def restore(
    store: Store, at: str | datetime, path: str | None = None, *, actor: str, session: str | None
) -> Version | None:
    """Make the whole memory (or one path) exactly as it was at ``at``, as a
    new commit; a path that did not exist then is removed.  None when nothing
    would change."""
    return _restore(store, "restore", store.commit_at(at), path, actor, session)


def undo(store: Store, n: int = 1, *, actor: str, session: str | None) -> Version | None:
    """Make the memory as it was ``n`` versions ago, as a new commit."""
    if not is_int(n) or n < 1:
        raise VaultError("Error: undo takes a number of versions of at least 1.")
    seen = store.head()  # the last version as the caller sees it: the one undo takes back
    target = seen
    for steps in range(n):  # only n steps back (the parents the commits record), however long the history
        if target is None:
            raise VaultError(f"Error: cannot undo {n} version{'s' if n != 1 else ''}: the vault has {steps}.")
        parents = read_commit(store.repo, target).parent_ids
        target = parents[0] if parents else None
    commit = store.repo[target].peel(pygit2.Commit) if target is not None else None
    seen_raw = seen.raw if seen is not None else None
    return _restore(store, "undo", commit, None, actor, session, pinned=True, seen=seen_raw)  # None: the empty memory


def _restore(
    store: Store,
    command: str,
    commit: pygit2.Commit | None,
    path: str | None,
    actor: str,
    session: str | None,
    *,
    pinned: bool = False,
    seen: bytes | None = None,
) -> Version | None:
    """With ``pinned`` (undo), ``seen`` is the head the caller saw: a version
    written since, while the undo waited for the writer lock, would be taken
    back too, so the undo is refused instead."""
    target = paths.parse(path) if path is not None else MemoryPath(())
    source = store.snapshot_of(commit)
    origin = str(commit.id) if commit is not None else "0" * 40

    def build(snap: Snapshot) -> Change:
        if pinned and snap.commit_id != seen:
            moved = f"version {snap.commit_id.hex()[:10]} was written" if snap.commit_id else "main was moved"
            raise ConflictError(
                f"Error: cannot undo: {moved} while the undo waited, and undoing now would take it back "
                "too. Nothing was changed. Look at the history, then undo again.",
                step="versions",
            )
        if target.dir_hint:  # `/memories/a.txt/` names a folder, never the file a.txt (as read() says)
            for held, at in ((source, origin), (snap, None)):
                if held.kind(target) == "file":
                    raise file_named_as_folder(path or "", target, at)
        _refuse_erased(store, source, snap, target, command)
        change = Change(command, (target,), trailers=[(RESTORED_FROM, origin)])
        blocker = snap.file_above(target)  # a file stands where one of target's folders was
        if blocker is not None:
            if source.entry(target) is None:
                return change  # absent then, and it cannot exist now: nothing to change
            raise ConflictError(
                f"Error: cannot {command} {target}: {blocker} is a file now, so it cannot hold {target}. "
                f"Nothing was changed. Restore {blocker} as it was at {origin[:10]} (the folder and all "
                f"it held), or rename or delete the file {blocker} first."
            )
        entry = source.entry(target)  # the root too: /memories itself
        if entry is not None and entry[0] == objects.MODE_TREE and store.sealed_names and not source.sealed:
            # A folder from before the vault sealed its names holds real names:
            # bring its files back one by one, each stored under its token path.
            change.restores.append((target, None))
            change.restores += [(path, (objects.MODE_BLOB, oid)) for path, oid in source.files(target)]
        else:
            change.restores.append((target, entry))
        return change

    return store.mutate(build, actor=actor, session=session, skip_if_unchanged=True)


def _refuse_erased(store: Store, source: Snapshot, now: Snapshot, target: MemoryPath, command: str) -> None:
    """An erased version is never brought back: restore and undo refuse, naming the erasure."""
    entry = source.entry(target) if not target.is_root else None
    if target.is_root or (entry is not None and entry[0] == objects.MODE_TREE):
        files = list(source.files(target))
        advice = "Restore the other files one path at a time, or an earlier version."
    else:
        files = [(target, entry[1])] if entry is not None else []
        advice = f"Restore {target} from another version, one whose content of it was not erased."
    current = {oid for _, oid in now.files(MemoryPath(()))}
    for file_path, oid in files:
        if oid in current:
            continue  # in the memory now: nothing to bring back
        erasure = store.keyring.erasure_of(store.read_blob(oid))
        if erasure is not None:
            raise ErasedError(
                f"Error: cannot {command}: the version of {file_path} it would bring back was "
                f"{erasure.describe()}, and erased content is never restored. Nothing was changed. {advice}",
                erasure.commit,
            )
