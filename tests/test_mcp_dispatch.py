"""How ``vaultmem mcp`` runs a tool call (vaultmem/mcp/server.py, ``_Server``):
straight to :meth:`MemoryServer.call` with the arguments as the client sent
them, the memory commands in the event loop's own thread over stdio (one
client: a thread switch there and back only adds latency), the audit tools
(a history may be long) and every tool over HTTP (many clients) in a worker
thread.  Driven in-process by the official client, ``mcp.Client``, which
runs the server in the test's own event loop and thread."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_helpers import Result, reference, result_of

from vaultmem import Vault, VaultMemoryTool
from vaultmem.mcp.server import MemoryServer

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("create", {"path": "/memories/notes.txt", "file_text": "one\ntwo\n"}),
    ("view", {"path": "/memories/notes.txt"}),
    ("str_replace", {"path": "/memories/notes.txt", "old_str": "two", "new_str": "three"}),
    ("view", {"path": "/memories/notes.txt", "view_range": "1-2"}),  # the memory command's own error
    ("history", {"path": "/memories/notes.txt"}),
]


def served(vault: Vault, inline: bool) -> tuple[list[tuple[str, str, bool]], list[Result]]:
    """Run CALLS through a server built with ``inline``: which thread ran each
    call (the test's own, or another), and each result's text and error flag."""
    memory = MemoryServer(vault, actor="claude")
    ran: list[tuple[str, str, bool]] = []
    real = memory.call

    def spy(name: str, arguments: object, ctx: Any) -> Any:
        ran.append((name, threading.current_thread().name, threading.current_thread() is caller))
        return real(name, arguments, ctx)

    memory.call = spy  # type: ignore[method-assign]
    caller = threading.current_thread()
    results: list[Result] = []

    async def main() -> None:
        async with Client(memory.build(inline=inline)) as client:
            for name, arguments in CALLS:
                results.append(result_of(await client.call_tool(name, arguments)))

    anyio.run(main)
    return ran, results


def test_over_stdio_the_memory_commands_run_in_the_loops_thread_and_the_audit_tools_do_not(vault: Vault) -> None:
    ran, results = served(vault, inline=True)
    assert [name for name, _, _ in ran] == [name for name, _ in CALLS]
    assert [here for _, _, here in ran] == [True, True, True, True, False]
    assert results[0] == Result("File created successfully at: /memories/notes.txt", False)
    assert results[3].is_error and results[3].text.startswith("Error:")
    assert not results[4].is_error and "str_replace" in results[4].text


def test_without_inline_every_tool_runs_in_a_worker_thread_with_the_same_results(
    vault: Vault, tmp_path: Any, key: str
) -> None:
    ran, results = served(vault, inline=False)
    assert [here for _, _, here in ran] == [False] * len(CALLS)
    other = Vault.init(tmp_path / "other", key=key)
    _, same = served(other, inline=True)
    assert same[:4] == results[:4]


@pytest.mark.parametrize("inline", [True, False])
def test_results_are_the_memory_tools_own(vault: Vault, tmp_path: Any, key: str, inline: bool) -> None:
    _, results = served(vault, inline=inline)
    tool = VaultMemoryTool(Vault.init(tmp_path / "reference", key=key), actor="claude")
    assert results[:4] == [reference(tool, {"command": name, **arguments}) for name, arguments in CALLS[:4]]
