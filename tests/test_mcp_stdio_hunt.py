"""``vaultmem mcp`` over stdio spoken to by hand: lines a client with a bug,
or an unusual one, may write.  Every server here is a real
``python -m vaultmem mcp`` process fed real lines on its standard input;
what the client would see is read from its standard output.
"""

from __future__ import annotations

import base64
import json
import os
import select
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import Served, stdio

from vaultmem.core.detectors import redact, scan

TIMEOUT = 60.0  # seconds: a bound on the server answering or exiting, never an expectation of speed
HELLO = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
OPENING = (
    json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": HELLO}) + "\n"
    '{"jsonrpc": "2.0", "method": "notifications/initialized"}\n'
)
PING = '{"jsonrpc": "2.0", "id": 99, "method": "ping"}\n'


@pytest.fixture
def served(tmp_path: Path) -> Served:
    return Served.make(tmp_path / "mcp")


def run(served: Served, lines: str | bytes) -> tuple[list[dict[str, Any]], subprocess.CompletedProcess[bytes]]:
    """The server run to its end on the opening and ``lines``: every message
    it wrote but the answer to ``initialize``, and the finished process."""
    data = OPENING.encode() + (lines.encode() if isinstance(lines, str) else lines)
    done = subprocess.run(
        served.command(),
        input=data,
        capture_output=True,
        env=served.env(),
        cwd=str(served.home),
        timeout=TIMEOUT,
        check=False,
    )
    found = [json.loads(line) for line in done.stdout.decode().splitlines()]
    opened = [m for m in found if m.get("id") == 0 and "protocolVersion" in m.get("result", {})]
    assert len(opened) == 1, done.stderr.decode()
    return [m for m in found if m not in opened], done


def call(ident: object, name: str, arguments: dict[str, Any]) -> str:
    request = {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    return json.dumps(request) + "\n"


# -- a line whose id is not JSON either -----------------------------------------------------

BROKEN_IDS = [
    pytest.param(b'{"jsonrpc": "2.0", "id": "a\\qb", "method": "ping"\n', id="escape-json-has-not"),
    pytest.param(b'{"jsonrpc": "2.0", "id": "\xff\xfe", "method": "ping"\n', id="not-utf-8"),
    pytest.param(b'{"jsonrpc": "2.0", "id": 01, "method": "ping"}\n', id="leading-zero"),
    pytest.param(b'{"jsonrpc": "2.0", "id": "ab\\u12", "method": "ping"}\n', id="short-unicode-escape"),
]


@pytest.mark.parametrize("line", BROKEN_IDS)
def test_a_line_whose_id_is_not_json_is_answered_and_the_server_goes_on(served: Served, line: bytes) -> None:
    """Such a line ended the whole server (an ExceptionGroup, exit 2, and a
    message to run `vaultmem verify`), its client cut off mid-session."""
    answers, done = run(served, line + PING.encode())
    assert done.returncode == 0, done.stderr.decode()
    assert [a["id"] for a in answers] == [None, 99]
    assert answers[0]["error"]["code"] == -32700
    assert answers[1]["result"] == {}
    assert b"unexpected" not in done.stderr and b"Traceback" not in done.stderr


def test_a_line_nested_too_deep_with_a_unicode_escape_is_answered(served: Served) -> None:
    """An escape such as ``\\ud800`` sends the line through the check for
    lone surrogates, whose JSON reader gives up on deep nesting: that ended
    the server."""
    nested = "[" * 100_000 + "]" * 100_000
    line = '{"jsonrpc": "2.0", "id": 5, "method": "ping", "params": {"x": "\\ud800", "y": ' + nested + "}}\n"
    answers, done = run(served, line + PING)
    assert done.returncode == 0, done.stderr.decode()
    assert [a["id"] for a in answers] == [5, 99]
    assert answers[0]["error"]["code"] == -32700


def test_text_that_is_not_utf8_is_refused_not_stored_changed(served: Served) -> None:
    """A client that writes Latin-1 (``café`` as the byte E9) had its text
    stored with U+FFFD in place of each bad byte, and was told "File created
    successfully".  The line is refused, with its id, and nothing is written."""
    line = call(7, "create", {"path": "/memories/menu.txt", "file_text": "cafe"}).encode().replace(b"cafe", b"caf\xe9")
    answers, done = run(served, line + PING.encode())
    assert done.returncode == 0, done.stderr.decode()
    assert [a["id"] for a in answers] == [7, 99]
    assert answers[0]["error"]["code"] == -32700 and "UTF-8" in answers[0]["error"]["message"]
    with served.open() as vault:
        assert list(vault.history()) == []


# -- requests whose id MCP does not allow ---------------------------------------------------------


@pytest.mark.parametrize(
    ("ident", "echoed"),
    [(None, None), (1.5, 1.5), (2.0, 2.0), (True, None), ({"n": 1}, None), ([3], None)],
    ids=["null", "fraction", "whole-float", "true", "object", "array"],
)
def test_a_request_whose_id_is_not_a_string_or_an_integer_is_answered_and_runs_nothing(
    served: Served, ident: object, echoed: object
) -> None:
    """The SDK read such a request as a notification and dropped it without
    a word: its client waited for an answer that never came.  It is now
    refused (-32600), with the id given back when it is a number, and the
    tool is not run."""
    answers, done = run(served, call(ident, "create", {"path": "/memories/a.txt", "file_text": "x"}) + PING)
    assert done.returncode == 0, done.stderr.decode()
    assert len(answers) == 2, answers
    refused, pong = answers
    assert refused["id"] == echoed and type(refused["id"]) is type(echoed)
    assert refused["error"]["code"] == -32600
    assert "string or an integer" in refused["error"]["message"]
    assert pong == {"jsonrpc": "2.0", "id": 99, "result": {}}
    with served.open() as vault:
        assert list(vault.history()) == []


def test_notifications_are_still_not_answered(served: Served) -> None:
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7, "reason": "x"}}
    progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "id", "progress": 1}}
    answers, done = run(served, json.dumps(cancel) + "\n" + json.dumps(progress) + "\n" + PING)
    assert done.returncode == 0
    assert answers == [{"jsonrpc": "2.0", "id": 99, "result": {}}]


