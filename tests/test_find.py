"""vault.find and `vaultmem find` (issue 17, first part): every version of
every file, anywhere in the history, whose decrypted content matches."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from vaultmem import Vault, VaultError, VaultMemoryTool, generate_key
from vaultmem.cli.app import main as cli_main

EMAIL = "ada@example.com"


def call(vault: Vault, **command: object) -> None:
    VaultMemoryTool(vault, actor="support-bot", session="s1").call(command)


@pytest.fixture
def vault(tmp_path: Path) -> Vault:
    v = Vault.init(tmp_path / "v.vault", key=generate_key())
    call(v, command="create", path="/memories/customers/ada.md", file_text=f"Ada, {EMAIL}\nprefers e-mail\n")
    call(v, command="create", path="/memories/other.md", file_text="nothing here\n")
    for n in range(5):  # versions that leave ada.md as it is: reported once
        call(v, command="create", path=f"/memories/noise/{n}.md", file_text=f"{n}\n")
    call(v, command="str_replace", path="/memories/customers/ada.md", old_str="Ada,", new_str="Ada Lovelace,")
    call(v, command="create", path="/memories/notes.md", file_text=f"write to {EMAIL} and {EMAIL.upper()}\n")
    call(v, command="delete", path="/memories/notes.md")
    call(v, command="rename", old_path="/memories/customers", new_path="/memories/clients")
    return v


def tree_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for root, dirs, files in sorted(os.walk(folder)):
        dirs.sort()
        for name in sorted(files):
            path = Path(root) / name
            digest.update(str(path.relative_to(folder)).encode() + path.read_bytes())
    return digest.hexdigest()


def test_every_version_that_held_the_text_is_found_once_with_the_version_that_wrote_it(vault: Vault) -> None:
    history = {v.id: v for v in vault.history()}
    found = vault.find(EMAIL)
    assert [(m.path, history[m.version].command, m.count, m.current) for m in found] == [
        ("/memories/customers/ada.md", "create", 1, False),
        ("/memories/customers/ada.md", "str_replace", 1, False),
        ("/memories/notes.md", "create", 1, False),
        ("/memories/clients/ada.md", "rename", 1, True),
    ]
    assert all(m.actor == "support-bot" for m in found)
    ignoring_case = vault.find(EMAIL.upper(), ignore_case=True)
    assert [m.count for m in ignoring_case if m.path == "/memories/notes.md"] == [2]
    assert [m.path for m in vault.find(r"ada@\w+\.com", regex=True, path="/memories/clients")] == [
        "/memories/clients/ada.md"
    ]
    assert vault.find("not anywhere") == []


def test_find_reads_and_writes_nothing_else(vault: Vault) -> None:
    vault.close()  # the writes' upkeep is done: what changes now is find's doing
    before = tree_digest(vault.path)
    vault.find(EMAIL)
    assert tree_digest(vault.path) == before


def test_a_merged_history_reports_each_side_s_version_once(tmp_path: Path) -> None:
    key = generate_key()
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "server.git")], check=True)
    with Vault.init(tmp_path / "a.vault", key=key) as a:
        call(a, command="create", path="/memories/start.md", file_text="s\n")
        a.add_remote("origin", str(tmp_path / "server.git"))
        a.push()
        with Vault.clone(str(tmp_path / "server.git"), tmp_path / "b.vault", key=key) as b:
            call(a, command="create", path="/memories/a.md", file_text=f"{EMAIL}\n")
            a.push()
            call(b, command="create", path="/memories/b.md", file_text=f"{EMAIL}\n")
            b.pull(actor="b")
            found = b.find(EMAIL)
            commands = {v.id: v.command for v in b.history()}
            assert sorted((m.path, commands[m.version]) for m in found) == [
                ("/memories/a.md", "create"),
                ("/memories/b.md", "create"),
            ]


@pytest.mark.parametrize(
    ("pattern", "regex", "words"),
    [("", False, "non-empty"), ("[", True, "is not a regular expression"), ("x" * 10_001, False, "longer than")],
)
def test_a_bad_pattern_is_one_clear_error(vault: Vault, pattern: str, regex: bool, words: str) -> None:
    with pytest.raises(VaultError, match=words):
        vault.find(pattern, regex=regex)


def test_find_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    key = generate_key()
    monkeypatch.setenv("VAULTMEM_KEY", key)
    with Vault.init(tmp_path / "v.vault", key=key) as v:
        call(v, command="create", path="/memories/a.md", file_text=f"{EMAIL} prefers phone\n")
        call(v, command="str_replace", path="/memories/a.md", old_str="phone", new_str="post")
    assert cli_main(["--vault", str(tmp_path / "v.vault"), "find", EMAIL]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and lines[1].endswith("/memories/a.md  (current)")
    assert lines[2] == "2 file versions in 2 versions of the memory."
    assert "prefers" not in "\n".join(lines)
    assert cli_main(["--vault", str(tmp_path / "v.vault"), "find", "--json", "-i", "PREFERS POST"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(d["path"], d["count"], d["current"], d["in_name"]) for d in data] == [("/memories/a.md", 1, True, False)]
    assert cli_main(["--vault", str(tmp_path / "v.vault"), "find", "nobody"]) == 0
    assert capsys.readouterr().out == "No version of any file matches.\n"


@pytest.mark.parametrize("hiding", ["shallow", "info/grafts"])
def test_find_reads_past_a_file_that_hides_earlier_versions(vault: Vault, hiding: str) -> None:
    """git honours `shallow` and `info/grafts` and would show a history without
    the versions they hide; an erasure request must reach those versions too."""
    head = str(vault.head())
    (vault.path / hiding).write_text(head + "\n")  # git now shows main as one version
    assert (
        subprocess.run(
            ["git", "-C", str(vault.path), "rev-list", "--count", "main"], capture_output=True, text=True
        ).stdout.strip()
        == "1"
    )
    assert [m.path for m in vault.find(EMAIL)] == [
        "/memories/customers/ada.md",
        "/memories/customers/ada.md",
        "/memories/notes.md",
        "/memories/clients/ada.md",
    ]


def test_a_name_that_holds_the_text_is_found_too(vault: Vault) -> None:
    call(vault, command="create", path="/memories/clients/ada_lovelace.md", file_text="prefers post\n")
    found = [m for m in vault.find("lovelace", ignore_case=True) if m.in_name]
    assert [(m.path, m.count, m.current) for m in found] == [("/memories/clients/ada_lovelace.md", 0, True)]
    both = [m for m in vault.find("ada", path="/memories/clients") if m.in_name and m.count]
    assert {m.path for m in both} == {"/memories/clients/ada.md"}
