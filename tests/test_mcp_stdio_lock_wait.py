"""``vaultmem mcp`` over stdio while another process holds the vault's writer
lock (an import, a re-encryption, a writer stopped with Ctrl-Z): a write
waits for it without holding up the server.  Every server is a real
``python -m vaultmem mcp`` process on pipes; the lock is held by a real
``flock`` on the vault's lock file, as another writer holds it.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import Served
from test_mcp_stdio_ids import OPENING, call, server

TIMEOUT = 60.0  # seconds: a bound on the server answering, never an expectation of speed
CREATED = "File created successfully at: /memories/a.txt"


@pytest.fixture
def served(tmp_path: Path) -> Served:
    return Served.make(tmp_path / "mcp")


def ping(ident: object) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": ident, "method": "ping"}) + "\n"


class Answers:
    """The answers a server process writes, read as they come."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        self.process = process
        self.fd = process.stdout.fileno()
        self.buffer = b""
        self.seen: list[dict[str, Any]] = []

    def until(self, ident: object, within: float = TIMEOUT) -> dict[str, Any]:
        """The answer to request ``ident``, reading everything before it."""
        deadline = time.monotonic() + within
        while True:
            for found in self.seen:
                if found.get("id") == ident:
                    return found
            left = deadline - time.monotonic()
            assert left > 0, f"no answer to {ident!r} within {within} s; answers: {self.ids()}"
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                chunk = os.read(self.fd, 65_536)
                assert chunk, f"the server ended before answering {ident!r}; answers: {self.ids()}"
                self.buffer += chunk
                *lines, self.buffer = self.buffer.split(b"\n")
                self.seen += [json.loads(line) for line in lines if line.strip()]

    def ids(self) -> list[object]:
        return [found.get("id") for found in self.seen]

    def text(self, ident: object) -> str:
        result = self.until(ident)["result"]
        text = result["content"][0]["text"]
        assert isinstance(text, str)
        return text


@contextmanager
def held_lock(served: Served) -> Iterator[Any]:
    """The vault's writer lock, held by this process until released."""
    holder = os.open(served.path / "vaultmem" / "lock", os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    state = {"held": True}

    def release() -> None:
        if state["held"]:
            fcntl.flock(holder, fcntl.LOCK_UN)
            state["held"] = False

    try:
        yield release
    finally:
        release()
        os.close(holder)


@contextmanager
def running(served: Served) -> Iterator[subprocess.Popen[bytes]]:
    process = server(served)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def send(process: subprocess.Popen[bytes], text: str) -> None:
    assert process.stdin is not None
    process.stdin.write(text.encode())
    process.stdin.flush()


def test_a_write_waiting_for_another_process_holds_up_no_other_request(served: Served) -> None:
    """Before, the write waited in the event loop's own thread: the server
    answered nothing else, not even a ping, until the other process let go.
    Now pings, the tool list and the audit tools are answered meanwhile, and
    the writes run in the order they came once the lock is free."""
    with held_lock(served) as release, running(served) as process:
        answers = Answers(process)
        send(process, OPENING)
        answers.until(0)
        send(process, call(1, "create", {"path": "/memories/a.txt", "file_text": "one\n"}))
        send(process, call(2, "str_replace", {"path": "/memories/a.txt", "old_str": "one", "new_str": "two"}))
        send(process, ping(3))
        send(process, json.dumps({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}) + "\n")
        send(process, call(5, "history", {"path": "/memories/a.txt"}))
        assert answers.until(3)["result"] == {}
        assert {tool["name"] for tool in answers.until(4)["result"]["tools"]} >= {"create", "history"}
        answers.until(5)
        assert 1 not in answers.ids() and 2 not in answers.ids()  # the writes still wait
        with served.open() as vault:
            assert list(vault.history()) == []
        release()
        assert answers.text(1) == CREATED
        assert answers.text(2).startswith("The memory file has been edited.")
        send(process, call(6, "view", {"path": "/memories/a.txt"}))
        assert "two" in answers.text(6)
    with served.open() as vault:
        assert [v.command for v in vault.history()] == ["str_replace", "create"]
        assert vault.read("/memories/a.txt") == "two\n"


def test_a_view_sent_after_a_waiting_write_sees_it(served: Served) -> None:
    """The memory tools keep the order they were sent in: a view sent after
    a write that waits for the lock waits for it too, and sees it."""
    with held_lock(served) as release, running(served) as process:
        answers = Answers(process)
        send(process, OPENING)
        answers.until(0)
        send(process, call(1, "create", {"path": "/memories/a.txt", "file_text": "one\n"}))
        send(process, call(2, "view", {"path": "/memories/a.txt"}))
        send(process, ping(3))
        answers.until(3)
        assert 1 not in answers.ids() and 2 not in answers.ids()
        release()
        assert answers.text(1) == CREATED
        assert "one" in answers.text(2)
        assert answers.ids().index(1) < answers.ids().index(2)


def test_ctrl_c_answers_the_waiting_writes_and_the_server_exits(served: Served) -> None:
    """Ctrl-C while writes wait for another process's lock: each is answered
    (nothing written) and the server exits 130 at once, the lock still held."""
    with held_lock(served), running(served) as process:
        answers = Answers(process)
        send(process, OPENING)
        answers.until(0)
        send(process, call(1, "create", {"path": "/memories/a.txt", "file_text": "a"}))
        send(process, call(2, "insert", {"path": "/memories/a.txt", "insert_line": 0, "insert_text": "b"}))
        send(process, ping(3))
        answers.until(3)
        process.send_signal(signal.SIGINT)
        stopping = (
            "Error: the memory server is stopping (Ctrl-C) while this command waited for another process's write "
            "to the vault to end; nothing was written."
        )
        for ident in (1, 2):
            result = answers.until(ident, within=10.0)["result"]
            assert result["isError"] is True
            assert result["content"][0]["text"] == stopping
        assert process.wait(10.0) == 130
        assert process.stderr is not None and b"Traceback" not in process.stderr.read()
    with served.open() as vault:
        assert list(vault.history()) == []
