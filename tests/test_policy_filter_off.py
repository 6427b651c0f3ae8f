"""`personal_data` and `patterns` add to the secrets filter: with `secrets`
off nothing is scanned, so `vaultmem policy set` says so rather than leave a
filter that was asked for silently off (docs/policies.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from vaultmem import Vault, VaultMemoryTool, generate_key


def run(vault: Path, key: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}, "VAULTMEM_KEY": key}
    return subprocess.run(
        [sys.executable, "-m", "vaultmem", "--vault", str(vault), *args], capture_output=True, text=True, env=env
    )


def test_personal_data_without_secrets_is_said_to_do_nothing(tmp_path: Path) -> None:
    key = generate_key()
    Vault.init(tmp_path / "v", key=key).close()
    result = run(tmp_path / "v", key, "policy", "set", "personal_data=true", "--actor", "ops")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "personal_data: false -> true\n"
    assert result.stderr == (
        "Note: personal_data takes effect only while secrets is redact or refuse; secrets is off, so nothing "
        "written is scanned. Set secrets=redact or secrets=refuse to use them.\n"
    )
    # what the note says: a phone number is stored as written
    with Vault.open(tmp_path / "v", key=key) as vault:
        tool = VaultMemoryTool(vault, actor="a")
        tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "call +44 20 7946 0958\n"})
        assert vault.read("/memories/a.txt") == "call +44 20 7946 0958\n"
    result = run(tmp_path / "v", key, "policy", "set", 'patterns={"ticket": "TK-[0-9]{6}"}', "--actor", "ops")
    assert "Note: personal_data and patterns take effect only while secrets is" in result.stderr
    result = run(tmp_path / "v", key, "policy", "set", "secrets=redact", "--actor", "ops")
    assert result.returncode == 0 and result.stderr == "", result.stderr
