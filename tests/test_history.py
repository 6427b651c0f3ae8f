"""The audit view of a vault: history() and its filters, and reading the memory
as it was at any version (resolve, read and listing with ``at=``)."""

from __future__ import annotations

import os
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pygit2
import pytest
from conftest import FakeClock, commit_count, git

from vaultmem import InvalidPathError, NotFoundError, Vault, VaultError, VaultMemoryTool
from vaultmem.core.paths import MemoryPath
from vaultmem.core.versions import format_message, parse_trailers

UTC = timezone.utc


def at(*fields: int) -> datetime:
    return datetime(*fields, tzinfo=UTC)  # type: ignore[misc]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(at(2026, 10, 31, 12, 0).timestamp())


def agent(vault: Vault, actor: str, session: str | None) -> VaultMemoryTool:
    return VaultMemoryTool(vault, actor=actor, session=session)


def head(vault_path: Path) -> str:
    return git(vault_path, "rev-parse", "main").strip()


def ids(versions: list[Any]) -> list[str]:
    return [v.id for v in versions]


def vault_files(folder: Path) -> dict[str, bytes]:
    """Every file under the vault folder with its bytes."""
    found: dict[str, bytes] = {}
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = Path(root) / name
            found[str(path.relative_to(folder))] = path.read_bytes()
    return found


# -- history -------------------------------------------------------------------


@pytest.fixture
def log(vault: Vault, vault_path: Path, clock: FakeClock) -> dict[str, str]:
    """Six versions by two actors over two days:

    c1 2026-10-31 23:30  support-bot sess-1  create      notes.txt
    c2 2026-11-01 00:00  support-bot sess-1  create      team/a.md
    c3 2026-11-01 09:00  night-batch sess-2  str_replace notes.txt
    c4 2026-11-01 09:30  night-batch sess-2  create      team/b.md
    c5 2026-11-02 10:00  support-bot sess-3  delete      team/a.md
    c6 2026-11-02 10:00  support-bot sess-3  insert      notes.txt   (same second as c5)
    """
    bot1 = agent(vault, "support-bot", "sess-1")
    batch = agent(vault, "night-batch", "sess-2")
    bot3 = agent(vault, "support-bot", "sess-3")
    steps: list[tuple[str, datetime, VaultMemoryTool, dict[str, Any]]] = [
        ("c1", at(2026, 10, 31, 23, 30), bot1, dict(command="create", path="/memories/notes.txt", file_text="tea\n")),
        ("c2", at(2026, 11, 1, 0, 0), bot1, dict(command="create", path="/memories/team/a.md", file_text="# A\n")),
        (
            "c3",
            at(2026, 11, 1, 9, 0),
            batch,
            dict(command="str_replace", path="/memories/notes.txt", old_str="tea", new_str="coffee"),
        ),
        ("c4", at(2026, 11, 1, 9, 30), batch, dict(command="create", path="/memories/team/b.md", file_text="# B\n")),
        ("c5", at(2026, 11, 2, 10, 0), bot3, dict(command="delete", path="/memories/team/a.md")),
        (
            "c6",
            at(2026, 11, 2, 10, 0),
            bot3,
            dict(command="insert", path="/memories/notes.txt", insert_line=1, insert_text="milk"),
        ),
    ]
    made: dict[str, str] = {}
    for name, when, tool, params in steps:
        clock.now = when.timestamp()
        tool.call(params)
        made[name] = head(vault_path)
    return made


def names(log: dict[str, str], versions: list[Any]) -> list[str]:
    by_id = {oid: name for name, oid in log.items()}
    return [by_id[v.id] for v in versions]


def test_history_is_newest_first_and_matches_git_log(vault: Vault, vault_path: Path, log: dict[str, str]) -> None:
    versions = vault.history()
    assert names(log, versions) == ["c6", "c5", "c4", "c3", "c2", "c1"]
    assert ids(versions) == git(vault_path, "log", "--format=%H", "main").split()


