"""Erasure travels: a clone that syncs destroys the same keys.

Two clones of one vault share a server (a bare repository by path, and the
same over smart HTTP).  One erases; after a sync on each side, neither clone
nor (for a server on this machine) the server holds a key that opens an
erased version, every clone reports the versions as erased, and both keep
working together."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from githttp import git_http
from test_erasure import assert_no_key_left

from vaultmem import Vault, VaultMemoryTool, generate_key
from vaultmem.errors import ErasedError

MARKER = "ada.lovelace@example.com"


def write(vault: Vault, **call: object) -> str:
    return VaultMemoryTool(vault, actor="agent").call(call)


def bare(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(path)], check=True)
    return path


def two_clones(tmp_path: Path, url: str, key: str) -> tuple[Vault, Vault]:
    first = Vault.init(tmp_path / "a.vault", key=key)
    write(first, command="create", path="/memories/ada.md", file_text=f"{MARKER}\n")
    write(first, command="str_replace", path="/memories/ada.md", old_str=MARKER, new_str=f"{MARKER} (pro)")
    write(first, command="create", path="/memories/other.md", file_text="other\n")
    first.add_remote("origin", url)
    first.push()
    second = Vault.clone(url, tmp_path / "b.vault", key=key)
    return first, second


def install_update_hook(server: Path) -> None:
    """docs/sync.md's update hook: no forced update, no deletion, but of the keyring."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "sync.md").read_text(encoding="utf-8")
    start = text.index("```sh\n#!/bin/sh\n# hooks/update") + len("```sh\n")
    hook = server / "hooks" / "update"
    hook.write_text(text[start : text.index("```", start)])
    hook.chmod(0o755)


