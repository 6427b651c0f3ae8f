"""Invariant 4: durable when acknowledged.  A writer killed at any instant leaves
the vault at the state before or after its call, fsck-clean and writable; the
next writer clears exactly what the dead one left (never another program's
files) and finishes a move the dead one had made durable; after a power cut
(a new epoch) the journal rebuilds what git's files lost."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from anthropic.lib.tools import ToolError
from conftest import commit_count, git

from vaultmem import Vault, VaultMemoryTool
from vaultmem.errors import BusyError, IntegrityError
from vaultmem.git import commits, journal, objects, upkeep

TESTS = Path(__file__).resolve().parent


def op(r: int, i: int) -> dict:
    """The i-th mutation of crash round r: create, insert, str_replace, rename or delete."""
    base = i - i % 4
    step = i % 4
    if step == 0:
        return {"command": "create", "path": f"/memories/r{r}/f{i}.txt", "file_text": f"op {i}\n"}
    if step == 1:
        return {"command": "insert", "path": "/memories/log.txt", "insert_line": 0, "insert_text": f"r{r}-{i}"}
    if step == 2:
        return {
            "command": "str_replace",
            "path": f"/memories/r{r}/f{base}.txt",
            "old_str": f"op {base}",
            "new_str": f"op {base} edited",
        }
    if i % 8 == 3:
        old, new = f"/memories/r{r}/f{base}.txt", f"/memories/r{r}/g{base}.txt"
        return {"command": "rename", "old_path": old, "new_path": new}
    return {"command": "delete", "path": f"/memories/r{r}/f{base}.txt"}


def expected_state(r: int, n: int) -> tuple[dict[str, str], list[str]]:
    """The round's files and log lines after its first n mutations."""
    files: dict[str, str] = {}
    log: list[str] = []
    for i in range(n):
        params = op(r, i)
        command = params["command"]
        if command == "create":
            files[params["path"]] = params["file_text"]
        elif command == "insert":
            log.insert(0, params["insert_text"])
        elif command == "str_replace":
            files[params["path"]] = files[params["path"]].replace(params["old_str"], params["new_str"])
        elif command == "rename":
            files[params["new_path"]] = files.pop(params["old_path"])
        else:
            del files[params["path"]]
    return files, log


def actual_state(vault: Vault, vault_path: Path, r: int) -> tuple[dict[str, str], list[str]]:
    names = git(vault_path, "ls-tree", "-r", "--name-only", "main", "--", f"memories/r{r}/").split()
    files = {f"/{name}": vault.read(f"/{name}") for name in names}
    log = [line for line in vault.read("/memories/log.txt").splitlines() if line.startswith(f"r{r}-")]
    return files, log


# A single-threaded helper that imports vaultmem once and forks a worker per
# round; the test kills the worker with SIGKILL, or the worker dies by itself
# at a named step of the commit path; the helper reports how it died.
HELPER = r"""
import os, sys
sys.path.insert(0, sys.argv[1])
from test_crash import op
from vaultmem import Vault, VaultMemoryTool, commits

def worker(kind, path, key, arg):
    if kind == "crash":
        r = int(arg)
        tool = VaultMemoryTool(Vault.open(path, key=key), actor="crasher", session=f"round-{r}")
        os.write(1, b"ready %d\n" % os.getpid())
        for i in range(1_000_000):
            tool.call(op(r, i))
            os.write(1, b"ack %d\n" % i)
    else:
        step, target = arg.split(":", 1)
        def die(name):
            if name == step:
                os._exit(7)  # as a SIGKILL would: nothing is cleaned up
        tool = VaultMemoryTool(Vault.open(path, key=key), actor="dying", session="last-words")
        os.write(1, b"ready %d\n" % os.getpid())
        commits.on_step = die
        tool.call({"command": "create", "path": target, "file_text": "written just before the crash\n"})
        os.write(1, b"ack 0\n")

for line in sys.stdin:
    kind, path, key, arg = line.split()
    pid = os.fork()
    if pid == 0:
        try:
            worker(kind, path, key, arg)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    os.write(1, b"exit %d\n" % os.waitstatus_to_exitcode(status))
"""