def test_history_version_carries_every_field(vault: Vault, log: dict[str, str]) -> None:
    by_name = dict(zip(["c6", "c5", "c4", "c3", "c2", "c1"], vault.history(), strict=True))
    c3 = by_name["c3"]
    assert c3.id == log["c3"] and len(c3.id) == 40
    assert c3.time == at(2026, 11, 1, 9, 0)
    assert c3.time.utcoffset() == timedelta(0)
    assert c3.actor == "night-batch"
    assert c3.session == "sess-2"
    assert c3.command == "str_replace"
    assert c3.paths == ("/memories/notes.txt",)
    assert c3.restored_from is None
    assert c3.message.startswith("memory: str_replace /memories/notes.txt\n")
    assert "Vaultmem-Actor: night-batch" in c3.message
    assert by_name["c6"].session == "sess-3"
    assert by_name["c6"].command == "insert"
    assert by_name["c6"].actor == "support-bot"
    assert by_name["c5"].command == "delete" and by_name["c5"].paths == ("/memories/team/a.md",)
    assert [v.time for v in vault.history()] == [
        at(2026, 11, 2, 10, 0),
        at(2026, 11, 2, 10, 0),
        at(2026, 11, 1, 9, 30),
        at(2026, 11, 1, 9, 0),
        at(2026, 11, 1, 0, 0),
        at(2026, 10, 31, 23, 30),
    ]


def test_history_shows_no_session_when_none_was_given(vault: Vault, log: dict[str, str]) -> None:
    made = vault.restore(log["c1"], actor="operator", session=None)
    assert made is not None and made.session is None
    latest = vault.history(limit=1)[0]
    assert (latest.id, latest.session, latest.actor) == (made.id, None, "operator")
    assert "Vaultmem-Session" not in latest.message
    assert vault.history(actor="operator", session="sess-3") == []


def test_history_of_a_new_vault_is_empty(vault: Vault) -> None:
    assert vault.history() == []
    assert vault.history(since="2026-11-01", actor="anyone") == []


@pytest.mark.parametrize(
    "since",
    [
        at(2026, 11, 1, 9, 0),
        "2026-11-01 09:00",
        "2026-11-01T09:00:00",
        "2026-11-01T09:00:00Z",
        "2026-11-01T10:00:00+01:00",
        "2026-11-01T04:00:00-05:00",
        datetime(2026, 11, 1, 10, 0, tzinfo=timezone(timedelta(hours=1))),
    ],
)
def test_since_is_an_inclusive_lower_bound(vault: Vault, log: dict[str, str], since: object) -> None:
    assert names(log, vault.history(since=since)) == ["c6", "c5", "c4", "c3"]


@pytest.mark.parametrize(
    "until",
    [
        at(2026, 11, 1, 9, 0),
        "2026-11-01 09:00",
        "2026-11-01T09:00:00Z",
        "2026-11-01T10:00:00+01:00",
        datetime(2026, 11, 1, 4, 0, tzinfo=timezone(timedelta(hours=-5))),
    ],
)
def test_until_is_an_inclusive_upper_bound(vault: Vault, log: dict[str, str], until: object) -> None:
    assert names(log, vault.history(until=until)) == ["c3", "c2", "c1"]


def test_since_a_date_starts_at_midnight_utc(vault: Vault, log: dict[str, str]) -> None:
    # c2 is exactly at midnight: the bound includes it; c1, half an hour earlier, is out.
    assert names(log, vault.history(since="2026-11-01")) == ["c6", "c5", "c4", "c3", "c2"]
    assert names(log, vault.history(since="2026-11-02")) == ["c6", "c5"]


def test_until_a_date_includes_that_whole_day(vault: Vault, log: dict[str, str]) -> None:
    """``until="2026-11-01"`` means through the end of that day (UTC), never
    its midnight, which would silently drop the day itself."""
    assert names(log, vault.history(until="2026-11-01")) == ["c4", "c3", "c2", "c1"]
    assert names(log, vault.history(until="2026-10-31")) == ["c1"]
    assert names(log, vault.history(since="2026-11-01", until="2026-11-01")) == ["c4", "c3", "c2"]
    assert names(log, vault.history(until="2026-11-01 00:00")) == ["c2", "c1"]  # a time is that moment


