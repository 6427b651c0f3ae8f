"""The agent loop as users meet it: hostile or broken model output, a broken
network path, proxies, and the first hour with the docs.

Claude is the only stand-in: a server on 127.0.0.1 reached by the real SDK
client (a :class:`~vaultmem.testing.replay.ReplayServer`, or a bare HTTP server
playing a proxy that answers with something other than the API).  The tool
runner, the memory tool, the vault and its commits are real.
"""

from __future__ import annotations

import io
import os
import pty
import re
import select
import signal
import stat
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
from conftest import commit_count, local_http

from vaultmem import Vault, VaultError, VaultMemoryTool, generate_key, memory_request
from vaultmem.anthropic.agent import converse, describe_call
from vaultmem.cli import chat
from vaultmem.testing.replay import ReplayServer, reply, text, tool_use

ROOT = Path(__file__).resolve().parent.parent
NOTE = "/memories/notes.md"


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


def _chat(tool: VaultMemoryTool, base_url: str, *lines: str, max_tokens: int = 1024) -> Run:
    client = anthropic.Anthropic(base_url=base_url, api_key="test", max_retries=0)
    out, err = io.StringIO(), io.StringIO()
    code = chat.run(
        tool, model="claude-test", max_tokens=max_tokens, read_line=Lines(*lines), out=out, err=err, client=client
    )
    return Run(code, out.getvalue(), err.getvalue())


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("VAULTMEM_", "ANTHROPIC_")) and not k.lower().endswith("_proxy")
    }
    env.update(extra)
    return env


# -- a reply cut off before its tool call was complete ----------------------------------


@pytest.mark.parametrize("stop_reason", ["max_tokens", "refusal", "model_context_window_exceeded"])
def test_chat_never_runs_the_tool_call_of_a_reply_that_was_cut_off(
    tool: VaultMemoryTool, vault: Vault, vault_path: Path, stop_reason: str
) -> None:
    # Claude ran out of tokens while writing a file: the call's input is unfinished.
    cut = reply(
        text("Saving your notes."),
        tool_use("create", path=NOTE, file_text="# Notes\n- Ada prefers e-ma"),
        stop_reason=stop_reason,
    )
    with ReplayServer([cut, reply(text("Go on."))]) as server:
        done = _chat(tool, server.url, "remember all of this", "next")
        requests = list(server.requests)
    assert done.code == 0, done.err
    assert commit_count(vault_path) == 0  # nothing half-written reaches the vault
    assert f"  [memory] create {NOTE}\n  [error] Error: " in done.out
    assert "not run" in done.out
    # The next line is still a conversation the API accepts: the unrun call is answered.
    assert [r.refused for r in requests] == [None, None]
    assert "claude> Go on." in done.out
    assert "failed" not in done.err


def test_converse_runs_no_call_of_a_reply_cut_off_and_keeps_the_conversation_well_formed(vault: Vault) -> None:
    memory = VaultMemoryTool(vault, actor="agent")
    cut = reply(tool_use("create", path=NOTE, file_text="unfinis"), stop_reason="max_tokens")
    conversation: list[Any] = [{"role": "user", "content": "hi"}]
    results: list[Any] = []
    with ReplayServer([cut]) as server:
        client = anthropic.Anthropic(base_url=server.url, api_key="test", max_retries=0)
        converse(
            client,
            memory_request(memory, messages=conversation),
            conversation,
            on_text=lambda _: None,
            on_call=lambda _: None,
            on_result=results.append,
        )
    assert vault.history() == []
    assert [r["is_error"] for r in results] == [True]
    assert [m["role"] for m in conversation] == ["user", "assistant", "user"]
    assert conversation[-1]["content"][0]["tool_use_id"] == conversation[1]["content"][0].id


# -- what the model sends is shown, never obeyed, by the terminal ------------------------------


