"""A custom secret pattern that can backtrack without end is refused when the
policy is set.

The policy's ``patterns`` scan every text written to the vault, under the
vault's writer lock.  A pattern such as ``(\\d+)+x`` takes years on a long run
of digits that ends otherwise, and the text it scans is what the model
writes: one such text (pasted, or put there by a prompt injection) would hang
the write and every writer of the vault behind it.  ``find --regex`` already
refused such patterns; setting a policy now does too, and changes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vaultmem import Vault, VaultError, VaultMemoryTool

HANGS = ["(\\d+)+x", "(a|aa)*b", "(?:[0-9a-f]?){30}z", "acct-(\\w+\\s?)+!"]


@pytest.mark.parametrize("pattern", HANGS)
def test_a_pattern_that_can_backtrack_without_end_is_refused_and_nothing_changes(vault: Vault, pattern: str) -> None:
    before = vault.policy_history()
    with pytest.raises(VaultError) as info:
        vault.set_policy(actor="ops", patterns={"acct": pattern})
    said = str(info.value)
    assert said.startswith("Error: the pattern for 'acct' repeats a part that can itself match the same text"), said
    assert said.endswith("Nothing was changed."), said
    assert vault.policy_history() == before
    assert vault.policy.patterns == {}


@pytest.mark.parametrize("pattern", ["acct-\\d{8}", "(\\d++)+x", "(?>\\d+)+x", "(ab|cd)+e", "TS-[0-9]{6}"])
def test_patterns_that_match_one_way_are_set_and_used(vault: Vault, pattern: str) -> None:
    vault.set_policy(actor="ops", patterns={"acct": pattern}, secrets="refuse")
    assert vault.policy.patterns == {"acct": pattern}


def test_a_refused_pattern_never_reaches_a_write(vault: Vault) -> None:
    """The writes go on with the policy in force before: a long run of digits
    is written at once."""
    with pytest.raises(VaultError):
        vault.set_policy(actor="ops", patterns={"acct": "(\\d+)+x"}, secrets="refuse")
    tool = VaultMemoryTool(vault, actor="bot", session="s")
    result = tool.call({"command": "create", "path": "/memories/n.txt", "file_text": "1" * 5000 + "y\n"})
    assert result == "File created successfully at: /memories/n.txt"


def test_a_stored_policy_is_left_as_it_is_and_other_fields_still_change(vault: Vault) -> None:
    """Only a pattern being set is judged: changing another field of a policy
    is never refused for a pattern it already held."""
    vault.set_policy(actor="ops", patterns={"acct": "acct-\\d{8}"})
    vault.set_policy(actor="ops", max_files=50)
    assert vault.policy.max_files == 50
    assert vault.policy.patterns == {"acct": "acct-\\d{8}"}


def test_the_cli_refuses_it_in_one_line(vault: Vault, vault_path: Path, key: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "vaultmem",
            "--vault",
            str(vault_path),
            "policy",
            "set",
            'patterns={"acct": "(\\\\d+)+x"}',
        ],
        env={**env, "VAULTMEM_KEY": key},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    (line,) = done.stderr.splitlines()
    assert line.startswith("vaultmem: the pattern for 'acct' repeats a part"), line
    assert vault.policy_history() == []
