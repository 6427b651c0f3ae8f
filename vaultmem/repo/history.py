"""The memory history as an auditor reads it: versions, their trailers, the
filters of ``vault.history`` and the times ``at=`` accepts.

Pure functions over commits; the vault (store) supplies the repository.

The history is the chain of parents the commits themselves record.  git and
libgit2 also honour a ``shallow`` file and ``info/grafts``, which make chosen
commits show other parents (or none) and so hide versions; when either file
exists the history is read from the raw commit objects instead (see
:func:`commits`), and ``verify()`` reports the file.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Protocol

import pygit2

from vaultmem.core.names import MARKER, Names, is_sealed
from vaultmem.core.paths import MemoryPath, parse_stored
from vaultmem.core.versions import (
    Filters,
    Person,
    Version,
    parse_trailers,
    utc_text,
)
from vaultmem.errors import IntegrityError, NotFoundError, VaultError
from vaultmem.git import objects


class CommitLike(Protocol):
    """What the history reads of a commit: a libgit2 ``pygit2.Commit`` or a
    :class:`RawCommit` parsed from the object's bytes."""

    @property
    def id(self) -> pygit2.Oid: ...
    @property
    def tree_id(self) -> pygit2.Oid: ...
    @property
    def message(self) -> str: ...
    @property
    def author(self) -> Person: ...
    @property
    def parent_ids(self) -> Sequence[pygit2.Oid]: ...


# -- commits as they are stored -------------------------------------------------

# Files in the git directory that make git and libgit2 show other parents than
# a commit records (``shallow``: none; ``info/grafts``: any); vaultmem writes neither.
HIDING_FILES = ("shallow", "info/grafts")


def hiding_files(repo: pygit2.Repository) -> list[str]:
    """Which of :data:`HIDING_FILES` the repository holds."""
    return [name for name in HIDING_FILES if os.path.lexists(os.path.join(repo.path, name))]


@dataclass(frozen=True)
class Signed:
    name: str
    time: int


def _signed(value: bytes) -> Signed:
    """``Name <email> 1790000000 +0000``, read as libgit2 reads it (leniently:
    ``verify()`` checks that the author is the version's actor)."""
    text = value.decode("utf-8", "replace")
    start, end = text.rfind("<"), text.rfind(">")
    if start < 0 or end < start:
        return Signed(text.strip(), 0)
    fields = text[end + 1 :].split()
    return Signed(text[:start].strip(), int(fields[0]) if fields and fields[0].isdigit() else 0)


class RawCommit:
    """A commit read from its object's bytes: the parents are the ones it
    records.  The tree and parents are read at once (ValueError if they are
    not what git would read); the author, time and message when asked for."""

    def __init__(self, oid: pygit2.Oid, data: bytes) -> None:
        if data[:5] != b"tree " or data[45:46] != b"\n":
            raise ValueError("it names no tree")
        self.id = oid
        self._data = data
        end = data.find(b"\n\n")
        self._end = end if end >= 0 else len(data)  # where the headers end
        self.tree_id = pygit2.Oid(hex=data[5:45].decode("ascii"))
        parents: list[pygit2.Oid] = []
        at = 46
        while data.startswith(b"parent ", at):  # git reads parents right after the tree only
            if data[at + 47 : at + 48] != b"\n":
                raise ValueError("a parent is not an object id")
            parents.append(pygit2.Oid(hex=data[at + 7 : at + 47].decode("ascii")))
            at += 48
        self.parent_ids = tuple(parents)
        if data.find(b"\nauthor ", at - 1, self._end) < 0:
            raise ValueError("it names no author")

    def _header(self, name: bytes) -> bytes | None:
        at = self._data.find(b"\n" + name + b" ", 0, self._end)
        if at < 0:
            return None
        stop = self._data.find(b"\n", at + 1, self._end)
        return self._data[at + len(name) + 2 : stop if stop >= 0 else self._end]

    @property
    def committer_line(self) -> bytes:
        """The committer header as stored (``Name <email> time zone``)."""
        return self._header(b"committer") or b""

    @cached_property
    def author(self) -> Signed:
        return _signed(self._header(b"author") or b"")

    @cached_property
    def commit_time(self) -> int:
        committer = self._header(b"committer")
        return _signed(committer).time if committer is not None else self.author.time

    @cached_property
    def message(self) -> str:
        return self._data[self._end + 2 :].decode("utf-8", "replace").lstrip("\n")