@pytest.mark.parametrize("transport", ["path", "http", "http-hook"])
def test_an_erasure_reaches_every_clone_that_syncs(
    tmp_path: Path, transport: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = generate_key()
    server = bare(tmp_path / "srv" / "vault.git")
    if transport == "path":
        run(tmp_path, key, str(server), server)
    else:
        monkeypatch.setenv("VAULTMEM_GIT_USERNAME", "agent")
        monkeypatch.setenv("VAULTMEM_GIT_PASSWORD", "s3cret")
        if transport == "http-hook":
            install_update_hook(server)
        with git_http(tmp_path / "srv", "agent", "s3cret") as (base, _log):
            run(tmp_path, key, f"{base}/vault.git", None)
            if transport == "http-hook":  # and plain git still cannot force main
                url = base.replace("http://", "http://agent:s3cret@") + "/vault.git"
                forced = subprocess.run(
                    ["git", "-C", str(tmp_path / "a.vault"), "push", "--force", url, "main~1:refs/heads/main"],
                    capture_output=True,
                    text=True,
                )
                assert forced.returncode != 0 and "refusing a forced update" in forced.stderr


def run(tmp_path: Path, key: str, url: str, server: Path | None) -> None:
    first, second = two_clones(tmp_path, url, key)
    found = first.forget("/memories/ada.md", reason="GDPR request 4411", dry_run=True).versions
    blobs = [first.read_blob(bytes.fromhex(v.blob)) for v in found]
    # the other clone writes meanwhile: its work is kept
    write(second, command="create", path="/memories/b-side.md", file_text="written on b\n")
    first.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")
    assert_no_key_left(first.path, key, blobs)
    first.sync(actor="a")  # pull (nothing new), push: the server's keyring is replaced
    assert_no_key_left(first.path, key, blobs)
    if server is not None:
        assert_no_key_left(server, key, blobs)  # a server on this machine is cleaned as well
    second.sync(actor="b")  # merges main, takes the erasure
    for vault in (first, second):
        vault.sync(actor="x")
    assert_no_key_left(second.path, key, blobs)
    assert_no_key_left(first.path, key, blobs)
    for vault in (first, second):
        for version in found:
            with pytest.raises(ErasedError, match="GDPR request 4411"):
                vault.read(version.path, at=version.version)
        assert vault.read("/memories/b-side.md") == "written on b\n"
        assert vault.read("/memories/other.md") == "other\n"
        report = Vault.open(vault.path, key=key).verify()
        assert report.ok, report.problems
        assert report.erased == 2
        subprocess.run(["git", "-C", str(vault.path), "fsck", "--strict"], check=True, capture_output=True)
    # they go on sharing: one more write each way, then the same main everywhere
    write(second, command="create", path="/memories/later.md", file_text="later\n")
    second.sync(actor="b")
    first.sync(actor="a")
    assert first.read("/memories/later.md") == "later\n"
    assert first.head() == second.head()
    assert first.keyring.same_keys(second.keyring)


def cli(vault: Path, key: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The command line, in a process of its own (nothing of an earlier run in memory)."""
    env = {**os.environ, "VAULTMEM_KEY": key}
    return subprocess.run(
        [sys.executable, "-m", "vaultmem", "--vault", str(vault), *args], capture_output=True, text=True, env=env
    )


@pytest.mark.parametrize("erasure", ["forget", "migrate"])
def test_a_push_in_a_later_process_removes_the_old_keyring_its_fetch_brought_back(tmp_path: Path, erasure: str) -> None:
    """`vaultmem forget` (or `migrate`), then `vaultmem push` as a run of its
    own: the push fetches the server's keyring from before the erasure before
    it replaces it, and removes that copy from this disk again; verify, the
    erasure run again and another push then find nothing left."""
    key = generate_key()
    server = bare(tmp_path / "server.git")
    path = tmp_path / "a.vault"
    first = Vault.init(path, key=key, storage_format=1 if erasure == "migrate" else 2)
    write(first, command="create", path="/memories/ada.md", file_text=f"{MARKER}\n")
    write(first, command="create", path="/memories/other.md", file_text="other\n")
    first.add_remote("origin", str(server))
    first.push()
    blobs = [first.read_blob(bytes.fromhex(v.blob)) for v in first.find(MARKER)]
    assert blobs
    first.close()
    done = cli(
        path,
        key,
        *(["forget", "/memories/ada.md", "--reason", "GDPR request 4411"] if erasure == "forget" else ["migrate"]),
    )
    assert done.returncode == 0, done.stderr
    assert_no_key_left(path, key, blobs)
    pushed = cli(path, key, "push")
    assert pushed.returncode == 0, pushed.stderr
    assert_no_key_left(path, key, blobs)
    assert_no_key_left(server, key, blobs)
    report = Vault.open(path, key=key).verify()
    assert report.ok, report.problems
    if erasure == "migrate":
        again = cli(path, key, "forget", "/memories/ada.md", "--reason", "GDPR request 4411")
        assert again.returncode == 0, again.stderr
        assert cli(path, key, "push").returncode == 0
    assert_no_key_left(path, key, blobs)
    subprocess.run(["git", "-C", str(path), "fsck", "--strict"], check=True, capture_output=True)


@pytest.mark.parametrize(("finish", "unpack_limit"), [("forget", "1000"), ("write", "1")])
def test_a_copy_of_an_old_keyring_fetched_back_is_reported_and_removed(
    tmp_path: Path, finish: str, unpack_limit: str
) -> None:
    """A keyring an erasure replaced, brought back onto the disk by a fetch
    from a copy made before the erasure (a backup, a clone that never
    synced), as loose objects or in a pack: verify reports it, and the same
    erasure run again, or the next write, removes it."""
    key = generate_key()
    path = tmp_path / "a.vault"
    first = Vault.init(path, key=key)
    write(first, command="create", path="/memories/ada.md", file_text=f"{MARKER}\n")
    blobs = [first.read_blob(bytes.fromhex(v.blob)) for v in first.find(MARKER)]
    first.close()
    backup = tmp_path / "backup.vault"
    subprocess.run(["cp", "-a", str(path), str(backup)], check=True)
    assert cli(path, key, "forget", "/memories/ada.md", "--reason", "GDPR request 4411").returncode == 0
    assert_no_key_left(path, key, blobs)
    git = ["git", "-C", str(path)]
    fetch = ["-c", f"fetch.unpackLimit={unpack_limit}", "fetch", "-q", str(backup)]
    subprocess.run([*git, *fetch, "refs/heads/vaultmem-keyring:refs/old-keyring"], check=True)
    subprocess.run([*git, "update-ref", "-d", "refs/old-keyring"], check=True)  # named by no ref any more
    report = Vault.open(path, key=key).verify()
    assert [f.kind for f in report.findings] == ["erasure"], report.problems
    assert "still on the disk" in report.findings[0].detail
    if finish == "forget":
        again = cli(path, key, "forget", "/memories/ada.md", "--reason", "GDPR request 4411")
    else:
        again = cli(path, key, "call", '{"command": "create", "path": "/memories/b.md", "file_text": "b"}')
    assert again.returncode == 0, again.stderr
    assert_no_key_left(path, key, blobs)
    assert Vault.open(path, key=key).verify().ok
    subprocess.run([*git, "fsck", "--strict"], check=True, capture_output=True)
