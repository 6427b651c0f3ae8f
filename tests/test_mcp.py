"""``vaultmem mcp`` over stdio, driven by the official MCP client: the tools
it lists, the memory commands giving exactly what ``VaultMemoryTool.call``
gives, the audit tools, who and which session every version is recorded
under, ``--read-only``, the request size limit and the vault's policy.

Every server here is a real ``python -m vaultmem mcp`` child process with
only the vault key and a clean HOME in its environment.  Every result text
is checked for a traceback or a host path as it arrives (mcp_helpers).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import commit_count
from mcp_helpers import (
    ACTOR,
    CLIENT,
    Result,
    Served,
    SyncSession,
    commits,
    host_paths,
    memory_files,
    reference,
    stdio,
)

from vaultmem import VaultMemoryTool
from vaultmem.anthropic.agent import memory_system_prompt
from vaultmem.mcp.server import too_large
from vaultmem.ops.memory import ECHO_CAP

PROTOCOL_LINE = "IMPORTANT: ALWAYS VIEW YOUR MEMORY DIRECTORY BEFORE DOING ANYTHING ELSE."
READ_ONLY_REFUSAL = (
    "Error: this memory server is read-only (vaultmem mcp --read-only); nothing was written. "
    "Use view, history, read_version or diff."
)
MEMORY_TOOLS = ("view", "create", "str_replace", "insert", "delete", "rename")
AUDIT_TOOLS = ("history", "read_version", "diff")
READ_TOOLS = ("view", *AUDIT_TOOLS)
REQUIRED = {
    "view": ["path"],
    "create": ["path", "file_text"],
    "str_replace": ["path", "old_str", "new_str"],
    "insert": ["path", "insert_line", "insert_text"],
    "delete": ["path"],
    "rename": ["old_path", "new_path"],
    "history": [],
    "read_version": ["path", "version"],
    "diff": ["from_version"],
}
MAX_REQUEST = 10_000  # --max-request-bytes of the shared server
SESSION = re.compile(rf"mcp-{CLIENT}-[A-Za-z0-9_-]{{12}}")
HISTORY_LINE = re.compile(
    r"(?P<id>[0-9a-f]{12})  \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ  (?P<actor>\S+)  (?P<session>\S+)  (?P<what>.+)"
)


@pytest.fixture(scope="module")
def hidden(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, ...]:
    return host_paths(tmp_path_factory)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, hidden: tuple[str, ...]) -> Iterator[tuple[Served, SyncSession]]:
    """One stdio server for the tests that only add their own files: actor
    ACTOR, client CLIENT, arguments capped at MAX_REQUEST bytes."""
    served = Served.make(tmp_path_factory.mktemp("mcp-shared"), hidden)
    with stdio(served, "--actor", ACTOR, "--max-request-bytes", str(MAX_REQUEST)) as session:
        yield served, session


@pytest.fixture(scope="module")
def read_only(
    tmp_path_factory: pytest.TempPathFactory, hidden: tuple[str, ...]
) -> Iterator[tuple[Served, SyncSession]]:
    """A ``--read-only`` server of a vault holding /memories/keep.txt (one version)."""
    served = Served.make(tmp_path_factory.mktemp("mcp-read-only"), hidden)
    with served.open() as vault:
        VaultMemoryTool(vault, actor="ops").call(
            {"command": "create", "path": "/memories/keep.txt", "file_text": "k\n"}
        )
    with stdio(served, "--actor", ACTOR, "--read-only") as session:
        yield served, session


def history_rows(text: str) -> list[dict[str, str]]:
    rows = []
    for line in text.splitlines():
        match = HISTORY_LINE.fullmatch(line)
        assert match, f"not a history line: {line!r}"
        rows.append(match.groupdict())
    return rows


# -- initialize and the tool list ---------------------------------------------------------


def test_initialize_gives_the_memory_protocol_and_the_audit_note(shared):
    _served, session = shared
    assert session.init is not None
    assert session.init.server_info.name == "vaultmem"
    instructions = session.init.instructions or ""
    assert instructions.startswith(PROTOCOL_LINE + "\n")
    assert "ASSUME INTERRUPTION" in instructions
    assert "every change to it is recorded for audit" in instructions
    assert instructions.endswith(memory_system_prompt())


def test_list_tools_offers_the_nine_tools_with_their_hints_and_schemas(shared):
    _served, session = shared
    tools = {tool.name: tool for tool in session.tools()}
    assert sorted(tools) == sorted([*MEMORY_TOOLS, *AUDIT_TOOLS])
    for name, tool in tools.items():
        hints = tool.annotations
        assert hints is not None, name
        assert hints.title, name
        assert tool.description, name
        assert tool.input_schema["type"] == "object", name
        assert sorted(tool.input_schema.get("required", [])) == sorted(REQUIRED[name]), name
        assert set(REQUIRED[name]) <= set(tool.input_schema["properties"]), name
        assert "command" not in tool.input_schema["properties"], name
        if name in READ_TOOLS:
            assert hints.read_only_hint is True, name
        else:
            assert hints.read_only_hint is False, name
            assert hints.destructive_hint is (name in ("str_replace", "delete", "rename")), name
    assert set(tools["view"].input_schema["properties"]) == {"path", "view_range"}
    assert set(tools["history"].input_schema["properties"]) == {"path", "limit"}
    assert set(tools["diff"].input_schema["properties"]) == {"from_version", "to_version", "path"}


def test_an_unknown_tool_is_a_clean_error(shared):
    _served, session = shared
    result = session.call("forget", {"path": "/memories"})
    assert result.is_error
    assert "forget" in result.text


# -- the memory commands: exactly what VaultMemoryTool gives ------------------------------

LONG = "".join(f"line {n}\n" for n in range(1, 3001))  # its view passes the 16,000-character cap
BAD_PATHS = [
    "/memories/../etc/passwd",
    "/memories/a/../../b",
    "/etc/passwd",
    "memories/a.txt",
    "/memoriesX/a.txt",
    "/memories/%2e%2e/x",
    "/memories/%252e%252e/x",
    "/memories/a\\b",
    "/memories/a\x00b",
    "/memories//a",
    "/memories/./a",
    "/memories/\u202eevil.txt",
    "/memories/line\u2028break",
    "/memories/" + "a" * 256,
    "~/notes.txt",
    "",
]
VALID = {
    "view": {"command": "view", "path": "/memories/f.txt"},
    "create": {"command": "create", "path": "/memories/new.txt", "file_text": "x"},
    "str_replace": {"command": "str_replace", "path": "/memories/f.txt", "old_str": "a", "new_str": "b"},
    "insert": {"command": "insert", "path": "/memories/f.txt", "insert_line": 0, "insert_text": "x"},
    "delete": {"command": "delete", "path": "/memories/f.txt"},
    "rename": {"command": "rename", "old_path": "/memories/f.txt", "new_path": "/memories/g.txt"},
}
WRONG_VALUES = [123, None, ["x"], {"x": 1}, True, 1.5]


def malformed_calls() -> list[dict[str, Any]]:
    """Each command with a parameter missing, with each parameter of a wrong type, and with an unexpected one."""
    calls: list[dict[str, Any]] = []
    for command, params in VALID.items():
        names = [name for name in params if name != "command"]
        calls += [{k: v for k, v in params.items() if k != name} for name in names]
        calls += [{**params, name: value} for name in names for value in WRONG_VALUES]
        calls.append({**params, "recursive": True})
        calls.append({**params, "view_range": [1, 1]} if command != "view" else {**params, "file_text": "x"})
    return calls


SCRIPT: list[dict[str, Any]] = [
    {"command": "view", "path": "/memories"},
    {"command": "view", "path": "/memories/"},
    {"command": "view", "path": "/memories/none.txt"},
    {"command": "create", "path": "/memories/notes.txt", "file_text": "alpha\nbeta\ngamma\nbeta\n"},
    {"command": "create", "path": "/memories/notes.txt", "file_text": "again"},
    {"command": "create", "path": "/memories/projects/plan.md", "file_text": "# Plan\n- step one\n- step two"},
    {"command": "create", "path": "/memories/projects", "file_text": "a folder already"},
    {"command": "create", "path": "/memories/notes.txt/below.txt", "file_text": "under a file"},
    {"command": "create", "path": "/memories", "file_text": "the root"},
    {"command": "create", "path": "/memories/folder/", "file_text": "trailing slash"},
    {"command": "create", "path": "/memories/huge.txt", "file_text": "x" * 102_401},
    {"command": "create", "path": "/memories/limit.txt", "file_text": "y" * 102_400},
    {"command": "create", "path": "/memories/日記/café.txt", "file_text": "crlf\r\nnul\x00byte\n"},
    {"command": "create", "path": "/memories/empty.txt", "file_text": ""},
    {"command": "create", "path": "/memories/long.txt", "file_text": LONG},
    {"command": "create", "path": "/memories/.hidden/secret.txt", "file_text": "hidden\n"},
    {"command": "view", "path": "/memories"},
    {"command": "view", "path": "/memories/projects"},
    {"command": "view", "path": "/memories/projects/"},
    {"command": "view", "path": "/memories/notes.txt"},
    {"command": "view", "path": "/memories/notes.txt/"},
    {"command": "view", "path": "/memories/empty.txt"},
    {"command": "view", "path": "/memories/日記/cafe\u0301.txt"},  # NFD spelling of the same file
    {"command": "view", "path": "/memories/.hidden/secret.txt"},
    {"command": "view", "path": "/memories/long.txt"},
    {"command": "view", "path": "/memories/long.txt", "view_range": [2990, -1]},
    {"command": "view", "path": "/memories/notes.txt", "view_range": [2, 3]},
    {"command": "view", "path": "/memories/notes.txt", "view_range": [2, -1]},
    {"command": "view", "path": "/memories/notes.txt", "view_range": [0, 2]},
    {"command": "view", "path": "/memories/notes.txt", "view_range": [3, 9]},
    {"command": "view", "path": "/memories/notes.txt", "view_range": [3, 2]},
    {"command": "view", "path": "/memories/notes.txt", "view_range": [5, -1]},
    {"command": "view", "path": "/memories/notes.txt", "view_range": [1]},
    {"command": "view", "path": "/memories/notes.txt", "view_range": [1, 2, 3]},
    {"command": "view", "path": "/memories/notes.txt", "view_range": ["1", "2"]},
    {"command": "view", "path": "/memories/notes.txt", "view_range": "1-2"},
    {"command": "view", "path": "/memories/notes.txt", "view_range": [1.0, 2]},
    {"command": "view", "path": "/memories/empty.txt", "view_range": [1, 1]},
    {"command": "view", "path": "/memories/projects", "view_range": [1, 2]},
    {"command": "str_replace", "path": "/memories/notes.txt", "old_str": "gamma", "new_str": "GAMMA\ndelta"},
    {"command": "str_replace", "path": "/memories/notes.txt", "old_str": "epsilon", "new_str": "x"},
    {"command": "str_replace", "path": "/memories/notes.txt", "old_str": "beta", "new_str": "x"},
    {"command": "str_replace", "path": "/memories/notes.txt", "old_str": "", "new_str": "x"},
    {"command": "str_replace", "path": "/memories/missing.txt", "old_str": "a", "new_str": "b"},
    {"command": "str_replace", "path": "/memories/projects", "old_str": "a", "new_str": "b"},
    {"command": "str_replace", "path": "/memories/notes.txt/", "old_str": "alpha", "new_str": "b"},
    {"command": "str_replace", "path": "/memories/limit.txt", "old_str": "yy", "new_str": "yyy"},
    {"command": "str_replace", "path": "/memories/projects/plan.md", "old_str": "- step two", "new_str": ""},
    {"command": "insert", "path": "/memories/notes.txt", "insert_line": 0, "insert_text": "top\n"},
    {"command": "insert", "path": "/memories/notes.txt", "insert_line": 6, "insert_text": "end"},
    {"command": "insert", "path": "/memories/notes.txt", "insert_line": 99, "insert_text": "x"},
    {"command": "insert", "path": "/memories/notes.txt", "insert_line": -1, "insert_text": "x"},
    {"command": "insert", "path": "/memories/empty.txt", "insert_line": 1, "insert_text": "x"},
    {"command": "insert", "path": "/memories/empty.txt", "insert_line": 0, "insert_text": "first\n"},
    {"command": "insert", "path": "/memories/missing.txt", "insert_line": 0, "insert_text": "x"},
    {"command": "insert", "path": "/memories/projects", "insert_line": 0, "insert_text": "x"},
    {"command": "view", "path": "/memories/notes.txt"},
    *({"command": "view", "path": path} for path in BAD_PATHS),
    *({"command": "create", "path": path, "file_text": "x"} for path in BAD_PATHS),
    *({"command": "delete", "path": path} for path in BAD_PATHS),
    {"command": "str_replace", "path": BAD_PATHS[0], "old_str": "a", "new_str": "b"},
    {"command": "insert", "path": BAD_PATHS[0], "insert_line": 0, "insert_text": "x"},
    {"command": "rename", "old_path": BAD_PATHS[0], "new_path": "/memories/x.txt"},
    {"command": "rename", "old_path": "/memories/notes.txt", "new_path": BAD_PATHS[0]},
    {"command": "rename", "old_path": "/memories/missing.txt", "new_path": "/memories/notes.txt"},
    {"command": "rename", "old_path": "/memories/missing.txt", "new_path": "/memories/x.txt"},
    {"command": "rename", "old_path": "/memories/notes.txt", "new_path": "/memories/projects/plan.md"},
    {"command": "rename", "old_path": "/memories/notes.txt", "new_path": "/memories/projects"},
    {"command": "rename", "old_path": "/memories/projects", "new_path": "/memories/projects/sub"},
    {"command": "rename", "old_path": "/memories", "new_path": "/memories/all"},
    {"command": "rename", "old_path": "/memories/notes.txt", "new_path": "/memories"},
    {"command": "rename", "old_path": "/memories/notes.txt", "new_path": "/memories/projects/plan.md/x.txt"},
    {"command": "rename", "old_path": "/memories/notes.txt", "new_path": "/memories/archive/notes.txt"},
    {"command": "rename", "old_path": "/memories/projects/", "new_path": "/memories/work"},
    {"command": "view", "path": "/memories"},
    {"command": "delete", "path": "/memories"},
    {"command": "delete", "path": "/memories/"},
    {"command": "delete", "path": "/memories/missing.txt"},
    {"command": "delete", "path": "/memories/notes.txt"},
    {"command": "delete", "path": "/memories/work"},
    {"command": "delete", "path": "/memories/archive/notes.txt"},
    {"command": "delete", "path": "/memories/archive/notes.txt"},
    {"command": "create", "path": "/memories/f.txt", "file_text": "a\n"},
    *malformed_calls(),
    {"command": "view", "path": "/memories"},
    {"command": "view", "path": "/memories/f.txt"},
]


SPEC_STRINGS = [
    "File created successfully at: /memories/notes.txt",
    "Error: File /memories/notes.txt already exists",
    "The path /memories/none.txt does not exist. Please provide a valid path.",
    "No replacement was performed, old_str `epsilon` did not appear verbatim in /memories/notes.txt.",
    "No replacement was performed. Multiple occurrences of old_str `beta` in lines: 2, 5. Please ensure it is unique",
    "Error: The path /memories/missing.txt does not exist. Please provide a valid path.",
    "The file /memories/notes.txt has been edited.",
    "Error: Invalid `insert_line` parameter: 99. It should be within the range of lines of the file: [0, 7]",
    "Error: The path /memories/missing.txt does not exist",
    "Error: The destination /memories/projects/plan.md already exists",
    "Successfully renamed /memories/notes.txt to /memories/archive/notes.txt",
    "Successfully deleted /memories/work",
]


def test_every_command_and_error_gives_what_the_memory_tool_gives(tmp_path, hidden, tool, vault, vault_path):
    """One scripted sequence, successes and every error of SPEC.md, through MCP
    on one vault and through ``VaultMemoryTool.call`` on another: the same
    text and the same error flag, call by call, and the same memory after."""
    served = Served.make(tmp_path / "mcp", hidden)
    mismatches = []
    with stdio(served, "--actor", ACTOR) as session:
        for step, params in enumerate(SCRIPT):
            arguments = {k: v for k, v in params.items() if k != "command"}
            through_mcp = session.call(params["command"], arguments)
            expected = reference(tool, params)
            if through_mcp != expected:
                mismatches.append(f"step {step} {json.dumps(params)[:200]}:\n  mcp:  {through_mcp}\n  tool: {expected}")
        texts = session.texts
    assert not mismatches, f"{len(mismatches)} of {len(SCRIPT)} calls differ:\n" + "\n".join(mismatches[:20])
    for anchor in SPEC_STRINGS:  # SPEC.md's own words, among the answers both gave
        assert anchor in texts, anchor
    with served.open() as mcp_vault:
        assert memory_files(mcp_vault, served.path) == memory_files(vault, vault_path)
    assert commit_count(served.path) == commit_count(vault_path)


def test_the_script_covers_successes_and_errors_of_every_command(tool):
    """The differential script above reaches each command's success and error cases."""
    outcomes = {(params["command"], reference(tool, params).is_error) for params in SCRIPT}
    for command in MEMORY_TOOLS:
        assert (command, False) in outcomes, command
        assert (command, True) in outcomes, command


