"""What a write reads, and when it may read it only once.

A write reads each ref it needs at most once an attempt under the writer
lock, and remembers ``packed-refs`` while a stat says it is the file it
read.  Stock git may move refs, pack them or rewrite ``packed-refs`` at any
moment between two calls: the next call sees what git did.  A policy changed
while a command waits for the writer lock is still found under the lock.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import git

from vaultmem import ToolError, Vault, VaultMemoryTool
from vaultmem.git import commits, midx

POLICY_REF = "refs/heads/vaultmem-policy"


def _packed_refs(vault_path: Path) -> str:
    return (vault_path / "packed-refs").read_text(encoding="ascii")


@pytest.fixture(params=["settled", "every-read"])
def remembering(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """As shipped (a packed-refs file is remembered once it is two seconds
    old), and remembered from its first read on, so that the stat alone
    tells each rewrite by git from the file read before."""
    if request.param == "every-read":
        monkeypatch.setattr(commits, "PACKED_SETTLED", -(10**18))
    commits._PACKED.clear()


def test_a_policy_git_moves_inside_packed_refs_is_seen_by_the_next_call(
    vault: Vault, vault_path: Path, key: str, call: Callable[..., str], remembering: None
) -> None:
    vault.set_policy(actor="ops", max_file_bytes=1_000)
    loose = git(vault_path, "rev-parse", POLICY_REF).strip()
    vault.set_policy(actor="ops", max_file_bytes=10)
    strict = git(vault_path, "rev-parse", POLICY_REF).strip()
    git(vault_path, "pack-refs", "--all")
    assert not (vault_path / POLICY_REF).exists() and strict in _packed_refs(vault_path)
    with pytest.raises(ToolError, match="the limit is 10 bytes"):
        call(command="create", path="/memories/a.txt", file_text="more than ten bytes\n")
    # The operator takes the policy back with git: packed-refs is rewritten
    # whole (the same size: one id for another), and the loose file goes.
    for n, (target, allowed) in enumerate(((loose, True), (strict, False), (loose, True))):
        git(vault_path, "update-ref", POLICY_REF, target)
        git(vault_path, "pack-refs", "--all")
        assert target in _packed_refs(vault_path) and not (vault_path / POLICY_REF).exists()
        if allowed:
            call(command="create", path=f"/memories/{n}.txt", file_text="more than ten bytes\n")
        else:
            with pytest.raises(ToolError, match="the limit is 10 bytes"):
                call(command="create", path="/memories/b.txt", file_text="more than ten bytes\n")
    assert vault.policy.max_file_bytes == 1_000
    git(vault_path, "fsck", "--strict")


def test_main_moved_back_and_packed_by_git_is_what_the_next_call_builds_on(
    vault: Vault, vault_path: Path, call: Callable[..., str], remembering: None
) -> None:
    call(command="create", path="/memories/a.txt", file_text="a\n")
    first = git(vault_path, "rev-parse", "main").strip()
    call(command="create", path="/memories/b.txt", file_text="b\n")
    git(vault_path, "pack-refs", "--all")
    call(command="create", path="/memories/c.txt", file_text="c\n")  # main is loose again
    git(vault_path, "update-ref", "refs/heads/main", first)
    git(vault_path, "pack-refs", "--all")
    assert not (vault_path / "refs/heads/main").exists()
    call(command="create", path="/memories/d.txt", file_text="d\n")
    assert git(vault_path, "rev-parse", "main~1").strip() == first
    listing = call(command="view", path="/memories")
    assert "a.txt" in listing and "d.txt" in listing
    assert "b.txt" not in listing and "c.txt" not in listing
    git(vault_path, "fsck", "--strict")


def test_a_policy_changed_while_a_command_waits_for_the_lock_is_applied(
    vault: Vault, vault_path: Path, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command read the policy before the writer lock; an operator
    changes it (through vaultmem, then with git) before the command gets the
    lock.  The read under the lock is the one that counts."""
    operator = Vault.open(vault_path, key=key)
    operator.set_policy(actor="ops", max_file_bytes=1_000)
    generous = git(vault_path, "rev-parse", POLICY_REF).strip()
    operator.set_policy(actor="ops", max_file_bytes=10)
    strict = git(vault_path, "rev-parse", POLICY_REF).strip()
    git(vault_path, "update-ref", POLICY_REF, generous)
    tool = VaultMemoryTool(vault, actor="support-bot")
    real_hold = vault._lock.hold
    acts: list[Callable[[], object]] = []

    @contextlib.contextmanager
    def hold() -> Iterator[None]:
        while acts:
            acts.pop(0)()
        with real_hold():
            yield

    monkeypatch.setattr(vault._lock, "hold", hold)
    acts.append(lambda: operator.set_policy(actor="ops", max_file_bytes=10))
    with pytest.raises(ToolError, match="the limit is 10 bytes"):
        tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "more than ten bytes\n"})
    git(vault_path, "update-ref", POLICY_REF, generous)
    acts.append(lambda: git(vault_path, "update-ref", POLICY_REF, strict))
    with pytest.raises(ToolError, match="the limit is 10 bytes"):
        tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "more than ten bytes\n"})
    assert git(vault_path, "rev-list", "--count", "main", check=False).strip() in ("", "0")


def test_the_policy_branch_is_read_once_an_attempt_and_again_in_the_next_call(
    vault: Vault, vault_path: Path, call: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    real = commits.read_ref_or_damaged

    def counting(gitdir: Path, ref: str) -> bytes | None:
        reads.append(ref)
        return real(gitdir, ref)

    call(command="create", path="/memories/first.txt", file_text="the tool is made, its expiry checked\n")
    monkeypatch.setattr("vaultmem.repo.engine.read_ref_or_damaged", counting)
    call(command="create", path="/memories/a.txt", file_text="a\n")
    # One read before the writer lock (the text is checked against it), one under it.
    assert reads.count(POLICY_REF) == 2
    reads.clear()
    call(command="rename", old_path="/memories/a.txt", new_path="/memories/b.txt")
    assert reads.count(POLICY_REF) == 1
    reads.clear()
    vault.set_policy(actor="ops", max_file_bytes=10)
    with pytest.raises(ToolError, match="the limit is 10 bytes"):
        call(command="str_replace", path="/memories/b.txt", old_str="a", new_str="more than ten bytes")
    assert vault.policy.max_file_bytes == 10


def test_packs_retired_together_are_each_checked_before_and_after_they_move(
    vault: Vault, vault_path: Path, call: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write retires the packs a merge replaced together: one listed by
    git's multi-pack-index stays, and one an index starts to list while the
    files move goes back."""
    for n in range(4):
        call(command="create", path=f"/memories/f{n}.txt", file_text=f"version {n}\n")
    vault.close()
    pack_dir = vault_path / "objects" / "pack"
    first, second, third, *_ = sorted(p.stem for p in pack_dir.glob("pack-*.pack"))
    answers = iter([frozenset({first}), frozenset({first, second})])
    monkeypatch.setattr(midx, "listed", lambda folder: next(answers))
    with vault._commits.retiring():
        for stem in (first, second, third):
            vault._commits.retire(pack_dir / f"{stem}.pack")
        assert {p.stem for p in pack_dir.glob("pack-*.pack")} >= {first, second, third}  # not before the end
    left = {p.stem for p in pack_dir.glob("pack-*.pack")}
    assert first in left and second in left and third not in left
    trash = vault_path / "vaultmem" / commits.TRASH
    assert sorted(p.name for p in trash.glob("pack-*")) == [f"{third}.idx", f"{third}.pack"]
