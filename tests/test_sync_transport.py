"""Sharing a vault through git servers: the transport's edges.

A server that never answers, a push race lost over a network transport, a
server that lost ``main``, a clone of a history altered on the server, URLs
that cannot be parsed or paths that are not there, pushes to a shared disk
running beside pulls.  Real servers on 127.0.0.1 (a listening socket that never
answers, ``git daemon``), started here and stopped after; real git throughout.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pygit2
import pytest
from conftest import git
from test_sync import git_daemon, pushed, server, write

import vaultmem.repo.remotes as remotes
from vaultmem import ConflictError, IntegrityError, Vault, VaultError, VaultMemoryTool, generate_key
from vaultmem.ops import autosync


@pytest.fixture
def shared(tmp_path: Path) -> tuple[Path, str, Vault]:
    """A server on a path holding a vault pushed by its first host: (server, key, that host's vault)."""
    return pushed(tmp_path)


def clean_env(key: str, **extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}, "VAULTMEM_KEY": key, **extra}


def cli(*args: str, env: dict[str, str], cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vaultmem", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout
    )


# -- a server that accepts the connection and never answers ---------------------------------


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A port on 127.0.0.1 where every connection is accepted and held, and nothing is ever sent."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(32)
    listener.settimeout(0.1)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        thread.join(10)
        for conn in held:
            conn.close()
        listener.close()


