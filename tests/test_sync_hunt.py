"""Sharing a vault the way users do beside stock git (docs/sync.md): vaults
made by `git clone --mirror` and by a clone from a relative path, servers
that hold other branches, a shallow server, a server whose hook declines a
push, remote names git refuses, and a server holding another vault.

Real parts only: bare repositories on disk, `git daemon` on 127.0.0.1
started and stopped here, real keys, the CLI in a subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import git
from test_sync import git_daemon, pushed, write

from vaultmem import ConflictError, IntegrityError, Vault, VaultError, VaultMemoryTool, generate_key

VAULT_REFS = {"refs/heads/main", "refs/heads/vaultmem-keyring"}


def server(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(path)], check=True)
    return path


@pytest.fixture
def shared(tmp_path: Path) -> tuple[Path, str, Vault]:
    """A server holding a vault pushed by its first host: (server, key, that host's vault)."""
    return pushed(tmp_path, make_server=server)


def unsealed_commit(repo: Path, parent: str | None, text: str) -> str:
    """A commit made with stock git, without the vault's key: a plaintext file in its tree."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "x", "GIT_AUTHOR_EMAIL": "x@x", "GIT_COMMITTER_NAME": "x"}
    env["GIT_COMMITTER_EMAIL"] = "x@x"
    blob = subprocess.run(
        ["git", "-C", str(repo), "hash-object", "-w", "--stdin"], input=text, capture_output=True, text=True, check=True
    ).stdout.strip()
    tree = subprocess.run(
        ["git", "-C", str(repo), "mktree"], input=f"100644 blob {blob}\tplain.txt\n", capture_output=True, text=True
    ).stdout.strip()
    parents = ["-p", parent] if parent else []
    return subprocess.run(
        ["git", "-C", str(repo), "commit-tree", tree, *parents, "-m", "written without the key"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.strip()


def refs(repo: Path) -> set[str]:
    return set(git(repo, "for-each-ref", "--format=%(refname)").split())


# -- a vault made by `git clone --mirror` ------------------------------------------------------


def test_a_mirror_clone_keeps_its_own_versions_and_checks_what_it_pulls(
    shared: tuple[Path, str, Vault], tmp_path: Path
) -> None:
    """`git clone --mirror` configures the fetch refspec +refs/*:refs/*: a
    transfer must still move no branch of the vault but through its checks."""
    remote, key, first = shared
    mirror = tmp_path / "mirror.vault"
    subprocess.run(["git", "clone", "-q", "--mirror", str(remote), str(mirror)], check=True)
    with Vault.open(mirror, key=key) as vault:
        write(vault, "from-mirror.txt", "written on the mirror\n")
        mine = str(vault.head())
        pushed = vault.push()
        assert pushed.moved["main"][1] == mine  # before: "nothing to move", and the version was gone
        assert str(vault.head()) == mine
        assert git(remote, "rev-parse", "main").strip() == mine
        # a commit made on the server without the key is refused, and main stays
        forged = unsealed_commit(remote, mine, "PLAINTEXT ON THE SERVER\n")
        git(remote, "update-ref", "refs/heads/main", forged)
        with pytest.raises(IntegrityError, match="not made with this vault's key"):
            vault.pull()
        assert str(vault.head()) == mine
        assert vault.read("/memories/from-mirror.txt") == "written on the mirror\n"
        assert vault.verify().ok
    git(remote, "update-ref", "refs/heads/main", mine)  # the server put right
    first.pull()
    assert first.read("/memories/from-mirror.txt") == "written on the mirror\n"


# -- what a clone takes, and where it finds its server ------------------------------------------


def test_a_clone_takes_the_vaults_branches_only(shared: tuple[Path, str, Vault], tmp_path: Path) -> None:
    """The server also holds a branch and a tag of its own, and its HEAD names
    that branch: the clone holds the vault's branches and nothing else."""
    remote, key, _ = shared
    other = unsealed_commit(remote, None, "NOT PART OF THE VAULT\n")
    git(remote, "update-ref", "refs/heads/notes", other)
    git(remote, "tag", "v1", other)
    git(remote, "symbolic-ref", "HEAD", "refs/heads/notes")
    target = tmp_path / "clone.vault"
    with Vault.clone(str(remote), target, key=key) as vault:
        assert vault.read("/memories/a.txt") == "one\n"
        assert vault.pull().moved == {}
    assert refs(target) == VAULT_REFS | {"refs/remotes/origin/main", "refs/remotes/origin/vaultmem-keyring"}
    assert git(target, "symbolic-ref", "HEAD").strip() == "refs/heads/main"


def test_a_clone_from_a_relative_path_finds_its_server_from_any_folder(
    shared: tuple[Path, str, Vault], tmp_path: Path
) -> None:
    remote, key, first = shared
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
    env["VAULTMEM_KEY"] = key
    done = subprocess.run(
        [sys.executable, "-m", "vaultmem", "clone", "./server.git", "agent.vault"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    with Vault.open(tmp_path / "agent.vault", key=key) as agent:
        assert [(r.name, r.url) for r in agent.remotes] == [("origin", str(remote))]  # stored absolute
    write(first, "later.txt", "pushed later\n")
    first.push()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    pulled = subprocess.run(
        [sys.executable, "-m", "vaultmem", "--vault", str(tmp_path / "agent.vault"), "pull"],
        capture_output=True,
        text=True,
        env=env,
        cwd=elsewhere,
        timeout=120,
    )
    assert pulled.returncode == 0, pulled.stderr
    assert "Pulled main" in pulled.stdout


def test_a_clone_of_a_shallow_server_says_its_history_is_incomplete(
    shared: tuple[Path, str, Vault], tmp_path: Path
) -> None:
    remote, key, first = shared
    write(first, "b.txt", "two\n")
    first.push()
    shallow = tmp_path / "shallow.git"
    subprocess.run(
        ["git", "clone", "-q", "--bare", "--depth", "1", "--no-single-branch", remote.as_uri(), str(shallow)],
        check=True,
    )
    with pytest.raises(IntegrityError, match=r"history .* is incomplete.*shallow.*Nothing was made"):
        Vault.clone(str(shallow), tmp_path / "hosts" / "c.vault", key=key)
    assert not (tmp_path / "hosts").exists()


# -- what a server refuses ----------------------------------------------------------------------


def test_a_push_a_servers_hook_declines_says_so_and_not_pull_first(
    shared: tuple[Path, str, Vault], tmp_path: Path
) -> None:
    remote, key, _ = shared
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'this vault is frozen for the audit' >&2\nexit 1\n")
    hook.chmod(0o755)
    with (
        git_daemon(remote.parent) as base,
        Vault.clone(f"{base}/{remote.name}", tmp_path / "agent.vault", key=key) as agent,
    ):
        write(agent, "new.txt", "new\n")
        with pytest.raises(VaultError) as refused:
            agent.push()
        assert not isinstance(refused.value, ConflictError)  # a pull would not change it
        said = str(refused.value)
        assert "hook on the server declined" in said and "this vault is frozen for the audit" in said
        assert "pull first" not in said
        assert agent.pull().moved == {}


def test_a_keyring_an_erasure_replaced_refused_by_the_server_says_what_to_change(
    shared: tuple[Path, str, Vault], tmp_path: Path
) -> None:
    """The server refuses forced updates (receive.denyNonFastForwards, as the
    set-up in docs/sync.md has it): after an erasure the push of the new
    keyring is refused, and pulling would not change that."""
    remote, _, first = shared
    git(remote, "config", "receive.denyNonFastForwards", "true")
    write(first, "ada.md", "Ada's address\n")
    with git_daemon(remote.parent) as base:
        first.remove_remote("origin")
        first.add_remote("origin", f"{base}/{remote.name}")
        first.push()
        first.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")
        with pytest.raises(VaultError) as refused:
            first.push()
        assert not isinstance(refused.value, ConflictError)
        assert "must be replaced after an erasure" in str(refused.value)
        assert "let this remote accept a forced update of refs/heads/vaultmem-keyring" in str(refused.value)


def test_a_push_to_a_server_holding_another_vault_says_so(shared: tuple[Path, str, Vault], tmp_path: Path) -> None:
    remote, _, _ = shared
    stranger = Vault.init(tmp_path / "stranger.vault", key=generate_key())
    write(stranger, "s.txt", "s\n")
    stranger.add_remote("origin", str(remote))
    with pytest.raises(ConflictError, match="another vault") as refused:
        stranger.push()
    assert "pull first" not in str(refused.value)
    with pytest.raises(ConflictError, match="another vault"):
        stranger.pull()


# -- remote names --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["x.lock", "a..b", ".hidden"])
def test_a_remote_name_git_refuses_is_one_clear_error(
    shared: tuple[Path, str, Vault], tmp_path: Path, name: str
) -> None:
    remote, _, first = shared
    with pytest.raises(VaultError, match="not a remote name git accepts") as refused:
        first.add_remote(name, str(remote))
    assert type(refused.value) is VaultError
    assert [r.name for r in first.remotes] == ["origin"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
    done = subprocess.run(
        [sys.executable, "-m", "vaultmem", "--vault", str(first.path), "remote", "add", "--", name, str(remote)],
        capture_output=True,
        text=True,
        env={**env, "VAULTMEM_KEY": shared[1]},
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode != 0
    assert "not a remote name git accepts" in done.stderr and "unexpected" not in done.stderr


# -- automatic sync -----------------------------------------------------------------------------


def test_a_session_pushes_what_an_earlier_session_could_not(shared: tuple[Path, str, Vault], tmp_path: Path) -> None:
    """The server was away while an agent wrote; the next session (which
    only reads) sends those versions once the server is back."""
    remote, key, first = shared
    agent = Vault.clone(str(remote), tmp_path / "agent.vault", key=key)
    away = tmp_path / "server-away.git"
    remote.rename(away)
    tool = VaultMemoryTool(agent, actor="agent", session="s1", sync="origin")
    tool.call({"command": "create", "path": "/memories/offline.txt", "file_text": "written offline\n"})
    assert tool.autosync is not None and tool.autosync.flush(30)
    assert tool.autosync.failures >= 1
    tool.autosync.close()
    away.rename(remote)
    later = VaultMemoryTool(agent, actor="agent", session="s2", sync="origin")
    assert later.call({"command": "view", "path": "/memories/offline.txt"})
    assert later.autosync is not None and later.autosync.flush(30)
    assert later.autosync.failures == 0
    later.autosync.close()
    assert git(remote, "rev-parse", "main").strip() == str(agent.head())
    first.pull()
    assert first.read("/memories/offline.txt") == "written offline\n"


def test_a_clone_into_the_current_folder_is_refused_in_plain_words(
    shared: tuple[Path, str, Vault], tmp_path: Path
) -> None:
    """`mkdir agent.vault && cd agent.vault && vaultmem clone URL .`: the
    clone would replace the folder the command runs in."""
    remote, key, _ = shared
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
    env["VAULTMEM_KEY"] = key
    here = tmp_path / "agent.vault"
    here.mkdir()
    for target in (".", "../agent.vault"):
        done = subprocess.run(
            [sys.executable, "-m", "vaultmem", "clone", str(remote), target],
            capture_output=True,
            text=True,
            env=env,
            cwd=here,
            timeout=120,
        )
        assert done.returncode != 0
        assert "is the current folder" in done.stderr and "Nothing was made" in done.stderr, done.stderr
        assert here.is_dir() and not any(here.iterdir())
        assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.vault", "first.vault", "server.git"]


def test_remote_list_never_prints_a_password_stock_git_stored(shared: tuple[Path, str, Vault], tmp_path: Path) -> None:
    remote, key, first = shared
    git(first.path, "remote", "add", "mirror", "https://bob:HUNTER2-7731@git.example.com/acme/memory.git")
    git(first.path, "remote", "add", "hosted", "https://TOKEN-7731@git.example.com/acme/memory.git")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
    env["VAULTMEM_KEY"] = key
    for json_flag in ([], ["--json"]):
        done = subprocess.run(
            [sys.executable, "-m", "vaultmem", "--vault", str(first.path), "remote", "list", *json_flag],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "HUNTER2-7731" not in done.stdout and "TOKEN-7731" not in done.stdout
        assert "git.example.com/acme/memory.git" in done.stdout and str(remote) in done.stdout
