"""Invariants 2, 3 and 6: one commit per mutation, append-only history, and a
vault that stock git reads as an ordinary audit log."""

from __future__ import annotations

import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest
from anthropic.lib.tools import ToolError
from conftest import commit_count, git

from vaultmem import NotFoundError, Vault, VaultMemoryTool

SEP = "\x1f"

# (params, command, paths in the trailers/subject)
SESSION = [
    (
        dict(command="create", path="/memories/preferences.txt", file_text="tea\n"),
        "create",
        ["/memories/preferences.txt"],
    ),
    (
        dict(command="str_replace", path="/memories/preferences.txt", old_str="tea", new_str="coffee"),
        "str_replace",
        ["/memories/preferences.txt"],
    ),
    (
        dict(command="insert", path="/memories/preferences.txt", insert_line=1, insert_text="no sugar"),
        "insert",
        ["/memories/preferences.txt"],
    ),
    (dict(command="create", path="/memories/notes/a.md", file_text="# A\n"), "create", ["/memories/notes/a.md"]),
    (
        dict(command="rename", old_path="/memories/notes", new_path="/memories/archive"),
        "rename",
        ["/memories/notes", "/memories/archive"],
    ),
    (
        dict(command="str_replace", path="/memories/preferences.txt", old_str="coffee", new_str="coffee"),
        "str_replace",
        ["/memories/preferences.txt"],
    ),
    (dict(command="delete", path="/memories/archive"), "delete", ["/memories/archive"]),
]


def run_session(call, clock) -> list[float]:
    times = []
    for params, _command, _paths in SESSION:
        clock.advance(37)
        times.append(clock.now)
        call(**params)
    return times


def log_records(vault_path: Path, *extra: str) -> list[list[str]]:
    fmt = SEP.join(
        [
            "%H",
            "%an",
            "%cn",
            "%ce",
            "%at",
            "%s",
            "%(trailers:key=Vaultmem-Command,valueonly)",
            "%(trailers:key=Vaultmem-Path,valueonly,separator=%x2C)",
            "%(trailers:key=Vaultmem-Actor,valueonly)",
            "%(trailers:key=Vaultmem-Session,valueonly)",
        ]
    )
    out = git(vault_path, "log", f"--format={fmt}%x1e", *extra)
    return [[field.strip() for field in rec.strip("\n").split(SEP)] for rec in out.split("\x1e") if rec.strip()]


def test_fsck_strict_is_clean_after_a_varied_session(vault: Vault, vault_path: Path, call, fail, clock) -> None:
    run_session(call, clock)
    fail(command="create", path="/memories/preferences.txt", file_text="again")
    vault.restore(vault.history()[-1].id, actor="operator")
    result = subprocess.run(["git", "-C", str(vault_path), "fsck", "--strict", "--no-progress"], capture_output=True)
    assert result.returncode == 0, result.stderr
    assert b"error" not in result.stderr.lower()


def test_git_log_shows_one_commit_per_mutation_in_order(vault_path: Path, call, clock) -> None:
    times = run_session(call, clock)
    records = log_records(vault_path, "--reverse")
    assert len(records) == len(SESSION) == commit_count(vault_path)
    for record, (_params, command, paths), when in zip(records, SESSION, times, strict=True):
        _oid, author, committer, committer_email, at, subject, cmd, path_list, actor, session = record
        assert author == actor == "support-bot"
        assert (committer, committer_email) == ("vaultmem", "vaultmem@localhost")
        assert int(at) == int(when)
        assert subject == f"memory: {command} " + " -> ".join(paths)
        assert cmd == command
        assert path_list.split(",") == paths
        assert session == "sess-42"


def test_commit_message_matches_design_exactly(vault_path: Path, call) -> None:
    call(command="create", path="/memories/preferences.txt", file_text="tea")
    call(command="str_replace", path="/memories/preferences.txt", old_str="tea", new_str="coffee")
    assert git(vault_path, "log", "-1", "--format=%B") == (
        "memory: str_replace /memories/preferences.txt\n"
        "\n"
        "Vaultmem-Command: str_replace\n"
        "Vaultmem-Path: /memories/preferences.txt\n"
        "Vaultmem-Actor: support-bot\n"
        "Vaultmem-Session: sess-42\n"
        "\n"
    )
    trailers = git(vault_path, "log", "-1", "--format=%(trailers:only)")
    assert trailers.strip().splitlines() == [
        "Vaultmem-Command: str_replace",
        "Vaultmem-Path: /memories/preferences.txt",
        "Vaultmem-Actor: support-bot",
        "Vaultmem-Session: sess-42",
    ]