class UnreadableVersion(IntegrityError):
    """A commit of the history is missing, damaged or not a commit."""

    def __init__(self, oid: pygit2.Oid, detail: str) -> None:
        self.oid = str(oid)
        self.detail = detail
        super().__init__(f"Error: version {oid} of the history {detail}; run `vaultmem verify`.")


def _one_line(err: BaseException) -> str:
    text = str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)
    return " ".join(text.split()) or type(err).__name__


_KIND_NAMES = {2: "tree", 3: "blob", 4: "tag"}


class OversizedObject(ValueError):
    """An object whose header declares more bytes than vaultmem ever writes
    (:data:`~vaultmem.git.objects.MAX_OBJECT_BYTES`): refused unread."""

    def __init__(self, oid: pygit2.Oid, size: int) -> None:
        self.size = size
        super().__init__(
            f"object {oid} declares {size:,} bytes, more than vaultmem ever writes "
            f"({objects.MAX_OBJECT_BYTES:,} at most): it was forged or damaged, and is refused unread"
        )


def check_size(repo: pygit2.Repository, oid: pygit2.Oid) -> None:
    """:class:`OversizedObject` if ``oid``'s header declares more than
    vaultmem ever writes (read from the header alone, nothing inflated)."""
    _, size = repo.odb.read_header(oid)
    if size > objects.MAX_OBJECT_BYTES:
        raise OversizedObject(oid, size)


def read_object(repo: pygit2.Repository, oid: pygit2.Oid) -> tuple[int, bytes]:
    """An object's kind and bytes, like ``repo.odb.read``, but an object whose
    header declares more than vaultmem ever writes is refused before it is
    inflated (:class:`OversizedObject`, a ValueError): a zlib bomb of a few
    MB must not make a read allocate gigabytes."""
    check_size(repo, oid)
    kind, data = repo.odb.read(oid)
    return int(kind), bytes(data)


def read_commit(repo: pygit2.Repository, oid: pygit2.Oid) -> RawCommit:
    """The commit ``oid`` as stored; :class:`UnreadableVersion` if it is missing,
    damaged (git's own checks: zlib, the object's id), too large or not a commit."""
    try:
        kind, data = read_object(repo, oid)
    except KeyError as err:
        raise UnreadableVersion(oid, f"is missing ({_one_line(err)})") from err
    except OversizedObject as err:
        raise UnreadableVersion(
            oid, f"is refused unread: it declares {err.size:,} bytes, more than vaultmem ever writes"
        ) from err
    except (ValueError, pygit2.GitError) as err:
        raise UnreadableVersion(oid, f"is damaged ({_one_line(err).removeprefix(f'{oid}: ')})") from err
    if kind != pygit2.enums.ObjectType.COMMIT:
        raise UnreadableVersion(oid, f"is a {_KIND_NAMES.get(int(kind), 'git object')}, not a commit")
    try:
        return RawCommit(oid, bytes(data))
    except ValueError as err:
        raise UnreadableVersion(oid, f"is malformed ({_one_line(err)})") from err


def readable(repo: pygit2.Repository, commit: pygit2.Commit) -> CommitLike:
    """``commit``, or the same commit read from its bytes when libgit2 cannot
    decode it: git keeps an ``encoding`` header as written (vaultmem writes
    none), and one naming an unknown codec, or one the message is not in,
    makes libgit2 raise on every read of the message or the author."""
    encoding = commit.message_encoding
    if encoding is None:
        return commit
    try:
        for raw in (commit.raw_message, commit.author.raw_name, commit.committer.raw_name):
            raw.decode(encoding)
    except (LookupError, ValueError):  # an unknown codec; UnicodeDecodeError is a ValueError
        return read_commit(repo, commit.id)
    return commit


def raw_commits(repo: pygit2.Repository, starts: Sequence[pygit2.Oid]) -> Iterator[RawCommit]:
    """The commits reachable from ``starts`` through the parents they record,
    newest first (by commit time, as git orders them), each once.  A commit
    with one parent and nothing else waiting is followed without sorting."""
    seen: set[bytes] = set()
    queue: list[tuple[int, int, RawCommit]] = []  # (newest first, then first found, the commit)
    order = itertools.count()

    def fresh(oids: Sequence[pygit2.Oid]) -> RawCommit | None:
        """Read the unseen ``oids``; the one to go on with if it is alone, else queue them."""
        found = []
        for oid in oids:
            if oid.raw not in seen:
                seen.add(oid.raw)
                found.append(read_commit(repo, oid))
        if len(found) == 1 and not queue:
            return found[0]
        for commit in found:
            heapq.heappush(queue, (-commit.commit_time, next(order), commit))
        return None

    current = fresh(starts)
    while True:
        if current is None:
            if not queue:
                return
            current = heapq.heappop(queue)[2]
        yield current
        current = fresh(current.parent_ids)


