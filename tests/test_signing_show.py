"""`vaultmem show` says who signed a version and whether the signature counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import git

from vaultmem import SigningKey, Vault, VaultMemoryTool
from vaultmem.cli import main


@pytest.fixture
def signed_vault(vault: Vault, vault_path: Path, key: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A vault whose first version ops signed and whose second nobody did; the fingerprint of ops's key."""
    ops = SigningKey.generate()
    vault.sign_as("ops", ops)
    vault.add_signer("ops", ops.public, actor="ops", operator=True)
    VaultMemoryTool(vault, actor="ops", signing_key=ops).call(
        {"command": "create", "path": "/memories/a.txt", "file_text": "a\n"}
    )
    VaultMemoryTool(vault, actor="guest").call({"command": "create", "path": "/memories/b.txt", "file_text": "b\n"})
    monkeypatch.setenv("VAULTMEM_VAULT", str(vault_path))
    monkeypatch.setenv("VAULTMEM_KEY", key)
    return ops.public.fingerprint


def test_show_names_the_signer_and_its_key(signed_vault: str, capsys: pytest.CaptureFixture[str]) -> None:
    fingerprint = signed_vault
    assert main(["show", "main~1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"signed by      ops, key {fingerprint} (good)" in lines
    assert main(["show", "main~1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["signature"] == {"signer": "ops", "key": fingerprint, "ok": True, "problem": None}


def test_show_says_an_unsigned_version_is_unsigned(signed_vault: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "main"]) == 0
    assert "signed by      nobody (unsigned)" in capsys.readouterr().out.splitlines()
    assert main(["show", "main", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["signature"] is None


def test_show_of_a_vault_without_signers_says_nothing_of_signatures(
    vault: Vault, vault_path: Path, key: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    VaultMemoryTool(vault, actor="bot").call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    monkeypatch.setenv("VAULTMEM_VAULT", str(vault_path))
    monkeypatch.setenv("VAULTMEM_KEY", key)
    assert main(["show", "main"]) == 0
    assert "signed by" not in capsys.readouterr().out


def test_verify_reports_a_signers_branch_that_is_not_a_plain_ref_and_does_not_raise(
    vault: Vault, vault_path: Path
) -> None:
    ops = SigningKey.generate()
    vault.sign_as("ops", ops)
    vault.add_signer("ops", ops.public, actor="ops", operator=True)
    VaultMemoryTool(vault, actor="ops", signing_key=ops).call(
        {"command": "create", "path": "/memories/a.txt", "file_text": "a\n"}
    )
    git(vault_path, "symbolic-ref", "refs/heads/vaultmem-signers", "refs/heads/main")
    report = vault.verify()
    assert not report.ok
    assert any("not a plain ref" in f.detail for f in report.findings), report.problems
