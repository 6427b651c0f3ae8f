"""A new user's first hour with the `vaultmem` command, walked through as the
README shows it: a vault made in an empty folder the user may not write, a
time before the history began, and other mistaken input, each answered in
one clear line that changes nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vaultmem import Vault, VaultMemoryTool, generate_key
from vaultmem.cli.app import main

ROOT = Path(__file__).resolve().parent.parent


def _run(
    *args: str, cwd: Path, env: dict[str, str] | None = None, drop_root: bool = True
) -> subprocess.CompletedProcess[str]:
    """`vaultmem ARGS` in ``cwd``, standard input not a terminal; with
    ``drop_root``, folder permissions bind even for root (its capabilities
    to ignore them dropped)."""
    command = [sys.executable, "-m", "vaultmem", *args]
    if drop_root and os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: permissions do not bind")
        caps = "-dac_override,-dac_read_search,-fowner"
        command = [setpriv, f"--bounding-set={caps}", f"--inh-caps={caps}", *command]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
    environ.update(PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run(
        command, capture_output=True, text=True, env=environ, cwd=cwd, stdin=subprocess.DEVNULL, timeout=120
    )


def _one_clean_line(stderr: str, tmp_path: Path) -> str:
    assert "Traceback" not in stderr
    assert stderr.count("\n") == 1 and stderr.startswith("vaultmem: "), stderr
    assert str(tmp_path) not in stderr, stderr  # the user gave a relative folder: no host path comes back
    return stderr


# -- 1. init in an empty folder that is not writable ------------------------------------------


@pytest.mark.parametrize("command", ["init", "demo"])
def test_a_vault_refused_in_an_unwritable_empty_folder_says_so_in_plain_words(tmp_path: Path, command: str) -> None:
    """`mkdir agent.vault` made read-only (or owned by someone else), then
    `vaultmem init` or `vaultmem demo FOLDER` in it: the same plain reason as
    for a parent folder that is not writable, not git's internal error with
    the host's absolute path, and the folder left as it was."""
    folder = tmp_path / "agent.vault"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        if command == "init":
            done = _run("--vault", "agent.vault", "init", cwd=tmp_path, env={"VAULTMEM_KEY": generate_key()})
        else:
            done = _run("demo", "agent.vault", cwd=tmp_path)
    finally:
        folder.chmod(0o700)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" or command == "demo"
    message = _one_clean_line(done.stderr, tmp_path)
    assert "not writable" in message and "no vault was created in agent.vault" in message, message
    assert "failed to make directory" not in message
    assert list(folder.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.vault"]  # no key file left by the demo


# -- 2. a time before the history began ------------------------------------------------------


def test_a_time_before_the_history_is_named_in_utc_as_every_output_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/cli.md: output times are UTC, as `2026-11-04T12:00:00Z`; the
    refusal of a time before the first version spells it the same way, also
    when the time was given with an offset."""
    key = generate_key()
    vault = Vault.init(tmp_path / "v", key=key)
    VaultMemoryTool(vault).call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    vault.close()
    base = ["--vault", str(tmp_path / "v"), "--key-file", str(_key_file(tmp_path, key))]
    assert main([*base, "cat", "/memories/a.txt", "--at", "2020-01-01"]) == 2
    assert capsys.readouterr().err == (
        "vaultmem: no version at or before 2020-01-01T00:00:00Z; the history starts later.\n"
    )
    assert main([*base, "export", str(tmp_path / "out"), "--at", "2020-01-01T13:00:00+01:00"]) == 2
    assert capsys.readouterr().err == (
        "vaultmem: no version at or before 2020-01-01T12:00:00Z; the history starts later.\n"
    )
    assert not (tmp_path / "out").exists()


def _key_file(folder: Path, key: str) -> Path:
    path = folder / "vault.key"
    path.write_text(key + "\n", encoding="utf-8")
    path.chmod(0o600)
    return path


# -- 3. --vault given an empty path ----------------------------------------------------------


def test_vault_given_an_empty_path_says_so_rather_than_asking_for_the_variable_already_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`vaultmem --vault "$VAULT" log` with VAULT unset, and VAULTMEM_VAULT
    set: told to set VAULTMEM_VAULT, which is set, the user is lost; the
    empty option is named, as an empty `--key-file` is."""
    key = generate_key()
    Vault.init(tmp_path / "v", key=key).close()
    monkeypatch.setenv("VAULTMEM_VAULT", str(tmp_path / "v"))
    monkeypatch.setenv("VAULTMEM_KEY", key)
    assert main(["--vault", "", "log"]) == 2
    assert capsys.readouterr().err == "vaultmem: --vault was given an empty path; give the vault's folder.\n"
    assert main(["log", "--vault", ""]) == 2
    assert capsys.readouterr().err == "vaultmem: --vault was given an empty path; give the vault's folder.\n"
    monkeypatch.delenv("VAULTMEM_VAULT")
    assert main(["--vault", "", "init"]) == 2
    assert capsys.readouterr().err == "vaultmem: --vault was given an empty path; give the vault's folder.\n"
    assert main(["log"]) == 2  # nothing given at all: as before
    assert capsys.readouterr().err == "vaultmem: no vault given: use --vault PATH or set VAULTMEM_VAULT.\n"


# -- 4. a short id under four digits ---------------------------------------------------------


def test_an_id_shorter_than_four_digits_is_called_too_short_not_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`vaultmem show 7e6` where a version starts with 7e6: "no version '7e6'
    in this vault" sends the user looking for a version that is there;
    docs/cli.md asks for 4 hex digits or more, and the refusal says that."""
    key = generate_key()
    vault = Vault.init(tmp_path / "v", key=key)
    VaultMemoryTool(vault).call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    (version,) = vault.history()
    vault.close()
    monkeypatch.setenv("VAULTMEM_VAULT", str(tmp_path / "v"))
    monkeypatch.setenv("VAULTMEM_KEY", key)
    short = version.id[:3]
    assert main(["show", short]) == 2
    assert capsys.readouterr().err == (
        f"vaultmem: '{short}' is too short to name a version: give at least 4 of its hex digits, "
        "as `vaultmem log` shows them.\n"
    )
    assert main(["show", version.id[:4]]) == 0
    assert capsys.readouterr().out.startswith(f"version        {version.id}\n")
    assert main(["show", "zzzz"]) == 2  # not hex: missing, as before
    assert (
        capsys.readouterr().err == "vaultmem: no version 'zzzz' in this vault. List the versions with `vaultmem log`.\n"
    )


# -- 5. an empty FOLDER ----------------------------------------------------------------------


@pytest.mark.parametrize("command", ["export", "import", "demo"])
def test_an_empty_folder_argument_is_refused_not_taken_as_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """`vaultmem export "$OUT"` with OUT unset wrote the memory as plaintext
    into ./memories; `import ""` recorded whatever ./memories held, and `demo
    ""` built a vault in the current folder with its key beside it. Each is
    refused before any work, as an empty `--key-file` or `--example` is, and
    nothing is written."""
    key = generate_key()
    vault = Vault.init(tmp_path / "v", key=key)
    VaultMemoryTool(vault).call({"command": "create", "path": "/memories/a.txt", "file_text": "secret\n"})
    head = vault.history()[0].id
    vault.close()
    work = tmp_path / "work"
    (work / "memories").mkdir(parents=True)
    (work / "memories" / "b.txt").write_text("b\n", encoding="utf-8")
    if command == "demo":
        work = work / "empty"  # an empty current folder, where the demo would build its vault
        work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("VAULTMEM_VAULT", str(tmp_path / "v"))
    monkeypatch.setenv("VAULTMEM_KEY", key)
    before = _outside_the_vault(tmp_path)
    assert main([command, ""]) == 2
    assert capsys.readouterr().err == f"vaultmem: {command} was given an empty FOLDER; give the folder's path.\n"
    assert _outside_the_vault(tmp_path) == before
    reopened = Vault.open(tmp_path / "v", key=key)
    assert [v.id for v in reopened.history()] == [head]
    reopened.close()


# -- 6. a new, empty vault -------------------------------------------------------------------


def test_a_version_asked_of_a_new_empty_vault_says_it_has_none_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Right after `vaultmem init`, `vaultmem show main` (the example its help
    gives) was told to list the versions with `vaultmem log`, which prints
    nothing; a time was said to be before a history that does not exist."""
    key = generate_key()
    Vault.init(tmp_path / "v", key=key).close()
    monkeypatch.setenv("VAULTMEM_VAULT", str(tmp_path / "v"))
    monkeypatch.setenv("VAULTMEM_KEY", key)
    asked = (["show", "main"], ["diff", "main~1"], ["restore", "main"], ["cat", "/memories/a.txt", "--at", "main"])
    for args in asked:
        assert main(args) == 2, args
        name = args[-1]
        assert capsys.readouterr().err == f"vaultmem: no version '{name}': the vault has no versions yet.\n", args
    assert main(["export", str(tmp_path / "out"), "--at", "2026-11-04"]) == 2
    assert (
        capsys.readouterr().err
        == "vaultmem: no version at or before 2026-11-04T00:00:00Z: the vault has no versions yet.\n"
    )
    assert not (tmp_path / "out").exists()
    assert main(["log"]) == 0 and capsys.readouterr().out == ""
    assert Vault.open(tmp_path / "v", key=key).history() == []


# -- 7. a passphrase saved as a key file -----------------------------------------------------


def test_a_passphrase_in_the_key_file_points_to_the_passphrase_file_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The user saved the vault's passphrase in a file and gave it as
    `--key-file`: the refusal names the option that reads a passphrase from a
    file, not only the prompt and the variable."""
    Vault.init(tmp_path / "v", passphrase="correct horse battery staple").close()
    secret = _key_file(tmp_path, "correct horse battery staple")
    assert main(["--vault", str(tmp_path / "v"), "--key-file", str(secret), "ls"]) == 2
    assert capsys.readouterr().err == (
        "vaultmem: the key file is not a vaultmem key (expected the 44-character string that `vaultmem keygen` "
        "prints). If it is a passphrase, use --passphrase-file FILE, --passphrase or VAULTMEM_PASSPHRASE.\n"
    )
    assert main(["--vault", str(tmp_path / "v"), "--passphrase-file", str(secret), "ls"]) == 0


def _outside_the_vault(folder: Path) -> list[str]:
    """Every file and folder below ``folder`` but those of the vault ``v``."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.relative_to(folder).parts[0] != "v")


# -- 8. restore --path with a mistyped path --------------------------------------------------


def test_restore_of_a_path_that_never_was_is_refused_not_reported_as_already_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`vaultmem restore V --path /memories/notse.txt` (a typo) said `Nothing
    to restore: /memories/notse.txt is already as it was at V.` and exited 0,
    as if the file had been checked and found right; a path the memory holds
    neither now nor at V is refused, naming it, and nothing is written."""
    key = generate_key()
    vault = Vault.init(tmp_path / "v", key=key)
    tool = VaultMemoryTool(vault)
    tool.call({"command": "create", "path": "/memories/notes.txt", "file_text": "a\n"})
    tool.call({"command": "create", "path": "/memories/later.txt", "file_text": "b\n"})
    first, latest = vault.history()[-1].id, vault.history()[0].id
    vault.close()
    monkeypatch.setenv("VAULTMEM_VAULT", str(tmp_path / "v"))
    monkeypatch.setenv("VAULTMEM_KEY", key)
    for extra in ([], ["--json"]):
        assert main(["restore", first[:10], "--path", "/memories/notse.txt", *extra]) == 2
        assert capsys.readouterr() == (
            "",
            f"vaultmem: no file or folder /memories/notse.txt, now or at {first[:10]}; nothing was restored.\n",
        )
    assert main(["restore", first[:10], "--path", "/memories/notes.txt"]) == 0  # there, and unchanged: as before
    assert capsys.readouterr().out == f"Nothing to restore: /memories/notes.txt is already as it was at {first[:10]}.\n"
    reopened = Vault.open(tmp_path / "v", key=key)
    assert reopened.history()[0].id == latest
    reopened.close()
