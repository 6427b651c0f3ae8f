"""Expiry: the read log, ``vault.expire`` and the tool's automatic mode, on
real vaults.  Time is the injected FakeClock (or ``now=``); nothing sleeps.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pygit2
import pytest
from conftest import FakeClock, commit_count, git

from vaultmem import Change, InvalidPathError, Vault, VaultError, VaultMemoryTool
from vaultmem.core.paths import parse
from vaultmem.git.snapshot import Snapshot
from vaultmem.ops.expiry import ExpireResult, StaleFile, find_stale
from vaultmem.repo.policy import POLICY_REF

DAY = 86_400
MARKER = "MARKER-CONTENT-4471"


# -- helpers ---------------------------------------------------------------------


def files_of(vault: Vault, at: str | None = None) -> dict[str, str]:
    return {e.path: vault.read(e.path, at=at) for e in vault.listing(at=at) if e.kind == "file"}


def log_path(vault_path: Path) -> Path:
    return vault_path / "vaultmem" / "reads"


def log_text(vault_path: Path) -> str:
    path = log_path(vault_path)
    return path.read_text(encoding="utf-8") if path.exists() else ""


def when(moment: float) -> datetime:
    return datetime.fromtimestamp(int(moment), tz=timezone.utc)


def paths_of(result: ExpireResult) -> list[str]:
    return [s.path for s in result.stale]


def create(tool: VaultMemoryTool, path: str, text: str = "x\n") -> None:
    tool.call({"command": "create", "path": path, "file_text": text})


def listed(tool: VaultMemoryTool) -> list[str]:
    """The paths a view of /memories shows (a directory view logs no read)."""
    lines = tool.call({"command": "view", "path": "/memories"}).splitlines()[2:]
    return [line.split("\t", 1)[1] for line in lines]


def fsck_clean(vault_path: Path) -> None:
    result = subprocess.run(["git", "-C", str(vault_path), "fsck", "--strict", "--no-progress"], capture_output=True)
    assert result.returncode == 0, result.stderr


@pytest.fixture
def t0(clock: FakeClock) -> int:
    return int(clock.now)


# -- the read log ------------------------------------------------------------------


def test_a_write_and_a_view_log_time_and_path_only_in_a_private_file(
    vault: Vault, vault_path: Path, tool: VaultMemoryTool, clock: FakeClock, t0: int
) -> None:
    create(tool, "/memories/notes/a.txt", f"{MARKER}\n")
    assert log_text(vault_path) == f"{t0}\t/memories/notes/a.txt\n"
    clock.advance(120)
    assert MARKER in tool.call({"command": "view", "path": "/memories/notes/a.txt"})
    assert log_text(vault_path) == f"{t0}\t/memories/notes/a.txt\n{t0 + 120}\t/memories/notes/a.txt\n"
    assert stat.S_IMODE(os.stat(log_path(vault_path)).st_mode) == 0o600
    tool.call({"command": "str_replace", "path": "/memories/notes/a.txt", "old_str": MARKER, "new_str": "OTHER-9"})
    raw = log_path(vault_path).read_bytes()
    assert MARKER.encode() not in raw and b"OTHER-9" not in raw
    assert vault.reads.load() == {"/memories/notes/a.txt": t0 + 120}


def test_viewing_a_directory_or_a_missing_path_logs_nothing(
    vault_path: Path, tool: VaultMemoryTool, clock: FakeClock, t0: int
) -> None:
    create(tool, "/memories/notes/a.txt")
    clock.advance(120)
    tool.call({"command": "view", "path": "/memories"})
    tool.call({"command": "view", "path": "/memories/notes"})
    tool.call({"command": "view", "path": "/memories/notes/"})
    with pytest.raises(Exception, match="does not exist"):
        tool.call({"command": "view", "path": "/memories/missing.txt"})
    assert log_text(vault_path) == f"{t0}\t/memories/notes/a.txt\n"


def test_a_viewed_path_is_logged_at_most_once_a_minute(
    vault_path: Path, tool: VaultMemoryTool, clock: FakeClock, t0: int
) -> None:
    create(tool, "/memories/a.txt")
    create(tool, "/memories/b.txt")
    clock.advance(120)
    view = {"command": "view", "path": "/memories/a.txt"}
    tool.call(view)  # t0+120: logged
    clock.advance(30)
    tool.call(view)  # t0+150: too soon
    tool.call({"command": "view", "path": "/memories/b.txt"})  # another path: logged
    clock.advance(29)
    tool.call(view)  # t0+179: too soon
    clock.advance(1)
    tool.call(view)  # t0+180: a minute later, logged
    tool.call(view)
    assert log_text(vault_path).splitlines() == [
        f"{t0}\t/memories/a.txt",
        f"{t0}\t/memories/b.txt",
        f"{t0 + 120}\t/memories/a.txt",
        f"{t0 + 150}\t/memories/b.txt",
        f"{t0 + 180}\t/memories/a.txt",
    ]


def test_every_successful_write_is_logged_even_within_a_minute(
    vault_path: Path, tool: VaultMemoryTool, t0: int
) -> None:
    create(tool, "/memories/a.txt", "one\n")
    tool.call({"command": "str_replace", "path": "/memories/a.txt", "old_str": "one", "new_str": "two"})
    tool.call({"command": "insert", "path": "/memories/a.txt", "insert_line": 0, "insert_text": "zero\n"})
    tool.call({"command": "rename", "old_path": "/memories/a.txt", "new_path": "/memories/b.txt"})
    tool.call({"command": "delete", "path": "/memories/b.txt"})
    with pytest.raises(Exception, match="does not exist"):
        tool.call({"command": "str_replace", "path": "/memories/b.txt", "old_str": "x", "new_str": "y"})
    assert log_text(vault_path).splitlines() == [
        f"{t0}\t/memories/a.txt",
        f"{t0}\t/memories/a.txt",
        f"{t0}\t/memories/a.txt",
        f"{t0}\t/memories/b.txt",
    ]


def test_note_read_logs_a_canonical_path_and_refuses_an_invalid_one(
    vault: Vault, vault_path: Path, clock: FakeClock, t0: int
) -> None:
    vault.note_read("/memories/x.txt")
    with pytest.raises(InvalidPathError):
        vault.note_read("/etc/passwd")
    with pytest.raises(InvalidPathError):
        vault.note_read("/memories/../secrets")
    assert log_text(vault_path) == f"{t0}\t/memories/x.txt\n"


def test_the_log_loader_keeps_the_latest_time_and_skips_malformed_lines(vault: Vault, vault_path: Path) -> None:
    log_path(vault_path).write_text(
        "7\t/memories/z.txt\n"
        "3\t/memories/z.txt\n"
        "abc\t/memories/x.txt\n"
        "12 /memories/y.txt\n"
        "5\t/etc/passwd\n"
        "-4\t/memories/w.txt\n"
        "\n"
        "9\t/memories/v.txt"
    )
    assert vault.reads.load() == {"/memories/z.txt": 7, "/memories/v.txt": 9}


# -- vault.expire -----------------------------------------------------------------


@pytest.fixture
def aged(vault: Vault, tool: VaultMemoryTool, clock: FakeClock, t0: int) -> Vault:
    """a.txt, b.txt and dir/c.txt written at t0, b.txt read at t0+10d; now t0+31d."""
    create(tool, "/memories/a.txt", "alpha\n")
    create(tool, "/memories/b.txt", "bravo\n")
    create(tool, "/memories/dir/c.txt", "charlie\n")
    clock.advance(10 * DAY)
    tool.call({"command": "view", "path": "/memories/b.txt"})
    clock.advance(21 * DAY)
    return vault


def test_expire_deletes_every_file_unused_for_the_period_as_one_commit(
    aged: Vault, vault_path: Path, t0: int, clock: FakeClock
) -> None:
    before = commit_count(vault_path)
    result = aged.expire("30d", actor="ops", session="cleanup-1")
    assert result.stale == (
        StaleFile("/memories/a.txt", when(t0)),
        StaleFile("/memories/dir/c.txt", when(t0)),
    )
    version = result.version
    assert version is not None
    assert (version.command, version.actor, version.session) == ("expire", "ops", "cleanup-1")
    assert version.paths == ("/memories/a.txt", "/memories/dir/c.txt")
    assert version.time == when(clock.now)
    assert commit_count(vault_path) == before + 1
    assert files_of(aged) == {"/memories/b.txt": "bravo\n"}
    body = git(vault_path, "log", "-1", "--format=%B", "main")
    trailers = [line for line in body.splitlines() if line.startswith("Vaultmem-")]
    assert trailers == [
        "Vaultmem-Command: expire",
        "Vaultmem-Path: /memories/a.txt",
        "Vaultmem-Path: /memories/dir/c.txt",
        "Vaultmem-Actor: ops",
        "Vaultmem-Session: cleanup-1",
    ]
    assert git(vault_path, "show", "--name-status", "--format=", "main").split() == [
        "D",
        "memories/a.txt",
        "D",
        "memories/dir/c.txt",
    ]
    assert [v.id for v in aged.history(command="expire")] == [version.id]


def test_expire_defaults_to_actor_vaultmem_without_a_session(aged: Vault) -> None:
    version = aged.expire("30d").version
    assert version is not None
    assert (version.actor, version.session) == ("vaultmem", None)


def test_a_dry_run_lists_the_same_files_and_changes_nothing(aged: Vault, vault_path: Path) -> None:
    head = git(vault_path, "rev-parse", "main").strip()
    log = log_text(vault_path)
    dry = aged.expire("30d", dry_run=True)
    assert dry.version is None
    assert paths_of(dry) == ["/memories/a.txt", "/memories/dir/c.txt"]
    assert git(vault_path, "rev-parse", "main").strip() == head
    assert log_text(vault_path) == log
    assert len(files_of(aged)) == 3
    assert aged.expire("30d").stale == dry.stale


def test_nothing_stale_makes_no_commit(aged: Vault, vault_path: Path) -> None:
    head = git(vault_path, "rev-parse", "main").strip()
    result = aged.expire("32d")
    assert result == ExpireResult((), None)
    assert git(vault_path, "rev-parse", "main").strip() == head


def test_an_empty_vault_has_nothing_to_expire(vault: Vault, vault_path: Path) -> None:
    assert vault.expire("1s") == ExpireResult((), None)
    assert commit_count(vault_path) == 0


def test_the_cutoff_is_inclusive_to_the_second(vault: Vault, tool: VaultMemoryTool, t0: int) -> None:
    create(tool, "/memories/a.txt")
    assert vault.expire(3600, dry_run=True, now=t0 + 3599).stale == ()
    assert paths_of(vault.expire(3600, dry_run=True, now=t0 + 3600)) == ["/memories/a.txt"]


@pytest.mark.parametrize("age", ["30d", "720h", "43200m", 30 * DAY, timedelta(days=30)])
def test_unread_for_takes_every_duration_form(aged: Vault, age: object) -> None:
    assert paths_of(aged.expire(age, dry_run=True)) == ["/memories/a.txt", "/memories/dir/c.txt"]  # type: ignore[arg-type]
    assert paths_of(aged.expire("20d", dry_run=True)) == ["/memories/a.txt", "/memories/b.txt", "/memories/dir/c.txt"]


@pytest.mark.parametrize("age", ["soon", "30x", "", 0, -1, True, timedelta(0)])
def test_a_bad_duration_is_refused_before_anything_happens(aged: Vault, vault_path: Path, age: object) -> None:
    before = commit_count(vault_path)
    with pytest.raises(VaultError):
        aged.expire(age)  # type: ignore[arg-type]
    assert commit_count(vault_path) == before


def test_time_comes_from_the_vault_clock_unless_now_is_given(
    vault: Vault, tool: VaultMemoryTool, clock: FakeClock, t0: int
) -> None:
    create(tool, "/memories/a.txt")
    clock.advance(2 * DAY)
    assert paths_of(vault.expire("1d", dry_run=True)) == ["/memories/a.txt"]
    assert vault.expire("1d", dry_run=True, now=t0 + 3600).stale == ()
    assert paths_of(vault.expire("1d", dry_run=True, now=t0 + DAY)) == ["/memories/a.txt"]


def test_restore_brings_expired_files_back(aged: Vault, vault_path: Path) -> None:
    before = files_of(aged)
    version = aged.expire("30d").version
    assert version is not None
    restored = aged.restore(version.id + "^", actor="ops")
    assert restored is not None
    assert files_of(aged) == before
    assert aged.verify().ok


def test_a_restored_file_is_not_expired_again_right_away(aged: Vault, clock: FakeClock) -> None:
    """Last use is the later of the last logged read and the newest commit that
    wrote the file's current blob; the restore wrote it back just now."""
    version = aged.expire("30d", actor="ops").version
    assert version is not None
    aged.restore(version.id + "^", actor="ops")
    clock.advance(60)
    assert aged.expire("30d", dry_run=True).stale == ()


