"""Sharing a vault through git servers (issue 16, first part): clone, remotes,
push and pull as fast-forwards, never forced, every incoming commit checked.

Real servers: a bare repository by path and ``file://``, and ``git daemon``
on 127.0.0.1 (``git://``), started here and stopped after.  Two clones stand
for two hosts.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pygit2
import pytest
from conftest import commit_count, git
from githttp import git_http
from sshserver import SSHD, free_port, sshd

from vaultmem import ConflictError, IntegrityError, Vault, VaultError, VaultMemoryTool, WrongKeyError, generate_key

MARKER = "CUSTOMER-SECRET-7731"


def server(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(path)], check=True)
    subprocess.run(["git", "-C", str(path), "config", "receive.denyNonFastForwards", "true"], check=True)
    return path


def write(vault: Vault, name: str, text: str, actor: str = "agent") -> None:
    VaultMemoryTool(vault, actor=actor, session="s").call(
        {"command": "create", "path": f"/memories/{name}", "file_text": text}
    )


def pushed(
    tmp_path: Path, text: str = "one\n", make_server: Callable[[Path], Path] = server
) -> tuple[Path, str, Vault]:
    """A server (``tmp_path/server.git``) holding a vault pushed by its first
    host, which wrote ``a.txt``: (server, key, that host's vault)."""
    key = generate_key()
    remote = make_server(tmp_path / "server.git")
    first = Vault.init(tmp_path / "first.vault", key=key)
    write(first, "a.txt", text)
    first.add_remote("origin", str(remote))
    moved = first.push()
    assert set(moved.moved) == {"main", "vaultmem-keyring"}
    return remote, key, first


@pytest.fixture
def shared(tmp_path: Path) -> tuple[Path, str, Vault]:
    """A server holding a vault pushed by its first host: (server, key, that host's vault)."""
    return pushed(tmp_path, f"one {MARKER}\n")


def test_a_clone_holds_the_same_history_and_opens_with_the_same_key(
    shared: tuple[Path, str, Vault], tmp_path: Path
) -> None:
    remote, key, first = shared
    for url in (str(remote), remote.as_uri()):
        target = tmp_path / f"clone-{len(url)}.vault"
        with Vault.clone(url, target, key=key) as second:
            assert [v.id for v in second.history()] == [v.id for v in first.history()]
            assert second.read("/memories/a.txt") == f"one {MARKER}\n"
            assert second.verify().ok
            assert [(r.name, r.url) for r in second.remotes] == [("origin", url)]
        assert git(target, "config", "receive.denyNonFastForwards").strip() == "true"


def test_a_wrong_key_on_clone_is_one_error_and_leaves_nothing(shared: tuple[Path, str, Vault], tmp_path: Path) -> None:
    remote, _, _ = shared
    with pytest.raises(WrongKeyError):
        Vault.clone(str(remote), tmp_path / "c.vault", key=generate_key())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["first.vault", "server.git"]


def test_versions_keys_and_policy_travel_both_ways(shared: tuple[Path, str, Vault], tmp_path: Path) -> None:
    remote, key, first = shared
    second = Vault.clone(str(remote), tmp_path / "second.vault", key=key)
    write(first, "b.txt", "two\n")
    first.rotate_key(actor="ops")  # a new data key: the next version is sealed and encrypted with it
    write(first, "c.txt", "three\n")
    first.set_policy(actor="ops", max_files=50)
    pushed = first.push()
    assert set(pushed.moved) == {"main", "vaultmem-keyring", "vaultmem-policy"}
    pulled = second.pull()
    assert set(pulled.moved) == {"main", "vaultmem-keyring", "vaultmem-policy"}
    assert second.read("/memories/c.txt") == "three\n"
    assert second.policy.max_files == 50
    assert [v.id for v in second.history()] == [v.id for v in first.history()]
    write(second, "d.txt", "four\n")  # written under the pulled data key
    second.push()
    assert first.pull().moved["main"][1] == str(second.head())
    assert first.read("/memories/d.txt") == "four\n"
    for vault in (first, second):
        assert vault.verify().ok
        assert subprocess.run(["git", "-C", str(vault.path), "fsck", "--strict"], capture_output=True).returncode == 0
    assert second.pull().moved == {} and second.push().moved == {}


def test_diverged_histories_are_never_forced_but_merged_by_a_pull(
    shared: tuple[Path, str, Vault], tmp_path: Path
) -> None:
    remote, key, first = shared
    second = Vault.clone(str(remote), tmp_path / "second.vault", key=key)
    write(first, "from-first.txt", "1\n")
    first.push()
    write(second, "from-second.txt", "2\n")
    server_main = git(remote, "rev-parse", "main").strip()
    second_main = str(second.head())
    with pytest.raises(ConflictError, match="pull first"):
        second.push()
    assert git(remote, "rev-parse", "main").strip() == server_main  # the server kept first's version
    assert str(second.head()) == second_main and commit_count(second.path) == 2
    # plain git cannot force it either: the server refuses a non-fast-forward
    forced = subprocess.run(
        ["git", "-C", str(second.path), "push", "--force", str(remote), "main:main"], capture_output=True, text=True
    )
    assert forced.returncode != 0
    assert git(remote, "rev-parse", "main").strip() == server_main
    pulled = second.pull(actor="host-2")  # a merge: both sides' versions, one merge commit on top
    assert pulled.merge is not None and pulled.merge.merged == server_main
    assert git(second.path, "rev-parse", "main^1", "main^2").split() == [second_main, server_main]
    assert second.read("/memories/from-first.txt") == "1\n" and second.read("/memories/from-second.txt") == "2\n"
    second.push()
    assert git(remote, "rev-parse", "main").strip() == str(second.head())


def test_a_commit_made_on_the_server_without_the_key_is_refused(
    shared: tuple[Path, str, Vault], tmp_path: Path
) -> None:
    remote, key, _ = shared
    second = Vault.clone(str(remote), tmp_path / "second.vault", key=key)
    tree = git(remote, "rev-parse", "main^{tree}").strip()
    env = {**os.environ, "GIT_AUTHOR_NAME": "x", "GIT_AUTHOR_EMAIL": "x", "GIT_COMMITTER_NAME": "x"}
    forged = subprocess.run(
        ["git", "-C", str(remote), "commit-tree", tree, "-p", "main", "-m", "memory: create /memories/evil.txt"],
        capture_output=True,
        text=True,
        env={**env, "GIT_COMMITTER_EMAIL": "x"},
        check=True,
    ).stdout.strip()
    git(remote, "update-ref", "refs/heads/main", forged)
    before = str(second.head())
    with pytest.raises(IntegrityError, match="not made with this vault's key"):
        second.pull()
    assert str(second.head()) == before


def test_a_keyring_altered_on_the_server_is_refused(shared: tuple[Path, str, Vault], tmp_path: Path) -> None:
    remote, key, _ = shared
    second = Vault.clone(str(remote), tmp_path / "second.vault", key=key)
    work = tmp_path / "edit"
    subprocess.run(["git", "clone", "-q", "-b", "vaultmem-keyring", str(remote), str(work)], check=True)
    doc = json.loads((work / "keyring.json").read_text())
    doc["active"] = "0000000000000000"  # someone without the key points the vault at a key of theirs
    (work / "keyring.json").write_text(json.dumps(doc))
    cfg = ["-c", "user.name=x", "-c", "user.email=x"]
    subprocess.run(["git", "-C", str(work), *cfg, "commit", "-qam", "edit"], check=True)
    subprocess.run(["git", "-C", str(work), "push", "-q", "origin", "vaultmem-keyring"], check=True)
    ring = git(second.path, "rev-parse", "refs/heads/vaultmem-keyring").strip()
    with pytest.raises(IntegrityError, match="keyring"):
        second.pull()
    assert git(second.path, "rev-parse", "refs/heads/vaultmem-keyring").strip() == ring


def test_the_server_holds_no_plaintext(shared: tuple[Path, str, Vault]) -> None:
    remote, _, _ = shared
    listed = subprocess.run(
        ["git", "-C", str(remote), "cat-file", "--batch-all-objects", "--batch"], capture_output=True, check=True
    ).stdout
    assert listed and MARKER.encode() not in listed


def test_a_password_in_a_url_is_refused_and_never_stored(shared: tuple[Path, str, Vault], tmp_path: Path) -> None:
    _, key, first = shared
    with pytest.raises(VaultError, match="password"):
        first.add_remote("hosted", "https://bot:s3cret@git.example.com/support.vault")
    with pytest.raises(VaultError, match="password"):
        Vault.clone("https://bot:s3cret@git.example.com/support.vault", tmp_path / "x.vault", key=key)
    assert "s3cret" not in (first.path / "config").read_text()
    assert not (tmp_path / "x.vault").exists()


# -- git daemon on 127.0.0.1 ---------------------------------------------------------------


@contextlib.contextmanager
def git_daemon(base: Path) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [
            "git",
            "daemon",
            "--reuseaddr",
            "--export-all",
            "--enable=receive-pack",
            f"--base-path={base}",
            "--listen=127.0.0.1",
            f"--port={port}",
            str(base),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            time.sleep(0.05)
        else:
            pytest.fail("git daemon did not start")
        yield f"git://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_two_hosts_share_through_git_daemon(shared: tuple[Path, str, Vault], tmp_path: Path) -> None:
    remote, key, first = shared
    with git_daemon(remote.parent) as base:
        url = f"{base}/{remote.name}"
        second = Vault.clone(url, tmp_path / "second.vault", key=key)
        write(second, "over-git.txt", "sent over git://\n")
        assert set(second.push().moved) == {"main"}
        first.remove_remote("origin")
        first.add_remote("origin", url)
        assert set(first.pull().moved) == {"main"}
        assert first.read("/memories/over-git.txt") == "sent over git://\n"


# -- the command line ---------------------------------------------------------------------


def cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vaultmem", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )


def test_the_commands_clone_push_pull_and_sync(shared: tuple[Path, str, Vault], tmp_path: Path) -> None:
    remote, key, first = shared
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}, "VAULTMEM_KEY": key}
    cloned = cli("clone", str(remote), "second.vault", "--json", env=env, cwd=tmp_path)
    assert cloned.returncode == 0, cloned.stderr
    assert json.loads(cloned.stdout)["versions"] == 1
    listed = cli("--vault", "second.vault", "remote", "list", "--json", env=env, cwd=tmp_path)
    assert json.loads(listed.stdout) == [{"name": "origin", "url": str(remote)}]
    write(first, "b.txt", "two\n")
    first.push()
    pulled = cli("--vault", "second.vault", "pull", "--json", env=env, cwd=tmp_path)
    assert list(json.loads(pulled.stdout)["moved"]) == ["main"]
    write(first, "c.txt", "three\n")
    first.push()
    synced = cli("--vault", "second.vault", "sync", env=env, cwd=tmp_path)
    assert synced.returncode == 0 and synced.stdout.startswith("Pulled main: ")
    assert "Pushed: nothing to move" in synced.stdout
    no_key = {k: v for k, v in env.items() if k != "VAULTMEM_KEY"}
    keyless = cli("clone", str(remote), "third.vault", env=no_key, cwd=tmp_path)
    assert keyless.returncode == 2 and keyless.stderr.startswith("vaultmem: no key given")
    assert not (tmp_path / "third.vault").exists()
    passphrase = cli("clone", str(remote), "third.vault", "--passphrase-file", "missing", env=no_key, cwd=tmp_path)
    assert passphrase.returncode == 2 and "passphrase file" in passphrase.stderr
    refused = cli("--vault", "second.vault", "remote", "add", "x", "https://u:pw@h/x", env=env, cwd=tmp_path)
    assert refused.returncode == 2 and "password" in refused.stderr and "pw@" not in refused.stderr


