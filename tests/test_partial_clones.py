"""A clone of a vault made by stock git without the keyring branch
(``--depth``, ``--single-branch``) is named for what it is, with the way
to a clone that opens, rather than called "not a vault"."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from vaultmem import NotAVaultError, Vault, VaultMemoryTool, generate_key


@pytest.mark.parametrize("how", [["--depth", "1"], ["--single-branch"]])
def test_a_clone_that_left_the_keyring_behind_says_so(tmp_path: Path, how: list[str]) -> None:
    key = generate_key()
    source = tmp_path / "src.vault"
    with Vault.init(source, key=key) as vault:
        VaultMemoryTool(vault, actor="a").call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    copy = tmp_path / "copy.git"
    subprocess.run(["git", "clone", "-q", "--bare", *how, f"file://{source}", str(copy)], check=True)
    with pytest.raises(NotAVaultError) as refused:
        Vault.open(copy, key=key)
    message = str(refused.value)
    assert "holds a vault's versions but not its keyring branch vaultmem-keyring" in message
    assert "vaultmem clone URL" in message


def test_a_plain_repository_is_still_not_a_vault(tmp_path: Path) -> None:
    plain = tmp_path / "plain.git"
    subprocess.run(["git", "init", "-q", "--bare", str(plain)], check=True)
    with pytest.raises(NotAVaultError, match="is not a vault"):
        Vault.open(plain, key=generate_key())