# -- ids the server did not recognise in its own answers ---------------------------------------------


@pytest.mark.parametrize(
    "ident",
    [12_345_678_901_234_567_890, -(2**63), "r" * 300, 'quote " and \\ backslash ' * 20],
    ids=["20-digits", "int64-min", "300-characters", "escapes"],
)
def test_a_client_with_long_request_ids_sees_the_server_exit_at_once_when_its_input_ends(
    served: Served, ident: object
) -> None:
    """Every request was answered, but an id of 19 digits or more, or a
    string id over 256 characters, was not found again in its answer: at
    the end of the input the server waited 30 seconds for answers it had
    already given, then logged that requests went unanswered."""
    started = time.monotonic()
    answers, done = run(served, call(ident, "create", {"path": "/memories/a.txt", "file_text": "x\n"}))
    took = time.monotonic() - started
    assert done.returncode == 0
    assert [a["id"] for a in answers] == [ident]
    assert answers[0]["result"]["isError"] is False
    assert b"unanswered" not in done.stderr, done.stderr.decode()
    assert took < 20, f"the server took {took:.1f} s to exit after its input ended"


# -- the instructions of a read-only server -----------------------------------------------------------


def test_a_read_only_server_does_not_tell_the_model_to_record_its_progress(served: Served) -> None:
    """The instructions of a ``--read-only`` server told the model to record
    its progress in a memory that refuses every write: it spent its turns on
    writes refused one by one.  They now say it is there to read."""
    with stdio(served, "--read-only") as session:
        assert session.init is not None
        told = session.init.instructions or ""
        offered = {tool.name for tool in session.tools()}
    assert "record status" not in told and "ASSUME INTERRUPTION" not in told
    assert "read-only" in told and "writes nothing" in told
    for name in ("view", "history", "read_version", "diff"):
        assert f"`{name}`" in told and name in offered
    assert "rename or delete files" not in told  # the note on tidying up is for a memory it can change
    with stdio(served) as session:
        assert session.init is not None
        assert "record status" in (session.init.instructions or "")


# -- an output that takes no more ----------------------------------------------------------------


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_an_output_on_a_full_disk_is_one_clear_error(served: Served) -> None:
    """``vaultmem mcp < requests.jsonl > answers.jsonl`` with the disk full
    ended with "unexpected ExceptionGroup ... run `vaultmem verify`", as if
    the vault were damaged."""
    with open("/dev/full", "wb") as full:
        done = subprocess.run(
            served.command(),
            input=(OPENING + PING).encode(),
            stdout=full,
            stderr=subprocess.PIPE,
            env=served.env(),
            cwd=str(served.home),
            timeout=TIMEOUT,
            check=False,
        )
    said = done.stderr.decode()
    assert done.returncode == 2, said
    assert said == (
        "vaultmem: the answers could not be written to standard output (No space left on device); "
        "no request was read after that.\n"
    )


# -- the vault goes away under a running server ------------------------------------------------------


