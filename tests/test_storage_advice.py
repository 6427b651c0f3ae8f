"""A write the storage refuses says what to do about that refusal: a
read-only mount is not fixed by freeing space or changing permissions."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from test_stockgit_hunt import read_only_view

from vaultmem import Vault, VaultMemoryTool
from vaultmem.errors import StorageError


def test_a_write_to_a_read_only_mount_says_to_mount_it_with_write_access(
    vault: Vault, vault_path: Path, key: str, call: Callable[..., str], tmp_path: Path
) -> None:
    call(command="create", path="/memories/a.txt", file_text="a\n")
    vault.close()
    with read_only_view(vault_path, tmp_path) as where:
        opened = Vault.open(where, key=key)
        with pytest.raises(StorageError) as refused:
            opened.undo(actor="operator")
        assert str(refused.value) == (
            "Error: the vault is on a read-only file system, so nothing was changed. "
            "Mount it with write access, then try again."
        )
        tool = VaultMemoryTool(opened, actor="agent")
        with pytest.raises(Exception) as by_tool:
            tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "b\n"})
        assert "Free space" not in str(by_tool.value)
        opened.close()
