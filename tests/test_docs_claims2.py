"""What docs/audit.md and docs/cli.md promise of `vaultmem git-setup`, checked
as a newcomer runs it: the real command in a fresh process, then stock
`git log -p` running the textconv driver it recorded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from vaultmem import Vault, VaultMemoryTool, generate_key

ROOT = Path(__file__).resolve().parent.parent
PASSPHRASE = "correct horse battery staple"


def fresh_env(home: Path, **extra: str) -> dict[str, str]:
    """A new user's shell: a clean HOME, no VAULTMEM_* variables, this checkout's vaultmem."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VAULTMEM_", "GIT_"))}
    env.update(HOME=str(home), PYTHONPATH=str(ROOT), GIT_CONFIG_NOSYSTEM="1", **extra)
    return env


def vaultmem(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vaultmem", *args],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
        timeout=60,
    )


def git_log_p(vault: Path, env: dict[str, str]) -> str:
    result = subprocess.run(
        ["git", "-C", str(vault), "log", "-p", "-1"], capture_output=True, text=True, env=env, check=True, timeout=60
    )
    return result.stdout


def private_file(path: Path, text: str) -> Path:
    path.write_text(text + "\n", encoding="utf-8")
    path.chmod(0o600)
    return path


def test_git_setup_on_a_passphrase_vault_names_the_passphrase_and_refuses_a_key_file(tmp_path: Path) -> None:
    """git-setup on a vault made with a passphrase said git decrypts for
    "whoever has VAULTMEM_KEY", which never opens such a vault; and it took
    `--key-file` with the passphrase file, recorded it, and every `git log -p`
    then showed ciphertext saying "run `vaultmem git-setup --key-file F`"."""
    home = tmp_path / "home"
    home.mkdir()
    vault = tmp_path / "p.vault"
    with Vault.init(vault, passphrase=PASSPHRASE) as opened:
        VaultMemoryTool(opened, actor="support-bot").call(
            {"command": "create", "path": "/memories/n.txt", "file_text": "Prefers e-mail.\n"}
        )
    pf = private_file(tmp_path / "pf", PASSPHRASE)
    env = fresh_env(home)
    config = (vault / "config").read_bytes()

    refused = vaultmem(env, "--vault", str(vault), "--passphrase-file", str(pf), "git-setup", "--key-file", str(pf))
    assert refused.returncode == 2, refused
    assert refused.stderr.count("\n") == 1 and refused.stderr.startswith("vaultmem: "), refused.stderr
    assert "protected by a passphrase" in refused.stderr and "VAULTMEM_PASSPHRASE" in refused.stderr
    assert "Nothing was set up." in refused.stderr
    assert (vault / "config").read_bytes() == config

    setup = vaultmem(env, "--vault", str(vault), "--passphrase-file", str(pf), "git-setup")
    assert setup.returncode == 0, setup
    assert "whoever has VAULTMEM_PASSPHRASE;" in setup.stdout, setup.stdout
    assert "VAULTMEM_KEY" not in setup.stdout
    # What the message says is what works: git with the passphrase decrypts.
    assert "+Prefers e-mail." in git_log_p(vault, fresh_env(home, VAULTMEM_PASSPHRASE=PASSPHRASE))
    assert "+Prefers e-mail." not in git_log_p(vault, env)


def test_git_setup_refuses_a_key_file_that_does_not_open_the_vault(tmp_path: Path) -> None:
    """With the right key in VAULTMEM_KEY, `git-setup --key-file OTHER` recorded
    a key of another vault: git could never decrypt with it."""
    home = tmp_path / "home"
    home.mkdir()
    key = generate_key()
    vault = tmp_path / "agent.vault"
    with Vault.init(vault, key=key) as opened:
        VaultMemoryTool(opened, actor="support-bot").call(
            {"command": "create", "path": "/memories/n.txt", "file_text": "Prefers e-mail.\n"}
        )
    other = private_file(tmp_path / "other.key", generate_key())
    right = private_file(tmp_path / "agent.vault.key", key)
    env = fresh_env(home, VAULTMEM_KEY=key)
    config = (vault / "config").read_bytes()

    refused = vaultmem(env, "--vault", str(vault), "git-setup", "--key-file", str(other))
    assert refused.returncode == 2, refused
    assert f"the key file {other} does not open {vault}" in refused.stderr, refused.stderr
    assert "Nothing was set up." in refused.stderr and refused.stderr.count("\n") == 1
    assert (vault / "config").read_bytes() == config

    setup = vaultmem(env, "--vault", str(vault), "git-setup", "--key-file", str(right))
    assert setup.returncode == 0, setup
    assert "whoever has the key file" in setup.stdout and "or VAULTMEM_KEY;" in setup.stdout
    # The recorded key file alone decrypts: no variable set.
    assert "+Prefers e-mail." in git_log_p(vault, fresh_env(home))


def test_call_answers_a_bad_actor_or_session_as_the_tools_refusal_for_a_view_too(tmp_path: Path) -> None:
    """docs/cli.md: "`call` answers a bad `--actor` or `--session` as the tool's
    refusal, code 1", and `call` prints what Claude would see; a VaultMemoryTool
    with such a name is refused when made. A `view` with `--actor ''` (a script's
    unset variable) or `--actor 'a<b'` answered 0, so the mistake only showed at
    the first write."""
    home = tmp_path / "home"
    home.mkdir()
    key = generate_key()
    vault = tmp_path / "agent.vault"
    Vault.init(vault, key=key).close()
    env = fresh_env(home, VAULTMEM_KEY=key)
    view = '{"command": "view", "path": "/memories"}'
    for who, wrong in [("--actor", ""), ("--actor", "a<b"), ("--session", "a\tb")]:
        result = vaultmem(env, "--vault", str(vault), "call", who, wrong, view)
        assert result.returncode == 1, (who, wrong, result)
        assert result.stdout.startswith("Error: the " + who[2:]), result.stdout
        assert result.stderr == ""
    fine = vaultmem(env, "--vault", str(vault), "call", "--actor", "ops-alice", view)
    assert fine.returncode == 0 and fine.stdout.startswith("Here're the files"), fine
