"""What a version of the memory is, read from its commit without git: the
``Version`` model, the commit message and its trailers (never content), the
seal header, the filters a history walk applies, and how times are read
(the walk itself is :mod:`vaultmem.repo.history`)."""

from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from vaultmem.core.paths import MemoryPath
from vaultmem.core.signing import split_signature
from vaultmem.errors import VaultError

SEAL_HEADER = b"vaultmem-seal"  # a commit header, like git's own gpgsig
RESTORED_FROM = "Vaultmem-Restored-From"
COMMANDS = (
    "create",
    "str_replace",
    "insert",
    "delete",
    "rename",
    "restore",
    "undo",
    "rekey",
    "import",
    "expire",
    "merge",
    "forget",
    "seal-names",
)


class Person(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def time(self) -> int: ...


class CommitFields(Protocol):
    """What a version is read from: a libgit2 commit, or a commit parsed from
    its bytes (:class:`vaultmem.repo.history.RawCommit`)."""

    @property
    def id(self) -> object: ...
    @property
    def message(self) -> str: ...
    @property
    def author(self) -> Person: ...


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
    merged: str | None = None  # a merge: the other side's commit and remote, "ID from NAME"
    conflicts: tuple[str, ...] = ()  # a merge: "PATH -> THE COPY BESIDE IT" for each conflict
    reason: str | None = None  # an erasure: the reason given
    erased: tuple[str, ...] = ()  # an erasure: "VERSION BLOB" of each file version erased

    def merge_note(self, id_chars: int) -> str:
        """`` (merged ID from REMOTE; N conflicts kept beside)`` for a merge, as
        the history listings say it: which version a pull brought in (its
        first ``id_chars`` digits), and whether a file's other text was kept
        beside it; ``""`` for any other version."""
        if self.merged is None:
            return ""
        merged, _, remote = self.merged.partition(" from ")
        text = f" (merged {merged[:id_chars] or '-'}" + (f" from {remote}" if remote else "")
        if self.conflicts:
            count = len(self.conflicts)
            text += f"; {count:,} {'conflict' if count == 1 else 'conflicts'} kept beside"
        return text + ")"

    @classmethod
    def from_commit(cls, commit: CommitFields) -> Version:
        trailers = parse_trailers(commit.message)
        return cls(
            id=str(commit.id),
            time=moment(commit.author.time),
            actor=trailers.get("Vaultmem-Actor", [commit.author.name])[0],
            session=trailers.get("Vaultmem-Session", [None])[0],
            command=trailers.get("Vaultmem-Command", [""])[0],
            paths=tuple(trailers.get("Vaultmem-Path", [])),
            message=commit.message,
            restored_from=trailers.get(RESTORED_FROM, [None])[0],
            merged=trailers.get("Vaultmem-Merge", [None])[0],
            conflicts=tuple(trailers.get("Vaultmem-Conflict", [])),
            reason=trailers.get("Vaultmem-Reason", [None])[0],
            erased=tuple(trailers.get("Vaultmem-Erased", [])),
        )


def moment(seconds: int) -> datetime:
    """A commit's time (seconds since the epoch) in UTC.  git records any
    number; one outside the years 1-9999 (a forged or damaged commit) is
    shown at the nearest end of that range, so the history still lists it."""
    try:
        return datetime.fromtimestamp(seconds, tz=timezone.utc)
    except (OverflowError, ValueError, OSError):
        return (datetime.max if seconds > 0 else datetime.min).replace(microsecond=0, tzinfo=timezone.utc)


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
    command: str,
    paths: tuple[MemoryPath, ...],
    actor: str,
    session: str | None,
    extra: list[tuple[str, str]],
    subject: str | None = None,
) -> str:
    """Subject and trailers; never content.  The seal is appended by the vault."""
    subject = f"memory: {command} " + (subject or subject_paths(command, [p.text for p in paths]))
    lines = [f"Vaultmem-Command: {command}"]
    lines += [f"Vaultmem-Path: {p.text}" for p in paths]
    lines.append(f"Vaultmem-Actor: {actor}")
    if session is not None:
        lines.append(f"Vaultmem-Session: {session}")
    lines += [f"{k}: {v}" for k, v in extra]
    return subject.rstrip() + "\n\n" + "\n".join(lines) + "\n"


def split_seal(raw_commit: bytes) -> tuple[bytes, bytes | None]:
    """A commit object's bytes without its seal header and its signature
    (what the seal covers), and the seal (or None)."""
    head, sep, message = split_signature(raw_commit)[0].partition(b"\n\n")
    kept: list[bytes] = []
    seal: bytes | None = None
    for line in head.split(b"\n"):
        if line.startswith(SEAL_HEADER + b" ") and seal is None:
            seal = line[len(SEAL_HEADER) + 1 :]
        else:
            kept.append(line)
    return b"\n".join(kept) + sep + message, seal


