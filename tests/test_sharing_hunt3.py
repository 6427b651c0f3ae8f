"""Sharing a vault through git servers, as users meet it: a server that is
not a vault (a hosted repository made with a README), a server whose branch
is a symbolic ref.

Real parts only: bare repositories on disk, ``git daemon`` on 127.0.0.1
started and stopped here, real keys, the CLI in a subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_sync import git_daemon, server, write

from vaultmem import Vault, VaultMemoryTool, generate_key


def cli(*args: str, key: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
    env.update(VAULTMEM_KEY=key, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    return subprocess.run(
        [sys.executable, "-m", "vaultmem", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=60
    )


def refs(gitdir: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(gitdir), "for-each-ref", "--format=%(objectname) %(refname)"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def read(vault: Vault, name: str) -> str:
    return VaultMemoryTool(vault, actor="reader").call({"command": "view", "path": f"/memories/{name}"})


def first_host(tmp_path: Path, key: str, url: str) -> Vault:
    """The first host's vault, one file in it, pushed to the server at ``url``."""
    first = Vault.init(tmp_path / "first.vault", key=key)
    write(first, "a.txt", "one\n")
    first.add_remote("origin", url)
    first.push()
    return first


# -- a server that is not a vault ----------------------------------------------------------


def readme_server(tmp_path: Path) -> Path:
    """What a hosting service makes when "Add a README" is ticked: a bare
    repository whose main holds one commit made by plain git."""
    work = tmp_path / "readme-work"
    subprocess.run(["git", "init", "-q", "--initial-branch=main", str(work)], check=True)
    (work / "README.md").write_text("# support-memory\n")
    subprocess.run(["git", "-C", str(work), "add", "README.md"], check=True)
    subprocess.run(
        ["git", "-C", str(work), "-c", "user.name=Host", "-c", "user.email=host@example.com", "commit", "-qm", "init"],
        check=True,
    )
    bare = tmp_path / "hosted.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    return bare


@pytest.mark.parametrize("written", [True, False], ids=["vault-with-versions", "empty-vault"])
def test_a_server_made_with_a_readme_is_named_not_a_vault_and_nothing_moves(tmp_path: Path, written: bool) -> None:
    """docs/sync.md asks for an empty repository (no README, no licence).
    One made with a README is not a vault: push said `pull first` (or, from a
    vault with no version yet, sent its keyring there), and the pull then
    blamed an altered server; both now say what the server is, and neither
    side changes."""
    hosted = readme_server(tmp_path)
    key = generate_key()
    vault = Vault.init(tmp_path / "laptop.vault", key=key)
    if written:
        write(vault, "a.txt", "one\n")
    vault.add_remote("origin", str(hosted))
    server_before, local_before = refs(hosted), refs(vault.path)
    for command in ("push", "pull", "sync"):
        done = cli("--vault", str(vault.path), command, key=key, cwd=tmp_path)
        assert done.returncode != 0, (command, done.stdout)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, (command, done.stderr)
        assert "is not a vault" in lines[0] and "empty repository" in lines[0], (command, lines[0])
        assert "pull first" not in lines[0] and "altered" not in lines[0], (command, lines[0])
        assert refs(hosted) == server_before, command
        local_now = "".join(line for line in refs(vault.path).splitlines(True) if "refs/remotes/" not in line)
        assert local_now == "".join(line for line in local_before.splitlines(True) if "refs/remotes/" not in line)
    if written:
        assert "one" in read(Vault.open(vault.path, key=key), "a.txt")


