"""Invariant 5: threads and processes sharing a vault never lose an update, and
readers never wait for writers."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import commit_count, git

from vaultmem import Vault, VaultMemoryTool
from vaultmem.core.paths import parse

THREADS = 8
PER_THREAD = 25


def fsck_clean(vault_path: Path) -> None:
    result = subprocess.run(["git", "-C", str(vault_path), "fsck", "--strict", "--no-progress"], capture_output=True)
    assert result.returncode == 0, result.stderr


def slot(t: int, j: int) -> str:
    return f"[slot {t}.{j}]"


def run_threads(worker: Callable[[int], None], count: int = THREADS) -> None:
    errors: list[BaseException] = []
    start = threading.Barrier(count)

    def run(t: int) -> None:
        try:
            start.wait()
            worker(t)
        except BaseException as err:  # reported below, with the thread's traceback
            errors.append(err)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
        assert not thread.is_alive(), "a writer thread hung"
    if errors:
        raise errors[0]


def shared_board(tool: VaultMemoryTool) -> None:
    lines = "".join(f"{slot(t, j)} empty\n" for t in range(THREADS) for j in range(PER_THREAD) if j % 2)
    tool.call({"command": "create", "path": "/memories/board.txt", "file_text": lines})


def mixed_writes(tool_for: Callable[[int], VaultMemoryTool]) -> Callable[[int], None]:
    """Even steps create a file of the thread's own; odd steps edit the shared board."""

    def worker(t: int) -> None:
        tool = tool_for(t)
        for j in range(PER_THREAD):
            if j % 2 == 0:
                tool.call({"command": "create", "path": f"/memories/t{t}/f{j}.txt", "file_text": f"{t}/{j}\n"})
            else:
                tool.call(
                    {
                        "command": "str_replace",
                        "path": "/memories/board.txt",
                        "old_str": f"{slot(t, j)} empty",
                        "new_str": f"{slot(t, j)} done by {t}",
                    }
                )

    return worker


def assert_every_write_kept(vault: Vault, vault_path: Path) -> None:
    board = vault.read("/memories/board.txt")
    for t in range(THREADS):
        for j in range(PER_THREAD):
            if j % 2:
                assert f"{slot(t, j)} done by {t}\n" in board
            else:
                assert vault.read(f"/memories/t{t}/f{j}.txt") == f"{t}/{j}\n"
    assert "empty" not in board
    assert commit_count(vault_path) == 1 + THREADS * PER_THREAD
    assert len(vault.history()) == 1 + THREADS * PER_THREAD
    # A straight line: every commit has at most one parent, and it is the one before.
    assert git(vault_path, "rev-list", "--min-parents=2", "main") == ""
    fsck_clean(vault_path)


def test_threads_sharing_one_vault_lose_nothing(vault: Vault, vault_path: Path, tool) -> None:
    shared_board(tool)
    tools = [VaultMemoryTool(vault, actor=f"thread-{t}", session=f"s{t}") for t in range(THREADS)]
    run_threads(mixed_writes(lambda t: tools[t]))
    assert_every_write_kept(vault, vault_path)
    assert {v.actor for v in vault.history()} == {"support-bot"} | {f"thread-{t}" for t in range(THREADS)}


def test_threads_with_their_own_vault_instances_lose_nothing(vault: Vault, vault_path: Path, key: str, tool) -> None:
    shared_board(tool)
    run_threads(mixed_writes(lambda t: VaultMemoryTool(Vault.open(vault_path, key=key), actor=f"thread-{t}")))
    assert_every_write_kept(vault, vault_path)


def test_concurrent_inserts_into_one_file_all_land(vault: Vault, vault_path: Path, tool) -> None:
    tool.call({"command": "create", "path": "/memories/log.txt", "file_text": ""})

    def worker(t: int) -> None:
        mine = VaultMemoryTool(vault, actor=f"thread-{t}")
        for j in range(10):
            mine.call({"command": "insert", "path": "/memories/log.txt", "insert_line": 0, "insert_text": f"{t}:{j}"})

    run_threads(worker)
    lines = vault.read("/memories/log.txt").splitlines()
    assert sorted(lines) == sorted(f"{t}:{j}" for t in range(THREADS) for j in range(10))
    for t in range(THREADS):
        own = [line for line in lines if line.startswith(f"{t}:")]
        assert own == [f"{t}:{j}" for j in reversed(range(10))]  # each thread's inserts stay in its order
    assert commit_count(vault_path) == 1 + THREADS * 10


