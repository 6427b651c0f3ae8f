"""A vault's policy as a value: its fields, their defaults and rules, and
how durations and values are written and read (no storage: the policy
branch is :mod:`vaultmem.repo.policy`)."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from vaultmem.core.detectors import detectors
from vaultmem.core.values import BACKTRACKS, BACKTRACKS_FIX, backtracks, compile_regex, is_int
from vaultmem.errors import VaultError

SECRET_MODES = ("off", "redact", "refuse")
DEFAULT_MAX_FILE_BYTES = 102_400
# The largest file any vault stores, whatever max_file_bytes says: its blob
# (base64 Fernet, a third larger) stays under the largest object a read
# accepts (vaultmem.git.objects.MAX_OBJECT_BYTES, 768 MiB).
HARD_MAX_FILE_BYTES = 512 << 20

DURATIONS = ("expire_after", "sync_every", "content_retention")  # fields written as 30d, 12h, 60s
_REMOTE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_DURATION = re.compile(r"\s*(\d+)\s*(s|m|h|d|w)?\s*", re.IGNORECASE)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# The largest values a policy holds: a limit or count every JSON reader keeps
# exact (2**53 - 1), and a duration of 100 years, which every clock and
# timer can still add to the time now.
MAX_NUMBER = 2**53 - 1
MAX_DURATION = 36_500 * 86_400


def parse_duration(value: object) -> int:
    """Seconds from ``30d``, ``12h``, ``90m``, ``45s``, ``2w``, a bare number of
    seconds, or a :class:`~datetime.timedelta`."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
        if seconds < 1:
            raise VaultError("Error: a duration must be at least one second.")
        return _at_most_a_century(int(seconds), value)
    if is_int(value):
        if value < 1:
            raise VaultError("Error: a duration must be at least one second.")
        return _at_most_a_century(value, value)
    match = _DURATION.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise VaultError(
            f"Error: {value!r} is not a duration; write a whole number with s, m, h, d or w, such as 30d or 12h."
        )
    digits = match.group(1).lstrip("0")
    if not digits:
        raise VaultError(
            f"Error: {value!r} is not a duration of at least 1; write a whole number of at least 1 with s, m, h, d "
            "or w, such as 30d or 12h."
        )
    if len(digits) > len(str(MAX_DURATION)):
        return _at_most_a_century(MAX_DURATION + 1, value)  # too many digits for int() to be worth it
    return _at_most_a_century(int(digits) * _UNITS[(match.group(2) or "s").lower()], value)


def _at_most_a_century(seconds: int, given: object) -> int:
    if seconds > MAX_DURATION:
        shown = repr(given) if len(repr(given)) <= 40 else f"{repr(given)[:30]}... ({len(str(given)):,} characters)"
        raise VaultError(f"Error: {shown} is longer than 100 years (36500d); write a shorter duration.")
    return seconds


def duration_words(text: str) -> str:
    """A duration as it was written, in words: ``1d`` is ``1 day``, ``12h``
    ``12 hours`` (``text`` as :func:`parse_duration` takes it; anything else
    is returned as it is)."""
    match = _DURATION.fullmatch(text)
    if match is None:
        return text
    number = match.group(1).lstrip("0") or "0"
    unit = _UNIT_WORDS[(match.group(2) or "s").lower()]
    return f"{number} {unit}{'' if number == '1' else 's'}"


_UNIT_WORDS = {"s": "second", "m": "minute", "h": "hour", "d": "day", "w": "week"}


def format_duration(seconds: int) -> str:
    for unit in ("w", "d", "h", "m"):
        if seconds % _UNITS[unit] == 0:
            return f"{seconds // _UNITS[unit]}{unit}"
    return f"{seconds}s"


def _limit(name: str, value: object, optional: bool, most: int = MAX_NUMBER) -> None:
    if value is None and optional:
        return
    if not is_int(value) or value < 1:
        raise VaultError(f"Error: {name} must be a whole number of at least 1{' or null' if optional else ''}.")
    if value > most:
        unit = " seconds (100 years, 36500d)" if most == MAX_DURATION else ""
        raise VaultError(f"Error: {name} must be at most {most:,}{unit}{' or null' if optional else ''}.")


