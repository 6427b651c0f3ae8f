"""Versions and times as a user or an agent gives them: ``vaultmem log
--since/--until``, ``show``, ``diff``, ``restore AT``, ``Vault.resolve`` and
``history(since=, until=)``, and the MCP audit tools ``read_version`` and
``diff``.

A time is repeated in a message with its year in four digits (``0001``,
never ``1``); a time no version can have (before the year 1 or after 9999,
however it is written) is refused as such, never answered "no version"
nor with a traceback; a leap second and a date the calendar does not have
are read, or refused, for what they are.  Every vault here has its own
clock, so no answer depends on the hour or the zone the tests run in.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from conftest import FakeClock
from mcp_helpers import Result, Served, SyncSession, host_paths, stdio
from test_contract_hunt import run_cli

from vaultmem import NotFoundError, Vault, VaultError, VaultMemoryTool, generate_key
from vaultmem.cli.render import when
from vaultmem.core.crypto import Erasure

# 2026-11-10 12:00:00 UTC; the versions are at 12:00 on the 8th, 9th and 10th, and 00:00:00 on the 11th.
NOON = datetime(2026, 11, 10, 12, 0, tzinfo=timezone.utc).timestamp()
DAY = 86_400.0
OUTSIDE = "is outside the years 0001 to 9999"


@pytest.fixture
def dated(tmp_path: Path) -> tuple[Vault, str]:
    clock = FakeClock(NOON - 2 * DAY)
    key = generate_key()
    vault = Vault.init(tmp_path / "v", key=key, clock=clock)
    tool = VaultMemoryTool(vault, actor="a", session="s")
    for n in range(3):
        tool.call({"command": "create", "path": f"/memories/day{n}.txt", "file_text": f"{n}\n"})
        clock.advance(DAY)
    clock.now = NOON + DAY / 2  # midnight, as the 11th begins
    tool.call({"command": "create", "path": "/memories/midnight.txt", "file_text": "m\n"})
    clock.now = NOON + DAY
    return vault, key


# -- a year before 1000 keeps its four digits ---------------------------------------


def test_a_time_in_an_early_year_is_repeated_with_four_digits(dated: tuple[Vault, str]) -> None:
    vault, _ = dated
    with pytest.raises(NotFoundError) as found:
        vault.resolve("0001-01-01")
    assert "no version at or before 0001-01-01T00:00:00Z" in str(found.value)
    with pytest.raises(VaultError) as reversed_range:
        vault.history(since="0999-06-01", until="0001-01-01")
    assert "the since time 0999-06-01T00:00:00Z is after the until time 0001-01-01T23:59:59Z" in str(
        reversed_range.value
    )
    assert when(datetime.min.replace(tzinfo=timezone.utc)) == "0001-01-01T00:00:00Z"
    assert when(datetime(987, 6, 5, 4, 3, 2, tzinfo=timezone.utc)) == "0987-06-05T04:03:02Z"


def test_the_command_line_repeats_an_early_year_with_four_digits(dated: tuple[Vault, str]) -> None:
    vault, key = dated
    shown = run_cli(vault.path, key, "show", "0042-03-04 05:06")
    assert shown.returncode != 0
    assert "no version at or before 0042-03-04T05:06:00Z" in shown.stderr, shown.stderr


# -- times no version can have -------------------------------------------------------


IMPOSSIBLE = [
    "999999999 days ago",
    "99999999999 hours ago",
    "20000 years ago",
    "10000-01-01",
    "10000-01-01T00:00:00Z",
    "0000-06-01",
    "0001-01-01T00:00+01:00",
    "9999-12-31T23:30:00-01:00",
    "9999-12-31T23:59:60Z",
    "9999-12-31T24:00",
]


@pytest.mark.parametrize("text", IMPOSSIBLE)
def test_a_time_before_the_year_1_or_after_9999_is_refused_as_such(dated: tuple[Vault, str], text: str) -> None:
    vault, _ = dated
    with pytest.raises(VaultError) as at:
        vault.resolve(text)
    assert not isinstance(at.value, NotFoundError)
    assert str(at.value) == (
        f"Error: the time {text!r} {OUTSIDE}, the times a version can have; give a time within them."
    )
    with pytest.raises(VaultError, match=re.escape(f"the since time {text!r} {OUTSIDE}")):
        vault.history(since=text)
    with pytest.raises(VaultError, match=re.escape(f"the until time {text!r} {OUTSIDE}")):
        vault.history(until=text)
    with pytest.raises(VaultError, match=OUTSIDE):
        vault.read("/memories/day0.txt", at=text)


def test_a_datetime_outside_the_years_once_in_utc_is_refused(dated: tuple[Vault, str]) -> None:
    vault, _ = dated
    early = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1)))
    with pytest.raises(VaultError, match=OUTSIDE):
        vault.resolve(early)
    with pytest.raises(VaultError, match=OUTSIDE):
        vault.history(since=early)


def test_the_command_line_refuses_an_impossible_time_without_a_traceback(dated: tuple[Vault, str]) -> None:
    vault, key = dated
    for args in (
        ("show", "999999999 days ago"),
        ("log", "--since", "0001-01-01T00:00+01:00"),
        ("restore", "10000-01-01"),
    ):
        done = run_cli(vault.path, key, *args)
        assert done.returncode != 0, args
        assert "Traceback" not in done.stderr and "OverflowError" not in done.stderr, done.stderr
        assert OUTSIDE in done.stderr, (args, done.stderr)


# -- leap seconds and days the calendar does not have ---------------------------------


def test_a_leap_second_is_read_as_posix_reads_it(dated: tuple[Vault, str]) -> None:
    """``23:59:60`` (a leap second, valid ISO 8601) is the second git and
    POSIX count as the next day's 00:00:00."""
    vault, _ = dated
    leap = "2026-11-10T23:59:60Z"
    assert vault.resolve(leap) == vault.resolve("2026-11-11T00:00:00Z")
    assert vault.resolve(leap).paths == ("/memories/midnight.txt",)
    assert [v.paths[0] for v in vault.history(since=leap)] == ["/memories/midnight.txt"]
    assert "/memories/midnight.txt" in [v.paths[0] for v in vault.history(until=leap)]
    assert vault.resolve("2026-11-10T18:59:60-05:00") == vault.resolve(leap)