def test_a_file_written_after_it_was_found_stale_is_kept(aged: Vault, tool: VaultMemoryTool, clock: FakeClock) -> None:
    found = find_stale(aged, aged.snapshot(), 30 * DAY, clock.now)
    assert [p.text for p, _, _ in found] == ["/memories/a.txt", "/memories/dir/c.txt"]
    tool.call({"command": "str_replace", "path": "/memories/a.txt", "old_str": "alpha", "new_str": "alpha two"})
    result = aged.expire("30d")
    assert result.version is not None
    assert result.version.paths == ("/memories/dir/c.txt",)
    assert paths_of(result) == ["/memories/dir/c.txt"]
    assert files_of(aged) == {"/memories/a.txt": "alpha two\n", "/memories/b.txt": "bravo\n"}


def _feed_fifo(fifo: Path, deadline: float) -> None:
    """Wait for a reader to open ``fifo``, then give it an empty log (EOF)."""
    while True:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as err:
            if err.errno != errno.ENXIO:
                raise
            assert time.monotonic() < deadline, "expire never read its log"
            time.sleep(0.002)
            continue
        os.close(fd)
        return


def _run(target: Callable[[], Any], outcome: dict[str, Any], name: str) -> threading.Thread:
    def body() -> None:
        try:
            outcome[name] = target()
        except BaseException as err:  # reported by the test
            outcome[name] = err

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