# -- the remote as a witness ---------------------------------------------------------------


def test_a_history_cut_short_on_the_server_is_refused_by_pull_and_reported_by_verify(
    shared: tuple[Path, str, Vault], tmp_path: Path
) -> None:
    remote, key, first = shared
    write(first, "b.txt", "two\n")
    write(first, "c.txt", "three\n")
    first.push()
    second = Vault.clone(str(remote), tmp_path / "second.vault", key=key)
    pushed = git(remote, "rev-parse", "main").strip()
    # someone with access to the server moves main back two versions (sealed, genuine, but cut short)
    git(remote, "update-ref", "refs/heads/main", "main~2")
    cut = git(remote, "rev-parse", "main").strip()
    for vault in (first, second):
        head = str(vault.head())
        with pytest.raises(IntegrityError) as refused:
            vault.pull()
        assert pushed[:10] in str(refused.value) and cut[:10] in str(refused.value)
        assert str(vault.head()) == head  # nothing changed
        with pytest.raises(IntegrityError):
            vault.push()
        report = vault.verify()
        assert not report.ok
        [finding] = [f for f in report.findings if f.kind == "remote"]
        assert pushed[:10] in finding.detail and cut[:10] in finding.detail and "origin" in finding.detail


def test_a_remote_that_only_moved_forward_is_no_finding(shared: tuple[Path, str, Vault], tmp_path: Path) -> None:
    remote, key, first = shared
    second = Vault.clone(str(remote), tmp_path / "second.vault", key=key)
    write(second, "b.txt", "two\n")
    second.push()
    first.pull()
    assert first.verify().ok and second.verify().ok


