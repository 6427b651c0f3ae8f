"""A write to the policy branch that stock git moves while the write is
being made is refused in words that say nothing was changed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from vaultmem import Vault, VaultError
from vaultmem.git import commits


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_a_policy_change_whose_branch_git_moved_meanwhile_says_nothing_was_changed(
    vault: Vault, vault_path: Path, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    vault.set_policy(actor="ops", max_files=50)
    before = git(vault_path, "rev-parse", "refs/heads/vaultmem-policy")
    vault.set_policy(actor="ops", max_files=60)
    latest = git(vault_path, "rev-parse", "refs/heads/vaultmem-policy")
    moved: list[str] = []

    def at_step(name: str) -> None:
        if name == "durable" and not moved:  # an operator puts the branch back, as git does it
            git(vault_path, "update-ref", "refs/heads/vaultmem-policy", before)
            moved.append(name)

    monkeypatch.setattr(commits, "on_step", at_step)
    with pytest.raises(VaultError) as refused:
        vault.set_policy(actor="ops", max_files=70)
    monkeypatch.setattr(commits, "on_step", None)
    assert moved
    message = str(refused.value)
    assert message.startswith("Error: ") and "refs/heads/vaultmem-policy moved" in message, message
    assert "Nothing was changed." in message and message.endswith("Try again."), message
    assert git(vault_path, "rev-parse", "refs/heads/vaultmem-policy") == before != latest
    assert Vault.open(vault_path, key=key).policy.max_files == 50