def parse_when(
    value: datetime | str, name: str = "time", *, end_of_day: bool = False, now: float | None = None
) -> datetime:
    """A point in time, in UTC: a datetime, ISO 8601 text (``2026-11-01 09:00``,
    ``2026-11-01``, ``2026-11-01T09:00:00+01:00``) or English words relative
    to ``now`` (``2 days ago``, ``yesterday 14:00``; see :func:`parse_words`).
    Without a zone it is UTC, the zone every vault commit is recorded in.  A
    date alone is its start, or with ``end_of_day`` (an upper bound) its last
    moment, so that ``until="2026-11-01"`` keeps that whole day (and
    ``until="2026-W44"`` that whole week).  A leap second (``23:59:60``) is
    the next minute's first, as git and POSIX count it, and ``24:00`` the
    next day's first.  A time outside the years 0001-9999 in UTC
    (``10000-01-01``, ``999999999 days ago``) or a day the calendar does not
    have (``2025-02-29``) is refused as such."""
    if isinstance(value, datetime):
        when = value
    elif isinstance(value, str):
        text = value.strip()
        try:
            when = _iso(text)
            if end_of_day:
                when = _end_of(text, when)
        except OverflowError:  # 9999-12-31T23:59:60Z: the second after the last
            raise _outside(value, name) from None
        except ValueError:
            _refuse_impossible(text, name)
            words = parse_words(value, time.time() if now is None else now, end=end_of_day, name=name)
            if words is None:
                raise VaultError(
                    f"Error: cannot read the {name} {value!r}; give an ISO 8601 time such as "
                    "2026-11-01 09:00 (UTC unless an offset such as +01:00 is given), or words such as "
                    "'2 days ago' or 'yesterday 14:00'."
                ) from None
            when = words
    else:
        raise VaultError(f"Error: the {name} must be a datetime or an ISO 8601 string.")
    try:
        return when.astimezone(timezone.utc) if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)
    except (OverflowError, ValueError):  # 0001-01-01T00:00+01:00 is in the year 0 in UTC
        raise _outside(value, name) from None


def utc_text(moment: datetime) -> str:
    """``2026-11-01T09:00:00Z``: a time as every message and listing shows
    it, its year in four digits (``0001``, where ``strftime`` gives ``1``)."""
    try:
        moment = moment.astimezone(timezone.utc)
    except (OverflowError, ValueError):  # within a day of the years' ends: shown with its own offset
        return moment.isoformat(timespec="seconds")
    return moment.replace(tzinfo=None).isoformat(timespec="seconds") + "Z"


# ISO 8601 times fromisoformat does not read, each as the time it names:
# a leap second (23:59:60, 18:59:60-05:00) is the next minute's first, as
# git and POSIX count it; 24:00 (the end of a day) is the next day's first.
_ISO_LATER = (
    (re.compile(r"(?<=:59):60(?![\d])"), ":59", timedelta(seconds=1)),
    (re.compile(r"(?<=[T ])24:00(?::00(?:[.,]0+)?)?(?=$|[Z+-])"), "00:00", timedelta(days=1)),
)
_DATE = re.compile(r"([+-]?\d{4,})-(\d{2})-(\d{2})(?![\d])")


def _iso(text: str) -> datetime:
    """``text`` read as ISO 8601 (ValueError if it is not; OverflowError
    past the year 9999)."""
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        for pattern, instead, later in _ISO_LATER:
            if pattern.search(text):
                return datetime.fromisoformat(pattern.sub(instead, text, count=1)) + later
        raise


def _outside(value: object, name: str) -> VaultError:
    return VaultError(
        f"Error: the {name} {value!r} is outside the years 0001 to 9999, the times a version can have; "
        "give a time within them."
    )


def _refuse_impossible(text: str, name: str) -> None:
    """Refuses ISO 8601 text that ``fromisoformat`` cannot read because no
    such time can be: a year outside 0001-9999, a month past 12, a day past
    its month's last (``2025-02-29``)."""
    found = _DATE.match(text)
    if found is None:
        return
    year, month, day = (int(part) for part in found.groups())
    if not 1 <= year <= 9999:
        raise _outside(text, name)
    if not 1 <= month <= 12:
        raise VaultError(f"Error: cannot read the {name} {text!r}: a year has 12 months.")
    last = calendar.monthrange(year, month)[1]
    if not 1 <= day <= last:
        raise VaultError(
            f"Error: cannot read the {name} {text!r}: {calendar.month_name[month]} {year} has {last} days."
        )


def _end_of(text: str, start: datetime) -> datetime:
    """The last moment of the ISO 8601 date ``text`` names, which starts at
    ``start``: of its day for a date (``2026-11-01``, or ``2026-W44-7`` by
    week), of its week for a week alone (``2026-W44``); a time is itself."""
    if re.fullmatch(r"\d{4}-?\d{2}-?\d{2}|\d{4}-?W\d{2}-?\d", text):
        days = 1
    elif re.fullmatch(r"\d{4}-?W\d{2}", text):
        days = 7
    else:
        return start
    try:
        return start + timedelta(days=days, microseconds=-1)
    except OverflowError:  # the last week of the year 9999 ends past it
        return start.replace(month=12, day=31, hour=23, minute=59, second=59, microsecond=999_999)