def test_rename_records_old_then_new_path_trailers(vault_path: Path, call) -> None:
    call(command="create", path="/memories/a.txt", file_text="x")
    call(command="rename", old_path="/memories/a.txt", new_path="/memories/b.txt")
    paths = git(vault_path, "log", "-1", "--format=%(trailers:key=Vaultmem-Path,valueonly)").split()
    assert paths == ["/memories/a.txt", "/memories/b.txt"]
    assert git(vault_path, "log", "-1", "--format=%s").strip() == "memory: rename /memories/a.txt -> /memories/b.txt"


def test_auditor_questions_answered_by_grep_and_author(vault: Vault, vault_path: Path, call, clock) -> None:
    run_session(call, clock)
    other = VaultMemoryTool(vault, actor="night-batch", session="sess-99")
    other.call({"command": "create", "path": "/memories/batch.txt", "file_text": "run"})
    by_author = git(vault_path, "log", "--author=night-batch", "--format=%s").splitlines()
    assert by_author == ["memory: create /memories/batch.txt"]
    assert len(git(vault_path, "log", "--author=support-bot", "--format=%H").split()) == len(SESSION)
    replaced = git(vault_path, "log", "--grep=^Vaultmem-Command: str_replace$", "--format=%H").split()
    assert len(replaced) == 2
    in_session = git(vault_path, "log", "--grep=Vaultmem-Session: sess-99", "--format=%(trailers:key=Vaultmem-Actor)")
    assert in_session.strip() == "Vaultmem-Actor: night-batch"
    touched = git(vault_path, "log", "--format=%H", "--", "memories/preferences.txt").split()
    assert len(touched) == 4


def test_git_log_stat_shows_which_memory_files_changed(vault_path: Path, call, clock) -> None:
    run_session(call, clock)
    out = git(vault_path, "log", "--reverse", "--no-renames", "--name-status", "--format=%x1e%s")
    changes = [rec.strip().splitlines()[1:] for rec in out.split("\x1e") if rec.strip()]
    assert [[line for line in c if line] for c in changes] == [
        ["A\tmemories/preferences.txt"],
        ["M\tmemories/preferences.txt"],
        ["M\tmemories/preferences.txt"],
        ["A\tmemories/notes/a.md"],
        ["A\tmemories/archive/a.md", "D\tmemories/notes/a.md"],
        ["M\tmemories/preferences.txt"],
        ["D\tmemories/archive/a.md"],
    ]
    stat = git(vault_path, "log", "-1", "--stat", "--format=%s", "HEAD~1")
    assert "memories/preferences.txt" in stat


def test_failed_commands_add_no_commit(vault_path: Path, call, fail) -> None:
    call(command="create", path="/memories/a.txt", file_text="one\none\n")
    head = git(vault_path, "rev-parse", "main")
    failures = [
        dict(command="create", path="/memories/a.txt", file_text="dup"),
        dict(command="create", path="/memories/a.txt/x", file_text="under a file"),
        dict(command="create", path="/etc/passwd", file_text="x"),
        dict(command="str_replace", path="/memories/a.txt", old_str="one", new_str="two"),
        dict(command="str_replace", path="/memories/a.txt", old_str="zzz", new_str="two"),
        dict(command="str_replace", path="/memories/missing.txt", old_str="a", new_str="b"),
        dict(command="insert", path="/memories/a.txt", insert_line=99, insert_text="x"),
        dict(command="delete", path="/memories/missing"),
        dict(command="delete", path="/memories"),
        dict(command="rename", old_path="/memories/a.txt", new_path="/memories/a.txt"),
        dict(command="rename", old_path="/memories/nope", new_path="/memories/b.txt"),
        dict(command="explode", path="/memories/a.txt"),
        dict(command="create", path="/memories/big.txt", file_text="x" * 102_401),
    ]
    for params in failures:
        fail(**params)
        assert git(vault_path, "rev-parse", "main") == head, params
    assert commit_count(vault_path) == 1