def test_since_and_until_together_bound_a_window(vault: Vault, log: dict[str, str]) -> None:
    assert names(log, vault.history(since="2026-11-01 09:00", until="2026-11-01 09:30")) == ["c4", "c3"]
    assert names(log, vault.history(since=at(2026, 11, 1, 9, 1), until=at(2026, 11, 1, 9, 29))) == []
    assert names(log, vault.history(since="2026-11-02 10:00", until="2026-11-02 10:00")) == ["c6", "c5"]


def test_actor_session_and_command_filters_match_exactly(vault: Vault, log: dict[str, str]) -> None:
    assert names(log, vault.history(actor="night-batch")) == ["c4", "c3"]
    assert names(log, vault.history(actor="support-bot")) == ["c6", "c5", "c2", "c1"]
    assert names(log, vault.history(session="sess-1")) == ["c2", "c1"]
    assert names(log, vault.history(session="sess-3")) == ["c6", "c5"]
    assert names(log, vault.history(command="create")) == ["c4", "c2", "c1"]
    assert names(log, vault.history(command="insert")) == ["c6"]
    # Exact match, not a prefix or substring.
    assert vault.history(actor="support") == []
    assert vault.history(actor="Support-Bot") == []
    assert vault.history(session="sess") == []
    assert vault.history(command="str") == []


def test_filters_combine_with_and(vault: Vault, log: dict[str, str]) -> None:
    assert names(log, vault.history(actor="support-bot", since="2026-11-01")) == ["c6", "c5", "c2"]
    assert names(log, vault.history(actor="support-bot", command="create")) == ["c2", "c1"]
    assert names(log, vault.history(actor="night-batch", command="create", session="sess-2")) == ["c4"]
    assert names(log, vault.history(actor="night-batch", session="sess-1")) == []
    assert names(log, vault.history(path="/memories/notes.txt", actor="support-bot")) == ["c6", "c1"]
    assert names(log, vault.history(path="/memories/team", until="2026-11-01 23:59", command="create")) == [
        "c4",
        "c2",
    ]


def test_limit_applies_after_filtering(vault: Vault, log: dict[str, str]) -> None:
    assert names(log, vault.history(limit=2)) == ["c6", "c5"]
    assert names(log, vault.history(actor="night-batch", limit=1)) == ["c4"]
    assert names(log, vault.history(command="create", limit=2)) == ["c4", "c2"]
    assert names(log, vault.history(path="/memories/notes.txt", limit=2)) == ["c6", "c3"]
    assert names(log, vault.history(until="2026-11-01 09:00", limit=2)) == ["c3", "c2"]
    assert names(log, vault.history(session="sess-1", limit=10)) == ["c2", "c1"]
    assert vault.history(actor="support-bot", limit=0) == []


def test_path_filter_for_a_file_and_for_a_folder(vault: Vault, log: dict[str, str]) -> None:
    assert names(log, vault.history(path="/memories/notes.txt")) == ["c6", "c3", "c1"]
    assert names(log, vault.history(path="/memories/team")) == ["c5", "c4", "c2"]
    # A file that no longer exists still has its history, deletion included.
    assert names(log, vault.history(path="/memories/team/a.md")) == ["c5", "c2"]
    assert names(log, vault.history(path="/memories/team/b.md")) == ["c4"]
    assert vault.history(path="/memories/never.txt") == []
    assert names(log, vault.history(path="/memories")) == ["c6", "c5", "c4", "c3", "c2", "c1"]


@pytest.mark.parametrize(
    "bounds",
    [
        {"since": "the day after never"},
        {"since": "2026-13-01"},
        {"until": "11/01/2026"},
        {"until": "2026-11-01 25:00"},
        {"since": ""},
        {"since": 1790000000},
    ],
)
def test_bad_since_or_until_is_a_vault_error_and_changes_nothing(
    vault: Vault, vault_path: Path, log: dict[str, str], bounds: dict[str, Any]
) -> None:
    vault.close()  # the upkeep after the writes is done: the folder holds still while the test reads it
    before = vault_files(vault_path)
    with pytest.raises(VaultError) as info:
        vault.history(**bounds)
    assert str(info.value).startswith("Error: ")
    assert vault_files(vault_path) == before
    assert commit_count(vault_path) == 6


