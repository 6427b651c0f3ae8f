"""The memory tool contract at every entry point: a path that ends in one
``/`` names a folder (SPEC.md: no empty segment "other than one trailing
``/`` on a directory"), so a file asked for with it is not there, through
the Python API and the CLI as through the tool; a change an application
commits through ``Vault.mutate`` is held to the path rules too; and the
SDK's own ``execute`` dispatch answers an unknown command as ``call`` does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from anthropic._models import construct_type_unchecked
from anthropic.lib.tools import ToolError
from anthropic.types.beta import BetaMemoryTool20250818Command
from conftest import commit_count, git
from mcp_helpers import Served, stdio

from vaultmem import AsyncVaultMemoryTool, Change, Vault, VaultMemoryTool
from vaultmem.cli.app import main
from vaultmem.core.paths import MemoryPath, parse
from vaultmem.errors import InvalidPathError, NotFoundError

# -- a file named with a trailing '/' ---------------------------------------------------


def test_the_api_does_not_read_a_file_named_as_a_folder(tool: VaultMemoryTool, vault: Vault) -> None:
    tool.call({"command": "create", "path": "/memories/notes/plan.md", "file_text": "ship it\n"})
    with pytest.raises(ToolError) as info:
        tool.call({"command": "view", "path": "/memories/notes/plan.md/"})
    assert info.value.content == "The path /memories/notes/plan.md/ does not exist. Please provide a valid path."
    with pytest.raises(NotFoundError) as found:
        vault.read("/memories/notes/plan.md/")
    assert str(found.value) == (
        "Error: no folder /memories/notes/plan.md/: /memories/notes/plan.md is a file; "
        "give its path without the trailing '/'."
    )
    with pytest.raises(NotFoundError) as listed:
        vault.listing("/memories/notes/plan.md/")
    assert str(listed.value) == str(found.value)
    # without the '/', and for a folder with one, nothing changes
    assert vault.read("/memories/notes/plan.md") == "ship it\n"
    assert [e.path for e in vault.listing("/memories/notes/")] == ["/memories/notes/plan.md"]


def test_the_api_says_which_version_when_a_file_is_named_as_a_folder(tool: VaultMemoryTool, vault: Vault) -> None:
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "one\n"})
    first = vault.history()[0].id
    with pytest.raises(NotFoundError) as found:
        vault.read("/memories/a.txt/", at=first)
    assert str(found.value) == (
        f"Error: no folder /memories/a.txt/ at version {first}: /memories/a.txt is a file; "
        "give its path without the trailing '/'."
    )


def test_cli_cat_and_ls_refuse_a_file_named_as_a_folder(
    tool: VaultMemoryTool,
    vault_path: Path,
    key: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "one\n"})
    monkeypatch.setenv("VAULTMEM_KEY", key)
    for command in ("cat", "ls"):
        assert main(["--vault", str(vault_path), command, "/memories/a.txt/"]) != 0
        out, err = capsys.readouterr()
        assert out == ""
        assert "/memories/a.txt is a file; give its path without the trailing '/'." in err
    assert main(["--vault", str(vault_path), "cat", "/memories/a.txt"]) == 0
    assert capsys.readouterr().out == "one\n"


def test_mcp_read_version_does_not_read_a_file_named_as_a_folder(tmp_path: Path) -> None:
    served = Served.make(tmp_path / "served")
    with stdio(served) as session:
        session.call("create", {"path": "/memories/a.txt", "file_text": "one\n"})
        view = session.call("view", {"path": "/memories/a.txt/"})
        assert (view.text, view.is_error) == (
            "The path /memories/a.txt/ does not exist. Please provide a valid path.",
            True,
        )
        read = session.call("read_version", {"path": "/memories/a.txt/", "version": "main"})
        assert (read.text, read.is_error) == (
            "Error: no folder /memories/a.txt/ at version main: /memories/a.txt is a file; "
            "give its path without the trailing '/'.",
            True,
        )
        read = session.call("read_version", {"path": "/memories/a.txt", "version": "main"})
        assert (read.text, read.is_error) == ("one\n", False)


# -- the SDK's own dispatch, execute() ------------------------------------------------


def _command(raw: dict[str, Any]) -> Any:
    """A command object as the SDK's ``BetaAbstractMemoryTool.call`` makes one."""
    return construct_type_unchecked(value=raw, type_=BetaMemoryTool20250818Command)  # type: ignore[arg-type]


