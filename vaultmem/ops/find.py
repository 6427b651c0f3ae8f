"""Find every version of every file, anywhere in the history, whose content
matches a text or a regular expression: the first step of answering an
erasure request ("where is this customer's e-mail address?").

Each file version is decrypted and searched once: the history is walked
oldest first, each commit compared with its parents folder by folder (equal
folders are skipped unopened), and a file version is reported with the
version that wrote it.  Results name paths, versions and counts, never the
content.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

import pygit2

from vaultmem.core import paths
from vaultmem.core.paths import MemoryPath
from vaultmem.core.values import BACKTRACKS, BACKTRACKS_FIX, backtracks, compile_regex
from vaultmem.core.versions import moment
from vaultmem.errors import ErasedError, NotFoundError, VaultError
from vaultmem.git import objects
from vaultmem.git.snapshot import Snapshot
from vaultmem.repo.history import CommitLike, oldest_first
from vaultmem.repo.store import Store

MAX_PATTERN = 10_000  # characters


@dataclass(frozen=True)
class Match:
    """One file version that matches: the file's path, the version (commit)
    that wrote that content there, when and by whom, how many times its
    content matches, whether its path matches too (names are personal data:
    ``/memories/customers/ada_lovelace.md``), and whether it is still the
    file's content now."""

    path: str
    version: str
    time: datetime
    actor: str
    count: int
    current: bool
    in_name: bool = False
    blob: str = ""  # the file version's object id (what redact and forget_matching erase)

    def to_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "version": self.version,
            "time": self.time.isoformat().replace("+00:00", "Z"),
            "actor": self.actor,
            "count": self.count,
            "current": self.current,
            "in_name": self.in_name,
            "blob": self.blob,
        }


def matcher(pattern: str, regex: bool, ignore_case: bool) -> re.Pattern[str]:
    if not isinstance(pattern, str) or not pattern:
        raise VaultError("Error: give a non-empty text or regular expression to find.")
    if len(pattern) > MAX_PATTERN:
        raise VaultError(f"Error: the pattern is longer than {MAX_PATTERN:,} characters.")
    try:
        compiled = compile_regex(pattern if regex else re.escape(pattern), re.IGNORECASE if ignore_case else 0)
        ambiguous = regex and backtracks(compiled)
    except RecursionError:  # parsed and compiled, yet too deep to look at its shape
        raise VaultError(f"Error: {pattern!r} is not a regular expression (its groups nest too deeply).") from None
    except re.error as err:
        raise VaultError(f"Error: {pattern!r} is not a regular expression ({err}).") from err
    if ambiguous:
        raise VaultError(
            f"Error: the regular expression {pattern!r} {BACKTRACKS}, which can take years on some text. "
            + BACKTRACKS_FIX
        )
    if compiled.search("") is not None:  # "ada|", "(ada)?", "\s*": every file holds empty text
        raise VaultError(
            f"Error: the regular expression {pattern!r} matches empty text, so it would match every file "
            "(and an erasure by it would erase them all). Give one that needs at least one character."
        )
    return compiled


def _count(compiled: re.Pattern[str], text: str) -> int:
    """How many times ``compiled`` matches at least one character of ``text``
    (a match of no text, as ``\b`` makes, is no finding)."""
    return sum(1 for found in compiled.finditer(text) if found.end() > found.start())


def find(
    store: Store, pattern: str, *, regex: bool = False, ignore_case: bool = False, path: str | None = None
) -> list[Match]:
    """Every file version in ``main``'s history (below ``path``, if given)
    whose decrypted content or whose path matches ``pattern`` (a text, or
    with ``regex`` a Python regular expression), oldest first."""
    compiled = matcher(pattern, regex, ignore_case)
    within = paths.parse(path, existing=True) if path is not None else MemoryPath(())
    current = dict(store.snapshot().files(within))
    found: list[Match] = []
    held = False
    for file_path, oid, commit in file_versions(store, within):
        held = True
        try:
            text = store.keyring.open(file_path.text, store.read_blob(oid)).decode("utf-8", "replace")
        except ErasedError:
            continue  # erased: nothing left to match
        count = _count(compiled, text)
        in_name = _count(compiled, file_path.text) > 0
        if count or in_name:
            found.append(
                Match(
                    path=file_path.text,
                    version=str(commit.id),
                    time=moment(commit.author.time),
                    actor=commit.author.name,
                    count=count,
                    current=current.get(file_path) == oid,
                    in_name=in_name,
                    blob=oid.hex(),
                )
            )
    if not held and not within.is_root:  # a mistyped path is no "nothing matches" (nor "nothing to erase")
        if store.head() is None:
            raise NotFoundError(f"Error: no version of {within} in this vault: it has no history yet.")
        raise NotFoundError(f"Error: no version of {within} in this vault's history.", step="versions")
    return found


def file_versions(store: Store, within: MemoryPath) -> Iterator[tuple[MemoryPath, bytes, CommitLike]]:
    """Every file version below ``within`` in ``main``'s history, oldest
    first, once per path and blob, with the version (commit) that wrote it."""
    head = store.head()
    if head is None:
        return
    repo = store.repo
    seen: set[tuple[str, bytes]] = set()
    for commit in oldest_first(repo, head):  # the parents commits record: no grafts or shallow file hides one
        snap = store.snapshot_of(commit)
        # Against the first parent: what a merge took whole from its other side
        # was found, with the version that wrote it, when that side was walked.
        before = store.snapshot_of(repo[commit.parent_ids[0]].peel(pygit2.Commit)) if commit.parent_ids else None
        for file_path, oid in _new_files(snap, before, within):
            key = (file_path.text, oid)
            if key in seen:
                continue
            seen.add(key)
            yield file_path, oid, commit


def _new_files(snap: Snapshot, before: Snapshot | None, within: MemoryPath) -> Iterator[tuple[MemoryPath, bytes]]:
    """The files of ``snap`` below ``within`` whose blob differs from ``before``'s."""
    mine = snap.entry(within) if not within.is_root else _root(snap)
    theirs = (before.entry(within) if not within.is_root else _root(before)) if before is not None else None
    if mine is None:
        return
    yield from _changed(snap, within, mine, theirs)


def _root(snap: Snapshot) -> tuple[int, bytes] | None:
    return (objects.MODE_TREE, snap.memories_id) if snap.memories_id is not None else None


def _changed(
    snap: Snapshot, path: MemoryPath, mine: tuple[int, bytes], theirs: tuple[int, bytes] | None
) -> Iterator[tuple[MemoryPath, bytes]]:
    if mine == theirs:
        return
    if mine[0] != objects.MODE_TREE:
        yield path, mine[1]
        return
    entries = snap.trees.get(snap.read_raw, mine[1])
    old = snap.trees.get(snap.read_raw, theirs[1]) if theirs is not None and theirs[0] == objects.MODE_TREE else {}
    for name, entry in entries.items():
        yield from _changed(snap, snap.child_path(path, name, entry), entry, old.get(name))