def test_a_command_argument_cannot_turn_one_tool_into_another(shared):
    served, session = shared
    path = "/memories/smuggle/keep.txt"
    assert session.call("create", {"path": path, "file_text": "keep\n"}) == Result(
        f"File created successfully at: {path}", False
    )
    before = commit_count(served.path)
    attempts = [
        ("view", {"command": "delete", "path": path}),
        ("view", {"command": "view", "path": path}),
        ("create", {"command": "delete", "path": path, "file_text": "x"}),
        ("str_replace", {"command": "delete", "path": path, "old_str": "keep", "new_str": "gone"}),
        ("insert", {"command": "create", "path": path, "insert_line": 0, "insert_text": "x"}),
        ("rename", {"command": "delete", "old_path": path, "new_path": "/memories/smuggle/moved.txt"}),
        ("delete", {"command": "view", "path": path}),
    ]
    for name, arguments in attempts:
        result = session.call(name, arguments)
        assert result.is_error, (name, arguments, result)
        assert result.text.startswith("Error: ")
        assert "`command`" in result.text
    assert commit_count(served.path) == before
    assert session.call("view", {"path": path}) == Result(
        f"Here's the content of {path} with line numbers:\n     1\tkeep", False
    )


# -- the audit tools ------------------------------------------------------------------------


