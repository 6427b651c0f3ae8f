"""A custom secret pattern given in code, that can backtrack without end, is
refused when the tool is made.

``VaultMemoryTool(policy=...)``, ``AsyncVaultMemoryTool`` and the MCP
server's ``MemoryServer(policy=...)`` take the application's own policy on
top of the vault's.  Its ``patterns`` scan every text written, under the
writer lock, exactly as a stored policy's do: ``(\\d+)+x`` would hang the
first write holding a long run of digits, and every writer of the vault
behind it.  ``set_policy`` refuses such a pattern; the tool now refuses it
too, in the same words, before Claude's first call."""

from __future__ import annotations

import pytest

from vaultmem import AsyncVaultMemoryTool, Policy, Vault, VaultError, VaultMemoryTool

HANGS = ["(\\d+)+x", "(a|aa)*b", "acct-(\\w+\\s?)+!"]
START = "Error: the pattern for 'acct' repeats a part that can itself match the same text in more than one way"


@pytest.mark.parametrize("pattern", HANGS)
def test_a_dict_policy_with_such_a_pattern_is_refused_and_nothing_is_written(vault: Vault, pattern: str) -> None:
    before = vault.head()
    with pytest.raises(VaultError) as info:
        VaultMemoryTool(vault, actor="bot", policy={"patterns": {"acct": pattern}, "secrets": "refuse"})
    said = str(info.value)
    assert said.startswith(START), said
    assert "'(a++)+'" in said and "Nothing was changed." not in said  # no change was asked of the vault
    assert vault.head() == before
    assert vault.policy.patterns == {}


def test_a_policy_object_with_such_a_pattern_is_refused(vault: Vault) -> None:
    with pytest.raises(VaultError) as info:
        VaultMemoryTool(vault, actor="bot", policy=Policy(patterns={"acct": "(\\d+)+x"}))
    assert str(info.value).startswith(START)


def test_the_async_tool_refuses_it_too(vault: Vault) -> None:
    with pytest.raises(VaultError) as info:
        AsyncVaultMemoryTool(vault, actor="bot", policy={"patterns": {"acct": "(\\d+)+x"}})
    assert str(info.value).startswith(START)


def test_the_mcp_server_refuses_it_when_made(vault: Vault) -> None:
    from vaultmem.mcp.server import MemoryServer

    with pytest.raises(VaultError) as info:
        MemoryServer(vault, actor="bot", policy={"patterns": {"acct": "(\\d+)+x"}})
    assert str(info.value).startswith(START)


@pytest.mark.parametrize("pattern", ["acct-\\d{8}", "(\\d++)+x", "(?>\\d+)+x"])
def test_patterns_that_match_one_way_are_taken_and_used(vault: Vault, pattern: str) -> None:
    tool = VaultMemoryTool(vault, actor="bot", policy={"patterns": {"acct": pattern}, "secrets": "refuse"})
    result = tool.call({"command": "create", "path": "/memories/n.txt", "file_text": "1" * 5000 + "y\n"})
    assert result == "File created successfully at: /memories/n.txt"


def test_a_long_run_of_digits_is_written_at_once_beside_a_one_way_pattern(vault: Vault) -> None:
    """The possessive form of the refused pattern scans the same text in no time."""
    tool = VaultMemoryTool(vault, actor="bot", policy={"patterns": {"acct": "(\\d++)+x"}, "secrets": "refuse"})
    assert tool.call({"command": "create", "path": "/memories/d.txt", "file_text": "7" * 50 + "y\n"}).startswith(
        "File created"
    )


def test_an_application_regex_detector_that_backtracks_is_refused(vault: Vault) -> None:
    """``detectors=[RegexDetector(...)]`` scans every write under the same lock."""
    from vaultmem.core.detectors import RegexDetector

    with pytest.raises(VaultError) as info:
        VaultMemoryTool(vault, actor="bot", detectors=[RegexDetector("acct", "(\\d+)+x")])
    assert str(info.value).startswith(START)
    tool = VaultMemoryTool(vault, actor="bot", detectors=[RegexDetector("badge_id", r"\bBDG-\d{8}\b")])
    assert tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "BDG-12345678\n"}).startswith(
        "File created"
    )
