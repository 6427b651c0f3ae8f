"""Small command-line defects found beside the hunts: each message says what
happened, in the command line's own words, and no input ends in a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from vaultmem import Vault, VaultError, generate_key
from vaultmem.cli.app import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_undo_of_one_version_in_an_empty_vault_says_version(tmp_path: Path) -> None:
    vault = Vault.init(tmp_path / "v", key=generate_key())
    with pytest.raises(VaultError) as err:
        vault.undo(1)
    assert str(err.value) == "Error: cannot undo 1 version: the vault has 0."
    with pytest.raises(VaultError, match="cannot undo 2 versions: the vault has 0"):
        vault.undo(2)


def test_an_export_of_an_empty_vault_names_no_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    key = generate_key()
    Vault.init(tmp_path / "v", key=key).close()
    monkeypatch.setenv("VAULTMEM_KEY", key)
    code, out, _ = run(capsys, "--vault", str(tmp_path / "v"), "export", str(tmp_path / "plain"))
    assert code == 0
    assert out.splitlines()[0] == (
        f"Exported 0 files (0 bytes) to {tmp_path / 'plain' / 'memories'}: the vault has no versions yet."
    )


def test_demo_example_with_an_empty_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--example ""` ran the whole ordinary demo instead."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "demo", "--example", "")
    assert code == 2 and out == ""
    assert "--example needs a folder DIR" in err
    assert list(tmp_path.iterdir()) == []


def test_demo_in_the_root_folder_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    """`vaultmem demo /` ended with "unexpected ValueError ... run vaultmem verify"."""
    code, _, err = run(capsys, "demo", "/")
    assert code == 2
    assert err.startswith("vaultmem: the demo vault needs a folder of its own, not '/'"), err
    assert "unexpected" not in err and "verify" not in err


def test_key_rotate_refuses_an_empty_actor_and_changes_nothing(tmp_path: Path) -> None:
    """Without --reencrypt, `key rotate --actor ""` was taken."""
    vault = Vault.init(tmp_path / "v", key=generate_key())
    before = [info.id for info in vault.keys()]  # noqa: SIM118 (Vault.keys() is a method)
    with pytest.raises(VaultError, match="actor"):
        vault.rotate_key(actor="")
    assert [info.id for info in vault.keys()] == before  # noqa: SIM118