@pytest.mark.parametrize("limit", [-1, "3", 1.5])
def test_bad_limit_is_a_vault_error_and_changes_nothing(
    vault: Vault, vault_path: Path, log: dict[str, str], limit: object
) -> None:
    vault.close()  # the upkeep after the writes is done: the folder holds still while the test reads it
    before = vault_files(vault_path)
    with pytest.raises(VaultError):
        vault.history(limit=limit)  # type: ignore[arg-type]
    assert vault_files(vault_path) == before


def test_history_of_an_invalid_path_is_refused(vault: Vault, log: dict[str, str]) -> None:
    for bad in ["/etc/passwd", "/memories/../etc", "relative.txt"]:
        with pytest.raises(InvalidPathError):
            vault.history(path=bad)


# -- following a file across renames -------------------------------------------


def test_history_of_a_file_follows_it_across_renames(vault: Vault, vault_path: Path, call) -> None:
    made: dict[str, str] = {}

    def step(name: str, **params: Any) -> None:
        call(**params)
        made[name] = head(vault_path)

    step("f1", command="create", path="/memories/a.txt", file_text="one\n")
    step("f2", command="create", path="/memories/other.txt", file_text="unrelated\n")
    step("f3", command="str_replace", path="/memories/a.txt", old_str="one", new_str="two")
    step("f4", command="rename", old_path="/memories/a.txt", new_path="/memories/b.txt")
    step("f5", command="str_replace", path="/memories/other.txt", old_str="unrelated", new_str="still unrelated")
    step("f6", command="create", path="/memories/a.txt", file_text="a new file at the old name\n")
    step("f7", command="str_replace", path="/memories/b.txt", old_str="two", new_str="three")

    # One rename: the rename commit, and the older versions under the old name;
    # not the new file that later took the old name, not the unrelated file.
    assert names(made, vault.history(path="/memories/b.txt")) == ["f7", "f4", "f3", "f1"]

    step("f8", command="rename", old_path="/memories/b.txt", new_path="/memories/dir/c.txt")
    step("f9", command="str_replace", path="/memories/a.txt", old_str="new", new_str="newer")

    # Two renames.
    assert names(made, vault.history(path="/memories/dir/c.txt")) == ["f8", "f7", "f4", "f3", "f1"]
    assert names(made, vault.history(path="/memories/dir/c.txt", limit=3)) == ["f8", "f7", "f4"]
    assert names(made, vault.history(path="/memories/other.txt")) == ["f5", "f2"]
    # Following works with the other filters too (the older versions keep their own command).
    assert names(made, vault.history(path="/memories/dir/c.txt", command="str_replace")) == ["f7", "f3"]


def test_history_of_a_file_follows_a_rename_of_its_folder(vault: Vault, vault_path: Path, call) -> None:
    made: dict[str, str] = {}

    def step(name: str, **params: Any) -> None:
        call(**params)
        made[name] = head(vault_path)

    step("g1", command="create", path="/memories/notes/a.md", file_text="# A\n")
    step("g2", command="create", path="/memories/notes/other.md", file_text="# other\n")
    step("g3", command="str_replace", path="/memories/notes/a.md", old_str="# A", new_str="# AA")
    step("g4", command="rename", old_path="/memories/notes", new_path="/memories/archive")
    step("g5", command="str_replace", path="/memories/archive/a.md", old_str="AA", new_str="AAA")
    assert names(made, vault.history(path="/memories/archive/a.md")) == ["g5", "g4", "g3", "g1"]


# -- resolve, read and listing at a version --------------------------------------