class Talk:
    """A server spoken to one request at a time over pipes."""

    def __init__(self, served: Served) -> None:
        self.process = subprocess.Popen(
            served.command(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=served.env(),
            cwd=str(served.home),
        )
        self.buffer = b""
        self.send(OPENING)
        assert self.answer()["id"] == 0

    def send(self, text: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(text.encode())
        self.process.stdin.flush()

    def answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        deadline = time.monotonic() + TIMEOUT
        while b"\n" not in self.buffer:
            ready, _, _ = select.select([self.process.stdout], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, "the server did not answer"
            chunk = os.read(self.process.stdout.fileno(), 65_536)
            assert chunk, "the server ended"
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        found: dict[str, Any] = json.loads(line)
        return found

    def tool(self, ident: int, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        self.send(call(ident, name, arguments))
        result = self.answer()["result"]
        return result["content"][0]["text"], result["isError"]

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def test_a_vault_moved_away_under_a_running_server_is_an_error_not_an_empty_memory(served: Served) -> None:
    """The vault folder moved (or deleted, or its disk unmounted) while a
    client is connected: the model was told its memory is empty ("does not
    exist", "No versions yet."), and would start over without it."""
    talk = Talk(served)
    try:
        assert talk.tool(1, "create", {"path": "/memories/notes.md", "file_text": "Prefers e-mail.\n"})[1] is False
        served.path.rename(served.path.with_name("moved.vault"))
        try:
            shown, failed = talk.tool(2, "view", {"path": "/memories/notes.md"})
            listed, _ = talk.tool(3, "history", {})
        finally:
            served.path.with_name("moved.vault").rename(served.path)
    finally:
        talk.close()
    assert listed != "No versions yet."
    assert failed and "does not exist" not in shown


# -- the secrets filter reads through every invisible character ----------------------------------------

ANTHROPIC_KEY = (
    "sk-ant-api03-"
    + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7dEf0hIj3kLm6nOp9qRs2tUv5wXy8zAb1dEf4hIj7kLm0nOp3qRs6tUv9wXy2zA-b"
)
CARD = "4111 1111 1111 1111"
IGNORABLE = {
    "variation-selector-16": "\ufe0f",
    "variation-selector-1": "\ufe00",
    "variation-selector-17": "\U000e0100",
    "combining-grapheme-joiner": "\u034f",
    "mongolian-free-variation-selector": "\u180b",
    "hangul-filler": "\u3164",
    "hangul-choseong-filler": "\u115f",
    "halfwidth-hangul-filler": "\uffa0",
    "khmer-inherent-vowel": "\u17b4",
}


@pytest.mark.parametrize("name", list(IGNORABLE))
def test_a_secret_with_an_invisible_character_that_is_not_a_format_character_is_found_whole(name: str) -> None:
    """Variation selectors and the other characters Unicode says to show as
    nothing, put inside a key or a card number, hid it from the filter
    (only format characters, such as a zero-width space, were skipped)."""
    hidden = IGNORABLE[name]
    for secret, kind in (
        (ANTHROPIC_KEY[:30] + hidden + ANTHROPIC_KEY[30:], "anthropic_api_key"),
        (CARD[:7] + hidden + CARD[7:], "card_number"),
    ):
        text = f"note: {secret} ok"
        assert [(m.kind, m.start, m.end) for m in scan(text)] == [(kind, 6, 6 + len(secret))]
        assert redact(text, scan(text)) == f"note: [REDACTED:{kind}] ok"


def test_ordinary_text_with_emoji_and_korean_is_not_flagged() -> None:
    text = "I \u2764\ufe0f this, \U0001f44d\U0001f3fd; \ud55c\uad6d\uc5b4 \u3164 \ud14d\uc2a4\ud2b8; "
    assert scan(text + "order 1234\ufe0f5678") == []


@pytest.mark.parametrize(
    "secret",
    [ANTHROPIC_KEY[:30] + "\u200b" + ANTHROPIC_KEY[30:], "\uff14\uff11\uff11\uff11 1111 1111 1111"],
    ids=["zero-width-space-in-a-key", "fullwidth-card"],
)
def test_a_disguised_secret_written_in_base64_is_found(secret: str) -> None:
    """Base64 was decoded and read as it was: a key with a zero-width space,
    or a card in fullwidth digits, found written plainly, was missed once
    base64-encoded."""
    run_of_base64 = base64.b64encode(secret.encode()).decode()
    text = f"blob: {run_of_base64} end"
    assert [(m.start, m.end) for m in scan(text)] == [(6, 6 + len(run_of_base64))]


def test_an_mcp_client_cannot_slip_a_key_past_the_filter_with_a_variation_selector(served: Served) -> None:
    with served.open() as vault:
        vault.set_policy(actor="operator", secrets="refuse")
    disguised = ANTHROPIC_KEY[:30] + "\ufe0f" + ANTHROPIC_KEY[30:]
    answers, done = run(
        served, call(4, "create", {"path": "/memories/keys.md", "file_text": f"the key: {disguised}\n"})
    )
    assert done.returncode == 0
    [refused] = answers
    assert refused["result"]["isError"] is True
    assert refused["result"]["content"][0]["text"].startswith(
        "Error: Nothing was written: the text contains an Anthropic API key."
    )
    with served.open() as vault:
        assert [v.command for v in vault.history()] == []