def test_history_read_version_and_diff_show_the_audit_trail(shared):
    served, session = shared
    path = "/memories/audit/plan.txt"
    assert not session.call("create", {"path": path, "file_text": "step one\nstep two\n"}).is_error
    assert not session.call("str_replace", {"path": path, "old_str": "two", "new_str": "2"}).is_error
    assert not session.call("insert", {"path": path, "insert_line": 2, "insert_text": "step three\n"}).is_error

    shown = session.call("history", {"path": path})
    assert not shown.is_error
    rows = history_rows(shown.text)
    assert [row["what"] for row in rows] == [f"insert {path}", f"str_replace {path}", f"create {path}"]
    assert {row["actor"] for row in rows} == {ACTOR}
    assert len({row["session"] for row in rows}) == 1
    assert SESSION.fullmatch(rows[0]["session"])
    newest, middle, oldest = (row["id"] for row in rows)
    assert history_rows(session.call("history", {"path": path, "limit": 1}).text) == rows[:1]

    assert session.call("read_version", {"path": path, "version": oldest}) == Result("step one\nstep two\n", False)
    assert session.call("read_version", {"path": path, "version": middle}) == Result("step one\nstep 2\n", False)
    assert session.call("read_version", {"path": path, "version": newest}).text == "step one\nstep 2\nstep three\n"

    diff = session.call("diff", {"from_version": oldest, "to_version": middle, "path": path})
    header = "--- a/memories/audit/plan.txt\n+++ b/memories/audit/plan.txt\n"
    assert diff == Result(header + "@@ -1,2 +1,2 @@\n step one\n-step two\n+step 2\n", False)
    to_latest = session.call("diff", {"from_version": middle, "path": path})
    assert not to_latest.is_error
    assert "+step three" in to_latest.text.splitlines()
    assert "-step two" not in to_latest.text.splitlines()

    # the versions are the vault's own, as its API shows them
    with served.open() as vault:
        versions = vault.history(path=path)
    assert [v.id[:12] for v in versions] == [newest, middle, oldest]
    assert {(v.actor, v.session) for v in versions} == {(ACTOR, rows[0]["session"])}


