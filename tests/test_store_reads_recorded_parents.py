"""Proposed with the store.py diff: reading a version by id or time, and undo,
follow the parents the commits record (not a shallow or grafts file), and a
damaged version is an IntegrityError."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FakeClock, git

from vaultmem import IntegrityError, Vault


@pytest.fixture
def versions(vault: Vault, vault_path: Path, call, clock: FakeClock) -> list[str]:
    made = []
    texts = ("one", "two", "three", "four")
    for i, text in enumerate(texts):
        clock.advance(60)
        if i == 0:
            call(command="create", path="/memories/a.txt", file_text=f"{text}\n")
        else:
            call(command="str_replace", path="/memories/a.txt", old_str=texts[i - 1], new_str=text)
        made.append(git(vault_path, "rev-parse", "main").strip())
    return made


@pytest.mark.parametrize("hider", ["shallow", "info/grafts"])
def test_versions_behind_a_shallow_or_grafts_file_are_read_and_undone(
    vault_path: Path, key: str, versions: list[str], clock: FakeClock, hider: str
) -> None:
    (vault_path / "info").mkdir(exist_ok=True)
    (vault_path / hider).write_text(versions[2] + "\n")
    reader = Vault.open(vault_path, key=key, clock=clock)
    assert reader.read("/memories/a.txt", at=versions[0]) == "one\n"
    first = git(vault_path, "log", "-1", "--format=%aI", versions[0]).strip()
    assert reader.read("/memories/a.txt", at=first) == "one\n"
    reader.undo(3, actor="ops")
    assert reader.read("/memories/a.txt") == "one\n"


def test_a_damaged_version_is_an_integrity_error_for_read_at_and_undo(
    vault_path: Path, key: str, versions: list[str]
) -> None:
    import subprocess

    oid = versions[1]
    for idx in (vault_path / "objects" / "pack").glob("*.idx"):
        out = subprocess.run(["git", "verify-pack", "-v", str(idx)], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith(oid):
                offset = int(line.split()[4])
                pack = idx.with_suffix(".pack")
                pack.chmod(0o644)
                with open(pack, "r+b") as fh:
                    fh.seek(offset + 30)
                    b = fh.read(1)[0]
                    fh.seek(offset + 30)
                    fh.write(bytes([b ^ 1]))
    reader = Vault.open(vault_path, key=key)
    with pytest.raises(IntegrityError):
        reader.read("/memories/a.txt", at=versions[0])
    with pytest.raises(IntegrityError):
        reader.undo(3)
    first = git(vault_path, "log", "-1", "--format=%aI", versions[0], check=False).strip() or "2026-01-01T00:00:00Z"
    with pytest.raises(IntegrityError):  # a time walks the first parents past the damaged version
        Vault.open(vault_path, key=key).read("/memories/a.txt", at=first)


@pytest.mark.parametrize("hider", ["shallow", "info/grafts"])
def test_the_walks_of_a_sync_and_an_erasure_follow_the_recorded_parents(
    vault_path: Path, key: str, versions: list[str], hider: str
) -> None:
    """``added_since`` (a sync's renames, a pull's seal check), ``oldest_first``
    (find, forget), ``descends`` (fast-forwards, checkpoints) and
    ``merge_base`` (a sync's merges) follow the parents the commits record,
    whatever git shows."""
    import pygit2

    from vaultmem.repo.history import added_since, descends, merge_base, oldest_first

    (vault_path / "info").mkdir(exist_ok=True)
    (vault_path / hider).write_text(versions[2] + "\n")
    assert git(vault_path, "rev-list", "main").split() == versions[:1:-1]  # git stops at the cut
    repo = pygit2.Repository(str(vault_path))
    tip = pygit2.Oid(hex=versions[3])
    assert [str(c.id) for c in oldest_first(repo, tip)] == versions
    assert [str(c.id) for c in added_since(repo, tip, None)] == versions
    assert [str(c.id) for c in added_since(repo, tip, pygit2.Oid(hex=versions[0]))] == versions[1:]
    assert list(added_since(repo, tip, tip)) == []
    first, second = pygit2.Oid(hex=versions[0]), pygit2.Oid(hex=versions[1])
    assert descends(repo, tip, first) and not descends(repo, first, tip) and not descends(repo, tip, tip)
    assert merge_base(repo, tip, second) == second
