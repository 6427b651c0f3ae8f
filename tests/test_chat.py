"""`vaultmem chat`: the chat loop against a local stand-in for Claude.

Claude is the only fake: a :class:`~vaultmem.replay.ReplayServer` on 127.0.0.1
plays recorded turns, reached by the real SDK client (``ANTHROPIC_BASE_URL``
for the command, ``base_url=`` in-process).  The tool runner, the memory tool,
the vault and its commits are real.  The spinner is checked on a real
pseudo-terminal and on a pipe.
"""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import anthropic
import pytest
from conftest import commit_count, local_http

from vaultmem import MEMORY_BETA, Vault, VaultMemoryTool, generate_key
from vaultmem.cli import chat
from vaultmem.cli.app import main
from vaultmem.cli.progress import SPINNER_FRAMES, Spinner
from vaultmem.testing.replay import ReplayServer, Request, reply, text, tool_use

MEMORY_TOOL = {"type": "memory_20250818", "name": "memory"}
MODEL = "claude-sonnet-4-6"  # in-process runs; the command's own default is checked as claude-sonnet-5-5
NOTE = "/memories/customers/ada.txt"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith(("VAULTMEM_", "ANTHROPIC_")):
            monkeypatch.delenv(name)
    return monkeypatch


def _texts(request: Request) -> list[tuple[str, str]]:
    """(role, text) for each message of a request's whole conversation; tool calls
    and results as ``tool_use:<command>`` / ``tool_result:<first line>``."""
    assert request.conversation is not None
    shown = []
    for message in request.conversation.messages:
        content = message["content"]
        blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for block in blocks:
            if block["type"] == "text":
                shown.append((message["role"], block["text"]))
            elif block["type"] == "tool_use":
                shown.append((message["role"], f"tool_use:{block['input']['command']}"))
            elif block["type"] == "tool_result":
                body = block.get("content")
                body = body if isinstance(body, str) else "".join(part.get("text", "") for part in body or [])
                shown.append((message["role"], f"tool_result:{body.split(chr(10))[0]}"))
    return shown


# -- without an API key ---------------------------------------------------------------