def test_the_end_of_a_day_as_24_00_is_the_next_days_first_moment(dated: tuple[Vault, str]) -> None:
    """ISO 8601's ``24:00`` ends a day: ``2026-11-10T24:00`` is
    ``2026-11-11T00:00``, not refused as a time no clock shows."""
    vault, _ = dated
    assert vault.resolve("2026-11-10T24:00").paths == ("/memories/midnight.txt",)
    assert vault.resolve("2026-11-10 24:00:00Z") == vault.resolve("2026-11-11T00:00:00Z")
    assert [v.paths[0] for v in vault.history(since="2026-11-10T24:00")] == ["/memories/midnight.txt"]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("2025-02-29", "February 2025 has 28 days"),
        ("2026-02-29T10:00", "February 2026 has 28 days"),
        ("2026-04-31", "April 2026 has 30 days"),
        ("2026-13-01", "a year has 12 months"),
        ("2026-00-10", "a year has 12 months"),
    ],
)
def test_a_day_the_calendar_does_not_have_is_named_as_such(dated: tuple[Vault, str], text: str, why: str) -> None:
    vault, _ = dated
    with pytest.raises(VaultError) as at:
        vault.resolve(text)
    assert str(at.value) == f"Error: cannot read the time {text!r}: {why}."
    with pytest.raises(VaultError, match=f"cannot read the until time {text!r}: {why}"):
        vault.history(until=text)


def test_february_29_of_a_leap_year_is_a_day(tmp_path: Path) -> None:
    clock = FakeClock(datetime(2028, 2, 29, 12, tzinfo=timezone.utc).timestamp())
    vault = Vault.init(tmp_path / "v", key=generate_key(), clock=clock)
    VaultMemoryTool(vault, actor="a").call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    assert len(vault.history(since="2028-02-29", until="2028-02-29")) == 1
    assert vault.resolve("2028-02-29 13:00").paths == ("/memories/a.txt",)


def test_a_week_is_a_time_to_resolve_as_it_is_to_history(dated: tuple[Vault, str]) -> None:
    """``2026-W46`` (Monday 9 November onwards) is read by ``history``; a
    version at it is its first moment, as for ``2026-11-09``."""
    vault, _ = dated
    assert vault.resolve("2026-W46") == vault.resolve("2026-11-09")
    assert vault.resolve("2026-W46-2") == vault.resolve("2026-11-10")