UNKNOWN = "Error: Unknown command `forget`. Use one of: view, create, str_replace, insert, delete, rename."


def test_execute_of_an_unknown_command_is_a_tool_error(tool: VaultMemoryTool) -> None:
    """``execute`` is the SDK's public dispatch of a command object: an
    unknown command is the same clear error as through ``call``, not an
    exception the runner reports as a failure of the tool."""
    with pytest.raises(ToolError) as info:
        tool.execute(_command({"command": "forget", "path": "/memories"}))
    assert info.value.content == UNKNOWN
    created = tool.execute(_command({"command": "create", "path": "/memories/a.txt", "file_text": "one\n"}))
    assert created == "File created successfully at: /memories/a.txt"
    assert tool.execute(_command({"command": "view", "path": "/memories/a.txt"})) == (
        "Here's the content of /memories/a.txt with line numbers:\n     1\tone"
    )


def test_async_execute_of_an_unknown_command_is_a_tool_error(vault: Vault) -> None:
    tool = AsyncVaultMemoryTool(vault, actor="support-bot", session="sess-42")

    async def run() -> None:
        with pytest.raises(ToolError) as info:
            await tool.execute(_command({"command": "forget", "path": "/memories"}))
        assert info.value.content == UNKNOWN
        view = await tool.execute(_command({"command": "view", "path": "/memories"}))
        assert view.endswith("\n0B\t/memories")

    anyio.run(run)


# -- a Change built by hand ----------------------------------------------------------


HAND_BUILT = [
    pytest.param(("..", "x"), id="dot-dot"),
    pytest.param(("a/b",), id="slash in a name"),
    pytest.param(("x\x00",), id="NUL"),
    pytest.param(("",), id="empty name"),
    pytest.param((".git",), id=".git"),
    pytest.param(("a" * 256,), id="name over 255 bytes"),
    pytest.param(("cafe\u0301",), id="not NFC"),
    pytest.param(("x\nVaultmem-Actor: someone-else",), id="line break"),
]


@pytest.mark.parametrize("parts", HAND_BUILT)
def test_a_change_with_a_hand_built_path_is_refused_and_writes_nothing(
    tool: VaultMemoryTool, vault: Vault, vault_path: Path, parts: tuple[str, ...]
) -> None:
    """``Change`` is public API; a path built as ``MemoryPath(parts)`` rather
    than with ``parse`` must not reach a commit: git cannot hold such a tree
    (or refuses to push it), and every later view of the memory would fail."""
    tool.call({"command": "create", "path": "/memories/keep.txt", "file_text": "kept\n"})
    before = commit_count(vault_path)
    bad = MemoryPath(parts)
    for build in (
        lambda snap: Change("create", (bad,)).write(bad, b"x"),
        lambda snap: Change("rename", (parse("/memories/keep.txt"), bad)).move(parse("/memories/keep.txt"), bad),
        lambda snap: Change("delete", (bad,)),
    ):
        with pytest.raises(InvalidPathError) as info:
            vault.mutate(build, actor="app")
        assert str(info.value).startswith("Error: Invalid path")
    assert commit_count(vault_path) == before
    assert tool.call({"command": "view", "path": "/memories"}).endswith("\n5B\t/memories\n5B\t/memories/keep.txt")
    git(vault_path, "fsck", "--strict", "--no-progress")


def test_a_change_with_paths_from_parse_is_committed(vault: Vault) -> None:
    path = parse("/memories/café/notes.md")
    vault.mutate(lambda snap: Change("create", (path,)).write(path, b"hi\n"), actor="app")
    assert vault.read("/memories/cafe\u0301/notes.md") == "hi\n"
