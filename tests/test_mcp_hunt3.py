"""``vaultmem mcp``'s tools given what a client may well send: a memory path
as long as the path rules allow, ``null`` for an argument it leaves out, an
argument or a tool the server does not have; and what the audit tools show of
a restore and of a diff cut at the view's cap.  Every server is a real
``python -m vaultmem mcp`` process reached by the official MCP client, over
stdio or over streamable HTTP on 127.0.0.1; its answers are held to what the
memory commands answer for the same kind of input.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from mcp_helpers import HttpServer, Result, Served, SyncSession, host_paths, stdio

from vaultmem import VaultMemoryTool

# A valid memory path of 1,018 bytes (the path rules allow 1,024): five folders of 200 characters.
LONG_PATH = "/memories/" + "/".join(letter * 200 for letter in "defgh") + ".txt"


@pytest.fixture(scope="module")
def hidden(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, ...]:
    return host_paths(tmp_path_factory)


@pytest.fixture(scope="module")
def over_stdio(tmp_path_factory: pytest.TempPathFactory, hidden: tuple[str, ...]) -> Iterator[SyncSession]:
    served = Served.make(tmp_path_factory.mktemp("mcp-hunt3-stdio"), hidden)
    with stdio(served) as session:
        yield session


@pytest.fixture(scope="module")
def over_http(tmp_path_factory: pytest.TempPathFactory, hidden: tuple[str, ...]) -> Iterator[SyncSession]:
    served = Served.make(tmp_path_factory.mktemp("mcp-hunt3-http"), hidden)
    with HttpServer(served) as server:
        token = (served.path / "vaultmem" / "mcp-token").read_text(encoding="utf-8").strip()
        with server.session(token) as session:
            yield session


@pytest.fixture(params=["stdio", "http"])
def session(request: pytest.FixtureRequest) -> SyncSession:
    found: SyncSession = request.getfixturevalue(f"over_{request.param}")
    return found


def latest(session: SyncSession, path: str) -> str:
    """The id (12 characters) of the newest version of ``path``."""
    shown = session.call("history", {"path": path, "limit": 1})
    assert not shown.is_error, shown
    return shown.text.split()[0]


def test_the_audit_tools_take_every_path_the_memory_commands_take(session: SyncSession) -> None:
    """A file at a 1,018-byte path (within the 1,024 bytes of the path rules)
    is written and viewed through the server; its history, its text at a
    version and its diff are given too, not refused as too long."""
    assert len(LONG_PATH.encode("utf-8")) == 1_018
    created = session.call("create", {"path": LONG_PATH, "file_text": "first\n"})
    assert created == Result(f"File created successfully at: {LONG_PATH}", False)
    first = latest(session, LONG_PATH)
    assert not session.call("str_replace", {"path": LONG_PATH, "old_str": "first", "new_str": "second"}).is_error

    history = session.call("history", {"path": LONG_PATH})
    assert not history.is_error, history
    assert [line.split()[-2:] for line in history.text.splitlines()] == [
        ["str_replace", LONG_PATH],
        ["create", LONG_PATH],
    ]
    assert session.call("read_version", {"path": LONG_PATH, "version": first}) == Result("first\n", False)
    diff = session.call("diff", {"from_version": first, "path": LONG_PATH})
    assert not diff.is_error, diff
    assert "-first\n+second\n" in diff.text

    # Past the path rules' 1,024 bytes, the path rules refuse it, as they refuse it to the memory commands.
    too_long = "/memories/" + "x" * 1_100
    refused = session.call("view", {"path": too_long})
    assert refused.is_error and "the path is longer than 1,024 bytes" in refused.text
    for name, arguments in [
        ("history", {"path": too_long}),
        ("read_version", {"path": too_long, "version": first}),
        ("diff", {"from_version": first, "path": too_long}),
    ]:
        answer = session.call(name, arguments)
        assert answer.is_error and "the path is longer than 1,024 bytes" in answer.text, (name, answer)


def test_null_for_an_audit_tools_argument_is_the_argument_left_out(session: SyncSession) -> None:
    """As ``view_range: null`` is a ``view`` of the whole file, ``null`` for an
    optional argument of an audit tool is its default, and for a required
    one the same answer as leaving it out."""
    path = "/memories/nulls.txt"
    assert not session.call("create", {"path": path, "file_text": "one\n"}).is_error
    whole = session.call("view", {"path": path})
    assert session.call("view", {"path": path, "view_range": None}) == whole

    assert session.call("history", {"path": None, "limit": None}) == session.call("history", {})
    assert session.call("history", {"path": path, "limit": None}) == session.call("history", {"path": path})
    version = latest(session, path)
    for arguments in ({"to_version": None}, {"path": None}, {"to_version": None, "path": None}):
        assert session.call("diff", {"from_version": version, **arguments}) == session.call(
            "diff", {"from_version": version}
        )
    assert session.call("read_version", {"path": path, "version": None}) == session.call("read_version", {"path": path})
    assert session.call("read_version", {"path": path, "version": None}) == Result(
        "Error: Missing required parameter `version` for tool `read_version`.", True
    )
    assert session.call("diff", {"from_version": None}) == Result(
        "Error: Missing required parameter `from_version` for tool `diff`.", True
    )


def test_an_unknown_tool_is_answered_as_the_memory_tool_answers_an_unknown_command(session: SyncSession) -> None:
    """The memory tool answers ``"command": "forget"`` with ``Error: Unknown
    command `forget`. Use one of: ...``; a tool the server does not have is
    answered the same way (an error saying what to use instead), and a long
    name is repeated capped, as every error repeats what the client sent."""
    tools = "view, create, str_replace, insert, delete, rename, history, read_version, diff"
    assert session.call("forget", {"path": "/memories"}) == Result(
        f"Error: Unknown tool `forget`. Use one of: {tools}.", True
    )
    assert session.call("VIEW", {"path": "/memories"}) == Result(
        f"Error: Unknown tool `VIEW`. Use one of: {tools}.", True
    )
    long = session.call("x" * 5_000, {})
    assert long.is_error
    assert long.text == (
        f"Error: Unknown tool `{'x' * 1_000}... [5,000 characters in all; the first 1,000 shown]`. Use one of: {tools}."
    )


def test_a_read_only_server_names_only_the_tools_it_offers(tmp_path_factory: pytest.TempPathFactory) -> None:
    served = Served.make(tmp_path_factory.mktemp("mcp-hunt3-read-only"), host_paths(tmp_path_factory))
    with stdio(served, "--read-only") as session:
        assert session.call("forget", {}) == Result(
            "Error: Unknown tool `forget`. Use one of: view, history, read_version, diff.", True
        )
        assert session.call("create", {"path": "/memories/a.txt", "file_text": "a"}).text.startswith(
            "Error: this memory server is read-only"
        )


def test_an_audit_tool_names_an_unexpected_argument_as_the_memory_commands_do(session: SyncSession) -> None:
    """``view`` with an argument it does not take says which, capped, and what
    it takes; so does each audit tool, and a 5,000-character argument name is
    not repeated whole."""
    assert session.call("view", {"path": "/memories", "extra": 1}) == Result(
        "Error: Unexpected parameter `extra` for command `view`. It takes: `path`, `view_range`.", True
    )
    assert session.call("history", {"extra": 1}) == session.call("history", {"extra": None})
    assert session.call("history", {"extra": 1}) == Result(
        "Error: Unexpected parameter `extra` for tool `history`. It takes: `path`, `limit`.", True
    )
    assert session.call("read_version", {"path": "/memories/a.txt", "version": "main", "at": "x"}) == Result(
        "Error: Unexpected parameter `at` for tool `read_version`. It takes: `path`, `version`.", True
    )
    long = session.call("diff", {"from_version": "main", "w" * 5_000: True})
    assert long == Result(
        f"Error: Unexpected parameter `{'w' * 1_000}... [5,000 characters in all; the first 1,000 shown]` for tool "
        "`diff`. It takes: `from_version`, `to_version`, `path`.",
        True,
    )


def test_history_names_the_version_a_restore_or_an_undo_brought_back(tmp_path_factory: pytest.TempPathFactory) -> None:
    """``vaultmem log`` shows ``restore  /memories (from 47392440e5)``; the
    history tool too says which version a restore brought back (the id to
    give read_version or diff), and an undo past the first version that it
    brought back the empty memory."""
    served = Served.make(tmp_path_factory.mktemp("mcp-hunt3-restore"), host_paths(tmp_path_factory))
    with served.open() as vault:
        memory = VaultMemoryTool(vault, actor="ops")
        memory.call({"command": "create", "path": "/memories/a.txt", "file_text": "one\n"})
        first = vault.history()[0].id
        memory.call({"command": "create", "path": "/memories/b.txt", "file_text": "two\n"})
        vault.restore(first, actor="ops")
    with stdio(served) as session:
        newest = session.call("history", {"limit": 1})
        assert newest.text.endswith(f"  ops  -  restore /memories (from {first[:12]})"), newest
    with served.open() as vault:
        vault.undo(3, actor="ops")
    with stdio(served) as session:
        newest = session.call("history", {"limit": 1})
        assert newest.text.endswith("  ops  -  undo /memories (from the empty memory)"), newest


def test_a_cut_diff_stops_at_a_whole_line_of_text_holding_line_separators(session: SyncSession) -> None:
    """A file's lines are split on ``\\n`` alone (SPEC.md); a line of the
    diff that holds a form feed or U+2028 is one line, so a diff cut at the
    view's cap ends at a whole diff line, its note on a line of its own,
    counting the diff's lines."""
    path = "/memories/separators.txt"
    assert not session.call("create", {"path": "/memories/before-separators.txt", "file_text": "x"}).is_error
    before = latest(session, "/memories/before-separators.txt")
    text = "".join(f"entry {n:04}\u2028second half\x0cthird\n" for n in range(1_000))
    assert not session.call("create", {"path": path, "file_text": text}).is_error
    cut = session.call("diff", {"from_version": before, "path": path})
    assert not cut.is_error, cut
    *shown, note = cut.text.split("\n")
    total = 3 + 1_000  # the two file names, the hunk header, and the file's lines
    assert note.startswith("[Diff cut at 16,000 characters after ") and note.endswith(
        f" of {total:,} lines; ask for one file's with `path`, or for versions closer together.]"
    ), note
    assert note == (
        f"[Diff cut at 16,000 characters after {len(shown):,} of {total:,} lines; ask for one file's with `path`, "
        "or for versions closer together.]"
    )
    assert shown[:3] == ["--- /dev/null", f"+++ b{path}", "@@ -0,0 +1,1000 @@"]
    assert all(line.endswith("\u2028second half\x0cthird") for line in shown[3:])