@pytest.mark.parametrize(
    ("name", "arguments", "words"),
    [
        ("history", {"limit": 0}, "limit"),
        ("history", {"limit": "5"}, "limit"),
        ("history", {"bogus": 1}, "bogus"),
        ("history", {"path": "/memories/../etc"}, ".."),
        ("history", {"path": 7}, "path"),
        ("read_version", {"path": "/memories/audit-errors.txt"}, "version"),
        ("read_version", {"version": "main"}, "path"),
        ("read_version", {"path": "/memories/audit-errors.txt", "version": "ffffffffffff"}, "ffffffffffff"),
        ("read_version", {"path": "/memories/audit-errors.txt", "version": "2001-01-01"}, "2001"),
        ("read_version", {"path": "/memories/never-there.txt", "version": "main"}, "/memories/never-there.txt"),
        ("read_version", {"path": "/memories/../../etc/passwd", "version": "main"}, ".."),
        ("read_version", {"path": "/memories/audit-errors.txt", "version": 3}, "version"),
        ("diff", {}, "from_version"),
        ("diff", {"from_version": "no-such-version"}, "no-such-version"),
        ("diff", {"from_version": "main", "to_version": "nope"}, "nope"),
        ("diff", {"from_version": "main", "path": "/etc/passwd"}, "/memories"),
        ("diff", {"from_version": "main", "command": "delete"}, "command"),
    ],
)
def test_audit_tool_errors_are_clean_error_results(shared, name, arguments, words):
    served, session = shared
    if session.call("view", {"path": "/memories/audit-errors.txt"}).is_error:
        assert not session.call("create", {"path": "/memories/audit-errors.txt", "file_text": "x\n"}).is_error
    before = commit_count(served.path)
    result = session.call(name, arguments)
    assert result.is_error, result
    assert result.text.startswith("Error: "), result.text
    assert words in result.text
    assert "\n" not in result.text.strip()
    assert commit_count(served.path) == before