_DAYS = {"today": 0, "yesterday": 1}
_CLOCK = re.compile(r"(?<![\d:])(\d{1,2}):(\d{2})(?::(\d{2}))?(?![\d:])")  # 14:00, 9:30:15


def parse_words(text: str, now: float, *, end: bool = False, name: str = "time") -> datetime | None:
    """English words for a time, relative to ``now`` and in UTC: ``2 days
    ago``, ``3 hours ago``, ``yesterday 14:00``, ``last monday``, ``a week
    ago``; None when the text names no time.  Read by ``dateparser`` (a
    maintained parser, loaded only here: it takes a moment), with dates
    from the past preferred, as a history's times are.  A day or a month
    named without a time of day (``today``, ``yesterday``, ``Nov 4 2026``,
    ``last monday``, ``November``) is its first moment, or with ``end`` (an
    upper bound) its last, as an ISO 8601 date is.  Words counting back
    or on past the years 0001-9999 (``999999999 days ago``) are refused
    (a VaultError that calls the text the ``name``)."""
    if not text.strip() or len(text) > 200 or re.fullmatch(r"[\d\s/.:+-]+", text):
        return None  # a numeric date that is not ISO 8601 (11/01/2026) is ambiguous: refused
    if not re.fullmatch(r"[\w\s,.:+/-]+", text) or not re.search(r"[^\W\d_]{2,}", text):
        return None  # no word of a time (git's @{-1}, ~1, a lone "a"): dateparser would guess a date
    if any(int(h) > 23 or int(m) > 59 or int(s or 0) > 59 for h, m, s in _CLOCK.findall(text)):
        return None  # a time of day no clock shows (24:00, 9:75): dateparser would drop it and read the rest
    back = _DAYS.get(text.strip().lower())
    if back is not None:  # a day by its name: whole, as a date alone is (dateparser reads "today" as now)
        start = datetime.fromtimestamp(now, timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
        start -= timedelta(days=back)
        return start + timedelta(days=1, microseconds=-1) if end else start
    from dateparser.date import DateDataParser  # only a time given in words needs it

    settings: Any = {
        "TIMEZONE": "UTC",
        "TO_TIMEZONE": "UTC",
        "RETURN_AS_TIMEZONE_AWARE": True,
        "PREFER_DATES_FROM": "past",
        "RELATIVE_BASE": datetime.fromtimestamp(now, timezone.utc).replace(tzinfo=None),
        "RETURN_TIME_AS_PERIOD": True,  # says whether a time of day was given
    }
    try:
        found = DateDataParser(languages=["en"], settings=settings).get_date_data(text.strip())
    except (OverflowError, ValueError):
        found = None
    when = found.date_obj if found is not None else None
    if found is None or not isinstance(when, datetime):
        if _beyond_the_years(text, now):
            raise _outside(text, name)
        return None
    if when.time() != datetime.min.time() or found.period not in ("day", "month"):
        return when  # a time of day was given, or words relative to now ("2 days ago", "last month")
    if found.period == "month":  # "November": dateparser picks the clock's day of it
        when = when.replace(day=1)
        if end:  # its last day (December 9999 has no month after it to count back from)
            when = when.replace(day=calendar.monthrange(when.year, when.month)[1])
    return when + timedelta(days=1, microseconds=-1) if end else when


_SPAN = re.compile(r"(\d+)\s*(second|minute|hour|day|week|fortnight|month|year|decade|centur)", re.IGNORECASE)
_SPAN_DAYS = {
    "second": 1 / 86_400,
    "minute": 1 / 1_440,
    "hour": 1 / 24,
    "day": 1,
    "week": 7,
    "fortnight": 14,
    "month": 30.436875,
    "year": 365.2425,
    "decade": 3_652.425,
    "centur": 36_524.25,
}


def _beyond_the_years(text: str, now: float) -> bool:
    """Whether ``text`` counts a span (``999999999 days``) that, back from
    ``now`` (with ``ago``) or either way, leaves the years 0001-9999."""
    start = datetime.fromtimestamp(now, timezone.utc)
    back_to_year_1 = (start - datetime.min.replace(tzinfo=timezone.utc)).days
    on_to_year_9999 = (datetime.max.replace(tzinfo=timezone.utc) - start).days
    back = re.search(r"\bago\b", text, re.IGNORECASE) is not None
    for count, unit in _SPAN.findall(text):
        days = int(count) * _SPAN_DAYS[unit.lower()]
        if days > back_to_year_1 or (not back and days > on_to_year_9999):
            return True
    return False


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
