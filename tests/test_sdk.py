"""The vault inside the real Anthropic SDK tool runner, against a local server
that plays Claude's side of the Messages API with recorded turns."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import pytest
from anthropic.types.beta import BetaMemoryTool20250818CreateCommand, BetaMemoryTool20250818ViewCommand
from conftest import commit_count

from vaultmem import AsyncVaultMemoryTool, Vault, VaultMemoryTool

MODEL = "claude-sonnet-4-6"
BETA = "context-management-2025-06-27"
MEMORY_TOOL = {"type": "memory_20250818", "name": "memory"}


def tool_use(n: int, **params: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{n:02d}", "name": "memory", "input": params}


def assistant(n: int, *blocks: dict[str, Any], stop: str = "tool_use") -> dict[str, Any]:
    return {
        "id": f"msg_{n:02d}",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": list(blocks),
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 20},
    }


# What Claude does in the recorded session, turn by turn.
TURNS = [
    assistant(
        1,
        {"type": "text", "text": "Let me check my memory first."},
        tool_use(1, command="view", path="/memories"),
    ),
    assistant(
        2,
        tool_use(2, command="create", path="/memories/prefs.txt", file_text="likes: tea\nname: Ada\n"),
        tool_use(3, command="str_replace", path="/memories/prefs.txt", old_str="tea", new_str="coffee"),
    ),
    assistant(
        3,
        tool_use(4, command="create", path="/memories/prefs.txt", file_text="clobber"),
        tool_use(5, command="view", path="/memories/prefs.txt"),
    ),
    assistant(4, {"type": "text", "text": "I will remember that you like coffee."}, stop="end_turn"),
]

# The tool results the runner must send back, keyed by tool_use id: (content, is_error).
EXPECTED_RESULTS = {
    "toolu_01": (
        "Here're the files and directories up to 2 levels deep in /memories, excluding hidden items and "
        "node_modules:\n0B\t/memories",
        False,
    ),
    "toolu_02": ("File created successfully at: /memories/prefs.txt", False),
    "toolu_03": (
        "The memory file has been edited. Here is the snippet showing the change (with line numbers):\n"
        "     1\tlikes: coffee\n     2\tname: Ada",
        False,
    ),
    "toolu_04": ("Error: File /memories/prefs.txt already exists", True),
    "toolu_05": (
        "Here's the content of /memories/prefs.txt with line numbers:\n     1\tlikes: coffee\n     2\tname: Ada",
        False,
    ),
}


class FakeClaude:
    """A bounded HTTP server: answers POST /v1/messages with the next recorded turn."""

    def __init__(self, turns: list[dict[str, Any]]) -> None:
        self.turns = list(turns)
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake._lock:
                    fake.requests.append({"path": self.path, "headers": dict(self.headers.items()), "body": body})
                    turn = fake.turns.pop(0) if fake.turns else None
                if turn is None:
                    status, payload = (
                        400,
                        {
                            "type": "error",
                            "error": {"type": "invalid_request_error", "message": "the recorded session is over"},
                        },
                    )
                else:
                    status, payload = 200, turn
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def tool_results(self) -> dict[str, tuple[Any, bool]]:
        """Every tool_result the runner sent, by tool_use id."""
        out: dict[str, tuple[Any, bool]] = {}
        for request in self.requests:
            last = request["body"]["messages"][-1]
            if last["role"] != "user" or isinstance(last["content"], str):
                continue
            for block in last["content"]:
                if block.get("type") == "tool_result":
                    out[block["tool_use_id"]] = (block.get("content"), bool(block.get("is_error", False)))
        return out


@pytest.fixture
def fake_claude() -> Iterator[FakeClaude]:
    server = FakeClaude(TURNS)
    yield server
    server.close()


def request_args(**extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "Remember that I like coffee, not tea."}],
        "betas": [BETA],
        **extra,
    }


def assert_session_recorded(fake: FakeClaude, vault: Vault, session: str | None, final: Any) -> None:
    assert len(fake.requests) == len(TURNS)
    assert fake.turns == []
    # The first request declares the tool; with a server-side thread later ones may leave it out.
    assert fake.requests[0]["body"]["tools"] == [MEMORY_TOOL]
    for request in fake.requests:
        assert request["path"].startswith("/v1/messages")
        assert request["body"].get("tools", [MEMORY_TOOL]) == [MEMORY_TOOL]
        assert BETA in request["headers"].get("anthropic-beta", "").split(",")
        assert request["body"]["model"] == MODEL
    assert fake.tool_results() == EXPECTED_RESULTS
    assert final.content[0].text == "I will remember that you like coffee."
    assert final.stop_reason == "end_turn"

    assert vault.read("/memories/prefs.txt") == "likes: coffee\nname: Ada\n"
    assert commit_count(vault.path) == 2  # create, str_replace; the failed create and the views add none
    history = vault.history()
    assert [(v.command, v.paths) for v in history] == [
        ("str_replace", ("/memories/prefs.txt",)),
        ("create", ("/memories/prefs.txt",)),
    ]
    assert {(v.actor, v.session) for v in history} == {("support-bot", session)}


def test_sync_tool_runner_drives_the_vault(fake_claude: FakeClaude, vault: Vault) -> None:
    tool = VaultMemoryTool(vault, actor="support-bot", session="sess-sdk")
    assert tool.name == "memory"
    assert tool.to_dict() == MEMORY_TOOL
    client = anthropic.Anthropic(base_url=fake_claude.url, api_key="test", max_retries=0)
    runner = client.beta.messages.tool_runner(tools=[tool], **request_args(thread=False))
    final = runner.until_done()
    assert_session_recorded(fake_claude, vault, "sess-sdk", final)
    # Without a server-side thread every request resends the tool and the whole conversation.
    assert all(r["body"]["tools"] == [MEMORY_TOOL] for r in fake_claude.requests)
    last = fake_claude.requests[-1]["body"]["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "user", "assistant", "user", "assistant", "user"]
    assert last[1]["content"][1]["input"] == {"command": "view", "path": "/memories"}


def test_sync_tool_runner_yields_each_assistant_turn(fake_claude: FakeClaude, vault: Vault) -> None:
    tool = VaultMemoryTool(vault, actor="support-bot")
    client = anthropic.Anthropic(base_url=fake_claude.url, api_key="test", max_retries=0)
    seen = [message.id for message in client.beta.messages.tool_runner(tools=[tool], **request_args())]
    assert seen == ["msg_01", "msg_02", "msg_03", "msg_04"]
    # Without a session name the tool makes one up, and records it on every commit.
    assert tool.session
    assert {v.session for v in vault.history()} == {tool.session}
    assert fake_claude.tool_results() == EXPECTED_RESULTS


def test_async_tool_runner_drives_the_vault(fake_claude: FakeClaude, vault: Vault) -> None:
    tool = AsyncVaultMemoryTool(vault, actor="support-bot", session="sess-async")
    assert tool.to_dict() == MEMORY_TOOL

    async def main() -> Any:
        client = anthropic.AsyncAnthropic(base_url=fake_claude.url, api_key="test", max_retries=0)
        runner = client.beta.messages.tool_runner(tools=[tool], **request_args())
        return await runner.until_done()

    final = asyncio.run(main())
    assert_session_recorded(fake_claude, vault, "sess-async", final)


def test_sdk_typed_commands_reach_the_vault(vault: Vault) -> None:
    """The SDK's own dispatch path (BetaAbstractMemoryTool.execute with typed commands) works too."""
    tool = VaultMemoryTool(vault, actor="support-bot", session="typed")
    created = tool.execute(
        BetaMemoryTool20250818CreateCommand(command="create", path="/memories/t.txt", file_text="typed\n")
    )
    assert created == "File created successfully at: /memories/t.txt"
    viewed = tool.execute(BetaMemoryTool20250818ViewCommand(command="view", path="/memories/t.txt"))
    assert viewed == "Here's the content of /memories/t.txt with line numbers:\n     1\ttyped"
    assert commit_count(vault.path) == 1
