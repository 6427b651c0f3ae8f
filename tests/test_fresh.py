"""Files made ahead (docs/format.md, "Files made ahead"): a burst of writes
takes its packs, indexes and ref locks from new, unnamed files a thread
created between the calls; they have no name before the write links them,
so nothing of them shows in the vault, and nothing is left after close or
a kill."""

from __future__ import annotations

import gc
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import git

from vaultmem import Vault, VaultMemoryTool
from vaultmem.git import fresh

pytestmark = pytest.mark.skipif(
    getattr(os, "O_TMPFILE", None) is None or not os.path.isdir("/proc/self/fd"), reason="needs O_TMPFILE and /proc"
)


@pytest.fixture(autouse=True)
def _no_pools_of_earlier_tests() -> None:
    """Vault instances earlier tests dropped without closing hold descriptors
    until they are collected; a process keeps only fresh.BUDGET of them."""
    gc.collect()


def unnamed_files(folder: Path) -> set[int]:
    """Inodes of the unnamed files in ``folder`` this process holds open."""
    found = set()
    prefix = f"{folder}/#"
    for fd in os.listdir("/proc/self/fd"):
        with_name = os.readlink(f"/proc/self/fd/{fd}") if os.path.islink(f"/proc/self/fd/{fd}") else ""
        if with_name.startswith(prefix) and with_name.endswith(" (deleted)"):
            found.add(int(with_name[len(prefix) : -len(" (deleted)")]))
    return found


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def git_files(vault_path: Path) -> dict[int, Path]:
    found = {os.stat(p).st_ino: p for p in (vault_path / "objects" / "pack").iterdir()}
    main = vault_path / "refs" / "heads" / "main"
    found[os.stat(main).st_ino] = main
    return found


def names(vault_path: Path) -> set[str]:
    return {str(p.relative_to(vault_path)) for p in vault_path.rglob("*")}


def test_a_burst_of_writes_uses_unnamed_files_made_ahead(
    vault: Vault, vault_path: Path, call: Callable[..., str]
) -> None:
    state = vault_path / "vaultmem"
    for i in range(4):
        call(command="create", path=f"/memories/warm{i}.txt", file_text=f"{i}\n")
    wait_for(lambda: len(unnamed_files(state)) >= 3)  # enough for a write
    ready = unnamed_files(state)
    before = names(vault_path)
    for i in range(3):
        call(command="create", path=f"/memories/burst{i}.txt", file_text=f"{i}\n")
    written = git_files(vault_path)
    used = ready & set(written)
    assert used, "no pack, index or ref was written into a file made ahead"
    for ino in used:  # read-only, one name, holding what git expects (fsck below)
        info = os.stat(written[ino])
        assert stat.S_IMODE(info.st_mode) == 0o444 and info.st_nlink == 1 and info.st_size > 0
    added = names(vault_path) - before
    assert all(name.startswith(("objects", "memories", "vaultmem/trash")) for name in added), added
    git(vault_path, "fsck", "--strict")
    vault.close()
    assert unnamed_files(state) == set()


def test_files_made_ahead_never_show_in_the_vault(vault: Vault, vault_path: Path, call: Callable[..., str]) -> None:
    """An open vault's folder changes only when a call changes it."""
    for i in range(8):
        call(command="create", path=f"/memories/f{i}.txt", file_text=f"{i}\n")
    wait_for(lambda: len(unnamed_files(vault_path / "vaultmem")) >= fresh.FIRST // 2)
    trash = vault_path / "vaultmem" / "trash"
    wait_for(lambda: not trash.exists() or not any(trash.iterdir()))  # the upkeep's round after the calls
    before = names(vault_path)
    time.sleep(0.3)  # the thread may make more meanwhile
    assert names(vault_path) == before


ONCE = """
import os, sys, time
from vaultmem import Vault, VaultMemoryTool
vault = Vault.open(sys.argv[1], key=sys.argv[2])
VaultMemoryTool(vault).call({"command": "create", "path": "/memories/once.txt", "file_text": "once"})
time.sleep(0.2)
state = os.path.realpath(os.path.join(sys.argv[1], "vaultmem"))
print(sum(os.readlink(f"/proc/self/fd/{fd}").startswith(state + "/#") for fd in os.listdir("/proc/self/fd")
          if os.path.islink(f"/proc/self/fd/{fd}")))
"""


def test_a_process_that_writes_once_makes_no_files_ahead(vault: Vault, vault_path: Path, key: str) -> None:
    vault.close()
    child = subprocess.run([sys.executable, "-c", ONCE, str(vault_path), key], capture_output=True, text=True)
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "0"


KILLED = """
import os, signal, sys
from vaultmem import Vault, VaultMemoryTool
vault = Vault.open(sys.argv[1], key=sys.argv[2])
tool = VaultMemoryTool(vault)
for i in range(30):
    tool.call({"command": "create", "path": f"/memories/k{i}.txt", "file_text": "k"})
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_process_leaves_nothing_it_made_ahead(
    vault: Vault, vault_path: Path, key: str, call: Callable[..., str]
) -> None:
    call(command="create", path="/memories/a.txt", file_text="a\n")
    vault.close()
    child = subprocess.run([sys.executable, "-c", KILLED, str(vault_path), key], capture_output=True)
    assert child.returncode == -signal.SIGKILL, child.stderr
    state = {p.name for p in (vault_path / "vaultmem").iterdir()}
    assert state <= {"lock", "journal", "reads", "trash", "keep", "held", "pruned"}, state
    other = Vault.open(vault_path, key=key)
    assert other.read("/memories/k29.txt") == "k"
    other.close()
    git(vault_path, "fsck", "--strict")


def test_a_forked_child_writes_with_files_of_its_own(vault: Vault, vault_path: Path, call: Callable[..., str]) -> None:
    for i in range(6):
        call(command="create", path=f"/memories/p{i}.txt", file_text=f"{i}\n")
    wait_for(lambda: len(unnamed_files(vault_path / "vaultmem")) >= 3)
    pid = os.fork()
    if pid == 0:  # the child: the parent's files are not its to use
        code = 1
        try:
            tool = VaultMemoryTool(vault)
            for i in range(6):
                tool.call({"command": "create", "path": f"/memories/c{i}.txt", "file_text": f"{i}\n"})
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    for i in range(6):
        call(command="create", path=f"/memories/q{i}.txt", file_text=f"{i}\n")
    listed = {entry.path for entry in vault.listing("/memories")}
    assert listed >= {*(f"/memories/c{i}.txt" for i in range(6)), *(f"/memories/q{i}.txt" for i in range(6))}
    git(vault_path, "fsck", "--strict")


def test_a_finalizer_the_garbage_collector_runs_inside_the_budget_lock_does_not_deadlock() -> None:
    """A vault's made-ahead files are closed by a finalizer, which the garbage
    collector may run at any allocation, also while this thread holds the
    budget's lock (a suite run hung there for good)."""
    import collections
    import threading

    from vaultmem.git import fresh

    done = threading.Event()

    def inner() -> None:
        with fresh._held_lock:
            fresh._discard(collections.deque())  # what a collection inside the lock runs
        done.set()

    thread = threading.Thread(target=inner, daemon=True)
    thread.start()
    thread.join(5)
    assert done.is_set(), "the finalizer waited for a lock its own thread held"
