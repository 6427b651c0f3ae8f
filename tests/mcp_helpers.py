"""Shared helpers for tests/test_mcp.py and tests/test_mcp_http.py: a real
``vaultmem mcp`` process, driven by the official MCP client.

A stdio server is the client's own child process; an HTTP server is started
on 127.0.0.1 at a free port and stopped after.  :class:`SyncSession` runs an
MCP client session on its own thread's event loop, so a plain test calls
the tools one at a time; every result it returns has already been checked
for a traceback or a host path.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from anthropic.lib.tools import ToolError
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.types import CallToolResult, Implementation, InitializeResult, TextContent, Tool

from vaultmem import Vault, VaultMemoryTool, generate_key

CLIENT = "claude-code"  # the client name every session reports unless a test says otherwise
ACTOR = "desk-agent"  # the --actor of the servers the tests start
CALL_TIMEOUT = 60.0  # seconds: a bound on one tool call, never an expectation of speed
START_TIMEOUT = 60.0  # seconds: a bound on a server starting and its session opening
STOP_TIMEOUT = 15.0
SESSION_TRAILER = "Vaultmem-Session"

T = TypeVar("T")
Opener = Callable[[], AbstractAsyncContextManager[tuple[ClientSession, InitializeResult]]]


@dataclass(frozen=True)
class Result:
    """One tool result as a client sees it: its text and whether it is an error."""

    text: str
    is_error: bool


def result_of(result: CallToolResult) -> Result:
    """The single text block of a tool result; anything else fails the test."""
    assert len(result.content) == 1, f"expected one content block, got {result.content!r}"
    block = result.content[0]
    assert isinstance(block, TextContent), f"expected text, got {block!r}"
    return Result(block.text, bool(result.is_error))


def reference(tool: VaultMemoryTool, params: dict[str, Any]) -> Result:
    """What ``VaultMemoryTool.call`` gives for ``params``, as a :class:`Result`."""
    try:
        return Result(tool.call(params), False)
    except ToolError as err:
        assert isinstance(err.content, str)
        return Result(err.content, True)


def host_paths(tmp_path_factory: Any) -> tuple[str, ...]:
    """The host paths no result may show: every test's temporary folder is below this one."""
    base = tmp_path_factory.getbasetemp()
    return (str(base), str(base.resolve()))


def assert_clean(text: str, forbidden: Iterable[str]) -> None:
    """A result never holds a traceback or a path of the host."""
    assert "Traceback" not in text, f"a traceback reached the client: {text[:500]!r}"
    for secret in forbidden:
        assert secret not in text, f"{secret!r} (a host path) reached the client: {text[:500]!r}"


# -- vaults for a server -------------------------------------------------------------------


@dataclass
class Served:
    """A vault a server serves, the key that opens it, and the clean HOME the
    server runs with.  ``forbidden`` holds the host paths no result may show."""

    path: Path
    key: str
    home: Path
    forbidden: tuple[str, ...] = field(default=())

    @classmethod
    def make(cls, folder: Path, forbidden: Sequence[str] = ()) -> Served:
        """A new, empty vault in ``folder`` (with a fresh HOME beside it)."""
        folder.mkdir(parents=True, exist_ok=True)
        home = folder / "home"
        home.mkdir()
        key = generate_key()
        path = folder / "memory.vault"
        Vault.init(path, key=key).close()
        hidden = {str(path), str(path.resolve()), str(folder), str(folder.resolve()), str(home), *forbidden}
        return cls(path=path, key=key, home=home, forbidden=tuple(sorted(hidden)))

    def open(self) -> Vault:
        return Vault.open(self.path, key=self.key)

    def env(self, **extra: str) -> dict[str, str]:
        """The server's whole environment: the key, a clean HOME, PATH for git,
        and this checkout's vaultmem first on the import path."""
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "VAULTMEM_KEY": self.key,
            **extra,
        }

    def command(self, *options: str) -> list[str]:
        return [sys.executable, "-m", "vaultmem", "mcp", "--vault", str(self.path), *options]


# -- client sessions -------------------------------------------------------------------


@contextlib.asynccontextmanager
async def stdio_session(
    served: Served, *options: str, client: str = CLIENT
) -> AsyncIterator[tuple[ClientSession, InitializeResult]]:
    """``vaultmem mcp --vault V OPTIONS`` as the client's child process, its
    standard error kept in HOME/server.log."""
    params = StdioServerParameters(
        command=sys.executable,
        args=served.command(*options)[1:],
        env=served.env(),
        cwd=str(served.home),
    )
    info = Implementation(name=client, version="1.0")
    with open(served.home / "server.log", "a", encoding="utf-8") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, client_info=info) as session,
        ):
            init = await session.initialize()
            yield session, init


@contextlib.asynccontextmanager
async def http_session(
    url: str, token: str | None, *, client: str = CLIENT, headers: dict[str, str] | None = None
) -> AsyncIterator[tuple[ClientSession, InitializeResult]]:
    """A streamable HTTP session with ``url``, sending ``token`` as the bearer token (None: no token)."""
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    info = Implementation(name=client, version="1.0")
    async with (
        create_mcp_http_client(headers=sent) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write, client_info=info) as session,
    ):
        init = await session.initialize()
        yield session, init