def commits(repo: pygit2.Repository, head: pygit2.Oid) -> Iterator[CommitLike]:
    """``main``'s commits newest first, through the parents they record.

    Without a shallow or grafts file libgit2's walk gives exactly that, and is
    the fastest way through a long history; with one, the commits are read
    from their bytes.  If libgit2 fails on a commit, or its walk ends at a
    commit that records parents (a shallow file that appeared meanwhile), the
    walk goes on from the raw commits, which names a damaged version in an
    :class:`UnreadableVersion` (an ``IntegrityError``), going on from the
    last commit's parents (libgit2 had walked every commit newer than it).
    """
    if hiding_files(repo):
        yield from raw_commits(repo, [head])
        return
    last: pygit2.Commit | None = None
    walker: Iterator[pygit2.Commit] = iter(())
    with contextlib.suppress(KeyError, ValueError, pygit2.GitError):  # the head itself is damaged
        walker = repo.walk(head, pygit2.enums.SortMode.NONE)
    while True:
        try:
            commit = next(walker)
        except StopIteration:
            break
        except (KeyError, ValueError, pygit2.GitError, MemoryError):
            break  # read on from the objects below, which names the damaged one (or a zlib bomb)
        last = commit
        yield readable(repo, commit)
    rest = [head] if last is None else list(read_commit(repo, last.id).parent_ids)
    if rest:
        yield from raw_commits(repo, rest)


