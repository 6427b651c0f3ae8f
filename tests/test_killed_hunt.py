"""Processes killed with SIGKILL in the middle of a pull, push or erasure-bearing
sync: the vault opens, stays fsck-clean, keeps every acknowledged write, says
what to run when something was cut short, and the same command run again
finishes the job (an erasure pulled from the server leaves no key behind)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import git
from tests.test_erasure import assert_no_key_left
from vaultmem import Vault, VaultMemoryTool
from vaultmem.core.crypto import generate_key
from vaultmem.errors import VaultError

# Runs one vault method in a child that SIGKILLs itself at the k-th named step
# of the commit path ("count": runs it through and prints how many steps there were).
_KILLED_AT = r"""
import os, signal, sys
from vaultmem import Vault
from vaultmem.git import commits
path, key, arg, mode = sys.argv[1:5]
vault = Vault.open(path, key=key)
seen = []
def step(name):
    seen.append(name)
    if mode != "count" and len(seen) == int(mode):
        os.kill(os.getpid(), signal.SIGKILL)
commits.on_step = step
CALL
print(len(seen))
"""
KILL_AT = _KILLED_AT.replace("CALL", "getattr(vault, arg)()")  # arg: the method


def run_killed(path: Path, key: str, method: str, mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", KILL_AT, str(path), key, method, mode],
        capture_output=True,
        text=True,
        timeout=120,
    )


def write(vault: Vault, **call: str) -> str:
    return VaultMemoryTool(vault, actor="tester", session="s").call(call)


def fsck(path: Path) -> None:
    done = subprocess.run(["git", "-C", str(path), "fsck", "--strict"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_pull_of_an_erasure_killed_at_any_step_says_to_pull_again_and_the_pull_finishes_it(
    tmp_path: Path, key: str
) -> None:
    """The server's vault forgot a file this clone still holds, and both sides
    wrote since.  The pull replaces the keyring (the erased keys leave) before
    main takes the forget commit: killed in between, the clone's verify must
    name the cut-short pull, not only "no forget commit lists it"; the next
    write keeps working, and the pull run again merges, verifies clean and
    leaves no key of the erased version anywhere in the clone."""
    a = Vault.init(tmp_path / "a", key=key)
    for i in range(3):
        write(a, command="create", path=f"/memories/f{i}.md", file_text=f"content {i}\n")
    server = tmp_path / "server.git"
    subprocess.run(["git", "init", "--bare", "-q", str(server)], check=True)
    a.add_remote("origin", str(server))
    a.push()
    template = tmp_path / "template"
    Vault.clone(str(server), template, key=key).close()
    blob = a.read_blob(bytes.fromhex(a.forget("/memories/f1.md", reason="r", dry_run=True).versions[0].blob))
    a.forget("/memories/f1.md", reason="GDPR request 4411")
    write(a, command="create", path="/memories/a.md", file_text="from a\n")
    a.push()
    a.close()
    with Vault.open(template, key=key) as b:
        write(b, command="create", path="/memories/b.md", file_text="from b\n")

    counted = run_killed(shutil.copytree(template, tmp_path / "count"), key, "pull", "count")
    assert counted.returncode == 0, counted.stderr
    steps = int(counted.stdout.split()[-1])
    half = 0
    for k in range(1, steps + 1):
        case = shutil.copytree(template, tmp_path / f"case-{k}")
        died = run_killed(case, key, "pull", str(k))
        assert died.returncode == -9, (k, died.stderr)
        fsck(case)
        with Vault.open(case, key=key) as b:
            write(b, command="create", path="/memories/after.md", file_text="next\n")  # the next write works
            problems = b.verify().problems
            if problems:
                half += 1
                assert all("run `vaultmem pull` again" in p for p in problems), (k, problems)
            b.pull()
            report = b.verify()
            assert report.ok, (k, report.problems)
            assert b.read("/memories/b.md") == "from b\n"
            assert b.read("/memories/after.md") == "next\n"
            assert b.read("/memories/a.md") == "from a\n"
            assert "f1.md" not in {e.path.rsplit("/", 1)[-1] for e in b.listing("/memories")}
        fsck(case)
        assert_no_key_left(case, key, [blob])
        assert "GDPR request 4411" in git(case, "log", "--format=%B", "main")  # the forget commit is in main
        shutil.rmtree(case)
    assert half  # some kill did land between the keyring and main


KEY_CHANGE_AT = _KILLED_AT.replace("CALL", "vault.change_key(key=arg)")


def opens_with(path: Path, key: str) -> bool:
    try:
        Vault.open(path, key=key).close()
    except VaultError:
        return False
    return True


def test_a_key_change_killed_at_any_step_opens_with_one_key_that_stays_the_one(tmp_path: Path, key: str) -> None:
    """After the kill, whichever key opens the vault must still open it after
    the next write: a user who checks that the old key works and throws the new
    one away must not find the vault locked by the next write."""
    vault = Vault.init(tmp_path / "v", key=key)
    write(vault, command="create", path="/memories/a.md", file_text="a\n")
    vault.close()
    new = generate_key()
    template = tmp_path / "v"

    def run(case: Path, mode: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", KEY_CHANGE_AT, str(case), key, new, mode], capture_output=True, text=True, timeout=60
        )

    counted = run(shutil.copytree(template, tmp_path / "count"), "count")
    assert counted.returncode == 0, counted.stderr
    flipped = []
    for k in range(1, int(counted.stdout.split()[-1]) + 1):
        case = shutil.copytree(template, tmp_path / f"case-{k}")
        assert run(case, str(k)).returncode == -9
        fsck(case)
        before = (opens_with(case, key), opens_with(case, new))
        assert sum(before) == 1, (k, before)
        with Vault.open(case, key=key if before[0] else new) as opened, contextlib.suppress(VaultError):
            write(opened, command="create", path="/memories/next.md", file_text="n\n")  # refused: caught below
        after = (opens_with(case, key), opens_with(case, new))
        if after != before:
            flipped.append(k)
        shutil.rmtree(case)
    assert not flipped, f"killed at steps {flipped}: the key that opened the vault stopped opening it after a write"


def test_a_clone_killed_midway_leaves_no_copy_of_the_vault_once_cloned_again(tmp_path: Path, key: str) -> None:
    """A clone is made in ``.NAME.clone-PID`` beside its folder and renamed into
    place.  Killed before the rename, that folder (a copy of the vault, its
    keyring and data keys included) used to stay beside the clone for good:
    the next clone, named by its own process id, never removed it."""
    a = Vault.init(tmp_path / "a", key=key)
    for i in range(3):
        write(a, command="create", path=f"/memories/f{i}.md", file_text=f"content {i}\n")
    server = tmp_path / "server.git"
    subprocess.run(["git", "init", "--bare", "-q", str(server)], check=True)
    a.add_remote("origin", str(server))
    a.push()
    a.close()
    clones = tmp_path / "clones"
    clones.mkdir()
    dest = clones / "b"
    script = "import sys; from vaultmem import Vault; Vault.clone(*sys.argv[1:3], key=sys.argv[3])"
    cloning = subprocess.Popen(
        [sys.executable, "-c", script, str(server), str(dest), key],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and cloning.poll() is None:
        if any((entry / "objects").exists() for entry in clones.glob(".b.clone-*")):
            break
        time.sleep(0.001)
    cloning.send_signal(signal.SIGKILL)
    cloning.wait()
    left = [p.name for p in clones.iterdir()]
    if left != [f".b.clone-{cloning.pid}"]:  # finished (or not started) before the kill: nothing to check
        pytest.skip(f"the clone was not caught midway: {left}")
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    running = clones / f".b.clone-{alive.pid}"  # a clone still running in another process: left alone
    running.mkdir()
    try:
        with Vault.clone(str(server), dest, key=key) as b:
            assert b.read("/memories/f2.md") == "content 2\n"
            assert b.verify().ok
    finally:
        alive.kill()
        alive.wait()
    assert sorted(p.name for p in clones.iterdir()) == [running.name, "b"]


PULL_CLI_AT = r"""
import os, signal, sys
from vaultmem.cli.app import main
from vaultmem.git import commits
def step(name):
    if name == "locked":  # the keyring has moved; main not yet
        os.kill(os.getpid(), signal.SIGKILL)