def test_history_names_the_limit_type_in_plain_words(shared):
    """A mistyped ``limit`` is refused with a grammatical message."""
    _served, session = shared
    assert session.call("history", {"limit": "5"}) == Result(
        "Error: Parameter `limit` must be an integer, got string.", True
    )


def test_audit_errors_repeat_a_long_version_capped_as_memory_errors_do(shared):
    """An error repeats at most ECHO_CAP characters of what the client sent (tests/test_echo_cap.py)."""
    _served, session = shared
    version = "v" * 5_000
    for name, arguments in [
        ("read_version", {"path": "/memories/audit-errors.txt", "version": version}),
        ("diff", {"from_version": version}),
    ]:
        result = session.call(name, arguments)
        assert result.is_error
        assert len(result.text) < ECHO_CAP + 300, (name, len(result.text))


# -- attribution ------------------------------------------------------------------------------


def test_versions_record_the_actor_and_one_session_per_client_process(tmp_path, hidden):
    served = Served.make(tmp_path / "mcp", hidden)
    written: list[int] = []
    for n in range(2):  # two conversations: two client processes, one after the other
        with stdio(served, "--actor", ACTOR) as session:
            before = commit_count(served.path)
            path = f"/memories/conversation-{n}.txt"
            assert not session.call("create", {"path": path, "file_text": "one\n"}).is_error
            assert not session.call("insert", {"path": path, "insert_line": 1, "insert_text": "two\n"}).is_error
            assert not session.call("str_replace", {"path": path, "old_str": "one", "new_str": "1"}).is_error
            assert session.call("delete", {"path": "/memories/none.txt"}).is_error  # a refusal records nothing
            assert not session.call("view", {"path": path}).is_error
            written.append(commit_count(served.path) - before)
    assert written == [3, 3]

    rows = commits(served.path)  # newest first
    assert len(rows) == 6
    assert {author for _commit, author, _session in rows} == {ACTOR}
    second, first = {s for _c, _a, s in rows[:3]}, {s for _c, _a, s in rows[3:]}
    assert len(first) == 1 and len(second) == 1 and first != second
    for session_id in first | second:
        assert SESSION.fullmatch(session_id), session_id

    (first_session,) = first
    listed = subprocess.run(
        [sys.executable, "-m", "vaultmem", "log", "--vault", str(served.path), "--session", first_session, "--json"],
        env=served.env(),
        cwd=str(served.home),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    versions = json.loads(listed.stdout)
    assert [v["id"] for v in versions] == [commit for commit, _a, _s in rows[3:]]
    assert [v["command"] for v in versions] == ["str_replace", "insert", "create"]
    assert {(v["actor"], v["session"]) for v in versions} == {(ACTOR, first_session)}
    assert {tuple(v["paths"]) for v in versions} == {("/memories/conversation-0.txt",)}


# -- read-only, the size limit, policies ------------------------------------------------------


def test_a_read_only_server_lists_only_the_read_tools(read_only):
    _served, session = read_only
    assert sorted(tool.name for tool in session.tools()) == sorted(READ_TOOLS)
    shown = session.call("view", {"path": "/memories/keep.txt"})
    assert shown == Result("Here's the content of /memories/keep.txt with line numbers:\n     1\tk", False)
    rows = history_rows(session.call("history", {}).text)
    assert [row["what"] for row in rows] == ["create /memories/keep.txt"]
    assert session.call("read_version", {"path": "/memories/keep.txt", "version": rows[0]["id"]}) == Result(
        "k\n", False
    )


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("create", {"path": "/memories/new.txt", "file_text": "hi\n"}),
        ("str_replace", {"path": "/memories/keep.txt", "old_str": "k", "new_str": "x"}),
        ("insert", {"path": "/memories/keep.txt", "insert_line": 0, "insert_text": "x"}),
        ("delete", {"path": "/memories/keep.txt"}),
        ("rename", {"old_path": "/memories/keep.txt", "new_path": "/memories/moved.txt"}),
    ],
)
def test_a_read_only_server_refuses_writes_with_its_message(read_only, name, arguments):
    served, session = read_only
    before = commit_count(served.path)
    result = session.call(name, arguments)
    assert result.is_error
    assert commit_count(served.path) == before == 1
    assert session.call("view", {"path": "/memories/keep.txt"}).text.endswith("\n     1\tk")
    assert result.text == READ_ONLY_REFUSAL


