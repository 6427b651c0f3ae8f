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
