"""Where a passphrase comes from, and which ones protect a vault (issue 15, defect 5).

A passphrase comes from a prompt on a terminal, one line of a pipe, a file
(``--passphrase-file``, mode 0600 like a key file) or ``VAULTMEM_PASSPHRASE``.
A new passphrase too weak to protect a vault is refused, with the rule, and
nothing is made.  These run ``python -m vaultmem`` as real processes: what a
pipe or a missing terminal does is the point.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vaultmem import BadKeyError, Vault, generate_key
from vaultmem.core import crypto

STRONG = "correct horse battery staple"


def run(*args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
    return subprocess.run(
        [sys.executable, "-m", "vaultmem", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**full, **env},
        timeout=120,
        check=False,
        start_new_session=True,  # no controlling terminal, as in a script or CI
    )


def test_a_piped_passphrase_creates_and_opens_a_vault_without_warnings(tmp_path: Path) -> None:
    vault = tmp_path / "p.vault"
    made = run("--vault", str(vault), "--passphrase", "init", stdin=STRONG + "\n")
    assert made.returncode == 0, made.stderr
    assert made.stderr == ""  # no GetPassWarning, no prompt written to a pipe
    listed = run("--vault", str(vault), "--passphrase", "ls", stdin=STRONG + "\n")
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr == ""
    Vault.open(vault, passphrase=STRONG).close()


def test_an_empty_pipe_is_a_clear_error(tmp_path: Path) -> None:
    vault = tmp_path / "p.vault"
    made = run("--vault", str(vault), "--passphrase", "init", stdin="")
    assert made.returncode == 2
    assert made.stderr.startswith("vaultmem: no passphrase") and made.stderr.count("\n") == 1, made.stderr
    assert not vault.exists()


def test_a_passphrase_file(tmp_path: Path) -> None:
    vault = tmp_path / "p.vault"
    secret = tmp_path / "pass.txt"
    secret.write_text(STRONG + "\n")
    secret.chmod(0o600)
    made = run("--vault", str(vault), "--passphrase-file", str(secret), "init")
    assert made.returncode == 0, made.stderr
    Vault.open(vault, passphrase=STRONG).close()  # the line, without its newline
    listed = run("--vault", str(vault), "ls", "--passphrase-file", str(secret))
    assert listed.returncode == 0, listed.stderr


def test_a_passphrase_file_others_can_read_is_refused(tmp_path: Path) -> None:
    vault = tmp_path / "p.vault"
    secret = tmp_path / "pass.txt"
    secret.write_text(STRONG + "\n")
    secret.chmod(0o644)
    made = run("--vault", str(vault), "--passphrase-file", str(secret), "init")
    assert made.returncode == 2
    assert "readable by others" in made.stderr and "chmod 600" in made.stderr
    assert not vault.exists()


def test_the_environment_variable_opens_a_vault(tmp_path: Path) -> None:
    vault = tmp_path / "p.vault"
    made = run("--vault", str(vault), "init", VAULTMEM_PASSPHRASE=STRONG)
    assert made.returncode == 0, made.stderr
    listed = run("--vault", str(vault), "ls", VAULTMEM_PASSPHRASE=STRONG)
    assert listed.returncode == 0, listed.stderr


@pytest.mark.parametrize("weak", ["hunter2", "open sesame", "aaaaaaaaaaaaaaaa", "121212121212"])
def test_a_weak_new_passphrase_is_refused_with_the_rule(tmp_path: Path, weak: str) -> None:
    vault = tmp_path / "p.vault"
    made = run("--vault", str(vault), "--passphrase", "init", stdin=weak + "\n")
    assert made.returncode == 2
    assert "at least 12 characters" in made.stderr and "different" in made.stderr, made.stderr
    assert not vault.exists()
    with pytest.raises(BadKeyError, match="at least 12 characters"):
        Vault.init(vault, passphrase=weak)
    assert not vault.exists()


def test_a_weak_passphrase_is_refused_by_key_change_and_the_old_key_still_opens(tmp_path: Path) -> None:
    key = generate_key()
    vault = tmp_path / "k.vault"
    Vault.init(vault, key=key).close()
    with Vault.open(vault, key=key) as opened, pytest.raises(BadKeyError, match="at least 12 characters"):
        opened.change_key(passphrase="hunter2")
    changed = run("--vault", str(vault), "key", "change", VAULTMEM_KEY=key, VAULTMEM_NEW_PASSPHRASE="hunter2")
    assert changed.returncode == 2 and "at least 12 characters" in changed.stderr
    Vault.open(vault, key=key).close()


def test_a_new_passphrase_from_a_file(tmp_path: Path) -> None:
    key = generate_key()
    vault = tmp_path / "k.vault"
    Vault.init(vault, key=key).close()
    secret = tmp_path / "new.txt"
    secret.write_text(STRONG + "\n")
    secret.chmod(0o600)
    changed = run("--vault", str(vault), "key", "change", "--new-passphrase-file", str(secret), VAULTMEM_KEY=key)
    assert changed.returncode == 0, changed.stderr
    Vault.open(vault, passphrase=STRONG).close()


def test_an_existing_vault_still_opens_with_its_old_short_passphrase(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule guards new passphrases; a vault made before it (by 0.1) still opens."""
    vault = tmp_path / "old.vault"
    monkeypatch.setattr(crypto, "PASSPHRASE_MIN_LENGTH", 1)  # as 0.1 allowed
    monkeypatch.setattr(crypto, "PASSPHRASE_MIN_DIFFERENT", 1)
    Vault.init(vault, passphrase="hunter2").close()
    listed = run("--vault", str(vault), "--passphrase", "ls", stdin="hunter2\n")
    assert listed.returncode == 0, listed.stderr


