"""Erasure beside stock git and its accidents: refs and reflogs naming the
old keyring, copies brought back from a bundle, what a killed `git gc` left,
a `git gc` running beside it, a full disk while it rewrites git's pack, and a
clone that restored an erased version before the erasure reached it.

Real vaults, real keys, stock git, real servers on this machine; the key
scan is the one of test_erasure."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import git
from tests.test_disk_full import fill, small_disk  # noqa: F401 (a fixture)
from tests.test_erasure import MARKER, assert_no_key_left, write
from vaultmem import Vault, VaultMemoryTool, generate_key
from vaultmem.errors import BusyError, VaultError


def fsck(vault_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(vault_path), "fsck", "--strict", "--full"], capture_output=True, text=True, check=False
    )


def gc(vault_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(vault_path), "gc", "--quiet"], capture_output=True, text=True, check=False, timeout=60
    )


def erased_blobs(vault: Vault, path: str) -> list[bytes]:
    listed = vault.forget(path, reason="look", dry_run=True).versions
    return [vault.read_blob(bytes.fromhex(v.blob)) for v in listed]


def test_a_branch_or_tag_made_by_hand_on_the_keyring_goes_with_it_and_git_stays_whole(
    vault: Vault, vault_path: Path, key: str
) -> None:
    """An operator keeps the keyring under a name of their own (a branch, a
    light tag, an annotated tag) with stock git, reflogs on: the erasure
    removed the objects those refs named and left the refs, so `git fsck`
    failed and `git gc` stopped with "fatal: bad object"."""
    write(vault, command="create", path="/memories/ada.md", file_text=f"email: {MARKER}\n")
    write(vault, command="create", path="/memories/other.md", file_text="unrelated\n")
    git(vault_path, "config", "core.logAllRefUpdates", "always")
    git(vault_path, "branch", "keyring-backup", "vaultmem-keyring")
    git(vault_path, "tag", "keyring-light", "vaultmem-keyring")
    git(vault_path, "tag", "-a", "-m", "before the request", "keyring-annotated", "vaultmem-keyring")
    git(vault_path, "tag", "main-before", "main")  # names no keyring: stays
    blobs = erased_blobs(vault, "/memories/ada.md")

    vault.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")

    refs = git(vault_path, "for-each-ref", "--format=%(refname)").split()
    assert "refs/tags/main-before" in refs
    assert not {"refs/heads/keyring-backup", "refs/tags/keyring-light", "refs/tags/keyring-annotated"} & set(refs)
    checked = fsck(vault_path)
    assert checked.returncode == 0, checked.stderr
    collected = gc(vault_path)
    assert collected.returncode == 0, collected.stderr
    assert_no_key_left(vault_path, key, blobs)
    reopened = Vault.open(vault_path, key=key)
    assert reopened.verify().ok
    assert reopened.read("/memories/other.md") == "unrelated\n"


def test_an_old_keyring_fetched_back_from_a_bundle_under_any_name_is_reported_then_removed(
    vault: Vault, vault_path: Path, key: str, tmp_path: Path
) -> None:
    """A backup made with `git bundle` before the erasure, fetched back into
    the vault with stock git under a name of the operator's choosing: verify
    reports the copy, and the next write removes it and the ref naming it."""
    write(vault, command="create", path="/memories/ada.md", file_text=f"email: {MARKER}\n")
    bundle = tmp_path / "backup.bundle"
    git(vault_path, "bundle", "create", str(bundle), "--all")
    blobs = erased_blobs(vault, "/memories/ada.md")
    vault.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")

    git(vault_path, "fetch", "--quiet", str(bundle), "refs/heads/vaultmem-keyring:refs/tags/restored-keyring")
    report = Vault.open(vault_path, key=key).verify()
    assert [f.kind for f in report.findings] == ["erasure"], report.problems

    after = Vault.open(vault_path, key=key)
    write(after, command="create", path="/memories/next.md", file_text="next\n")
    assert "refs/tags/restored-keyring" not in git(vault_path, "for-each-ref", "--format=%(refname)")
    checked = fsck(vault_path)
    assert checked.returncode == 0, checked.stderr
    assert gc(vault_path).returncode == 0
    assert Vault.open(vault_path, key=key).verify().ok
    assert_no_key_left(vault_path, key, blobs)


def leave_a_half_written_pack(vault_path: Path, name: str, age: float) -> Path:
    """What a `git gc` or `git repack` killed while writing its pack leaves:
    the pack git was writing (every object, the keyring among them), all but
    its closing checksum, under git's temporary name, ``age`` seconds old."""
    whole = subprocess.run(
        ["git", "-C", str(vault_path), "pack-objects", "--revs", "--all", "--stdout", "-q"],
        input=b"",
        capture_output=True,
        check=True,
    ).stdout
    leftover = vault_path / "objects" / "pack" / name
    leftover.write_bytes(whole[:-20])
    when = time.time() - age
    os.utime(leftover, (when, when))
    return leftover


