"""What docs/cli.md, README.md and the other user documents promise, checked
claim by claim against the real command (a real vault, real git, real Fernet)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FakeClock, git

from vaultmem import Vault, VaultError, VaultMemoryTool, generate_key
from vaultmem.cli.app import main
from vaultmem.repo.store import KEYRING_REF


def error_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.startswith("vaultmem: ") and err.count("\n") == 1, err
    return err


# docs/cli.md: "A mistyped command or option is refused with the closest one".
# The closest one is an option of the command typed: one another command takes
# would be refused again.
@pytest.mark.parametrize(
    ("argv", "wrong"),
    [
        (["demo", "--vault", "X"], "--at"),
        (["ls", "--limt", "3"], "--limit"),
        (["completion", "bash", "--json"], "--reason"),
    ],
)
def test_an_unknown_option_never_suggests_one_the_command_does_not_take(
    capsys: pytest.CaptureFixture[str], argv: list[str], wrong: str
) -> None:
    err = error_of(capsys, *argv)
    assert f"unrecognized arguments: {argv[1] if argv[0] != 'completion' else argv[2]}" in err, err
    assert f"`{wrong}`" not in err, err
    assert f"(see `vaultmem {argv[0]} --help`)" in err, err


@pytest.mark.parametrize(
    ("argv", "suggestion", "see"),
    [
        (["ls", "--jsn"], "`--json`", "vaultmem ls"),
        (["key", "rotate", "--reencrpyt"], "`--reencrypt`", "vaultmem key rotate"),
        (["log", "--sinse", "2026-11-01", "--vault", "v"], "`--since`", "vaultmem log"),
        (["mcp", "--htpp"], "`--http`", "vaultmem mcp"),
    ],
)
def test_an_unknown_option_gets_the_closest_option_of_its_own_command(
    capsys: pytest.CaptureFixture[str], argv: list[str], suggestion: str, see: str
) -> None:
    err = error_of(capsys, *argv)
    assert f"Did you mean {suggestion}?" in err, err
    assert f"(see `{see} --help`)" in err, err


# -- key change: docs/cli.md "The key the vault already opens with is refused
# as a new key, and nothing changes", and the old protection named rightly ----

PASSPHRASE = "correct horse battery staple"


def _keyring_head(vault: Path) -> str:
    return git(vault, "rev-parse", KEYRING_REF).strip()


def test_key_change_refuses_the_passphrase_the_vault_already_opens_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    vault = tmp_path / "p.vault"
    monkeypatch.delenv("VAULTMEM_KEY", raising=False)
    monkeypatch.setenv("VAULTMEM_PASSPHRASE", PASSPHRASE)
    assert main(["--vault", str(vault), "init"]) == 0
    before = _keyring_head(vault)
    capsys.readouterr()
    monkeypatch.setenv("VAULTMEM_NEW_PASSPHRASE", PASSPHRASE)
    err = error_of(capsys, "--vault", str(vault), "key", "change")
    assert "already opens with that passphrase" in err and "nothing was changed" in err, err
    assert _keyring_head(vault) == before
    # The library says the same.
    with Vault.open(vault, passphrase=PASSPHRASE) as opened, pytest.raises(VaultError, match="already opens"):
        opened.change_key(passphrase=PASSPHRASE)
    assert _keyring_head(vault) == before


def test_key_change_names_what_stops_opening_the_vault(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    vault = tmp_path / "k.vault"
    key = generate_key()
    monkeypatch.delenv("VAULTMEM_PASSPHRASE", raising=False)
    monkeypatch.setenv("VAULTMEM_KEY", key)
    assert main(["--vault", str(vault), "init"]) == 0
    capsys.readouterr()
    monkeypatch.setenv("VAULTMEM_NEW_PASSPHRASE", PASSPHRASE)
    assert main(["--vault", str(vault), "key", "change"]) == 0
    said = capsys.readouterr().out
    assert "the old key no longer opens it" in said, said
    # Now protected by a passphrase: changing it again, the passphrase is what stops.
    monkeypatch.delenv("VAULTMEM_KEY")
    monkeypatch.setenv("VAULTMEM_PASSPHRASE", PASSPHRASE)
    monkeypatch.delenv("VAULTMEM_NEW_PASSPHRASE")
    monkeypatch.setenv("VAULTMEM_NEW_KEY", generate_key())
    assert main(["--vault", str(vault), "key", "change"]) == 0
    said = capsys.readouterr().out
    assert "the old passphrase no longer opens it" in said, said
    with pytest.raises(VaultError):
        Vault.open(vault, passphrase=PASSPHRASE)


# -- signer new: docs/cli.md "A passphrase needs 12 characters, 6 of them
# different", whichever way the passphrase is given ----------------------------


@pytest.mark.parametrize("how", ["file", "environment"])
@pytest.mark.parametrize("weak", ["short", "aaaaaaaaaaaaaaaa"])
def test_signer_new_refuses_a_weak_passphrase_from_a_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], how: str, weak: str
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["signer", "new", "carol"]
    if how == "file":
        secret = tmp_path / "pass"
        secret.write_text(weak + "\n")
        secret.chmod(0o600)
        argv += ["--new-passphrase-file", str(secret)]
    else:
        monkeypatch.setenv("VAULTMEM_SIGNING_PASSPHRASE", weak)
    err = error_of(capsys, *argv)
    assert "at least 12 characters" in err, err
    assert not (tmp_path / "carol.key").exists() and not (tmp_path / "carol.key.pub").exists()


def test_signer_new_takes_a_good_passphrase_from_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("VAULTMEM_SIGNING_PASSPHRASE", raising=False)
    secret = tmp_path / "pass"
    secret.write_text(PASSPHRASE + "\n")
    secret.chmod(0o600)
    assert main(["signer", "new", "carol", "--new-passphrase-file", str(secret), "--json"]) == 0
    assert '"passphrase": true' in capsys.readouterr().out
    assert (tmp_path / "carol.key").stat().st_mode & 0o777 == 0o600


# -- cat of a folder: "no file /memories/customers" said of a folder that is
# there sent people looking for a file that was never missing -----------------


@pytest.mark.parametrize("folder", ["/memories", "/memories/customers", "/memories/customers/"])
def test_cat_of_a_folder_says_it_is_a_folder_and_how_to_list_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], folder: str
) -> None:
    vault = tmp_path / "v.vault"
    monkeypatch.setenv("VAULTMEM_KEY", generate_key())
    assert main(["--vault", str(vault), "init"]) == 0
    create = '{"command": "create", "path": "/memories/customers/ada.md", "file_text": "Ada\\n"}'
    assert main(["--vault", str(vault), "call", create]) == 0
    capsys.readouterr()
    for extra in ([], ["--json"], ["--at", "main"]):
        err = error_of(capsys, "--vault", str(vault), "cat", folder, *extra)
        assert "is a folder" in err and "vaultmem ls" in err, err
        assert "no file" not in err, err
    err = error_of(capsys, "--vault", str(vault), "cat", "/memories/customers/bob.md")
    assert "no file /memories/customers/bob.md" in err, err


# -- expiry: docs/policies.md "A file's last use is the later of its last read
# and its last write".  A file another host wrote, brought in by a pull, was
# dated by this host's old log entry for a folder above it (an operator's
# restore) and expired at once, although written minutes before. ---------------

DAY = 86_400


def test_a_file_another_host_just_wrote_is_not_expired_for_an_old_folder_entry(tmp_path: Path, key: str) -> None:
    server = tmp_path / "server.git"
    git(tmp_path, "init", "-q", "--bare", str(server))
    clock_a, clock_b = FakeClock(), FakeClock()
    a = Vault.init(tmp_path / "a.vault", key=key, clock=clock_a)
    tool_a = VaultMemoryTool(a, actor="host-a")
    tool_a.call({"command": "create", "path": "/memories/old.txt", "file_text": "old\n"})
    tool_a.call({"command": "create", "path": "/memories/gone.txt", "file_text": "gone\n"})
    first = a.history()[-1].id
    a.restore(first, actor="ops")  # the operator's restore logs a write of /memories, now
    a.add_remote("origin", str(server))
    a.push()
    clock_b.now = clock_a.now + 40 * DAY
    b = Vault.clone(str(server), tmp_path / "b.vault", key=key, clock=clock_b)
    VaultMemoryTool(b, actor="host-b").call({"command": "create", "path": "/memories/new.txt", "file_text": "new\n"})
    b.push()
    clock_a.now = clock_b.now + 3600
    a.pull()
    assert a.read("/memories/new.txt") == "new\n"
    stale = {s.path: s for s in a.expire("30d", dry_run=True).stale}
    assert "/memories/new.txt" not in stale, stale  # written by host-b an hour ago
    assert "/memories/old.txt" in stale  # nobody touched it for 40 days: still expired
    b.close()
    a.close()