@pytest.mark.timeout(120)
def test_a_server_that_never_answers_ends_pull_push_and_clone_within_the_bound(
    shared: tuple[Path, str, Vault], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, key, first = shared
    monkeypatch.setenv("VAULTMEM_SYNC_TIMEOUT", "1")
    write(first, "b.txt", "not pushed yet\n")
    head = str(first.head())
    with silent_server() as port:
        first.remove_remote("origin")
        first.add_remote("origin", f"git://127.0.0.1:{port}/v.git")
        for action in (first.pull, first.push, first.sync):
            started = time.monotonic()
            with pytest.raises(VaultError, match=r"the remote 'origin' did not answer within 1 s") as refused:
                action()
            assert time.monotonic() - started < 15
            assert "Nothing was changed" in str(refused.value)
        assert str(first.head()) == head
        for url in (f"git://127.0.0.1:{port}/v.git", f"http://127.0.0.1:{port}/v.git"):
            started = time.monotonic()
            with pytest.raises(VaultError, match=r"did not answer within 1 s"):
                Vault.clone(url, tmp_path / "hosts" / "c.vault", key=key)
            assert time.monotonic() - started < 15
        assert not (tmp_path / "hosts").exists()
        # the commands, bounded the same way
        env = clean_env(key, VAULTMEM_SYNC_TIMEOUT="1")
        for args in (["--vault", "first.vault", "pull"], ["clone", f"git://127.0.0.1:{port}/v.git", "c.vault"]):
            done = cli(*args, env=env, cwd=tmp_path, timeout=30)
            assert done.returncode == 2 and "did not answer within 1 s" in done.stderr, done.stderr


@pytest.mark.timeout(120)
def test_a_tool_with_sync_is_made_at_once_when_the_server_never_answers(
    shared: tuple[Path, str, Vault], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _, _, first = shared
    monkeypatch.setenv("VAULTMEM_SYNC_TIMEOUT", "4")
    monkeypatch.setattr(autosync, "FIRST_PULL_WAIT", 0.5)
    caplog.set_level(logging.WARNING, logger="vaultmem.sync")
    with silent_server() as port:
        first.remove_remote("origin")
        first.add_remote("origin", f"git://127.0.0.1:{port}/v.git")
        started = time.monotonic()
        tool = VaultMemoryTool(first, actor="agent", session="s", sync="origin")
        assert time.monotonic() - started < 3  # the first pull goes on in the background
        result = tool.call({"command": "create", "path": "/memories/offline.txt", "file_text": "works\n"})
        assert result == "File created successfully at: /memories/offline.txt"
        assert time.monotonic() - started < 3
        assert tool.autosync is not None and tool.autosync.flush(60)
        assert tool.autosync.failures >= 1
        assert any("did not answer within 4 s" in r.getMessage() for r in caplog.records if r.name == "vaultmem.sync")
        tool.autosync.close()
    assert first.read("/memories/offline.txt") == "works\n"


def test_a_tool_with_sync_still_starts_from_what_the_server_holds(
    shared: tuple[Path, str, Vault], tmp_path: Path
) -> None:
    remote, key, first = shared
    second = Vault.clone(str(remote), tmp_path / "second.vault", key=key)
    write(first, "before.txt", "pushed before the session\n")
    first.push()
    tool = VaultMemoryTool(second, actor="agent", session="s", sync="origin")
    assert second.read("/memories/before.txt") == "pushed before the session\n"
    assert tool.autosync is not None and tool.autosync.failures == 0
    tool.autosync.close()


# -- a push race lost over a git server -------------------------------------------------------


def test_a_push_race_lost_over_git_daemon_says_pull_first_and_automatic_sync_merges_and_pushes(
    shared: tuple[Path, str, Vault], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote, key, first = shared
    with git_daemon(remote.parent) as base:
        url = f"{base}/{remote.name}"
        first.remove_remote("origin")
        first.add_remote("origin", url)
        first.pull()
        other = Vault.clone(url, tmp_path / "other.vault", key=key)
        real_fetch = remotes.fetch
        armed = [True]

        def fetch_then_the_other_host_pushes(
            repo: pygit2.Repository, name: str, progress: Callable[[int, int], None] | None = None
        ) -> None:
            real_fetch(repo, name, progress)
            if armed[0]:
                armed[0] = False
                other.push()  # lands between this push's check and its send

        monkeypatch.setattr(remotes, "fetch", fetch_then_the_other_host_pushes)
        write(first, "first-1.txt", "1\n")
        write(other, "other-1.txt", "1\n")
        before = git(remote, "rev-parse", "main").strip()
        with pytest.raises(ConflictError, match="pull first"):
            first.push()
        assert git(remote, "rev-parse", "main").strip() == str(other.head()) != before
        first.pull(actor="first")
        first.push()
        other.pull(actor="other")
        # automatic sync: the lost race pulls (merging) and pushes again
        tool = VaultMemoryTool(first, actor="first", session="s", sync="origin")
        write(other, "other-2.txt", "2\n")
        armed[0] = True
        tool.call({"command": "create", "path": "/memories/first-2.txt", "file_text": "2\n"})
        assert tool.autosync is not None and tool.autosync.flush(60)
        assert tool.autosync.failures == 0
        assert git(remote, "rev-parse", "main").strip() == str(first.head())
        assert first.read("/memories/other-2.txt") == "2\n"
        tool.autosync.close()


# -- a clone checks what it takes ------------------------------------------------------------


def test_a_clone_refuses_a_commit_made_on_the_server_without_the_key(
    shared: tuple[Path, str, Vault], tmp_path: Path
) -> None:
    remote, key, first = shared
    write(first, "allergy.txt", "Allergic to penicillin\n")
    write(first, "later.txt", "written after\n")
    first.push()
    rolled_back = git(remote, "rev-parse", "main~1^{tree}").strip()
    env = {**os.environ, "GIT_AUTHOR_NAME": "x", "GIT_AUTHOR_EMAIL": "x", "GIT_COMMITTER_NAME": "x"}
    forged = subprocess.run(
        ["git", "-C", str(remote), "commit-tree", rolled_back, "-p", "main", "-m", "memory: roll back"],
        capture_output=True,
        text=True,
        env={**env, "GIT_COMMITTER_EMAIL": "x"},
        check=True,
    ).stdout.strip()
    git(remote, "update-ref", "refs/heads/main", forged)
    with pytest.raises(IntegrityError, match=r"not made with this vault's key.*Nothing was made"):
        Vault.clone(str(remote), tmp_path / "hosts" / "b.vault", key=key)
    assert not (tmp_path / "hosts").exists()
    done = cli("clone", str(remote), "b.vault", env=clean_env(key), cwd=tmp_path)
    assert done.returncode != 0 and "not made with this vault's key" in done.stderr
    assert not (tmp_path / "b.vault").exists()


def test_a_server_branch_naming_no_commit_is_refused_by_clone(shared: tuple[Path, str, Vault], tmp_path: Path) -> None:
    """Someone wrote a blob's id into the server's ref file (git's own
    update-ref refuses to): clone says so, and makes nothing."""
    remote, key, _first = shared
    blob = subprocess.run(
        ["git", "-C", str(remote), "hash-object", "-w", "--stdin"], input="hi\n", capture_output=True, text=True
    ).stdout.strip()
    git(remote, "pack-refs", "--all")
    (remote / "refs" / "heads" / "main").write_text(blob + "\n")
    git(remote, "symbolic-ref", "HEAD", "refs/heads/master")  # git init's default: libgit2 clones without checking main
    done = cli("clone", str(remote), "b.vault", env=clean_env(key), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Nothing was made." in done.stderr
    assert "unexpected" not in done.stderr and not (tmp_path / "b.vault").exists()
    with pytest.raises(IntegrityError, match=f"the remote's branch names {blob[:10]}, a blob, not a version"):
        Vault.clone(str(remote), tmp_path / "c.vault", key=key)
    assert not (tmp_path / "c.vault").exists()


# -- a server that lost main -----------------------------------------------------------------


def test_a_server_that_lost_main_is_reported_and_a_push_after_checking_restores_it(
    shared: tuple[Path, str, Vault],
) -> None:
    remote, _, first = shared
    pushed = str(first.head())
    git(remote, "update-ref", "-d", "refs/heads/main")
    with pytest.raises(IntegrityError, match="no longer has a main branch") as refused:
        first.pull()
    assert pushed[:10] in str(refused.value)
    with pytest.raises(IntegrityError, match="no longer has a main branch"):
        first.push()
    assert git(remote, "rev-parse", "-q", "--verify", "refs/heads/main", check=False) == ""
    report = first.verify()
    [finding] = [f for f in report.findings if f.kind == "remote"]
    assert "no longer has a main branch" in finding.detail
    # once the server is checked: the witness starts again, and the push re-creates main (a fast-forward)
    first.remove_remote("origin")
    first.add_remote("origin", str(remote))
    assert set(first.push().moved) == {"main"}
    assert git(remote, "rev-parse", "main").strip() == pushed
    assert first.verify().ok


def test_a_server_recreated_empty_is_reported_and_refilled_after_checking(
    shared: tuple[Path, str, Vault], tmp_path: Path
) -> None:
    remote, key, first = shared
    shutil.rmtree(remote)
    server(remote)
    with pytest.raises(IntegrityError, match="no longer has a main branch"):
        first.push()
    with pytest.raises(IntegrityError, match="no longer has a main branch"):
        first.pull()
    assert git(remote, "for-each-ref").strip() == ""
    first.remove_remote("origin")
    first.add_remote("origin", str(remote))
    assert set(first.push().moved) == {"main", "vaultmem-keyring"}
    with Vault.clone(str(remote), tmp_path / "again.vault", key=key) as again:
        assert again.read("/memories/a.txt") == "one\n"


def test_a_branch_the_server_no_longer_has_is_not_taken_as_agreed(
    shared: tuple[Path, str, Vault], tmp_path: Path
) -> None:
    remote, _, first = shared
    first.set_policy(actor="ops", max_files=50)
    first.push()
    git(remote, "update-ref", "-d", "refs/heads/vaultmem-policy")
    pushed = first.push()  # not "nothing to move": the policy goes back, as a new branch there
    assert pushed.moved == {"vaultmem-policy": (None, git(first.path, "rev-parse", "vaultmem-policy").strip())}


# -- URLs ------------------------------------------------------------------------------------


def test_a_url_that_cannot_be_parsed_is_refused_without_echoing_it(
    shared: tuple[Path, str, Vault], tmp_path: Path
) -> None:
    _, key, first = shared
    url = "https://alice:S3cretPassw0rd@[::1:8443/v.git"
    with pytest.raises(VaultError) as refused:
        first.add_remote("typo", url)
    assert "S3cretPassw0rd" not in str(refused.value)
    with pytest.raises(VaultError) as refused:
        Vault.clone(url, tmp_path / "x.vault", key=key)
    assert "S3cretPassw0rd" not in str(refused.value)
    assert not (tmp_path / "x.vault").exists()
    assert "S3cretPassw0rd" not in (first.path / "config").read_text()
    env = clean_env(key)
    for args in (["--vault", "first.vault", "remote", "add", "typo", url], ["clone", url, "y.vault"]):
        done = cli(*args, env=env, cwd=tmp_path)
        assert done.returncode == 2 and "S3cretPassw0rd" not in done.stdout + done.stderr
    assert "S3cretPassw0rd" not in (first.path / "config").read_text()


def test_a_failed_clone_leaves_no_folder_it_made(shared: tuple[Path, str, Vault], tmp_path: Path) -> None:
    remote, _, _ = shared
    done = cli(
        "clone", str(remote), "hosts/agent-7/v.vault", env=clean_env(generate_key()), cwd=tmp_path
    )  # a wrong key
    assert done.returncode == 2
    assert not (tmp_path / "hosts").exists()
    (tmp_path / "kept").mkdir()
    done = cli("clone", str(remote), "kept/deeper/v.vault", env=clean_env(generate_key()), cwd=tmp_path)
    assert done.returncode == 2
    assert (tmp_path / "kept").is_dir() and not (tmp_path / "kept" / "deeper").exists()


def test_a_relative_path_remote_is_stored_absolute_and_a_missing_one_is_named(
    shared: tuple[Path, str, Vault], tmp_path: Path
) -> None:
    remote, key, first = shared
    env = clean_env(key)
    first.remove_remote("origin")
    added = cli("--vault", "first.vault", "remote", "add", "origin", "./server.git", env=env, cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    assert git(first.path, "config", "remote.origin.url").strip() == str(remote)
    (tmp_path / "elsewhere").mkdir()
    pulled = cli("--vault", "../first.vault", "pull", env=env, cwd=tmp_path / "elsewhere")
    assert pulled.returncode == 0, pulled.stderr
    missing = tmp_path / "no-such-server.git"
    cloned = cli("clone", "./no-such-server.git", "c.vault", env=env, cwd=tmp_path)
    assert cloned.returncode == 2 and f"no repository at {missing}" in cloned.stderr, cloned.stderr
    assert "unsupported URL protocol" not in cloned.stderr
    with Vault.open(first.path, key=key) as reopened:
        reopened.remove_remote("origin")
        reopened.add_remote("origin", str(missing))
        with pytest.raises(VaultError, match=f"no repository at {missing}"):
            reopened.pull()


# -- a server on a shared disk, pulled while another host pushes -----------------------------

PUSHER = """
import sys, time
from pathlib import Path
from vaultmem import Vault, VaultMemoryTool
vault = Vault.open(sys.argv[1], key=sys.argv[2])
tool = VaultMemoryTool(vault, actor="pusher")
stop, n, deadline = Path(sys.argv[3]), 0, time.monotonic() + 90
print("ready", flush=True)
while not stop.exists() and time.monotonic() < deadline:
    tool.call({"command": "create", "path": f"/memories/p{n}.txt", "file_text": "p\\n"})
    vault.push()
    n += 1
print(n, flush=True)
"""


def test_pulls_from_a_shared_disk_never_fail_while_another_host_pushes(
    shared: tuple[Path, str, Vault], tmp_path: Path
) -> None:
    remote, key, first = shared
    first.close()
    puller = Vault.clone(str(remote), tmp_path / "puller.vault", key=key)
    stop = tmp_path / "stop"
    proc = subprocess.Popen(
        [sys.executable, "-c", PUSHER, str(tmp_path / "first.vault"), key, str(stop)], stdout=subprocess.PIPE, text=True
    )
    failures: list[str] = []
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 40
        pulls = 0
        while pulls < 150 and time.monotonic() < deadline:
            pulls += 1
            try:
                puller.pull()
            except VaultError as err:
                failures.append(str(err))
    finally:
        stop.touch()
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and int(out.strip()) > 0
    assert failures == []
    puller.pull()
    assert str(puller.head()) == git(remote, "rev-parse", "main").strip()
    assert not list((remote / "refs").glob("vaultmem-incoming/*"))


def test_a_push_to_a_shared_disk_writes_the_servers_reflog_when_it_keeps_one(
    shared: tuple[Path, str, Vault],
) -> None:
    remote, _, first = shared
    git(remote, "config", "core.logAllRefUpdates", "always")
    for n in range(3):
        write(first, f"r{n}.txt", f"{n}\n")
        first.push()
    logged = git(remote, "reflog", "show", "--format=%H", "main").split()
    assert len(logged) == 3 and logged[0] == str(first.head())
    assert subprocess.run(["git", "-C", str(remote), "fsck", "--strict"], capture_output=True).returncode == 0