def test_a_pack_git_left_half_written_when_killed_is_removed_by_the_erasure(
    vault: Vault, vault_path: Path, key: str
) -> None:
    """A `git gc` killed (Ctrl-C, out of memory, a power cut) while it wrote
    its pack leaves `objects/pack/tmp_pack_XXXXXX` (`git count-objects -v`
    calls it garbage): it held the old keyring, and forget returned, and
    verify said no problems, with the erased versions' keys still in it."""
    write(vault, command="create", path="/memories/ada.md", file_text=f"email: {MARKER}\n" + "padding\n" * 200)
    write(vault, command="create", path="/memories/other.md", file_text="unrelated\n")
    leftover = leave_a_half_written_pack(vault_path, "tmp_pack_Qx81Zc", age=3 * 3600)
    blobs = erased_blobs(vault, "/memories/ada.md")

    vault.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")

    assert not leftover.exists()
    assert_no_key_left(vault_path, key, blobs)
    checked = fsck(vault_path)
    assert checked.returncode == 0, checked.stderr
    assert Vault.open(vault_path, key=key).verify().ok


def test_a_pack_git_may_still_be_writing_is_reported_and_the_same_erasure_finishes_it_later(
    vault: Vault, vault_path: Path, key: str
) -> None:
    """A half-written pack touched minutes ago may be a `git gc` still at
    work: the erasure leaves it, says so and names it, and run again once the
    file is an hour old (its git long gone), removes it."""
    write(vault, command="create", path="/memories/ada.md", file_text=f"email: {MARKER}\n")
    leftover = leave_a_half_written_pack(vault_path, "tmp_pack_Fr35hA", age=60)
    blobs = erased_blobs(vault, "/memories/ada.md")

    with pytest.raises(BusyError, match="tmp_pack_Fr35hA") as raised:
        vault.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")
    assert "recorded in" in str(raised.value) and "60 minutes old" in str(raised.value)
    assert "memory: forget" in git(vault_path, "log", "-1", "--format=%s", "main")
    assert leftover.exists()
    report = Vault.open(vault_path, key=key).verify()
    assert [f.kind for f in report.findings] == ["erasure"], report.problems
    assert "tmp_pack_Fr35hA" in report.problems[0]

    when = time.time() - 2 * 3600
    os.utime(leftover, (when, when))
    again = Vault.open(vault_path, key=key).forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")
    assert again.versions == () and len(again.already) == 1
    assert not leftover.exists()
    assert_no_key_left(vault_path, key, blobs)
    assert Vault.open(vault_path, key=key).verify().ok


