"""Text that names no time is never read as one.

The words parser is lenient: left alone it read ``@{-1}`` (git's "the
branch before"), ``~1``, ``#1`` and ``a`` as the 1st of January of this
year, so ``vaultmem show @{-1}`` answered about a day nobody asked for, and
``log --since '~1'`` listed a year of versions.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from vaultmem import NotFoundError, Vault, VaultError, VaultMemoryTool, generate_key
from vaultmem.core.versions import parse_words


@pytest.mark.parametrize("text", ["@{-1}", "@{1}", "~1", "#1", "a", "{1}", "^1", "@", "1!"])
def test_punctuation_and_a_number_are_no_time(text: str) -> None:
    assert parse_words(text, time.time()) is None


@pytest.mark.parametrize(
    "text", ["2 days ago", "yesterday 14:00", "last monday", "a week ago", "Nov 4 2026", "November", "now"]
)
def test_times_in_words_are_still_read(text: str) -> None:
    assert parse_words(text, time.time()) is not None


def test_a_git_revision_that_names_nothing_here_is_not_found_rather_than_read_as_a_time(tmp_path: Path) -> None:
    vault = Vault.init(tmp_path / "v", key=generate_key())
    VaultMemoryTool(vault, actor="a").call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    with pytest.raises(NotFoundError):
        vault.resolve("@{-1}")
    with pytest.raises(VaultError, match="cannot read the since time '~1'"):
        vault.history(since="~1")