@pytest.fixture
def timeline(vault: Vault, vault_path: Path, call, clock: FakeClock) -> list[str]:
    """t1 09:00 create a.txt "1"; t2 10:00 a.txt "2" + b.txt (same second); t3 11:00 a.txt "3"."""
    made = []
    clock.now = at(2026, 11, 1, 9, 0).timestamp()
    call(command="create", path="/memories/a.txt", file_text="1\n")
    made.append(head(vault_path))
    clock.now = at(2026, 11, 1, 10, 0).timestamp()
    call(command="str_replace", path="/memories/a.txt", old_str="1", new_str="2")
    made.append(head(vault_path))
    call(command="create", path="/memories/b.txt", file_text="bee\n")
    made.append(head(vault_path))
    clock.now = at(2026, 11, 1, 11, 0).timestamp()
    call(command="str_replace", path="/memories/a.txt", old_str="2", new_str="3")
    made.append(head(vault_path))
    return made


def test_resolve_takes_ids_and_git_revisions(vault: Vault, timeline: list[str]) -> None:
    v1, v2, v3, v4 = timeline
    assert vault.resolve(v2).id == v2
    assert vault.resolve(v2[:7]).id == v2
    assert vault.resolve("main").id == v4
    assert vault.resolve("main~2").id == v2
    assert vault.resolve("main~3").id == v1
    assert vault.resolve(f"{v3}^").id == v2
    assert vault.resolve(f"{v4[:8]}~1").id == v3


def test_resolve_returns_a_full_version(vault: Vault, timeline: list[str]) -> None:
    version = vault.resolve("main~3")
    assert version.id == timeline[0]
    assert version.time == at(2026, 11, 1, 9, 0)
    assert version.command == "create"
    assert version.actor == "support-bot"
    assert version.session == "sess-42"
    assert version.paths == ("/memories/a.txt",)
    assert version.restored_from is None


def test_resolve_a_time_gives_the_newest_version_at_or_before_it(vault: Vault, timeline: list[str]) -> None:
    v1, _v2, v3, v4 = timeline
    assert vault.resolve(at(2026, 11, 1, 9, 0)).id == v1  # exactly at: inclusive
    assert vault.resolve("2026-11-01 09:59").id == v1  # between two versions: the earlier one
    assert vault.resolve("2026-11-01T10:30:00+01:00").id == v1  # 09:30 UTC
    # Two versions in the same second: the newer of them.
    assert vault.resolve("2026-11-01 10:00").id == v3
    assert vault.resolve(at(2026, 11, 1, 10, 59, 59)).id == v3
    assert vault.resolve("2026-11-01 11:00").id == v4
    assert vault.resolve("2026-12-25").id == v4
    assert vault.resolve(datetime(2026, 11, 1, 11, 30, tzinfo=timezone(timedelta(hours=2)))).id == v1


@pytest.mark.parametrize(
    "when",
    [
        "2026-11-01 08:59",
        "2026-11-01",
        at(2026, 11, 1, 8, 59, 59),
        "0" * 40,
        "main~9",
        "no-such-version",
        "vaultmem-keyring",
        "refs/heads/vaultmem-keyring",
    ],
)
def test_resolve_unknown_is_not_found(vault: Vault, timeline: list[str], when: object) -> None:
    with pytest.raises(NotFoundError):
        vault.resolve(when)  # type: ignore[arg-type]


def test_resolve_refuses_objects_that_are_not_versions(vault: Vault, vault_path: Path, timeline: list[str]) -> None:
    blob = git(vault_path, "rev-parse", "main:memories/a.txt").strip()
    tree = git(vault_path, "rev-parse", "main^{tree}").strip()
    keyring = git(vault_path, "rev-parse", "refs/heads/vaultmem-keyring").strip()
    for oid in (blob, tree, keyring, keyring[:10]):
        with pytest.raises(NotFoundError):
            vault.resolve(oid)
        with pytest.raises(NotFoundError):
            vault.read("/memories/a.txt", at=oid)


def test_resolve_on_a_vault_without_versions_is_not_found(vault: Vault) -> None:
    with pytest.raises(NotFoundError):
        vault.resolve("main")
    with pytest.raises(NotFoundError):
        vault.resolve("2030-01-01")


