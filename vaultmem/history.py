"""The memory history as an auditor reads it: versions, their trailers, the
filters of ``vault.history`` and the times ``at=`` accepts.

Pure functions over commits; the vault (store) supplies the repository.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone

import pygit2

from .errors import VaultError
from .paths import MemoryPath, parse

SEAL_HEADER = b"vaultmem-seal"  # a commit header, like git's own gpgsig
RESTORED_FROM = "Vaultmem-Restored-From"
COMMANDS = ("create", "str_replace", "insert", "delete", "rename", "restore", "undo", "rekey", "import", "expire")


@dataclass(frozen=True)
class Version:
    """One commit of the memory history."""

    id: str
    time: datetime
    actor: str
    session: str | None
    command: str
    paths: tuple[str, ...]
    message: str
    restored_from: str | None = None

    @classmethod
    def from_commit(cls, commit: pygit2.Commit) -> Version:
        trailers = parse_trailers(commit.message)
        return cls(
            id=str(commit.id),
            time=datetime.fromtimestamp(commit.author.time, tz=timezone.utc),
            actor=trailers.get("Vaultmem-Actor", [commit.author.name])[0],
            session=trailers.get("Vaultmem-Session", [None])[0],
            command=trailers.get("Vaultmem-Command", [""])[0],
            paths=tuple(trailers.get("Vaultmem-Path", [])),
            message=commit.message,
            restored_from=trailers.get(RESTORED_FROM, [None])[0],
        )


def parse_trailers(message: str) -> dict[str, list[str]]:
    r"""The ``Key: value`` lines of a message's last paragraph.

    Lines end at ``\n`` only, as git's do: ``str.splitlines`` would also end
    one at U+2028, U+0085, ``\x1c`` and the like, and read a value holding
    one as two trailers."""
    out: dict[str, list[str]] = {}
    last = message.strip("\n").split("\n\n")[-1]
    for line in last.split("\n"):
        key, sep, value = line.partition(": ")
        if sep and key and " " not in key:
            out.setdefault(key, []).append(value)
    return out


def subject_paths(command: str, paths: list[str]) -> str:
    """``old -> new`` for a rename; a few paths, or how many, otherwise."""
    if command == "rename":
        return " -> ".join(paths)
    if len(paths) > 3:
        return f"{paths[0]} and {len(paths) - 1} more"
    return ", ".join(paths)


def format_message(
    command: str, paths: tuple[MemoryPath, ...], actor: str, session: str | None, extra: list[tuple[str, str]]
) -> str:
    """Subject and trailers; never content.  The seal is appended by the vault."""
    subject = f"memory: {command} " + subject_paths(command, [p.text for p in paths])
    lines = [f"Vaultmem-Command: {command}"]
    lines += [f"Vaultmem-Path: {p.text}" for p in paths]
    lines.append(f"Vaultmem-Actor: {actor}")
    if session is not None:
        lines.append(f"Vaultmem-Session: {session}")
    lines += [f"{k}: {v}" for k, v in extra]
    return subject.rstrip() + "\n\n" + "\n".join(lines) + "\n"


def split_seal(raw_commit: bytes) -> tuple[bytes, bytes | None]:
    """A commit object's bytes without its seal header, and the seal (or None)."""
    head, sep, message = raw_commit.partition(b"\n\n")
    kept: list[bytes] = []
    seal: bytes | None = None
    for line in head.split(b"\n"):
        if line.startswith(SEAL_HEADER + b" ") and seal is None:
            seal = line[len(SEAL_HEADER) + 1 :]
        else:
            kept.append(line)
    return b"\n".join(kept) + sep + message, seal


# -- times ---------------------------------------------------------------------


def parse_when(value: datetime | str, name: str = "time") -> datetime:
    """A point in time: a datetime, or ISO 8601 text (``2026-11-01 09:00``,
    ``2026-11-01``, ``2026-11-01T09:00:00+01:00``); without a zone it is UTC,
    the zone every vault commit is recorded in."""
    if isinstance(value, datetime):
        when = value
    elif isinstance(value, str):
        try:
            when = datetime.fromisoformat(value.strip())
        except ValueError:
            raise VaultError(
                f"Error: cannot read the {name} {value!r}; give an ISO 8601 time such as "
                "2026-11-01 09:00 (UTC unless an offset such as +01:00 is given)."
            ) from None
    else:
        raise VaultError(f"Error: the {name} must be a datetime or an ISO 8601 string.")
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


# -- walking -------------------------------------------------------------------


@dataclass(frozen=True)
class Filters:
    path: MemoryPath | None = None
    since: datetime | None = None
    until: datetime | None = None
    actor: str | None = None
    session: str | None = None
    command: str | None = None

    def matches(self, version: Version) -> bool:
        if self.since is not None and version.time < self.since:
            return False
        if self.until is not None and version.time > self.until:
            return False
        if self.actor is not None and version.actor != self.actor:
            return False
        if self.session is not None and version.session != self.session:
            return False
        return self.command is None or version.command == self.command


def _entry_id(commit: pygit2.Commit, target: MemoryPath) -> pygit2.Oid | None:
    try:
        return commit.tree[target.git_path()].id
    except KeyError:
        return None


def touches(commit: pygit2.Commit, target: MemoryPath) -> bool:
    """Whether ``commit`` changed what is at ``target`` (a file or a folder)."""
    mine = _entry_id(commit, target)
    if not commit.parents:
        return mine is not None
    return any(_entry_id(parent, target) != mine for parent in commit.parents)


def walk(repo: pygit2.Repository, head: pygit2.Oid, filters: Filters) -> Iterator[Version]:
    """Versions newest first that pass ``filters``; a path is followed back
    across renames (the rename itself is listed, older commits are matched
    against the old name).

    With a path, a commit whose ``Vaultmem-Path`` trailers name neither the
    path, nor a folder above it, nor anything below it is passed over without
    reading its trees: vaultmem names every path a commit changes (a folder for
    a folder's contents, ``/memories`` for the whole memory).  A commit naming
    no path at all is compared tree by tree.  Trailers are sealed with the
    commit, so a commit that lies about its paths fails ``verify()``.
    """
    tracked = filters.path
    for commit in repo.walk(head, pygit2.enums.SortMode.NONE):  # main is linear: newest first
        version: Version | None = None
        if tracked is not None:
            if not _may_touch(commit.message, tracked.text) or not touches(commit, tracked):
                continue
            version = Version.from_commit(commit)
            tracked = _before_rename(version, tracked)
        version = version or Version.from_commit(commit)
        if filters.matches(version):
            yield version


_PATH_TRAILER = "\nVaultmem-Path: "


def _may_touch(message: str, target: str) -> bool:
    """Whether a commit's trailers leave open that it changed ``target``."""
    at = message.find(_PATH_TRAILER)
    if at < 0:
        return True
    while at >= 0:
        start = at + len(_PATH_TRAILER)
        end = message.find("\n", start)
        named = message[start : end if end >= 0 else len(message)]
        if named == target or named.startswith(target + "/") or target.startswith(named + "/"):
            return True
        at = message.find(_PATH_TRAILER, start)
    return False


def _before_rename(version: Version, tracked: MemoryPath) -> MemoryPath:
    """The name ``tracked`` had before ``version``, if that version renamed it."""
    if version.command != "rename" or len(version.paths) != 2 or tracked.is_root:
        return tracked
    try:
        old, new = parse(version.paths[0]), parse(version.paths[1])
    except VaultError:
        return tracked
    if tracked.is_within(new):
        return MemoryPath(old.parts + tracked.parts[len(new.parts) :])
    return tracked
