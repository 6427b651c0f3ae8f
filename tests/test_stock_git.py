"""Invariant 6: stock git may run beside vaultmem.  Tried as users do: agents
write through ``VaultMemoryTool`` in their own processes while an operator, an
auditor or a sync job runs git against the same vault.  Afterwards every
acknowledged call is in ``main`` exactly once, git's commands succeeded or
failed cleanly, and ``git fsck --strict`` and ``verify()`` are clean.

The deterministic versions run a git command at one named step of a write
(``vaultmem.commits.on_step``); a writer killed at each step leaves the vault
before or after its call; a lock of git's is waited for, never removed; and a
read writes nothing.
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from anthropic.lib.tools import ToolError
from conftest import budget
from stockgit_helpers import (
    SHARED,
    STEPS,
    GitRun,
    WriterLog,
    Zygote,
    commit_count,
    commits_module,
    expected_files,
    expected_shared_lines,
    fsck_strict,
    git_out,
    leftovers,
    listing,
    listing_diff,
    make_git_lock,
    memory_names,
    pack_files,
    rev,
    run_git,
    session_of,
    trailer_counts,
    writer_op,
)

from vaultmem import Vault, VaultMemoryTool
from vaultmem.errors import NotFoundError, VaultError

# Seconds each concurrent run lasts (writers stop then); longer runs find more.
SECONDS = float(os.environ.get("VAULTMEM_STOCKGIT_SECONDS") or budget(3, 1.5))
WRITER_LIMIT = 600  # calls per writer at most, so the checks afterwards stay quick
GIT_LIMIT = 5_000  # rounds of the git loop at most


# -- processes ------------------------------------------------------------------------


@dataclass
class Outcome:
    """What the processes of one run reported."""

    writers: dict[int, WriterLog]
    git_runs: list[GitRun] = field(default_factory=list)
    scratch: WriterLog | None = None

    @property
    def acked(self) -> int:
        return sum(len(log.acked) for log in self.writers.values())

    @property
    def refused(self) -> int:
        return sum(len(log.refused) for log in self.writers.values())


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    z = Zygote()
    yield z
    z.close()


def _read_git_runs(path: Path) -> list[GitRun]:
    runs = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            runs.append(GitRun(tuple(record["args"]), record["rc"], "", record["stderr"]))
    return runs


def _errors(path: Path) -> str:
    return path.read_text(encoding="utf-8") if path.exists() else ""


def run_beside(
    zygote: Zygote,
    kind: str,
    vault_path: Path,
    key: str,
    work: Path,
    writers: int = 3,
    seconds: float = SECONDS,
    limit: int = WRITER_LIMIT,
    loops: int = 1,
) -> Outcome:
    """``writers`` vaultmem writer processes, and ``loops`` processes running
    ``kind`` (a stock git command in a loop, or ``scratch``: a libgit2 writer
    on another ref) until the writers are done."""
    go, stop = work / "go", work / "stop"
    outs = {w: work / f"writer-{w}.jsonl" for w in range(writers)}
    pids: dict[int, Path] = {}
    for w in range(writers):
        args = (str(vault_path), str(w), str(seconds), str(limit), str(outs[w]))
        pids[zygote.spawn(key, go, work / f"writer-{w}.err", "writer", *args)] = work / f"writer-{w}.err"
    bound = str(seconds + 60)  # the other processes stop when the writers are done, or after this
    others: dict[int, Path] = {}
    other_outs = [work / f"{kind}-{n}.jsonl" for n in range(loops)]
    for n, out in enumerate(other_outs):
        if kind == "scratch":
            args = (str(vault_path), bound, str(GIT_LIMIT), str(out), str(stop))
        else:
            args = (kind, str(vault_path), str(work), bound, str(GIT_LIMIT), str(out), str(stop))
        role = "scratch" if kind == "scratch" else "gitloop"
        others[zygote.spawn(key, go, work / f"{kind}-{n}.err", role, *args)] = work / f"{kind}-{n}.err"
    go.touch()
    for pid, err in pids.items():
        assert zygote.wait(pid) == 0, f"a vaultmem writer crashed:\n{_errors(err)}"
    stop.touch()
    for pid, err in others.items():
        assert zygote.wait(pid) == 0, f"the {kind} process crashed:\n{_errors(err)}"
    outcome = Outcome({w: WriterLog.read(outs[w]) for w in range(writers)})
    if kind == "scratch":
        outcome.scratch = WriterLog.read(other_outs[0])
    else:
        outcome.git_runs = [run for out in other_outs for run in _read_git_runs(out)]
    return outcome


def figures(kind: str, vault_path: Path, outcome: Outcome) -> str:
    """acknowledged / present / lost, for the record of the run."""
    try:
        counts = trailer_counts(vault_path)
    except AssertionError as err:  # main's history itself is broken
        return f"{kind}: acknowledged {outcome.acked}, present unknown ({str(err).strip()[:200]})"
    present = 0
    for w, log in outcome.writers.items():
        for command in ("create", "str_replace", "insert"):
            present += min(counts.get((session_of(w), command), 0), log.count(command, w))
    git_failed = sum(1 for run in outcome.git_runs if run.returncode != 0)
    return (
        f"{kind}: acknowledged {outcome.acked}, present {present}, lost {outcome.acked - present}, "
        f"refused {outcome.refused}; git runs {len(outcome.git_runs)} ({git_failed} failed)"
    )


def assert_every_acknowledged_call_is_there_once(vault_path: Path, key: str, outcome: Outcome) -> None:
    """The memory is what the acknowledged calls made it, each of them one commit of main."""
    summary = figures("run", vault_path, outcome)
    walk = run_git(vault_path, "rev-list", "refs/heads/main")
    assert walk.returncode == 0, f"main's history is broken: {walk.stderr.strip()} ({summary})"
    for w, log in outcome.writers.items():
        for i, message in log.refused.items():
            assert message.startswith("Error:"), message
            op = writer_op(w, i)
            follows_a_refusal = op["command"] == "str_replace" and i - 1 in log.refused
            # Only a lock another program held past vaultmem's bounded wait may refuse a call.
            assert ".lock" in message or follows_a_refusal, f"writer {w} call {i} refused: {message} ({summary})"
    vault = Vault.open(vault_path, key=key)
    expected: dict[str, str] = {}
    for w, log in outcome.writers.items():
        expected.update(expected_files(w, log.acked))
    assert memory_names(vault_path) == sorted([*expected, SHARED]), summary
    for path, text in expected.items():
        assert vault.read(path) == text, f"{path} ({summary})"
    lines = vault.read(SHARED).splitlines()
    assert lines[-1] == "bottom", summary
    for w, log in outcome.writers.items():
        assert [line for line in lines if line.startswith(f"w{w}-")] == expected_shared_lines(w, log.acked), summary
    counts = trailer_counts(vault_path)
    for w, log in outcome.writers.items():
        for command in ("create", "str_replace", "insert"):
            found = counts.get((session_of(w), command), 0)
            assert found == log.count(command, w), f"writer {w}: {found} {command} commits ({summary})"
    assert commit_count(vault_path) == 1 + outcome.acked, summary
    assert git_out(vault_path, "rev-list", "--min-parents=2", "refs/heads/main") == ""
    fsck_strict(vault_path)
    report = vault.verify()
    assert report.ok, f"verify: {report.findings} ({summary})"
    assert leftovers(vault_path) == [], summary


def assert_git_ran_cleanly(outcome: Outcome) -> None:
    assert outcome.git_runs, "stock git never ran"
    unclean = [run.describe() for run in outcome.git_runs if not run.clean]
    assert not unclean, unclean[:5]
    assert any(run.returncode == 0 for run in outcome.git_runs), outcome.git_runs[-1].describe()


@pytest.fixture
def shared_vault(vault: Vault, vault_path: Path, tool: VaultMemoryTool) -> Path:
    tool.call({"command": "create", "path": SHARED, "file_text": "bottom\n"})
    return vault_path


GIT_KINDS = ["gc", "gc-auto", "repack", "pack-refs", "prune", "fsck", "mixed"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", GIT_KINDS)
def test_git_maintenance_beside_three_writers_loses_nothing(
    zygote: Zygote, kind: str, shared_vault: Path, key: str, tmp_path: Path
) -> None:
    outcome = run_beside(zygote, kind, shared_vault, key, tmp_path)
    print(figures(kind, shared_vault, outcome))
    for run in [run for run in outcome.git_runs if run.returncode != 0][:3]:
        print("   ", run.describe()[:300])
    assert outcome.acked >= 30, f"the writers hardly wrote: {figures(kind, shared_vault, outcome)}"
    assert_git_ran_cleanly(outcome)
    assert_every_acknowledged_call_is_there_once(shared_vault, key, outcome)


@pytest.mark.slow
def test_git_fetch_into_the_vault_beside_three_writers_loses_nothing(
    zygote: Zygote, shared_vault: Path, key: str, tmp_path: Path
) -> None:
    other = tmp_path / "other.git"
    git_out(tmp_path, "init", "--quiet", "--bare", str(other))
    outcome = run_beside(zygote, "fetch", shared_vault, key, tmp_path)
    print(figures("fetch", shared_vault, outcome))
    assert_git_ran_cleanly(outcome)
    fetched = rev(shared_vault, "refs/remotes/other/feed")
    assert git_out(shared_vault, "cat-file", "-t", fetched).strip() == "commit"
    assert_every_acknowledged_call_is_there_once(shared_vault, key, outcome)
    # What was fetched is whole: its history reads back in the vault.
    assert int(git_out(shared_vault, "rev-list", "--count", fetched).strip()) >= 1


@pytest.mark.slow
def test_git_push_from_the_vault_beside_three_writers_loses_nothing(
    zygote: Zygote, shared_vault: Path, key: str, tmp_path: Path
) -> None:
    mirror = tmp_path / "mirror.git"
    git_out(tmp_path, "init", "--quiet", "--bare", str(mirror))
    outcome = run_beside(zygote, "push", shared_vault, key, tmp_path)
    print(figures("push", shared_vault, outcome))
    assert_git_ran_cleanly(outcome)
    assert_every_acknowledged_call_is_there_once(shared_vault, key, outcome)
    # Every push was a fast-forward of an acknowledged state; one more brings the mirror level.
    pushed = rev(mirror, "refs/heads/main")
    assert run_git(shared_vault, "merge-base", "--is-ancestor", pushed, "refs/heads/main").returncode == 0
    final = run_git(shared_vault, "push", "--quiet", str(mirror), "refs/heads/*:refs/heads/*")
    assert final.returncode == 0, final.describe()
    assert rev(mirror, "refs/heads/main") == rev(shared_vault, "refs/heads/main")
    fsck_strict(mirror)


@pytest.mark.slow
def test_an_operators_update_ref_on_other_refs_beside_three_writers_loses_nothing(
    zygote: Zygote, shared_vault: Path, key: str, tmp_path: Path
) -> None:
    outcome = run_beside(zygote, "update-ref", shared_vault, key, tmp_path)
    print(figures("update-ref", shared_vault, outcome))
    assert_git_ran_cleanly(outcome)
    assert_every_acknowledged_call_is_there_once(shared_vault, key, outcome)
    tags = git_out(shared_vault, "for-each-ref", "--format=%(refname)", "refs/tags/").split()
    assert tags, "the operator's refs are gone"
    for tag in tags:  # each was main at some moment, so main still descends from it
        assert run_git(shared_vault, "merge-base", "--is-ancestor", tag, "refs/heads/main").returncode == 0, tag


@pytest.mark.slow
def test_another_libgit2_writer_on_another_ref_beside_three_writers_loses_nothing(
    zygote: Zygote, shared_vault: Path, key: str, tmp_path: Path
) -> None:
    outcome = run_beside(zygote, "scratch", shared_vault, key, tmp_path)
    print(figures("scratch", shared_vault, outcome))
    assert outcome.scratch is not None
    assert outcome.scratch.refused == {}, list(outcome.scratch.refused.values())[:3]
    assert outcome.scratch.acked, "the libgit2 writer never wrote"
    assert commit_count(shared_vault, "refs/heads/scratch") == len(outcome.scratch.acked)
    assert_every_acknowledged_call_is_there_once(shared_vault, key, outcome)


@pytest.mark.slow
def test_git_prune_in_a_tight_loop_refuses_no_write(
    zygote: Zygote, vault: Vault, vault_path: Path, key: str, tmp_path: Path
) -> None:
    """`git prune` removes every temporary file of the object folders it finds
    (``tmp_*``, any age); a write must not depend on one surviving.  Two loops
    of it, so one is always running."""
    VaultMemoryTool(vault, actor="setup").call({"command": "create", "path": SHARED, "file_text": "bottom\n"})
    outcome = run_beside(zygote, "prune", vault_path, key, tmp_path, writers=1, seconds=120, limit=100, loops=2)
    print(figures("prune, 100 writes", vault_path, outcome))
    assert outcome.writers[0].refused == {}, sorted(outcome.writers[0].refused.items())[:3]
    assert outcome.writers[0].acked == list(range(100))
    assert_git_ran_cleanly(outcome)
    assert_every_acknowledged_call_is_there_once(vault_path, key, outcome)


@pytest.mark.slow
def test_git_incremental_repack_in_a_loop_beside_two_writers_loses_nothing(
    zygote: Zygote, shared_vault: Path, key: str, tmp_path: Path
) -> None:
    """`git maintenance run --task=incremental-repack` writes a
    multi-pack-index, expires the packs it attributes no object to, and
    repacks small packs, while two agents write and their upkeep merges and
    retires packs.  Neither side may take away the last copy of an object,
    and the index git leaves names only packs that are there (fsck is run
    with it in place)."""
    go = tmp_path / "go"
    outs = {w: tmp_path / f"writer-{w}.jsonl" for w in range(2)}
    pids: dict[int, Path] = {}
    for w in range(2):
        args = (str(shared_vault), str(w), str(SECONDS), str(WRITER_LIMIT), str(outs[w]))
        pids[zygote.spawn(key, go, tmp_path / f"writer-{w}.err", "writer", *args)] = tmp_path / f"writer-{w}.err"
    go.touch()
    runs: list[GitRun] = []
    deadline = time.monotonic() + SECONDS
    while time.monotonic() < deadline and len(runs) < GIT_LIMIT:
        runs.append(run_git(shared_vault, "maintenance", "run", "--task=incremental-repack"))
    for pid, err in pids.items():
        assert zygote.wait(pid) == 0, f"a vaultmem writer crashed:\n{_errors(err)}"
    outcome = Outcome({w: WriterLog.read(outs[w]) for w in range(2)}, git_runs=runs)
    print(figures("incremental-repack", shared_vault, outcome))
    assert outcome.acked >= 30, f"the writers hardly wrote: {figures('incremental-repack', shared_vault, outcome)}"
    assert_git_ran_cleanly(outcome)
    assert (shared_vault / "objects" / "pack" / "multi-pack-index").exists()
    assert_every_acknowledged_call_is_there_once(shared_vault, key, outcome)
    # Once more, now that the writers are done: git expires what the last
    # merges replaced, and its index still reads every version.
    last = run_git(shared_vault, "maintenance", "run", "--task=incremental-repack")
    assert last.returncode == 0, last.describe()
    assert_every_acknowledged_call_is_there_once(shared_vault, key, outcome)
    verify = run_git(shared_vault, "multi-pack-index", "verify")
    assert verify.returncode == 0, verify.describe()


# -- deterministic: a git command at one step of a write --------------------------------

AT_STEP = {
    "repack-ad": ("repack", "-a", "-d", "-q"),
    "gc": ("gc", "--quiet"),
    "prune": ("prune",),
    "pack-refs-all": ("pack-refs", "--all"),
}


def _history_so_far(tool: VaultMemoryTool) -> dict[str, str]:
    files = {f"/memories/before/{n}.txt": f"before {n}\n" for n in range(3)}
    for path, text in files.items():
        tool.call({"command": "create", "path": path, "file_text": text})
    tool.call({"command": "str_replace", "path": "/memories/before/0.txt", "old_str": "before", "new_str": "edited"})
    files["/memories/before/0.txt"] = "edited 0\n"
    return files


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("command", list(AT_STEP))
def test_git_at_each_step_of_a_write_loses_nothing(
    command: str,
    step: str,
    vault: Vault,
    vault_path: Path,
    key: str,
    tool: VaultMemoryTool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    commits = commits_module()
    files = _history_so_far(tool)
    before = commit_count(vault_path)
    seen: list[str] = []
    runs: list[GitRun] = []

    def at_step(name: str) -> None:
        seen.append(name)
        if name == step and not runs:
            runs.append(run_git(vault_path, *AT_STEP[command]))

    monkeypatch.setattr(commits, "on_step", at_step)
    result = tool.call({"command": "create", "path": "/memories/during.txt", "file_text": "written meanwhile\n"})
    monkeypatch.setattr(commits, "on_step", None)

    assert result == "File created successfully at: /memories/during.txt"
    assert runs, f"the write never reported the step {step!r} (it reported {seen})"
    assert runs[0].clean, runs[0].describe()
    assert leftovers(vault_path) == []
    fsck_strict(vault_path)
    reopened = Vault.open(vault_path, key=key)
    assert reopened.read("/memories/during.txt") == "written meanwhile\n"
    for path, text in files.items():
        assert reopened.read(path) == text
    assert commit_count(vault_path) == before + 1
    top = reopened.history()[0]
    assert (top.command, top.paths, top.actor) == ("create", ("/memories/during.txt",), "support-bot")
    assert reopened.verify().ok, reopened.verify().findings
    # and the next write builds on it
    VaultMemoryTool(reopened, actor="next").call({"command": "create", "path": "/memories/after.txt", "file_text": "x"})
    assert rev(vault_path, "refs/heads/main^") == top.id
    fsck_strict(vault_path)


def test_every_ref_write_goes_through_the_steps_of_the_one_commit_path(
    vault: Vault, tool: VaultMemoryTool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A memory write, a policy change and a new data key each move one ref
    through every step; the steps that order what git can see come in order."""
    commits = commits_module()
    seen: list[str] = []
    monkeypatch.setattr(commits, "on_step", seen.append)
    writes = {
        "create": lambda: tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a"}),
        "set_policy": lambda: vault.set_policy(actor="operator", max_files=500),
        "rotate_key": lambda: vault.rotate_key(),
    }
    for name, write in writes.items():
        seen.clear()
        write()
        assert sorted(seen) == sorted(STEPS), f"{name}: {seen}"
        at = {step: seen.index(step) for step in STEPS}
        # The order docs/format.md gives: objects protected and in place, the
        # record durable, and only then the ref moved and the protection lifted.
        for earlier, later in itertools.pairwise(STEPS):
            assert at[earlier] < at[later], f"{name}: {earlier} after {later} in {seen}"