def oldest_first(repo: pygit2.Repository, head: pygit2.Oid) -> Iterator[CommitLike]:
    """``main``'s commits, each after every parent it records (oldest first):
    libgit2's topological walk, one commit at a time, unless a shallow or
    grafts file would make it show other parents than the commits record;
    then the commits read from their bytes (:func:`commits`), ordered here."""
    if not hiding_files(repo):
        yield from repo.walk(head, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
        return
    yield from _parents_first(list(commits(repo, head)))


def _parents_first(newest: list[CommitLike]) -> Iterator[CommitLike]:
    """The commits of ``newest`` (newest first), each after those of its
    parents among them; the oldest by time first, so unrelated lines keep
    their order, and a first parent before the others."""
    by_id = {c.id.raw: c for c in newest}
    placed: set[bytes] = set()
    for root in reversed(newest):
        stack = [root]
        while stack:
            commit = stack[-1]
            if commit.id.raw in placed:
                stack.pop()
                continue
            waiting = [by_id[p.raw] for p in commit.parent_ids if p.raw in by_id and p.raw not in placed]
            if waiting:
                stack.extend(reversed(waiting))  # the first parent first
            else:
                placed.add(commit.id.raw)
                yield commit
                stack.pop()


def descends(repo: pygit2.Repository, tip: pygit2.Oid, ancestor: pygit2.Oid) -> bool:
    """Whether ``ancestor`` is an ancestor of ``tip`` (not ``tip`` itself)
    through the parents the commits record: libgit2's answer, unless a
    shallow or grafts file would make it answer for other parents."""
    if not hiding_files(repo):
        return repo.descendant_of(tip, ancestor)
    return tip != ancestor and any(commit.id == ancestor for commit in commits(repo, tip))


def merge_base(repo: pygit2.Repository, a: pygit2.Oid, b: pygit2.Oid) -> pygit2.Oid | None:
    """A newest common ancestor of ``a`` and ``b`` through the parents the
    commits record (None: none), as :func:`descends` reads them."""
    if not hiding_files(repo):
        return repo.merge_base(a, b)
    ours = {commit.id.raw for commit in commits(repo, a)}
    return next((commit.id for commit in commits(repo, b) if commit.id.raw in ours), None)


def merge_bases(repo: pygit2.Repository, ones: Sequence[pygit2.Oid], others: Sequence[pygit2.Oid]) -> list[pygit2.Oid]:
    """Every best common ancestor of ``ones`` and ``others`` (each as if its
    commits were merged): the commits both reach that no other such commit
    descends from, oldest first ([]: none).  Two tips that each merged the
    other's earlier tip (a criss-cross) have two."""
    found: dict[bytes, pygit2.Oid] = {}
    for one in ones:
        for other in others:
            base = merge_base(repo, one, other)
            if base is not None:
                found[base.raw] = base
    if not found:
        return []
    # A best common ancestor that is not one of these is no ancestor of them
    # either: both sides reach it past them (a criss-cross).
    hide = list(found.values())
    mine = {commit.id.raw for commit in reached_since(repo, ones, hide)}
    both = [commit for commit in reached_since(repo, others, hide) if commit.id.raw in mine]
    below = {parent.raw for commit in both for parent in commit.parent_ids}
    candidates = hide + [commit.id for commit in both if commit.id.raw not in below]
    best = [c for c in candidates if not any(d != c and descends(repo, d, c) for d in candidates)]
    return sorted(best, key=lambda oid: (read_commit(repo, oid).commit_time, str(oid)))


def reached_since(
    repo: pygit2.Repository, tips: Sequence[pygit2.Oid], bases: Sequence[pygit2.Oid]
) -> Iterator[CommitLike]:
    """The commits any of ``tips`` reaches and none of ``bases`` does, through
    the parents they record, each after its parents (oldest first)."""
    if not hiding_files(repo):
        walker = repo.walk(None, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
        for tip in tips:
            walker.push(tip)
        for base in bases:
            walker.hide(base)
        yield from walker
        return
    known = {c.id.raw for c in raw_commits(repo, bases)} if bases else set()
    unique = {c.id.raw: c for c in raw_commits(repo, tips) if c.id.raw not in known}
    yield from _parents_first(list(unique.values()))


def added_since(repo: pygit2.Repository, tip: pygit2.Oid, base: pygit2.Oid | None) -> Iterator[CommitLike]:
    """The commits ``tip`` reaches and ``base`` does not, through the parents
    they record, each after its parents (oldest first), one at a time."""
    if not hiding_files(repo):
        walker = repo.walk(tip, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
        if base is not None:
            walker.hide(base)
        yield from walker
        return
    known = {c.id.raw for c in commits(repo, base)} if base is not None else set()
    yield from (c for c in oldest_first(repo, tip) if c.id.raw not in known)


def first_parents(repo: pygit2.Repository, head: pygit2.Oid) -> Iterator[CommitLike]:
    """``head`` and its first parents, newest first: main as this vault held
    it (a merge's first parent is the side that made the merge).  libgit2
    walks them, unless a shallow or grafts file would make it show other
    parents than the commits record."""
    oid: pygit2.Oid | None = head
    if not hiding_files(repo):
        with contextlib.suppress(KeyError, ValueError, pygit2.GitError, MemoryError):  # damage: read on raw
            walker = repo.walk(head, pygit2.enums.SortMode.NONE)
            walker.simplify_first_parent()
            for commit in walker:
                yield commit
                oid = commit.parent_ids[0] if commit.parent_ids else None
            return
    while oid is not None:
        raw = read_commit(repo, oid)
        yield raw
        oid = raw.parent_ids[0] if raw.parent_ids else None


# -- versions by a short id -------------------------------------------------------

_SHORT_ID = re.compile(r"([0-9a-fA-F]{4,39})((?:[~^].*)?)", re.S)  # "1ed6", "1ed6^", "1ed6~2"


def version_by_prefix(repo: pygit2.Repository, head: pygit2.Oid, text: str) -> pygit2.Commit | None:
    """The version a short id names (``1ed6``, or ``1ed6^`` for the one before)
    when git finds other objects starting with the same digits: a file
    version or a tree is no version, so only ``main``'s commits count.  None
    if no version starts so; NotFoundError if several do."""
    found = _SHORT_ID.fullmatch(text)
    if found is None:
        return None
    prefix, rest = found.group(1).lower(), found.group(2)
    matches = [commit.id for commit in commits(repo, head) if str(commit.id).startswith(prefix)]
    if len(matches) > 1:
        named = ", ".join(str(oid)[:10] for oid in matches[:5]) + (", ..." if len(matches) > 5 else "")
        raise NotFoundError(
            f"Error: the short id {found.group(1)!r} is ambiguous: {len(matches)} versions start with it "
            f"({named}). Give more of the version's digits.",
            step="versions",
        )
    if not matches:
        return None
    try:
        return repo.revparse_single(str(matches[0]) + rest).peel(pygit2.Commit)
    except (KeyError, ValueError, pygit2.GitError, pygit2.InvalidSpecError):
        return None


# -- times ---------------------------------------------------------------------


# -- walking -------------------------------------------------------------------


def _tree(repo: pygit2.Repository, oid: pygit2.Oid, version: pygit2.Oid) -> pygit2.Tree:
    try:
        size = repo.odb.read_header(oid)[1]
        if size > objects.MAX_OBJECT_BYTES:
            raise OversizedObject(oid, size)
        tree = repo[oid]
    except KeyError as err:
        raise IntegrityError(f"Error: tree {oid} of version {version} is missing; run `vaultmem verify`.") from err
    except (ValueError, pygit2.GitError) as err:
        raise IntegrityError(
            f"Error: tree {oid} of version {version} is damaged ({_one_line(err)}); run `vaultmem verify`."
        ) from err
    if not isinstance(tree, pygit2.Tree):
        raise IntegrityError(f"Error: version {version} names {oid} as a tree, which it is not; run `vaultmem verify`.")
    return tree


@dataclass(frozen=True)
class SealedNames:
    """What the history needs to follow a path through commits that store
    sealed names: the name key, and ``unseal(commit id, stored path)``, the
    real path a commit's tree holds under a stored one (None if erased)."""

    names: Names
    unseal: Callable[[bytes, MemoryPath], MemoryPath | None]


def _entry_id(
    repo: pygit2.Repository,
    version: pygit2.Oid,
    root: pygit2.Oid,
    target: MemoryPath,
    sealed: SealedNames | None = None,
) -> pygit2.Oid | None:
    """The id at ``target`` in the tree ``root`` of ``version``, None if there is
    nothing there; a tree on the way that cannot be read is an IntegrityError.
    A commit whose root holds the sealed-names marker is read through tokens."""
    tree = _tree(repo, root, version)
    parts = target.parts
    if sealed is not None and parts and MARKER.decode() in tree:
        parts = sealed.names.seal(target).parts
    *folders, last = ("memories", *parts)
    for name in folders:
        try:
            entry = tree[name]
        except KeyError:
            return None
        if entry.filemode != pygit2.enums.FileMode.TREE:
            return None  # a file where the path needs a folder
        tree = _tree(repo, entry.id, version)
    try:
        return tree[last].id
    except KeyError:
        return None


def touches(repo: pygit2.Repository, commit: CommitLike, target: MemoryPath, sealed: SealedNames | None = None) -> bool:
    """Whether ``commit`` changed what is at ``target`` (a file or a folder),
    compared with the parent its object records (a merge: its first parent,
    the side that made it; what the merge brought from the other side was
    changed there, in that side's versions)."""
    mine = _entry_id(repo, commit.id, commit.tree_id, target, sealed)
    recorded = commit if isinstance(commit, RawCommit) else read_commit(repo, commit.id)  # libgit2's may be grafted
    if not recorded.parent_ids:
        return mine is not None
    parent = read_commit(repo, recorded.parent_ids[0])
    return _entry_id(repo, parent.id, parent.tree_id, target, sealed) != mine


def walk(
    repo: pygit2.Repository, head: pygit2.Oid, filters: Filters, sealed: SealedNames | None = None
) -> Iterator[Version]:
    """Versions newest first that pass ``filters``; see :func:`walk_named`."""
    for version, _ in walk_named(repo, head, filters, sealed):
        yield version


def walk_named(
    repo: pygit2.Repository, head: pygit2.Oid, filters: Filters, sealed: SealedNames | None = None
) -> Iterator[tuple[Version, MemoryPath | None]]:
    """Versions newest first that pass ``filters``, each with the name the
    filtered path had in it (None without a path); a path is followed back
    across renames (the rename itself is listed, older commits are matched
    against the old name).

    With a path, a commit whose ``Vaultmem-Path`` trailers name neither the
    path, nor a folder above it, nor anything below it is passed over without
    reading its trees: vaultmem names every path a commit changes (a folder for
    a folder's contents, ``/memories`` for the whole memory).  A commit naming
    no path at all is compared tree by tree.  Trailers are sealed with the
    commit, so a commit that lies about its paths fails ``verify()``.

    The history is the one the commits record (see :func:`commits`); a commit
    or tree that cannot be read raises ``IntegrityError``.  With ``sealed``,
    commits that store sealed names are matched by the path's tokens; the
    versions come as the commits record them (sealed paths stay sealed).
    """
    _refuse_reversed(filters)
    tracked = filters.path
    at_commit: dict[bytes, MemoryPath] = {}  # the name the path had in a commit not yet reached
    for commit in commits(repo, head):  # newest first
        version: Version | None = None
        here: MemoryPath | None = None
        if tracked is not None:
            here = at_commit.pop(commit.id.raw, tracked)
            before = here
            spelled = [here.text] if sealed is None else [here.text, sealed.names.seal(here).text]
            if _may_touch(commit.message, *spelled) and touches(repo, commit, here, sealed):
                version = Version.from_commit(commit)
                before = before_rename(version, here, commit, sealed)
            parents = commit.parent_ids  # libgit2's are the recorded ones: commits() reads raw where they may differ
            for parent in parents:
                named = _in_parent(repo, commit, parent, before, sealed) if len(parents) > 1 else before
                at_commit.setdefault(parent.raw, named)
            tracked = before
            if version is None:
                continue
        version = version or Version.from_commit(commit)
        if filters.matches(version):
            yield version, here


def _refuse_reversed(filters: Filters) -> None:
    """A range that ends before it starts holds no version: an error, never
    an empty history an auditor would read as "nothing happened"."""
    since, until = filters.since, filters.until
    if since is not None and until is not None and since > until:
        raise VaultError(
            f"Error: the since time {_utc(since)} is after the until time {_utc(until)}, so no version "
            "can be in that range. Give the earlier time as since and the later one as until."
        )


def _utc(moment: datetime) -> str:
    return utc_text(moment)


def _in_parent(
    repo: pygit2.Repository, merge: CommitLike, parent: pygit2.Oid, path: MemoryPath, sealed: SealedNames | None
) -> MemoryPath:
    """The name ``path`` (a path of a merge commit) had in one of its parents:
    the same, unless that side never made a rename the merge carried over."""
    found = read_commit(repo, parent)
    if _entry_id(repo, parent, found.tree_id, path, sealed) is not None:
        return path
    for value in parse_trailers(merge.message).get("Vaultmem-Renamed", []):
        old_text, sep, new_text = value.partition(" -> ")
        try:
            old, new = parse_stored(old_text), parse_stored(new_text)
        except VaultError:
            continue
        if sep:
            moved = _renamed_back(path, old, new, merge, parent.raw, sealed)
            if moved is not None:
                return moved
    return path


def _renamed_back(
    path: MemoryPath, old: MemoryPath, new: MemoryPath, commit: CommitLike, before: bytes, sealed: SealedNames | None
) -> MemoryPath | None:
    """The name ``path`` had before a rename of ``old`` to ``new`` (as a
    commit records them), None if the rename did not move it.  A rename
    recorded with sealed names is matched by tokens; the old name is read
    from the version before it (``before``, a commit id): if that was
    erased, the path is followed no further back."""
    if sealed is not None and is_sealed(new):
        stored = sealed.names.seal(path)
        if not stored.is_within(new):
            return None
        real_old = sealed.unseal(before, old)
        if real_old is None:  # erased: only tokens are left, and they seal to themselves
            return MemoryPath(old.parts + stored.parts[len(new.parts) :])
        return MemoryPath(real_old.parts + path.parts[len(new.parts) :])
    if path.is_within(new):
        return MemoryPath(old.parts + path.parts[len(new.parts) :])
    return None


_PATH_TRAILER = "\nVaultmem-Path: "


def _may_touch(message: str, *targets: str) -> bool:
    """Whether a commit's trailers leave open that it changed ``targets``
    (one path, as it is spelled with and without sealed names)."""
    at = message.find(_PATH_TRAILER)
    if at < 0:
        return True
    while at >= 0:
        start = at + len(_PATH_TRAILER)
        end = message.find("\n", start)
        named = message[start : end if end >= 0 else len(message)]
        for target in targets:
            if named == target or named.startswith(target + "/") or target.startswith(named + "/"):
                return True
        at = message.find(_PATH_TRAILER, start)
    return False


def before_rename(version: Version, tracked: MemoryPath, commit: CommitLike, sealed: SealedNames | None) -> MemoryPath:
    """The name ``tracked`` had before ``version``, if that version renamed it."""
    if version.command != "rename" or len(version.paths) != 2 or tracked.is_root:
        return tracked
    try:
        old, new = parse_stored(version.paths[0]), parse_stored(version.paths[1])
    except VaultError:
        return tracked
    parents = commit.parent_ids
    moved = _renamed_back(tracked, old, new, commit, parents[0].raw if parents else b"", sealed)
    return moved if moved is not None else tracked
