"""Finding and erasing as an operator answers an erasure request: patterns a
user may type that Python's regex engine would take years on, and what the
CLI says about them.

Real vaults, real keys, the real CLI in a subprocess."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_erasure import write
from tests.test_erasure_sync import cli
from vaultmem import Vault
from vaultmem.errors import VaultError

NEARLY = "a" * 60 + "!\n"  # text a nested repeat backtracks on for ever

HOSTILE = ["(a+)+$", "(a|aa)*b", "(a|a)*b", "(?:a?){30}a{30}", r"(\w+\s?)*$", "(?i)(ab|AB)+c"]


@pytest.mark.parametrize("pattern", HOSTILE)
def test_find_refuses_a_pattern_that_backtracks_for_ever(vault: Vault, pattern: str) -> None:
    """A nested repeat (``(a+)+$``) on text that nearly matches made `find`
    (and `forget --matching`) run on without end: the search is refused,
    saying why, before any version is read."""
    write(vault, command="create", path="/memories/a.txt", file_text=NEARLY)
    with pytest.raises(VaultError, match="more than one way"):
        vault.find(pattern, regex=True)
    with pytest.raises(VaultError, match="more than one way"):
        vault.forget_matching(pattern, regex=True, reason="GDPR request 4411", dry_run=True)


@pytest.mark.parametrize(
    "pattern", ["(a++)+$", "(?>a+)+$", "a+$", r"(\d{3}-)+", "(foo|bar)+", r"[\w.+-]+@example\.com", "TS-[0-9]{6}"]
)
def test_find_runs_patterns_that_match_one_way(vault: Vault, pattern: str) -> None:
    write(vault, command="create", path="/memories/a.txt", file_text=NEARLY + "foobar 123-456- TS-123456\n")
    vault.find(pattern, regex=True)  # runs, and ends


def test_plain_text_with_regex_characters_is_never_refused(vault: Vault) -> None:
    write(vault, command="create", path="/memories/a.txt", file_text="(a+)+$ in a note\n")
    assert [m.count for m in vault.find("(a+)+$")] == [1]


def test_the_cli_refuses_a_hostile_pattern_with_exit_2(vault: Vault, vault_path: Path, key: str) -> None:
    write(vault, command="create", path="/memories/a.txt", file_text=NEARLY)
    for args in (["find", "--regex", "(a+)+$"], ["forget", "--matching", "(a+)+$", "--regex", "--reason", "r"]):
        done = cli(vault_path, key, *args, "--json") if args[0] == "find" else cli(vault_path, key, *args)
        assert done.returncode == 2, done
        assert "more than one way" in done.stderr
        assert done.stdout == ""


def test_the_commit_an_erasure_returns_says_what_its_history_says(vault: Vault) -> None:
    """``vault.redact(...).commit`` had no reason and listed nothing erased,
    while the same commit read back from the history has both."""
    write(vault, command="create", path="/memories/a.md", file_text="ada@example.com\n")
    write(vault, command="str_replace", path="/memories/a.md", old_str="ada", new_str="someone")
    result = vault.redact("main~1", "/memories/a.md", reason="GDPR request 4411", actor="ops")
    assert result.commit is not None
    (listed,) = result.versions
    assert result.commit.reason == "GDPR request 4411"
    assert result.commit.erased == (f"{listed.version} {listed.blob}",)
    assert vault.history()[0] == result.commit
