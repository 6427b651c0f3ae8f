"""Sharing a vault through git servers, as users meet it: a bare repository
on a shared disk made for a group (``git init --bare --shared=group``), which
several users push to, each with a private umask.

Real parts only: bare repositories on disk, real keys, stock git to compare
with.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_sync import write

from vaultmem import Vault, VaultMemoryTool, generate_key


@pytest.fixture
def private_umask() -> Iterator[None]:
    """A user who keeps their files to themselves (``umask 077``)."""
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def modes(server: Path) -> dict[str, int]:
    """The permission bits of every object, pack, ref and reflog file and folder on the server."""
    found = {}
    for top in ("objects", "refs", "logs"):
        for root, dirs, files in os.walk(server / top):
            for name in dirs + files:
                path = Path(root) / name
                found[str(path.relative_to(server))] = stat.S_IMODE(path.stat().st_mode)
    return found


def test_a_push_to_a_group_shared_server_leaves_files_the_group_can_read_and_write(
    tmp_path: Path, private_umask: None
) -> None:
    """docs/sync.md: a folder on a shared disk works as a server. Made for a
    group (``core.sharedRepository``), stock git's push leaves every object
    readable by the group and every ref and folder writable by it, whatever
    the pushing user's umask. vaultmem's push left its packs 0400 and the
    branch files 0600: the group's other members could no longer clone, pull
    or push."""
    server = tmp_path / "server.git"
    subprocess.run(["git", "init", "-q", "--bare", "--shared=group", "--initial-branch=main", str(server)], check=True)
    subprocess.run(["git", "-C", str(server), "config", "core.logAllRefUpdates", "true"], check=True)
    key = generate_key()
    vault = Vault.init(tmp_path / "laptop.vault", key=key)
    write(vault, "a.txt", "one\n")
    vault.add_remote("origin", str(server))
    vault.push()
    write(vault, "b.txt", "two\n")
    vault.push()
    found = modes(server)
    assert any(name.startswith("objects/pack/") for name in found) and "logs/refs/heads/main" in found
    for name, mode in found.items():
        if (server / name).is_dir():
            assert mode & 0o2770 == 0o2770, (name, oct(mode))
        elif name.startswith("objects/"):
            assert mode & 0o440 == 0o440, (name, oct(mode))
        else:
            assert mode & 0o660 == 0o660, (name, oct(mode))
    assert not (server / "refs" / "vaultmem-incoming").exists() or found["refs/vaultmem-incoming"] & 0o2770 == 0o2770
    other = Vault.clone(str(server), tmp_path / "agent.vault", key=key)
    assert other.head() == vault.head()


# -- a server whose keyring branch was deleted ---------------------------------------------


def cli(*args: str, key: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
    env.update(VAULTMEM_KEY=key, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    return subprocess.run(
        [sys.executable, "-m", "vaultmem", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=60
    )


def local_refs(gitdir: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(gitdir), "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_a_pull_from_a_server_that_lost_its_keyring_says_so_and_a_push_puts_it_back(tmp_path: Path) -> None:
    """One host rotates the vault's data key and pushes; then the keyring
    branch is deleted on the server (`git update-ref -d`). Another host's
    pull cannot check versions sealed under a key it has never seen. It
    blamed a commit "not made with this vault's key"; it now says the server
    has no keyring branch and how it comes back, and changes nothing. The
    next push from the host that holds the keyring restores it, and the pull
    then takes every version."""
    server = tmp_path / "server.git"
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(server)], check=True)
    key = generate_key()
    laptop = Vault.init(tmp_path / "laptop.vault", key=key)
    write(laptop, "a.txt", "one\n")
    laptop.add_remote("origin", str(server))
    laptop.push()
    agent = Vault.clone(str(server), tmp_path / "agent.vault", key=key)
    agent.close()
    laptop.rotate_key(actor="operator")
    write(laptop, "b.txt", "after the rotation\n")
    laptop.push()
    subprocess.run(["git", "-C", str(server), "update-ref", "-d", "refs/heads/vaultmem-keyring"], check=True)
    before = local_refs(tmp_path / "agent.vault")
    for command in ("pull", "sync"):
        done = cli("--vault", str(tmp_path / "agent.vault"), command, key=key, cwd=tmp_path)
        assert done.returncode != 0, done.stdout
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert "no vaultmem-keyring branch" in lines[0] and "push" in lines[0], lines[0]
        assert "not made with this vault's key" not in lines[0], lines[0]
        assert "Nothing was changed" in lines[0], lines[0]
        assert local_refs(tmp_path / "agent.vault") == before
    assert laptop.push().moved.keys() == {"vaultmem-keyring"}
    done = cli("--vault", str(tmp_path / "agent.vault"), "pull", key=key, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with Vault.open(tmp_path / "agent.vault", key=key) as agent:
        assert "after the rotation" in VaultMemoryTool(agent, actor="reader").call(
            {"command": "view", "path": "/memories/b.txt"}
        )
        assert agent.verify().ok
