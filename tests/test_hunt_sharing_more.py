"""Sharing a vault through git servers, as users meet it: stock git beside
vaultmem, and what a push may carry to the server.

Real servers on 127.0.0.1 or on a path, started here and stopped after; real
git, real keys.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import git
from test_sync import git_daemon, pushed

from vaultmem import IntegrityError, Vault

PLAIN = "PLAINTEXT-MARKER-5c1e"


def cli(*args: str, key: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}, "VAULTMEM_KEY": key}
    return subprocess.run(
        [sys.executable, "-m", "vaultmem", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )


def server_holds(server: Path, marker: str) -> bool:
    """Whether any object on the server, decompressed, holds ``marker``."""
    ids = git(server, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").split()
    if not ids:
        return False
    done = subprocess.run(
        ["git", "-C", str(server), "cat-file", "--batch"],
        input=("\n".join(ids) + "\n").encode(),
        capture_output=True,
        check=True,
    )
    return marker.encode() in done.stdout


def plain_commit_into(vault: Vault, tmp_path: Path) -> str:
    """A commit made by stock git without the key, holding plaintext, pushed
    by stock git into the vault's main (a fast-forward): its id."""
    work = tmp_path / "work"
    subprocess.run(["git", "clone", "-q", str(vault.path), str(work)], check=True)
    (work / "memories").mkdir(exist_ok=True)
    (work / "memories" / "leak.md").write_text(f"{PLAIN}\n")
    git(work, "add", "memories/leak.md")
    git(work, "-c", "user.name=someone", "-c", "user.email=someone@example.com", "commit", "-q", "-m", "notes")
    git(work, "push", "-q", "origin", "main")
    return git(vault.path, "rev-parse", "refs/heads/main").strip()


@pytest.mark.parametrize("transport", ["path", "git"])
def test_a_push_never_sends_a_plain_git_commit_to_the_server(tmp_path: Path, transport: str) -> None:
    server, key, first = pushed(tmp_path)
    before = git(server, "rev-parse", "refs/heads/main").strip()
    bad = plain_commit_into(first, tmp_path)
    if transport == "git":
        with git_daemon(tmp_path) as base:
            git(first.path, "remote", "set-url", "origin", f"{base}/server.git")
            with pytest.raises(IntegrityError, match=bad[:10]):
                first.push()
            done = cli("--vault", str(first.path), "sync", key=key, cwd=tmp_path)
    else:
        with pytest.raises(IntegrityError, match=bad[:10]):
            first.push()
        done = cli("--vault", str(first.path), "push", "--json", key=key, cwd=tmp_path)
    assert done.returncode != 0
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert bad[:10] in done.stderr and "Nothing was pushed" in done.stderr
    assert git(server, "rev-parse", "refs/heads/main").strip() == before
    assert not server_holds(server, PLAIN)


def test_a_vault_moved_to_a_new_server_with_stock_git_is_told_how_to_start_again(tmp_path: Path) -> None:
    _, key, first = pushed(tmp_path)
    moved = tmp_path / "new-server.git"
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(moved)], check=True)
    git(first.path, "remote", "set-url", "origin", str(moved))
    done = cli("--vault", str(first.path), "push", key=key, cwd=tmp_path)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert "no longer has a main branch" in line
    # the error names the way on once the server is checked, and that way works
    assert "vaultmem remote remove origin" in line and "vaultmem remote add origin URL" in line
    assert cli("--vault", str(first.path), "remote", "remove", "origin", key=key, cwd=tmp_path).returncode == 0
    assert cli("--vault", str(first.path), "remote", "add", "origin", str(moved), key=key, cwd=tmp_path).returncode == 0
    again = cli("--vault", str(first.path), "push", key=key, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert git(moved, "rev-parse", "main").strip() == str(first.head())