class SyncSession:
    """An MCP client session run on its own thread's event loop, so a plain
    test calls the tools one after another.  Use as a context manager."""

    def __init__(self, opener: Opener, forbidden: Iterable[str] = ()) -> None:
        self._opener = opener
        self.forbidden = tuple(forbidden)
        self.texts: list[str] = []  # every result text this session received
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._session: ClientSession | None = None
        self.init: InitializeResult | None = None
        self._thread = threading.Thread(target=self._main, name="mcp-client", daemon=True)

    def __enter__(self) -> SyncSession:
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT):
            raise AssertionError(f"the MCP session did not open within {START_TIMEOUT:.0f} s")
        if self._failure is not None:
            raise AssertionError(f"the MCP session failed to open: {self._failure!r}") from self._failure
        assert self.init is not None
        assert_clean(self.init.instructions or "", self.forbidden)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop ended on its own
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(STOP_TIMEOUT + 5)
        assert not self._thread.is_alive(), "the MCP session did not close"

    def _main(self) -> None:
        asyncio.run(self._hold())

    async def _hold(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        try:
            async with self._opener() as (session, init):
                self._session, self.init = session, init
                self._ready.set()
                await self._stop.wait()
        except BaseException as err:  # reported to the test by __enter__ or the next call
            self._failure = err
        finally:
            self._session = None
            self._ready.set()

    def run(self, make: Callable[[ClientSession], Coroutine[Any, Any, T]]) -> T:
        session, loop = self._session, self._loop
        if session is None or loop is None:
            raise AssertionError(f"the MCP session is closed ({self._failure!r})")
        return asyncio.run_coroutine_threadsafe(make(session), loop).result(CALL_TIMEOUT)

    def tools(self) -> list[Tool]:
        return self.run(lambda s: s.list_tools()).tools

    def call(self, name: str, arguments: dict[str, Any] | None) -> Result:
        result = result_of(self.run(lambda s: s.call_tool(name, arguments)))
        assert_clean(result.text, self.forbidden)
        self.texts.append(result.text)
        return result


def stdio(served: Served, *options: str, client: str = CLIENT) -> SyncSession:
    """A :class:`SyncSession` with a new ``vaultmem mcp`` stdio process."""
    return SyncSession(lambda: stdio_session(served, *options, client=client), served.forbidden)


# -- an HTTP server process ----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class HttpServer:
    """``vaultmem mcp --http`` on 127.0.0.1 at a free port, as a real process.
    Use as a context manager: it is stopped (terminated, killed after a
    bounded wait) however the test ends."""

    def __init__(
        self, served: Served, *options: str, env: dict[str, str] | None = None, open_files: int | None = None
    ) -> None:
        self.served = served
        self.options = options
        self.extra_env = env or {}
        self.open_files = open_files  # the server process's limit on open files (ulimit -n)
        self.port = 0
        self.log = served.home / "http-server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def __enter__(self) -> HttpServer:
        try:
            for _attempt in range(3):  # another process may take the free port first
                if self._start():
                    return self
                assert self.proc is not None
                if "cannot listen" not in self.log_text():
                    break
            raise AssertionError(f"vaultmem mcp --http did not start: {self.log_text()[-2000:]}")
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start(self) -> bool:
        self.stop()
        self.port = free_port()
        command = self.served.command("--http", "--port", str(self.port), "--actor", ACTOR, *self.options)
        if self.open_files is not None:
            command = ["bash", "-c", f'ulimit -n {self.open_files} && exec "$@"', "bash", *command]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                command,
                env=self.served.env(**self.extra_env),
                cwd=str(self.served.home),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return True
            except OSError:
                time.sleep(0.05)
        return False

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT)

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""

    def session(self, token: str | None, *, client: str = CLIENT) -> SyncSession:
        return SyncSession(lambda: http_session(self.url, token, client=client), self.served.forbidden)


# -- what git shows ----------------------------------------------------------------------


def git_out(vault_path: Path, *args: str) -> str:
    result = subprocess.run(["git", "-C", str(vault_path), *args], capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"git {' '.join(args)} failed: {result.stderr}"
    return result.stdout


def commits(vault_path: Path) -> list[tuple[str, str, str]]:
    """Every commit of main, newest first, as stock git reads it: (id, author name, session trailer)."""
    head = subprocess.run(
        ["git", "-C", str(vault_path), "rev-parse", "--verify", "-q", "refs/heads/main"],
        capture_output=True,
        check=False,
    )
    if head.returncode != 0:  # no memory written yet
        return []
    fmt = f"%H%x1f%an%x1f%(trailers:key={SESSION_TRAILER},valueonly=true,separator=%x2c)%x1e"
    out = git_out(vault_path, "log", f"--format={fmt}", "refs/heads/main")
    rows = []
    for record in out.split("\x1e"):
        record = record.strip("\n")
        if record:
            commit, author, session = record.split("\x1f")
            rows.append((commit, author, session.strip()))
    return rows


def memory_files(vault: Vault, vault_path: Path) -> dict[str, str]:
    """Every memory file on main and its text, read back through the vault."""
    result = subprocess.run(
        ["git", "-C", str(vault_path), "ls-tree", "-r", "-z", "--name-only", "refs/heads/main"],
        capture_output=True,
        text=True,
        check=False,
    )
    return {"/" + name: vault.read("/" + name) for name in result.stdout.split("\0") if name}
