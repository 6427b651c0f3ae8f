"""Relative and natural times in ``--since``, ``--until`` and ``--at`` (issue
15): "2 days ago", "yesterday 14:00", read by dateparser relative to the
vault's clock, in UTC.  ISO 8601 and revisions keep their meaning."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
from conftest import FakeClock

from vaultmem import NotFoundError, Vault, VaultError, VaultMemoryTool, generate_key

NOW = datetime(2026, 11, 10, 12, 0, tzinfo=timezone.utc).timestamp()
DAY = 86_400.0


@pytest.fixture
def vault(tmp_path: Path) -> Vault:
    """Five versions, one a day at noon, 4 days ago through today."""
    clock = FakeClock(NOW - 4 * DAY)
    opened = Vault.init(tmp_path / "v", key=generate_key(), clock=clock)
    tool = VaultMemoryTool(opened, actor="a", session="s")
    for n in range(5):
        tool.call({"command": "create", "path": f"/memories/day{n}.txt", "file_text": f"{n}\n"})
        clock.advance(DAY)
    clock.now = NOW + 60  # a minute after the last write
    return opened


def days(versions: list[object]) -> list[str]:
    return [v.paths[0].removeprefix("/memories/").removesuffix(".txt") for v in versions]  # type: ignore[attr-defined]


def test_since_two_days_ago(vault: Vault) -> None:
    assert days(vault.history(since="2 days ago")) == ["day4", "day3"]
    assert days(vault.history(since="3 days ago")) == ["day4", "day3", "day2"]


def test_until_yesterday_at_a_time(vault: Vault) -> None:
    assert days(vault.history(until="yesterday 11:00")) == ["day2", "day1", "day0"]
    assert days(vault.history(until="yesterday 12:00")) == ["day3", "day2", "day1", "day0"]


def test_at_a_relative_time_reads_the_memory_as_it_was(vault: Vault) -> None:
    assert vault.listing("/memories", at="2 days ago")[-1].path == "/memories/day2.txt"
    assert vault.read("/memories/day1.txt", at="3 days ago") == "1\n"
    with pytest.raises(NotFoundError):
        vault.read("/memories/day3.txt", at="3 days ago")


def test_revisions_and_iso_times_keep_their_meaning(vault: Vault) -> None:
    assert vault.resolve("main~1").paths == ("/memories/day3.txt",)
    assert days(vault.history(since="2026-11-09 12:00")) == ["day4", "day3"]


def test_words_that_are_no_time_are_a_clear_error(vault: Vault) -> None:
    with pytest.raises(VaultError, match="2 days ago"):
        vault.history(since="the day the music died")
    with pytest.raises(NotFoundError):
        vault.resolve("nosuchrevision")


def test_a_date_in_words_as_until_keeps_that_whole_day_as_an_iso_date_does(vault: Vault) -> None:
    """`--until "Nov 8 2026"` ran to that day's first second and left the day
    out, where `--until 2026-11-08` keeps it: `--since X --until X` for one
    day showed nothing."""
    assert days(vault.history(since="Nov 8 2026", until="Nov 8 2026")) == ["day2"]
    assert days(vault.history(since="2026-11-08", until="2026-11-08")) == ["day2"]
    assert days(vault.history(until="last sunday")) == ["day2", "day1", "day0"]  # Sunday 8 November
    assert days(vault.history(until="8 November 2026 11:00")) == ["day1", "day0"]  # a time given: that moment


def test_a_month_in_words_is_the_whole_month(vault: Vault) -> None:
    """`--since "November 2026"` started on the clock's day of the month (the
    10th), leaving out the versions of 1-9 November."""
    assert days(vault.history(since="November 2026")) == ["day4", "day3", "day2", "day1", "day0"]
    assert days(vault.history(since="November")) == ["day4", "day3", "day2", "day1", "day0"]
    assert days(vault.history(until="October 2026")) == []
    assert days(vault.history(since="October 2026", until="October 2026")) == []
    assert days(vault.history(until="November 2026")) == ["day4", "day3", "day2", "day1", "day0"]


def test_today_and_yesterday_are_whole_days_as_a_date_is(vault: Vault) -> None:
    """`--since today` started at the clock's moment, a minute after the last
    version: it listed nothing, though today's version was there."""
    assert days(vault.history(since="today")) == ["day4"]
    assert days(vault.history(since="yesterday", until="yesterday")) == ["day3"]
    assert days(vault.history(until="yesterday")) == ["day3", "day2", "day1", "day0"]
    assert vault.listing("/memories", at="today")[-1].path == "/memories/day3.txt"  # as the day began


def test_words_counting_back_from_now_keep_the_time_of_day(vault: Vault) -> None:
    assert days(vault.history(since="1 day ago")) == ["day4"]  # 24 hours before a minute past noon
    assert days(vault.history(until="2 days ago")) == ["day2", "day1", "day0"]