def test_a_vault_whose_history_was_cut_on_the_server_is_still_said_to_be_altered(tmp_path: Path) -> None:
    """The new finding is kept to servers that share nothing with the vault:
    a stock commit made on top of the vault's own history on the server is
    still refused as a commit made without the key."""
    key = generate_key()
    remote = server(tmp_path / "server.git")
    first = first_host(tmp_path, key, str(remote))
    tip = subprocess.run(
        ["git", "-C", str(remote), "rev-parse", "main^{tree}"], capture_output=True, text=True, check=True
    ).stdout.strip()
    parent = subprocess.run(
        ["git", "-C", str(remote), "rev-parse", "main"], capture_output=True, text=True, check=True
    ).stdout.strip()
    env = {**os.environ, "GIT_AUTHOR_NAME": "x", "GIT_AUTHOR_EMAIL": "x@x", "GIT_COMMITTER_NAME": "x"}
    env["GIT_COMMITTER_EMAIL"] = "x@x"
    stock = subprocess.run(
        ["git", "-C", str(remote), "commit-tree", tip, "-p", parent, "-m", "stock"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout.strip()
    subprocess.run(["git", "-C", str(remote), "update-ref", "refs/heads/main", stock], check=True)
    done = cli("--vault", str(first.path), "pull", key=key, cwd=tmp_path)
    assert done.returncode != 0
    assert "was not made with this vault's key" in done.stderr and "not a vault" not in done.stderr


# -- a server whose branch is a symbolic ref -----------------------------------------------


@pytest.mark.parametrize("form", ["path", "file-url"])
def test_a_push_to_a_server_whose_main_is_an_alias_moves_the_branch_it_names(tmp_path: Path, form: str) -> None:
    """A server that renamed its branch and kept the old name as an alias
    (`git symbolic-ref refs/heads/main refs/heads/trunk`): git's
    receive-pack moves trunk, and a pull reads through the alias; a push to
    a path said the server held a damaged main."""
    key = generate_key()
    remote = server(tmp_path / "server.git")
    first = first_host(tmp_path, key, str(remote) if form == "path" else remote.as_uri())
    subprocess.run(["git", "-C", str(remote), "branch", "-m", "main", "trunk"], check=True)
    subprocess.run(["git", "-C", str(remote), "symbolic-ref", "refs/heads/main", "refs/heads/trunk"], check=True)
    second = Vault.clone(str(remote), tmp_path / "second.vault", key=key)
    write(first, "b.txt", "two\n")
    moved = first.push().moved
    assert list(moved) == ["main"]
    trunk = subprocess.run(
        ["git", "-C", str(remote), "rev-parse", "refs/heads/trunk"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert trunk == moved["main"][1]
    assert (remote / "refs" / "heads" / "main").read_text() == "ref: refs/heads/trunk\n"
    assert second.pull().moved["main"] == moved["main"]
    assert "two" in read(second, "b.txt")
    subprocess.run(["git", "-C", str(remote), "fsck", "--strict"], check=True, capture_output=True)


def test_a_server_main_aliased_to_the_keyring_is_refused_and_nothing_moves(tmp_path: Path) -> None:
    """Following an alias never moves another of the vault's branches."""
    key = generate_key()
    remote = server(tmp_path / "server.git")
    first = first_host(tmp_path, key, str(remote))
    write(first, "b.txt", "two\n")
    # the server's main made an alias of its keyring, the versions only this host had so far
    first_main = (remote / "refs" / "heads" / "main").read_text()
    ring = (remote / "refs" / "heads" / "vaultmem-keyring").read_text()
    (remote / "refs" / "heads" / "main").write_text("ref: refs/heads/vaultmem-keyring\n")
    subprocess.run(["git", "-C", str(remote), "config", "--unset", "receive.denyNonFastForwards"], check=True)
    first.remove_remote("origin")  # the witness would stop it first: a host that checked the server
    first.add_remote("origin", str(remote))
    done = cli("--vault", str(first.path), "push", key=key, cwd=tmp_path)
    assert done.returncode != 0
    assert len(done.stderr.strip().splitlines()) == 1 and "Nothing was pushed." in done.stderr
    assert (remote / "refs" / "heads" / "vaultmem-keyring").read_text() == ring
    assert (remote / "refs" / "heads" / "main").read_text() == "ref: refs/heads/vaultmem-keyring\n" != first_main


# -- a path that names a file --------------------------------------------------------------


def test_a_remote_path_that_names_a_file_says_there_is_no_repository_there(tmp_path: Path) -> None:
    """A git bundle (or any file) given as the server's path: libgit2 said
    `unsupported URL protocol`; now the error names the path, as for a
    missing folder, and nothing is made or changed."""
    key = generate_key()
    remote = server(tmp_path / "server.git")
    first = first_host(tmp_path, key, str(remote))
    bundle = tmp_path / "vault.bundle"
    subprocess.run(
        ["git", "-C", str(remote), "bundle", "create", str(bundle), "--all"], check=True, capture_output=True
    )
    done = cli("clone", "vault.bundle", "copy.vault", key=key, cwd=tmp_path)
    assert done.returncode != 0
    assert done.stderr.strip() == (
        f"vaultmem: cannot clone vault.bundle: no repository at {bundle}, only a file. Nothing was made."
    )
    assert not (tmp_path / "copy.vault").exists()
    first.add_remote("bundle", str(bundle))
    before = refs(first.path)
    for command in ("pull", "push"):
        done = cli("--vault", str(first.path), command, "bundle", key=key, cwd=tmp_path)
        assert done.returncode != 0
        assert done.stderr.strip() == (
            f"vaultmem: cannot reach the remote 'bundle': no repository at {bundle}, only a file. Nothing was changed."
        )
    assert refs(first.path) == before


# -- a clone of an empty server ------------------------------------------------------------


def test_a_clone_of_an_empty_server_says_to_push_a_vault_to_it_first(tmp_path: Path) -> None:
    """The second host cloned before the first pushed: the error said the
    server `is not a vault`, as for another project's repository; it now
    says the server holds no vault yet and how one gets there."""
    key = generate_key()
    server(tmp_path / "empty.git")
    with git_daemon(tmp_path) as base:
        for url in ("empty.git", f"{base}/empty.git"):
            done = cli("clone", url, "agent.vault", key=key, cwd=tmp_path)
            assert done.returncode != 0
            assert done.stderr.strip() == (
                f"vaultmem: {url} holds no vault yet (no main, no vaultmem keyring branch): push one to it first "
                "(`vaultmem remote add origin URL`, then `vaultmem push`, on the host that holds it). "
                "Nothing was made."
            )
            assert not (tmp_path / "agent.vault").exists()
        first_host(tmp_path, key, f"{base}/empty.git").close()
        done = cli("clone", f"{base}/empty.git", "agent.vault", key=key, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    assert "one" in read(Vault.open(tmp_path / "agent.vault", key=key), "a.txt")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


# -- a sync whose push fails after its pull moved the vault --------------------------------


def test_a_sync_whose_push_fails_after_its_pull_merged_says_the_pull_stands(tmp_path: Path) -> None:
    """`vaultmem sync` pulled (merging the other host's version in), then
    the server refused the push: the one error line said nothing of the
    pull, and a transport error even said "Nothing was changed", though the
    vault now holds a merge.  It now names what the pull moved."""
    key = generate_key()
    root = tmp_path / "served"
    root.mkdir()
    remote = server(root / "v.git")
    first = first_host(tmp_path, key, str(remote))
    second = Vault.clone(str(remote), tmp_path / "second.vault", key=key)
    write(first, "b.txt", "two\n")
    first.push()
    write(second, "c.txt", "three\n")
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'pushes are closed today' >&2\nexit 1\n")
    hook.chmod(0o755)
    with git_daemon(root) as base:
        second.remove_remote("origin")
        second.add_remote("origin", f"{base}/v.git")
        before = refs(second.path)
        done = cli("--vault", str(second.path), "sync", key=key, cwd=tmp_path)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    main = next(line.split()[0] for line in refs(second.path).splitlines() if line.endswith(" refs/heads/main"))
    old = next(line.split()[0] for line in before.splitlines() if line.endswith(" refs/heads/main"))
    assert "pushes are closed today" in lines[0]
    assert lines[0].endswith(f"Nothing was pushed; the pull before it stands: main {old[:10]}..{main[:10]} (merged).")
    assert "Nothing was changed" not in lines[0]
    reopened = Vault.open(second.path, key=key)
    assert "two" in read(reopened, "b.txt") and "three" in read(reopened, "c.txt")
    # a sync whose pull moved nothing keeps the push's own words
    with git_daemon(root) as base:
        reopened.remove_remote("origin")
        reopened.add_remote("origin", f"{base}/v.git")
        done = cli("--vault", str(second.path), "sync", key=key, cwd=tmp_path)
    assert done.returncode != 0 and "pushes are closed today" in done.stderr
    assert "the pull before it stands" not in done.stderr
