"""Ctrl-C in ``vaultmem chat`` ends the chat even when the code it lands in
swallows it.

Ctrl-C raises ``KeyboardInterrupt`` wherever the main thread happens to be.
Code that catches it there and goes on (a finalizer, an HTTP client's event
hook, any library's ``except BaseException: pass``) used to lose it: the chat
carried on, ran the memory calls of the reply it was waiting for and sat at
the next prompt, so a person who pressed Ctrl-C once saw nothing happen and a
script waiting for the chat to end waited forever.  Once pressed, Ctrl-C now
ends the chat at the next safe point: before any further memory call, or
when the reply is in."""

from __future__ import annotations

import io
import signal
import threading
from typing import Any

import anthropic
import httpx2
import pytest
from conftest import commit_count

from vaultmem import Vault, VaultMemoryTool
from vaultmem.cli import chat
from vaultmem.testing.replay import ReplayServer, reply, text, tool_use

pytestmark = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="Ctrl-C is handled in the main thread"
)


class Lines:
    """``read_line`` for chat.run: the given lines, then EOFError."""

    def __init__(self, *lines: str) -> None:
        self.lines = list(lines)
        self.asked = 0

    def __call__(self, prompt: str) -> str:
        self.asked += 1
        if not self.lines:
            raise EOFError
        return self.lines.pop(0)


def _swallowing_client(url: str, pressed: list[int]) -> anthropic.Anthropic:
    """The SDK's client, whose HTTP client hears Ctrl-C while the reply's
    headers arrive, in code that catches the interrupt and goes on."""

    def swallow(response: Any) -> None:
        if pressed:  # pressed once
            return
        try:
            pressed.append(1)
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass  # what a finalizer or a careless library does with it

    http = httpx2.Client(base_url=url, event_hooks={"response": [swallow]})
    return anthropic.Anthropic(base_url=url, api_key="test", max_retries=0, http_client=http)


def _chat(memory: VaultMemoryTool, client: anthropic.Anthropic, lines: Lines) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = chat.run(memory, model="claude-test", max_tokens=1024, read_line=lines, out=out, err=err, client=client)
    return code, out.getvalue(), err.getvalue()


def test_a_swallowed_ctrl_c_still_stops_the_memory_calls_of_the_reply_and_ends_the_chat(
    vault: Vault, vault_path: Any
) -> None:
    calls = [tool_use("create", path=f"/memories/n{i}.txt", file_text="x\n") for i in range(3)]
    pressed: list[int] = []
    lines = Lines("write three notes", "and another line the user never sends")
    with ReplayServer([reply(text("Writing."), *calls), reply(text("Done."))]) as server:
        code, out, err = _chat(VaultMemoryTool(vault), _swallowing_client(server.url, pressed), lines)
        sent = len(server.requests)
    assert pressed == [1]
    assert code == 130, (out, err)
    assert "vaultmem: interrupted" in err
    assert "vaultmem log --session" in err.split("vaultmem: interrupted")[-1]
    assert commit_count(vault_path) == 0  # not one of the reply's memory calls ran
    assert sent == 1  # nothing was sent back to Claude
    assert lines.lines == ["and another line the user never sends"]  # no further prompt


def test_a_swallowed_ctrl_c_during_a_text_reply_ends_the_chat_when_the_reply_is_in(
    vault: Vault, vault_path: Any
) -> None:
    pressed: list[int] = []
    lines = Lines("hello", "a second line")
    with ReplayServer([reply(text("Hello there.")), reply(text("Again."))]) as server:
        code, out, err = _chat(VaultMemoryTool(vault), _swallowing_client(server.url, pressed), lines)
        sent = len(server.requests)
    assert code == 130, (out, err)
    assert "claude> Hello there." in out  # the reply that was already coming is shown
    assert "vaultmem: interrupted" in err
    assert sent == 1
    assert lines.lines == ["a second line"]


def test_ctrl_c_not_swallowed_still_ends_the_chat_at_once(vault: Vault, vault_path: Any) -> None:
    """The plain case stays as it was: the interrupt leaves the wait at once."""
    pressed: list[int] = []

    def press(response: Any) -> None:
        if pressed:
            return
        pressed.append(1)
        signal.raise_signal(signal.SIGINT)

    lines = Lines("hello", "a second line")
    with ReplayServer([reply(text("Hello there.")), reply(text("Again."))]) as server:
        http = httpx2.Client(base_url=server.url, event_hooks={"response": [press]})
        client = anthropic.Anthropic(base_url=server.url, api_key="test", max_retries=0, http_client=http)
        code, out, err = _chat(VaultMemoryTool(vault), client, lines)
    assert pressed == [1]
    assert code == 130, (out, err)
    assert "claude>" not in out  # left before the reply was read
    assert "vaultmem: interrupted" in err
    assert lines.lines == ["a second line"]