def test_a_git_gc_running_beside_an_erasure_does_not_put_the_old_keyring_back(
    vault: Vault, vault_path: Path, key: str
) -> None:
    """`git gc --aggressive` lists the objects (the keyring of then among
    them), spends a while on deltas, then writes its pack: an erasure that
    ran in between returned "Erased", and the pack git wrote afterwards held
    the keys it had destroyed (verify then reported the copy, 4 runs in 4)."""
    tool = VaultMemoryTool(vault, actor="support-bot")
    for i in range(200):
        tool.call({"command": "create", "path": f"/memories/f{i}.md", "file_text": f"file {i} " + "x" * 2000})
    write(vault, command="create", path="/memories/ada.md", file_text=f"email: {MARKER}\n")
    blobs = erased_blobs(vault, "/memories/ada.md")

    gc_run = subprocess.Popen(["git", "-C", str(vault_path), "gc", "--quiet", "--aggressive"])
    try:
        deadline = time.monotonic() + 20
        while not (vault_path / "packed-refs").exists() and gc_run.poll() is None:  # git has begun
            assert time.monotonic() < deadline
            time.sleep(0.001)
        time.sleep(0.05)  # git lists the objects (milliseconds), then computes deltas
        done = vault.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")
    finally:
        assert gc_run.wait(timeout=60) == 0
    assert len(done.versions) == 1
    assert_no_key_left(vault_path, key, blobs)
    assert Vault.open(vault_path, key=key).verify().ok
    checked = fsck(vault_path)
    assert checked.returncode == 0, checked.stderr


def test_an_erasure_refused_by_a_full_disk_while_it_rewrites_git_s_pack_leaves_no_partial_copy(
    small_disk: Path,  # noqa: F811 (the fixture imported above)
) -> None:
    """After `git gc` the old keyring sits in one big pack with everything
    else, and the erasure copies that pack's other objects into a new one: on
    a disk with less room than that, it failed (as it should: run it again)
    but left its half-written copy behind, holding all the free space there
    had been, so the next run failed again for lack of the space it took."""
    key = generate_key()
    path = small_disk / "agent.vault"
    vault = Vault.init(path, key=key)
    tool = VaultMemoryTool(vault, actor="a")
    for i in range(24):  # a pack of 2 MB with them
        tool.call({"command": "create", "path": f"/memories/f{i}.md", "file_text": os.urandom(30_000).hex()})
    write(vault, command="create", path="/memories/ada.md", file_text=f"email: {MARKER}\n")
    git(path, "gc", "--quiet")
    blobs = erased_blobs(vault, "/memories/ada.md")
    vault.close()
    fill(small_disk, 1 << 20)  # room for the erasure's commit and keyring, not for a copy of the pack

    vault = Vault.open(path, key=key)
    with pytest.raises(VaultError, match="Run the same erasure again"):
        vault.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")
    assert not [p.name for p in (path / "objects" / "pack").iterdir() if p.name.startswith("tmp_")]

    (small_disk / "filler").unlink()
    again = Vault.open(path, key=key).forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")
    assert len(again.already) == 1
    assert_no_key_left(path, key, blobs)
    assert Vault.open(path, key=key).verify().ok
    checked = fsck(path)
    assert checked.returncode == 0, checked.stderr


def test_the_copy_a_killed_rewrite_left_is_removed_by_the_next_erasure(vault: Vault, vault_path: Path) -> None:
    """An erasure killed while it copied git's pack leaves its half-written
    copy (`tmp_vaultmem_prune_PID.pack`): nothing removed it, so each killed
    run kept up to a pack's size of the disk for good."""
    write(vault, command="create", path="/memories/ada.md", file_text=f"email: {MARKER}\n")
    git(vault_path, "gc", "--quiet")
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(child.stdout)  # a process that has ended, as a killed erasure's has
    leftover = vault_path / "objects" / "pack" / f"tmp_vaultmem_prune_{dead}.pack"
    leftover.write_bytes(b"PACK" + os.urandom(64 << 10))
    mine = vault_path / "objects" / "pack" / f"tmp_vaultmem_prune_{os.getppid()}.pack"  # a live process's: kept
    mine.write_bytes(b"PACK")

    vault.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")

    assert not leftover.exists()
    assert mine.exists()
    mine.unlink()