# -- a writer killed at each step ----------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("step", STEPS)
def test_a_writer_killed_at_each_step_leaves_the_vault_before_or_after_its_call(
    zygote: Zygote, step: str, vault: Vault, vault_path: Path, key: str, tool: VaultMemoryTool, tmp_path: Path
) -> None:
    commits_module()
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    before = commit_count(vault_path)
    go, err = tmp_path / "go", tmp_path / "killed.err"
    go.touch()
    pid = zygote.spawn(key, go, err, "die", str(vault_path), step, "/memories/killed.txt")
    code = zygote.wait(pid)
    assert code == 9, f"the writer was not killed at {step!r} (exit {code}): {_errors(err)}"
    fsck_strict(vault_path)  # stock git sees a valid repository right after the kill

    # A reader writes nothing, not even to clear up after the dead writer.
    vault.close()  # this process's own writer is done too
    seen = listing(vault_path)
    reader = Vault.open(vault_path, key=key)
    assert reader.read("/memories/a.txt") == "a\n"
    reader.history()
    assert listing_diff(seen, listing(vault_path)) == []

    # The next writer clears what the dead one left, and writes.
    after = VaultMemoryTool(Vault.open(vault_path, key=key), actor="next", session="after-the-kill")
    after.call({"command": "create", "path": "/memories/next.txt", "file_text": "next\n"})
    assert leftovers(vault_path) == []
    done = commit_count(vault_path) - before - 1
    assert done in (0, 1)
    names = memory_names(vault_path)
    assert names == sorted(["/memories/a.txt", "/memories/next.txt", *(["/memories/killed.txt"] if done else [])])
    reopened = Vault.open(vault_path, key=key)
    if done:
        assert reopened.read("/memories/killed.txt") == f"written when killed at {step}\n"
        assert reopened.history()[1].session == f"killed-at-{step}"
    fsck_strict(vault_path)
    assert reopened.verify().ok


