"""``vaultmem mcp`` refuses what its command line gets wrong before it loads
the ``mcp`` package (a second or more of imports): a client set up with a
bad token, actor or port hears so at once, and nothing is made or served."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vaultmem import Vault, generate_key

PROBE = (
    "import sys\n"
    "from vaultmem.cli import app\n"
    "code = app.main(sys.argv[1:])\n"
    "print('exit', code, 'mcp-loaded', 'mcp' in sys.modules, file=sys.stderr)\n"
)
GOOD_TOKEN = "t" * 40


@pytest.fixture
def made(tmp_path: Path) -> tuple[Path, str]:
    key = generate_key()
    Vault.init(tmp_path / "v.vault", key=key).close()
    return tmp_path / "v.vault", key


def _run(made: tuple[Path, str], *args: str, **env: str) -> tuple[int, bool, list[str]]:
    vault, key = made
    environ = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "--vault", str(vault), "mcp", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        env={**environ, "VAULTMEM_KEY": key, **env},
        cwd=str(vault.parent),
    )
    *said, last = done.stderr.strip().splitlines()
    _, code, _, loaded = last.split()
    return int(code), loaded == "True", said


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (["--http", "--port", "1"], {"VAULTMEM_MCP_TOKEN": "too-short"}, "shorter than 32 characters"),
        (["--http", "--port", "1"], {"VAULTMEM_MCP_TOKEN": "two words " + "x" * 40}, "characters a bearer token"),
        (["--http", "--port", "1", "--token-file", GOOD_TOKEN], {}, "looks like the token itself"),
        (["--http", "--port", "1", "--request-timeout", "0"], {"VAULTMEM_MCP_TOKEN": GOOD_TOKEN}, "--request-timeout"),
        (["--http", "--port", "70000"], {"VAULTMEM_MCP_TOKEN": GOOD_TOKEN}, "--port must be"),
        (["--max-request-bytes", "0"], {}, "--max-request-bytes must be at least 1"),
        (["--actor", "ops\nVaultmem-Session: forged"], {}, "the actor"),
        (["--actor", ""], {}, "the actor"),
        (["--http", "--port", "1", "--actor", "<script>"], {"VAULTMEM_MCP_TOKEN": GOOD_TOKEN}, "the actor"),
    ],
    ids=[
        "short-token",
        "token-with-space",
        "token-as-file",
        "request-timeout",
        "port",
        "request-bytes",
        "actor-newline",
        "actor-empty",
        "actor-http",
    ],
)
def test_a_bad_option_is_refused_before_the_mcp_package_loads(
    made: tuple[Path, str], args: list[str], env: dict[str, str], words: str
) -> None:
    code, loaded, said = _run(made, *args, **env)
    assert code == 2, said
    assert len(said) == 1 and words in said[0], said
    assert said[0].startswith("vaultmem: "), said
    assert not loaded


def test_a_bad_token_file_makes_no_file_and_loads_nothing(made: tuple[Path, str], tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("short\n", encoding="utf-8")
    token_file.chmod(0o600)
    code, loaded, said = _run(made, "--http", "--port", "1", "--token-file", str(token_file))
    assert code == 2 and len(said) == 1 and "shorter than 32 characters" in said[0], said
    assert not loaded
    assert not (made[0] / "vaultmem" / "mcp-token").exists()


def test_good_options_still_serve(made: tuple[Path, str]) -> None:
    """The stdio server reads its (empty) input and ends: the package loads."""
    code, loaded, said = _run(made)
    assert code == 0, said
    assert loaded
