"""The agent code shown in README.md and docs/agent.md runs as printed.

Each Python block is run unchanged in a fresh interpreter, with the real SDK
pointed at a local replay server through ``ANTHROPIC_BASE_URL`` (the SDK's own
setting) and the vault's key in ``VAULTMEM_KEY``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import commit_count, git

from vaultmem import Vault, generate_key
from vaultmem.testing.replay import ReplayServer, reply, text, tool_use

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def python_blocks(doc: Path) -> list[str]:
    return FENCE.findall(doc.read_text(encoding="utf-8"))


def run_block(code: str, cwd: Path, env_extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "VAULTMEM_"))}
    env.update(env_extra)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def integration_block(doc: Path) -> str:
    blocks = [
        b for b in python_blocks(doc) if "tool_runner(**request)" in b and "Vault.open" in b and "Replay" not in b
    ]
    assert len(blocks) == 1, f"{doc.name} should show the integration once"
    return blocks[0]


@pytest.mark.parametrize("doc", ["README.md", "docs/agent.md"])
def test_the_documented_integration_runs_as_printed(doc: str, tmp_path: Path) -> None:
    code = integration_block(ROOT / doc)
    assert len(code.strip().splitlines()) <= 10
    key = generate_key()
    Vault.init(tmp_path / "agent.vault", key=key).close()
    turns = [
        reply(text("Let me check my memory."), tool_use("view", path="/memories")),
        reply(tool_use("create", path="/memories/contact.md", file_text="e-mail only\n")),
        reply(text("I will only e-mail you from now on.")),
    ]
    with ReplayServer(turns) as server:
        result = run_block(
            code, tmp_path, {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "test", "VAULTMEM_KEY": key}
        )
        requests = server.requests
    assert result.returncode == 0, result.stderr
    assert "I will only e-mail you from now on." in result.stdout
    assert [r.refused for r in requests] == [None, None, None]
    first = requests[0].body
    assert first["tools"] == [{"type": "memory_20250818", "name": "memory"}]
    assert first["context_management"] == {"edits": [{"type": "clear_tool_uses_20250919", "exclude_tools": ["memory"]}]}
    assert "Only write down information relevant to customer support in your memory system." in first["system"]
    assert all("context-management-2025-06-27" in r.betas for r in requests)
    vault_path = tmp_path / "agent.vault"
    assert commit_count(vault_path) == 1
    assert git(vault_path, "log", "-1", "--format=%an %(trailers:key=Vaultmem-Session,valueonly)").split() == [
        "support-bot",
        "ticket-4411",
    ]
    with Vault.open(vault_path, key=key) as vault:
        assert vault.read("/memories/contact.md") == "e-mail only\n"


def test_the_replay_example_in_docs_agent_runs_as_printed(tmp_path: Path) -> None:
    blocks = [b for b in python_blocks(ROOT / "docs/agent.md") if "ReplayServer(turns)" in b]
    assert len(blocks) == 1
    key = generate_key()
    Vault.init(tmp_path / "agent.vault", key=key).close()
    # As printed: the block opens the vault itself (the one made in getting-started.md, key in VAULTMEM_KEY).
    result = run_block(blocks[0] + "print('ok')\n", tmp_path, {"VAULTMEM_KEY": key})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
    with Vault.open(tmp_path / "agent.vault", key=key) as vault:
        assert vault.read("/memories/prefs.md") == "e-mail only\n"
        assert [v.actor for v in vault.history()] == ["test"]