class Helper:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HELPER, str(TESTS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def start(self, kind: str, vault_path: Path, key: str, arg: str) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{kind} {vault_path} {key} {arg}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line.startswith("ready "), line
        return int(line.split()[1])

    def finish(self) -> tuple[list[int], int]:
        """The acknowledged mutations and the worker's exit code (-9 when killed)."""
        assert self.proc.stdout is not None
        acks: list[int] = []
        for line in self.proc.stdout:
            word, value = line.split()
            if word == "exit":
                return acks, int(value)
            assert word == "ack", line
            acks.append(int(value))
        raise AssertionError("the helper died")

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def helper() -> Iterator[Helper]:
    h = Helper()
    yield h
    h.close()


def fsck_clean(vault_path: Path) -> None:
    result = subprocess.run(["git", "-C", str(vault_path), "fsck", "--strict", "--no-progress"], capture_output=True)
    assert result.returncode == 0, result.stderr


def leftovers(vault_path: Path) -> list[str]:
    """Files a write creates and removes again: none may outlive the next write."""
    found = [p.name for p in (vault_path / "objects" / "pack").glob("*.keep")]
    found += [p.name for p in (vault_path / "refs" / "heads").glob("*.lock")]
    found += [p.name for p in (vault_path / "vaultmem").glob("tmp-*")]
    return found


@pytest.mark.slow
def test_killed_writer_leaves_before_or_after_state_and_a_writable_vault(
    helper: Helper, vault: Vault, vault_path: Path, key: str, tool
) -> None:
    tool.call({"command": "create", "path": "/memories/log.txt", "file_text": ""})
    rng = random.Random(20250818)
    rounds = 20
    made_progress = 0
    for r in range(rounds):
        before = commit_count(vault_path)
        pid = helper.start("crash", vault_path, key, str(r))
        delay = 0.0 if r == 0 else rng.uniform(0.0, 0.05)
        if delay:
            time.sleep(delay)  # where the kill lands; nothing in the vault reads this clock
        os.kill(pid, signal.SIGKILL)
        acks, code = helper.finish()
        assert code == -signal.SIGKILL, f"round {r}: the worker stopped by itself ({code})"
        assert acks == list(range(len(acks)))

        # Stock git sees a valid repository right after the crash.
        fsck_clean(vault_path)
        seen = commit_count(vault_path) - before
        assert seen in (len(acks), len(acks) + 1), f"round {r}: {len(acks)} acknowledged, {seen} committed"

        # The next writer clears what the dead one left and may finish its durable move.
        reopened = Vault.open(vault_path, key=key)
        after = VaultMemoryTool(reopened, actor="recovery", session=f"after-{r}")
        assert (
            after.call({"command": "create", "path": f"/memories/after/r{r}.txt", "file_text": "still writable"})
            == f"File created successfully at: /memories/after/r{r}.txt"
        )
        done = commit_count(vault_path) - before - 1
        assert done in (len(acks), len(acks) + 1), f"round {r}: {len(acks)} acknowledged, {done} committed"
        assert done >= seen
        assert actual_state(reopened, vault_path, r) == expected_state(r, done), f"round {r}: neither before nor after"
        made_progress += done > 0
        reopened.close()  # its upkeep is done: the next round's fsck sees no merge of its own in flight
        assert leftovers(vault_path) == []
        assert (vault_path / "vaultmem" / "lock").read_bytes()[:1] == b"0"
        fsck_clean(vault_path)
    assert made_progress >= rounds // 2, "the kills came too early to test anything"
    assert Vault.open(vault_path, key=key).verify().ok


def test_files_of_other_programs_are_never_removed(vault: Vault, vault_path: Path, key: str, call) -> None:
    """Invariant 4: a writer that finds a dead writer's flag removes only what
    that writer recorded taking; git's own lock and temporary files stay."""
    call(command="create", path="/memories/a.txt", file_text="a")
    foreign = [
        vault_path / "packed-refs.lock",
        vault_path / "HEAD.lock",
        vault_path / "config.lock",
        vault_path / "objects" / "tmp_object_git2_Xk3d9A",
        vault_path / "objects" / "pack" / "tmp_pack_Q1w2e3",
        vault_path / "objects" / "pack" / ("pack-" + "ab" * 20 + ".pack"),  # a pack git is still indexing
    ]
    for path in foreign:
        path.write_bytes(b"another program's")
    lock = vault_path / "vaultmem" / "lock"
    lock.write_bytes(b"1" + lock.read_bytes()[1:])  # a writer died
    VaultMemoryTool(Vault.open(vault_path, key=key), actor="next").call(
        {"command": "create", "path": "/memories/b.txt", "file_text": "b"}
    )
    assert commit_count(vault_path) == 2
    assert all(path.read_bytes() == b"another program's" for path in foreign)


def test_a_ref_lock_of_another_program_is_waited_for_then_refused(
    vault: Vault, vault_path: Path, key: str, call, monkeypatch: pytest.MonkeyPatch
) -> None:
    call(command="create", path="/memories/a.txt", file_text="a")
    head = git(vault_path, "rev-parse", "main").strip()
    lock = vault_path / "refs" / "heads" / "main.lock"
    lock.write_text("junk\n")
    monkeypatch.setattr(commits, "LOCK_WAIT", 0.2)
    started = time.monotonic()
    with pytest.raises(BusyError, match=r"main\.lock exists") as info:
        vault.mutate(lambda snap: _create(snap, "/memories/b.txt"), actor="t")
    assert time.monotonic() - started >= 0.2
    assert "nothing was changed" in str(info.value)
    assert lock.read_text() == "junk\n"  # never removed
    assert git(vault_path, "rev-parse", "main").strip() == head
    assert leftovers(vault_path) == ["main.lock"]
    lock.unlink()  # git finished
    call(command="create", path="/memories/b.txt", file_text="b")
    assert commit_count(vault_path) == 2
    fsck_clean(vault_path)


def test_a_ref_lock_refusal_names_the_lock_in_the_vault_not_the_hosts_path(
    vault: Vault, vault_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What Claude (or an MCP client) reads never holds a path of the host."""
    (vault_path / "refs" / "heads" / "main.lock").write_text("junk\n")
    monkeypatch.setattr(commits, "LOCK_WAIT", 0.05)
    with pytest.raises(ToolError) as info:
        VaultMemoryTool(vault, actor="t").call({"command": "create", "path": "/memories/b.txt", "file_text": "b"})
    message = str(info.value)
    assert "remove refs/heads/main.lock from the vault's folder" in message
    assert str(vault_path) not in message and str(vault_path.parent) not in message


def _create(snap, path: str):  # type: ignore[no-untyped-def]
    from vaultmem.core.paths import parse
    from vaultmem.repo.store import Change

    target = parse(path)
    return Change("create", (target,)).write(target, b"x")


def test_state_folder_survives_removal_after_a_checkpoint(vault: Vault, vault_path: Path, key: str, call) -> None:
    """docs/format.md: once a checkpoint covers the journal (the upkeep after
    writes, or closing the vault), removing the state folder loses no memory."""
    call(command="create", path="/memories/a.txt", file_text="a")
    vault.close()
    assert journal.Journal(vault_path).pending() == []
    shutil.rmtree(vault_path / "vaultmem")
    reopened = Vault.open(vault_path, key=key)
    assert reopened.read("/memories/a.txt") == "a"
    tool = VaultMemoryTool(reopened, actor="next")
    for name in ("b", "c", "d"):
        tool.call({"command": "create", "path": f"/memories/{name}.txt", "file_text": name})
    assert commit_count(vault_path) == 4
    fsck_clean(vault_path)


@pytest.mark.parametrize("step", ["ref-locked", "kept", "packed", "indexed", "journaled"])
def test_a_failure_before_the_journal_is_durable_changes_nothing(
    step: str, vault: Vault, vault_path: Path, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = VaultMemoryTool(vault, actor="t")
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a"})
    head = git(vault_path, "rev-parse", "main").strip()
    packs = sorted(p.name for p in (vault_path / "objects" / "pack").iterdir())

    def fail(name: str) -> None:
        if name == step:
            raise OSError(5, "Input/output error")

    monkeypatch.setattr(commits, "on_step", fail)
    with pytest.raises(ToolError, match="nothing was changed"):
        tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "b"})
    monkeypatch.setattr(commits, "on_step", None)
    assert git(vault_path, "rev-parse", "main").strip() == head
    assert sorted(p.name for p in (vault_path / "objects" / "pack").iterdir()) == packs  # no orphan pack
    assert leftovers(vault_path) == []
    assert (
        journal.Journal(vault_path).pending()[-1:] == [] or journal.Journal(vault_path).pending()[-1].new.hex() == head
    )
    power_cut(monkeypatch)
    reopened = Vault.open(vault_path, key=key)
    VaultMemoryTool(reopened, actor="next").call({"command": "create", "path": "/memories/c.txt", "file_text": "c"})
    assert git(vault_path, "ls-tree", "-r", "--name-only", "main").split() == ["memories/a.txt", "memories/c.txt"]
    fsck_clean(vault_path)


def power_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on this process runs in a new epoch, as after a restart:
    every journal record not covered by a checkpoint is treated as possibly
    lost from git's own files."""
    monkeypatch.setattr(commits, "epoch", lambda gitdir: b"after a power cut")


def test_the_repair_after_a_power_cut_keeps_a_whole_pack_with_a_version_1_index(
    vault: Vault, vault_path: Path, key: str, call, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`git -c pack.indexVersion=1 gc` packs the whole history with an index
    of version 1: a pack git reads, not a damaged one."""
    for i in range(5):
        call(command="create", path=f"/memories/f{i}.txt", file_text=f"{i}\n")
    vault.close()
    git(vault_path, "-c", "pack.indexVersion=1", "gc", "--quiet")
    (idx,) = (vault_path / "objects" / "pack").glob("pack-*.idx")
    assert idx.read_bytes()[:4] != b"\377tOc"  # version 1: no header
    tool = VaultMemoryTool(Vault.open(vault_path, key=key), actor="t")
    tool.call({"command": "create", "path": "/memories/g.txt", "file_text": "g\n"})  # a record not checkpointed
    power_cut(monkeypatch)
    reopened = Vault.open(vault_path, key=key)
    VaultMemoryTool(reopened, actor="next").call({"command": "create", "path": "/memories/n.txt", "file_text": "n"})
    assert idx.exists()
    assert len(git(vault_path, "rev-list", "main").split()) == 7
    assert [reopened.read(f"/memories/f{i}.txt") for i in range(5)] == [f"{i}\n" for i in range(5)]
    fsck_clean(vault_path)


def test_a_call_that_fails_after_its_record_is_durable_is_never_repaired_into_place(
    vault: Vault, vault_path: Path, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPEC: a mutating command that fails changes nothing.  The ref move fails
    after the journal record is durable: the record is voided, so neither the
    next writer nor the repair after a power cut brings the change back."""
    tool = VaultMemoryTool(vault, actor="t")
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a"})

    def fail(name: str) -> None:
        if name == "durable":
            raise OSError(5, "Input/output error")

    monkeypatch.setattr(commits, "on_step", fail)
    with pytest.raises(ToolError, match="nothing was changed"):
        tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "b"})
    monkeypatch.setattr(commits, "on_step", None)
    assert leftovers(vault_path) == []
    Vault.open(vault_path, key=key)
    power_cut(monkeypatch)
    VaultMemoryTool(Vault.open(vault_path, key=key), actor="n").call(
        {"command": "create", "path": "/memories/c.txt", "file_text": "c"}
    )
    names = git(vault_path, "ls-tree", "-r", "--name-only", "main").split()
    assert names == ["memories/a.txt", "memories/c.txt"]
    assert commit_count(vault_path) == 2
    fsck_clean(vault_path)


def test_a_failed_sync_fails_the_call_and_leaves_nothing(
    vault: Vault, vault_path: Path, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal's sync is what makes a change durable: when it fails the
    call fails, the ref lock is gone and nothing brings the change back."""
    tool = VaultMemoryTool(vault, actor="t")
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a"})
    real = journal.datasync
    calls = {"n": 0}

    def failing_once(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(5, "Input/output error")
        real(fd)

    monkeypatch.setattr(journal, "datasync", failing_once)
    with pytest.raises(ToolError, match="nothing was changed"):
        tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "b"})
    monkeypatch.setattr(journal, "datasync", real)
    assert leftovers(vault_path) == []
    power_cut(monkeypatch)
    Vault.open(vault_path, key=key)
    tool.call({"command": "create", "path": "/memories/c.txt", "file_text": "c"})
    assert git(vault_path, "ls-tree", "-r", "--name-only", "main").split() == ["memories/a.txt", "memories/c.txt"]
    assert commit_count(vault_path) == 2
    fsck_clean(vault_path)


# -- a writer that died at a step -------------------------------------------------


def died_at(helper: Helper, vault: Vault, vault_path: Path, key: str, step: str) -> str:
    """Let a writer die at ``step`` while creating /memories/late.txt; returns main before.
    The test's own vault is closed first, so its upkeep does not clear up before the test looks."""
    vault.close()
    head = git(vault_path, "rev-parse", "main").strip()
    helper.start("die", vault_path, key, f"{step}:/memories/late.txt")
    acks, code = helper.finish()
    assert (acks, code) == ([], 7)
    fsck_clean(vault_path)  # stock git sees the state before the call, or a dangling pack
    return head


def test_a_git_lock_without_write_bits_is_not_taken_for_a_dead_writer_s(
    helper: Helper, vault: Vault, vault_path: Path, key: str, call, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a umask of 0222 git's ref locks have no write bit, as vaultmem's
    have none: after a vaultmem writer died holding the writer lock, the next
    writer waits for git's lock as for any other program's, never removing it."""
    call(command="create", path="/memories/first.txt", file_text="first\n")
    head = died_at(helper, vault, vault_path, key, "kept")
    target = git(vault_path, "rev-parse", "vaultmem-keyring").strip()
    old_umask = os.umask(0o222)
    try:
        update = subprocess.Popen(
            ["git", "-C", str(vault_path), "update-ref", "--stdin"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        os.umask(old_umask)
    try:
        assert update.stdin is not None and update.stdout is not None
        update.stdin.write(f"start\nupdate refs/heads/main {target} {head}\nprepare\n")
        update.stdin.flush()
        assert [update.stdout.readline(), update.stdout.readline()] == ["start: ok\n", "prepare: ok\n"]
        lock = vault_path / "refs" / "heads" / "main.lock"
        held = os.stat(lock)
        assert held.st_mode & 0o222 == 0
        monkeypatch.setattr(commits, "LOCK_WAIT", 0.2)
        with pytest.raises(ToolError, match=r"main\.lock exists"):
            VaultMemoryTool(Vault.open(vault_path, key=key), actor="next").call(
                {"command": "create", "path": "/memories/b.txt", "file_text": "b"}
            )
        assert os.stat(lock).st_ino == held.st_ino  # git's lock, untouched
        update.stdin.write("commit\n")
        update.stdin.close()
        assert update.stdout.readline() == "commit: ok\n"
    finally:
        update.kill()
        update.wait()
    assert git(vault_path, "rev-parse", "main").strip() == target


@pytest.mark.slow
@pytest.mark.parametrize("step", list(commits.STEPS))
def test_a_writer_dying_at_any_step_leaves_before_or_after_and_the_next_writer_cleans_up(
    step: str, helper: Helper, vault: Vault, vault_path: Path, key: str, call
) -> None:
    call(command="create", path="/memories/first.txt", file_text="first\n")
    head = died_at(helper, vault, vault_path, key, step)
    state_before = set(os.listdir(vault_path / "objects" / "pack"))
    reopened = Vault.open(vault_path, key=key)  # a read never writes, whatever the dead writer left
    assert set(os.listdir(vault_path / "objects" / "pack")) == state_before
    # The record was whole (in the page cache, which this boot keeps) before the writer died.
    durable_now = step in ("journaled", "durable", "ref-locked", "moved", "unkept")
    VaultMemoryTool(reopened, actor="next").call({"command": "create", "path": "/memories/n.txt", "file_text": "n"})
    names = git(vault_path, "ls-tree", "-r", "--name-only", "main").split()
    assert ("memories/late.txt" in names) == durable_now
    assert commit_count(vault_path) == 2 + durable_now
    if durable_now:
        assert git(vault_path, "rev-parse", "main~2").strip() == head
        assert reopened.read("/memories/late.txt") == "written just before the crash\n"
    assert leftovers(vault_path) == []
    fsck_clean(vault_path)
    assert reopened.verify().ok


@pytest.mark.slow
def test_a_move_left_by_an_earlier_version_is_finished(
    helper: Helper, vault: Vault, vault_path: Path, key: str, call
) -> None:
    """Earlier versions synced a change, recorded it (vaultmem/pending) and
    then moved main; a vault whose writer died there still gets it back."""
    call(command="create", path="/memories/first.txt", file_text="first\n")
    head = died_at(helper, vault, vault_path, key, "indexed")  # objects in place, no record yet
    new = (vault_path / "vaultmem" / "lock").read_bytes().split(b"\nnew ")[1][:40].decode()
    (vault_path / "refs/heads/main.lock").write_text(new + "\n")  # what that version left: its ref lock
    for keep in (vault_path / "objects" / "pack").glob("*.keep"):
        keep.unlink()  # earlier versions made none
    body = f"vaultmem-pending 1\nref refs/heads/main\nold {head}\nnew {new}\n".encode()
    state = vault_path / "vaultmem"
    (state / "pending").write_bytes(body + b"crc %08x\n" % zlib.crc32(body) + b"end\n")
    (state / "lock").write_bytes(b"1")  # the older lock file: its flag byte only
    reopened = Vault.open(vault_path, key=key)
    VaultMemoryTool(reopened, actor="next").call({"command": "create", "path": "/memories/n.txt", "file_text": "n"})
    assert git(vault_path, "rev-parse", "main^").strip() == new
    assert reopened.read("/memories/late.txt") == "written just before the crash\n"
    assert not (state / "pending").exists()
    fsck_clean(vault_path)


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["garbled", "torn"])
def test_a_damaged_journal_record_is_never_applied(
    damage: str, helper: Helper, vault: Vault, vault_path: Path, key: str, call
) -> None:
    call(command="create", path="/memories/first.txt", file_text="first\n")
    head = died_at(helper, vault, vault_path, key, "durable")
    [move] = [m for m in journal.Journal(vault_path).pending() if m.ref == "refs/heads/main" and m.old.hex() == head]
    path = vault_path / "vaultmem" / "journal"
    with open(path, "r+b") as fh:
        if damage == "garbled":
            fh.seek(move.offset + 60)
            byte = fh.read(1)
            fh.seek(move.offset + 60)
            fh.write(bytes([byte[0] ^ 0xFF]))
        else:
            fh.seek(move.offset + 40)
            fh.write(b"\0" * 64)
    VaultMemoryTool(Vault.open(vault_path, key=key), actor="next").call(
        {"command": "create", "path": "/memories/n.txt", "file_text": "n"}
    )
    assert git(vault_path, "rev-parse", "main^").strip() == head
    assert sorted(git(vault_path, "ls-tree", "-r", "--name-only", "main").split()) == [
        "memories/first.txt",
        "memories/n.txt",
    ]
    assert leftovers(vault_path) == []
    fsck_clean(vault_path)


# -- after a power cut ------------------------------------------------------------


def lose_unsynced_files(vault_path: Path, moves: list[journal.Move]) -> None:
    """What a power cut can do to the files a write did not sync: packs and
    indexes missing or garbled, the ref back where it was."""
    for i, move in enumerate(moves):
        stem = vault_path / "objects" / "pack" / f"pack-{move.pack[-20:].hex()}"
        if i % 3 == 0:
            for part in (stem.with_suffix(".idx"), stem.with_suffix(".pack")):
                part.unlink()
        elif i % 3 == 1:
            idx = stem.with_suffix(".idx")
            idx.chmod(0o644)
            idx.write_bytes(idx.read_bytes()[:100])  # the index's name reached the disk, not all its data
        else:
            pack = stem.with_suffix(".pack")
            pack.chmod(0o644)
            pack.write_bytes(b"\0" * pack.stat().st_size)
    (vault_path / "refs" / "heads" / "main").write_text(moves[0].old.hex() + "\n")


def test_after_a_power_cut_reads_see_every_acknowledged_write_and_the_next_writer_repairs_git(
    vault: Vault, vault_path: Path, key: str, call, monkeypatch: pytest.MonkeyPatch
) -> None:
    call(command="create", path="/memories/first.txt", file_text="first\n")
    vault.close()  # a checkpoint covers the first write
    # The power cut stops everything: no upkeep of the writer's may checkpoint
    # its records, or touch the vault, after the files are "lost" below.
    monkeypatch.setattr(upkeep.Upkeep, "poke", lambda self: None)
    tool = VaultMemoryTool(Vault.open(vault_path, key=key), actor="t")
    for i in range(6):
        tool.call({"command": "create", "path": f"/memories/f{i}.txt", "file_text": f"{i}\n"})
    acknowledged = git(vault_path, "rev-parse", "main").strip()
    moves = [m for m in journal.Journal(vault_path).pending() if m.ref == "refs/heads/main"]
    assert len(moves) == 6
    lose_unsynced_files(vault_path, moves)
    power_cut(monkeypatch)
    before = {p: p.stat().st_mtime_ns for p in vault_path.rglob("*") if p.is_file() and p.name != "reads"}
    reader = Vault.open(vault_path, key=key)
    assert [reader.read(f"/memories/f{i}.txt") for i in range(6)] == [f"{i}\n" for i in range(6)]
    assert reader.history()[0].id == acknowledged
    after = {p: p.stat().st_mtime_ns for p in vault_path.rglob("*") if p.is_file() and p.name != "reads"}
    assert after == before  # reading repaired nothing: a read never writes
    VaultMemoryTool(reader, actor="next").call({"command": "create", "path": "/memories/n.txt", "file_text": "n"})
    assert git(vault_path, "rev-parse", "main^").strip() == acknowledged
    fsck_clean(vault_path)
    assert reader.verify().ok
    assert journal.Journal(vault_path).pending()[:-1] == []  # the repair ended with a checkpoint


def test_after_a_power_cut_an_operator_s_move_of_main_is_kept(
    vault: Vault, vault_path: Path, key: str, call, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The repair moves a ref only if it still holds a journaled move's old id:
    a ref someone else moved is left where they put it."""
    call(command="create", path="/memories/a.txt", file_text="a")
    call(command="create", path="/memories/b.txt", file_text="b")
    first = git(vault_path, "rev-list", "--max-parents=0", "main").strip()
    tree = git(vault_path, "rev-parse", "main~1^{tree}").strip()
    elsewhere = git(vault_path, "commit-tree", "-p", first, "-m", "an operator's commit", tree).strip()
    git(vault_path, "update-ref", "refs/heads/main", elsewhere)  # neither a journaled old id nor a new one
    power_cut(monkeypatch)
    VaultMemoryTool(Vault.open(vault_path, key=key), actor="n").call(
        {"command": "create", "path": "/memories/c.txt", "file_text": "c"}
    )
    assert git(vault_path, "rev-parse", "main^").strip() == elsewhere


def test_an_operator_moving_main_back_is_not_undone(vault: Vault, vault_path: Path, key: str, call) -> None:
    """Issue: an operator's `git update-ref refs/heads/main main~1` after an
    acknowledged write must stay; neither an open nor the next write moves main forward again."""
    call(command="create", path="/memories/a.txt", file_text="a")
    call(command="create", path="/memories/b.txt", file_text="b")
    git(vault_path, "update-ref", "refs/heads/main", "main~1")
    back = git(vault_path, "rev-parse", "main").strip()
    reopened = Vault.open(vault_path, key=key)
    assert git(vault_path, "rev-parse", "main").strip() == back
    assert reopened.listing() == [e for e in reopened.listing() if e.path != "/memories/b.txt"]
    VaultMemoryTool(reopened, actor="n").call({"command": "create", "path": "/memories/c.txt", "file_text": "c"})
    assert git(vault_path, "rev-parse", "main^").strip() == back
    fsck_clean(vault_path)


AGENT_KILLED_AFTER_ITS_CALLS = """
import os, sys
from vaultmem import Vault, VaultMemoryTool
tool = VaultMemoryTool(Vault.open(sys.argv[1], key=sys.argv[2]), actor="agent")
for name in ("a", "b"):
    tool.call({"command": "create", "path": f"/memories/{name}.txt", "file_text": name})
os.kill(os.getpid(), 9)  # killed right after its last call returned: its records are not checkpointed
"""


@pytest.fixture
def bind_mount(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A folder and the same folder bind-mounted elsewhere (as a container's volume)."""
    if os.geteuid() != 0:
        pytest.skip("a bind mount needs root")
    folder, seen = tmp_path / "host", tmp_path / "container"
    folder.mkdir()
    seen.mkdir()
    subprocess.run(["mount", "--bind", str(folder), str(seen)], check=True, capture_output=True)
    try:
        yield folder, seen
    finally:
        subprocess.run(["umount", "-l", str(seen)], check=False, capture_output=True)


def test_a_writer_through_a_bind_mount_leaves_an_operator_s_move_of_main_alone(
    bind_mount: tuple[Path, Path], key: str
) -> None:
    """The same file system through another mount is no power cut: its
    journal records need no repair, and an operator's rollback stays."""
    folder, seen = bind_mount
    Vault.init(folder / "v.vault", key=key).close()
    agent = subprocess.run(
        [sys.executable, "-c", AGENT_KILLED_AFTER_ITS_CALLS, str(folder / "v.vault"), key], check=False, timeout=120
    )
    assert agent.returncode == -signal.SIGKILL
    assert journal.Journal(folder / "v.vault").pending()  # the records a repair would replay
    git(folder / "v.vault", "update-ref", "refs/heads/main", "main~1")
    back = git(folder / "v.vault", "rev-parse", "main").strip()
    VaultMemoryTool(Vault.open(seen / "v.vault", key=key), actor="n").call(
        {"command": "create", "path": "/memories/c.txt", "file_text": "c"}
    )
    assert git(folder / "v.vault", "rev-parse", "main^").strip() == back
    assert "memories/b.txt" not in git(folder / "v.vault", "ls-tree", "-r", "--name-only", "main")
    fsck_clean(folder / "v.vault")


def test_journal_records_round_trip_and_reject_damage(tmp_path: Path) -> None:
    (tmp_path / "vaultmem").mkdir()
    j = journal.Journal(tmp_path)
    first = j.append(journal.Move(0, "refs/heads/main", b"\0" * 20, b"\1" * 20, b"e", b"pack one"))
    second = j.append(journal.Move(0, "refs/heads/x", b"\1" * 20, b"\2" * 20, b"e", b""))
    j.void(first)
    [left] = journal.Journal(tmp_path).pending()
    assert (left.seq, left.ref, left.old, left.new, left.pack) == (
        second.seq,
        "refs/heads/x",
        b"\1" * 20,
        b"\2" * 20,
        b"",
    )
    j.checkpoint(second.seq)
    assert journal.Journal(tmp_path).pending() == []
    third = j.append(journal.Move(0, "refs/heads/main", b"\2" * 20, b"\3" * 20, b"e", b"p"))
    with open(tmp_path / "vaultmem" / "journal", "r+b") as fh:
        fh.seek(third.offset + 30)
        fh.write(b"X")
    assert journal.Journal(tmp_path).pending() == []


def test_the_journal_starts_a_new_pass_when_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Records never run past the file: when one does not fit, everything is
    covered and the next pass starts at the top; stale records are never read."""
    monkeypatch.setattr(upkeep, "IDLE", 60.0)  # only the journal's own wrap checkpoints
    monkeypatch.setattr(upkeep, "EVERY", 10**6)
    key = __import__("vaultmem").generate_key()
    vault = Vault.init(tmp_path / "v", key=key)
    tool = VaultMemoryTool(vault, actor="t")
    text = "x" * 90_000
    for i in range(120):  # about 15 MB through an 8 MB journal
        tool.call({"command": "create", "path": f"/memories/f{i}.txt", "file_text": text + str(i)})
    moves = journal.Journal(tmp_path / "v").pending()
    assert 0 < len(moves) < 120
    assert moves[-1].new.hex() == git(tmp_path / "v", "rev-parse", "main").strip()  # the newest is found
    assert Vault.open(tmp_path / "v", key=key).read("/memories/f119.txt") == text + "119"
    fsck_clean(tmp_path / "v")


def test_a_move_larger_than_the_journal_is_synced_in_place_and_repaired(
    tmp_path: Path, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An import bigger than the journal: its pack is synced where it is and
    only the ref move is journaled; after a power cut the move is repaired."""
    monkeypatch.setattr(upkeep, "IDLE", 60.0)  # no checkpoint before the test looks
    vault = Vault.init(tmp_path / "v", key=key)
    source = tmp_path / "memory" / "memories"
    source.mkdir(parents=True)
    for i in range(80):
        (source / f"f{i}.txt").write_text(f"{i:03d}" * 33_000)  # 80 files of 99 KB: over 8 MB of ciphertext
    vault.import_folder(tmp_path / "memory")
    head = git(tmp_path / "v", "rev-parse", "main").strip()
    [move] = [m for m in journal.Journal(tmp_path / "v").pending() if m.ref == "refs/heads/main"]
    assert move.pack == b"" and move.new.hex() == head
    (tmp_path / "v" / "refs" / "heads" / "main").unlink()  # the ref move lost; the synced pack kept
    power_cut(monkeypatch)
    reopened = Vault.open(tmp_path / "v", key=key)
    assert reopened.read("/memories/f79.txt") == "079" * 33_000
    VaultMemoryTool(reopened, actor="n").call({"command": "create", "path": "/memories/n.txt", "file_text": "n"})
    assert git(tmp_path / "v", "rev-parse", "main^").strip() == head
    fsck_clean(tmp_path / "v")


def test_a_garbled_main_after_a_checkpoint_is_repaired_from_the_journal(
    vault: Vault, vault_path: Path, key: str, call, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a file-system journal, a power cut can keep `main`'s name and
    lose its data even after a checkpoint: reads say so clearly, and the next
    write takes the newest move the journal still holds."""
    call(command="create", path="/memories/a.txt", file_text="a")
    call(command="create", path="/memories/b.txt", file_text="b")
    head = git(vault_path, "rev-parse", "main").strip()
    vault.close()  # a checkpoint covers both writes
    assert journal.Journal(vault_path).pending() == []
    (vault_path / "refs" / "heads" / "main").write_bytes(b"\0" * 41)
    power_cut(monkeypatch)
    reader = Vault.open(vault_path, key=key)
    with pytest.raises(IntegrityError, match="does not hold a commit id"):
        reader.read("/memories/a.txt")
    VaultMemoryTool(reader, actor="n").call({"command": "create", "path": "/memories/c.txt", "file_text": "c"})
    assert git(vault_path, "rev-parse", "main^").strip() == head
    fsck_clean(vault_path)


def test_after_a_power_cut_a_garbled_index_is_rebuilt_from_its_pack(
    vault: Vault, vault_path: Path, key: str, call, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a file-system journal a power cut can keep an index's name and
    lose its data, for a pack no journal record names any more."""
    call(command="create", path="/memories/a.txt", file_text="a")
    vault.close()  # a checkpoint covers the first write
    older = sorted((vault_path / "objects" / "pack").glob("pack-*.idx"))
    monkeypatch.setattr(upkeep, "IDLE", 60.0)
    call(command="create", path="/memories/b.txt", file_text="b")  # a record no checkpoint covers
    garbled = older[0]
    whole = garbled.read_bytes()
    garbled.chmod(0o644)
    garbled.write_bytes(whole[:1032] + b"\xff" * (len(whole) - 1032))
    assert not objects.valid_index(garbled.read_bytes())
    power_cut(monkeypatch)
    VaultMemoryTool(Vault.open(vault_path, key=key), actor="n").call(
        {"command": "create", "path": "/memories/c.txt", "file_text": "c"}
    )
    assert garbled.read_bytes() == whole
    fsck_clean(vault_path)


def test_valid_index_accepts_whole_indexes_only() -> None:
    pack = objects.build_pack([objects.packed(objects.BLOB, b"blob %d" % i) for i in range(40)])
    assert objects.valid_index(pack.idx)
    assert objects.index_of(pack.data) == pack.idx
    assert not objects.valid_index(pack.idx[:-1])
    assert not objects.valid_index(b"\0" * len(pack.idx))
    swapped = bytearray(pack.idx)
    swapped[8 + 4 * 100 : 8 + 4 * 101] = b"\xff\xff\xff\xff"  # a fan-out entry larger than the next
    assert not objects.valid_index(bytes(swapped))


def test_a_leftover_temporary_file_of_the_same_name_does_not_stop_a_write(
    vault: Vault, vault_path: Path, key: str
) -> None:
    """A dead process with this process's pid left its read-only temporary
    files: the first write of a vault instance removes them (a user who is
    not root could not reopen them for writing)."""
    vault.close()
    for suffix in (".pack", ".idx", ".ref"):
        leftover = vault_path / "vaultmem" / f"tmp-{os.getpid()}{suffix}"
        leftover.write_bytes(b"left by a dead process")
        leftover.chmod(0o444)
    other = Vault.open(vault_path, key=key)
    VaultMemoryTool(other).call({"command": "create", "path": "/memories/a.txt", "file_text": "a"})
    assert other.read("/memories/a.txt") == "a"
    assert list((vault_path / "vaultmem").glob("tmp-*")) == []
    other.close()
    fsck_clean(vault_path)


def test_after_a_power_cut_a_damaged_pack_the_journal_cannot_restore_is_retired(
    vault: Vault, vault_path: Path, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a file-system journal a power cut can leave a pack the journal
    no longer holds (a merged pack, or one whose removal reached the disk in
    part) with garbage in it.  When every object its index lists is in a
    whole pack too, the repair retires it, and `git fsck` is clean again."""
    monkeypatch.setattr(upkeep, "IDLE", 60.0)  # the records stay uncovered, nothing merges by itself
    tool = VaultMemoryTool(vault, actor="t")
    for name in ("a", "b", "c"):
        tool.call({"command": "create", "path": f"/memories/{name}.txt", "file_text": name})
    merged = objects.merge(objects.list_packs(vault_path / "objects"))
    assert merged is not None
    commits.CommitPath(vault_path, vault._lock).install(merged[0])
    stray = vault_path / "objects" / "pack" / f"pack-{merged[0].name}.pack"
    size = stray.stat().st_size
    stray.chmod(0o644)
    stray.write_bytes(b"\0" * size)  # its name and size reached the disk, its data did not
    power_cut(monkeypatch)
    after = VaultMemoryTool(Vault.open(vault_path, key=key), actor="n")
    after.call({"command": "create", "path": "/memories/d.txt", "file_text": "d"})
    assert not stray.exists() and not stray.with_suffix(".idx").exists()
    assert git(vault_path, "ls-tree", "-r", "--name-only", "main").split() == [
        f"memories/{name}.txt" for name in "abcd"
    ]
    fsck_clean(vault_path)
