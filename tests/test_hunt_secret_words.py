"""A secret is never printed: a key, a passphrase or a token typed where a
file's path belongs, or as the value of an option that takes none, is refused
without being shown; a file's path is still named when it is one."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from vaultmem import Vault, VaultMemoryTool, generate_key
from vaultmem.cli.app import main
from vaultmem.core import paths
from vaultmem.core.crypto import read_key_file, read_passphrase_file
from vaultmem.errors import BadKeyError, NotFoundError

PASSPHRASE = "correct horse battery staple"
_CALL = ["call", '{"command": "create", "path": "/memories/a.txt", "file_text": "a"}']


@pytest.fixture(autouse=True)
def _no_vaultmem_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("VAULTMEM_"):
            monkeypatch.delenv(name)


@pytest.fixture
def keyed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A vault ``v`` in the current folder, its key in ``k.key`` (mode 0600); the key.
    Never one that starts with ``-`` (one key in 64): argparse would take it
    for an option, and refuse it before vaultmem reads it."""
    key = generate_key()
    while key.startswith("-"):
        key = generate_key()
    Vault.init(tmp_path / "v", key=key).close()
    (tmp_path / "k.key").write_text(key + "\n", encoding="utf-8")
    (tmp_path / "k.key").chmod(0o600)
    monkeypatch.chdir(tmp_path)
    return key


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], *secrets: str) -> str:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    for secret in secrets:
        assert secret not in out + err, err
        for word in secret.split():
            assert word not in err, err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err