def test_read_at_takes_every_form_of_version(vault: Vault, timeline: list[str]) -> None:
    v1, v2, v3, _v4 = timeline
    assert vault.read("/memories/a.txt") == "3\n"
    assert vault.read("/memories/a.txt", at=v1) == "1\n"
    assert vault.read("/memories/a.txt", at=v2[:7]) == "2\n"
    assert vault.read("/memories/a.txt", at="main~3") == "1\n"
    assert vault.read("/memories/a.txt", at=f"{v3}^") == "2\n"
    assert vault.read("/memories/a.txt", at=at(2026, 11, 1, 10, 30)) == "2\n"
    assert vault.read("/memories/a.txt", at="2026-11-01 09:30") == "1\n"
    assert vault.read("/memories/b.txt", at="2026-11-01 10:00") == "bee\n"
    with pytest.raises(NotFoundError):
        vault.read("/memories/b.txt", at=v2)
    with pytest.raises(NotFoundError):
        vault.read("/memories/a.txt", at="2026-11-01 08:00")


# -- listing ---------------------------------------------------------------------


def entries(listed: list[Any]) -> list[tuple[str, str, int]]:
    return [(e.path, e.kind, e.size) for e in listed]


@pytest.fixture
def tree(vault: Vault, vault_path: Path, call) -> str:
    """A small tree with hidden entries and multi-byte text; returns its version id."""
    call(command="create", path="/memories/a.txt", file_text="héllo\n")  # 7 bytes
    call(command="create", path="/memories/.hidden", file_text="h\n")  # 2
    call(command="create", path="/memories/.cache/k.txt", file_text="kkk\n")  # 4
    call(command="create", path="/memories/notes/x.md", file_text="x\n")  # 2
    call(command="create", path="/memories/notes/sub/y.md", file_text="✓✓\n")  # 7
    call(command="create", path="/memories/z.txt", file_text="zzzz")  # 4
    return head(vault_path)


def test_listing_is_every_entry_depth_first_with_plaintext_sizes(vault: Vault, tree: str) -> None:
    assert entries(vault.listing()) == [
        ("/memories/.cache", "dir", 4),
        ("/memories/.cache/k.txt", "file", 4),
        ("/memories/.hidden", "file", 2),
        ("/memories/a.txt", "file", 7),
        ("/memories/notes", "dir", 9),
        ("/memories/notes/sub", "dir", 7),
        ("/memories/notes/sub/y.md", "file", 7),
        ("/memories/notes/x.md", "file", 2),
        ("/memories/z.txt", "file", 4),
    ]
    assert entries(vault.listing("/memories")) == entries(vault.listing())


def test_listing_keeps_a_folder_and_its_contents_together(vault: Vault, call) -> None:
    """Depth-first: a sibling whose name extends the folder's ("notes.md",
    "notes-old.txt") must not land between "notes" and "notes/a.txt"."""
    for path in ["/memories/notes/a.txt", "/memories/notes/sub/b.txt", "/memories/notes.md", "/memories/notes-old.txt"]:
        call(command="create", path=path, file_text="x")
    listed = [e.path for e in vault.listing()]
    assert sorted(listed) == sorted(
        [
            "/memories/notes",
            "/memories/notes/a.txt",
            "/memories/notes/sub",
            "/memories/notes/sub/b.txt",
            "/memories/notes.md",
            "/memories/notes-old.txt",
        ]
    )
    for index, path in enumerate(listed):
        below = [p for p in listed if p.startswith(path + "/")]
        assert listed[index + 1 : index + 1 + len(below)] == below, listed


def test_listing_depth_one_is_direct_children_only(vault: Vault, tree: str) -> None:
    assert entries(vault.listing(depth=1)) == [
        ("/memories/.cache", "dir", 4),
        ("/memories/.hidden", "file", 2),
        ("/memories/a.txt", "file", 7),
        ("/memories/notes", "dir", 9),
        ("/memories/z.txt", "file", 4),
    ]
    assert entries(vault.listing("/memories/notes", depth=1)) == [
        ("/memories/notes/sub", "dir", 7),
        ("/memories/notes/x.md", "file", 2),
    ]