def test_oversized_arguments_are_refused_and_the_server_keeps_serving(shared):
    served, session = shared
    before = commit_count(served.path)
    arguments = {"path": "/memories/big/huge.txt", "file_text": "x" * 20_000}
    refused = session.call("create", arguments)
    assert refused.is_error
    sent = re.fullmatch(r"Error: the request is ([0-9,]+) bytes, .*", refused.text)
    assert sent is not None, refused
    size = int(sent.group(1).replace(",", ""))  # the request line as the client sent it: the arguments and more
    assert size > len(json.dumps(arguments).encode("utf-8"))
    assert refused.text == too_large(size, MAX_REQUEST)
    assert commit_count(served.path) == before
    assert session.call("view", {"path": "/memories/big/huge.txt"}).is_error
    fits = {"path": "/memories/big/fits.txt", "file_text": "y" * 9_000}
    assert session.call("create", fits) == Result("File created successfully at: /memories/big/fits.txt", False)
    assert commit_count(served.path) == before + 1
    with served.open() as vault:
        assert vault.read("/memories/big/fits.txt") == "y" * 9_000


def test_a_secrets_policy_refuses_a_key_with_the_memory_tools_words(tmp_path, hidden):
    served = Served.make(tmp_path / "mcp", hidden)
    with served.open() as vault:
        vault.set_policy(actor="ops", secrets="refuse")
    text = (Path(__file__).parent / "corpus" / "secrets" / "python-script-hardcoded-openai.txt").read_text()
    params = {"command": "create", "path": "/memories/script.md", "file_text": text}
    with stdio(served, "--actor", ACTOR) as session:
        refused = session.call("create", {"path": "/memories/script.md", "file_text": text})
        assert session.call("view", {"path": "/memories/script.md"}).is_error
        assert commit_count(served.path) == 0
        fine = session.call("create", {"path": "/memories/fine.md", "file_text": "We ship on Tuesdays.\n"})
        assert fine == Result("File created successfully at: /memories/fine.md", False)
    assert refused.is_error
    assert refused.text.startswith("Error: ")
    with served.open() as vault:
        expected = reference(VaultMemoryTool(vault, actor="support-bot"), params)
    assert refused == expected
    assert commit_count(served.path) == 1


