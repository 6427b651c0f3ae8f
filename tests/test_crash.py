"""Invariant 4: durable when acknowledged.  A writer killed at any instant leaves
the vault at the state before or after its call, fsck-clean and writable; a
change made durable but not yet on the ref is rolled forward at the next open."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from anthropic.lib.tools import ToolError
from conftest import commit_count, git

from vaultmem import Vault, VaultMemoryTool, durable

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


class DiesBeforeRefMove(Vault):
    """A writer that dies after the pending record is durable, before the ref moves."""

    def _rename_ref(self) -> None:
        os._exit(7)  # main.lock stays behind, as after a real kill


# A single-threaded helper that imports vaultmem once and forks a worker per
# round; the test kills the worker with SIGKILL, the helper reports how it died.
HELPER = r"""
import os, sys
sys.path.insert(0, sys.argv[1])
from test_crash import DiesBeforeRefMove, op
from vaultmem import Vault, VaultMemoryTool

def worker(kind, path, key, arg):
    if kind == "crash":
        r = int(arg)
        tool = VaultMemoryTool(Vault.open(path, key=key), actor="crasher", session=f"round-{r}")
        os.write(1, b"ready %d\n" % os.getpid())
        for i in range(1_000_000):
            tool.call(op(r, i))
            os.write(1, b"ack %d\n" % i)
    else:
        tool = VaultMemoryTool(DiesBeforeRefMove.open(path, key=key), actor="dying", session="last-words")
        os.write(1, b"ready %d\n" % os.getpid())
        tool.call({"command": "create", "path": arg, "file_text": "written just before the crash\n"})
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


