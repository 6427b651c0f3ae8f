"""``--json`` on the commands that change a vault (issue 15): one documented
object each, the same data as the human output, ids in full."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import commit_count, git

from vaultmem import Vault, generate_key
from vaultmem.cli.app import main

ID = 40


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("VAULTMEM_"):
            monkeypatch.delenv(name)


def run(capsys: pytest.CaptureFixture[str], *argv: str, code: int = 0) -> Any:
    assert main([*argv, "--json"]) == code, capsys.readouterr().err
    out = capsys.readouterr().out
    return json.loads(out)


@pytest.fixture
def vault(tmp_path: Path, env: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Path:
    key = generate_key()
    monkeypatch.setenv("VAULTMEM_KEY", key)
    path = tmp_path / "v.vault"
    made = run(capsys, "--vault", str(path), "init")
    assert made == {"vault": str(path.resolve()), "protection": "key", "sealed_names": False}
    return path


def test_keygen_json_is_a_key(capsys: pytest.CaptureFixture[str]) -> None:
    data = run(capsys, "keygen")
    assert set(data) == {"key"} and len(data["key"]) == 44


def test_call_json_says_ok_the_result_and_the_version_it_made(vault: Path, capsys: pytest.CaptureFixture[str]) -> None:
    made = run(
        capsys, "--vault", str(vault), "call", '{"command": "create", "path": "/memories/a.txt", "file_text": "x"}'
    )
    assert made["ok"] is True and made["result"] == "File created successfully at: /memories/a.txt"
    assert made["version"] == git(vault, "rev-parse", "main").strip()
    viewed = run(capsys, "--vault", str(vault), "call", '{"command": "view", "path": "/memories/a.txt"}')
    assert viewed["ok"] is True and viewed["version"] is None and "x" in viewed["result"]
    refused = run(capsys, "--vault", str(vault), "call", '{"command": "delete", "path": "/memories/b.txt"}', code=1)
    assert refused == {"ok": False, "result": "Error: The path /memories/b.txt does not exist", "version": None}


def write(vault: Path, capsys: pytest.CaptureFixture[str], name: str, text: str) -> str:
    call = json.dumps({"command": "create", "path": f"/memories/{name}", "file_text": text})
    return str(run(capsys, "--vault", str(vault), "call", call)["version"])


def test_restore_and_undo_json(vault: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = write(vault, capsys, "a.txt", "one")
    write(vault, capsys, "b.txt", "two")
    restored = run(capsys, "--vault", str(vault), "restore", first[:10])
    assert restored["from"] == first and restored["path"] is None and len(restored["version"]) == ID
    again = run(capsys, "--vault", str(vault), "restore", first[:10])
    assert again["version"] is None  # nothing to restore
    undone = run(capsys, "--vault", str(vault), "undo")
    assert undone["undone"] == 1 and len(undone["version"]) == ID and len(undone["as_at"]) == ID


def test_import_and_export_json(vault: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "sdk" / "memories"
    source.mkdir(parents=True)
    (source / "a.txt").write_text("hello\n")
    (source / "empty").mkdir()
    imported = run(capsys, "--vault", str(vault), "import", str(tmp_path / "sdk"))
    assert imported["files"] == 1 and imported["bytes"] == 6 and imported["empty_folders"] == ["/memories/empty"]
    assert imported["version"] == git(vault, "rev-parse", "main").strip() and imported["redacted"] == {}
    exported = run(capsys, "--vault", str(vault), "export", str(tmp_path / "out"))
    assert exported == {
        "version": imported["version"],
        "folder": str(tmp_path / "out" / "memories"),
        "files": 1,
        "bytes": 6,
    }


def test_key_and_policy_json(vault: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(vault, capsys, "a.txt", "one")
    count = commit_count(vault)
    rotated = run(capsys, "--vault", str(vault), "key", "rotate")
    assert rotated["reencrypted"] is False and rotated["version"] is None and len(rotated["key"]) == 16
    rekeyed = run(capsys, "--vault", str(vault), "key", "rotate", "--reencrypt")
    assert rekeyed["reencrypted"] is True and len(rekeyed["version"]) == ID
    assert commit_count(vault) == count + 1
    new_key = tmp_path / "new.key"
    new_key.write_text(generate_key())
    new_key.chmod(0o600)
    changed = run(capsys, "--vault", str(vault), "key", "change", "--new-key-file", str(new_key))
    assert changed["protection"] == "key"
    policy = run(capsys, "--vault", str(vault), "--key-file", str(new_key), "policy", "set", "max_files=5")
    assert policy["changed"] == {"max_files": {"from": None, "to": 5}} and policy["policy"]["max_files"] == 5
    Vault.open(vault, key_file=new_key).close()


def test_git_setup_json_gives_the_recorded_driver(vault: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = run(capsys, "--vault", str(vault), "git-setup")
    assert data["textconv"] == git(vault, "config", "diff.vaultmem.textconv").strip()
    assert data["key_file"] is None


def test_json_of_a_refusal_is_still_one_line_on_standard_error(vault: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--vault", str(vault), "undo", "3", "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("vaultmem: cannot undo") and err.count("\n") == 1
