"""The operator rolls a vault back after a bad session, as docs/audit.md and
docs/cli.md describe it: each restore is one new version or a refusal that
changes nothing and says what to do."""

from __future__ import annotations

from pathlib import Path

from conftest import commit_count
from test_cli import run

from vaultmem import Vault, VaultMemoryTool, generate_key


def _vault(tmp_path: Path) -> tuple[Path, str, VaultMemoryTool]:
    key = generate_key()
    path = tmp_path / "v.vault"
    vault = Vault.init(path, key=key)
    return path, key, VaultMemoryTool(vault, actor="bot")


def test_restoring_a_file_whose_folder_is_a_file_now_says_what_to_do_and_changes_nothing(tmp_path: Path) -> None:
    path, key, tool = _vault(tmp_path)
    tool.call({"command": "create", "path": "/memories/x/y.txt", "file_text": "yy\n"})
    before = str(tool.vault.head())
    tool.call({"command": "delete", "path": "/memories/x"})
    tool.call({"command": "create", "path": "/memories/x", "file_text": "now a file\n"})
    count = commit_count(path)

    result = run("--vault", str(path), "restore", before[:10], "--path", "/memories/x/y.txt", key=key)

    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"vaultmem: cannot restore /memories/x/y.txt: /memories/x is a file now, so it cannot hold "
        f"/memories/x/y.txt. Nothing was changed. Restore /memories/x as it was at {before[:10]} (the folder "
        "and all it held), or rename or delete the file /memories/x first.\n"
    )
    assert commit_count(path) == count
    # The advice works: the folder comes back whole, as one version.
    done = run("--vault", str(path), "restore", before[:10], "--path", "/memories/x", key=key)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Restored /memories/x as it was at {before[:10]}: new version ")
    assert commit_count(path) == count + 1
    assert Vault.open(path, key=key).read("/memories/x/y.txt") == "yy\n"


def test_a_path_below_a_file_held_neither_now_nor_then_is_refused_as_mistyped(tmp_path: Path) -> None:
    path, key, tool = _vault(tmp_path)
    tool.call({"command": "create", "path": "/memories/x", "file_text": "a file\n"})
    count = commit_count(path)

    result = run("--vault", str(path), "restore", "main", "--path", "/memories/x/y.txt", key=key)

    assert result.returncode == 2
    assert result.stderr.startswith("vaultmem: no file or folder /memories/x/y.txt, now or at ")
    assert commit_count(path) == count


def test_restoring_one_erased_file_advises_another_version_not_other_files(tmp_path: Path) -> None:
    path, key, tool = _vault(tmp_path)
    tool.call({"command": "create", "path": "/memories/p.txt", "file_text": "first\n"})
    first = str(tool.vault.head())
    tool.call({"command": "str_replace", "path": "/memories/p.txt", "old_str": "first", "new_str": "second"})
    second = str(tool.vault.head())
    tool.call({"command": "delete", "path": "/memories/p.txt"})
    tool.vault.redact(first, "/memories/p.txt", reason="request 7", actor="ops")
    count = commit_count(path)

    result = run("--vault", str(path), "restore", first[:10], "--path", "/memories/p.txt", key=key)

    assert result.returncode == 2
    assert "erased content is never restored. Nothing was changed." in result.stderr
    assert "the other files" not in result.stderr
    assert result.stderr.endswith(
        "Restore /memories/p.txt from another version, one whose content of it was not erased.\n"
    )
    assert commit_count(path) == count
    # That advice works: the version after the erased one comes back.
    done = run("--vault", str(path), "restore", second[:10], "--path", "/memories/p.txt", key=key)
    assert done.returncode == 0, done.stderr
    assert Vault.open(path, key=key).read("/memories/p.txt") == "second\n"


def test_the_version_before_the_first_one_says_the_memory_was_empty_then(tmp_path: Path) -> None:
    path, key, tool = _vault(tmp_path)
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    first = str(tool.vault.head())[:10]
    tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "b\n"})
    count = commit_count(path)

    for at in (f"{first}^", "main~2", "main^^"):
        result = run("--vault", str(path), "restore", at, key=key)
        assert result.returncode == 2
        assert result.stderr == (
            f"vaultmem: no version '{at}': {first} is the first version of this vault's memory; before it the "
            "memory was empty (undo as many versions as the history holds to empty it).\n"
        )
    assert commit_count(path) == count
    # A version that exists, or one that names no version at all, reads as before.
    assert run("--vault", str(path), "restore", "main~1", key=key).returncode == 0
    other = run("--vault", str(path), "restore", "nosuch^", key=key)
    assert other.stderr == "vaultmem: no version 'nosuch^' in this vault. List the versions with `vaultmem log`.\n"
