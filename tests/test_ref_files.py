"""A ref move frees no file and writes no file twice (docs/format.md, "Files
freed after the call, never written twice"): the lock is a new file, and the
ref's old file keeps a second name in the trash until the upkeep removes it.
A file is never written again once git can see it, so after a power cut a
ref file holds the id it was made with, or nothing: never an older id that
recovery could not tell from an operator's."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import git

from vaultmem import Vault
from vaultmem.git import commits, upkeep


def test_every_move_gives_the_ref_a_new_file_and_frees_the_old_one_later(
    vault: Vault, vault_path: Path, call: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upkeep, "IDLE", 60.0)  # no upkeep round during the moves
    main = vault_path / "refs" / "heads" / "main"
    trash = vault_path / "vaultmem" / commits.TRASH
    call(command="create", path="/memories/first.txt", file_text="first\n")
    held: dict[int, bytes] = {os.stat(main).st_ino: main.read_bytes()}
    for i in range(10):
        before = os.stat(main).st_ino
        call(command="create", path=f"/memories/f{i}.txt", file_text=f"{i}\n")
        info = os.stat(main)
        assert info.st_ino not in held  # a new file, renamed into place
        assert stat.S_ISREG(info.st_mode) and info.st_mode & 0o222 == 0
        held[info.st_ino] = main.read_bytes()
        old = [p for p in trash.iterdir() if p.name.startswith("ref-") and os.stat(p).st_ino == before]
        assert len(old) == 1  # the old file waits in the trash: the call freed nothing
        assert not (vault_path / "refs" / "heads" / "main.lock").exists()
    # No file that was ever the ref was written again.
    for path in trash.iterdir():
        info = os.stat(path)
        if info.st_ino in held:
            assert path.read_bytes() == held[info.st_ino]
    assert git(vault_path, "rev-parse", "main").strip() == main.read_text().strip()
    vault.close()
    assert list(trash.iterdir()) == []  # the upkeep freed them
    git(vault_path, "fsck", "--strict")


def test_a_ref_git_wrote_is_replaced_by_a_file_of_vaultmem(
    vault: Vault, vault_path: Path, call: Callable[..., str]
) -> None:
    call(command="create", path="/memories/a.txt", file_text="a\n")
    call(command="create", path="/memories/b.txt", file_text="b\n")
    head = git(vault_path, "rev-parse", "main").strip()
    git(vault_path, "update-ref", "refs/heads/main", "main~1")
    git(vault_path, "update-ref", "refs/heads/main", head)  # git's own file: mode 0666 less the umask
    main = vault_path / "refs" / "heads" / "main"
    assert os.stat(main).st_mode & 0o200
    call(command="create", path="/memories/c.txt", file_text="c\n")
    mode = os.stat(main).st_mode
    assert stat.S_ISREG(mode) and mode & 0o222 == 0
    assert git(vault_path, "rev-parse", "main~1").strip() == head
