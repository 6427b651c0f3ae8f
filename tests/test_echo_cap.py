"""What an error repeats back to the model is capped, as the view output is
(issue 15): a 5 MB ``old_str`` is not echoed whole.  Short inputs are echoed
exactly as SPEC.md gives the strings."""

from __future__ import annotations

from pathlib import Path

import pytest

from vaultmem import ToolError, Vault, VaultMemoryTool, generate_key
from vaultmem.ops.memory import ECHO_CAP

BIG = "x" * 5_000_000


@pytest.fixture
def memory(tmp_path: Path) -> VaultMemoryTool:
    vault = Vault.init(tmp_path / "v", key=generate_key())
    tool = VaultMemoryTool(vault, actor="a", session="s")
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "one\none\ntwo\n"})
    return tool


def refusal(memory: VaultMemoryTool, params: dict[str, object]) -> str:
    with pytest.raises(ToolError) as info:
        memory.call(params)
    return str(info.value)


def test_a_huge_old_str_that_does_not_appear_is_echoed_capped(memory: VaultMemoryTool) -> None:
    message = refusal(memory, {"command": "str_replace", "path": "/memories/a.txt", "old_str": BIG, "new_str": ""})
    assert len(message) < ECHO_CAP + 300
    assert message.startswith(f"No replacement was performed, old_str `{'x' * ECHO_CAP}")
    assert "5,000,000 characters" in message
    assert message.endswith("did not appear verbatim in /memories/a.txt.")


def test_a_short_old_str_is_echoed_exactly(memory: VaultMemoryTool) -> None:
    exact = "y" * ECHO_CAP
    message = refusal(memory, {"command": "str_replace", "path": "/memories/a.txt", "old_str": exact, "new_str": ""})
    assert message == f"No replacement was performed, old_str `{exact}` did not appear verbatim in /memories/a.txt."
    message = refusal(memory, {"command": "str_replace", "path": "/memories/a.txt", "old_str": "one", "new_str": ""})
    assert message == (
        "No replacement was performed. Multiple occurrences of old_str `one` in lines: 1, 2. Please ensure it is unique"
    )


def test_a_huge_unknown_command_or_parameter_name_is_echoed_capped(memory: VaultMemoryTool) -> None:
    assert len(refusal(memory, {"command": BIG})) < ECHO_CAP + 300
    assert len(refusal(memory, {"command": "view", "path": "/memories", BIG: 1})) < ECHO_CAP + 300


def test_thousands_of_matches_list_the_first_hundred_lines(memory: VaultMemoryTool) -> None:
    memory.call({"command": "create", "path": "/memories/many.txt", "file_text": "z\n" * 5000})
    message = refusal(memory, {"command": "str_replace", "path": "/memories/many.txt", "old_str": "z", "new_str": ""})
    assert message.startswith("No replacement was performed. Multiple occurrences of old_str `z` in lines: 1, 2, 3,")
    assert ", 100, ... [5,000 in all]. Please ensure it is unique" in message
    assert len(message) < 1000