# -- an operator moves main back -------------------------------------------------------


def _undo_by_update_ref(vault_path: Path, tool: VaultMemoryTool) -> tuple[str, str]:
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "b\n"})
    undone = rev(vault_path, "refs/heads/main")
    git_out(vault_path, "update-ref", "refs/heads/main", "refs/heads/main~1")
    kept = rev(vault_path, "refs/heads/main")
    assert kept == rev(vault_path, f"{undone}~1")
    return kept, undone


def test_an_operators_update_ref_back_is_not_undone_by_the_next_open_or_write(
    vault: Vault, vault_path: Path, key: str, tool: VaultMemoryTool
) -> None:
    kept, undone = _undo_by_update_ref(vault_path, tool)
    vault.close()  # the writer's upkeep is done; from here on only reads run
    seen = listing(vault_path)
    reopened = Vault.open(vault_path, key=key)
    assert rev(vault_path, "refs/heads/main") == kept, "opening the vault moved main forward again"
    assert reopened.read("/memories/a.txt") == "a\n"
    with pytest.raises(NotFoundError):
        reopened.read("/memories/b.txt")
    assert listing_diff(seen, listing(vault_path)) == [], "opening and reading wrote to the vault"
    assert rev(vault_path, "refs/heads/main") == kept, "main was moved forward again"

    VaultMemoryTool(reopened, actor="next").call({"command": "create", "path": "/memories/c.txt", "file_text": "c"})
    assert rev(vault_path, "refs/heads/main~1") == kept
    assert run_git(vault_path, "merge-base", "--is-ancestor", undone, "refs/heads/main").returncode == 1
    assert memory_names(vault_path) == ["/memories/a.txt", "/memories/c.txt"]
    head = rev(vault_path, "refs/heads/main")
    Vault.open(vault_path, key=key).read("/memories/c.txt")
    assert rev(vault_path, "refs/heads/main") == head
    fsck_strict(vault_path)
    assert Vault.open(vault_path, key=key).verify().ok


