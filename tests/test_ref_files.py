"""A ref move reuses files instead of creating and freeing one per write
(docs/format.md, "Ref files are reused"): the ref's old file is kept by a
second name across the rename and becomes the next lock.  These tests pin
what that must never break: git sees an atomic replacement of the ref file,
a file another name still refers to is never written in place, and a writer
killed between the rename and the rotation leaves nothing that misleads the
next one."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from conftest import git

from vaultmem import Vault, VaultMemoryTool, commits


def _ino(path: Path) -> int:
    return os.stat(path).st_ino


def test_every_move_gives_the_ref_a_new_file_and_keeps_one_spare(
    vault: Vault, vault_path: Path, call: Callable[..., str]
) -> None:
    main = vault_path / "refs" / "heads" / "main"
    spare = vault_path / "vaultmem" / commits.REF_NEXT
    call(command="create", path="/memories/first.txt", file_text="first\n")
    seen = set()
    for i in range(6):
        before = _ino(main)
        call(command="create", path=f"/memories/f{i}.txt", file_text=f"{i}\n")
        after = _ino(main)
        assert after != before  # renamed into place, never rewritten in place
        assert _ino(spare) == before  # the old file is the next lock
        info = os.stat(spare)
        assert info.st_nlink == 1 and info.st_mode & 0o222 == 0
        assert os.stat(main).st_nlink == 1
        seen.add(after)
        assert not (vault_path / "vaultmem" / commits.REF_PREV).exists()
        assert not (vault_path / "refs" / "heads" / "main.lock").exists()
    assert len(seen) <= 3  # two files take turns (plus the first ref's)
    assert git(vault_path, "rev-parse", "main").strip() == main.read_text().strip()
    git(vault_path, "fsck", "--strict")


def test_a_spare_with_another_name_is_never_written_in_place(
    vault: Vault, vault_path: Path, call: Callable[..., str], tmp_path: Path
) -> None:
    call(command="create", path="/memories/a.txt", file_text="a\n")
    call(command="create", path="/memories/b.txt", file_text="b\n")
    spare = vault_path / "vaultmem" / commits.REF_NEXT
    outside = tmp_path / "someone-elses-name"
    os.link(spare, outside)  # e.g. a backup tool's hard link
    held, mode = outside.read_bytes(), os.stat(outside).st_mode
    call(command="create", path="/memories/c.txt", file_text="c\n")
    assert outside.read_bytes() == held
    assert os.stat(outside).st_mode == mode  # not even its permissions change
    assert os.stat(spare).st_nlink == 1


def test_a_writer_killed_between_the_rename_and_the_rotation(
    vault: Vault, vault_path: Path, call: Callable[..., str], key: str
) -> None:
    """Both names left as the kill left them: ref-next is the ref's file and
    ref-prev the old one.  The next write must neither write the live ref in
    place nor lose anything."""
    call(command="create", path="/memories/a.txt", file_text="a\n")
    call(command="create", path="/memories/a2.txt", file_text="a\n")
    main = vault_path / "refs" / "heads" / "main"
    state = vault_path / "vaultmem"
    spare, prev = state / commits.REF_NEXT, state / commits.REF_PREV
    os.link(spare, prev)  # any file will do as the old one
    spare.unlink()
    os.link(main, spare)  # ref-next is main's own file
    live = main.read_bytes()
    fresh = Vault.open(vault_path, key=key)
    try:
        VaultMemoryTool(fresh).call({"command": "create", "path": "/memories/b.txt", "file_text": "b\n"})
    finally:
        fresh.close()
    assert main.read_bytes() != live
    assert git(vault_path, "rev-parse", "main^").strip() == live.decode().strip()
    assert not os.path.samefile(spare, main)
    assert os.stat(spare).st_nlink == 1
    git(vault_path, "fsck", "--strict")


def test_a_lock_of_ours_left_by_a_kill_is_recognised_after_reuse(
    vault: Vault, vault_path: Path, call: Callable[..., str]
) -> None:
    """The lock's file carries vaultmem's mark (no write bit) even when the
    file it reuses was written by git."""
    call(command="create", path="/memories/a.txt", file_text="a\n")
    call(command="create", path="/memories/a2.txt", file_text="a\n")
    head = git(vault_path, "rev-parse", "main").strip()
    git(vault_path, "update-ref", "refs/heads/main", "main~1")  # git writes main's file: mode 0666 less umask
    git(vault_path, "update-ref", "refs/heads/main", head)
    assert os.stat(vault_path / "refs" / "heads" / "main").st_mode & 0o200
    call(command="create", path="/memories/b.txt", file_text="b\n")  # git's file becomes ref-next
    call(command="create", path="/memories/c.txt", file_text="c\n")  # and is a lock and a ref, read-only
    spare = vault_path / "vaultmem" / commits.REF_NEXT
    main = vault_path / "refs" / "heads" / "main"
    for path in (spare, main):
        mode = os.stat(path).st_mode
        assert stat.S_ISREG(mode) and mode & 0o222 == 0