def test_listing_of_a_folder_and_of_a_file(vault: Vault, tree: str) -> None:
    assert entries(vault.listing("/memories/notes")) == [
        ("/memories/notes/sub", "dir", 7),
        ("/memories/notes/sub/y.md", "file", 7),
        ("/memories/notes/x.md", "file", 2),
    ]
    assert entries(vault.listing("/memories/notes/sub/y.md")) == [("/memories/notes/sub/y.md", "file", 7)]
    assert entries(vault.listing("/memories/.hidden")) == [("/memories/.hidden", "file", 2)]


def test_listing_entries_are_frozen_records(vault: Vault, tree: str) -> None:
    entry = vault.listing("/memories/a.txt")[0]
    with pytest.raises(AttributeError):
        entry.size = 0  # type: ignore[misc]


def test_listing_of_a_missing_path_is_not_found(vault: Vault, tree: str) -> None:
    with pytest.raises(NotFoundError):
        vault.listing("/memories/missing")
    with pytest.raises(NotFoundError):
        vault.listing("/memories/notes/x.md/below")
    with pytest.raises(NotFoundError):
        vault.listing("/memories/z.txt", at="main~1")


def test_listing_of_a_new_vault_is_empty(vault: Vault) -> None:
    assert vault.listing() == []


def test_listing_at_an_old_version(vault: Vault, vault_path: Path, tree: str, call, clock: FakeClock) -> None:
    clock.advance(3600)
    call(command="delete", path="/memories/notes")
    call(command="str_replace", path="/memories/a.txt", old_str="héllo", new_str="hi")
    assert entries(vault.listing()) == [
        ("/memories/.cache", "dir", 4),
        ("/memories/.cache/k.txt", "file", 4),
        ("/memories/.hidden", "file", 2),
        ("/memories/a.txt", "file", 3),
        ("/memories/z.txt", "file", 4),
    ]
    old = entries(vault.listing(at=tree))
    assert ("/memories/notes/sub/y.md", "file", 7) in old
    assert ("/memories/a.txt", "file", 7) in old
    assert entries(vault.listing("/memories/notes", at="main~2")) == [
        ("/memories/notes/sub", "dir", 7),
        ("/memories/notes/sub/y.md", "file", 7),
        ("/memories/notes/x.md", "file", 2),
    ]
    when = datetime.fromtimestamp(clock.now - 3600, tz=UTC)
    assert entries(vault.listing("/memories/notes", at=when, depth=1)) == [
        ("/memories/notes/sub", "dir", 7),
        ("/memories/notes/x.md", "file", 2),
    ]
    with pytest.raises(NotFoundError):
        vault.listing("/memories/notes")


# -- history is read from the commits themselves --------------------------------


def test_history_reads_past_a_shallow_file_from_a_shallow_fetch(
    vault: Vault, vault_path: Path, key: str, log: dict[str, str], tmp_path: Path
) -> None:
    """An operator's `git fetch --depth=1` into the vault writes `shallow`, and
    git log then shows one version: history() still lists all six."""
    mirror = tmp_path / "mirror.git"
    subprocess.run(["git", "clone", "-q", "--mirror", str(vault_path), str(mirror)], check=True)
    git(vault_path, "fetch", "-q", "--depth=1", str(mirror), "main:refs/remotes/mirror/main")
    assert commit_count(vault_path) == 1
    every = ["c6", "c5", "c4", "c3", "c2", "c1"]
    for reader in (vault, Vault.open(vault_path, key=key)):
        assert names(log, reader.history()) == every
        assert names(log, reader.history(path="/memories/notes.txt")) == ["c6", "c3", "c1"]
        assert names(log, reader.history(actor="support-bot")) == ["c6", "c5", "c2", "c1"]