def test_the_size_and_count_limits_refuse_with_the_memory_tools_words(tmp_path, hidden):
    """The policy's quotas apply over MCP as in the tool: a file over
    ``max_file_bytes``, a write past ``max_vault_bytes`` and a file past
    ``max_files`` are refused with the same texts, and nothing is written."""
    served = Served.make(tmp_path / "mcp", hidden)
    with served.open() as vault:
        vault.set_policy(actor="ops", max_file_bytes=200, max_vault_bytes=300, max_files=2)
    calls = [
        {"command": "create", "path": "/memories/big.md", "file_text": "x" * 201},
        {"command": "create", "path": "/memories/a.md", "file_text": "a" * 150},
        {"command": "create", "path": "/memories/b.md", "file_text": "b" * 160},
        {"command": "create", "path": "/memories/c.md", "file_text": "c\n"},
        {"command": "create", "path": "/memories/d.md", "file_text": "d\n"},
        {"command": "str_replace", "path": "/memories/a.md", "old_str": "a" * 150, "new_str": "a" * 210},
    ]
    with stdio(served, "--actor", ACTOR) as session:
        got = [session.call(c["command"], {k: v for k, v in c.items() if k != "command"}) for c in calls]
    written = commit_count(served.path)
    mirror = Served.make(tmp_path / "mirror", hidden)
    with mirror.open() as vault:
        vault.set_policy(actor="ops", max_file_bytes=200, max_vault_bytes=300, max_files=2)
        tool = VaultMemoryTool(vault, actor="support-bot")
        expected = [reference(tool, dict(c)) for c in calls]
    assert got == expected
    assert [r.is_error for r in got] == [True, False, True, False, True, True]
    assert written == 2  # the two files that fit (the policy is on its own branch)
    assert "200" in got[0].text and "300" in got[2].text and "2" in got[4].text


def test_a_request_line_over_the_limit_is_refused_unread_and_the_server_keeps_serving(shared):
    """Over stdio a request is one line: one longer than the request limit
    plus 64 KiB (the JSON-RPC envelope, as over HTTP) is not read into memory
    or parsed.  Its request gets an error naming the limit, found by the id
    at the start of the line, and the next request is served."""
    from mcp.shared.exceptions import MCPError

    served, session = shared
    before = commit_count(served.path)
    arguments = {"path": "/memories/huge-line.txt", "file_text": "x" * (MAX_REQUEST + 70_000)}
    with pytest.raises(MCPError) as refused:
        session.run(lambda s: s.call_tool("create", arguments))
    assert "over this memory server's limit" in str(refused.value) and f"{MAX_REQUEST + 65_536:,}" in str(refused.value)
    assert commit_count(served.path) == before
    assert session.call("view", {"path": "/memories/huge-line.txt"}).is_error
    fits = {"path": "/memories/after-huge-line.txt", "file_text": "ok\n"}
    assert session.call("create", fits) == Result("File created successfully at: /memories/after-huge-line.txt", False)