def test_views_add_no_commit(vault_path: Path, call) -> None:
    call(command="view", path="/memories")
    assert commit_count(vault_path) == 0
    assert git(vault_path, "rev-parse", "--verify", "-q", "refs/heads/main", check=False) == ""
    call(command="create", path="/memories/a.txt", file_text="one\ntwo\n")
    for _ in range(3):
        call(command="view", path="/memories")
        call(command="view", path="/memories/a.txt", view_range=[1, 1])
    assert commit_count(vault_path) == 1


def test_history_matches_git_log(vault: Vault, vault_path: Path, call, clock) -> None:
    times = run_session(call, clock)
    versions = vault.history()
    records = log_records(vault_path)
    assert [v.id for v in versions] == [r[0] for r in records]
    for version, (_params, command, paths), when in zip(versions, reversed(SESSION), reversed(times), strict=True):
        assert version.command == command
        assert list(version.paths) == paths
        assert version.actor == "support-bot"
        assert version.session == "sess-42"
        assert version.time == datetime.fromtimestamp(int(when), tz=timezone.utc)
    assert [v.id for v in vault.history(limit=2)] == [r[0] for r in records[:2]]
    touched = [v.command for v in vault.history(path="/memories/preferences.txt")]
    assert touched == ["str_replace", "insert", "str_replace", "create"]


def test_clone_of_the_vault_opens_with_the_same_key(tmp_path: Path, vault: Vault, key: str, call, clock) -> None:
    run_session(call, clock)
    call(command="create", path="/memories/kept.txt", file_text="survives the clone\n")
    for flag in ("--bare", "--mirror"):
        clone = tmp_path / f"clone{flag}.vault"
        subprocess.run(["git", "clone", "-q", flag, str(vault.path), str(clone)], check=True)
        copy = Vault.open(clone, key=key)
        assert copy.read("/memories/kept.txt") == "survives the clone\n"
        assert copy.read("/memories/preferences.txt") == vault.read("/memories/preferences.txt")
        assert [v.id for v in copy.history()] == [v.id for v in vault.history()]
        assert copy.verify().ok
    # A plain clone works too, and its checkout holds only ciphertext.
    plain = tmp_path / "checkout"
    subprocess.run(["git", "clone", "-q", str(vault.path), str(plain)], check=True)
    checked_out = (plain / "memories" / "kept.txt").read_bytes()
    assert checked_out.startswith(b"vaultmem-blob 2 ")
    assert b"survives the clone" not in checked_out
    assert git(plain, "rev-parse", "HEAD") == git(vault.path, "rev-parse", "main")


def test_a_cloned_vault_is_writable(tmp_path: Path, vault: Vault, key: str, call) -> None:
    call(command="create", path="/memories/kept.txt", file_text="original\n")
    clone = tmp_path / "clone.vault"
    subprocess.run(["git", "clone", "-q", "--bare", str(vault.path), str(clone)], check=True)
    replica = VaultMemoryTool(Vault.open(clone, key=key), actor="replica")
    replica.call({"command": "str_replace", "path": "/memories/kept.txt", "old_str": "original", "new_str": "replica"})
    assert Vault.open(clone, key=key).read("/memories/kept.txt") == "replica\n"
    assert vault.read("/memories/kept.txt") == "original\n"
    assert commit_count(clone) == 2 and commit_count(vault.path) == 1


# -- restore and read(at=) ------------------------------------------------------


@pytest.fixture
def versions(vault: Vault, call, clock) -> list[str]:
    """v0: a=1; v1: a=2, b; v2: a=2 (b deleted), c/d."""
    call(command="create", path="/memories/a.txt", file_text="1\n")
    v0 = vault.history()[0].id
    clock.advance(10)
    call(command="str_replace", path="/memories/a.txt", old_str="1", new_str="2")
    call(command="create", path="/memories/b.txt", file_text="bee\n")
    v1 = vault.history()[0].id
    clock.advance(10)
    call(command="delete", path="/memories/b.txt")
    call(command="create", path="/memories/c/d.txt", file_text="dee\n")
    v2 = vault.history()[0].id
    return [v0, v1, v2]


def test_read_at_returns_the_text_of_that_version(vault: Vault, versions: list[str]) -> None:
    v0, v1, v2 = versions
    assert vault.read("/memories/a.txt", at=v0) == "1\n"
    assert vault.read("/memories/a.txt", at=v1) == "2\n"
    assert vault.read("/memories/b.txt", at=v1) == "bee\n"
    assert vault.read("/memories/a.txt") == "2\n"
    with pytest.raises(NotFoundError):
        vault.read("/memories/b.txt", at=v2)
    with pytest.raises(NotFoundError):
        vault.read("/memories/b.txt")
    with pytest.raises(NotFoundError):
        vault.read("/memories/a.txt", at="0" * 40)
    with pytest.raises(NotFoundError):
        vault.read("/memories/a.txt", at="not-a-version")


