"""``find`` and ``forget --matching`` scoped with ``--path`` to a path the
vault never held are refused, as ``forget PATH`` is: a mistyped path used to
answer "No version of any file matches." or "Nothing to erase." (exit 0), so
an operator answering an erasure request read a typo as "nothing there"."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import commit_count

from vaultmem import NotFoundError, Vault, VaultMemoryTool

BODY = "Ada Lovelace, ticket 4411\n"


@pytest.fixture
def held(vault: Vault) -> Vault:
    tool = VaultMemoryTool(vault, actor="support-bot", session="s-1")
    tool.call({"command": "create", "path": "/memories/customers/ada.md", "file_text": BODY})
    tool.call({"command": "create", "path": "/memories/old/gone.md", "file_text": BODY})
    tool.call({"command": "delete", "path": "/memories/old"})
    return vault


def _cli(vault_path: Path, key: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
    return subprocess.run(
        [sys.executable, "-m", "vaultmem", "--vault", str(vault_path), *args],
        env={**env, "VAULTMEM_KEY": key},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("path", ["/memories/custmers", "/memories/customers/ada.txt", "/memories/nope/deeper"])
def test_find_below_a_path_never_held_is_refused(held: Vault, path: str) -> None:
    with pytest.raises(NotFoundError) as info:
        held.find("Ada", path=path)
    assert str(info.value).startswith(f"Error: no version of {path} in this vault's history.")


def test_forget_matching_below_a_path_never_held_is_refused_and_erases_nothing(held: Vault, vault_path: Path) -> None:
    before = commit_count(vault_path)
    for dry_run in (True, False):
        with pytest.raises(NotFoundError, match="no version of /memories/custmers in this vault's history"):
            held.forget_matching("Ada", path="/memories/custmers", reason="request 7", dry_run=dry_run)
    assert commit_count(vault_path) == before
    assert [m.path for m in held.find("Ada")] == ["/memories/customers/ada.md", "/memories/old/gone.md"]


def test_a_path_held_once_or_held_without_a_match_is_searched_as_before(held: Vault) -> None:
    assert [m.path for m in held.find("Ada", path="/memories/old")] == ["/memories/old/gone.md"]  # deleted since
    assert [m.path for m in held.find("Ada", path="/memories/old/gone.md")] == ["/memories/old/gone.md"]
    assert held.find("Grace", path="/memories/customers") == []  # held, nothing matches
    assert held.find("Grace", path="/memories") == []


def test_a_path_whose_versions_were_all_erased_is_still_a_path_the_vault_held(held: Vault) -> None:
    held.forget("/memories/old", reason="request 6")
    assert held.find("Ada", path="/memories/old") == []


def test_find_with_a_path_on_a_vault_with_no_history_says_so(vault: Vault) -> None:
    with pytest.raises(
        NotFoundError, match=re.escape("no version of /memories/a.md in this vault: it has no history yet")
    ):
        vault.find("x", path="/memories/a.md")
    assert vault.find("x") == []


def test_the_cli_refuses_a_mistyped_path_in_one_line_with_exit_code_2(held: Vault, vault_path: Path, key: str) -> None:
    before = commit_count(vault_path)
    for args in (
        ["find", "Ada", "--path", "/memories/custmers"],
        ["find", "Ada", "--path", "/memories/custmers", "--json"],
        ["forget", "--matching", "Ada", "--path", "/memories/custmers", "--dry-run"],
        ["forget", "--matching", "Ada", "--path", "/memories/custmers", "--reason", "request 7"],
    ):
        done = _cli(vault_path, key, *args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert done.stdout == ""
        assert done.stderr.splitlines() == [
            "vaultmem: no version of /memories/custmers in this vault's history. List the versions with `vaultmem log`."
        ], args
    assert commit_count(vault_path) == before
    found = _cli(vault_path, key, "find", "Grace", "--path", "/memories/customers")
    assert (found.returncode, found.stdout.strip()) == (0, "No version of any file matches.")