def git_id(vault: Vault, revision: str) -> str:
    done = subprocess.run(["git", "-C", str(vault.path), "rev-parse", revision], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_id_of_a_folder_or_a_files_text_given_as_a_version_is_named_for_what_it_is(
    dated: tuple[Vault, str],
) -> None:
    """A tree's or a blob's id is an object of the vault, not an unknown id:
    the answer says it names no commit, and where the versions are listed."""
    vault, _ = dated
    for given, kind in [
        (git_id(vault, "main^{tree}"), "tree"),
        (git_id(vault, "main:memories/day0.txt"), "blob"),
        ("main^{tree}", "tree"),
        (git_id(vault, "main:memories/day0.txt")[:12], "blob"),
    ]:
        with pytest.raises(NotFoundError) as found:
            vault.resolve(given)
        assert str(found.value) == (
            f"Error: {given!r} is not a version of this vault's memory history: it names a git {kind}, "
            "not a commit. The vault's history lists its versions."
        )
    with pytest.raises(NotFoundError, match="no version 'f00dfeedf00dfeed' in this vault"):
        vault.resolve("f00dfeedf00dfeed")


# -- the MCP audit tools -------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Served:
    made = Served.make(tmp_path_factory.mktemp("times3"), host_paths(tmp_path_factory))
    vault = made.open()
    try:
        tool = VaultMemoryTool(vault, actor="a")
        tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    finally:
        vault.close()
    return made


@pytest.fixture(scope="module")
def session(served: Served) -> Iterator[SyncSession]:
    with stdio(served) as opened:
        yield opened


def test_the_audit_tools_repeat_an_early_year_with_four_digits(session: SyncSession) -> None:
    answer = session.call("read_version", {"path": "/memories/a.txt", "version": "0001-01-01"})
    assert answer.is_error and "no version at or before 0001-01-01T00:00:00Z" in answer.text, answer


def test_the_audit_tools_refuse_an_impossible_time(session: SyncSession) -> None:
    for text in ("0001-01-01T00:00+01:00", "999999999 days ago", "10000-01-01"):
        for name, arguments in (
            ("read_version", {"path": "/memories/a.txt", "version": text}),
            ("diff", {"from_version": text}),
            ("diff", {"from_version": "main", "to_version": text}),
        ):
            answer = session.call(name, arguments)
            assert answer == Result(
                f"Error: the time {text!r} {OUTSIDE}, the times a version can have; give a time within them.", True
            ), (name, arguments, answer)


def test_the_audit_tools_point_to_history_for_a_commit_that_is_no_version(session: SyncSession, served: Served) -> None:
    keyring = subprocess.run(
        ["git", "-C", str(served.path), "rev-parse", "vaultmem-keyring"], capture_output=True, text=True, check=True
    ).stdout.strip()
    for name, arguments in (
        ("read_version", {"path": "/memories/a.txt", "version": keyring}),
        ("diff", {"from_version": keyring}),
    ):
        answer = session.call(name, arguments)
        assert answer == Result(
            f"Error: {keyring!r} is not a version of this vault's memory history. "
            "Use `history` to list the vault's versions.",
            True,
        ), answer
    answer = session.call("read_version", {"path": "/memories/a.txt", "version": "main^{tree}"})
    assert answer == Result(
        "Error: 'main^{tree}' is not a version of this vault's memory history: it names a git tree, not a commit. "
        "Use `history` to list the vault's versions.",
        True,
    ), answer


def test_the_audit_tools_name_a_missing_parameter_as_the_memory_commands_do(session: SyncSession) -> None:
    assert session.call("read_version", {"path": "/memories/a.txt"}) == Result(
        "Error: Missing required parameter `version` for tool `read_version`.", True
    )
    assert session.call("read_version", {"version": "main"}) == Result(
        "Error: Missing required parameter `path` for tool `read_version`.", True
    )
    assert session.call("diff", {}) == Result("Error: Missing required parameter `from_version` for tool `diff`.", True)


def test_an_erasure_before_the_year_1000_or_out_of_range_is_described_whole() -> None:
    assert Erasure("c" * 40, "ops", -62_135_596_800, "r").describe() == "erased on 0001-01-01 by ops (r)"
    assert Erasure("c" * 40, "ops", 10**13, "r").describe() == "erased at time 10000000000000 by ops (r)"
