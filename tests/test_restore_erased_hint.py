"""A restore or undo refused for an erased version says what to do in
words true for the command line and the library alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from vaultmem import Vault, VaultMemoryTool, generate_key
from vaultmem.cli.app import main


def test_the_refusal_names_no_syntax_of_one_interface_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key = generate_key()
    path = tmp_path / "v"
    vault = Vault.init(path, key=key)
    tool = VaultMemoryTool(vault, actor="a")
    tool.call({"command": "create", "path": "/memories/p.txt", "file_text": "secret\n"})
    tool.call({"command": "create", "path": "/memories/q.txt", "file_text": "kept\n"})
    first = vault.history()[-1].id
    tool.call({"command": "delete", "path": "/memories/p.txt"})
    vault.forget("/memories/p.txt", reason="request 1", actor="ops")
    vault.close()
    monkeypatch.setenv("VAULTMEM_KEY", key)
    assert main(["--vault", str(path), "restore", first]) != 0
    err = capsys.readouterr().err
    assert "erased content is never restored" in err
    assert "path=" not in err
    assert "Restore the other files one path at a time, or an earlier version." in err