def test_a_vault_opened_before_an_operators_update_ref_builds_on_it(
    vault: Vault, vault_path: Path, tool: VaultMemoryTool
) -> None:
    kept, _ = _undo_by_update_ref(vault_path, tool)
    tool.call({"command": "create", "path": "/memories/c.txt", "file_text": "c"})
    assert rev(vault_path, "refs/heads/main~1") == kept
    assert memory_names(vault_path) == ["/memories/a.txt", "/memories/c.txt"]
    with pytest.raises(NotFoundError):
        vault.read("/memories/b.txt")
    fsck_strict(vault_path)


# -- a read never writes -------------------------------------------------------------


def _every_read(vault_path: Path, key: str) -> None:
    reader = Vault.open(vault_path, key=key)
    reader.read("/memories/a.txt")
    reader.listing("/memories")
    versions = reader.history()
    reader.read("/memories/a.txt", at=versions[-1].id)
    reader.diff(versions[-1].id)
    assert reader.verify().ok
    tool = VaultMemoryTool(reader, actor="auditor")
    tool.call({"command": "view", "path": "/memories"})
    tool.call({"command": "view", "path": "/memories/a.txt"})
    reader.close()


def test_opening_and_reading_write_nothing(vault: Vault, vault_path: Path, key: str, tool: VaultMemoryTool) -> None:
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    tool.call({"command": "str_replace", "path": "/memories/a.txt", "old_str": "a", "new_str": "b"})
    tool.call({"command": "create", "path": "/memories/gone.txt", "file_text": "g"})
    tool.call({"command": "delete", "path": "/memories/gone.txt"})
    vault.close()
    seen = listing(vault_path)
    _every_read(vault_path, key)
    assert listing_diff(seen, listing(vault_path)) == []


