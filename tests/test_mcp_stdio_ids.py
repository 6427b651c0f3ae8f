"""``vaultmem mcp`` over stdio with more than one request under way: ids a
client reuses, cancellations, and a write that waits for another process's
write to the vault.  Every server here is a real ``python -m vaultmem mcp``
process on pipes; the vault's writer lock is held, where a test needs it, by
a real ``flock`` on the vault's lock file, as another writer holds it.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import Served

TIMEOUT = 60.0  # seconds: a bound on the server answering, never an expectation of speed
HELLO = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
OPENING = (
    json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": HELLO}) + "\n"
    '{"jsonrpc": "2.0", "method": "notifications/initialized"}\n'
)


@pytest.fixture
def served(tmp_path: Path) -> Served:
    return Served.make(tmp_path / "mcp")


def call(ident: object, name: str, arguments: dict[str, Any]) -> str:
    request = {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    return json.dumps(request) + "\n"


def cancel(ident: object) -> str:
    return json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": ident}}) + "\n"


def server(served: Served) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        served.command(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=served.env(),
        cwd=str(served.home),
    )


def answers_until_exit(process: subprocess.Popen[bytes], within: float) -> tuple[list[dict[str, Any]], int | None]:
    """What the server writes until it exits or ``within`` seconds pass (the
    answer to ``initialize`` left out), and its exit status (None: still running)."""
    assert process.stdout is not None
    data, deadline = b"", time.monotonic() + within
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([process.stdout], [], [], left)
        if not ready:
            break
        chunk = os.read(process.stdout.fileno(), 65_536)
        if not chunk:
            break
        data += chunk
    try:
        status: int | None = process.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        status = None
    found = [json.loads(line) for line in data.decode().splitlines()]
    return [m for m in found if m.get("id") != 0], status


def run(served: Served, lines: str, within: float) -> tuple[list[dict[str, Any]], int | None, str]:
    """The server fed the opening and ``lines``, its input then closed."""
    process = server(served)
    try:
        assert process.stdin is not None and process.stderr is not None
        process.stdin.write((OPENING + lines).encode())
        process.stdin.close()
        answers, status = answers_until_exit(process, within)
        if status is None:
            process.kill()
            process.wait()
        return answers, status, process.stderr.read().decode()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


EDITED = "The memory file has been edited. Here is the snippet showing the change (with line numbers):"


def texts(answers: list[dict[str, Any]]) -> list[tuple[object, str]]:
    return [(a["id"], a["result"]["content"][0]["text"]) for a in answers]


# -- cancellations -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ident", "named"),
    [("07", 7), (7, "07"), (" 7", "+7"), ("7", 7), (7, 7), ("x", "x")],
    ids=[
        "zero-padded-cancelled-as-number",
        "number-cancelled-zero-padded",
        "space-and-plus",
        "string-and-number",
        "number",
        "string",
    ],
)
def test_a_cancelled_request_does_not_hold_the_server_when_its_input_ends(
    served: Served, ident: object, named: object
) -> None:
    """The SDK reads a string id that is an integer as that integer ("07",
    " 7" and "+7" are 7 to it), and a cancellation naming the request that
    way cancels it: it gets no answer.  The server still counted it as
    waiting for one, so when its client closed the input it waited 30
    seconds, then logged that requests were dropped.  It exits at once now."""
    started = time.monotonic()
    answers, status, log = run(served, call(ident, "history", {}) + cancel(named), TIMEOUT)
    assert status == 0, log
    assert time.monotonic() - started < 15.0, log  # the server waits 30 s for an answer it still counts as due
    assert "unanswered" not in log, log
    assert all(a["id"] == ident for a in answers), answers  # answered before the cancellation came, or not at all


def test_a_cancellation_for_a_request_already_answered_changes_nothing(served: Served) -> None:
    """A client's cancellation that crosses its request's answer is ignored,
    and the id serves again for the next request."""
    lines = (
        call(5, "create", {"path": "/memories/a.txt", "file_text": "a"})
        + cancel(5)
        + call(5, "view", {"path": "/memories/a.txt"})
        + call(6, "view", {"path": "/memories"})
    )
    answers, status, log = run(served, lines, TIMEOUT)
    assert status == 0, log
    assert [a["id"] for a in answers] == [5, 5, 6]
    assert (
        answers[1]["result"]["content"][0]["text"]
        == "Here's the content of /memories/a.txt with line numbers:\n     1\ta"
    )
    assert "unanswered" not in log


# -- ids a client reuses -----------------------------------------------------------------------------------


def test_requests_reusing_one_id_are_each_answered_in_turn(served: Served) -> None:
    """Over stdio the memory commands run one at a time in the order they
    were read, and each answer carries its own request's id as sent: a file
    of requests that gives them all one id (``vaultmem mcp < requests.jsonl``)
    gets each its own answer, in order, and ``1`` and ``"1"`` are not mixed up."""
    lines = (
        call(1, "create", {"path": "/memories/a.txt", "file_text": "one"})
        + call("1", "create", {"path": "/memories/b.txt", "file_text": "two"})
        + call(1, "str_replace", {"path": "/memories/a.txt", "old_str": "one", "new_str": "three"})
        + call(1, "view", {"path": "/memories/a.txt"})
    )
    answers, status, log = run(served, lines, TIMEOUT)
    assert status == 0, log
    assert texts(answers) == [
        (1, "File created successfully at: /memories/a.txt"),
        ("1", "File created successfully at: /memories/b.txt"),
        (1, EDITED + "\n     1\tthree"),
        (1, "Here's the content of /memories/a.txt with line numbers:\n     1\tthree"),
    ]
    with served.open() as vault:
        assert vault.read("/memories/a.txt") == "three" and vault.read("/memories/b.txt") == "two"