def test_a_pull_from_a_clone_that_restored_an_erased_version_before_the_erasure_reached_it(
    tmp_path: Path, key: str
) -> None:
    """Clone B restores an old version of a file (a restore brings back that
    version's blob as it is) while clone A erases every version of the file;
    A's pull then failed, every time, with "this version of /memories/p.txt
    was erased ...; its content is gone", and kept the server's keyring, with
    the destroyed keys, on its disk. The restored version is erased too (it
    is one of the versions A erased): the merge leaves it out, as the
    erasure left the file out, and both clones agree afterwards."""
    server = tmp_path / "server.git"
    git(tmp_path, "init", "-q", "--bare", "--initial-branch=main", str(server))
    a = Vault.init(tmp_path / "a.vault", key=key)
    a.add_remote("origin", str(server))
    write(a, command="create", path="/memories/p.txt", file_text=f"email: {MARKER}\n")
    write(a, command="str_replace", path="/memories/p.txt", old_str="email", new_str="mail")
    write(a, command="create", path="/memories/other.md", file_text="unrelated\n")
    a.push()
    b = Vault.clone(str(server), tmp_path / "b.vault", key=key)
    b.restore("main~2", path="/memories/p.txt", actor="ops-bob")
    b.push()
    blobs = erased_blobs(a, "/memories/p.txt")

    a.forget("/memories/p.txt", reason="GDPR request 4411", actor="ops")
    a.pull()
    assert [e.path for e in a.listing()] == ["/memories/other.md"]
    assert a.read("/memories/other.md") == "unrelated\n"
    assert a.verify().ok
    a.push()
    assert_no_key_left(tmp_path / "a.vault", key, blobs)

    b.pull()
    assert [e.path for e in b.listing()] == ["/memories/other.md"]
    assert b.head() == a.head()
    assert b.verify().ok
    assert_no_key_left(tmp_path / "b.vault", key, blobs)


def test_a_reflog_git_keeps_for_the_keyring_loses_the_entries_naming_what_was_removed(
    vault: Vault, vault_path: Path, key: str
) -> None:
    """With `core.logAllRefUpdates` on, git logs every move of a ref it makes
    (a push received, `git update-ref`): after an erasure that log named the
    removed keyring commits and `git fsck` failed with "invalid reflog entry"."""
    write(vault, command="create", path="/memories/ada.md", file_text=f"email: {MARKER}\n")
    git(vault_path, "config", "core.logAllRefUpdates", "true")
    ring, main = git(vault_path, "rev-parse", "vaultmem-keyring", "main").split()
    git(vault_path, "update-ref", "--create-reflog", "refs/heads/vaultmem-keyring", main)  # moved by hand,
    git(vault_path, "update-ref", "refs/heads/vaultmem-keyring", ring)  # and back: two entries name the keyring
    git(vault_path, "update-ref", "--create-reflog", "-m", "kept", "refs/heads/audit-copy", main)
    logged = (vault_path / "logs" / "refs" / "heads" / "vaultmem-keyring").read_text()
    assert logged.count(ring) == 2
    blobs = erased_blobs(vault, "/memories/ada.md")

    vault.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")

    assert ring not in (vault_path / "logs" / "refs" / "heads" / "vaultmem-keyring").read_text()
    assert "kept" in (vault_path / "logs" / "refs" / "heads" / "audit-copy").read_text()
    checked = fsck(vault_path)
    assert checked.returncode == 0, checked.stderr
    assert_no_key_left(vault_path, key, blobs)
    assert Vault.open(vault_path, key=key).verify().ok


def test_a_pack_a_killed_pull_was_receiving_is_removed_by_the_erasure(vault: Vault, vault_path: Path, key: str) -> None:
    """A pull killed while libgit2 received its pack leaves
    `objects/pack/pack_git2_XXXX`: it may hold a keyring an erasure replaces,
    and the erasure left it for the next sync to remove."""
    write(vault, command="create", path="/memories/ada.md", file_text=f"email: {MARKER}\n" + "padding\n" * 200)
    leftover = leave_a_half_written_pack(vault_path, "pack_git2_a1B2c3", age=3 * 3600)
    blobs = erased_blobs(vault, "/memories/ada.md")

    vault.forget("/memories/ada.md", reason="GDPR request 4411", actor="ops")

    assert not leftover.exists()
    assert_no_key_left(vault_path, key, blobs)
    assert Vault.open(vault_path, key=key).verify().ok