def test_reading_beside_a_git_lock_on_main_writes_nothing_and_leaves_the_lock(
    vault: Vault, vault_path: Path, key: str, tool: VaultMemoryTool
) -> None:
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    lock = vault_path / "refs/heads/main.lock"
    make_git_lock(lock, b"%s\n" % rev(vault_path, "refs/heads/main").encode())
    vault.close()  # the writer's upkeep is done; from here on only reads run
    seen = listing(vault_path)
    _every_read(vault_path, key)
    assert listing_diff(seen, listing(vault_path)) == []
    assert lock.exists()


def test_git_log_p_through_the_textconv_driver_writes_nothing(
    vault: Vault, vault_path: Path, key: str, tool: VaultMemoryTool
) -> None:
    """An auditor's `git log -p` runs vaultmem's textconv driver for each blob;
    it must not move a ref (as it did after an operator's update-ref)."""
    command = [sys.executable, "-P", "-m", "vaultmem", "--vault", str(vault_path), "textconv"]
    vault.configure_textconv(shlex.join(command))
    kept, _ = _undo_by_update_ref(vault_path, tool)
    vault.close()  # the writer's upkeep is done; from here on only reads run
    seen = listing(vault_path)
    log = subprocess.run(
        ["git", "-C", str(vault_path), "log", "-p", "refs/heads/main"],
        capture_output=True,
        text=True,
        env={**os.environ, "VAULTMEM_KEY": key},
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )
    assert log.returncode == 0, log.stderr
    assert "+a\n" in log.stdout  # the driver ran and decrypted
    assert listing_diff(seen, listing(vault_path)) == []
    assert rev(vault_path, "refs/heads/main") == kept


