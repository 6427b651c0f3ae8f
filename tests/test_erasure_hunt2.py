"""Erasure beside stock git, second hunt: `git prune` / `git gc --prune=now`
running while the erasure copies git's pack, and `git repack` packing the
old keyring while the erasure removes it.

Real vaults, real keys, stock git; the key scan is the one of test_erasure."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import vaultmem.git.commits as commits
from tests.test_erasure import MARKER, assert_no_key_left, write
from tests.test_erasure_hunt import erased_blobs, fsck
from vaultmem import Vault, VaultMemoryTool
from vaultmem.git import prune


@pytest.fixture
def no_hook() -> Iterator[None]:
    yield
    commits.on_step = None


def test_git_prune_running_while_the_erasure_copies_git_s_pack_does_not_fail_it(
    vault: Vault, vault_path: Path, key: str, no_hook: None
) -> None:
    """After `git gc` the old keyring sits in git's pack beside everything
    else, and the erasure writes a copy of that pack's other objects under a
    temporary name before it moves it into place. It named that copy
    `tmp_vaultmem_prune_PID.pack`, and `git prune --expire=now` (run by
    `git gc --prune=now`) removes every `tmp_*` file of objects/pack: with one
    running beside it the erasure stopped with "removing the old keys failed
    (the storage failed (No such file or directory))" (1 run in 8 of a
    `git gc --prune=now` loop), the old keyring still on the disk."""
    write(vault, command="create", path="/memories/ada.md", file_text=f"email: {MARKER}\n")
    write(vault, command="create", path="/memories/other.md", file_text="unrelated\n")
    subprocess.run(["git", "-C", str(vault_path), "gc", "--quiet"], check=True, timeout=60)
    blobs = erased_blobs(vault, "/memories/ada.md")
    pruned: list[int] = []

    def prune_now(name: str) -> None:
        if name == "prune-copied":  # the copy is written, not yet in place
            run = subprocess.run(["git", "-C", str(vault_path), "prune", "--expire=now"], timeout=60, check=False)
            pruned.append(run.returncode)

    commits.on_step = prune_now
    done = vault.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")
    commits.on_step = None

    assert pruned == [0]  # git prune ran while the copy was written
    assert len(done.versions) == 1
    assert_no_key_left(vault_path, key, blobs)
    reopened = Vault.open(vault_path, key=key)
    assert reopened.verify().ok
    assert reopened.read("/memories/other.md") == "unrelated\n"
    checked = fsck(vault_path)
    assert checked.returncode == 0, checked.stderr


def _packing(vault_path: Path) -> bool:
    """Whether a `git pack-objects` runs in ``vault_path`` now (Linux's /proc)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"pack-objects" in argv and os.path.samefile(f"/proc/{pid}/cwd", vault_path):
                return True
        except OSError:
            continue
    return False


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs Linux's /proc")
def test_a_git_repack_running_beside_an_erasure_does_not_put_the_old_keyring_back(
    vault: Vault, vault_path: Path, key: str, no_hook: None
) -> None:
    """`git repack -a -d` (what operators run by hand or from cron, without
    `git gc`) reads the refs, the keyring of then among them, spends a while
    on deltas, then writes its pack. It writes no `gc.pid`, so the erasure did
    not wait for it: it returned "Erased" and the pack git wrote afterwards
    held the keys it had destroyed (2 runs in 2)."""
    tool = VaultMemoryTool(vault, actor="support-bot")
    for i in range(120):
        tool.call({"command": "create", "path": f"/memories/f{i}.md", "file_text": f"file {i} " + "x" * 2000})
    write(vault, command="create", path="/memories/ada.md", file_text=f"email: {MARKER}\n")
    blobs = erased_blobs(vault, "/memories/ada.md")
    runs: list[subprocess.Popen[bytes]] = []

    def repack_now(name: str) -> None:
        if name == "erase-keys" and not runs:  # the old keyring is still the vault's: git packs it
            argv = ["git", "-C", str(vault_path), "repack", "-a", "-d", "-f", "-q", "--window=250", "--depth=250"]
            runs.append(subprocess.Popen(argv))
            deadline = time.monotonic() + 20
            while not _packing(vault_path):
                assert runs[0].poll() is None and time.monotonic() < deadline, "git repack ended too soon"
                time.sleep(0.002)
            time.sleep(0.05)  # git lists the objects (milliseconds), then computes deltas

    commits.on_step = repack_now
    try:
        done = vault.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")
    finally:
        commits.on_step = None
        assert runs and runs[0].wait(timeout=60) == 0
    assert len(done.versions) == 1
    assert_no_key_left(vault_path, key, blobs)
    assert Vault.open(vault_path, key=key).verify().ok
    checked = fsck(vault_path)
    assert checked.returncode == 0, checked.stderr


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs Linux's /proc")
def test_only_a_git_command_that_packs_in_the_vault_is_waited_for(
    vault: Vault, vault_path: Path, tmp_path: Path
) -> None:
    """What the erasure waits for: `git pack-objects` in the vault folder, or
    with GIT_DIR naming it; not a `git rev-list` whose arguments hold "gc",
    nor a `git pack-objects` in another repository."""
    write(vault, command="create", path="/memories/ada.md", file_text=f"email: {MARKER}\n")
    other = tmp_path / "other.git"
    subprocess.run(["git", "init", "-q", "--bare", str(other)], check=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def blocked(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        return subprocess.Popen(argv, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env)

    def seen(run: subprocess.Popen[bytes]) -> str | None:
        deadline = time.monotonic() + 5  # the process's command line is there once it runs
        while not Path(f"/proc/{run.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        return prune.running_packer(vault_path)

    cases: list[tuple[subprocess.Popen[bytes], bool]] = []
    try:
        for argv, cwd, env, packs in [
            (["git", "rev-list", "--stdin", "--grep", "gc", "--all"], vault_path, None, False),
            (["git", "pack-objects", "--stdout"], other, None, False),
            (["git", "-C", str(vault_path), "pack-objects", "--stdout"], elsewhere, None, True),
            (["git", "pack-objects", "--stdout"], elsewhere, {**os.environ, "GIT_DIR": str(vault_path)}, True),
        ]:
            run = blocked(argv, cwd, env)
            cases.append((run, packs))
            found = seen(run)
            assert (found is not None) == packs, (argv, found)
            if packs:
                assert found == f"git pack-objects, process {run.pid}"
            run.kill()
            run.wait()
    finally:
        for run, _ in cases:
            run.kill()
            run.wait()