commits.on_step = step
sys.exit(main(sys.argv[1:]))
"""


def test_a_pull_after_a_key_change_killed_once_the_keyring_moved_finishes_when_run_again(
    tmp_path: Path, key: str
) -> None:
    """Another clone changed the vault's key; `vaultmem pull --new-key-file F`
    takes the new keyring first, then main.  Killed in between, the vault
    opens with the new key only, and the same command run again (the old key
    in VAULTMEM_KEY, the new one in F) stopped with "the VAULTMEM_KEY given
    does not open this vault", its versions never pulled.  Run again, it now
    opens the vault with the new key the user gave and finishes the pull."""
    a = Vault.init(tmp_path / "a", key=key)
    write(a, command="create", path="/memories/f.md", file_text="f\n")
    server = tmp_path / "server.git"
    subprocess.run(["git", "init", "--bare", "-q", str(server)], check=True)
    a.add_remote("origin", str(server))
    a.push()
    b = tmp_path / "b"
    Vault.clone(str(server), b, key=key).close()
    new = generate_key()
    a.change_key(key=new)
    a.close()
    with Vault.open(tmp_path / "a", key=new) as a2:
        write(a2, command="create", path="/memories/from-a.md", file_text="from a\n")
        a2.push()
    with Vault.open(b, key=key) as opened:
        write(opened, command="create", path="/memories/from-b.md", file_text="from b\n")
    new_file = tmp_path / "new.key"
    new_file.write_text(new + "\n")
    new_file.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
    env["VAULTMEM_KEY"] = key
    command = ["--vault", str(b), "pull", "--new-key-file", str(new_file)]
    died = subprocess.run([sys.executable, "-c", PULL_CLI_AT, *command], env=env, capture_output=True, text=True)
    assert died.returncode == -9, died.stderr
    fsck(b)
    again = subprocess.run([sys.executable, "-m", "vaultmem", *command], env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    with Vault.open(b, key=new) as opened:
        assert opened.read("/memories/from-a.md") == "from a\n"
        assert opened.read("/memories/from-b.md") == "from b\n"
        assert opened.verify().ok
    fsck(b)
