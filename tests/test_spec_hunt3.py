"""The memory tool contract met with edge input, call by call, beside the SDK's
own ``BetaLocalFilesystemMemoryTool``: the str_replace snippet beside a line
longer than the output cap and for an edit larger than it, a stored file that
is not UTF-8, a rename below a file, typed SDK command objects holding a
mistyped value, and a memory file's invisible characters as an auditor sees
them."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest
from anthropic.lib.tools import ToolError
from anthropic.types.beta import BetaMemoryTool20250818CreateCommand, BetaMemoryTool20250818InsertCommand
from conftest import commit_count

from vaultmem import Change, Vault, VaultError, VaultMemoryTool
from vaultmem.cli.app import main
from vaultmem.core.paths import parse

SNIPPET = "The memory file has been edited. Here is the snippet showing the change (with line numbers):\n"


# -- the str_replace snippet covers the change ----------------------------------------


def test_the_snippet_shows_the_edited_line_when_a_line_above_it_is_over_the_cap(tool: VaultMemoryTool) -> None:
    """A memory that starts with one long line (a JSON record Claude wrote on one
    line) and an edit two lines below it: the snippet must show the edit, not
    16,000 characters of the unchanged line above and nothing else."""
    record = json.dumps({"customer": "ACME", "notes": ["n" * 40] * 450})
    assert len(record) > 16_000
    tool.call({"command": "create", "path": "/memories/acme.md", "file_text": f"{record}\nplan: basic\nseats: 5\n"})
    result = tool.call(
        {"command": "str_replace", "path": "/memories/acme.md", "old_str": "seats: 5", "new_str": "seats: 7"}
    )
    assert result.startswith(SNIPPET)
    assert "     3\tseats: 7" in result.splitlines()
    assert "     2\tplan: basic" in result.splitlines()
    assert len(result) < 16_000 + len(SNIPPET) + 200


def test_the_snippet_drops_context_before_the_edit_first(vault: Vault) -> None:
    tool = VaultMemoryTool(vault, actor="support-bot", session="sess-42", view_cap=100)
    tool.call({"command": "create", "path": "/memories/s.txt", "file_text": "L" * 150 + "\nctx\nold\nafter\nend\n"})
    result = tool.call({"command": "str_replace", "path": "/memories/s.txt", "old_str": "old", "new_str": "NEW"})
    assert result == SNIPPET + "     2\tctx\n     3\tNEW\n     4\tafter\n     5\tend"


def test_a_snippet_cut_inside_the_edit_says_which_view_range_shows_the_rest(vault: Vault) -> None:
    tool = VaultMemoryTool(vault, actor="support-bot", session="sess-42", view_cap=100)
    tool.call({"command": "create", "path": "/memories/m.txt", "file_text": "a\nb\nold\nc\n"})
    new = "\n".join(f"new line {i}" for i in range(30))
    result = tool.call({"command": "str_replace", "path": "/memories/m.txt", "old_str": "old", "new_str": new})
    lines = result.splitlines()
    # the edited lines take the room context would: as many of them as fit
    assert lines[1:-1] == [f"{n:>6}\tnew line {n - 3}" for n in range(3, 8)]
    assert lines[-1] == (
        "[Snippet cut at 100 characters: the edit covers lines 3-32 and lines 8-32 are not shown. "
        "To see them, view /memories/m.txt with view_range [8, 32].]"
    )
    # what the note says to ask for is there to see
    rest = tool.call({"command": "view", "path": "/memories/m.txt", "view_range": [8, 32]})
    assert rest.splitlines()[1] == "     8\tnew line 5"


def test_an_edit_that_fits_keeps_the_snippet_as_before(tool: VaultMemoryTool) -> None:
    tool.call({"command": "create", "path": "/memories/k.txt", "file_text": "".join(f"{i}\n" for i in range(1, 8))})
    result = tool.call({"command": "str_replace", "path": "/memories/k.txt", "old_str": "4\n", "new_str": "four\n"})
    assert result == SNIPPET + "     2\t2\n     3\t3\n     4\tfour\n     5\t5\n     6\t6"


# -- a file whose bytes are not UTF-8 -------------------------------------------------


def _store_bytes(vault: Vault, path: str, data: bytes) -> None:
    """What an application can store through the Python API: bytes, checked by nobody."""
    target = parse(path)
    vault.mutate(lambda snap: Change("create", (target,)).write(target, data), actor="importer")


@pytest.mark.parametrize(
    "params",
    [
        {"command": "view", "path": "/memories/latin1.txt"},
        {"command": "view", "path": "/memories/latin1.txt", "view_range": [1, 1]},
        {"command": "str_replace", "path": "/memories/latin1.txt", "old_str": "caf", "new_str": "bar"},
        {"command": "insert", "path": "/memories/latin1.txt", "insert_line": 0, "insert_text": "top"},
    ],
    ids=["view", "view_range", "str_replace", "insert"],
)
def test_a_file_that_is_not_utf8_gets_a_clear_error_not_an_exception(
    tool: VaultMemoryTool, vault: Vault, vault_path: Path, params: dict[str, object]
) -> None:
    _store_bytes(vault, "/memories/latin1.txt", b"caf\xe9 au lait\n")  # Latin-1, not UTF-8
    before = commit_count(vault_path)
    with pytest.raises(ToolError) as info:
        tool.call(params)
    assert info.value.content == (
        "Error: The file /memories/latin1.txt holds bytes that are not UTF-8 text (another program stored them), "
        "so the memory tool cannot show or edit it. Delete it, or rename it, and create a new file instead."
    )
    assert commit_count(vault_path) == before


def test_a_file_that_is_not_utf8_can_be_listed_renamed_and_deleted(tool: VaultMemoryTool, vault: Vault) -> None:
    _store_bytes(vault, "/memories/latin1.txt", b"caf\xe9\n")
    assert tool.call({"command": "view", "path": "/memories"}).splitlines()[1:] == [
        "5B\t/memories",
        "5B\t/memories/latin1.txt",
    ]
    rename = {"command": "rename", "old_path": "/memories/latin1.txt", "new_path": "/memories/old.bin"}
    assert tool.call(rename) == "Successfully renamed /memories/latin1.txt to /memories/old.bin"
    assert tool.call({"command": "delete", "path": "/memories/old.bin"}) == "Successfully deleted /memories/old.bin"


# -- rename below a file ---------------------------------------------------------------


@pytest.mark.parametrize("new_path", ["/memories/a.txt/b.txt", "/memories/a.txt/sub/b.txt"])
def test_renaming_a_file_below_itself_says_it_is_a_file(tool: VaultMemoryTool, vault_path: Path, new_path: str) -> None:
    """Not "into itself", which reads as if /memories/a.txt were a folder."""
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "x"})
    before = commit_count(vault_path)
    with pytest.raises(ToolError) as info:
        tool.call({"command": "rename", "old_path": "/memories/a.txt", "new_path": new_path})
    assert info.value.content == f"Error: Cannot rename to {new_path}: /memories/a.txt is a file, not a directory."
    assert commit_count(vault_path) == before


# -- typed SDK command objects ----------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (
            BetaMemoryTool20250818CreateCommand.construct(command="create", path="/memories/b.txt", file_text=b"x"),
            "Error: Parameter `file_text` must be a string, got bytes.",
        ),
        (
            BetaMemoryTool20250818InsertCommand.construct(
                command="insert", path="/memories/a.txt", insert_line=1.0, insert_text="x"
            ),
            "Error: Parameter `insert_line` must be an integer, got number.",
        ),
    ],
    ids=["bytes file_text", "float insert_line"],
)
def test_a_typed_command_with_a_mistyped_value_is_refused_without_a_warning(
    tool: VaultMemoryTool, command: object, message: str
) -> None:
    """The same clear error as for a dict, and nothing on stderr: an
    application that runs with warnings as errors gets the ToolError too."""
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "x\n"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ToolError) as info:
            tool.call(command)
    assert info.value.content == message


# -- what a memory file holds, shown to the person who audits it -------------------------


def test_show_and_diff_spell_bidi_controls_and_invisible_characters_in_a_file_as_escapes(
    tool: VaultMemoryTool,
    vault_path: Path,
    key: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/cli.md: a format character or a line separator in a file's text is
    printed as an escape.  A right-to-left override planted in a memory would
    otherwise show the auditor "pay 01$ ot" reversed into an order the file does
    not hold (Trojan Source); joiners that emoji and scripts need stay as they are."""
    planted = "refund \u202e0001$ ot\u202c ok\u200b\nline\u2028sep \u200fmark\nteam 👩\u200d💻 مى\u200cخواهم\n"
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "first\n"})
    tool.call({"command": "str_replace", "path": "/memories/a.txt", "old_str": "first\n", "new_str": planted})
    for name in list(os.environ):
        if name.startswith("VAULTMEM_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("VAULTMEM_KEY", key)
    for args in (("show", "main"), ("diff", "main~1", "main")):
        assert main(["--vault", str(vault_path), *args]) == 0
        out = capsys.readouterr().out
        assert "+refund \\u202e0001$ ot\\u202c ok\\u200b\n" in out, out
        assert "+line\\u2028sep \\u200fmark\n" in out
        assert "+team 👩\u200d💻 مى\u200cخواهم\n" in out
        assert not any(ch in out for ch in "\u202e\u202c\u200b\u2028\u200f")


def test_vault_read_of_a_file_that_is_not_utf8_is_a_clear_error(vault: Vault, tmp_path: Path) -> None:
    """``Vault.read`` raised the codec's UnicodeDecodeError; it now raises a
    VaultError naming the file, and an export still writes its bytes."""
    _store_bytes(vault, "/memories/latin1.txt", b"caf\xe9 au lait\n")
    with pytest.raises(VaultError) as err:
        vault.read("/memories/latin1.txt")
    assert str(err.value) == (
        "Error: /memories/latin1.txt holds bytes that are not UTF-8 text, so it cannot be read as text; "
        "`vaultmem export` (export_folder() in Python) writes its bytes as they are."
    )
    vault.export_folder(tmp_path / "out")
    assert (tmp_path / "out" / "memories" / "latin1.txt").read_bytes() == b"caf\xe9 au lait\n"


def test_every_character_of_a_line_longer_than_the_cap_can_be_read(tool: VaultMemoryTool) -> None:
    """A line longer than the view cap was shown cut, and no view_range
    reached the rest of it (4,007 of a 20,000-character line).  The marker
    names the range of that line alone, which shows it whole."""
    record = "".join(f"{i:05d}," for i in range(3_400))[:20_000]
    tool.call({"command": "create", "path": "/memories/r.jsonl", "file_text": f"head\n{record}\ntail\n"})
    cut = tool.call({"command": "view", "path": "/memories/r.jsonl", "view_range": [2, 3]})
    assert "[line 2 cut at 16,000 characters; view_range [2, 2] shows it whole]" in cut
    assert record not in cut
    whole = tool.call({"command": "view", "path": "/memories/r.jsonl", "view_range": [2, 2]})
    assert whole == f"Here's the content of /memories/r.jsonl with line numbers:\n     2\t{record}"
    assert tool.call({"command": "view", "path": "/memories/r.jsonl", "view_range": [3, 3]}).endswith("     3\ttail")


def test_a_vault_moved_away_while_open_is_an_error_not_an_empty_memory(
    vault: Vault, vault_path: Path, tool: VaultMemoryTool
) -> None:
    """Moved (or deleted, or unmounted) under an open instance, the vault
    read as an empty memory: `view` said the file does not exist."""
    tool.call({"command": "create", "path": "/memories/notes.md", "file_text": "Prefers e-mail.\n"})
    moved = vault_path.with_name("moved.vault")
    vault_path.rename(moved)
    try:
        with pytest.raises(VaultError, match="the vault's folder is gone"):
            vault.read("/memories/notes.md")
        with pytest.raises(ToolError, match="the vault's folder is gone"):
            tool.call({"command": "view", "path": "/memories/notes.md"})
        with pytest.raises(ToolError, match="the vault's folder is gone"):
            tool.call({"command": "create", "path": "/memories/other.md", "file_text": "x\n"})
    finally:
        moved.rename(vault_path)
    assert vault.read("/memories/notes.md") == "Prefers e-mail.\n"
    assert not (moved / "memories").exists()
