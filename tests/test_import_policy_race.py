"""An import checks its files against the policy in force when it commits.

An operator's policy change, once acknowledged, applies to every write
committed after it: an import that read the policy before the change and
reached the writer lock after it is checked again under the new policy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import commit_count

from vaultmem import Vault, VaultError
from vaultmem.ops import transfer

CARD = "4111 1111 1111 1111"


def _folder(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "memories" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def _operator_acts_after_reading(monkeypatch: pytest.MonkeyPatch, operator: Vault, **changes: Any) -> None:
    real = transfer.read_folder

    def then_the_operator_acts(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        operator.set_policy(actor="ops", **changes)
        return found

    monkeypatch.setattr(transfer, "read_folder", then_the_operator_acts)


def test_an_import_under_way_when_secrets_are_refused_imports_no_secret(
    vault: Vault, vault_path: Path, key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _folder(tmp_path / "export", {"a.txt": "plain\n", "billing.txt": f"card {CARD}\n"})
    operator = Vault.open(vault_path, key=key)
    _operator_acts_after_reading(monkeypatch, operator, secrets="refuse")
    with pytest.raises(VaultError) as refused:
        vault.import_folder(source, actor="importer")
    assert "cannot import '/memories/billing.txt'" in str(refused.value)
    assert "Nothing was imported." in str(refused.value)
    assert commit_count(vault_path) == 0


def test_an_import_under_way_when_the_file_quota_is_lowered_is_refused_whole(
    vault: Vault, vault_path: Path, key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _folder(tmp_path / "export", {f"f{i}.txt": f"note {i}\n" for i in range(3)})
    operator = Vault.open(vault_path, key=key)
    _operator_acts_after_reading(monkeypatch, operator, max_files=2)
    with pytest.raises(VaultError, match="Nothing was imported"):
        vault.import_folder(source, actor="importer")
    assert commit_count(vault_path) == 0


def test_an_import_under_way_when_secrets_are_redacted_stores_the_redacted_text(
    vault: Vault, vault_path: Path, key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _folder(tmp_path / "export", {"billing.txt": f"card {CARD}\n"})
    operator = Vault.open(vault_path, key=key)
    _operator_acts_after_reading(monkeypatch, operator, secrets="redact")
    result = vault.import_folder(source, actor="importer")
    assert result.files == 1
    assert vault.read("/memories/billing.txt") == "card [REDACTED:card_number]\n"


def test_an_import_whose_policy_keeps_changing_gives_up_cleanly(
    vault: Vault, vault_path: Path, key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _folder(tmp_path / "export", {"a.txt": "a\n"})
    operator = Vault.open(vault_path, key=key)
    real = transfer.read_folder
    limits = iter(range(100, 200))

    def the_operator_keeps_acting(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        operator.set_policy(actor="ops", max_files=next(limits))
        return found

    monkeypatch.setattr(transfer, "read_folder", the_operator_keeps_acting)
    with pytest.raises(VaultError) as refused:
        vault.import_folder(source, actor="importer")
    assert str(refused.value) == (
        "Error: the vault's policy kept changing while the import waited; nothing was imported. Try again."
    )
    assert commit_count(vault_path) == 0