def test_a_file_rewritten_while_expire_runs_is_kept(
    vault: Vault, vault_path: Path, key: str, tool: VaultMemoryTool, clock: FakeClock
) -> None:
    """Driven step by step: expire takes its snapshot and reads its log (a FIFO
    here, so the test knows when), a writer then commits a new a.txt, and only
    then does expire reach the writer lock.  Its re-check must keep a.txt."""
    create(tool, "/memories/a.txt", "alpha\n")
    create(tool, "/memories/b.txt", "bravo\n")
    clock.advance(31 * DAY)
    log = log_path(vault_path)
    log.unlink()
    os.mkfifo(log, 0o600)
    deadline = time.monotonic() + 60
    writer = Vault.open(vault_path, key=key, clock=clock)
    a = parse("/memories/a.txt")
    in_build, go = threading.Event(), threading.Event()

    def build(snap: Snapshot) -> Change:
        in_build.set()
        assert go.wait(60)
        return Change("str_replace", (a,)).write(a, b"rewritten\n")

    outcome: dict[str, Any] = {}
    write = _run(lambda: writer.mutate(build, actor="other-bot", session="s-w"), outcome, "write")
    try:
        assert in_build.wait(60)  # the writer holds the lock; a.txt is still the old one
        run = _run(lambda: vault.expire("30d", actor="ops"), outcome, "expire")
        _feed_fifo(log, deadline)  # expire has its snapshot and is reading the log
        # Its later reads of the log (under the lock, after its commit) find
        # none, and the writer can log nothing: only the re-check can keep a.txt.
        log.unlink()
        log.mkdir()
    finally:
        go.set()
    write.join(60)
    assert not write.is_alive()
    assert not isinstance(outcome["write"], BaseException), outcome["write"]
    run.join(60)
    assert not run.is_alive()
    result = outcome["expire"]
    assert isinstance(result, ExpireResult), result
    assert result.version is not None
    assert result.version.paths == ("/memories/b.txt",)
    assert paths_of(result) == ["/memories/b.txt"]
    assert files_of(vault) == {"/memories/a.txt": "rewritten\n"}
    log.rmdir()