def test_restore_whole_vault_adds_a_commit_and_keeps_history(
    vault: Vault, vault_path: Path, versions: list[str], tool
) -> None:
    v0, _v1, v2 = versions
    before = commit_count(vault_path)
    restored = vault.restore(v0, actor="operator", session="incident-7")
    assert restored is not None
    assert commit_count(vault_path) == before + 1
    assert git(vault_path, "rev-parse", "main").strip() == restored.id
    assert restored.command == "restore" and restored.actor == "operator" and restored.session == "incident-7"
    assert git(vault_path, "log", "-1", "--format=%(trailers:key=Vaultmem-Restored-From,valueonly)").strip() == v0
    assert git(vault_path, "log", "-1", "--format=%an").strip() == "operator"
    for old in versions:
        git(vault_path, "merge-base", "--is-ancestor", old, "main")
    assert vault.read("/memories/a.txt") == "1\n"
    assert git(vault_path, "ls-tree", "-r", "--name-only", "main").split() == ["memories/a.txt"]
    assert git(vault_path, "rev-parse", "main^{tree}") == git(vault_path, "rev-parse", f"{v0}^{{tree}}")
    # The restore is itself history: the state before it is still readable.
    assert vault.read("/memories/c/d.txt", at=v2) == "dee\n"
    assert "c/" not in tool.call({"command": "view", "path": "/memories"})


def test_restore_that_changes_nothing_makes_no_commit(vault: Vault, vault_path: Path, versions: list[str]) -> None:
    head = git(vault_path, "rev-parse", "main")
    assert vault.restore(versions[2]) is None
    assert vault.restore(versions[0], path="/memories/c") is not None  # c did not exist at v0: removed
    head = git(vault_path, "rev-parse", "main")
    assert vault.restore(versions[0], path="/memories/c") is None
    assert vault.restore(versions[1], path="/memories/a.txt") is None  # a.txt is already "2\n"
    assert git(vault_path, "rev-parse", "main") == head


def test_restore_of_one_path_leaves_the_rest(vault: Vault, vault_path: Path, versions: list[str]) -> None:
    v0, v1, _v2 = versions
    restored = vault.restore(v1, path="/memories/b.txt", actor="operator")
    assert restored is not None
    assert restored.paths == ("/memories/b.txt",)
    assert vault.read("/memories/b.txt") == "bee\n"
    assert vault.read("/memories/c/d.txt") == "dee\n"
    vault.restore(v0, path="/memories/a.txt")
    assert vault.read("/memories/a.txt") == "1\n"
    assert vault.read("/memories/b.txt") == "bee\n"
    assert git(vault_path, "log", "-1", "--format=%s").strip() == "memory: restore /memories/a.txt"


def test_restore_of_a_path_missing_at_that_version_removes_it(
    vault: Vault, vault_path: Path, versions: list[str], call
) -> None:
    v0 = versions[0]
    assert vault.restore(v0, path="/memories/c/d.txt") is not None
    with pytest.raises(NotFoundError):
        vault.read("/memories/c/d.txt")
    assert "/memories/c" not in call(command="view", path="/memories")
    assert git(vault_path, "ls-tree", "-r", "--name-only", "main").split() == ["memories/a.txt"]
    assert vault.verify().ok


def test_restore_refuses_an_unknown_version_without_committing(
    vault: Vault, vault_path: Path, versions: list[str]
) -> None:
    head = git(vault_path, "rev-parse", "main")
    with pytest.raises(NotFoundError):
        vault.restore("f" * 40)
    assert git(vault_path, "rev-parse", "main") == head


def test_tool_calls_after_restore_build_on_the_restored_state(vault: Vault, versions: list[str], tool) -> None:
    vault.restore(versions[1])
    tool.call({"command": "str_replace", "path": "/memories/b.txt", "old_str": "bee", "new_str": "wasp"})
    assert vault.read("/memories/b.txt") == "wasp\n"
    with pytest.raises(ToolError):
        tool.call({"command": "view", "path": "/memories/c/d.txt"})
    assert [v.command for v in vault.history(limit=2)] == ["str_replace", "restore"]