def test_chat_shows_no_terminal_control_sequences_from_the_model(tool: VaultMemoryTool, vault_path: Path) -> None:
    hostile = "\x1b[2J\x1b]0;owned\x07\x1b[31m\x9b31m\r"
    turns = [
        reply(text(f"Hello {hostile}there."), tool_use("view", path=f"/memories/{hostile}")),
        reply(tool_use("rename", old_path=f"/memories/a{hostile}", new_path="/memories/b")),
        reply(text("Done.")),
    ]
    with ReplayServer(turns) as server:
        done = _chat(tool, server.url, "hi")
    assert done.code == 0, done.err
    for shown in (done.out, done.err):
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", shown), repr(shown)
    assert "claude> Hello " in done.out and "there." in done.out
    assert commit_count(vault_path) == 0


def test_chat_shows_a_huge_tool_input_on_one_short_line(tool: VaultMemoryTool) -> None:
    long_path = "/memories/" + "d" * 200 + "/" + "f" * 50_000
    turns = [reply(tool_use("create", path=long_path, file_text="x")), reply(text("Done."))]
    with ReplayServer(turns) as server:
        done = _chat(tool, server.url, "hi")
    assert done.code == 0, done.err
    [line] = [row for row in done.out.splitlines() if row.startswith("  [memory] ")]
    assert len(line) <= 200, len(line)
    assert line.endswith(f"... [{len(long_path):,} characters]")


def test_describe_call_of_input_that_is_not_an_object_or_lacks_fields() -> None:
    assert describe_call("just text") == "(not a JSON object: str)"  # type: ignore[arg-type]
    assert describe_call({"path": "/memories"}) == "(no command) /memories"
    assert describe_call({"command": "view", "path": ["/memories"]}) == "view ['/memories']"


@pytest.mark.parametrize("raw", ["just a string", [1, 2], 7])
def test_chat_survives_a_tool_input_that_is_not_a_json_object(
    tool: VaultMemoryTool, vault_path: Path, raw: Any
) -> None:
    block = {"type": "tool_use", "id": "toolu_odd_input", "name": "memory", "input": raw}
    with ReplayServer([reply(text("Trying."), block), reply(text("Sorry."))]) as server:
        done = _chat(tool, server.url, "hi", "again")
        refused = [r.refused for r in server.requests]
    assert done.code == 0, done.err
    assert "  [error] Error: the memory tool input must be a JSON object" in done.out
    assert "claude> Sorry." in done.out
    assert refused[:2] == [None, None]
    assert "Warning" not in done.err and "Traceback" not in done.err
    assert commit_count(vault_path) == 0


def test_chat_shows_no_python_warning_when_claude_calls_a_tool_it_was_not_given(
    vault: Vault, vault_path: Path, key: str
) -> None:
    turns = [reply(text("Let me look."), tool_use("run", name="bash", cmd="ls /")), reply(text("I can't."))]
    with ReplayServer(turns) as server:
        env = _env(ANTHROPIC_API_KEY="test", ANTHROPIC_BASE_URL=server.url, VAULTMEM_KEY=key)
        result = subprocess.run(
            [sys.executable, "-m", "vaultmem", "--vault", str(vault_path), "chat"],
            input="hi\n",
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=120,
        )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "  [error] Error: Tool 'bash' not found" in result.stdout
    assert "claude> I can't." in result.stdout


# -- something other than the API answers ------------------------------------------------


class _NotTheApi(BaseHTTPRequestHandler):
    """A proxy or captive portal: 200 with a body that is not the API's."""

    bodies: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = self.bodies.pop(0) if self.bodies else b"<html>Sign in to the hotel Wi-Fi</html>"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def not_the_api() -> Iterator[str]:
    with local_http(_NotTheApi) as url:
        yield url


@pytest.mark.parametrize(
    "body", [b"<html>Sign in to the hotel Wi-Fi</html>", b'{"hello": "world"}', b"", b'{"content": 5}']
)
def test_chat_reports_an_answer_that_is_not_the_apis_and_goes_on(
    tool: VaultMemoryTool, not_the_api: str, body: bytes
) -> None:
    _NotTheApi.bodies = [body, body]
    done = _chat(tool, not_the_api, "hello", "again")
    assert done.code == 0
    errors = done.err.splitlines()
    assert len(errors) == 2, done.err
    for line in errors:
        assert line.startswith("vaultmem: the request to Claude failed: "), line
        assert line.endswith(" Try again, or /exit."), line
        assert "Traceback" not in line and "verify" not in line