@pytest.mark.parametrize("hider", ["shallow", "info/grafts"])
def test_history_reads_past_a_shallow_or_grafts_file(
    vault: Vault, vault_path: Path, key: str, log: dict[str, str], hider: str
) -> None:
    (vault_path / "info").mkdir(exist_ok=True)
    (vault_path / hider).write_text(log["c4"] + "\n")  # c4 shown without parents
    assert commit_count(vault_path) == 3
    for reader in (vault, Vault.open(vault_path, key=key)):
        assert names(log, reader.history()) == ["c6", "c5", "c4", "c3", "c2", "c1"]
        # c4 created team/b.md; c3 changed notes.txt: c4's real parent is compared, not an empty tree
        assert names(log, reader.history(path="/memories/team")) == ["c5", "c4", "c2"]
        assert names(log, reader.history(path="/memories/notes.txt")) == ["c6", "c3", "c1"]
        assert names(log, reader.history(limit=4)) == ["c6", "c5", "c4", "c3"]
    assert [v.id for v in vault.history()] == [v.id for v in Vault.open(vault_path, key=key).history()]


def test_history_reads_past_a_graft_that_skips_versions(
    vault: Vault, vault_path: Path, key: str, log: dict[str, str]
) -> None:
    (vault_path / "info").mkdir(exist_ok=True)
    (vault_path / "info" / "grafts").write_text(f"{log['c5']} {log['c2']}\n")  # c4 and c3 hidden from git
    assert commit_count(vault_path) == 4
    for reader in (vault, Vault.open(vault_path, key=key)):
        assert names(log, reader.history()) == ["c6", "c5", "c4", "c3", "c2", "c1"]
        assert names(log, reader.history(path="/memories/notes.txt")) == ["c6", "c3", "c1"]


# -- trailers are lines split on "\n" only -------------------------------------------

SEPARATORS = ["\u2028", "\u2029", "\x85", "\x1c", "\x1d", "\x1e", "\x0b", "\x0c", "\r"]


@pytest.mark.parametrize("sep", SEPARATORS, ids=[f"U+{ord(s):04X}" for s in SEPARATORS])
def test_a_trailer_value_is_the_whole_line_up_to_a_newline(sep: str) -> None:
    """Paths holding these characters are refused at input; a message that
    names one anyway (written by another tool, or an older vaultmem) is still
    read as git reads it: one trailer per "\\n"-terminated line."""
    path = MemoryPath((f"a{sep}Vaultmem-Path: /memories/b.txt",))
    message = format_message("create", (path,), "support-bot", f"s{sep}1", [])
    trailers = parse_trailers(message)
    assert trailers["Vaultmem-Path"] == [path.text]
    assert trailers["Vaultmem-Session"] == [f"s{sep}1"]
    assert trailers["Vaultmem-Actor"] == ["support-bot"]


@pytest.mark.parametrize("sep", ["\u2028", "\x85", " "], ids=["U+2028", "U+0085", "space"])
def test_the_last_trailer_keeps_the_end_of_its_value(sep: str) -> None:
    message = f"memory: create /memories/a\n\nVaultmem-Command: create\nVaultmem-Path: /memories/a{sep}\n"
    assert parse_trailers(message)["Vaultmem-Path"] == [f"/memories/a{sep}"]


def test_history_reads_a_path_holding_a_line_separator_whole(vault: Vault, vault_path: Path, key: str, call) -> None:
    """A version written straight into the repository (as another tool could)
    whose Vaultmem-Path holds U+2028: history() lists that one path."""
    call(command="create", path="/memories/a.txt", file_text="one\n")
    repo = pygit2.Repository(str(vault_path))
    parent = repo.revparse_single("refs/heads/main").peel(pygit2.Commit)
    odd = MemoryPath(("a\u2028Vaultmem-Path: /memories/a.txt",))
    message = format_message("create", (odd,), "support-bot", "sess-1", [])
    who = pygit2.Signature("support-bot", "support-bot@vaultmem", 1_790_000_100, 0)
    oid = repo.create_commit("refs/heads/main", who, who, message, parent.tree_id, [parent.id])
    for reader in (vault, Vault.open(vault_path, key=key)):
        [latest] = reader.history(limit=1)
        assert latest.id == str(oid)
        assert latest.paths == (odd.text,)
        assert latest.session == "sess-1"
        assert reader.history(path="/memories/a.txt")[0].id != str(oid)  # it names no a.txt