# -- killed mid-transfer ---------------------------------------------------------------------

PULL = """
import sys
from vaultmem import Vault
vault = Vault.open(sys.argv[1], key=sys.argv[2])
print("open", flush=True)
vault.pull() if sys.argv[3] == "pull" else vault.push()
print("done", flush=True)
"""


@pytest.mark.parametrize("verb", ["pull", "push"])
def test_a_transfer_killed_at_any_moment_leaves_both_sides_consistent(
    shared: tuple[Path, str, Vault], tmp_path: Path, verb: str
) -> None:
    remote, key, first = shared
    second = Vault.clone(str(remote), tmp_path / "second.vault", key=key)
    source, target = (first, second) if verb == "pull" else (second, first)
    tool = VaultMemoryTool(source, actor="agent", session="many")
    for n in range(150):
        tool.call({"command": "create", "path": f"/memories/many/{n}.txt", "file_text": f"{n} " * 200})
    if verb == "pull":
        source.push()
    mover = target if verb == "pull" else source
    for delay in (0.0, 0.02, 0.05, 0.1, 0.2, 0.4):
        proc = subprocess.Popen(
            [sys.executable, "-c", PULL, str(mover.path), key, verb], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None and proc.stdout.readline() == "open\n"
        time.sleep(delay)
        proc.kill()
        proc.wait(timeout=30)
        with Vault.open(mover.path, key=key) as reopened:
            assert reopened.verify().ok
            assert reopened.head() in (pygit2_oid(target.path), pygit2_oid(source.path))
        fsck = subprocess.run(["git", "-C", str(mover.path), "fsck", "--strict"], capture_output=True, text=True)
        assert fsck.returncode == 0, fsck.stderr
        server_fsck = subprocess.run(["git", "-C", str(remote), "fsck", "--strict"], capture_output=True, text=True)
        assert server_fsck.returncode == 0, server_fsck.stderr
    with Vault.open(mover.path, key=key) as reopened:
        reopened.pull() if verb == "pull" else reopened.push()
    assert git(remote, "rev-parse", "main").strip() == git(source.path, "rev-parse", "main").strip()
    if verb == "pull":
        assert git(target.path, "rev-parse", "main").strip() == git(source.path, "rev-parse", "main").strip()


def pygit2_oid(path: Path) -> pygit2.Oid:
    return pygit2.Oid(hex=git(path, "rev-parse", "main").strip())


# -- smart HTTP with basic auth ------------------------------------------------------------


def test_https_style_credentials_come_from_the_environment_or_gits_helpers(
    shared: tuple[Path, str, Vault], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote, key, first = shared
    monkeypatch.delenv("VAULTMEM_GIT_USERNAME", raising=False)
    monkeypatch.delenv("VAULTMEM_GIT_PASSWORD", raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    with git_http(remote.parent, "agent", "s3cret-pw") as (base, requests):
        url = f"{base}/{remote.name}"
        # no credentials anywhere: one clear error, nothing made, no endless retry
        with pytest.raises(VaultError, match="cannot clone"):
            Vault.clone(url, tmp_path / "none.vault", key=key)
        assert not (tmp_path / "none.vault").exists()
        # from the environment
        monkeypatch.setenv("VAULTMEM_GIT_USERNAME", "agent")
        monkeypatch.setenv("VAULTMEM_GIT_PASSWORD", "s3cret-pw")
        second = Vault.clone(url, tmp_path / "second.vault", key=key)
        write(second, "over-http.txt", "sent over http\n")
        tool = VaultMemoryTool(second, actor="agent", session="many")
        for n in range(150):  # a pack of some size, in both directions
            tool.call({"command": "create", "path": f"/memories/many/{n}.txt", "file_text": f"{n} " * 300})
        assert set(second.push().moved) == {"main"}
        # from git's credential helper, as `git credential approve` stored it
        monkeypatch.delenv("VAULTMEM_GIT_USERNAME")
        monkeypatch.delenv("VAULTMEM_GIT_PASSWORD")
        (home / ".gitconfig").write_text("[credential]\n\thelper = store\n")
        (home / ".git-credentials").write_text(f"http://agent:s3cret-pw@{base.removeprefix('http://')}\n")
        first.remove_remote("origin")
        first.add_remote("origin", url)
        assert set(first.pull().moved) == {"main"}
        assert first.read("/memories/over-http.txt") == "sent over http\n"
        # a wrong password: refused, clearly
        (home / ".git-credentials").write_text(f"http://agent:wrong@{base.removeprefix('http://')}\n")
        with pytest.raises(VaultError, match="cannot reach the remote") as refused:
            first.pull()
        assert "wrong" not in str(refused.value) and "s3cret" not in str(refused.value)
    assert any('" 401 ' in line for line in requests) and any("git-receive-pack" in line for line in requests)
    for vault in (first, second):
        stored = (vault.path / "config").read_text()
        assert "s3cret" not in stored and "wrong" not in stored


# -- ssh --------------------------------------------------------------------------------------


@pytest.mark.skipif(not os.path.exists(SSHD), reason="OpenSSH's sshd is not installed (.ci/run installs it)")
def test_ssh_with_a_key_file_and_a_known_host_and_nothing_else(
    shared: tuple[Path, str, Vault], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote, key, first = shared
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(pygit2.settings, "homedir", str(home))  # libgit2 read HOME once, at its start
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    with sshd(tmp_path / "sshd") as server:
        monkeypatch.setenv("VAULTMEM_SSH_KEY", str(server.user_key))
        url = f"ssh://root@127.0.0.1:{server.port}{remote}"
        # a host this machine does not know is refused before anything is sent
        with pytest.raises(VaultError, match="not one this machine knows"):
            Vault.clone(url, tmp_path / "unknown.vault", key=key)
        assert not (tmp_path / "unknown.vault").exists()
        (home / ".ssh" / "known_hosts").write_text(server.known_hosts + "\n")
        second = Vault.clone(url, tmp_path / "second.vault", key=key)
        write(second, "over-ssh.txt", "sent over ssh\n")
        assert set(second.push().moved) == {"main"}
        assert first.pull().moved["main"][1] == str(second.head())
        assert first.read("/memories/over-ssh.txt") == "sent over ssh\n"
        # a host key that changed is refused too
        other = (
            server.known_hosts.rsplit(" ", 1)[0]
            + " AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C7okWi4dsSGtqrbI"
        )
        (home / ".ssh" / "known_hosts").write_text(other + "\n")
        with pytest.raises(VaultError, match="not one this machine knows"):
            second.pull()


# -- automatic sync for agents -------------------------------------------------------------


def test_a_tool_with_sync_pulls_at_start_and_pushes_each_mutation_in_the_background(
    shared: tuple[Path, str, Vault], tmp_path: Path
) -> None:
    remote, key, first = shared
    second = Vault.clone(str(remote), tmp_path / "second.vault", key=key)
    write(first, "before-session.txt", "from the first host\n")
    first.push()
    tool = VaultMemoryTool(second, actor="agent", session="s", sync="origin")  # pulls now
    assert second.read("/memories/before-session.txt") == "from the first host\n"
    for n in range(5):
        tool.call({"command": "create", "path": f"/memories/s{n}.txt", "file_text": f"{n}\n"})
    assert tool.autosync is not None and tool.autosync.flush(60)
    assert git(remote, "rev-parse", "main").strip() == str(second.head())
    assert tool.autosync.failures == 0
    tool.autosync.close()


def test_an_unreachable_server_never_fails_a_call_and_the_next_sync_catches_up(
    shared: tuple[Path, str, Vault], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    remote, _, first = shared
    moved = remote.with_name("moved.git")
    remote.rename(moved)  # the server is gone
    tool = VaultMemoryTool(first, actor="agent", session="s", sync="origin")
    result = tool.call({"command": "create", "path": "/memories/offline.txt", "file_text": "works offline\n"})
    assert result == "File created successfully at: /memories/offline.txt"
    assert tool.autosync is not None and tool.autosync.flush(60)
    assert tool.autosync.failures >= 2  # the pull at start, the push after the call
    assert any("could not sync" in r.getMessage() and r.name == "vaultmem.sync" for r in caplog.records)
    moved.rename(remote)  # back online
    tool.call({"command": "create", "path": "/memories/online.txt", "file_text": "back\n"})
    assert tool.autosync.flush(60)
    assert git(remote, "rev-parse", "main").strip() == str(first.head())
    tool.autosync.close()


def test_sync_every_n_seconds_pulls_what_others_pushed(shared: tuple[Path, str, Vault], tmp_path: Path) -> None:
    remote, key, first = shared
    second = Vault.clone(str(remote), tmp_path / "second.vault", key=key)
    tool = VaultMemoryTool(second, actor="agent", session="s", sync="origin", sync_every=0.1)
    write(first, "later.txt", "pushed later\n")
    first.push()
    deadline = time.monotonic() + 30
    while str(second.head()) != str(first.head()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert second.read("/memories/later.txt") == "pushed later\n"
    assert tool.autosync is not None
    tool.autosync.close()


def test_sync_needs_a_known_remote_and_a_positive_interval(shared: tuple[Path, str, Vault]) -> None:
    _, _, first = shared
    with pytest.raises(VaultError, match="no remote named 'elsewhere'"):
        VaultMemoryTool(first, actor="a", sync="elsewhere")
    with pytest.raises(VaultError, match="positive number of seconds"):
        VaultMemoryTool(first, actor="a", sync="origin", sync_every=0)


# -- a key change on another clone ---------------------------------------------------------


def test_a_key_change_reaches_another_clone_that_is_given_the_new_key(
    shared: tuple[Path, str, Vault], tmp_path: Path
) -> None:
    remote, key, first = shared
    second = Vault.clone(str(remote), tmp_path / "second.vault", key=key)
    new_key = generate_key()
    first.change_key(key=new_key)
    write(first, "after-change.txt", "written under the new key\n")
    first.push()
    ring = git(second.path, "rev-parse", "refs/heads/vaultmem-keyring").strip()
    with pytest.raises(WrongKeyError) as refused:
        second.pull()
    assert "Pull with the new key" in str(refused.value)
    with pytest.raises(WrongKeyError):
        second.pull(key=generate_key())  # not the new key either
    assert git(second.path, "rev-parse", "refs/heads/vaultmem-keyring").strip() == ring
    assert set(second.pull(key=new_key).moved) == {"main", "vaultmem-keyring"}
    assert second.read("/memories/after-change.txt") == "written under the new key\n"
    second.close()
    with pytest.raises(WrongKeyError):
        Vault.open(second.path, key=key)  # the old key no longer opens this clone either
    with Vault.open(second.path, key=new_key) as reopened:
        assert reopened.verify().ok


def test_the_pull_command_takes_the_new_key_after_a_key_change(shared: tuple[Path, str, Vault], tmp_path: Path) -> None:
    remote, key, first = shared
    Vault.clone(str(remote), tmp_path / "second.vault", key=key).close()
    new_key = generate_key()
    first.change_key(key=new_key)
    first.push()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}, "VAULTMEM_KEY": key}
    refused = cli("--vault", "second.vault", "pull", env=env, cwd=tmp_path)
    assert refused.returncode == 2 and "--new-key-file" in refused.stderr
    pulled = cli("--vault", "second.vault", "pull", env={**env, "VAULTMEM_NEW_KEY": new_key}, cwd=tmp_path)
    assert pulled.returncode == 0 and "Pulled vaultmem-keyring" in pulled.stdout, pulled.stderr
    Vault.open(tmp_path / "second.vault", key=new_key).close()


def test_a_graft_never_makes_a_pull_fast_forward_over_a_local_version(
    shared: tuple[Path, str, Vault], tmp_path: Path
) -> None:
    """An ``info/grafts`` line giving the server's commit this clone's head as
    its parent makes git (and libgit2) see a fast-forward where the histories
    diverged: moving main there would drop the local version from it.  The
    pull reads the parents the commits record, so it merges, and both
    versions stay."""
    remote, key, first = shared
    second = Vault.clone(str(remote), tmp_path / "second.vault", key=key)
    write(first, "from-first.txt", "1\n")
    first.push()
    write(second, "from-second.txt", "2\n")
    second_main = str(second.head())
    second.close()
    git(second.path, "fetch", "-q", str(remote), "main")
    server_main = git(remote, "rev-parse", "main").strip()
    (second.path / "info").mkdir(exist_ok=True)
    (second.path / "info" / "grafts").write_text(f"{server_main} {second_main}\n")
    git(second.path, "merge-base", "--is-ancestor", second_main, server_main)  # what git sees: a fast-forward
    reopened = Vault.open(second.path, key=key)
    pulled = reopened.pull(actor="host-2")
    assert pulled.merge is not None and pulled.merge.merged == server_main
    (second.path / "info" / "grafts").unlink()
    after = Vault.open(second.path, key=key)
    assert git(second.path, "rev-parse", "main^1", "main^2").split() == [second_main, server_main]
    assert after.read("/memories/from-second.txt") == "2\n" and after.read("/memories/from-first.txt") == "1\n"
