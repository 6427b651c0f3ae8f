"""What a user meets in the first hour, from the command line: the usage when
no command is given, help that says what `demo` does, a clear line when a
SOCKS proxy needs a package, key and passphrase files saved with a BOM, the
docs' key kept in a file, a policy change dated past the year 9999, and a
file stored by an older vaultmem under a name now refused for new files."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import git

from vaultmem import Vault, generate_key
from vaultmem.cli.app import main
from vaultmem.core.crypto import read_key_file, read_passphrase_file
from vaultmem.core.paths import MemoryPath
from vaultmem.repo.policy import POLICY_REF
from vaultmem.repo.store import Change

ROOT = Path(__file__).resolve().parent.parent
BOM = "\ufeff"


def _run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_") and not k.endswith("_PROXY")}
    environ = {k: v for k, v in environ.items() if k.lower() not in ("all_proxy", "https_proxy", "http_proxy")}
    environ.update(PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "vaultmem", *args],
        capture_output=True,
        text=True,
        env=environ,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


# -- 1. no command -------------------------------------------------------------


def test_no_command_shows_the_usage_and_the_commands() -> None:
    result = _run()
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("usage: vaultmem ")
    for command in ("init", "call", "log", "demo", "chat", "export"):
        assert re.search(rf"^    {command} ", result.stderr, re.M), command
    assert result.stderr.rstrip("\n").splitlines()[-1] == "vaultmem: give a command (see `vaultmem --help`)."
    assert "Traceback" not in result.stderr


def test_a_group_without_its_command_stays_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """`vaultmem policy` names the help to read, in the one line every usage error is."""
    assert main(["policy"]) == 2
    assert capsys.readouterr().err == (
        "vaultmem: the following arguments are required: POLICY_COMMAND (see `vaultmem policy --help`)\n"
    )


# -- 2. demo's help --------------------------------------------------------------


def test_demo_help_says_it_runs_on_a_temporary_vault_and_takes_no_vault_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    listing = " ".join(capsys.readouterr().out.split())
    assert "demo an offline agent session on a temporary vault" in listing
    assert "against the vault" not in listing
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    text = capsys.readouterr().out
    for option in ("--vault", "--key-file", "--passphrase", "--signing-key"):
        assert option not in text, option
    assert main(["demo", "--vault", "somewhere.vault"]) == 2
    assert "unrecognized arguments: --vault" in capsys.readouterr().err


# -- 3. chat behind a SOCKS proxy without socksio -------------------------------


@pytest.mark.skipif(importlib.util.find_spec("socksio") is not None, reason="socksio is installed here")
def test_chat_behind_a_socks_proxy_without_socksio_says_what_to_do(tmp_path: Path) -> None:
    key = generate_key()
    Vault.init(tmp_path / "v.vault", key=key).close()
    result = _run(
        "--vault",
        str(tmp_path / "v.vault"),
        "chat",
        env={"VAULTMEM_KEY": key, "ANTHROPIC_API_KEY": "sk-ant-test", "ALL_PROXY": "socks5://user:secret@127.0.0.1:9"},
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == (
        "vaultmem: ALL_PROXY names a SOCKS proxy, which needs the socksio package: "
        "run `pip install socksio`, or unset ALL_PROXY.\n"
    )


# -- 4. key and passphrase files with a BOM -------------------------------------


def _secret(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    path.chmod(0o600)
    return path


def test_a_key_file_saved_with_a_bom_opens_the_vault(tmp_path: Path) -> None:
    key = generate_key()
    Vault.init(tmp_path / "v.vault", key=key).close()
    for n, text in enumerate([BOM + key, BOM + key + "\r\n", BOM + " " + key + " \n"]):
        path = _secret(tmp_path / f"k{n}.key", text)
        assert read_key_file(path).fernet.decrypt(read_key_file(path).fernet.encrypt(b"x")) == b"x"
        assert main(["--vault", str(tmp_path / "v.vault"), "--key-file", str(path), "ls"]) == 0
    with pytest.raises(Exception, match="not a vaultmem key"):
        read_key_file(_secret(tmp_path / "two.key", BOM + BOM + key))


def test_a_passphrase_file_saved_with_a_bom_gives_the_passphrase_without_it(tmp_path: Path) -> None:
    assert read_passphrase_file(_secret(tmp_path / "p1", BOM + "correct horse battery\r\n")) == "correct horse battery"
    assert read_passphrase_file(_secret(tmp_path / "p2", BOM + " spaced words \n")) == " spaced words "
    with pytest.raises(Exception, match="empty"):
        read_passphrase_file(_secret(tmp_path / "p3", BOM + "\n"))


# -- 5. the docs' key ---------------------------------------------------------------

ONLY_IN_THE_SHELL = re.compile(r"export\b[^\n]*VAULTMEM_KEY=\$\(vaultmem keygen\)")


def _key_kept_in_a_file(text: str) -> bool:
    """A doc that makes a vault's key writes it to a private file first."""
    read_back = re.findall(r"VAULTMEM_KEY=\$\(cat ([\w.]+)\)", text)
    return ONLY_IN_THE_SHELL.search(text) is None and all(
        f"(umask 077 && vaultmem keygen > {name})" in text for name in read_back
    )