def test_without_the_read_log_last_use_comes_from_the_history(
    vault: Vault, vault_path: Path, tool: VaultMemoryTool, clock: FakeClock, t0: int
) -> None:
    for name in ("a", "b", "c"):
        create(tool, f"/memories/{name}.txt", f"{name}\n")
    clock.advance(5 * DAY)
    tool.call({"command": "str_replace", "path": "/memories/b.txt", "old_str": "b", "new_str": "bb"})
    clock.advance(3 * DAY)
    tool.call({"command": "rename", "old_path": "/memories/c.txt", "new_path": "/memories/d.txt"})
    clock.advance(DAY)
    tool.call({"command": "view", "path": "/memories/a.txt"})  # logged, then lost with the log
    log_path(vault_path).unlink()
    clock.advance(31 * DAY)
    assert vault.expire("1d", dry_run=True).stale == (
        StaleFile("/memories/a.txt", when(t0)),
        StaleFile("/memories/b.txt", when(t0 + 5 * DAY)),
        StaleFile("/memories/d.txt", when(t0 + 8 * DAY)),
    )
    result = vault.expire("34d")  # cutoff t0+6d
    assert paths_of(result) == ["/memories/a.txt", "/memories/b.txt"]
    assert files_of(vault) == {"/memories/d.txt": "c\n"}