# -- locks of git's --------------------------------------------------------------------


@pytest.fixture
def git_holds_main(vault_path: Path, tool: VaultMemoryTool) -> Iterator[dict[Path, bytes]]:
    """`git pack-refs` (or an update-ref) under way: it holds main.lock and packed-refs.lock."""
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    locks = {
        vault_path / "refs/heads/main.lock": b"%s\n" % rev(vault_path, "refs/heads/main").encode(),
        vault_path / "packed-refs.lock": b"",
    }
    for path, content in locks.items():
        make_git_lock(path, content)
    yield locks
    for path in locks:
        path.unlink(missing_ok=True)


def test_a_write_waits_for_a_git_lock_then_fails_and_never_removes_it(
    vault: Vault, vault_path: Path, key: str, tool: VaultMemoryTool, git_holds_main: dict[Path, bytes]
) -> None:
    head = rev(vault_path, "refs/heads/main")
    identity = {path: (os.stat(path).st_ino, content) for path, content in git_holds_main.items()}
    vault.close()  # the upkeep of the earlier write is done: what changes now is the refused call's
    seen = listing(vault_path, exclude=())
    started = time.monotonic()
    with pytest.raises(ToolError) as refused:
        tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "b\n"})
    waited = time.monotonic() - started
    message = str(refused.value.content)
    assert message.startswith("Error:") and "main.lock" in message, message
    assert waited < 2.0 + 10, f"waited {waited:.1f} s for git's lock"
    for path, (inode, content) in identity.items():
        assert path.exists(), f"vaultmem removed git's {path.name}"
        assert (os.stat(path).st_ino, path.read_bytes()) == (inode, content)
    assert rev(vault_path, "refs/heads/main") == head
    changed = [line for line in listing_diff(seen, listing(vault_path, exclude=())) if " vaultmem/" not in line]
    assert changed == [], "the refused call changed the vault"

    for path in git_holds_main:  # git finishes
        path.unlink()
    tool.call({"command": "create", "path": "/memories/c.txt", "file_text": "c\n"})
    assert memory_names(vault_path) == ["/memories/a.txt", "/memories/c.txt"]
    assert rev(vault_path, "refs/heads/main~1") == head
    reopened = Vault.open(vault_path, key=key)
    with pytest.raises(NotFoundError):
        reopened.read("/memories/b.txt")
    fsck_strict(vault_path)


