"""The client setups docs/mcp.md gives, run as written: the command Claude
Code is told to start, and the server Claude Desktop's JSON block names,
each reached by the official MCP client over stdio.  Also a request the SDK
cannot parse (text that is not Unicode) gets an answer instead of silence."""

from __future__ import annotations

import asyncio
import json
import os
import re
import select
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import Implementation

from vaultmem import Vault, generate_key

DOC = Path(__file__).resolve().parent.parent / "docs" / "mcp.md"
TIMEOUT = 60


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


@pytest.fixture
def keyed_vault(tmp_path: Path) -> tuple[Path, Path]:
    """A vault and its key file (mode 0600), as the doc's install block makes them."""
    key_file = tmp_path / "agent.vault.key"
    key_file.write_text(generate_key() + "\n")
    key_file.chmod(0o600)
    Vault.init(tmp_path / "agent.vault", key_file=key_file).close()
    return tmp_path / "agent.vault", key_file


def server_env(home: Path) -> dict[str, str]:
    """What a client gives the server: no key in the environment, a home of its own."""
    return {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8"}


async def use(command: str, args: list[str], env: dict[str, str]) -> tuple[list[str], str, str]:
    """Start the server as a client would; the tools it lists, a write's result, and the history."""
    params = StdioServerParameters(command=command, args=args, env=env)
    client = Implementation(name="claude-code", version="1")
    async with stdio_client(params) as (read, write), ClientSession(read, write, client_info=client) as s:
        await s.initialize()
        tools = [t.name for t in (await s.list_tools()).tools]
        wrote = await s.call_tool("create", {"path": "/memories/setup.md", "file_text": "set up\n"})
        history = await s.call_tool("history", {})
        assert not wrote.is_error and not history.is_error
        return tools, wrote.content[0].text, history.content[0].text  # type: ignore[union-attr]


def vaultmem_program() -> str:
    found = shutil.which("vaultmem")
    assert found is not None, "the vaultmem command is not installed on PATH"
    return found


def test_the_claude_code_command_starts_a_working_server(keyed_vault: tuple[Path, Path], tmp_path: Path) -> None:
    vault, key_file = keyed_vault
    line = next(b for b in blocks("text") if b.startswith("claude mcp add vaultmem -- ")).strip()
    command = shlex.split(line.split(" -- ", 1)[1].replace("~/agent.vault", str(vault.parent / "agent.vault")))
    assert command[:2] == ["vaultmem", "mcp"] and str(key_file) in command
    tools, wrote, history = asyncio.run(
        asyncio.wait_for(use(vaultmem_program(), command[1:], server_env(tmp_path)), TIMEOUT)
    )
    assert tools == ["view", "create", "str_replace", "insert", "delete", "rename", "history", "read_version", "diff"]
    assert wrote == "File created successfully at: /memories/setup.md"
    assert re.search(r"  claude  mcp-claude-code-[0-9a-f]{12}  create /memories/setup\.md$", history)


def test_the_claude_desktop_block_starts_a_working_server(keyed_vault: tuple[Path, Path], tmp_path: Path) -> None:
    vault, key_file = keyed_vault
    config = json.loads(next(b for b in blocks("json") if '"mcpServers"' in b))
    entry = config["mcpServers"]["vaultmem"]
    assert Path(entry["command"]).name == "vaultmem"  # a full path, as Claude Desktop needs
    args = [
        a.replace("/Users/ada/agent.vault.key", str(key_file)).replace("/Users/ada/agent.vault", str(vault))
        for a in entry["args"]
    ]
    assert args[0] == "mcp" and str(vault) in args and str(key_file) in args
    env = {**server_env(tmp_path), **entry.get("env", {})}
    tools, wrote, _ = asyncio.run(asyncio.wait_for(use(vaultmem_program(), args, env), TIMEOUT))
    assert "create" in tools and wrote == "File created successfully at: /memories/setup.md"


class RawServer:
    """`vaultmem mcp` over stdio, spoken to line by line, initialized."""

    def __init__(self, vault: Path, key_file: Path, tmp_path: Path) -> None:
        self.process = subprocess.Popen(
            [vaultmem_program(), "mcp", "--vault", str(vault), "--key-file", str(key_file)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=server_env(tmp_path),
        )
        hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
        self.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}))
        assert self.answer()["id"] == 1
        self.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))

    def send(self, text: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(text.encode() + b"\n")
        self.process.stdin.flush()

    def answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], TIMEOUT)
        assert ready, "the server did not answer"
        answer: dict[str, Any] = json.loads(self.process.stdout.readline())
        return answer

    def view_root(self, ident: int) -> str:
        call = {"name": "view", "arguments": {"path": "/memories"}}
        self.send(json.dumps({"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": call}))
        listed = self.answer()
        assert listed["id"] == ident
        text: str = listed["result"]["content"][0]["text"]
        return text

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def raw_server(keyed_vault: tuple[Path, Path], tmp_path: Path) -> Iterator[RawServer]:
    server = RawServer(*keyed_vault, tmp_path)
    try:
        yield server
    finally:
        server.stop()


def test_text_that_is_not_unicode_is_answered_and_the_server_goes_on(raw_server: RawServer) -> None:
    arguments = '{"path": "/memories/a\\ud800.txt", "file_text": "x"}'  # a lone surrogate, escaped
    call = '{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "create", "arguments": '
    raw_server.send(call + arguments + "}}")
    refused = raw_server.answer()
    assert refused["id"] == 2 and "not Unicode" in refused["error"]["message"]
    assert "0B\t/memories" in raw_server.view_root(3)


UNREADABLE = [
    pytest.param(
        '{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "view", "arguments": {"path": '
        + "[" * 100_000
        + "]" * 100_000
        + "}}}",
        4,
        -32700,
        id="nested-too-deep",
    ),
    pytest.param(
        '{"jsonrpc": "2.0", "id": "five", "method": "tools/call", "params": {"name": "insert", "arguments": '
        '{"path": "/memories/a.txt", "insert_line": ' + "9" * 5000 + ', "insert_text": "x"}}}',
        "five",
        -32700,
        id="number-too-long",
    ),
    pytest.param('{"jsonrpc": "2.0", "method": "tools/call", "params": {}, "id": 6', 6, -32700, id="cut-short"),
    pytest.param('[{"jsonrpc": "2.0", "id": 7, "method": "ping"}]', 7, -32600, id="batch"),
    pytest.param('{"jsonrpc": "2.0", "id": 8, "method": 42}', 8, -32600, id="method-not-a-string"),
    pytest.param("hello", None, -32700, id="not-json"),
]


@pytest.mark.parametrize(("line", "ident", "code"), UNREADABLE)
def test_a_message_the_sdk_cannot_read_is_answered_and_the_server_goes_on(
    raw_server: RawServer, keyed_vault: tuple[Path, Path], line: str, ident: object, code: int
) -> None:
    """The SDK drops a message it cannot validate without a word, and a
    client waiting for that request's answer would wait until it gave up:
    the server answers it with a JSON-RPC error carrying the id it could
    find, and serves the next request."""
    raw_server.send(line)
    refused = raw_server.answer()
    assert refused["id"] == ident and refused["error"]["code"] == code
    message = refused["error"]["message"]
    assert message.startswith("Error: ") and message.endswith("nothing was changed.") and len(message) < 300
    assert "0B\t/memories" in raw_server.view_root(9)
    raw_server.stop()
    vault, key_file = keyed_vault
    with Vault.open(vault, key_file=key_file) as opened:
        assert list(opened.history()) == []
