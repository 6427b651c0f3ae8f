"""Comparing versions (diff, changes) and going back to one (restore, undo) as new
commits, never by rewriting history."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeClock, commit_count, git

from vaultmem import InvalidPathError, NotFoundError, Vault, VaultError, VaultMemoryTool
from vaultmem.ops.diff import FileChange, unified, with_renames


def head(vault_path: Path) -> str:
    return git(vault_path, "rev-parse", "main").strip()


def memory(vault: Vault) -> dict[str, str]:
    """Every file of the current memory with its text."""
    return {e.path: vault.read(e.path) for e in vault.listing() if e.kind == "file"}


def restored_from_trailer(vault_path: Path) -> str:
    return git(vault_path, "log", "-1", "--format=%(trailers:key=Vaultmem-Restored-From,valueonly)", "main").strip()


def assert_fsck_strict_clean(vault_path: Path) -> None:
    result = subprocess.run(
        ["git", "-C", str(vault_path), "fsck", "--strict", "--no-progress"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "error" not in result.stderr.lower(), result.stderr


def changes(listed: list[Any]) -> list[tuple[str, str, str | None, str | None]]:
    return [(c.path, c.status, c.old, c.new) for c in listed]


# -- diff and changes -------------------------------------------------------------


@pytest.fixture
def pair(vault: Vault, vault_path: Path, call) -> tuple[str, str]:
    """v1: notes.txt, gone.txt; v2: notes.txt modified, gone.txt deleted, new.txt added."""
    call(command="create", path="/memories/notes.txt", file_text="one\ntwo\nthree\n")
    call(command="create", path="/memories/gone.txt", file_text="bye\n")
    v1 = head(vault_path)
    call(command="str_replace", path="/memories/notes.txt", old_str="two", new_str="2")
    call(command="delete", path="/memories/gone.txt")
    call(command="create", path="/memories/new.txt", file_text="fresh\n")
    return v1, head(vault_path)


FORWARD = (
    "--- a/memories/gone.txt\n"
    "+++ /dev/null\n"
    "@@ -1 +0,0 @@\n"
    "-bye\n"
    "--- /dev/null\n"
    "+++ b/memories/new.txt\n"
    "@@ -0,0 +1 @@\n"
    "+fresh\n"
    "--- a/memories/notes.txt\n"
    "+++ b/memories/notes.txt\n"
    "@@ -1,3 +1,3 @@\n"
    " one\n"
    "-two\n"
    "+2\n"
    " three\n"
)

BACKWARD = (
    "--- /dev/null\n"
    "+++ b/memories/gone.txt\n"
    "@@ -0,0 +1 @@\n"
    "+bye\n"
    "--- a/memories/new.txt\n"
    "+++ /dev/null\n"
    "@@ -1 +0,0 @@\n"
    "-fresh\n"
    "--- a/memories/notes.txt\n"
    "+++ b/memories/notes.txt\n"
    "@@ -1,3 +1,3 @@\n"
    " one\n"
    "-2\n"
    "+two\n"
    " three\n"
)


def test_diff_is_the_exact_unified_diff_of_the_decrypted_files(vault: Vault, pair: tuple[str, str]) -> None:
    v1, v2 = pair
    assert vault.diff(v1, v2) == FORWARD


def test_diff_in_the_other_direction_swaps_added_and_deleted(vault: Vault, pair: tuple[str, str]) -> None:
    v1, v2 = pair
    assert vault.diff(v2, v1) == BACKWARD


def test_diff_defaults_to_the_head_and_takes_any_version_form(vault: Vault, pair: tuple[str, str]) -> None:
    v1, _v2 = pair
    assert vault.diff(v1) == FORWARD
    assert vault.diff("main~3") == FORWARD
    assert vault.diff(v1[:7], "main") == FORWARD


def test_changes_hold_the_same_data_as_the_diff(vault: Vault, pair: tuple[str, str]) -> None:
    v1, v2 = pair
    assert changes(vault.changes(v1, v2)) == [
        ("/memories/gone.txt", "deleted", "bye\n", None),
        ("/memories/new.txt", "added", None, "fresh\n"),
        ("/memories/notes.txt", "modified", "one\ntwo\nthree\n", "one\n2\nthree\n"),
    ]
    assert changes(vault.changes(v2, v1)) == [
        ("/memories/gone.txt", "added", None, "bye\n"),
        ("/memories/new.txt", "deleted", "fresh\n", None),
        ("/memories/notes.txt", "modified", "one\n2\nthree\n", "one\ntwo\nthree\n"),
    ]
    assert changes(vault.changes(v1)) == changes(vault.changes(v1, v2))


def test_diff_restricted_to_a_file_or_a_folder(vault: Vault, vault_path: Path, pair: tuple[str, str], call) -> None:
    v1, v2 = pair
    assert vault.diff(v1, v2, path="/memories/notes.txt") == (
        "--- a/memories/notes.txt\n+++ b/memories/notes.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n"
    )
    assert (
        vault.diff(v1, v2, path="/memories/new.txt") == "--- /dev/null\n+++ b/memories/new.txt\n@@ -0,0 +1 @@\n+fresh\n"
    )
    assert changes(vault.changes(v1, v2, path="/memories/gone.txt")) == [
        ("/memories/gone.txt", "deleted", "bye\n", None)
    ]
    assert vault.diff(v1, v2, path="/memories/never.txt") == ""
    call(command="create", path="/memories/team/a.md", file_text="# A\n")
    call(command="create", path="/memories/team/sub/b.md", file_text="# B\n")
    call(command="str_replace", path="/memories/notes.txt", old_str="one", new_str="1")
    assert changes(vault.changes(v2, path="/memories/team")) == [
        ("/memories/team/a.md", "added", None, "# A\n"),
        ("/memories/team/sub/b.md", "added", None, "# B\n"),
    ]
    assert vault.diff(v2, path="/memories/team") == (
        "--- /dev/null\n+++ b/memories/team/a.md\n@@ -0,0 +1 @@\n+# A\n"
        "--- /dev/null\n+++ b/memories/team/sub/b.md\n@@ -0,0 +1 @@\n+# B\n"
    )
    assert [c.path for c in vault.changes(v2)] == [
        "/memories/notes.txt",
        "/memories/team/a.md",
        "/memories/team/sub/b.md",
    ]


def test_diff_of_equal_versions_is_empty(vault: Vault, vault_path: Path, pair: tuple[str, str], call) -> None:
    v1, v2 = pair
    assert vault.diff(v1, v1) == ""
    assert vault.diff(v2) == ""
    assert vault.changes(v2, v2) == []
    # Same text under new ciphertext (a rename there and back re-encrypts): still no difference.
    call(command="rename", old_path="/memories/notes.txt", new_path="/memories/tmp.txt")
    call(command="rename", old_path="/memories/tmp.txt", new_path="/memories/notes.txt")
    assert git(vault_path, "rev-parse", f"{v2}:memories/notes.txt") != git(
        vault_path, "rev-parse", "main:memories/notes.txt"
    )
    assert vault.diff(v2) == ""
    assert vault.changes(v2) == []


def test_an_edit_whose_two_sides_were_erased_still_shows_as_a_change(vault: Vault, vault_path: Path, call) -> None:
    """Both erased sides read as the same "was erased" line; the edit still
    shows, as both lines, the way the erased create shows its one line."""
    call(command="create", path="/memories/p.txt", file_text="color blue\n")
    created = head(vault_path)
    call(command="str_replace", path="/memories/p.txt", old_str="blue", new_str="red")
    edited = head(vault_path)
    call(command="create", path="/memories/q.txt", file_text="other\n")
    vault.forget("/memories/p.txt", reason="GDPR request 4411", actor="ops")
    [added] = vault.changes(None, created)
    line = added.new
    assert (added.path, added.status, added.old) == ("/memories/p.txt", "added", None)
    assert line is not None and line.startswith("[this version of /memories/p.txt was erased on ")
    assert changes(vault.changes(created, edited)) == [("/memories/p.txt", "modified", line, line)]
    assert vault.diff(created, edited) == f"--- a/memories/p.txt\n+++ b/memories/p.txt\n@@ -1 +1 @@\n-{line}+{line}"
    assert vault.diff(created, edited, path="/memories/q.txt") == ""
    assert "blue" not in vault.diff(None, "main") and "red" not in vault.diff(None, "main")


def test_diff_across_a_rename_is_a_delete_and_an_add(vault: Vault, vault_path: Path, call) -> None:
    call(command="create", path="/memories/a.txt", file_text="same\n")
    before = head(vault_path)
    call(command="rename", old_path="/memories/a.txt", new_path="/memories/b.txt")
    assert changes(vault.changes(before)) == [
        ("/memories/a.txt", "deleted", "same\n", None),
        ("/memories/b.txt", "added", None, "same\n"),
    ]
    assert vault.diff(before) == (
        "--- a/memories/a.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-same\n"
        "--- /dev/null\n+++ b/memories/b.txt\n@@ -0,0 +1 @@\n+same\n"
    )


def test_diff_when_a_file_became_a_folder(vault: Vault, vault_path: Path, call) -> None:
    call(command="create", path="/memories/x", file_text="file\n")
    call(command="create", path="/memories/w.txt", file_text="w\n")
    before = head(vault_path)
    call(command="delete", path="/memories/x")
    call(command="create", path="/memories/x/y.txt", file_text="inside\n")
    assert changes(vault.changes(before)) == [
        ("/memories/x", "deleted", "file\n", None),
        ("/memories/x/y.txt", "added", None, "inside\n"),
    ]
    assert changes(vault.changes("main", before)) == [
        ("/memories/x", "added", None, "file\n"),
        ("/memories/x/y.txt", "deleted", "inside\n", None),
    ]
    assert changes(vault.changes(before, path="/memories/x")) == changes(vault.changes(before))


def test_diff_of_an_unknown_version_is_not_found(vault: Vault, pair: tuple[str, str]) -> None:
    with pytest.raises(NotFoundError):
        vault.diff("f" * 40)
    with pytest.raises(NotFoundError):
        vault.changes(pair[0], "main~99")


# -- restore ---------------------------------------------------------------------


@pytest.fixture
def five(vault: Vault, vault_path: Path, call, clock: FakeClock) -> list[str]:
    """v1 a=1; v2 +b; v3 a=2; v4 +c/d; v5 -b."""
    steps: list[dict[str, Any]] = [
        dict(command="create", path="/memories/a.txt", file_text="1\n"),
        dict(command="create", path="/memories/b.txt", file_text="bee\n"),
        dict(command="str_replace", path="/memories/a.txt", old_str="1", new_str="2"),
        dict(command="create", path="/memories/c/d.txt", file_text="dee\n"),
        dict(command="delete", path="/memories/b.txt"),
    ]
    made = []
    for params in steps:
        clock.advance(60)
        call(**params)
        made.append(head(vault_path))
    return made


def test_restore_whole_vault_is_a_new_commit_with_its_provenance(
    vault: Vault, vault_path: Path, five: list[str], clock: FakeClock
) -> None:
    _v1, v2, _v3, _v4, v5 = five
    clock.advance(60)
    version = vault.restore(v2, actor="operator", session="incident-7")
    assert version is not None
    assert commit_count(vault_path) == 6
    assert head(vault_path) == version.id
    assert git(vault_path, "rev-parse", "main~1").strip() == v5
    assert memory(vault) == {"/memories/a.txt": "1\n", "/memories/b.txt": "bee\n"}
    assert version.command == "restore"
    assert version.restored_from == v2
    assert version.actor == "operator" and version.session == "incident-7"
    assert version.time.timestamp() == clock.now
    assert restored_from_trailer(vault_path) == v2
    assert git(vault_path, "log", "-1", "--format=%an|%cn").strip() == "operator|vaultmem"
    assert git(vault_path, "log", "-1", "--format=%(trailers:key=Vaultmem-Command,valueonly)").strip() == "restore"
    listed = vault.history(limit=1)[0]
    assert (listed.id, listed.command, listed.restored_from, listed.actor) == (version.id, "restore", v2, "operator")
    assert vault.resolve(version.id).restored_from == v2
    assert vault.verify().ok


@pytest.mark.parametrize("form", ["short", "revision", "time", "time-text"])
def test_restore_records_the_full_id_whatever_form_at_takes(
    vault: Vault, vault_path: Path, five: list[str], clock: FakeClock, form: str
) -> None:
    v2 = five[1]
    when = vault.resolve(v2).time
    at: Any = {
        "short": v2[:7],
        "revision": "main~3",
        "time": when,
        "time-text": when.strftime("%Y-%m-%d %H:%M:%S"),
    }[form]
    version = vault.restore(at, actor="operator")
    assert version is not None and version.restored_from == v2
    assert restored_from_trailer(vault_path) == v2
    assert memory(vault) == {"/memories/a.txt": "1\n", "/memories/b.txt": "bee\n"}


def test_restore_one_path_leaves_the_rest_alone(vault: Vault, vault_path: Path, five: list[str]) -> None:
    v1 = five[0]
    d_blob = git(vault_path, "rev-parse", "main:memories/c/d.txt")
    version = vault.restore(v1, path="/memories/a.txt", actor="operator")
    assert version is not None
    assert version.command == "restore" and version.restored_from == v1
    assert version.paths == ("/memories/a.txt",)
    assert memory(vault) == {"/memories/a.txt": "1\n", "/memories/c/d.txt": "dee\n"}
    assert git(vault_path, "rev-parse", "main:memories/c/d.txt") == d_blob
    assert git(vault_path, "rev-parse", "main:memories/a.txt") == git(vault_path, "rev-parse", f"{v1}:memories/a.txt")


def test_restore_of_a_path_missing_then_removes_it(vault: Vault, vault_path: Path, five: list[str]) -> None:
    v2 = five[1]
    version = vault.restore(v2, path="/memories/c", actor="operator")
    assert version is not None
    assert memory(vault) == {"/memories/a.txt": "2\n"}
    assert git(vault_path, "ls-tree", "-r", "--name-only", "main").split() == ["memories/a.txt"]
    # And a deleted path comes back.
    assert vault.restore(v2, path="/memories/b.txt") is not None
    assert memory(vault) == {"/memories/a.txt": "2\n", "/memories/b.txt": "bee\n"}


def test_restore_that_changes_nothing_makes_no_commit(vault: Vault, vault_path: Path, five: list[str]) -> None:
    v1, _v2, v3, _v4, v5 = five
    assert vault.restore(v5) is None
    assert vault.restore("main") is None
    assert vault.restore(v3, path="/memories/a.txt") is None  # a.txt has been "2" since v3
    assert vault.restore(v1, path="/memories/b.txt") is None  # missing then and now
    assert head(vault_path) == v5
    assert commit_count(vault_path) == 5


def test_restore_of_an_invalid_path_commits_nothing(vault: Vault, vault_path: Path, five: list[str]) -> None:
    for bad in ["/etc/passwd", "/memories/../x", "memories/a.txt"]:
        with pytest.raises(InvalidPathError):
            vault.restore(five[0], path=bad)
    assert head(vault_path) == five[-1]


def test_restore_of_an_unknown_version_commits_nothing(vault: Vault, vault_path: Path, five: list[str]) -> None:
    keyring = git(vault_path, "rev-parse", "refs/heads/vaultmem-keyring").strip()
    for bad in ["f" * 40, "main~9", "2000-01-01", "vaultmem-keyring", keyring]:
        with pytest.raises(NotFoundError):
            vault.restore(bad)
    assert head(vault_path) == five[-1]


# -- undo ------------------------------------------------------------------------


def test_undo_one_brings_back_the_previous_version(vault: Vault, vault_path: Path, five: list[str]) -> None:
    v4 = five[3]
    version = vault.undo(actor="operator", session="incident-8")
    assert version is not None
    assert version.command == "undo"
    assert version.restored_from == v4
    assert version.actor == "operator" and version.session == "incident-8"
    assert restored_from_trailer(vault_path) == v4
    assert git(vault_path, "log", "-1", "--format=%an").strip() == "operator"
    assert memory(vault) == {"/memories/a.txt": "2\n", "/memories/b.txt": "bee\n", "/memories/c/d.txt": "dee\n"}
    assert commit_count(vault_path) == 6


def test_undo_three_goes_back_three_versions(vault: Vault, vault_path: Path, five: list[str]) -> None:
    v2 = five[1]
    version = vault.undo(3, actor="operator")
    assert version is not None and version.restored_from == v2
    assert memory(vault) == {"/memories/a.txt": "1\n", "/memories/b.txt": "bee\n"}
    assert git(vault_path, "rev-parse", "main^{tree}") == git(vault_path, "rev-parse", f"{v2}^{{tree}}")


def test_undo_of_every_version_empties_the_memory(vault: Vault, vault_path: Path, five: list[str]) -> None:
    version = vault.undo(5, actor="operator")
    assert version is not None and version.command == "undo"
    assert vault.listing() == []
    assert git(vault_path, "ls-tree", "-r", "main") == ""
    assert commit_count(vault_path) == 6
    with pytest.raises(NotFoundError):
        vault.read("/memories/a.txt")
    # The emptied memory is writable and the old text is still in history.
    VaultMemoryTool(vault, actor="support-bot").call(
        {"command": "create", "path": "/memories/a.txt", "file_text": "again\n"}
    )
    assert vault.read("/memories/a.txt") == "again\n"
    assert vault.read("/memories/a.txt", at=five[0]) == "1\n"
    assert_fsck_strict_clean(vault_path)


@pytest.mark.parametrize("n", [0, -1, 6, 100, "2", 1.5])
def test_undo_out_of_range_is_a_vault_error_without_a_commit(
    vault: Vault, vault_path: Path, five: list[str], n: object
) -> None:
    with pytest.raises(VaultError) as info:
        vault.undo(n)  # type: ignore[arg-type]
    assert str(info.value).startswith("Error: ")
    assert head(vault_path) == five[-1]
    assert commit_count(vault_path) == 5


def test_undo_on_a_vault_without_versions_is_a_vault_error(vault: Vault, vault_path: Path) -> None:
    with pytest.raises(VaultError):
        vault.undo()
    assert commit_count(vault_path) == 0


def test_undo_that_changes_nothing_makes_no_commit(vault: Vault, vault_path: Path, five: list[str]) -> None:
    first = vault.undo(actor="operator")  # head now has v4's tree, and main~2 is v4
    assert first is not None
    assert vault.undo(2, actor="operator") is None
    assert head(vault_path) == first.id
    assert commit_count(vault_path) == 6


def test_undo_of_an_undo_redoes(vault: Vault, vault_path: Path, five: list[str]) -> None:
    v5 = five[-1]
    vault.undo(actor="operator")
    redo = vault.undo(actor="operator")
    assert redo is not None and redo.restored_from == v5
    assert git(vault_path, "rev-parse", "main^{tree}") == git(vault_path, "rev-parse", f"{v5}^{{tree}}")
    assert memory(vault) == {"/memories/a.txt": "2\n", "/memories/c/d.txt": "dee\n"}


def test_history_stays_append_only_through_restores_and_undos(
    vault: Vault, vault_path: Path, five: list[str], call
) -> None:
    seen = list(five)
    operations = [
        lambda: vault.restore(five[0], actor="operator"),
        lambda: vault.undo(2, actor="operator"),
        lambda: vault.restore(five[0], path="/memories/a.txt", actor="operator"),
        lambda: call(command="create", path="/memories/e.txt", file_text="e\n"),
        lambda: vault.undo(1, actor="operator"),
        lambda: vault.restore("main~4", path="/memories/b.txt", actor="operator"),
    ]
    for operation in operations:
        before = commit_count(vault_path)
        operation()
        assert commit_count(vault_path) == before + 1
        reachable = set(git(vault_path, "rev-list", "main").split())
        assert set(seen) <= reachable
        seen.append(head(vault_path))
    assert [v.command for v in vault.history(limit=6)] == ["restore", "undo", "create", "restore", "undo", "restore"]
    assert_fsck_strict_clean(vault_path)
    assert vault.verify().ok


def test_changes_from_the_empty_memory_list_every_file_of_a_version_as_added(vault: Vault, call) -> None:
    call(command="create", path="/memories/a.txt", file_text="one\n")
    call(command="create", path="/memories/d/b.txt", file_text="two\n")
    found = vault.changes(None, "main~1")
    assert [(c.path, c.status, c.old, c.new) for c in found] == [("/memories/a.txt", "added", None, "one\n")]
    assert vault.diff(None, path="/memories/d") == "--- /dev/null\n+++ b/memories/d/b.txt\n@@ -0,0 +1 @@\n+two\n"


def test_a_folder_rename_pairs_each_moved_file_and_keeps_other_changes() -> None:
    found = [
        FileChange("/memories/a/x.txt", "deleted", "x\n", None),
        FileChange("/memories/a/y.txt", "deleted", "y\n", None),
        FileChange("/memories/b/x.txt", "added", None, "x\n"),
        FileChange("/memories/b/y.txt", "added", None, "y\n"),
        FileChange("/memories/c.txt", "added", None, "c\n"),
    ]
    paired = with_renames(found, "/memories/a", "/memories/b")
    assert [(c.path, c.status, c.moved_from) for c in paired] == [
        ("/memories/b/x.txt", "renamed", "/memories/a/x.txt"),
        ("/memories/b/y.txt", "renamed", "/memories/a/y.txt"),
        ("/memories/c.txt", "added", None),
    ]
    assert unified(paired).startswith(
        "rename from memories/a/x.txt\nrename to memories/b/x.txt\nrename from memories/a/y.txt\n"
    )