def test_racing_creates_of_one_path_commit_exactly_once(vault: Vault, vault_path: Path) -> None:
    outcomes: list[str] = []

    def worker(t: int) -> None:
        try:
            outcomes.append(
                VaultMemoryTool(vault, actor=f"thread-{t}").call(
                    {"command": "create", "path": "/memories/once.txt", "file_text": f"winner {t}"}
                )
            )
        except Exception as err:  # the ToolError of a loser
            outcomes.append(str(getattr(err, "content", err)))

    run_threads(worker)
    assert outcomes.count("File created successfully at: /memories/once.txt") == 1
    assert outcomes.count("Error: File /memories/once.txt already exists") == THREADS - 1
    assert commit_count(vault_path) == 1
    winner = vault.history()[0].actor
    assert vault.read("/memories/once.txt") == f"winner {winner.removeprefix('thread-')}"


# -- processes --------------------------------------------------------------------

CHILD = r"""
import sys
from vaultmem import Vault, VaultMemoryTool
from vaultmem.paths import parse
path, who, count, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
tool = VaultMemoryTool(Vault.open(path), actor=f"proc-{who}", session=f"pid-{who}")
print("ready", flush=True)
sys.stdin.readline()  # start together
for j in range(count):
    if mode == "insert":
        tool.call({"command": "insert", "path": "/memories/shared.txt", "insert_line": 0, "insert_text": f"{who}:{j}"})
    else:
        tool.call({"command": "create", "path": f"/memories/p{who}/f{j}.txt", "file_text": f"{who}:{j}"})
print("done", flush=True)
"""


def run_processes(vault_path: Path, key: str, mode: str, procs: int, count: int) -> None:
    env = {**os.environ, "VAULTMEM_KEY": key}
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(vault_path), str(p), str(count), mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for p in range(procs)
    ]
    try:
        for child in children:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready", child.stderr.read() if child.stderr else ""
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        for child in children:
            out, err = child.communicate(timeout=120)
            assert child.returncode == 0, err
            assert out.strip() == "done"
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()


@pytest.mark.slow
def test_processes_inserting_into_one_file_lose_nothing(vault: Vault, vault_path: Path, key: str, tool) -> None:
    procs, count = 4, 20
    tool.call({"command": "create", "path": "/memories/shared.txt", "file_text": "bottom\n"})
    run_processes(vault_path, key, "insert", procs, count)
    lines = vault.read("/memories/shared.txt").splitlines()
    assert lines[-1] == "bottom"
    assert sorted(lines[:-1]) == sorted(f"{p}:{j}" for p in range(procs) for j in range(count))
    for p in range(procs):
        assert [line for line in lines if line.startswith(f"{p}:")] == [f"{p}:{j}" for j in reversed(range(count))]
    assert commit_count(vault_path) == 1 + procs * count
    assert sorted({v.actor for v in vault.history()}) == ["proc-0", "proc-1", "proc-2", "proc-3", "support-bot"]
    fsck_clean(vault_path)


@pytest.mark.slow
def test_processes_creating_distinct_files_lose_nothing(vault: Vault, vault_path: Path, key: str) -> None:
    procs, count = 4, 20
    run_processes(vault_path, key, "create", procs, count)
    files = git(vault_path, "ls-tree", "-r", "--name-only", "main").split()
    assert sorted(files) == sorted(f"memories/p{p}/f{j}.txt" for p in range(procs) for j in range(count))
    assert vault.read("/memories/p3/f19.txt") == "3:19"
    assert commit_count(vault_path) == procs * count
    fsck_clean(vault_path)
    assert vault.verify().ok


# -- readers do not wait ------------------------------------------------------------


def test_readers_do_not_wait_for_a_writer_holding_the_lock(vault: Vault, vault_path: Path, key: str, tool) -> None:
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "before\n"})
    held = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with vault._lock.hold():
            held.set()
            release.wait(timeout=60)

    owner = threading.Thread(target=holder)
    owner.start()
    try:
        assert held.wait(timeout=10)
        results: dict[str, str] = {}

        def read() -> None:
            results["dir"] = tool.call({"command": "view", "path": "/memories"})
            results["file"] = tool.call({"command": "view", "path": "/memories/a.txt"})
            other = Vault.open(vault_path, key=key)  # a fresh reader, e.g. another process's
            results["other"] = other.read("/memories/a.txt")
            results["history"] = other.history()[0].command

        reader = threading.Thread(target=read)
        reader.start()
        reader.join(timeout=10)
        assert not reader.is_alive(), "a reader waited for the writer lock"
        assert results == {
            "dir": "Here're the files and directories up to 2 levels deep in /memories, excluding hidden items "
            "and node_modules:\n7B\t/memories\n7B\t/memories/a.txt",
            "file": "Here's the content of /memories/a.txt with line numbers:\n     1\tbefore",
            "other": "before\n",
            "history": "create",
        }

        # A writer, meanwhile, does wait.
        written = threading.Event()

        def write() -> None:
            tool.call({"command": "str_replace", "path": "/memories/a.txt", "old_str": "before", "new_str": "after"})
            written.set()

        writer = threading.Thread(target=write)
        writer.start()
        assert not written.wait(timeout=0.3)
        assert vault.read("/memories/a.txt") == "before\n"
    finally:
        release.set()
        owner.join(timeout=10)
    writer.join(timeout=10)
    assert written.is_set()
    assert vault.read("/memories/a.txt") == "after\n"
    assert commit_count(vault_path) == 2


