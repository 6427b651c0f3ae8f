"""Edge cases of the memory tool contract met through the SDK tool class and
the ``vaultmem call`` command: hostile or odd input gets one clear ``Error:``
line and changes nothing; the SDK's memory tool interface works unchanged."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from anthropic.lib.tools import ToolError
from anthropic.tools import BetaLocalFilesystemMemoryTool
from conftest import commit_count, examples, git
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vaultmem import AsyncVaultMemoryTool, Change, Vault, VaultError, VaultMemoryTool, generate_key
from vaultmem.core.paths import MemoryPath


def refused(tool: VaultMemoryTool, vault_path: Path, params: Any) -> str:
    """The ToolError message of a call that must fail and change nothing."""
    before = commit_count(vault_path)
    with pytest.raises(ToolError) as info:
        tool.call(params)
    assert commit_count(vault_path) == before
    message = info.value.content
    assert isinstance(message, str)
    assert message.startswith("Error: ") and "\n" not in message, message
    return message


def run_cli(vault: Path, key: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
    env["VAULTMEM_KEY"] = key
    return subprocess.run(
        [sys.executable, "-m", "vaultmem", "--vault", str(vault), *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


# -- integers too long to print ------------------------------------------------------


HUGE = 10**5000  # more digits than Python will turn into text (4,300)


@pytest.mark.parametrize(
    "params",
    [
        {"command": "insert", "path": "/memories/a.txt", "insert_line": HUGE, "insert_text": "x"},
        {"command": "insert", "path": "/memories/a.txt", "insert_line": -HUGE, "insert_text": "x"},
        {"command": "view", "path": "/memories/a.txt", "view_range": [1, HUGE]},
        {"command": "view", "path": "/memories/a.txt", "view_range": [-HUGE, 1]},
    ],
    ids=["insert_line", "negative insert_line", "view_range end", "view_range start"],
)
def test_a_huge_line_number_is_refused_with_a_clear_error(
    tool: VaultMemoryTool, vault_path: Path, params: dict[str, Any]
) -> None:
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "one\ntwo\n"})
    message = refused(tool, vault_path, params)
    assert "It should be within the range of lines of the file" in message
    assert len(message) < 400


def test_cli_call_refuses_a_number_too_long_to_read(tmp_path: Path) -> None:
    key = generate_key()
    vault = tmp_path / "agent.vault"
    Vault.init(vault, key=key)
    digits = "1" + "0" * 5000
    raw = '{"command": "insert", "path": "/memories/a.txt", "insert_line": ' + digits + ', "insert_text": "x"}'
    result = run_cli(vault, key, "call", raw)
    assert result.returncode == 2, result
    assert "unexpected" not in result.stderr and "verify" not in result.stderr, result.stderr
    assert "number" in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr
    assert commit_count(vault) == 0


# -- lone surrogates in what the model sends back to itself ---------------------------


@pytest.mark.parametrize(
    "params",
    [
        {"command": "str_replace", "path": "/memories/a.txt", "old_str": "\ud800", "new_str": "b"},
        {"command": "str_replace", "path": "/memories/a.txt", "old_str": "one\udce9", "new_str": "b"},
        {"command": "bogus\ud800", "path": "/memories"},
        {"command": "view", "path": "/memories", "\ud800": 1},
    ],
    ids=["old_str", "old_str with a Latin-1 byte", "command", "parameter name"],
)
def test_an_error_never_carries_text_that_is_not_unicode(
    tool: VaultMemoryTool, vault_path: Path, params: dict[str, Any]
) -> None:
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "one\ntwo\n"})
    message = refused(tool, vault_path, params)
    message.encode("utf-8")  # a tool result the SDK can send, a line a terminal can print


@pytest.mark.parametrize(
    "raw",
    [
        '{"command": "str_replace", "path": "/memories/a.txt", "old_str": "\\ud800", "new_str": "b"}',
        '{"command": "bogus\\ud800"}',
        '{"command": "view", "path": "/memories", "\\ud800": 1}',
    ],
    ids=["old_str", "command", "parameter name"],
)
def test_cli_call_prints_a_clear_error_for_a_lone_surrogate(tmp_path: Path, raw: str) -> None:
    key = generate_key()
    vault = tmp_path / "agent.vault"
    tool = VaultMemoryTool(Vault.init(vault, key=key))
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "one\n"})
    result = run_cli(vault, key, "call", raw)
    assert result.returncode == 1, result
    assert result.stdout.startswith("Error: "), result
    assert "unexpected" not in result.stderr and "verify" not in result.stderr, result.stderr
    json_result = run_cli(vault, key, "call", "--json", raw)
    assert json_result.returncode == 1 and json.loads(json_result.stdout)["ok"] is False, json_result
    assert commit_count(vault) == 1


# -- the SDK's memory tool interface ---------------------------------------------------


def test_clear_all_memory_works_as_on_the_sdk_filesystem_tool(
    tool: VaultMemoryTool, vault: Vault, vault_path: Path, tmp_path: Path
) -> None:
    sdk = BetaLocalFilesystemMemoryTool(base_path=str(tmp_path / "sdk"))
    for backend in (sdk, tool):
        backend.call({"command": "create", "path": "/memories/a.txt", "file_text": "one\n"})
        backend.call({"command": "create", "path": "/memories/d/b.txt", "file_text": "two\n"})
        backend.call({"command": "create", "path": "/memories/.hidden", "file_text": "three\n"})
    before = commit_count(vault_path)
    assert tool.clear_all_memory() == sdk.clear_all_memory() == "All memory cleared"
    assert commit_count(vault_path) == before + 1  # one audited commit, like any delete
    assert git(vault_path, "ls-tree", "-r", "--name-only", "refs/heads/main", "memories") == ""
    listing = tool.call({"command": "view", "path": "/memories"})
    assert listing.split("\n")[1:] == ["0B\t/memories"]
    assert git(vault_path, "log", "-1", "--format=%(trailers:key=Vaultmem-Command,valueonly)").strip() == "delete"
    # the earlier state is still in history
    assert vault.read("/memories/d/b.txt", at=vault.history(limit=2)[1].id) == "two\n"


def test_clear_all_memory_of_an_empty_vault_makes_no_commit(tool: VaultMemoryTool, vault_path: Path) -> None:
    assert tool.clear_all_memory() == "All memory cleared"
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "one\n"})
    tool.clear_all_memory()
    assert commit_count(vault_path) == 2
    assert tool.clear_all_memory() == "All memory cleared"
    assert commit_count(vault_path) == 2


def test_async_clear_all_memory(vault: Vault, vault_path: Path) -> None:
    tool = AsyncVaultMemoryTool(vault)

    async def scenario() -> str:
        await tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "one\n"})
        return await tool.clear_all_memory()

    assert asyncio.run(scenario()) == "All memory cleared"
    assert git(vault_path, "ls-tree", "-r", "--name-only", "refs/heads/main", "memories") == ""


# -- input shape -----------------------------------------------------------------------


def test_a_call_without_a_command_says_the_command_is_missing(tool: VaultMemoryTool, vault_path: Path) -> None:
    message = refused(tool, vault_path, {"path": "/memories"})
    assert message == (
        "Error: Missing required parameter `command`. Use one of: view, create, str_replace, insert, delete, rename."
    )


# -- names git refuses -------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", [".git:x", ".git::$INDEX_ALLOCATION", "git~1:stream", ".GIT. :x", ".git:", "GiT~1::$DATA"]
)
def test_a_name_git_reads_as_dot_git_on_ntfs_is_reserved(tool: VaultMemoryTool, vault_path: Path, name: str) -> None:
    message = refused(tool, vault_path, {"command": "create", "path": f"/memories/notes/{name}", "file_text": "x"})
    assert "the name .git is reserved" in message
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "x"})
    message = refused(
        tool, vault_path, {"command": "rename", "old_path": "/memories/a.txt", "new_path": f"/memories/{name}"}
    )
    assert "the name .git is reserved" in message


def test_a_default_vault_pushes_to_a_server_that_checks_objects(tmp_path: Path) -> None:
    """A server with ``receive.fsckObjects`` (as hosted git servers run)
    rejects a tree entry git reads as ``.git``; every name the tool accepts
    must pass, or the vault could never be pushed again."""
    vault_path = tmp_path / "agent.vault"
    tool = VaultMemoryTool(Vault.init(vault_path, key=generate_key(), sealed_names=False))
    for name in ("a:b", ".gitx:y", "git~2:x", ".git:x", "notes/git~1:stream"):
        with contextlib.suppress(ToolError):  # the names git refuses are refused
            tool.call({"command": "create", "path": f"/memories/{name}", "file_text": "x"})
    server = tmp_path / "server.git"
    subprocess.run(["git", "init", "-q", "--bare", str(server)], check=True)
    git(server, "config", "receive.fsckObjects", "true")
    pushed = subprocess.run(
        ["git", "-C", str(vault_path), "push", str(server), "refs/heads/main:refs/heads/main"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert pushed.returncode == 0, pushed.stderr
    assert "a:b" in git(server, "ls-tree", "--name-only", "refs/heads/main", "memories/")


# -- rename keeps every path within the rules -------------------------------------------


def test_renaming_a_folder_refuses_to_give_a_file_below_it_a_path_over_the_limit(
    tool: VaultMemoryTool, vault_path: Path
) -> None:
    segment = "s" * 250
    deep = "/memories/a/" + "/".join([segment] * 4) + "/f"  # 1,017 bytes: within the limit
    tool.call({"command": "create", "path": deep, "file_text": "x"})
    tool.call({"command": "create", "path": "/memories/a/short.txt", "file_text": "y"})
    longer = "/memories/" + "b" * 250  # would make the deep file's path 1,266 bytes
    message = refused(tool, vault_path, {"command": "rename", "old_path": "/memories/a", "new_path": longer})
    assert "1,024 bytes" in message and "1,266" in message, message
    # every file is still reachable by the tool
    assert tool.call({"command": "view", "path": deep}).endswith("\tx")
    # a rename that keeps every path within the limit goes through
    tool.call({"command": "rename", "old_path": "/memories/a", "new_path": "/memories/" + "b" * 7})
    moved = "/memories/bbbbbbb/" + "/".join([segment] * 4) + "/f"
    assert len(moved.encode()) == 1023
    assert tool.call({"command": "view", "path": moved}).endswith("\tx")


# -- any input: a string back, or a clear error that changed nothing ----------------------

PATHS = st.one_of(
    st.sampled_from(
        [
            "/memories",
            "/memories/",
            "/memories/a.txt",
            "/memories/d",
            "/memories/d/",
            "/memories/d/b.txt",
            "/memories/n",
        ]
    ),
    st.text(max_size=12).map(lambda s: "/memories/" + s),
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 6),
    st.integers(),
    st.sampled_from([HUGE, -HUGE, 2**64]),
    st.floats(),
    st.text(max_size=8),
    st.sampled_from(["\ud800", "a\udce9", "one", "two\n", ""]),
    st.binary(max_size=4),
)
VALUES = st.one_of(
    SCALARS, PATHS, st.lists(SCALARS, max_size=3), st.dictionaries(st.text(max_size=3), SCALARS, max_size=2)
)
NAMES = st.sampled_from(
    ["path", "view_range", "file_text", "old_str", "new_str", "insert_line", "insert_text", "old_path", "new_path"]
)
COMMANDS = st.one_of(st.sampled_from(["view", "create", "str_replace", "insert", "delete", "rename"]), SCALARS)


@settings(max_examples=examples(400), deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(command=COMMANDS, params=st.dictionaries(st.one_of(NAMES, st.text(max_size=4)), VALUES, max_size=4))
def test_any_input_gets_a_result_or_a_clear_error_that_changes_nothing(
    tool: VaultMemoryTool, vault_path: Path, command: object, params: dict[str, Any]
) -> None:
    """One vault for every example: what succeeds may change it, what fails must not."""
    for path, text in (("/memories/a.txt", "one\ntwo\nthree\n"), ("/memories/d/b.txt", "x")):
        with contextlib.suppress(ToolError):  # there from an earlier example
            tool.call({"command": "create", "path": path, "file_text": text})
    before = commit_count(vault_path)
    try:
        result = tool.call({**params, "command": command})
    except ToolError as err:
        assert isinstance(err.content, str)
        err.content.encode("utf-8")
        assert commit_count(vault_path) == before
    else:
        assert isinstance(result, str)
        result.encode("utf-8")


# -- a listing past the cap -----------------------------------------------------------------


def test_a_listing_cut_before_a_folder_still_tells_of_the_files_after_it(vault: Vault) -> None:
    """Files directly in the folder listed that come after a subdirectory
    are in no view of a subdirectory: the cut says they are there."""
    tool = VaultMemoryTool(vault, view_cap=300)
    for name in [f"a{i}.txt" for i in range(8)] + [f"m/f{i}.txt" for i in range(8)] + ["n0.txt", "n1.txt", "n2.txt"]:
        tool.call({"command": "create", "path": f"/memories/{name}", "file_text": "x"})
    listing = tool.call({"command": "view", "path": "/memories"}).split("\n")
    shown = [line.split("\t")[1] for line in listing[2:-1]]
    assert "/memories/m/" in shown and "/memories/n0.txt" not in shown
    last = listing[-1]
    assert "view a subdirectory such as /memories/m" in last, last
    assert "3 files directly in /memories" in last and "from /memories/n0.txt on" in last, last
    assert "\n" not in last and last.endswith("]")


# -- the application's own settings fail at construction ---------------------------------


@pytest.mark.parametrize(
    "who",
    [
        {"actor": ""},
        {"actor": "support <bot>"},
        {"actor": "line\nbreak"},
        {"actor": "x" * 201},
        {"actor": "Ren\udce9"},
        {"session": "sess\n42"},
        {"session": "a<b"},
    ],
    ids=[
        "empty actor",
        "actor with <>",
        "actor with a newline",
        "long actor",
        "actor not UTF-8",
        "session",
        "session <",
    ],
)
def test_an_actor_or_session_git_cannot_record_is_refused_when_the_tool_is_made(
    vault: Vault, vault_path: Path, who: dict[str, str]
) -> None:
    """Not at every write, as a tool error Claude can do nothing about."""
    for cls in (VaultMemoryTool, AsyncVaultMemoryTool):
        with pytest.raises(VaultError, match=r"^Error: the (actor|session) "):
            cls(vault, **who)  # type: ignore[arg-type]
    assert commit_count(vault_path) == 0


def test_a_stream_name_an_older_vaultmem_stored_stays_reachable(tool: VaultMemoryTool, vault: Vault) -> None:
    """Only new names are refused: a file stored under such a name before the
    rule can still be read, edited, deleted, or moved to a name git accepts."""
    legacy = MemoryPath(("notes", ".git:x"))
    vault.mutate(lambda snap: Change("create", (legacy,)).write(legacy, b"one\n"), actor="older-vaultmem")
    assert tool.call({"command": "view", "path": "/memories/notes/.git:x"}).endswith("\tone")
    tool.call({"command": "str_replace", "path": "/memories/notes/.git:x", "old_str": "one", "new_str": "two"})
    tool.call({"command": "insert", "path": "/memories/notes/.git:x", "insert_line": 1, "insert_text": "three"})
    tool.call({"command": "rename", "old_path": "/memories/notes/.git:x", "new_path": "/memories/notes/git-x.txt"})
    assert vault.read("/memories/notes/git-x.txt") == "two\nthree\n"
    vault.mutate(lambda snap: Change("create", (legacy,)).write(legacy, b"again\n"), actor="older-vaultmem")
    assert (
        tool.call({"command": "delete", "path": "/memories/notes/.git:x"})
        == "Successfully deleted /memories/notes/.git:x"
    )