def test_a_logged_read_keeps_a_file_the_history_calls_old(
    vault: Vault, tool: VaultMemoryTool, clock: FakeClock
) -> None:
    create(tool, "/memories/a.txt")
    create(tool, "/memories/b.txt")
    clock.advance(20 * DAY)
    vault.note_read("/memories/a.txt")
    clock.advance(11 * DAY)
    assert paths_of(vault.expire("30d")) == ["/memories/b.txt"]
    assert list(files_of(vault)) == ["/memories/a.txt"]


def test_expiring_every_file_leaves_an_empty_memory_that_still_works(
    vault: Vault, vault_path: Path, tool: VaultMemoryTool, clock: FakeClock
) -> None:
    create(tool, "/memories/a.txt")
    create(tool, "/memories/x/y/z.txt")
    clock.advance(2 * DAY)
    assert paths_of(vault.expire("1d")) == ["/memories/a.txt", "/memories/x/y/z.txt"]
    assert vault.listing() == []
    assert listed(tool) == []
    create(tool, "/memories/new.txt")
    assert list(files_of(vault)) == ["/memories/new.txt"]


def test_verify_and_fsck_are_clean_after_expiry(aged: Vault, vault_path: Path) -> None:
    assert aged.expire("30d").version is not None
    report = aged.verify()
    assert report.ok, report.problems
    fsck_clean(vault_path)


def test_verify_is_clean_after_expiring_every_file(aged: Vault, vault_path: Path) -> None:
    assert paths_of(aged.expire("1d")) == ["/memories/a.txt", "/memories/b.txt", "/memories/dir/c.txt"]
    report = aged.verify()
    assert report.ok, report.problems
    fsck_clean(vault_path)


# -- automatic expiry ---------------------------------------------------------------


