"""What the command line says when it refuses: its own commands and flags,
never the Python API, and one ``vaultmem:`` prefix (issue 15, defect 2).

The library's messages name concepts (a key, the history); the CLI names
``vaultmem init``, ``vaultmem log``, ``--passphrase``, ``VAULTMEM_KEY``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vaultmem import NotAVaultError, NotFoundError, Vault, VaultMemoryTool, generate_key
from vaultmem.cli.app import main

# What a CLI user cannot type: a Python call, a keyword argument, a class method.
PYTHON_API = re.compile(r"Vault\.\w+|\w+\(\)|\b(key|key_file|passphrase)=|generate_key")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


def says_cli_words(err: str) -> None:
    assert err.startswith("vaultmem: ") and err.count("\n") == 1, err
    assert not err.startswith("vaultmem: Error"), err  # one prefix, not two
    assert not PYTHON_API.search(err), err


@pytest.fixture
def keyed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    for name in ("VAULTMEM_KEY", "VAULTMEM_PASSPHRASE", "VAULTMEM_VAULT", "VAULTMEM_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    key = generate_key()
    path = tmp_path / "v.vault"
    with Vault.init(path, key=key) as vault:
        VaultMemoryTool(vault, actor="a", session="s").call(
            {"command": "create", "path": "/memories/a.txt", "file_text": "one\n"}
        )
    return path, key


def test_a_missing_vault_names_vaultmem_init(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VAULTMEM_KEY", generate_key())
    code, err = run(capsys, "--vault", str(tmp_path / "nowhere"), "ls")
    assert code == 2
    says_cli_words(err)
    assert "`vaultmem init`" in err


def test_an_unknown_version_names_vaultmem_log(
    keyed: tuple[Path, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, key = keyed
    monkeypatch.setenv("VAULTMEM_KEY", key)
    code, err = run(capsys, "--vault", str(path), "cat", "/memories/a.txt", "--at", "nosuchrev")
    assert code == 2
    says_cli_words(err)
    assert "`vaultmem log`" in err


def test_a_passphrase_given_for_a_key_vault_names_the_key_sources(
    keyed: tuple[Path, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = keyed
    monkeypatch.setenv("VAULTMEM_PASSPHRASE", "correct horse battery staple")
    code, err = run(capsys, "--vault", str(path), "--passphrase", "ls")
    assert code == 2
    says_cli_words(err)
    assert "VAULTMEM_KEY" in err and "--key-file" in err


def test_a_passphrase_in_vaultmem_key_points_at_passphrase_options(
    keyed: tuple[Path, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = keyed
    monkeypatch.setenv("VAULTMEM_KEY", "open sesame")
    code, err = run(capsys, "--vault", str(path), "ls")
    assert code == 2
    says_cli_words(err)
    assert "--passphrase" in err or "VAULTMEM_PASSPHRASE" in err


def test_an_undo_too_far_has_one_prefix(
    keyed: tuple[Path, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, key = keyed
    monkeypatch.setenv("VAULTMEM_KEY", key)
    code, err = run(capsys, "--vault", str(path), "undo", "5")
    assert code == 2
    says_cli_words(err)
    assert err.startswith("vaultmem: cannot undo 5 versions")


def test_the_library_names_concepts_not_its_own_arguments(tmp_path: Path) -> None:
    with pytest.raises(NotAVaultError) as missing:
        Vault.open(tmp_path / "nowhere", key=generate_key())
    assert "Vault.init" not in str(missing.value) and "create a vault" in str(missing.value).lower()
    key = generate_key()
    with Vault.init(tmp_path / "v", key=key) as vault, pytest.raises(NotFoundError) as unknown:
        VaultMemoryTool(vault, actor="t").call({"command": "create", "path": "/memories/a.txt", "file_text": "a"})
        vault.read("/memories/a.txt", at="nosuchrev")
    assert "history()" not in str(unknown.value) and "history" in str(unknown.value)
