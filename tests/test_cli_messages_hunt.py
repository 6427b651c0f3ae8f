"""The `vaultmem` command's messages on a user's first-hour mistakes: each is
one line that says what was wrong, names what the user typed (the file, the
option, the folder) and what to do, and changes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FakeClock
from test_first_hour_hunt3 import _run

from vaultmem import Vault, VaultMemoryTool, generate_key
from vaultmem.cli.app import main

ROOT = Path(__file__).resolve().parent.parent
PASSPHRASE = "correct horse battery staple"


@pytest.fixture(autouse=True)
def _no_vaultmem_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("VAULTMEM_"):
            monkeypatch.delenv(name)


def _one_line(stderr: str) -> str:
    assert "Traceback" not in stderr
    assert stderr.count("\n") == 1 and stderr.startswith("vaultmem: "), stderr
    return stderr.removesuffix("\n")


def _vault(tmp_path: Path, key: str) -> tuple[Path, list[str]]:
    """A vault holding /memories/a.txt (version 0), then /memories/b.txt (version 1)."""
    path = tmp_path / "v"
    with Vault.init(path, key=key) as vault:
        tool = VaultMemoryTool(vault)
        tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
        tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "b\n"})
        ids = [v.id for v in reversed(vault.history())]
    return path, ids


def _history(path: Path, key: str) -> list[str]:
    with Vault.open(path, key=key) as vault:
        return [v.id for v in vault.history()]


# -- 1. a key file that cannot be read is named ---------------------------------------------


def test_a_key_file_that_cannot_be_read_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key = generate_key()
    _vault(tmp_path, key)
    monkeypatch.chdir(tmp_path)
    assert main(["--vault", "v", "--key-file", "vault.key", "ls"]) == 2
    assert capsys.readouterr().err == "vaultmem: cannot read the key file vault.key: no such file or directory.\n"
    assert main(["--vault", "v", "--passphrase-file", "pass.txt", "ls"]) == 2
    assert capsys.readouterr().err == "vaultmem: cannot read the passphrase file pass.txt: no such file or directory.\n"
    (tmp_path / "keys").mkdir()
    assert main(["--vault", "v", "--key-file", "keys", "ls"]) == 2
    assert capsys.readouterr().err == "vaultmem: the key file keys is not a regular file.\n"
    (tmp_path / "open.key").write_text(key + "\n", encoding="utf-8")
    (tmp_path / "open.key").chmod(0o644)
    assert main(["--vault", "v", "--key-file", "open.key", "ls"]) == 2
    assert capsys.readouterr().err == (
        "vaultmem: the key file open.key is readable by others (mode 0644); run `chmod 600` on it first.\n"
    )
    (tmp_path / "other.key").write_text(generate_key() + "\n", encoding="utf-8")
    (tmp_path / "other.key").chmod(0o600)
    assert main(["--vault", "v", "--key-file", "other.key", "ls"]) == 2
    assert capsys.readouterr().err == "vaultmem: the key file other.key given does not open this vault.\n"
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    (tmp_path / "empty.txt").chmod(0o600)
    assert main(["--vault", "v", "--passphrase-file", "empty.txt", "ls"]) == 2
    assert capsys.readouterr().err == (
        "vaultmem: the passphrase file empty.txt is empty: its first line is the passphrase.\n"
    )


# -- 2. log --limit out of range names --limit ----------------------------------------------


@pytest.mark.parametrize("value", ["-1", "0", "many"])
def test_log_limit_out_of_range_names_the_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    key = generate_key()
    path, _ = _vault(tmp_path, key)
    monkeypatch.setenv("VAULTMEM_KEY", key)
    assert main(["--vault", str(path), "log", "--limit", value]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert _one_line(err) == (
        f"vaultmem: --limit takes a whole number of versions, at least 1 (got '{value}'); "
        "leave it out to list them all."
    )
    assert main(["--vault", str(path), "log", "--limit", "1"]) == 0
    assert capsys.readouterr().out.count("\n") == 1


def test_import_max_file_bytes_out_of_range_names_the_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key = generate_key()
    path, ids = _vault(tmp_path, key)
    (tmp_path / "sdk" / "memories").mkdir(parents=True)
    (tmp_path / "sdk" / "memories" / "c.txt").write_text("c\n", encoding="utf-8")
    monkeypatch.setenv("VAULTMEM_KEY", key)
    for value in ("-5", "0"):
        assert main(["--vault", str(path), "import", str(tmp_path / "sdk"), "--max-file-bytes", value]) == 2
        assert _one_line(capsys.readouterr().err) == (
            f"vaultmem: --max-file-bytes takes a whole number of bytes, at least 1 (got '{value}')."
        )
    assert _history(path, key) == ids[::-1]


@pytest.mark.parametrize("value", ["-1", "0", "two"])
def test_undo_of_a_count_that_is_not_one_says_what_it_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    key = generate_key()
    path, ids = _vault(tmp_path, key)
    monkeypatch.setenv("VAULTMEM_KEY", key)
    assert main(["--vault", str(path), "undo", value]) == 2
    assert _one_line(capsys.readouterr().err) == (
        f"vaultmem: undo takes a whole number of versions, at least 1 (got '{value}')."
    )
    assert _history(path, key) == ids[::-1]


# -- 3. a restore that removes the file says so -----------------------------------------------


def test_a_restore_to_a_version_without_the_file_says_it_was_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key = generate_key()
    path, ids = _vault(tmp_path, key)
    monkeypatch.setenv("VAULTMEM_KEY", key)
    assert main(["--vault", str(path), "restore", ids[0], "--path", "/memories/b.txt"]) == 0
    new = _history(path, key)[0]
    assert capsys.readouterr().out == (
        f"Removed /memories/b.txt: it did not exist at {ids[0][:10]} (restored to its absence); "
        f"new version {new[:10]}.\n"
    )
    with Vault.open(path, key=key) as vault:
        assert [e.path for e in vault.listing("/memories")] == ["/memories/a.txt"]
    # bringing it back is still said as a restore
    assert main(["--vault", str(path), "restore", ids[1], "--path", "/memories/b.txt"]) == 0
    again = _history(path, key)[0]
    assert (
        capsys.readouterr().out == f"Restored /memories/b.txt as it was at {ids[1][:10]}: new version {again[:10]}.\n"
    )


# -- 4. import refusing to overwrite names --replace ------------------------------------------


def test_an_import_refused_for_clashes_names_the_replace_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key = generate_key()
    path, ids = _vault(tmp_path, key)
    (tmp_path / "sdk" / "memories").mkdir(parents=True)
    (tmp_path / "sdk" / "memories" / "a.txt").write_text("other\n", encoding="utf-8")
    monkeypatch.setenv("VAULTMEM_KEY", key)
    assert main(["--vault", str(path), "import", str(tmp_path / "sdk")]) == 2
    assert _one_line(capsys.readouterr().err) == (
        "vaultmem: cannot import: 1 path already exists in the vault (/memories/a.txt). Import into an empty "
        "vault, remove them first, or give --replace to make the memory exactly the folder. Nothing was imported."
    )
    assert _history(path, key) == ids[::-1]


def test_an_import_of_a_missing_folder_names_the_folder_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key = generate_key()
    path, ids = _vault(tmp_path, key)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VAULTMEM_KEY", key)
    assert main(["--vault", "v", "import", "sdk-memroy"]) == 2
    assert _one_line(capsys.readouterr().err) == (
        "vaultmem: 'sdk-memroy' does not exist. Give the folder the SDK's BetaLocalFilesystemMemoryTool used as "
        "base_path (default ./memory), or its memories/ folder."
    )
    assert _history(path, key) == ids[::-1]


# -- 5. clone into a folder that cannot be written --------------------------------------------


def test_a_clone_into_a_folder_that_cannot_be_written_says_so_in_vaultmems_words(tmp_path: Path) -> None:
    key = generate_key()
    _vault(tmp_path, key)
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked").chmod(0o555)
    try:
        done = _run("clone", "v", "locked/copy", cwd=tmp_path, env={"VAULTMEM_KEY": key}, drop_root=True)
    finally:
        (tmp_path / "locked").chmod(0o755)
    assert done.returncode == 2
    assert _one_line(done.stderr) == (
        "vaultmem: cannot clone into locked/copy: the folder locked cannot be written (permission denied); "
        "choose a folder you can write to. Nothing was made."
    )
    assert list((tmp_path / "locked").iterdir()) == []


def test_a_clone_below_a_file_says_so_in_vaultmems_words(tmp_path: Path) -> None:
    key = generate_key()
    _vault(tmp_path, key)
    (tmp_path / "notes.txt").write_text("a file\n", encoding="utf-8")
    done = _run("clone", "v", "notes.txt/copy", cwd=tmp_path, env={"VAULTMEM_KEY": key}, drop_root=False)
    assert done.returncode == 2
    assert _one_line(done.stderr) == (
        "vaultmem: cannot clone into notes.txt/copy: notes.txt is a file, not a folder. Nothing was made."
    )
    assert (tmp_path / "notes.txt").read_text(encoding="utf-8") == "a file\n"


# -- 6. a passphrase vault with no terminal ---------------------------------------------------


def test_a_passphrase_vault_without_a_terminal_says_it_needs_its_passphrase(tmp_path: Path) -> None:
    Vault.init(tmp_path / "p.vault", passphrase=PASSPHRASE).close()
    done = _run("--vault", "p.vault", "ls", cwd=tmp_path, drop_root=False)
    assert done.returncode == 2 and done.stdout == ""
    assert _one_line(done.stderr) == (
        "vaultmem: no passphrase given: p.vault is protected by a passphrase, and standard input is not a "
        "terminal to ask for it; set VAULTMEM_PASSPHRASE, use --passphrase-file FILE, or pipe it in with "
        "--passphrase."
    )
    piped = subprocess.run(
        [sys.executable, "-m", "vaultmem", "--vault", "p.vault", "--passphrase", "ls"],
        input=PASSPHRASE + "\n",
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert (piped.returncode, piped.stderr) == (0, ""), piped.stderr


# -- an age with no unit is refused, not read as seconds -----------------------------------


@pytest.mark.parametrize(("command", "option"), [("expire", "--unread-for"), ("retention", "--keep-for")])
def test_an_age_without_a_unit_is_refused_before_anything_is_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str, option: str
) -> None:
    """`--keep-for 365` meant a year; read as 365 seconds it would erase,
    for good, every version older than six minutes."""
    key = generate_key()
    path, ids = _vault(tmp_path, key)
    with Vault.open(path, key=key) as vault:
        VaultMemoryTool(vault).call(
            {"command": "str_replace", "path": "/memories/a.txt", "old_str": "a", "new_str": "z"}
        )
        before = [v.id for v in vault.history()]
    monkeypatch.setenv("VAULTMEM_KEY", key)
    assert main(["--vault", str(path), command, option, "365"]) == 2
    assert _one_line(capsys.readouterr().err) == (
        f"vaultmem: {option} 365 has no unit: write 365d for days (or 365s, 365m, 365h, 365w). Nothing was changed."
    )
    assert _history(path, key) == before
    with Vault.open(path, key=key) as vault:
        assert [vault.read(f"/memories/{n}.txt") for n in "ab"] == ["z\n", "b\n"]
        assert vault.read("/memories/a.txt", at=ids[0]) == "a\n"  # the older version is not erased


def test_a_key_given_to_a_passphrase_vault_says_it_takes_a_passphrase(tmp_path: Path) -> None:
    """After `vaultmem key change` to a passphrase, the old key (still in
    VAULTMEM_KEY) was only told it "does not open this vault"."""
    Vault.init(tmp_path / "p.vault", passphrase=PASSPHRASE).close()
    done = _run("--vault", "p.vault", "ls", cwd=tmp_path, env={"VAULTMEM_KEY": generate_key()}, drop_root=False)
    assert done.returncode == 2 and done.stdout == ""
    assert _one_line(done.stderr) == (
        "vaultmem: the VAULTMEM_KEY environment variable given does not open this vault: it is protected by a "
        "passphrase. Use --passphrase-file FILE or --passphrase, or set VAULTMEM_PASSPHRASE instead of VAULTMEM_KEY."
    )


# -- 7. retention of one day is "1 day" -------------------------------------------------------


@pytest.mark.parametrize(("keep_for", "said"), [("1d", "1 day"), ("2d", "2 days"), (1, "1 second"), (90, "90 seconds")])
def test_retention_reason_says_one_day_not_one_days(tmp_path: Path, keep_for: str | int, said: str) -> None:
    clock = FakeClock()
    with Vault.init(tmp_path / "v", key=generate_key(), clock=clock) as vault:
        tool = VaultMemoryTool(vault)
        tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "one\n"})
        tool.call({"command": "str_replace", "path": "/memories/a.txt", "old_str": "one", "new_str": "two"})
        clock.advance(3 * 86400)
        result = vault.apply_retention(keep_for)
        assert result.commit is not None
        assert vault.history()[0].reason == f"content retention: older than {said}"