def test_the_wait_for_a_git_lock_is_bounded_by_lock_wait(
    vault: Vault,
    vault_path: Path,
    tool: VaultMemoryTool,
    git_holds_main: dict[Path, bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    commits = commits_module()
    monkeypatch.setattr(commits, "LOCK_WAIT", 0.25)
    head = rev(vault_path, "refs/heads/main")
    started = time.monotonic()
    with pytest.raises(VaultError) as refused:  # the library's error, not an OSError
        vault.undo(actor="operator")
    waited = time.monotonic() - started
    assert 0.25 <= waited < 0.25 + 5, waited
    assert "main.lock" in str(refused.value)
    assert all(path.exists() for path in git_holds_main)
    assert rev(vault_path, "refs/heads/main") == head


def test_a_write_that_waited_for_gits_update_of_main_builds_on_it(
    vault: Vault, vault_path: Path, key: str, tool: VaultMemoryTool
) -> None:
    """An operator's update-ref moves main back while an agent writes: the
    write waits for git's lock and then builds on what git wrote, or fails;
    it never undoes the operator's move."""
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "b\n"})
    target = rev(vault_path, "refs/heads/main~1")
    lock = vault_path / "refs/heads/main.lock"
    problems: list[str] = []
    locked = threading.Event()

    def git_update_ref() -> None:  # git's protocol: lock, write, rename over the ref
        make_git_lock(lock, f"{target}\n".encode())
        locked.set()
        time.sleep(0.3)
        try:
            os.rename(lock, vault_path / "refs/heads/main")
        except FileNotFoundError:
            problems.append("git's main.lock was removed under it")

    git = threading.Thread(target=git_update_ref)
    git.start()
    assert locked.wait(timeout=10)
    outcome: Any
    try:
        outcome = tool.call({"command": "create", "path": "/memories/c.txt", "file_text": "c\n"})
    except ToolError as err:
        outcome = err
    git.join(timeout=30)
    assert problems == []
    if isinstance(outcome, ToolError):
        assert str(outcome.content).startswith("Error:")
        assert rev(vault_path, "refs/heads/main") == target
        assert memory_names(vault_path) == ["/memories/a.txt"]
    else:
        assert rev(vault_path, "refs/heads/main~1") == target
        assert memory_names(vault_path) == ["/memories/a.txt", "/memories/c.txt"]
    fsck_strict(vault_path)
    assert Vault.open(vault_path, key=key).verify().ok


def test_no_file_of_a_finished_write_is_left_in_git_folders(vault_path: Path, tool: VaultMemoryTool) -> None:
    before = pack_files(vault_path)
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    assert leftovers(vault_path) == []
    assert all(name.endswith((".pack", ".idx")) for name in pack_files(vault_path) - before)
