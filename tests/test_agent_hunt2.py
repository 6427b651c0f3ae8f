"""The agent loop against an API that misbehaves mid-answer, and the chat's
settings as users give them.

Claude is the only stand-in: a server on 127.0.0.1 (a
:class:`~vaultmem.testing.replay.ReplayServer`, or a bare HTTP server that
answers the Messages API and then breaks off, closes the stream early or sends
an ``error`` event), reached by the real SDK client.  The tool runner, the
memory tool, the vault and its commits are real.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import select
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import anthropic
import pytest
from conftest import git, local_http

from vaultmem import Vault, VaultError, VaultMemoryTool, generate_key
from vaultmem.cli import chat, demo
from vaultmem.testing.replay import ReplayServer, events, reply, text, tool_use

NOTE = "/memories/customers/ada.md"
NOTE_TEXT = "Ada prefers e-mail.\n"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith(("VAULTMEM_", "ANTHROPIC_")) or name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)
    return monkeypatch


class Lines:
    """``read_line`` for chat.run: the given lines, then EOFError."""

    def __init__(self, *lines: str) -> None:
        self.lines = list(lines)

    def __call__(self, prompt: str) -> str:
        if not self.lines:
            raise EOFError
        return self.lines.pop(0)


@dataclass
class Run:
    code: int
    out: str
    err: str


def _chat(tool: VaultMemoryTool, base_url: str, *lines: str, max_tokens: int = 1024, **options: Any) -> Run:
    client = anthropic.Anthropic(base_url=base_url, api_key="test", max_retries=0)
    out, err = io.StringIO(), io.StringIO()
    code = chat.run(
        tool,
        model="claude-test",
        max_tokens=max_tokens,
        read_line=Lines(*lines),
        out=out,
        err=err,
        client=client,
        **options,
    )
    return Run(code, out.getvalue(), err.getvalue())


# -- a max_tokens the SDK refuses without a stream -----------------------------------------


@pytest.mark.parametrize("max_tokens", [32_000, 64_000])
def test_chat_takes_a_max_tokens_above_21333(tool: VaultMemoryTool, vault: Vault, max_tokens: int) -> None:
    # Unstreamed, the SDK refuses any request whose answer could take over 10
    # minutes (max_tokens above 21,333) before sending it.
    turns = [reply(text("Saving."), tool_use("create", path=NOTE, file_text=NOTE_TEXT)), reply(text("Saved."))]
    with ReplayServer(turns) as server:
        done = _chat(tool, server.url, "remember Ada's preference", max_tokens=max_tokens)
        requests = list(server.requests)
    assert done.code == 0
    assert done.err == ""
    assert "claude> Saved." in done.out
    assert vault.read(NOTE) == NOTE_TEXT
    assert [r.refused for r in requests] == [None, None]
    assert all(r.body["max_tokens"] == max_tokens for r in requests)


# -- answers that break off ----------------------------------------------------------------


def _filled(message: dict[str, Any], number: int) -> dict[str, Any]:
    return {
        **message,
        "id": f"msg_test_{number:04d}",
        "model": "claude-test",
        "usage": {"input_tokens": 9, "output_tokens": 9},
    }


def _sse(pairs: list[tuple[str, dict[str, Any]]]) -> bytes:
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in pairs).encode()


class _Misbehaving(BaseHTTPRequestHandler):
    """Answers each request with the next of ``script``: ``(how, reply)``.

    ``whole``: the reply, in JSON or as an event stream as asked.  ``cut``: the
    headers promise the whole reply; half of it is sent and the connection
    closed.  ``early``: a stream that ends, cleanly, in the middle of the
    reply's memory call (no ``message_delta``, no ``message_stop``).
    ``overloaded``: the stream's first event, then an ``error`` event."""

    script: ClassVar[list[tuple[str, dict[str, Any]]]] = []
    bodies: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        type(self).bodies.append(body)
        how, message = type(self).script.pop(0)
        message = _filled(message, len(type(self).bodies))
        stream = bool(body.get("stream"))
        if not stream:
            data = json.dumps(message).encode()
        elif how == "early":
            shown: list[tuple[str, dict[str, Any]]] = []
            for name, event in events(message):
                shown.append((name, event))
                if name == "content_block_delta" and event["delta"]["type"] == "input_json_delta":
                    half = event["delta"]["partial_json"]
                    shown[-1] = (name, {**event, "delta": {**event["delta"], "partial_json": half[: len(half) // 2]}})
                    break
            data = _sse(shown)
        elif how == "overloaded":
            error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
            data = _sse([next(iter(events(message))), ("error", error)])
        else:
            data = _sse(list(events(message)))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream" if stream else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if how == "cut":
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def misbehaving() -> Iterator[str]:
    _Misbehaving.script = []
    _Misbehaving.bodies = []
    with local_http(_Misbehaving) as url:
        yield url


def _user_texts(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user" and isinstance(m["content"], str)]


def test_a_connection_that_breaks_off_mid_answer_is_said_plainly_and_keeps_what_was_written(
    vault: Vault, vault_path: Path, misbehaving: str
) -> None:
    memory = VaultMemoryTool(vault, actor="support-bot", session="ticket-9")
    _Misbehaving.script = [
        ("whole", reply(text("Saving."), tool_use("create", path=NOTE, file_text=NOTE_TEXT))),
        ("cut", reply(text("Saved, and " + "more words " * 50))),
        ("whole", reply(text("Hello again."))),
    ]
    done = _chat(memory, misbehaving, "remember Ada's preference", "hello")
    assert done.code == 0
    [line] = done.err.splitlines()
    assert line.startswith("vaultmem: the request to Claude failed: the connection broke off before the answer")
    assert "proxy" not in line  # the API answered; the connection broke
    assert line.endswith(" Try again, or /exit.")
    assert "claude> Hello again." in done.out
    # The write acknowledged before the break stays, recorded with who and which session.
    assert vault.read(NOTE) == NOTE_TEXT
    assert git(vault_path, "log", "-1", "--format=%an|%(trailers:key=Vaultmem-Session,valueonly)").strip() == (
        "support-bot|ticket-9"
    )
    # The next line's conversation no longer holds the failed one.
    assert _user_texts(_Misbehaving.bodies[-1]) == ["hello"]


def test_a_stream_that_ends_inside_a_memory_call_writes_nothing_and_is_said_plainly(
    tool: VaultMemoryTool, vault: Vault, misbehaving: str
) -> None:
    _Misbehaving.script = [("early", reply(text("Saving."), tool_use("create", path=NOTE, file_text=NOTE_TEXT * 40)))]
    done = _chat(tool, misbehaving, "remember Ada's preference")
    assert done.code == 0
    assert vault.history() == []  # the call's input was cut short: never run
    [line] = done.err.splitlines()
    assert line.startswith("vaultmem: the request to Claude failed: the connection broke off before the answer")
    assert "[memory]" not in done.out and "[error]" not in done.out


def test_an_error_event_mid_stream_is_the_apis_own_words(tool: VaultMemoryTool, vault: Vault, misbehaving: str) -> None:
    _Misbehaving.script = [
        ("whole", reply(tool_use("create", path=NOTE, file_text=NOTE_TEXT))),
        ("overloaded", reply(text("Saved."))),
    ]
    done = _chat(tool, misbehaving, "remember Ada's preference")
    assert done.code == 0
    assert done.err == "vaultmem: the request to Claude failed: Overloaded. Try again, or /exit.\n"
    assert vault.read(NOTE) == NOTE_TEXT


# -- settings refused before the chat starts ------------------------------------------------


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"topic": ""}, "topic must be a non-empty string"),
        ({"topic": "   "}, "topic must be a non-empty string"),
        ({"model": ""}, "model must be a model name"),
        ({"model": " "}, "model must be a model name"),
    ],
)
def test_a_bad_model_or_topic_is_refused_before_the_first_line_is_read(
    tool: VaultMemoryTool, options: dict[str, Any], said: str
) -> None:
    lines = Lines("a long first message the user typed")
    out, err = io.StringIO(), io.StringIO()
    with ReplayServer([reply(text("Hi."))]) as server:
        client = anthropic.Anthropic(base_url=server.url, api_key="test", max_retries=0)
        with pytest.raises(VaultError, match=said):
            chat.run(
                tool,
                **{"model": "claude-test", **options},
                max_tokens=1024,
                read_line=lines,
                out=out,
                err=err,
                client=client,
            )
        assert server.requests == []
    assert lines.lines == ["a long first message the user typed"]  # never read, so never lost
    assert out.getvalue() == ""  # no banner for a chat that cannot start


# -- a reply Claude had not finished ----------------------------------------------------------


def test_chat_says_when_a_text_reply_was_cut_short(tool: VaultMemoryTool, vault: Vault) -> None:
    turns = [
        reply(text("Your reading list so far: Middlemarch, The Wa"), stop_reason="max_tokens"),
        reply(text("Saving"), tool_use("view", path="/memories"), stop_reason="model_context_window_exceeded"),
        reply(text("Hello."), stop_reason="end_turn"),
    ]
    with ReplayServer(turns) as server:
        done = _chat(tool, server.url, "what is on my list?", "and now?", "hi", max_tokens=20)
        assert [r.refused for r in server.requests] == [None, None, None]
    assert done.code == 0 and done.err == ""
    first, second, third = done.out.split("claude> ")[1:]
    assert first == (
        "Your reading list so far: Middlemarch, The Wa\n"
        "  [cut short] the reply reached the limit of 20 tokens: ask Claude to go on, "
        "or start the chat with a higher --max-tokens.\n"
    )
    assert "  [error] Error: this memory call was not run" in second
    assert second.endswith(
        "  [cut short] the conversation fills Claude's context window: start a new chat (the memory stays).\n"
    )
    assert "[cut short]" not in third
    assert vault.history() == []


# -- the environment the chat's client is made from ----------------------------------------------


def _chat_from_env(tool: VaultMemoryTool, *lines: str) -> Run:
    """chat.run as the command runs it: the client made from the environment."""
    out, err = io.StringIO(), io.StringIO()
    code = chat.run(tool, model="claude-test", max_tokens=1024, read_line=Lines(*lines), out=out, err=err)
    return Run(code, out.getvalue(), err.getvalue())


@pytest.mark.parametrize("pasted", ["test\r\n", "test\n", " test "], ids=["crlf", "lf", "spaces"])
def test_a_key_pasted_with_a_line_end_works(
    tool: VaultMemoryTool, vault: Vault, clean_env: pytest.MonkeyPatch, pasted: str
) -> None:
    # An .env file saved with CRLF: every request failed with "Connection error.".
    with ReplayServer([reply(tool_use("create", path=NOTE, file_text=NOTE_TEXT)), reply(text("Saved."))]) as server:
        clean_env.setenv("ANTHROPIC_API_KEY", pasted)
        clean_env.setenv("ANTHROPIC_BASE_URL", server.url)
        done = _chat_from_env(tool, "remember Ada's preference")
        assert [r.refused for r in server.requests] == [None, None]
    assert done.err == ""
    assert "claude> Saved." in done.out
    assert vault.read(NOTE) == NOTE_TEXT


def test_a_key_with_a_control_character_inside_is_refused_without_showing_it(
    tool: VaultMemoryTool, clean_env: pytest.MonkeyPatch
) -> None:
    with ReplayServer([reply(text("Hi."))]) as server:
        clean_env.setenv("ANTHROPIC_API_KEY", "sk-ant-SECRET\x01tail")
        clean_env.setenv("ANTHROPIC_BASE_URL", server.url)
        done = _chat_from_env(tool, "hello")
        assert server.requests == []
    assert done.code == 2
    assert done.err.startswith("vaultmem: ANTHROPIC_API_KEY holds a control character inside the key;")
    assert "SECRET" not in done.err and "Connection error" not in done.err


def test_an_empty_base_url_means_the_apis_own_address(clean_env: pytest.MonkeyPatch) -> None:
    # `export ANTHROPIC_BASE_URL=` to stop using a local server: the SDK took
    # "" as the address, and every line failed with "Connection error.".
    clean_env.setenv("ANTHROPIC_API_KEY", "test")
    clean_env.setenv("ANTHROPIC_BASE_URL", "")
    client = chat._client()
    assert not isinstance(client, str), client
    assert str(client.base_url).rstrip("/") == "https://api.anthropic.com"


def test_a_base_url_without_a_scheme_is_named_as_the_cause(
    tool: VaultMemoryTool, clean_env: pytest.MonkeyPatch
) -> None:
    clean_env.setenv("ANTHROPIC_API_KEY", "test")
    clean_env.setenv("ANTHROPIC_BASE_URL", "127.0.0.1:9")
    done = _chat_from_env(tool, "hello")
    assert done.code == 0
    [line] = done.err.splitlines()
    assert line.startswith("vaultmem: the request to Claude failed: Connection error (UnsupportedProtocol: ")
    assert "ANTHROPIC_BASE_URL must start with https:// or http://" in line


def test_a_base_url_that_is_not_a_url_ends_the_chat_with_what_to_do(
    tool: VaultMemoryTool, clean_env: pytest.MonkeyPatch
) -> None:
    clean_env.setenv("ANTHROPIC_API_KEY", "test")
    clean_env.setenv("ANTHROPIC_BASE_URL", "http://[::1")
    done = _chat_from_env(tool, "hello")
    assert done.code == 2
    assert done.out == ""
    assert done.err.startswith("vaultmem: ANTHROPIC_BASE_URL is not a URL (")
    assert "unset it" in done.err and "verify" not in done.err and "unexpected" not in done.err


# -- nobody reads the chat any more --------------------------------------------------------------


def test_a_chat_whose_output_is_closed_ends_quietly_and_sends_nothing_more(tmp_path: Path) -> None:
    # `vaultmem chat | head -2`: the failed write was blamed on the API ("is
    # something other than the API answering?") and every later line was still
    # sent to Claude, with nobody to read the answers.
    vault_path, key = tmp_path / "agent.vault", generate_key()
    Vault.init(vault_path, key=key).close()
    closed = threading.Event()

    def first(conversation: Any) -> dict[str, Any]:
        closed.wait(30)  # answered once the reader has gone
        return reply(text("Hello.\n" * 200))

    env = {k: v for k, v in os.environ.items() if not k.startswith(("VAULTMEM_", "ANTHROPIC_"))}
    with ReplayServer([first, reply(text("Nobody reads this."))]) as server:
        env.update(ANTHROPIC_API_KEY="test", ANTHROPIC_BASE_URL=server.url, VAULTMEM_KEY=key)
        chat_process = subprocess.Popen(
            [sys.executable, "-m", "vaultmem", "--vault", str(vault_path), "chat"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert chat_process.stdin is not None and chat_process.stdout is not None
        assert chat_process.stderr is not None
        try:
            chat_process.stdin.write(b"hi\nagain\n")
            chat_process.stdin.close()
            assert chat_process.stdout.readline().startswith(b"Chatting with ")
            chat_process.stdout.close()
        finally:
            closed.set()
        code = chat_process.wait(60)
        err = chat_process.stderr.read().decode()
        chat_process.stderr.close()
        sent = len(server.requests)
    assert code == 0, err
    assert err == ""
    assert sent == 1


# -- a typed line that is not UTF-8 ----------------------------------------------------------------


def test_a_line_that_is_not_utf8_is_not_sent_and_the_chat_goes_on(tmp_path: Path) -> None:
    # A Latin-1 terminal sends "café" as b"caf\xe9": the failure read "the answer
    # could not be read as the Messages API's (UnicodeEncodeError ...); is
    # something other than the API answering?".
    vault_path, key = tmp_path / "agent.vault", generate_key()
    Vault.init(vault_path, key=key).close()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VAULTMEM_", "ANTHROPIC_"))}
    with ReplayServer([reply(text("Hello."))]) as server:
        env.update(ANTHROPIC_API_KEY="test", ANTHROPIC_BASE_URL=server.url, VAULTMEM_KEY=key)
        done = subprocess.run(
            [sys.executable, "-m", "vaultmem", "--vault", str(vault_path), "chat"],
            input=b"caf\xe9 au lait\nsecond\n",
            capture_output=True,
            env=env,
            timeout=120,
            check=False,
        )
        requests = list(server.requests)
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert err == (
        "vaultmem: that line is not UTF-8 text (is the terminal set to another encoding?); "
        "it was not sent. Type it again, or /exit.\n"
    )
    assert b"claude> Hello." in done.stdout
    assert len(requests) == 1 and requests[0].refused is None
    assert requests[0].conversation is not None
    assert requests[0].conversation.last_user_text() == "second"


# -- the demo's commands are pasted into a shell -------------------------------------------------


def test_the_demos_explore_commands_work_for_a_folder_with_spaces_and_quotes(tmp_path: Path) -> None:
    # They were printed unquoted: `vaultmem --vault my demo --key-file ...` is
    # an error when pasted.
    folder = tmp_path / "my demo (ada's)"
    out = io.StringIO()
    demo.run(str(folder), out)
    commands = [line[2:] for line in out.getvalue().splitlines() if line.startswith(("  vaultmem ", "  git -C "))]
    assert len(commands) == 3, out.getvalue()
    vaultmem = f"{shlex.quote(sys.executable)} -m vaultmem"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VAULTMEM_", "GIT_"))}
    outputs = []
    for command in commands:
        shell = vaultmem + command.removeprefix("vaultmem") if command.startswith("vaultmem ") else command
        done = subprocess.run(
            ["bash", "-c", shell], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, (command, done.stderr)
        outputs.append(done.stdout)
    log, show, git_log = outputs
    assert "support-bot  ticket-4411" in log
    assert show.strip()
    assert "memories/customers/ada_lovelace.xml" in git_log


# -- Ctrl-C while a memory call waits for another writer ------------------------------------------


def _read_until(fd: int, until: Callable[[bytes], bool], data: bytes = b"", timeout: float = 60) -> bytes:
    """Read a pty until ``until(everything read)`` holds (a guard, not a timing check)."""
    deadline = time.monotonic() + timeout
    while not until(data) and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready:
            try:
                data += os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                break
    return data


def _exit_code(pid: int, timeout: float) -> int | None:
    """The child's exit code once it ends within ``timeout`` seconds (reaped), else None."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def test_ctrl_c_leaves_a_chat_whose_memory_call_waits_for_another_writer(
    vault: Vault, vault_path: Path, key: str
) -> None:
    # Another process holds the vault's writer lock (a long import, a
    # re-encryption, a writer stopped with Ctrl-Z): Ctrl-C, pressed any number
    # of times, waited for that process to let go.
    holder = os.open(vault_path / "vaultmem" / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VAULTMEM_", "ANTHROPIC_"))}
    pid, code = 0, None
    try:
        with ReplayServer([reply(tool_use("create", path=NOTE, file_text=NOTE_TEXT)), reply(text("Saved."))]) as server:
            env.update(ANTHROPIC_API_KEY="test", ANTHROPIC_BASE_URL=server.url, VAULTMEM_KEY=key)
            pid, fd = pty.fork()
            if pid == 0:  # the child: exec at once
                os.execve(sys.executable, [sys.executable, "-m", "vaultmem", "--vault", str(vault_path), "chat"], env)
            try:
                shown = _read_until(fd, lambda data: b"you> " in data)
                os.write(fd, b"remember Ada's preference\r")
                shown = _read_until(fd, lambda data: b"[memory] create" in data, shown)
                time.sleep(0.3)  # the call is waiting for the lock
                os.kill(pid, signal.SIGINT)
                shown = _read_until(fd, lambda data: b"log --session" in data.partition(b"interrupted")[2], shown, 30)
                code = _exit_code(pid, 30)
            finally:
                os.close(fd)
    finally:
        if pid and code is None and _exit_code(pid, 0) is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        fcntl.flock(holder, fcntl.LOCK_UN)
        os.close(holder)
    screen = shown.decode("utf-8", "replace")
    assert code == 130, screen[-1500:]
    assert "vaultmem: interrupted" in screen and "Traceback" not in screen
    # Nothing was written, and the vault takes the next write once the other writer is done.
    assert vault.history() == []
    assert vault.verify().ok
    VaultMemoryTool(vault).call({"command": "create", "path": NOTE, "file_text": NOTE_TEXT})
    assert vault.read(NOTE) == NOTE_TEXT