def test_chat_without_an_api_key_explains_where_to_get_one(
    vault: Vault, vault_path: Path, call: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    call(command="create", path="/memories/a.txt", file_text="a\n")
    before = commit_count(vault_path)
    # No VAULTMEM_KEY either: the explanation comes before any vault key is needed.
    code = main(["--vault", str(vault_path), "chat"])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert "ANTHROPIC_API_KEY" in err
    assert "console.anthropic.com" in err
    assert "vaultmem demo" in err
    assert err == chat.NO_KEY + "\n"
    assert "no key given" not in err
    assert commit_count(vault_path) == before


def test_a_blank_api_key_counts_as_none(
    vault_path: Path, vault: Vault, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clean_env.setenv("ANTHROPIC_API_KEY", "   ")
    assert not chat.has_api_key()
    assert main(["--vault", str(vault_path), "chat"]) == 2
    assert "console.anthropic.com" in capsys.readouterr().err


# -- the command as a real process ------------------------------------------------------


@dataclass
class Session:
    code: int
    out: str
    err: str
    requests: list[Request]
    remaining: int


def _chat_process(vault_path: Path, key: str, server: ReplayServer, stdin: str, *args: str) -> Session:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VAULTMEM_", "ANTHROPIC_"))}
    env.update(ANTHROPIC_API_KEY="test", ANTHROPIC_BASE_URL=server.url, VAULTMEM_KEY=key)
    result = subprocess.run(
        [sys.executable, "-m", "vaultmem", "--vault", str(vault_path), "chat", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    return Session(result.returncode, result.stdout, result.stderr, server.requests, 0)


FIRST = "Please remember that Ada prefers e-mail, mornings."
SECOND = "How should I contact Ada?"


def _script() -> list[Any]:
    return [
        reply(text("Checking my memory first."), tool_use("view", path="/memories")),
        reply(tool_use("create", path=NOTE, file_text="Ada prefers e-mail.\n")),
        reply(tool_use("str_replace", path=NOTE, old_str="e-mail.", new_str="e-mail, mornings.")),
        reply(tool_use("delete", path="/memories/customers/bob.txt")),
        reply(text("Noted: e-mail, mornings.")),
        # The second line.
        reply(tool_use("view", path=NOTE)),
        reply(text("By e-mail, in the mornings.")),
    ]


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, Session]]:
    """One ``vaultmem chat`` process: two typed lines (a blank one between), then
    /exit, then a line that must never be sent."""
    vault_path = tmp_path_factory.mktemp("chat") / "agent.vault"
    key = generate_key()
    Vault.init(vault_path, key=key).close()
    with ReplayServer(_script()) as server:
        done = _chat_process(
            vault_path,
            key,
            server,
            f"{FIRST}\n\n{SECOND}\n/exit\nnever sent\n",
            "--session",
            "ticket-7",
            "--actor",
            "chat-tester",
        )
        done.remaining = server.remaining
    yield vault_path, key, done


def test_chat_prints_claudes_text_and_each_memory_call(session: tuple[Path, str, Session]) -> None:
    vault_path, _, done = session
    assert done.code == 0, done.err
    lines = done.out.split("\n")
    assert lines[0] == f"Chatting with claude-sonnet-5-5. Memory: {vault_path} (actor chat-tester, session ticket-7)."
    assert "you> " not in done.out  # no prompt on a pipe
    body = [line for line in lines[3:] if line]
    assert body == [
        "claude> Checking my memory first.",
        "  [memory] view /memories",
        "  [done] Here're the files and directories up to 2 levels deep in /memories, excluding hidden items"
        " and node_modules: ...",
        f"  [memory] create {NOTE}",
        f"  [done] File created successfully at: {NOTE}",
        f"  [memory] str_replace {NOTE}",
        "  [done] The memory file has been edited. Here is the snippet showing the change (with line numbers): ...",
        "  [memory] delete /memories/customers/bob.txt",
        "  [error] Error: The path /memories/customers/bob.txt does not exist",
        "claude> Noted: e-mail, mornings.",
        f"  [memory] view {NOTE}",
        f"  [done] Here's the content of {NOTE} with line numbers: ...",
        "claude> By e-mail, in the mornings.",
    ]
    assert "\r" not in done.err  # no spinner on a pipe


def test_chat_commits_each_change_with_its_actor_and_session(session: tuple[Path, str, Session]) -> None:
    vault_path, key, _ = session
    assert commit_count(vault_path) == 2
    with Vault.open(vault_path, key=key) as vault:
        history = vault.history()
        assert [(v.command, v.paths, v.actor, v.session) for v in history] == [
            ("str_replace", (NOTE,), "chat-tester", "ticket-7"),
            ("create", (NOTE,), "chat-tester", "ticket-7"),
        ]
        assert vault.read(NOTE) == "Ada prefers e-mail, mornings.\n"


def test_chat_requests_declare_the_memory_tool_beta_and_context_editing(
    session: tuple[Path, str, Session],
) -> None:
    _, _, done = session
    assert len(done.requests) == 7
    assert [r.refused for r in done.requests] == [None] * 7
    assert MEMORY_TOOL in done.requests[0].body["tools"]
    for request in done.requests:
        assert MEMORY_BETA in request.betas
        assert request.conversation is not None
        assert MEMORY_TOOL in request.conversation.tools
        assert request.body["model"] == "claude-sonnet-5-5"
        edits = request.body["context_management"]["edits"]
        assert [edit["exclude_tools"] for edit in edits] == [["memory"]]
        assert edits[0]["type"] == "clear_tool_uses_20250919"
    assert "audit" in json.dumps(done.requests[0].conversation.system if done.requests[0].conversation else None)


def test_chat_continues_the_conversation_across_lines(session: tuple[Path, str, Session]) -> None:
    _, _, done = session
    assert _texts(done.requests[0]) == [("user", FIRST)]
    second = [r for r in done.requests if r.conversation and r.conversation.last_user_text() == SECOND]
    assert len(second) == 2  # the line, then the tool result of its view
    assert _texts(second[0]) == [
        ("user", FIRST),
        ("assistant", "Checking my memory first."),
        ("assistant", "tool_use:view"),
        (
            "user",
            "tool_result:Here're the files and directories up to 2 levels deep in /memories, excluding"
            " hidden items and node_modules:",
        ),
        ("assistant", "tool_use:create"),
        ("user", f"tool_result:File created successfully at: {NOTE}"),
        ("assistant", "tool_use:str_replace"),
        (
            "user",
            "tool_result:The memory file has been edited. Here is the snippet showing the change (with line numbers):",
        ),
        ("assistant", "tool_use:delete"),
        ("user", "tool_result:Error: The path /memories/customers/bob.txt does not exist"),
        ("assistant", "Noted: e-mail, mornings."),
        ("user", SECOND),
    ]
    assert second[0].conversation is not None
    failed = second[0].conversation.messages[8]["content"][0]
    assert failed["is_error"] is True


def test_chat_stops_at_exit_and_sends_nothing_after_it(session: tuple[Path, str, Session]) -> None:
    _, _, done = session
    assert done.code == 0
    assert done.remaining == 0
    assert not any("never sent" in json.dumps(r.body) for r in done.requests)


def test_chat_passes_the_model_and_can_leave_out_context_editing(tmp_path: Path) -> None:
    vault_path = tmp_path / "agent.vault"
    key = generate_key()
    Vault.init(vault_path, key=key).close()
    with ReplayServer([reply(text("Hello."))]) as server:
        done = _chat_process(vault_path, key, server, "hi\n", "--model", "claude-test-model", "--no-context-editing")
        requests = list(server.requests)
    assert done.code == 0, done.err  # standard input ended: EOF leaves like /exit
    assert "claude> Hello.\n" in done.out
    assert done.out.startswith("Chatting with claude-test-model.")
    assert len(requests) == 1
    assert requests[0].body["model"] == "claude-test-model"
    assert "context_management" not in requests[0].body
    assert MEMORY_BETA in requests[0].betas
    assert commit_count(vault_path) == 0


# -- the loop in-process ------------------------------------------------------------------


class Lines:
    """``read_line`` for chat.run: the given lines, then EOFError; records the prompts."""

    def __init__(self, *lines: str) -> None:
        self.lines = list(lines)
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if not self.lines:
            raise EOFError
        return self.lines.pop(0)


@dataclass
class Run:
    code: int
    out: str
    err: str


def _run(tool: VaultMemoryTool, base_url: str, read_line: Lines, **options: Any) -> Run:
    client = anthropic.Anthropic(base_url=base_url, api_key="test", max_retries=0)
    out, err = io.StringIO(), io.StringIO()
    code = chat.run(
        tool,
        model=MODEL,
        max_tokens=1024,
        read_line=read_line,
        out=out,
        err=err,
        client=client,
        **options,
    )
    return Run(code, out.getvalue(), err.getvalue())


def test_a_failed_request_is_reported_and_the_line_dropped_from_the_conversation(
    tool: VaultMemoryTool, vault: Vault
) -> None:
    turns = [
        reply(text("Hello.")),
        reply(text("Writing it down."), tool_use("create", path="/memories/half.txt", file_text="half\n")),
        # No turn left: the request after the create is refused with a 400.
    ]
    lines = Lines("first", "second", "third")
    with ReplayServer(turns) as server:
        done = _run(tool, server.url, lines)
        requests = list(server.requests)
    assert done.code == 0
    assert lines.prompts == ["you> "] * 4
    assert done.err.count("vaultmem: the request to Claude failed") == 2
    assert "the recorded session is over" in done.err
    assert "Traceback" not in done.err
    assert "claude> Writing it down.\n  [memory] create /memories/half.txt\n  [done] File created" in done.out
    # The change made before the failure stays: it is a commit.
    assert vault.read("/memories/half.txt") == "half\n"
    assert len(requests) == 4
    assert _texts(requests[2]) == [
        ("user", "first"),
        ("assistant", "Hello."),
        ("user", "second"),
        ("assistant", "Writing it down."),
        ("assistant", "tool_use:create"),
        ("user", "tool_result:File created successfully at: /memories/half.txt"),
    ]
    # The loop went on to the next line, whose conversation no longer holds the failed one.
    assert _texts(requests[3]) == [("user", "first"), ("assistant", "Hello."), ("user", "third")]
    # well-formed: refused only because the recording had no turn left for it
    assert requests[3].refused == "the recorded session is over: no turn left to replay"


def test_exit_words_and_blank_lines(tool: VaultMemoryTool, vault_path: Path) -> None:
    for word in ("/exit", "/quit", "  /quit  "):
        lines = Lines("", "   ", word, "never read")
        with ReplayServer([]) as server:
            done = _run(tool, server.url, lines)
            assert server.requests == []
        assert done.code == 0
        assert lines.lines == ["never read"]
        assert done.err == ""
    assert commit_count(vault_path) == 0


def test_chat_ends_at_end_of_input(tool: VaultMemoryTool) -> None:
    lines = Lines("hello")
    with ReplayServer([reply(text("Hi there."))]) as server:
        done = _run(tool, server.url, lines, topic="customer support", context_editing=False)
        requests = list(server.requests)
    assert done.code == 0
    assert done.out.endswith("claude> Hi there.\n\n")
    assert lines.prompts == ["you> ", "you> "]
    assert "context_management" not in requests[0].body
    assert "customer support" in json.dumps(requests[0].body["system"])
    assert "\r" not in done.err and done.err == ""


def test_an_unreachable_api_is_reported_for_each_line_and_the_chat_goes_on(tool: VaultMemoryTool) -> None:
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    lines = Lines("hello", "again")
    done = _run(tool, f"http://127.0.0.1:{port}", lines)
    assert done.code == 0
    assert lines.prompts == ["you> "] * 3
    errors = done.err.splitlines()
    assert len(errors) == 2
    for line in errors:
        assert line.startswith("vaultmem: the request to Claude failed: Connection error")
        assert line.endswith(" Try again, or /exit.")
        assert ".." not in line  # one full stop after the SDK's message, not two


class _Unauthorized(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        body = json.dumps(
            {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}
        ).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def refusing_server() -> Iterator[str]:
    """An API on 127.0.0.1 that refuses every key with a 401."""
    with local_http(_Unauthorized) as url:
        yield url


def test_a_refused_api_key_ends_the_chat_with_exit_2(
    tool: VaultMemoryTool, vault_path: Path, refusing_server: str
) -> None:
    lines = Lines("hello", "never read")
    done = _run(tool, refusing_server, lines)
    assert done.code == 2
    assert lines.lines == ["never read"]
    assert "ANTHROPIC_API_KEY" in done.err
    assert "invalid x-api-key" in done.err
    assert done.err.count("\n") == 1
    assert "claude>" not in done.out
    assert commit_count(vault_path) == 0


# -- the spinner ----------------------------------------------------------------------------


def _spinner_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "vaultmem-spinner"]


def test_spinner_writes_nothing_to_a_string_buffer() -> None:
    stream = io.StringIO()
    with Spinner("waiting for Claude", stream=stream, interval=0.001) as spinner:
        assert not spinner.enabled
        assert _spinner_threads() == []
    assert stream.getvalue() == ""
    assert spinner.frames == 0


def test_spinner_writes_nothing_to_a_pipe() -> None:
    read_end, write_end = os.pipe()
    with (
        open(write_end, "w", encoding="utf-8") as stream,
        Spinner("waiting for Claude", stream=stream, interval=0.001) as spinner,
    ):
        assert not spinner.enabled
        assert _spinner_threads() == []
    with open(read_end, "rb") as reader:
        assert reader.read() == b""


def _read_until(fd: int, until: Callable[[bytes], bool], data: bytes = b"", timeout: float = 15) -> bytes:
    """Read a pty master until ``until(everything read)`` holds (a guard, not a timing check)."""
    deadline = time.monotonic() + timeout
    while not until(data) and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            data += os.read(fd, 4096)
    return data


def test_spinner_turns_on_a_terminal_and_clears_its_line() -> None:
    label = "waiting for Claude"
    clear = ("\r" + " " * (len(label) + 2) + "\r").encode()
    master, slave = pty.openpty()
    try:
        with open(slave, "w", encoding="utf-8") as terminal:
            with Spinner(label, stream=terminal, interval=0.01) as spinner:
                assert spinner.enabled
                assert len(_spinner_threads()) == 1
                shown = _read_until(master, lambda data: f"\r\\ {label}".encode() in data)
            assert _spinner_threads() == []
            shown = _read_until(master, lambda data: data.endswith(clear), shown)
    finally:
        os.close(master)
    text_shown = shown.decode()
    frames = re.findall(rf"\r(.) {re.escape(label)}", text_shown)
    assert frames[:4] == list(SPINNER_FRAMES)
    assert all(frame == SPINNER_FRAMES[i % 4] for i, frame in enumerate(frames))
    assert spinner.frames >= 4
    assert text_shown.endswith(clear.decode())
    assert "\n" not in text_shown


def test_spinner_stops_its_thread_when_the_block_fails() -> None:
    master, slave = pty.openpty()
    try:
        with open(slave, "w", encoding="utf-8") as terminal:
            with pytest.raises(RuntimeError), Spinner("working", stream=terminal, interval=0.01):
                assert len(_spinner_threads()) == 1
                raise RuntimeError("boom")
            assert _spinner_threads() == []
            shown = _read_until(master, lambda data: data.endswith(b"\r         \r"))
    finally:
        os.close(master)
    assert shown.startswith(b"\r| working")