def test_a_passphrase_that_is_not_utf8_is_one_clear_error(tmp_path: Path) -> None:
    vault = tmp_path / "p.vault"
    assert run("--vault", str(vault), "init", VAULTMEM_PASSPHRASE=STRONG).returncode == 0
    bad = "pass\udce9word horse"  # the bytes "pass", 0xE9 (a Latin-1 "é"), "word horse"
    by_env = run("--vault", str(vault), "ls", VAULTMEM_PASSPHRASE=bad)
    assert by_env.returncode == 2 and "unexpected" not in by_env.stderr, by_env.stderr
    not_utf8 = "is not valid Unicode text (it holds bytes that are not UTF-8).\n"
    assert by_env.stderr == f"vaultmem: VAULTMEM_PASSPHRASE {not_utf8}"
    changed = run("--vault", str(vault), "key", "change", VAULTMEM_PASSPHRASE=STRONG, VAULTMEM_NEW_PASSPHRASE=bad)
    assert changed.returncode == 2 and "VAULTMEM_NEW_PASSPHRASE is not valid Unicode" in changed.stderr, changed.stderr
    for utf8_mode in ("0", "1"):  # standard input decoded strictly, or with surrogate escapes
        full = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
        piped = subprocess.run(
            [sys.executable, "-m", "vaultmem", "--vault", str(vault), "--passphrase", "ls"],
            input=b"pass\xe9word horse\n",
            capture_output=True,
            env={**full, "PYTHONUTF8": utf8_mode, "LC_ALL": "C.UTF-8"},
            timeout=120,
            check=False,
            start_new_session=True,
        )
        stderr = piped.stderr.decode()
        assert piped.returncode == 2, stderr
        assert stderr == f"vaultmem: the passphrase on standard input {not_utf8}"
    with pytest.raises(BadKeyError, match="not valid Unicode"):
        Vault.open(vault, passphrase=bad)
    with pytest.raises(BadKeyError, match="not valid Unicode"):
        Vault.init(tmp_path / "other.vault", passphrase=bad + " and more")
    Vault.open(vault, passphrase=STRONG).close()  # unchanged