# -- the demo behind a proxy ----------------------------------------------------------------


@pytest.mark.parametrize(
    "proxy",
    [
        {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"},
        {"http_proxy": "http://127.0.0.1:9", "all_proxy": "http://127.0.0.1:9"},
        {"ALL_PROXY": "socks5://127.0.0.1:9"},
    ],
    ids=["http", "lowercase", "socks"],
)
def test_demo_runs_offline_whatever_proxy_the_environment_names(tmp_path: Path, proxy: dict[str, str]) -> None:
    # No NO_PROXY: a company laptop's shell as it is.  The demo talks only to 127.0.0.1.
    result = subprocess.run(
        [sys.executable, "-m", "vaultmem", "demo"],
        capture_output=True,
        text=True,
        env=_env(**proxy),
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "no problems found." in result.stdout


# -- the first hour with the docs -------------------------------------------------------------


def _blocks(doc: str, language: str) -> list[str]:
    text_ = (ROOT / doc).read_text(encoding="utf-8")
    return re.findall(rf"^```{language}\n(.*?)^```$", text_, re.M | re.S)


def _console_commands(block: str) -> list[str]:
    return [line[2:] for line in block.splitlines() if line.startswith("$ ")]


def _bash(script: str, cwd: Path, env: dict[str, str], typed: str = "") -> subprocess.CompletedProcess[str]:
    """``script`` in one bash session; ``typed`` is what the reader types (the chat's lines)."""
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        input=typed,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _reader_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A clean shell whose `vaultmem` is this checkout's."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    wrapper = bin_dir / "vaultmem"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m vaultmem "$@"\n')
    wrapper.chmod(0o755)
    return _env(
        PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        HOME=str(tmp_path),
        PYTHONPATH=str(ROOT),
        **extra,
    )


def _first_vault_commands() -> list[str]:
    """getting-started.md's "A key and a vault": the commands that make the first vault."""
    [block] = [b for b in _blocks("docs/getting-started.md", "console") if "init" in b and "keygen" in b]
    return _console_commands(block)


def test_the_key_getting_started_makes_outlives_the_terminal(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    done = _bash("\n".join(_first_vault_commands()), work, _reader_env(tmp_path))
    assert done.returncode == 0, done.stderr
    # The terminal is closed: a new shell has no VAULTMEM_KEY.  The key must be on disk,
    # private, or the vault is lost for good.
    kept = []
    for candidate in work.iterdir():
        if candidate.is_file():
            with Vault.open(work / "agent.vault", key=candidate.read_text().strip()) as vault:
                assert vault.history() == []
            kept.append(candidate)
    assert kept, f"no key was kept on disk: {sorted(p.name for p in work.iterdir())}"
    assert all(stat.S_IMODE(path.stat().st_mode) == 0o600 for path in kept)


def test_following_getting_started_then_the_readmes_chat_keeps_the_first_vault(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    [chat_block] = [b for b in _blocks("README.md", "sh") if "chat" in b]
    with ReplayServer([reply(text("Hello."))] * 3) as server:
        env = _reader_env(tmp_path, ANTHROPIC_BASE_URL=server.url)
        # One terminal: getting-started's commands, then the README's chat.
        done = _bash("\n".join([*_first_vault_commands(), chat_block]), work, env, typed="Hello.\n")
        refused = [r.refused for r in server.requests]
    assert done.returncode == 0, done.stderr + done.stdout
    assert refused == [None]
    # The first vault still opens with a key kept on disk.
    keys = [p.read_text().strip() for p in work.iterdir() if p.is_file()]
    assert any(_opens(work / "agent.vault", key) for key in keys)


def _opens(path: Path, key: str) -> bool:
    try:
        Vault.open(path, key=key).close()
    except Exception:
        return False
    return True


def test_the_chat_block_of_docs_agent_works_on_the_vault_getting_started_made(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    [chat_block] = [b for b in _blocks("docs/agent.md", "sh") if "chat" in b]
    with ReplayServer([reply(text("Noted."))] * 3) as server:
        env = _reader_env(tmp_path, ANTHROPIC_BASE_URL=server.url)
        done = _bash("\n".join([*_first_vault_commands(), chat_block]), work, env, typed="I finished Middlemarch.\n")
        requests = list(server.requests)
    assert done.returncode == 0, done.stderr + done.stdout
    assert [r.refused for r in requests] == [None]
    assert "claude> Noted." in done.stdout


# -- Ctrl-C in the middle of a turn ---------------------------------------------------------

CALLS = 200
LINE_TEXT = "Ada prefers e-mail, mornings.\n" * 3000  # about 90 KB: each call takes a moment


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


def _told_interrupted(shown: bytes) -> bool:
    return b"interrupted" in shown and b"vaultmem log --session" in shown.split(b"interrupted")[-1]


def _chat_on_a_terminal(vault_path: Path, key: str, server: ReplayServer) -> tuple[int, int]:
    """``vaultmem chat`` on a pseudo-terminal, as a person runs it: (pid, terminal fd)."""
    env = _env(ANTHROPIC_API_KEY="test", ANTHROPIC_BASE_URL=server.url, VAULTMEM_KEY=key)
    pid, fd = pty.fork()
    if pid == 0:  # the child: exec at once
        os.execve(sys.executable, [sys.executable, "-m", "vaultmem", "--vault", str(vault_path), "chat"], env)
    return pid, fd


def test_ctrl_c_during_memory_calls_keeps_what_was_written_and_says_so(
    vault: Vault, vault_path: Path, key: str
) -> None:
    calls = [tool_use("create", path=f"/memories/f{i:03d}.txt", file_text=LINE_TEXT) for i in range(CALLS)]
    with ReplayServer([reply(text("Writing it all down."), *calls), reply(text("Done."))]) as server:
        pid, fd = _chat_on_a_terminal(vault_path, key, server)
        try:
            shown = _read_until(fd, lambda data: b"you> " in data)
            os.write(fd, b"Please write everything down.\r")
            deadline = time.monotonic() + 60
            while commit_count(vault_path) < 3 and time.monotonic() < deadline:
                shown = _read_until(fd, lambda data: False, shown, timeout=0.05)
            os.kill(pid, signal.SIGINT)
            shown = _read_until(fd, _told_interrupted, shown)
            _, status = os.waitpid(pid, 0)
        finally:
            os.close(fd)
    screen = shown.decode("utf-8", "replace")
    assert os.waitstatus_to_exitcode(status) == 130, screen[-2000:]
    assert "Traceback" not in screen
    tail = screen.split("you> Please write everything down.")[-1]
    assert "vaultmem: interrupted" in tail
    assert "vaultmem log --session" in tail.split("vaultmem: interrupted")[-1]
    listed = subprocess.run(
        ["git", "-C", str(vault_path), "rev-list", "--count", "refs/heads/main"], capture_output=True, text=True
    )
    assert listed.returncode == 0, (listed.stderr, sorted(os.listdir(vault_path)), screen[-1500:])
    written = int(listed.stdout)
    assert 3 <= written < CALLS, screen[-1500:]
    # Every change acknowledged to git is whole, and the vault takes the next write.
    assert subprocess.run(["git", "-C", str(vault_path), "fsck", "--strict"], capture_output=True).returncode == 0
    with Vault.open(vault_path, key=key) as reopened:
        assert reopened.verify().ok
        versions = reopened.history()
        assert len(versions) == written
        for version in versions:
            [path] = version.paths
            assert reopened.read(path) == LINE_TEXT
        VaultMemoryTool(reopened).call({"command": "create", "path": "/memories/after.txt", "file_text": "x\n"})


def test_ctrl_c_while_waiting_for_claude_leaves_cleanly(vault: Vault, vault_path: Path, key: str) -> None:
    answered = threading.Event()

    def slow(conversation: Any) -> dict[str, Any]:
        answered.wait(60)  # Claude is thinking until the test is over
        return reply(text("Too late."))

    with ReplayServer([slow]) as server:
        pid, fd = _chat_on_a_terminal(vault_path, key, server)
        try:
            shown = _read_until(fd, lambda data: b"you> " in data)
            os.write(fd, b"hello\r")
            shown = _read_until(fd, lambda data: b"waiting for Claude" in data, shown)
            os.kill(pid, signal.SIGINT)
            # At once as a rule; should the code the interrupt lands in swallow
            # it, when Claude's reply is in (within 60 s here).
            shown = _read_until(fd, _told_interrupted, shown, timeout=120)
            _, status = os.waitpid(pid, 0)
        finally:
            answered.set()
            os.close(fd)
    screen = shown.decode("utf-8", "replace")
    assert os.waitstatus_to_exitcode(status) == 130, screen[-2000:]
    assert "Traceback" not in screen
    assert "vaultmem: interrupted" in screen
    assert commit_count(vault_path) == 0


# -- memory_request: bad arguments are one clear VaultError ---------------------------------


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({"messages": {"role": "user", "content": "hi"}}, "messages must be a list of message dicts, not one message"),
        ({"messages": ["hi"]}, "messages[0] must be a message dict"),
        ({"messages": [{"role": "user", "content": "hi"}, 5]}, "messages[1] must be a message dict"),
        ({"system": 5}, "system must be a string or a list of text blocks"),
        ({"system": [5]}, "system must be a string or a list of text blocks"),
        ({"system": b"be brief"}, "system must be a string or a list of text blocks"),
        ({"model": ""}, "model must be a model name"),
        ({"model": None}, "model must be a model name"),
    ],
)
def test_request_refuses_malformed_messages_system_and_model(
    vault: Vault, arguments: dict[str, Any], said: str
) -> None:
    memory = VaultMemoryTool(vault)
    arguments = {"messages": [{"role": "user", "content": "hi"}], **arguments}
    with pytest.raises(VaultError) as info:
        memory_request(memory, **arguments)
    assert type(info.value) is VaultError
    assert str(info.value).startswith("Error: ")
    assert said in str(info.value)


def test_ctrl_c_as_a_memory_call_moves_the_ref_leaves_the_vault_whole_and_writable(tmp_path: Path) -> None:
    """SIGINT delivered the moment ``refs/heads/main.lock`` appears, in the middle
    of a commit, a few times over: the call finishes first, then the chat stops.
    (A trial whose watcher never saw the lock, the commits being too quick for
    it, proves nothing and is not counted.)"""
    interrupted = 0
    for trial in range(20):
        if interrupted == 4:
            break
        vault_path = tmp_path / f"v{trial}.vault"
        key = generate_key()
        vault = Vault.init(vault_path, key=key)
        tool = VaultMemoryTool(vault, actor="chat")
        ref_lock = vault_path / "refs" / "heads" / "main.lock"
        stop, fired = threading.Event(), threading.Event()

        def press_ctrl_c_mid_commit(
            ref_lock: Path = ref_lock, stop: threading.Event = stop, fired: threading.Event = fired
        ) -> None:
            while not stop.is_set():
                if ref_lock.exists():
                    fired.set()
                    os.kill(os.getpid(), signal.SIGINT)
                    return

        calls = [tool_use("create", path=f"/memories/f{i}.txt", file_text="x\n" * 30_000) for i in range(20)]
        watcher = threading.Thread(target=press_ctrl_c_mid_commit, daemon=True)
        with ReplayServer([reply(*calls), reply(text("Done."))]) as server:
            watcher.start()
            try:
                done = _chat(tool, server.url, "write it all")
            finally:
                stop.set()
                watcher.join()
        vault.close()
        if not fired.is_set():
            assert done.code == 0, done.err
            continue
        interrupted += 1
        assert done.code == 130, (trial, done.err)
        assert "vaultmem: interrupted" in done.err
        assert not ref_lock.exists(), trial
        fsck = subprocess.run(["git", "-C", str(vault_path), "fsck", "--strict"], capture_output=True, text=True)
        assert fsck.returncode == 0, (trial, fsck.stderr)
        with Vault.open(vault_path, key=key) as reopened:
            assert reopened.verify().ok, trial
            written = reopened.history()
            assert 1 <= len(written) <= len(calls)
            VaultMemoryTool(reopened).call({"command": "create", "path": "/memories/after.txt", "file_text": "y\n"})
    assert interrupted >= 1