@dataclass(frozen=True)
class Policy:
    """What a vault allows; see the module docstring for each field."""

    secrets: str = "off"
    personal_data: bool = False
    patterns: Mapping[str, str] = dataclasses.field(default_factory=dict)
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    max_vault_bytes: int | None = None
    max_files: int | None = None
    expire_after: int | None = None
    sync_remote: str | None = None
    sync_every: int | None = None
    content_retention: int | None = None
    require_signatures: bool = False
    checkpoint_every: int | None = None

    def __post_init__(self) -> None:
        if self.secrets not in SECRET_MODES:
            raise VaultError(f"Error: secrets must be one of {', '.join(SECRET_MODES)}, not {self.secrets!r}.")
        if not isinstance(self.personal_data, bool):
            raise VaultError("Error: personal_data must be true or false.")
        if not isinstance(self.patterns, Mapping):
            raise VaultError("Error: patterns must map a kind name to a regular expression.")
        detectors(patterns=self.patterns)  # refuses a bad kind name or regular expression
        object.__setattr__(self, "patterns", dict(sorted(self.patterns.items())))
        _limit("max_file_bytes", self.max_file_bytes, optional=False)
        _limit("max_vault_bytes", self.max_vault_bytes, optional=True)
        _limit("max_files", self.max_files, optional=True)
        _limit("expire_after", self.expire_after, optional=True, most=MAX_DURATION)
        if self.sync_remote is not None and (
            not isinstance(self.sync_remote, str) or not _REMOTE_NAME.fullmatch(self.sync_remote)
        ):
            raise VaultError(
                "Error: sync_remote must be the name of a remote (letters, digits, '.', '_', '-') or null."
            )
        _limit("sync_every", self.sync_every, optional=True, most=MAX_DURATION)
        _limit("content_retention", self.content_retention, optional=True, most=MAX_DURATION)
        if not isinstance(self.require_signatures, bool):
            raise VaultError("Error: require_signatures must be true or false.")
        _limit("checkpoint_every", self.checkpoint_every, optional=True)

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_dict(), sort_keys=True))

    def to_dict(self) -> dict[str, Any]:
        return {
            "secrets": self.secrets,
            "personal_data": self.personal_data,
            "patterns": dict(self.patterns),
            "max_file_bytes": self.max_file_bytes,
            "max_vault_bytes": self.max_vault_bytes,
            "max_files": self.max_files,
            "expire_after": self.expire_after,
            "sync_remote": self.sync_remote,
            "sync_every": self.sync_every,
            "content_retention": self.content_retention,
            "require_signatures": self.require_signatures,
            "checkpoint_every": self.checkpoint_every,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Policy:
        if not isinstance(data, Mapping):
            raise VaultError("Error: a policy is a JSON object of fields.")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(str(name) for name in data if name not in names)
        if unknown:
            raise VaultError(f"Error: unknown policy field{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}.")
        return cls(**dict(data))

    def with_changes(self, changes: Mapping[str, Any]) -> Policy:
        """This policy with ``changes`` applied (``expire_after``,
        ``sync_every`` and ``content_retention`` also take ``"30d"``, ``"60s"``)."""
        if not isinstance(changes, Mapping):
            raise VaultError(f"Error: policy changes are a dict of fields, not {type(changes).__name__}.")
        merged = {**self.to_dict(), **dict(changes)}
        for name in DURATIONS:
            if isinstance(merged.get(name), (str, timedelta)):
                merged[name] = parse_duration(merged[name])
        return Policy.from_dict(merged)

    def changed_fields(self, other: Policy) -> list[str]:
        mine, theirs = self.to_dict(), other.to_dict()
        return [name for name in mine if mine[name] != theirs[name]]

    def to_bytes(self) -> bytes:
        return (json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n").encode("utf-8")


def backtracking_pattern(
    patterns: Mapping[str, str | re.Pattern[str]], held: Mapping[str, str] | None = None
) -> str | None:
    """Why a custom pattern of ``patterns`` is refused, or None: one that
    repeats a part matching the same text in more than one way
    (``(\\d+)+x``).  The patterns scan every text written, under the writer
    lock, so such a pattern could scan one text the model writes for years,
    with every write waiting.  A kind whose pattern ``held`` holds already
    (a stored policy) is not judged again."""
    held = held or {}
    for kind, pattern in patterns.items():
        compiled = pattern if isinstance(pattern, re.Pattern) else compile_regex(pattern)
        if held.get(kind) != pattern and backtracks(compiled):
            return (
                f"Error: the pattern for {kind!r} {BACKTRACKS}: it could scan one text the model writes for years, "
                f"with every write of the vault waiting. {BACKTRACKS_FIX}"
            )
    return None


def show_value(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)
