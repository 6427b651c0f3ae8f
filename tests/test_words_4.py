"""Small message defects: what `vaultmem clone` says when its folder is a
vault already or no key is given, what `pull --json` reports about the
branches the server lacks, and quota refusals that read as English when a
limit is 1.

Real vaults (real git, real Fernet) and a bare repository on disk as the
server; the CLI runs in-process through ``vaultmem.cli.app.main``.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from anthropic.lib.tools import ToolError
from test_cli_words_3 import one_error
from test_sync import pushed, write

from vaultmem import LimitError, Vault, VaultError, VaultMemoryTool, generate_key
from vaultmem.cli.app import main


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Callable[..., Result]]:
    """``run(*args, key=...)``: the CLI in ``tmp_path``, with only the given key (if any)."""
    for name in list(os.environ):
        if name.startswith("VAULTMEM_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)

    def cli(*args: str, key: str | None = None) -> Result:
        if key is None:
            monkeypatch.delenv("VAULTMEM_KEY", raising=False)
        else:
            monkeypatch.setenv("VAULTMEM_KEY", key)
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return Result(code, out, err)

    yield cli


# -- clone ---------------------------------------------------------------------------------------


def test_clone_into_a_vault_says_it_is_a_vault_already_as_init_does(tmp_path: Path, run: Callable[..., Result]) -> None:
    """`vaultmem clone URL FOLDER` where FOLDER is a vault said only that it
    "exists and is not an empty folder"; now it says what `init` says: the
    folder is a vault already.  The vault is left as it was."""
    remote, key, first = pushed(tmp_path)
    first.close()
    before = sorted(p.name for p in first.path.iterdir())
    said = "first.vault is a vault already (it exists and is not an empty folder); choose a new folder for a new vault."
    assert one_error(run("--vault", "first.vault", "init", key=key)) == said
    assert one_error(run("clone", str(remote), "first.vault", key=key)) == said
    with pytest.raises(VaultError) as info:
        Vault.clone(str(remote), first.path, key=key)
    assert str(info.value) == f"Error: {first.path} is a vault already (it exists and is not an empty folder); " + (
        "choose a new folder for a new vault."
    )
    assert sorted(p.name for p in first.path.iterdir()) == before
    with Vault.open(first.path, key=key) as again:
        assert again.read("/memories/a.txt") == "one\n"


def test_clone_into_a_folder_that_is_not_a_vault_still_names_the_clone(
    tmp_path: Path, run: Callable[..., Result]
) -> None:
    remote, key, first = pushed(tmp_path)
    first.close()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("x\n")
    assert one_error(run("clone", str(remote), "notes", key=key)) == (
        "notes exists and is not an empty folder; choose a new folder for the clone."
    )
    assert [p.name for p in (tmp_path / "notes").iterdir()] == ["todo.txt"]


def test_clone_without_any_key_says_nothing_was_made_and_makes_no_folder(
    tmp_path: Path, run: Callable[..., Result]
) -> None:
    """Every refused clone ends with "Nothing was made."; one given no key at
    all said only "no key given".  It makes no folder, nor folders above it."""
    remote, _, first = pushed(tmp_path)
    first.close()
    before = sorted(p.name for p in tmp_path.iterdir())
    for target in ("second.vault", "deep/er/second.vault"):
        told = one_error(run("clone", str(remote), target))
        assert told.startswith("no key given: set VAULTMEM_KEY or VAULTMEM_PASSPHRASE"), told
        assert told.endswith(". Nothing was made."), told
        assert sorted(p.name for p in tmp_path.iterdir()) == before


# -- pull --json ---------------------------------------------------------------------------------


def test_pull_json_names_the_branches_the_remote_lacks(tmp_path: Path, run: Callable[..., Result]) -> None:
    """The plain pull says what the server lacks (`ahead`: versions this
    vault holds; `absent`: branches the server has none of); `pull --json`
    said neither."""
    remote, key, first = pushed(tmp_path)
    with first:
        write(first, "b.txt", "two\n")  # not pushed: main is ahead of the server
    agree = run("--vault", "first.vault", "pull", "--json", key=key)
    assert agree.code == 0, agree
    data: dict[str, Any] = json.loads(agree.out)
    assert data == {"remote": "origin", "moved": {}, "absent": [], "ahead": ["main"]}
    subprocess.run(["git", "-C", str(remote), "update-ref", "-d", "refs/heads/vaultmem-keyring"], check=True)
    lacking = run("--vault", "first.vault", "pull", "--json", key=key)
    assert lacking.code == 0, lacking
    data = json.loads(lacking.out)
    assert data == {"remote": "origin", "moved": {}, "absent": ["vaultmem-keyring"], "ahead": ["main"]}
    plain = run("--vault", "first.vault", "pull", key=key)
    assert "origin has no vaultmem-keyring branch" in plain.out
    assert "This vault holds versions of main that origin lacks" in plain.out


def test_pull_json_after_a_push_lists_nothing_lacking(tmp_path: Path, run: Callable[..., Result]) -> None:
    _, key, first = pushed(tmp_path)
    first.close()
    result = run("--vault", "first.vault", "pull", "--json", key=key)
    assert json.loads(result.out) == {"remote": "origin", "moved": {}, "absent": [], "ahead": []}
    pushed_out = json.loads(run("--vault", "first.vault", "push", "--json", key=key).out)
    assert pushed_out == {"remote": "origin", "moved": {}}  # a push leaves nothing to say of either


# -- quotas of 1 ---------------------------------------------------------------------------------


def refused(tool: VaultMemoryTool, path: str, text: str) -> str:
    with pytest.raises(ToolError) as info:
        tool.call({"command": "create", "path": path, "file_text": text})
    content = info.value.content
    assert isinstance(content, str)
    return content


def test_a_file_limit_of_one_byte_says_byte(vault: Vault) -> None:
    vault.set_policy(actor="ops", max_file_bytes=1)
    tool = VaultMemoryTool(vault, actor="bot")
    assert refused(tool, "/memories/a.txt", "ab") == (
        "Error: File /memories/a.txt would be 2 bytes; the limit is 1 byte per file. Nothing was written. "
        "Keep the file shorter or split it into several files."
    )


def test_a_vault_limit_of_one_byte_says_byte(vault: Vault) -> None:
    vault.set_policy(actor="ops", max_vault_bytes=1)
    tool = VaultMemoryTool(vault, actor="bot")
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a"})
    assert refused(tool, "/memories/b.txt", "b") == (
        "Error: Nothing was written: this would bring the memory to 2 bytes, over this vault's limit of 1 byte "
        "(it holds 1 now). Delete or shorten files that are no longer needed, or consolidate them, then try "
        "again."
    )


def test_an_import_over_a_file_limit_of_one_byte_says_byte(vault: Vault, tmp_path: Path) -> None:
    (tmp_path / "memory" / "memories").mkdir(parents=True)
    (tmp_path / "memory" / "memories" / "big.txt").write_text("ab")
    with pytest.raises(LimitError) as info:
        vault.import_folder(tmp_path / "memory", max_file_bytes=1)
    assert str(info.value) == (
        "Error: cannot import 'big.txt': it is larger than the file size limit of 1 byte. Split or shorten it "
        "first. Nothing was imported."
    )


def test_a_file_count_limit_of_one_says_one_file(tmp_path: Path) -> None:
    vault = Vault.init(tmp_path / "one.vault", key=generate_key())
    vault.set_policy(actor="ops", max_files=1)
    tool = VaultMemoryTool(vault, actor="agent", session="s")
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    with pytest.raises(ToolError) as refused:
        tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "b\n"})
    assert str(refused.value).startswith("Error: Nothing was written: the memory already holds 1 file, the most")
    assert vault.read("/memories/a.txt") == "a\n"
