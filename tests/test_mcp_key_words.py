"""`vaultmem mcp` refused for want of a key names only the ways it takes
one: it speaks MCP on standard input, so it never reads a passphrase there
(`--passphrase` is refused), and its messages must not suggest it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vaultmem import Vault, generate_key

PASSPHRASE = "correct horse battery staple"


def _mcp(folder: Path, vault: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
    environ.update(env)
    return subprocess.run(
        [sys.executable, "-m", "vaultmem", "mcp", "--vault", vault],
        cwd=folder,
        env=environ,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _offers_piped_passphrase(line: str) -> bool:
    return "--passphrase" in line.replace("--passphrase-file", "")


@pytest.mark.parametrize(
    ("vault", "env", "said"),
    [
        ("k.vault", {"VAULTMEM_KEY": PASSPHRASE}, "If it is a passphrase, use --passphrase-file FILE or"),
        ("folder", {}, "no key given: set VAULTMEM_KEY or VAULTMEM_PASSPHRASE, or use --key-file FILE"),
    ],
    ids=["passphrase-in-the-key-variable", "protection-unknown"],
)
def test_a_refused_mcp_start_offers_no_passphrase_on_standard_input(
    tmp_path: Path, vault: str, env: dict[str, str], said: str
) -> None:
    Vault.init(tmp_path / "k.vault", key=generate_key()).close()
    (tmp_path / "folder").mkdir()
    done = _mcp(tmp_path, vault, **env)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert said in line, line
    assert not _offers_piped_passphrase(line), line
    assert "VAULTMEM_PASSPHRASE" in line and "--passphrase-file FILE" in line


def test_the_other_commands_still_offer_a_piped_passphrase(tmp_path: Path) -> None:
    Vault.init(tmp_path / "k.vault", key=generate_key()).close()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
    done = subprocess.run(
        [sys.executable, "-m", "vaultmem", "--vault", "k.vault", "ls"],
        cwd=tmp_path,
        env={**environ, "VAULTMEM_KEY": PASSPHRASE},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "use --passphrase-file FILE, --passphrase or VAULTMEM_PASSPHRASE" in done.stderr
