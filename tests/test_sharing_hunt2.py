"""Sharing a vault through git servers, as users meet it: what a pull or a
push killed midway leaves in the vault, servers that refuse, racing clones.

Real parts only: bare repositories on disk, ``git daemon`` on 127.0.0.1
started and stopped here, real keys, the CLI in a subprocess.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import git
from test_sync import git_daemon, pushed, server, write

from vaultmem import Vault, VaultMemoryTool, generate_key


@pytest.fixture
def shared(tmp_path: Path) -> tuple[Path, str, Vault]:
    """A server on a path holding a vault pushed by its first host: (server, key, that host's vault)."""
    return pushed(tmp_path)


def cli(*args: str, key: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
    env.update(VAULTMEM_KEY=key, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    return subprocess.run(
        [sys.executable, "-m", "vaultmem", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=60
    )


def read(vault: Vault, name: str) -> str:
    return VaultMemoryTool(vault, actor="reader").call({"command": "view", "path": f"/memories/{name}"})


# -- a fetch killed midway ------------------------------------------------------------------


@pytest.mark.parametrize("left", ["refs/remotes/origin/main.lock", "shallow.lock"])
def test_a_pull_killed_while_its_fetch_wrote_a_lock_does_not_stop_every_later_sync(
    shared: tuple[Path, str, Vault], tmp_path: Path, left: str
) -> None:
    """libgit2's fetch takes ``refs/remotes/NAME/BRANCH.lock`` and
    ``shallow.lock`` for a moment while it writes them; a pull (or a push,
    which fetches first) killed in that moment leaves the file.  Every later
    pull and push then failed on it, with "cannot reach the remote": the
    vault could not sync again until someone found and removed the file."""
    remote, key, first = shared
    second = Vault.clone(str(remote), tmp_path / "second.vault", key=key)
    second.close()
    write(first, "b.txt", "from the first host\n")
    first.push()
    (tmp_path / "second.vault" / left).write_bytes(b"")  # what the killed fetch left, as libgit2 made it

    pulled = cli("--vault", "second.vault", "pull", key=key, cwd=tmp_path)
    assert pulled.returncode == 0, pulled.stderr
    assert "Pulled main" in pulled.stdout
    second = Vault.open(tmp_path / "second.vault", key=key)
    write(second, "c.txt", "from the second host\n")
    second.push()
    first.pull()
    assert "from the second host" in read(first, "c.txt")
    assert git(remote, "fsck", "--strict") == ""


@contextlib.contextmanager
def stalling_proxy(port: int, limit: int) -> Iterator[int]:
    """A port on 127.0.0.1 that relays to ``port``, but passes on only the
    first ``limit`` bytes the server sends, then holds the connection: a
    transfer cut off midway, waiting."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    stop = threading.Event()
    held: list[socket.socket] = []

    def pipe(src: socket.socket, dst: socket.socket, budget: int) -> None:
        with contextlib.suppress(OSError):
            while not stop.is_set():
                data = src.recv(65536)
                if not data:
                    return
                if budget <= 0:
                    continue  # swallowed: the client waits for bytes that never come
                dst.sendall(data[:budget])
                budget -= len(data)

    def serve() -> None:
        while not stop.is_set():
            try:
                client = listener.accept()[0]
            except OSError:
                continue
            upstream = socket.create_connection(("127.0.0.1", port))
            held.extend((client, upstream))
            threading.Thread(target=pipe, args=(client, upstream, 1 << 62), daemon=True).start()
            threading.Thread(target=pipe, args=(upstream, client, limit), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        for conn in held:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        listener.close()
        thread.join(10)


@pytest.mark.timeout(120)
def test_a_pull_killed_while_receiving_leaves_no_partial_pack_behind(tmp_path: Path) -> None:
    """A pull killed while the server's pack was arriving left it, half
    written, as ``objects/pack/pack_git2_*`` (here the 300 KB that had
    arrived): no later pull, push or `git gc` removed it, so each pull killed
    that way kept its share of the disk for good.  Now the next sync
    removes it once it is clearly no live transfer's."""
    key = generate_key()
    root = tmp_path / "served"
    root.mkdir()
    remote = server(root / "v.git")
    first = Vault.init(tmp_path / "first.vault", key=key)
    write(first, "a.txt", "one\n")
    first.add_remote("origin", str(remote))
    first.push()
    second = Vault.clone(str(remote), tmp_path / "second.vault", key=key)
    second.close()
    tool = VaultMemoryTool(first, actor="first")
    for i in range(10):
        tool.call({"command": "create", "path": f"/memories/big-{i}.txt", "file_text": os.urandom(40_000).hex()})
    first.push()
    pack_dir = tmp_path / "second.vault" / "objects" / "pack"
    with git_daemon(root) as url:
        port = int(url.rsplit(":", 1)[1])
        with stalling_proxy(port, limit=300_000) as stalled:
            git(tmp_path / "second.vault", "remote", "set-url", "origin", f"git://127.0.0.1:{stalled}/v.git")
            env = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
            env.update(VAULTMEM_KEY=key, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
            pulling = subprocess.Popen(
                [sys.executable, "-m", "vaultmem", "--vault", "second.vault", "pull"],
                cwd=tmp_path,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                deadline = time.monotonic() + 60
                partial: list[Path] = []
                while time.monotonic() < deadline and not partial:  # until 100 KB of the 300 KB have arrived
                    partial = [
                        p for p in pack_dir.iterdir() if p.name.startswith("pack_git2_") and p.stat().st_size > 100_000
                    ]
                    time.sleep(0.05)
            finally:
                pulling.send_signal(signal.SIGKILL)
                pulling.wait(30)
        assert partial, "the pull never received 100 KB"
        an_hour_ago = time.time() - 3600
        os.utime(partial[0], (an_hour_ago, an_hour_ago))  # the pull was killed an hour ago

        git(tmp_path / "second.vault", "remote", "set-url", "origin", f"{url}/v.git")
        pulled = cli("--vault", "second.vault", "pull", key=key, cwd=tmp_path)
        assert pulled.returncode == 0, pulled.stderr
    assert not [p.name for p in pack_dir.iterdir() if p.name.startswith("pack_git2_")]
    second = Vault.open(tmp_path / "second.vault", key=key)
    assert "with line numbers:\n     1\t" in read(second, "big-9.txt")
    assert git(tmp_path / "second.vault", "fsck", "--strict") == ""


# -- clones racing to push --------------------------------------------------------------------


def racing_server(root: Path, key: str, tmp_path: Path, races: int) -> tuple[Path, Vault]:
    """A server on which another host's push lands during each of the next
    ``races`` pushes: its ``pre-receive`` hook moves ``main`` to that host's
    next version (parked under ``refs/pending/``), so the push that is
    running finds ``main`` moved and is refused, as when two hosts push at
    the same moment.  (the server, a clone of it that has pulled everything)"""
    remote = server(root / "v.git")
    other = Vault.init(tmp_path / "other.vault", key=key)
    write(other, "a.txt", "one\n")
    other.add_remote("origin", str(remote))
    other.push()
    here = Vault.clone(str(remote), tmp_path / "here.vault", key=key)
    parked = []
    for i in range(races):
        write(other, f"other-{i}.txt", f"other host, version {i}\n")
        parked.append(f"{other.repo.references['refs/heads/main'].target}:refs/pending/{i:03d}")
    git(tmp_path / "other.vault", "push", "-q", str(remote), *parked)
    hook = remote / "hooks" / "pre-receive"
    hook.write_text(
        "#!/bin/sh\n"
        "cat >/dev/null\n"
        "next=$(git for-each-ref --format='%(refname)' --sort=refname refs/pending | head -n 1)\n"
        '[ -z "$next" ] && exit 0\n'
        "unset GIT_QUARANTINE_PATH GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES\n"
        'git update-ref refs/heads/main "$next" && git update-ref -d "$next"\n'
    )
    hook.chmod(0o755)
    return remote, here


@pytest.mark.timeout(120)
def test_a_write_whose_pushes_all_lost_their_race_still_reaches_the_server(tmp_path: Path) -> None:
    """Automatic sync pushes a mutation, and when another host's push lands
    first, pulls and pushes again, 3 times.  When all 3 lost (busy replicas
    pushing to one server), the write stayed on this host: flush() said
    everything was tried, close() pushed nothing more, and nothing retried
    until the next mutation, although the warning said "retries"; an agent
    that stopped writing (or a container that went away) kept the write
    from the server.  Now it tries again, a bounded number of rounds."""
    from vaultmem.repo.remotes import unpushed

    key = generate_key()
    root = tmp_path / "served"
    root.mkdir()
    remote, here = racing_server(root, key, tmp_path, races=5)
    with git_daemon(root) as url:
        here.remove_remote("origin")
        here.add_remote("origin", f"{url}/v.git")
        tool = VaultMemoryTool(here, actor="here", sync="origin")
        tool.call({"command": "create", "path": "/memories/here.txt", "file_text": "acknowledged here\n"})
        assert tool.autosync is not None
        assert tool.autosync.flush(60)
        tool.autosync.close()
        assert not unpushed(here.path, "origin")
    assert git(remote, "for-each-ref", "refs/pending") == ""  # every race was run
    fresh = Vault.clone(str(remote), tmp_path / "fresh.vault", key=key)
    assert "acknowledged here" in read(fresh, "here.txt")
    assert "other host, version 4" in read(fresh, "other-4.txt")
    assert git(remote, "fsck", "--strict") == ""


def test_a_wrong_policy_from_value_is_named_as_a_value_not_a_command(
    shared: tuple[Path, str, Vault], tmp_path: Path
) -> None:
    """`vaultmem pull --policy-from our` said "'our' is not a vaultmem pull
    command": the word is the option's value, and pull has no commands."""
    _, key, _ = shared
    done = cli("--vault", "first.vault", "pull", "--policy-from", "our", key=key, cwd=tmp_path)
    assert done.returncode == 2
    assert "'our' is not a value --policy-from takes. Did you mean `ours`?" in done.stderr
    assert "command" not in done.stderr
    assert "Traceback" not in done.stderr


# -- servers that cannot take a push ------------------------------------------------------------


def test_a_push_to_a_working_copy_says_the_server_must_be_bare(shared: tuple[Path, str, Vault], tmp_path: Path) -> None:
    """A server made with `git init` and no `--bare` (a common slip): the
    push said "cannot reach the remote 'origin': local push doesn't (yet)
    support pushing to non-bare repos..": it was reached, and what to do
    was left unsaid."""
    _, key, first = shared
    work = tmp_path / "work"
    subprocess.run(["git", "init", "-q", "--initial-branch=main", str(work)], check=True)
    first.add_remote("work", str(work))
    done = cli("--vault", "first.vault", "push", "work", key=key, cwd=tmp_path)
    assert done.returncode != 0
    assert f"the remote 'work' ({work}) is a working copy" in done.stderr
    assert "`git init --bare`" in done.stderr and "Nothing was pushed." in done.stderr
    assert "cannot reach" not in done.stderr and "Traceback" not in done.stderr
    assert git(work, "for-each-ref") == ""


@pytest.mark.timeout(120)
def test_sync_pulls_again_when_another_hosts_push_lands_between_its_pull_and_push(tmp_path: Path) -> None:
    """`vaultmem sync` is a pull, then a push.  When another host's push
    landed between the two (two replicas syncing at once), it stopped with
    exit 2 and "refused the push ... pull first", right after pulling; the
    user ran it again.  Now it pulls that version in and pushes again."""
    key = generate_key()
    root = tmp_path / "served"
    root.mkdir()
    remote, here = racing_server(root, key, tmp_path, races=2)
    write(here, "here.txt", "written here\n")
    here.close()
    with git_daemon(root) as url:
        git(tmp_path / "here.vault", "remote", "set-url", "origin", f"{url}/v.git")
        done = cli("--vault", "here.vault", "sync", "--actor", "here", "--json", key=key, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert git(remote, "for-each-ref", "refs/pending") == ""  # both other pushes landed during this sync
    fresh = Vault.clone(str(remote), tmp_path / "fresh.vault", key=key)
    assert "written here" in read(fresh, "here.txt")
    assert "other host, version 1" in read(fresh, "other-1.txt")
    assert git(remote, "fsck", "--strict") == ""