def test_a_writer_in_another_vault_instance_waits_for_the_lock(vault: Vault, vault_path: Path, key: str) -> None:
    other = VaultMemoryTool(Vault.open(vault_path, key=key), actor="other")
    release = threading.Event()
    held = threading.Event()

    def holder() -> None:
        with vault._lock.hold():
            held.set()
            release.wait(timeout=60)

    owner = threading.Thread(target=holder)
    owner.start()
    done = threading.Event()
    writer = threading.Thread(
        target=lambda: (other.call({"command": "create", "path": "/memories/x.txt", "file_text": "x"}), done.set())
    )
    try:
        assert held.wait(timeout=10)
        writer.start()
        assert not done.wait(timeout=0.3)  # flock across instances, not just a per-object mutex
        assert commit_count(vault_path) == 0
    finally:
        release.set()
        owner.join(timeout=10)
    writer.join(timeout=10)
    assert done.is_set() and commit_count(vault_path) == 1


def test_a_snapshot_stays_consistent_while_writes_land(vault: Vault, call) -> None:
    call(command="create", path="/memories/a.txt", file_text="one\n")
    snap = vault.snapshot()
    call(command="str_replace", path="/memories/a.txt", old_str="one", new_str="two")
    call(command="create", path="/memories/b.txt", file_text="b")
    call(command="delete", path="/memories/a.txt")
    assert snap.read_text(parse("/memories/a.txt")) == "one\n"
    assert snap.kind(parse("/memories/b.txt")) is None
    assert vault.snapshot().kind(parse("/memories/a.txt")) is None


def test_the_writer_lock_follows_a_lock_file_that_was_removed(vault: Vault, vault_path: Path, key: str) -> None:
    """The lock file's descriptor is kept open between writes; if an operator
    removes the (disposable) state folder, the next write must lock the new
    file, or it would exclude nobody."""
    tool = VaultMemoryTool(vault, actor="a")
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a"})
    lock_file = vault_path / "vaultmem" / "lock"
    vault._upkeep.stop()  # its thread writes into the state folder: let it finish before the folder goes
    shutil.rmtree(vault_path / "vaultmem")  # lock, pending record, read log: all disposable
    other = Vault.open(vault_path, key=key)
    with other._lock.hold():  # makes a new lock file and holds it
        probe = os.open(lock_file, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(probe)
    with vault._lock.hold():  # the first vault follows the new file
        probe = os.open(lock_file, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(probe)
    tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "b"})
    assert commit_count(vault_path) == 2


def open_in(folder: Path) -> list[str]:
    """The files under ``folder`` this process holds open."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(str(folder) + "/"):
                out.append(target)
    return out


def test_closing_a_vault_releases_its_descriptors_and_it_still_writes(vault: Vault, vault_path: Path) -> None:
    tool = VaultMemoryTool(vault, actor="a")
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a"})
    assert open_in(vault_path)  # the writer lock and the journal
    vault.close()
    assert open_in(vault_path) == []
    tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "b"})
    assert commit_count(vault_path) == 2


def test_a_child_forked_while_upkeep_holds_the_lock_still_writes(vault: Vault, vault_path: Path, key: str) -> None:
    """A process that forks (a preloading server, multiprocessing) while the
    vault's background upkeep holds the writer lock gets a usable vault."""
    tool = VaultMemoryTool(vault, actor="parent")
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a"})
    with vault._lock.hold():  # as the upkeep thread would, at the moment of the fork
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                child = VaultMemoryTool(vault, actor="child")
                child.call({"command": "create", "path": "/memories/child.txt", "file_text": "c"})
                code = 0
            finally:
                os._exit(code)
    # Released: the child now waits only for the flock, never for a mutex nobody will release.
    deadline = time.monotonic() + 20
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise AssertionError("the forked child hung on the writer lock")
    assert os.waitstatus_to_exitcode(done[1]) == 0
    assert vault.read("/memories/child.txt") == "c"
    assert commit_count(vault_path) == 2
