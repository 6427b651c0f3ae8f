"""How ``refs/heads/main`` moves (vaultmem.refs): through a ring of three
files, so no move frees a file, and never by writing in place a file that
the disk may still record as ``main``."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import commit_count, git

from vaultmem import Vault, VaultMemoryTool, refs


def main_inode(vault_path: Path) -> int:
    return os.stat(vault_path / "refs/heads/main").st_ino


def ring_inodes(vault_path: Path) -> list[int]:
    return [os.stat(vault_path / "vaultmem" / name).st_ino for name in refs.RING]


def create(tool: VaultMemoryTool, i: int) -> None:
    tool.call({"command": "create", "path": f"/memories/f{i}.txt", "file_text": f"note {i}\n"})


def test_main_cycles_through_the_three_ring_files(vault: Vault, vault_path: Path, tool: VaultMemoryTool) -> None:
    mains = []
    for i in range(9):
        create(tool, i)
        mains.append(main_inode(vault_path))
        assert os.stat(vault_path / "refs/heads/main").st_nlink == 2  # main and its ring name
        assert git(vault_path, "rev-parse", "main").strip() == vault.history(limit=1)[0].id
    ring = ring_inodes(vault_path)
    assert set(mains) == set(ring)  # three files serve every move: none is freed
    assert mains[:3] == [ring[0], ring[1], ring[2]]
    assert mains[3:6] == mains[:3] and mains[6:] == mains[:3]
    git(vault_path, "fsck", "--strict")


def test_a_ring_file_rewritten_in_place_is_neither_main_nor_the_previous_main(
    vault_path: Path, tool: VaultMemoryTool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk may still record the previous ``main`` until the next sync, so
    a file rewritten in place must be neither it nor the current one."""
    written: list[int] = []
    real_pwrite = os.pwrite

    def spy(fd: int, data: Any, offset: int) -> int:
        written.append(os.fstat(fd).st_ino)
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(refs.os, "pwrite", spy)
    create(tool, 0)
    history = [main_inode(vault_path)]
    rewrote_ring = 0
    for i in range(1, 13):
        written.clear()
        create(tool, i)
        recent = set(history[-2:])
        assert not recent & set(written), f"call {i} rewrote main or the previous main in place"
        rewrote_ring += bool(set(written) & set(ring_inodes(vault_path)))
        history.append(main_inode(vault_path))
    assert rewrote_ring >= 11  # every move after the first rewrote a ring file: the ring is in use


def test_after_git_moves_main_the_next_write_rewrites_no_ring_file(
    vault: Vault, vault_path: Path, tool: VaultMemoryTool
) -> None:
    """git moved ``main`` with a file of its own, and that move may not be on
    disk yet: the next write creates a new lock file and restarts the ring;
    only the write after it (past a sync) rewrites a ring file."""
    for i in range(4):
        create(tool, i)
    head = git(vault_path, "rev-parse", "main").strip()
    git(vault_path, "update-ref", "refs/heads/main", "main~1")
    git(vault_path, "update-ref", "refs/heads/main", head)
    assert main_inode(vault_path) not in ring_inodes(vault_path)
    kept = {name: (vault_path / "vaultmem" / name).read_bytes() for name in refs.RING[1:]}
    kept_ids = ring_inodes(vault_path)[1:]
    create(tool, 4)
    assert {name: (vault_path / "vaultmem" / name).read_bytes() for name in refs.RING[1:]} == kept
    assert ring_inodes(vault_path)[1:] == kept_ids
    assert main_inode(vault_path) == ring_inodes(vault_path)[0]  # the new lock file starts the ring
    create(tool, 5)
    assert main_inode(vault_path) == ring_inodes(vault_path)[1]
    assert [v.paths[0] for v in vault.history(limit=2)] == ["/memories/f5.txt", "/memories/f4.txt"]
    assert commit_count(vault_path) == 6
    git(vault_path, "fsck", "--strict")


def test_main_packed_by_git_is_read_and_moved(vault: Vault, vault_path: Path, tool: VaultMemoryTool) -> None:
    for i in range(3):
        create(tool, i)
    git(vault_path, "pack-refs", "--all", "--prune")
    assert not (vault_path / "refs/heads/main").exists()
    assert vault.read("/memories/f2.txt") == "note 2\n"  # found through packed-refs
    assert len(vault.history()) == 3
    create(tool, 3)
    create(tool, 4)
    assert git(vault_path, "rev-parse", "main").strip() == vault.history(limit=1)[0].id
    assert commit_count(vault_path) == 5
    git(vault_path, "fsck", "--strict")


@pytest.mark.parametrize(
    "damage",
    [
        lambda ring: os.unlink(ring / "head-1"),
        lambda ring: (ring / "head-0").write_bytes(b"short\n"),
        lambda ring: os.link(ring / "head-0", ring / "extra-link"),
    ],
    ids=["a ring file removed", "a ring file of another size", "a ring file linked twice"],
)
def test_a_damaged_ring_is_restarted(
    vault: Vault, vault_path: Path, tool: VaultMemoryTool, damage: Callable[[Path], Any]
) -> None:
    for i in range(3):
        create(tool, i)
    assert main_inode(vault_path) == ring_inodes(vault_path)[2]  # head-0 is the next to be rewritten
    damage(vault_path / "vaultmem")
    for i in range(3, 8):
        create(tool, i)
        assert git(vault_path, "rev-parse", "main").strip() == vault.history(limit=1)[0].id
    assert main_inode(vault_path) in ring_inodes(vault_path)  # the ring is in use again
    assert sorted(vault.read(f"/memories/f{i}.txt") for i in range(8)) == [f"note {i}\n" for i in range(8)]
    git(vault_path, "fsck", "--strict")


def test_read_loose_accepts_only_a_whole_id(tmp_path: Path) -> None:
    ref = tmp_path / "main"
    good = "0123456789abcdef0123456789abcdef01234567"
    ref.write_text(good + "\n")
    assert refs.read_loose(str(ref)) == bytes.fromhex(good)
    for bad in ["ref: refs/heads/other\n", good, good.upper() + "\n", good[:-1] + "g\n", good + "\nx", ""]:
        ref.write_text(bad)
        assert refs.read_loose(str(ref)) is None, bad
    assert refs.read_loose(str(tmp_path / "missing")) is None


def test_a_vault_copied_without_hard_links_keeps_working(
    vault: Vault, vault_path: Path, key: str, tmp_path: Path
) -> None:
    tool = VaultMemoryTool(vault, actor="t")
    for i in range(3):
        create(tool, i)
    copy = tmp_path / "copy.vault"
    shutil.copytree(vault_path, copy)  # main and its ring name become two files
    assert main_inode(copy) not in ring_inodes(copy)
    other = VaultMemoryTool(Vault.open(copy, key=key), actor="t")
    for i in range(3, 6):
        create(other, i)
    assert commit_count(copy) == 6 and commit_count(vault_path) == 3
    assert main_inode(copy) in ring_inodes(copy)
    git(copy, "fsck", "--strict")