def plant_killed_writer_leftovers(vault_path: Path) -> list[Path]:
    """What a writer killed inside git's ref update leaves: lock files, a temp object, a dirty lock flag."""
    head = git(vault_path, "rev-parse", "main").strip()
    planted = [
        vault_path / "refs" / "heads" / "main.lock",
        vault_path / "packed-refs.lock",
        vault_path / "objects" / "tmp_object_git2_Xk3d9A",
    ]
    planted[0].write_text(head + "\n")
    planted[1].write_text("")
    planted[2].write_bytes(b"half an object")
    fd = os.open(vault_path / "vaultmem" / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.pwrite(fd, b"1", 0)
    finally:
        os.close(fd)
    return planted


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
        planted = plant_killed_writer_leftovers(vault_path) if r % 3 == 1 else []

        reopened = Vault.open(vault_path, key=key)
        done = commit_count(vault_path) - before
        assert done in (len(acks), len(acks) + 1), f"round {r}: {len(acks)} acknowledged, {done} committed"
        state = actual_state(reopened, vault_path, r)
        assert state == expected_state(r, done), f"round {r}: state is neither before nor after the call"
        made_progress += done > 0

        after = VaultMemoryTool(reopened, actor="recovery", session=f"after-{r}")
        assert (
            after.call({"command": "create", "path": f"/memories/after/r{r}.txt", "file_text": "still writable"})
            == f"File created successfully at: /memories/after/r{r}.txt"
        )
        assert commit_count(vault_path) == before + done + 1
        for leftover in planted:
            assert not leftover.exists(), f"{leftover.name} was not cleared by the next writer"
        assert (vault_path / "vaultmem" / "lock").read_bytes()[:1] == b"0"
        fsck_clean(vault_path)
    assert made_progress >= rounds // 2, "the kills came too early to test anything"
    assert Vault.open(vault_path, key=key).verify().ok


def test_stale_git_lock_files_do_not_block_the_next_writer(vault: Vault, vault_path: Path, key: str, call) -> None:
    call(command="create", path="/memories/a.txt", file_text="a")
    planted = plant_killed_writer_leftovers(vault_path)
    reopened = VaultMemoryTool(Vault.open(vault_path, key=key), actor="next")
    reopened.call({"command": "create", "path": "/memories/b.txt", "file_text": "b"})
    assert commit_count(vault_path) == 2
    assert not any(p.exists() for p in planted)
    fsck_clean(vault_path)


def test_stale_ref_lock_is_cleared_even_with_a_clean_lock_flag(vault: Vault, vault_path: Path, key: str, call) -> None:
    call(command="create", path="/memories/a.txt", file_text="a")
    (vault_path / "refs" / "heads" / "main.lock").write_text("junk\n")
    call(command="create", path="/memories/b.txt", file_text="b")
    assert commit_count(vault_path) == 2
    assert not (vault_path / "refs" / "heads" / "main.lock").exists()
    fsck_clean(vault_path)


def test_state_folder_is_disposable(vault: Vault, vault_path: Path, key: str, call) -> None:
    """docs/format.md: the state folder (lock and pending record, ref ring files, read log) is
    disposable; deleting it loses no memory."""
    call(command="create", path="/memories/a.txt", file_text="a")
    for leftover in (vault_path / "vaultmem").iterdir():
        leftover.unlink()
    (vault_path / "vaultmem").rmdir()
    reopened = Vault.open(vault_path, key=key)
    assert reopened.read("/memories/a.txt") == "a"
    tool = VaultMemoryTool(reopened, actor="next")
    for name in ("b", "c", "d"):  # the ring of ref files starts again, then is used
        tool.call({"command": "create", "path": f"/memories/{name}.txt", "file_text": name})
    assert commit_count(vault_path) == 4
    assert os.stat(vault_path / "refs/heads/main").st_nlink == 2
    fsck_clean(vault_path)


class RefMoveFails(Vault):
    """A writer whose ref move hits an I/O error (a full or failing disk), once."""

    fail_next = False

    def _rename_ref(self) -> None:
        if RefMoveFails.fail_next:
            RefMoveFails.fail_next = False
            raise OSError(5, "Input/output error")
        super()._rename_ref()


def test_a_write_reported_as_failed_is_not_resurrected_later(vault: Vault, vault_path: Path, key: str) -> None:
    """SPEC: a mutating command that fails changes nothing.  Whatever the write
    path does after an I/O error, what the caller was told must stay true."""
    tool = VaultMemoryTool(RefMoveFails.open(vault_path, key=key), actor="t")
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a"})
    RefMoveFails.fail_next = True
    try:
        tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "b"})
        reported_success = True
    except ToolError as err:
        reported_success = False
        assert "nothing was changed" in str(err.content)
    Vault.open(vault_path, key=key)  # the next open, e.g. another process
    names = git(vault_path, "ls-tree", "-r", "--name-only", "main").split()
    assert ("memories/b.txt" in names) == reported_success
    tool.call({"command": "create", "path": "/memories/c.txt", "file_text": "c"})  # the next writer
    names = git(vault_path, "ls-tree", "-r", "--name-only", "main").split()
    assert ("memories/b.txt" in names) == reported_success
    assert commit_count(vault_path) == 2 + reported_success
    fsck_clean(vault_path)