def test_a_key_given_as_key_file_is_refused_unshown(keyed: str, capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(capsys, ["--vault", "v", "--key-file", keyed, "ls"], keyed)
    assert err == (
        "vaultmem: the key was given as its text where the key file's path belongs; give the file's path, "
        "or the text in VAULTMEM_KEY. (The key is not shown here.)\n"
    )
    err = _refused(capsys, ["--vault", "v", "--key-file", "k.key", "key", "change", "--new-key-file", keyed], keyed)
    assert "VAULTMEM_NEW_KEY" in err and "(The key is not shown here.)" in err
    err = _refused(capsys, ["--vault", "v", "git-setup", "--key-file", keyed], keyed)
    assert "(The key is not shown here.)" in err


def test_a_passphrase_given_as_passphrase_file_is_refused_unshown(
    keyed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _refused(capsys, ["--vault", "v", "--passphrase-file", PASSPHRASE, "ls"], PASSPHRASE)
    assert err == (
        "vaultmem: cannot read the passphrase file given: no such file or directory. Its name is not shown, "
        "in case it is the passphrase itself: the option takes the file's path; the passphrase may go in "
        "VAULTMEM_PASSPHRASE instead.\n"
    )
    err = _refused(capsys, ["--vault", "v", "--passphrase-file", "hunter2", "ls"], "hunter2")
    assert "VAULTMEM_PASSPHRASE" in err
    argv = ["--vault", "v", "--key-file", "k.key", "key", "change", "--new-passphrase-file", PASSPHRASE]
    assert "VAULTMEM_NEW_PASSPHRASE" in _refused(capsys, argv, PASSPHRASE)
    argv = ["--vault", "v", "--key-file", "k.key", "signer", "new", "bob", "--new-passphrase-file", PASSPHRASE]
    assert "VAULTMEM_SIGNING_PASSPHRASE" in _refused(capsys, argv, PASSPHRASE)


def test_a_signing_passphrase_given_as_its_file_is_refused_unshown(
    keyed: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--vault", "v", "signer", "new", "ann", "--out", "ann.key"]) == 0
    capsys.readouterr()
    call = _CALL
    argv = ["--vault", "v", "--key-file", "k.key", "--signing-key", "ann.key", "--signing-passphrase-file", PASSPHRASE]
    err = _refused(capsys, [*argv, *call], PASSPHRASE)
    assert "VAULTMEM_SIGNING_PASSPHRASE" in err
    # a vaultmem key's text where the signing key's path belongs is not shown either
    err = _refused(capsys, ["--vault", "v", "--key-file", "k.key", "--signing-key", keyed, *call], keyed)
    assert "VAULTMEM_SIGNING_KEY" in err


def test_a_name_too_long_for_a_file_is_not_shown(keyed: str, capsys: pytest.CaptureFixture[str]) -> None:
    secret = "s3cret" * 60
    err = _refused(capsys, ["--vault", "v", "--key-file", secret, "ls"], secret)
    assert "file name too long" in err and "VAULTMEM_KEY" in err
    err = _refused(capsys, ["--vault", "v", "--passphrase-file", secret, "ls"], secret)
    assert "file name too long" in err
    # a private key's base64 body holds "/": not a folder that exists, so not shown as a path
    body = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW/QyNTUxOQAAACBn"
    err = _refused(capsys, ["--vault", "v", "--key-file", "k.key", "--signing-key", body, *_CALL], body)
    assert "VAULTMEM_SIGNING_KEY" in err


def test_a_missing_file_that_is_a_path_is_still_named(
    keyed: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "keys").mkdir()
    err = _refused(capsys, ["--vault", "v", "--key-file", "keys/vault.key", "ls"])
    assert err == "vaultmem: cannot read the key file keys/vault.key: no such file or directory.\n"
    err = _refused(capsys, ["--vault", "v", "--passphrase-file", "pass.txt", "ls"])
    assert err == "vaultmem: cannot read the passphrase file pass.txt: no such file or directory.\n"
    err = _refused(capsys, ["--vault", "v", "--key-file", "~/vault.key", "ls"])  # the shell did not expand ~
    assert err == "vaultmem: cannot read the key file ~/vault.key: no such file or directory.\n"


def test_the_library_never_shows_a_secret_given_as_a_path(tmp_path: Path) -> None:
    key = generate_key()
    with pytest.raises(BadKeyError) as raised:
        read_key_file(key)
    assert key not in str(raised.value)
    Vault.init(tmp_path / "v", key=key).close()
    with pytest.raises(BadKeyError) as raised:
        Vault.open(tmp_path / "v", key_file=key)
    assert key not in str(raised.value)
    with pytest.raises(BadKeyError) as raised:
        read_passphrase_file(PASSPHRASE)
    assert "horse" not in str(raised.value)


def test_a_value_given_to_the_passphrase_flag_is_not_shown(keyed: str, capsys: pytest.CaptureFixture[str]) -> None:
    want = (
        "vaultmem: --passphrase takes no value: it asks for the passphrase (or reads one line from a pipe). "
        "To give it without asking, set VAULTMEM_PASSPHRASE or use --passphrase-file FILE. "
        "(What followed --passphrase is not shown.)\n"
    )
    assert _refused(capsys, ["--vault", "v", "--passphrase", PASSPHRASE, "ls"], PASSPHRASE) == want
    assert _refused(capsys, ["--vault", "v", "--passphrase", "hunter2", "ls"], "hunter2") == want
    assert _refused(capsys, ["--vault", "v", f"--passphrase={PASSPHRASE}", "ls"], PASSPHRASE) == want
    assert _refused(capsys, ["--vault", "w", "init", "--passphrase", "hunter2"], "hunter2") == want


def test_a_token_given_as_token_file_is_refused_unshown(
    keyed: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("mcp")
    for token in ("Qx3v9JdM2kLw8TnYp4RfZb7HsC1uGeVa6NiOqXtEoWy", "a+b/Qx3v9JdM2kLw8TnYp4RfZb7HsC1uGeVa6NiOqXtE="):
        argv = ["--vault", "v", "--key-file", "k.key", "mcp", "--http", "--token-file", token]
        err = _refused(capsys, argv, token)
        assert "VAULTMEM_MCP_TOKEN" in err and "no file was made" in err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["k.key", "v"]


# -- a trailing "/" names a folder: a file asked for so is refused by every scope, as read() refuses it ----------


FOLDER_NOT_FILE = "no folder /memories/a.txt/{at}: /memories/a.txt is a file; give its path without the trailing '/'."


def _two_versions(vault: Vault) -> list[str]:
    tool = VaultMemoryTool(vault)
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "one\n"})
    tool.call({"command": "str_replace", "path": "/memories/a.txt", "old_str": "one", "new_str": "two"})
    return [v.id for v in reversed(vault.history())]


def test_history_diff_and_restore_refuse_a_file_named_as_a_folder(vault: Vault) -> None:
    first, second = _two_versions(vault)
    with pytest.raises(NotFoundError) as raised:
        vault.read("/memories/a.txt/")
    assert str(raised.value) == "Error: " + FOLDER_NOT_FILE.format(at="")
    with pytest.raises(NotFoundError, match=re.escape(FOLDER_NOT_FILE.format(at=""))):
        vault.history(path="/memories/a.txt/")
    with pytest.raises(NotFoundError, match=re.escape(FOLDER_NOT_FILE.format(at=f" at version {second}"))):
        vault.diff(first, second, path="/memories/a.txt/")
    with pytest.raises(NotFoundError, match=re.escape(FOLDER_NOT_FILE.format(at=""))):
        vault.changes(first, path="/memories/a.txt/")
    with pytest.raises(NotFoundError, match=re.escape(FOLDER_NOT_FILE.format(at=f" at version {first}"))):
        vault.restore(first, path="/memories/a.txt/")
    assert [v.id for v in reversed(vault.history())] == [first, second]  # the restore wrote nothing
    assert vault.read("/memories/a.txt") == "two\n"
    # the file's own path, and its folder's with the "/", still work
    assert [v.id for v in vault.history(path="/memories/a.txt")] == [second, first]
    assert [v.id for v in vault.history(path="/memories/")] == [second, first]
    assert "-one\n+two" in vault.diff(first, second, path="/memories/")


def test_a_file_deleted_now_but_held_then_is_still_refused_by_restore(vault: Vault) -> None:
    first, _ = _two_versions(vault)
    VaultMemoryTool(vault).call({"command": "delete", "path": "/memories/a.txt"})
    with pytest.raises(NotFoundError, match=re.escape(FOLDER_NOT_FILE.format(at=f" at version {first}"))):
        vault.restore(first, path="/memories/a.txt/")
    assert vault.snapshot().kind(paths.parse("/memories/a.txt")) is None


def test_the_command_line_scopes_refuse_a_file_named_as_a_folder(
    keyed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with Vault.open("v", key=keyed) as vault:
        first, second = _two_versions(vault)
    given = ["--vault", "v", "--key-file", "k.key"]
    for argv, at in (
        (["log", "/memories/a.txt/"], ""),
        (["diff", first, second, "--path", "/memories/a.txt/"], f" at version {second}"),
        (["restore", first, "--path", "/memories/a.txt/"], f" at version {first}"),
    ):
        assert _refused(capsys, [*given, *argv]) == f"vaultmem: {FOLDER_NOT_FILE.format(at=at)}\n"
    with Vault.open("v", key=keyed) as vault:
        assert len(vault.history()) == 2 and vault.read("/memories/a.txt") == "two\n"


def test_the_mcp_audit_tools_refuse_a_file_named_as_a_folder(vault: Vault) -> None:
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client
    from mcp_helpers import result_of

    from vaultmem.mcp.server import MemoryServer

    first, second = _two_versions(vault)
    calls = [
        ("history", {"path": "/memories/a.txt/"}),
        ("diff", {"from_version": first, "to_version": second, "path": "/memories/a.txt/"}),
    ]
    results = []

    async def main() -> None:
        async with Client(MemoryServer(vault, actor="claude").build(inline=True)) as client:
            for name, arguments in calls:
                results.append(result_of(await client.call_tool(name, arguments)))

    anyio.run(main)
    for result in results:
        assert result.is_error and "/memories/a.txt is a file; give its path without the trailing '/'" in result.text
