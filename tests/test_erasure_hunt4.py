"""Erasure beside what operators do with stock git: a keyring copied in from
another clone under a name of their own, and what must stay whole after it.

Real vaults, real keys, stock git, a bare server on this machine; the key
scan is the one of test_erasure."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import git
from tests.test_erasure import MARKER, assert_no_key_left, write
from vaultmem import Vault
from vaultmem.errors import ConflictError


def fsck(vault_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(vault_path), "fsck", "--strict", "--full"], capture_output=True, text=True, check=False
    )


def erased_blobs(vault: Vault, path: str) -> list[bytes]:
    listed = vault.forget(path, reason="look", dry_run=True).versions
    return [vault.read_blob(bytes.fromhex(v.blob)) for v in listed]


def _another_clone_erased_other(vault: Vault, key: str, tmp_path: Path) -> None:
    """Two files in ``vault``, pushed to a server; a clone of it (b.vault)
    erases the other file and does not push, so its keyring lacks the
    erasure this vault makes next, and still holds the key of ada.md."""
    write(vault, command="create", path="/memories/ada.md", file_text=f"email: {MARKER}\n")
    write(vault, command="create", path="/memories/other.md", file_text="unrelated\n")
    server = tmp_path / "srv.git"
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(server)], check=True)
    vault.add_remote("origin", str(server))
    vault.push()
    other = Vault.clone(str(server), tmp_path / "b.vault", key=key)
    other.forget("/memories/other.md", reason="another request", actor="ops")


def test_a_keyring_fetched_from_another_clone_under_any_name_goes_with_the_erasure(
    vault: Vault, vault_path: Path, key: str, tmp_path: Path
) -> None:
    """Another clone erased something else and has not pushed; an operator
    copied its keyring into this vault with stock git under a branch name of
    their own.  That keyring still holds the key of what this vault then
    erases: the erasure left it (and `verify` said nothing), so the key that
    opens the erased version stayed in the vault folder."""
    _another_clone_erased_other(vault, key, tmp_path)
    git(vault_path, "fetch", "--quiet", str(tmp_path / "b.vault"), "vaultmem-keyring:refs/heads/b-keyring")
    git(vault_path, "tag", "-a", "-m", "their keyring", "b-keyring-tag", "b-keyring")
    blobs = erased_blobs(vault, "/memories/ada.md")

    vault.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")

    refs = git(vault_path, "for-each-ref", "--format=%(refname)").split()
    assert "refs/heads/b-keyring" not in refs and "refs/tags/b-keyring-tag" not in refs
    assert "refs/heads/main" in refs and "refs/remotes/origin/main" in refs
    checked = fsck(vault_path)
    assert checked.returncode == 0, checked.stderr
    assert_no_key_left(vault_path, key, blobs)
    reopened = Vault.open(vault_path, key=key)
    assert reopened.verify().ok
    assert reopened.read("/memories/other.md") == "unrelated\n"


def test_a_keyring_fetched_in_after_the_erasure_that_still_holds_its_keys_is_reported_then_removed(
    vault: Vault, vault_path: Path, key: str, tmp_path: Path
) -> None:
    """The same copy, fetched in after the erasure: `verify` said "no
    problems found" and the same erasure run again said "Nothing to erase",
    both leaving the key that opens the erased version in the vault folder."""
    _another_clone_erased_other(vault, key, tmp_path)
    blobs = erased_blobs(vault, "/memories/ada.md")
    vault.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")

    git(vault_path, "fetch", "--quiet", str(tmp_path / "b.vault"), "vaultmem-keyring:refs/heads/b-keyring")
    report = Vault.open(vault_path, key=key).verify()
    assert [f.kind for f in report.findings] == ["erasure"], report.problems
    assert "refs/heads/b-keyring" in report.problems[0]

    again = Vault.open(vault_path, key=key).forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")
    assert again.commit is None
    assert "refs/heads/b-keyring" not in git(vault_path, "for-each-ref", "--format=%(refname)")
    checked = fsck(vault_path)
    assert checked.returncode == 0, checked.stderr
    assert_no_key_left(vault_path, key, blobs)
    assert Vault.open(vault_path, key=key).verify().ok


def test_the_next_write_removes_such_a_copy(vault: Vault, vault_path: Path, key: str, tmp_path: Path) -> None:
    """Any later write finishes it too, as it does for a replaced keyring a fetch brought back."""
    write(vault, command="create", path="/memories/ada.md", file_text=f"email: {MARKER}\n")
    write(vault, command="create", path="/memories/other.md", file_text="unrelated\n")
    before = tmp_path / "before.vault"
    subprocess.run(["git", "clone", "-q", "--bare", str(vault_path), str(before)], check=True)
    Vault.open(before, key=key).forget("/memories/other.md", reason="another request", actor="ops")
    blobs = erased_blobs(vault, "/memories/ada.md")
    vault.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")
    git(vault_path, "fetch", "--quiet", str(before), "vaultmem-keyring:refs/tags/kept")

    write(Vault.open(vault_path, key=key), command="create", path="/memories/next.md", file_text="next\n")
    assert "refs/tags/kept" not in git(vault_path, "for-each-ref", "--format=%(refname)")
    assert_no_key_left(vault_path, key, blobs)
    assert Vault.open(vault_path, key=key).verify().ok


@pytest.mark.parametrize("how", [["vaultmem-keyring"], ["--detach", "vaultmem-keyring"], ["keyring-backup"]])
def test_a_git_worktree_with_the_keyring_checked_out_is_refused_before_anything_changes(
    vault: Vault, vault_path: Path, key: str, tmp_path: Path, how: list[str]
) -> None:
    """An operator checked the keyring out with `git worktree add`: the
    erasure went on, and then `git gc` stopped with "fatal: bad tree object"
    (the worktree's index names the keyring it removed) while the worktree's
    files kept the old keys.  Now it refuses, naming the worktree, and
    changes nothing; once the worktree is removed it goes through."""
    write(vault, command="create", path="/memories/ada.md", file_text=f"email: {MARKER}\n")
    git(vault_path, "branch", "keyring-backup", "vaultmem-keyring")
    worktree = tmp_path / "keyring-checkout"
    git(vault_path, "worktree", "add", "--quiet", str(worktree), *how)
    main_before = git(vault_path, "rev-parse", "main")

    with pytest.raises(ConflictError, match=r"git worktree .*keyring-checkout.*git worktree remove"):
        vault.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")
    assert git(vault_path, "rev-parse", "main") == main_before
    assert vault.read("/memories/ada.md") == f"email: {MARKER}\n"

    git(vault_path, "worktree", "remove", "--force", str(worktree))
    blobs = erased_blobs(vault, "/memories/ada.md")
    vault.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")
    checked = fsck(vault_path)
    assert checked.returncode == 0, checked.stderr
    assert subprocess.run(["git", "-C", str(vault_path), "gc", "--quiet"], check=False).returncode == 0
    assert_no_key_left(vault_path, key, blobs)
    assert Vault.open(vault_path, key=key).verify().ok


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_keyring_fetched_into_fetch_head_alone_goes_too(
    vault: Vault, vault_path: Path, key: str, tmp_path: Path, when: str
) -> None:
    """`git fetch ../b.vault vaultmem-keyring` names what it brought in
    FETCH_HEAD only: no ref, so neither the erasure nor `verify` saw that
    copy of the keys."""
    write(vault, command="create", path="/memories/ada.md", file_text=f"email: {MARKER}\n")
    write(vault, command="create", path="/memories/other.md", file_text="unrelated\n")
    before = tmp_path / "before.vault"
    subprocess.run(["git", "clone", "-q", "--bare", str(vault_path), str(before)], check=True)
    Vault.open(before, key=key).forget("/memories/other.md", reason="another request", actor="ops")
    blobs = erased_blobs(vault, "/memories/ada.md")
    if when == "before":
        git(vault_path, "fetch", "--quiet", str(before), "vaultmem-keyring")
    vault.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")
    if when == "after":
        git(vault_path, "fetch", "--quiet", str(before), "vaultmem-keyring")
        report = Vault.open(vault_path, key=key).verify()
        assert [f.kind for f in report.findings] == ["erasure"], report.problems
        assert "FETCH_HEAD" in report.problems[0]
        Vault.open(vault_path, key=key).forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")

    checked = fsck(vault_path)
    assert checked.returncode == 0, checked.stderr
    assert_no_key_left(vault_path, key, blobs)
    assert Vault.open(vault_path, key=key).verify().ok