def test_automatic_expiry_runs_before_a_call_as_vaultmem_expiry_with_the_tools_session(
    vault: Vault, vault_path: Path, clock: FakeClock, t0: int
) -> None:
    vault.set_policy(actor="ops", expire_after="1d")
    tool = VaultMemoryTool(vault, actor="bot", session="sess-auto")
    create(tool, "/memories/a.txt")
    create(tool, "/memories/b.txt")
    assert commit_count(vault_path) == 2  # the first call's run found nothing
    clock.advance(DAY - 60)
    create(VaultMemoryTool(vault, actor="other", session="sess-other"), "/memories/c.txt")
    clock.advance(60)
    assert listed(tool) == ["/memories/c.txt"]  # the expiry ran before the view
    version = vault.history(limit=1)[0]
    assert (version.command, version.actor, version.session) == ("expire", "vaultmem-expiry", "sess-auto")
    assert version.paths == ("/memories/a.txt", "/memories/b.txt")
    assert commit_count(vault_path) == 4
    assert vault.verify().ok


def test_automatic_expiry_runs_at_most_once_an_hour_per_tool(vault: Vault, vault_path: Path, clock: FakeClock) -> None:
    vault.set_policy(actor="ops", expire_after="1d")
    tool = VaultMemoryTool(vault, actor="bot", session="s-1")
    create(tool, "/memories/a.txt")  # t0: a run, nothing stale
    clock.advance(DAY - 1800)
    assert listed(tool) == ["/memories/a.txt"]  # a run, a.txt not stale yet
    clock.advance(1801)  # a.txt is stale now, but the last run was 1801 s ago
    assert listed(tool) == ["/memories/a.txt"]
    clock.advance(3600 - 1802)
    assert listed(tool) == ["/memories/a.txt"]  # 3599 s since the last run
    clock.advance(1)
    assert listed(tool) == []  # an hour since the last run
    assert [v.command for v in vault.history()] == ["expire", "create"]


def test_each_tool_makes_its_own_first_run(vault: Vault, clock: FakeClock) -> None:
    vault.set_policy(actor="ops", expire_after="2h")
    first = VaultMemoryTool(vault, actor="bot", session="s-1")
    create(first, "/memories/a.txt")  # t0: a run
    clock.advance(3601)
    assert listed(first) == ["/memories/a.txt"]  # a run: a.txt not stale yet
    clock.advance(3599)
    assert listed(first) == ["/memories/a.txt"]  # a.txt is stale, but first ran 3599 s ago
    second = VaultMemoryTool(vault, actor="bot", session="s-2")
    assert listed(second) == []
    assert vault.history(limit=1)[0].session == "s-2"


def test_without_expire_after_nothing_expires_automatically(vault: Vault, vault_path: Path, clock: FakeClock) -> None:
    tool = VaultMemoryTool(vault, actor="bot", session="s-1")
    create(tool, "/memories/a.txt")
    clock.advance(3650 * DAY)
    assert listed(tool) == ["/memories/a.txt"]
    assert commit_count(vault_path) == 1


def test_an_application_override_can_turn_automatic_expiry_on_and_off(vault: Vault, clock: FakeClock) -> None:
    vault.set_policy(actor="ops", expire_after="1d")
    keeper = VaultMemoryTool(vault, actor="bot", session="s-keep", policy={"expire_after": None})
    create(keeper, "/memories/a.txt")
    clock.advance(2 * DAY)
    assert listed(keeper) == ["/memories/a.txt"]
    sweeper = VaultMemoryTool(vault, actor="bot", session="s-sweep", policy={"expire_after": "2d"})
    assert listed(sweeper) == []


def test_a_failing_automatic_run_does_not_fail_the_call(
    vault: Vault, vault_path: Path, clock: FakeClock, tool: VaultMemoryTool
) -> None:
    vault.set_policy(actor="ops", expire_after="1d")
    create(tool, "/memories/a.txt", "alpha\n")
    clock.advance(2 * DAY)
    # The policy is then altered without the key: the automatic run cannot read it.
    repo = pygit2.Repository(str(vault_path))
    tip = repo.references[POLICY_REF].peel(pygit2.Commit)
    forged = repo.create_commit(None, tip.author, tip.committer, "policy: forged\n", tip.tree_id, [tip.id])
    repo.references.create(POLICY_REF, forged, force=True)
    assert "alpha" in tool.call({"command": "view", "path": "/memories/a.txt"})
    assert list(files_of(vault)) == ["/memories/a.txt"]
