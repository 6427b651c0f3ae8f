"""``vaultmem mcp``'s audit tools (``history``, ``read_version``, ``diff``)
given what a client may well send: a path that was never in the vault, a
path the path rules refuse, a version the vault does not have.  Their
answers are held to the memory tool's own words for the same kind of input
(SPEC.md).  Every server is a real ``python -m vaultmem mcp`` process,
reached over stdio by the official MCP client.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from mcp_helpers import Result, Served, SyncSession, host_paths, stdio

from vaultmem import VaultMemoryTool


def never_there(path: str) -> Result:
    """What an audit tool answers for a path that has no versions in the vault."""
    return Result(f"Error: The path {path} has no versions in this vault. Please provide a valid path.", True)


@pytest.fixture(scope="module")
def hidden(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, ...]:
    return host_paths(tmp_path_factory)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, hidden: tuple[str, ...]) -> Served:
    """A vault holding /memories/notes.txt (two versions), and a file of
    /memories/old folder/ created and then deleted."""
    made = Served.make(tmp_path_factory.mktemp("mcp-audit-hunt"), hidden)
    with made.open() as vault:
        tool = VaultMemoryTool(vault, actor="ops")
        tool.call({"command": "create", "path": "/memories/notes.txt", "file_text": "one\n"})
        tool.call({"command": "str_replace", "path": "/memories/notes.txt", "old_str": "one", "new_str": "two"})
        tool.call({"command": "create", "path": "/memories/old folder/a b.txt", "file_text": "x\n"})
        tool.call({"command": "delete", "path": "/memories/old folder/a b.txt"})
    return made


@pytest.fixture(scope="module")
def session(served: Served) -> Iterator[SyncSession]:
    with stdio(served) as opened:
        yield opened


@pytest.fixture(scope="module")
def empty(tmp_path_factory: pytest.TempPathFactory, hidden: tuple[str, ...]) -> Iterator[SyncSession]:
    """A server of a vault with no versions yet."""
    with stdio(Served.make(tmp_path_factory.mktemp("mcp-audit-hunt-empty"), hidden)) as opened:
        yield opened


# -- a path that was never in the vault ----------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/memories/never.txt",
        "/memories/not",  # the start of notes.txt's name is not notes.txt
        "/memories/old folder/a b",
        "/memories/notes.txt/deeper",
    ],
)
def test_history_of_a_path_never_in_the_vault_says_so_and_names_it(session: SyncSession, path: str) -> None:
    """`history` of a mistyped path answered "No versions yet.", as it does
    for a vault nothing was written to: the client could not tell a typo from
    an empty memory.  It says, as `view` says of a missing path, that this
    path has no versions."""
    assert session.call("history", {"path": path}) == never_there(path)
    assert session.call("history", {"path": path, "limit": 1}) == never_there(path)


def test_history_of_a_path_says_it_with_the_path_as_the_client_spelled_it(session: SyncSession) -> None:
    """The path is repeated as sent (a decomposed é, which names the same
    file as the composed one), as the memory commands repeat it."""
    path = "/memories/cafe\u0301.txt"
    assert session.call("history", {"path": path}) == never_there(path)
    assert session.call("view", {"path": path}).text == (
        f"The path {path} does not exist. Please provide a valid path."
    )


def test_history_still_lists_the_versions_of_a_deleted_file_and_folder(session: SyncSession) -> None:
    for path in ("/memories/old folder/a b.txt", "/memories/old folder"):
        shown = session.call("history", {"path": path})
        assert not shown.is_error, shown
        assert [line.split("  ")[-1] for line in shown.text.splitlines()] == [
            "delete /memories/old folder/a b.txt",
            "create /memories/old folder/a b.txt",
        ]


def test_an_empty_vault_still_has_no_versions_yet(empty: SyncSession) -> None:
    """The memory itself exists in a vault nothing was written to: its
    history is empty, not an error."""
    assert empty.call("history", {}) == Result("No versions yet.", False)
    assert empty.call("history", {"path": "/memories"}) == Result("No versions yet.", False)
    assert empty.call("history", {"path": "/memories/never.txt"}) == never_there("/memories/never.txt")


def test_diff_of_a_path_never_in_the_vault_says_so(session: SyncSession) -> None:
    """A diff limited to a mistyped path answered "No changes.", which reads
    as if the file were there and unchanged."""
    oldest = session.call("history", {"path": "/memories/notes.txt"}).text.splitlines()[-1].split()[0]
    assert session.call("diff", {"from_version": oldest, "path": "/memories/note.txt"}) == never_there(
        "/memories/note.txt"
    )
    # a path that has versions, unchanged between the two: no changes, as before
    assert session.call("diff", {"from_version": "main", "path": "/memories/notes.txt"}) == Result("No changes.", False)
    assert session.call("diff", {"from_version": "main", "path": "/memories/old folder"}) == Result(
        "No changes.", False
    )


def test_read_version_of_a_path_never_in_the_vault_says_so(session: SyncSession) -> None:
    """A mistyped path answered "no file ... at version main", which sends
    the client looking through other versions for a file that never was."""
    oldest = session.call("history", {"path": "/memories/notes.txt"}).text.splitlines()[-1].split()[0]
    for version in ("main", oldest):
        assert session.call("read_version", {"path": "/memories/note.txt", "version": version}) == never_there(
            "/memories/note.txt"
        )
    # a file the vault held, but not at that version; and a folder: as before
    assert session.call("read_version", {"path": "/memories/old folder/a b.txt", "version": "main"}) == Result(
        "Error: no file /memories/old folder/a b.txt at version main.", True
    )
    assert session.call("read_version", {"path": "/memories/old folder", "version": "main"}).is_error
    assert session.call("read_version", {"path": "/memories/notes.txt", "version": oldest}) == Result("one\n", False)


# -- a path the path rules refuse --------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    ["memories/notes.txt", "/memories/../notes.txt", "/memories/a\\b", "", "/memories//x", "/memories/x\ty"],
)
@pytest.mark.parametrize("tool", ["history", "read_version", "diff"])
def test_audit_tools_refuse_a_bad_path_in_the_memory_tools_words(session: SyncSession, tool: str, path: str) -> None:
    """The audit tools said "Invalid path:" where the memory commands say
    "Invalid `path`:" for the same path: one server, one voice."""
    memory_tool = session.call("view", {"path": path})
    assert memory_tool.is_error
    assert memory_tool.text.startswith("Error: Invalid `path`: "), memory_tool
    arguments = {"history": {}, "read_version": {"version": "main"}, "diff": {"from_version": "main"}}[tool]
    assert session.call(tool, {**arguments, "path": path}) == memory_tool


# -- a version the vault does not have ---------------------------------------------------------


def test_a_missing_version_points_to_the_history_tool(session: SyncSession) -> None:
    """An unknown version's error ended "The vault's history lists its
    versions.", and a short id's pointed to `vaultmem log`, a command the
    server's client (a model) cannot run: both name the `history` tool."""
    for tool, arguments in [
        ("read_version", {"path": "/memories/notes.txt", "version": "zzzz"}),
        ("diff", {"from_version": "zzzz"}),
        ("diff", {"from_version": "main", "to_version": "zzzz"}),
    ]:
        assert session.call(tool, arguments) == Result(
            "Error: no version 'zzzz' in this vault. Use `history` to list the vault's versions.", True
        )
    newest = session.call("history", {"limit": 1}).text.split()[0]
    for tool, arguments in [
        ("read_version", {"path": "/memories/notes.txt", "version": newest[:3]}),
        ("diff", {"from_version": newest[:3]}),
    ]:
        assert session.call(tool, arguments) == Result(
            f"Error: '{newest[:3]}' is too short to name a version: give at least 4 of its hex digits, "
            "as `history` shows them.",
            True,
        )
    assert session.call("read_version", {"path": "/memories/notes.txt", "version": newest[:4]}) == Result(
        "two\n", False
    )


@pytest.mark.parametrize("when", ["today 24:00", "today 9:75", "yesterday 14:99", "today 12:00:99"])
def test_a_time_of_day_no_clock_shows_is_refused_not_read_as_now(session: SyncSession, when: str) -> None:
    """`read_version` at "today 24:00" gave the file as it is now: the time
    of day was dropped without a word and the rest read as the current
    moment (and `diff` from it answered "No changes.")."""
    read = session.call("read_version", {"path": "/memories/notes.txt", "version": when})
    assert read.is_error, read
    assert read.text == f"Error: no version {when!r} in this vault. Use `history` to list the vault's versions."
    assert session.call("diff", {"from_version": when}) == read