@pytest.mark.parametrize("doc", ["docs/sync.md", "docs/signing.md", "docs/getting-started.md"])
def test_the_docs_keep_a_new_vaults_key_in_a_private_file(doc: str) -> None:
    text = (ROOT / doc).read_text()
    assert _key_kept_in_a_file(text)
    assert re.search(r"^\$ \(umask 077 && vaultmem keygen > [\w.]+\.key\)$", text, re.M)


def test_a_key_made_only_in_the_shell_is_what_the_docs_check_refuses() -> None:
    assert not _key_kept_in_a_file("$ export VAULTMEM_KEY=$(vaultmem keygen)\n")
    assert not _key_kept_in_a_file("$ export VAULTMEM_VAULT=support.vault VAULTMEM_KEY=$(vaultmem keygen)\n")


# -- 6. a policy change dated past the year 9999 --------------------------------


def test_policy_log_lists_a_change_dated_past_the_year_9999(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """git records any time: here a sealed change made on a host whose clock
    read @300000000000 (the year 11476)."""
    key = generate_key()
    path = tmp_path / "v.vault"
    with Vault.init(path, key=key, clock=lambda: 300_000_000_000.0) as vault:
        vault.set_policy(max_files=5, actor="ops-alice")
    head = git(path, "rev-parse", POLICY_REF).strip()
    assert "300000000000" in git(path, "log", "-1", "--format=%at", head)
    os.environ["VAULTMEM_KEY"] = key
    try:
        code = main(["--vault", str(path), "policy", "log"])
        out, err = capsys.readouterr()
        assert (code, err) == (0, ""), err
        assert out.splitlines()[0].startswith(head[:10] + "  9999-12-31T23:59:59Z  ops-alice")
        assert main(["--vault", str(path), "policy", "log", "--json"]) == 0
        assert '"9999-12-31T23:59:59Z"' in capsys.readouterr().out
    finally:
        del os.environ["VAULTMEM_KEY"]


# -- 7. a name an older vaultmem stored ------------------------------------------


def test_cat_and_export_read_a_stream_name_an_older_vaultmem_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = generate_key()
    path = tmp_path / "v.vault"
    legacy = MemoryPath(("notes", ".git:x"))
    with Vault.init(path, key=key) as vault:
        vault.mutate(lambda snap: Change("create", (legacy,)).write(legacy, b"one\n"), actor="older-vaultmem")
        assert vault.read("/memories/notes/.git:x") == "one\n"
        assert [e.path for e in vault.listing("/memories/notes/.git:x")] == ["/memories/notes/.git:x"]
        vault.note_read("/memories/notes/.git:x")
    os.environ["VAULTMEM_KEY"] = key
    try:
        assert main(["--vault", str(path), "cat", "/memories/notes/.git:x"]) == 0
        assert capsys.readouterr().out == "one\n"
        assert main(["--vault", str(path), "export", str(tmp_path / "plain")]) == 0
    finally:
        del os.environ["VAULTMEM_KEY"]
    assert (tmp_path / "plain" / "memories" / "notes" / ".git:x").read_text() == "one\n"
    with Vault.init(tmp_path / "other.vault", key=generate_key()) as other:
        with pytest.raises(Exception, match="reserved"):
            other.import_folder(tmp_path / "plain" / "memories")  # a new name there: refused
        assert other.head() is None  # and nothing was imported
    with pytest.raises(Exception, match="reserved"):
        Vault.open(path, key=key).read("/memories/notes/.git")


def test_a_vault_made_from_a_passphrase_file_with_a_bom_still_opens_from_that_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An older vaultmem kept the BOM as part of the passphrase: the same file
    opens that vault still, and a vault made now opens with or without it."""
    older = tmp_path / "older.vault"
    Vault.init(older, passphrase=BOM + "correct horse battery").close()
    newer = tmp_path / "newer.vault"
    passphrase_file = _secret(tmp_path / "pass.txt", BOM + "correct horse battery\r\n")
    assert main(["--vault", str(newer), "--passphrase-file", str(passphrase_file), "init"]) == 0
    plain = _secret(tmp_path / "plain.txt", "correct horse battery\n")
    for vault, source in ((older, passphrase_file), (newer, passphrase_file), (newer, plain)):
        assert main(["--vault", str(vault), "--passphrase-file", str(source), "ls"]) == 0, (vault, source)
    capsys.readouterr()
    assert main(["--vault", str(older), "--passphrase-file", str(plain), "ls"]) == 2
    assert "does not open" in capsys.readouterr().err


def test_log_diff_find_and_forget_reach_a_stream_name_an_older_vaultmem_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Erasing such a file (a GDPR request) must not be refused for its name."""
    key = generate_key()
    path = tmp_path / "v.vault"
    legacy = MemoryPath(("notes", ".git:x"))
    name = "/memories/notes/.git:x"
    with Vault.init(path, key=key) as vault:
        vault.mutate(lambda snap: Change("create", (legacy,)).write(legacy, b"ada@example.com\n"), actor="older")
        assert [v.paths for v in vault.history(path=name)] == [(name,)]
        assert [c.path for c in vault.changes(None, path=name)] == [name]
        assert [m.path for m in vault.find("ada@", path=name)] == [name]
        vault.forget(name, reason="GDPR request 4411", actor="ops-alice")
        assert vault.find("ada@") == []
    os.environ["VAULTMEM_KEY"] = key
    try:
        assert main(["--vault", str(path), "log", name]) == 0
        assert main(["--vault", str(path), "diff", "main~1", "main", "--path", name]) == 0
    finally:
        del os.environ["VAULTMEM_KEY"]