def test_a_failed_sync_fails_the_call_and_leaves_nothing(
    vault: Vault, vault_path: Path, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sync is what makes a change durable: when it fails the call fails,
    the ref lock is gone and no later open brings the change back."""
    tool = VaultMemoryTool(vault, actor="t")
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a"})
    real_sync = durable.sync_filesystem
    calls = {"n": 0}

    def failing_once(gitdir: Path) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(5, "Input/output error")
        real_sync(gitdir)

    monkeypatch.setattr(durable, "sync_filesystem", failing_once)
    with pytest.raises(ToolError):
        tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "b"})
    assert not (vault_path / "refs/heads/main.lock").exists()
    monkeypatch.setattr(durable, "sync_filesystem", real_sync)
    Vault.open(vault_path, key=key)
    names = git(vault_path, "ls-tree", "-r", "--name-only", "main").split()
    assert names == ["memories/a.txt"]
    tool.call({"command": "create", "path": "/memories/c.txt", "file_text": "c"})
    assert commit_count(vault_path) == 2
    fsck_clean(vault_path)


# -- the pending record and roll-forward -------------------------------------------


@pytest.fixture
def died_before_ref_move(helper: Helper, vault: Vault, vault_path: Path, key: str, call) -> durable.Pending:
    """A vault whose last writer made its change durable, then died before moving main."""
    call(command="create", path="/memories/first.txt", file_text="first\n")
    head = git(vault_path, "rev-parse", "main").strip()
    helper.start("die", vault_path, key, "/memories/late.txt")
    acks, code = helper.finish()
    assert (acks, code) == ([], 7)
    assert git(vault_path, "rev-parse", "main").strip() == head  # the ref never moved
    assert (vault_path / "refs/heads/main.lock").exists()  # left by the killed writer
    pending = durable.read_pending(vault_path)
    assert pending is not None and pending.old == head and pending.new != head
    assert git(vault_path, "cat-file", "-t", pending.new).strip() == "commit"
    fsck_clean(vault_path)  # the new commit is merely dangling
    return pending


@pytest.mark.slow
def test_open_rolls_forward_a_durable_change_whose_ref_move_was_lost(
    died_before_ref_move: durable.Pending, vault_path: Path, key: str
) -> None:
    pending = died_before_ref_move
    reopened = Vault.open(vault_path, key=key)
    assert git(vault_path, "rev-parse", "main").strip() == pending.new
    assert reopened.read("/memories/late.txt") == "written just before the crash\n"
    top = reopened.history()[0]
    assert (top.command, top.actor, top.session) == ("create", "dying", "last-words")
    assert commit_count(vault_path) == 2
    fsck_clean(vault_path)
    # Opening again does not move anything; writing builds on the rolled-forward head.
    Vault.open(vault_path, key=key)
    assert git(vault_path, "rev-parse", "main").strip() == pending.new
    VaultMemoryTool(reopened, actor="next").call({"command": "create", "path": "/memories/n.txt", "file_text": "n"})
    assert git(vault_path, "rev-parse", "main^").strip() == pending.new
    assert reopened.verify().ok


@pytest.mark.slow
def test_a_record_left_by_an_earlier_version_is_rolled_forward(
    died_before_ref_move: durable.Pending, vault_path: Path, key: str
) -> None:
    """Earlier versions kept the record in vaultmem/pending; a vault that
    crashed under one still gets its acknowledged change back."""
    state = vault_path / "vaultmem"
    (state / "pending").write_bytes(died_before_ref_move.encode() + b"end\n")
    (state / "lock").write_bytes(b"1")  # the older lock file: its flag byte only
    reopened = Vault.open(vault_path, key=key)
    assert git(vault_path, "rev-parse", "main").strip() == died_before_ref_move.new
    assert reopened.read("/memories/late.txt") == "written just before the crash\n"
    VaultMemoryTool(reopened, actor="next").call({"command": "create", "path": "/memories/n.txt", "file_text": "n"})
    assert not (state / "pending").exists()  # superseded by the record in the lock file
    assert durable.read_pending(vault_path).new == git(vault_path, "rev-parse", "main").strip()  # type: ignore[union-attr]
    fsck_clean(vault_path)


@pytest.mark.slow
def test_next_writer_rolls_forward_before_writing(
    died_before_ref_move: durable.Pending, vault: Vault, vault_path: Path, call
) -> None:
    # ``vault`` was opened before the crash, so only the writer path can roll forward.
    call(command="create", path="/memories/next.txt", file_text="next\n")
    assert git(vault_path, "rev-parse", "main^").strip() == died_before_ref_move.new
    assert vault.read("/memories/late.txt") == "written just before the crash\n"
    assert commit_count(vault_path) == 3
    fsck_clean(vault_path)


def _assert_ignored(vault_path: Path, key: str, head: str) -> None:
    reopened = Vault.open(vault_path, key=key)
    assert git(vault_path, "rev-parse", "main").strip() == head
    assert git(vault_path, "ls-tree", "-r", "--name-only", "main").split() == ["memories/first.txt"]
    VaultMemoryTool(reopened, actor="next").call({"command": "create", "path": "/memories/n.txt", "file_text": "n"})
    assert git(vault_path, "rev-parse", "main^").strip() == head
    assert sorted(git(vault_path, "ls-tree", "-r", "--name-only", "main").split()) == [
        "memories/first.txt",
        "memories/n.txt",
    ]
    fsck_clean(vault_path)


@pytest.mark.slow
def test_garbled_pending_record_is_ignored(died_before_ref_move: durable.Pending, vault_path: Path, key: str) -> None:
    record = durable.pending_path(vault_path)
    data = bytearray(record.read_bytes())
    at = data.index(b"new ") + 10
    data[at] = ord("0") if data[at] != ord("0") else ord("1")
    record.write_bytes(bytes(data))
    _assert_ignored(vault_path, key, died_before_ref_move.old)


@pytest.mark.slow
def test_torn_pending_record_is_ignored(died_before_ref_move: durable.Pending, vault_path: Path, key: str) -> None:
    record = durable.pending_path(vault_path)
    data = record.read_bytes()
    record.write_bytes(data[: len(data) // 2])
    _assert_ignored(vault_path, key, died_before_ref_move.old)


def remove_object(vault_path: Path, oid: str, allowed: set[str]) -> None:
    """Make ``oid`` absent, loose or packed, removing nothing outside ``allowed``."""
    loose = vault_path / "objects" / oid[:2] / oid[2:]
    if loose.exists():
        loose.unlink()
        return
    for idx in (vault_path / "objects" / "pack").glob("*.idx"):
        listed = subprocess.run(["git", "show-index"], stdin=idx.open("rb"), capture_output=True, check=True)
        ids = {line.split()[1] for line in listed.stdout.decode().splitlines()}
        if oid in ids:
            assert ids <= allowed, "the pack holds objects of earlier commits too"
            for part in idx.parent.glob(idx.stem + ".*"):
                part.unlink()
            return
    raise AssertionError(f"object {oid} not found on disk")


@pytest.mark.slow
def test_pending_record_whose_objects_never_reached_disk_is_ignored(
    died_before_ref_move: durable.Pending, vault_path: Path, key: str
) -> None:
    remove_object(vault_path, died_before_ref_move.new, allowed=set(died_before_ref_move.objects))
    assert subprocess.run(["git", "-C", str(vault_path), "cat-file", "-e", died_before_ref_move.new]).returncode != 0
    _assert_ignored(vault_path, key, died_before_ref_move.old)


def test_pending_record_round_trips_and_rejects_damage() -> None:
    pending = durable.Pending("refs/heads/main", "a" * 40, "b" * 40, ("c" * 40, "d" * 40))
    encoded = pending.encode()
    assert durable.Pending.decode(encoded) == pending
    assert durable.Pending.decode(encoded[:-5]) is None
    assert durable.Pending.decode(encoded.replace(b"b" * 40, b"e" * 40)) is None
    assert durable.Pending.decode(b"") is None
    assert durable.Pending.decode(b"\xff\xfe garbage crc 00000000\n") is None


def test_a_pack_left_without_its_index_is_cleared_by_the_next_writer(vault, vault_path, tool) -> None:
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a"})
    orphan = vault_path / "objects" / "pack" / ("pack-" + "ab" * 20 + ".pack")
    orphan.write_bytes(b"PACK torn by a killed writer")
    (vault_path / "vaultmem" / "lock").write_bytes(b"1")  # the killed writer never finished
    tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "b"})
    assert not orphan.exists()
    assert vault.read("/memories/b.txt") == "b"
