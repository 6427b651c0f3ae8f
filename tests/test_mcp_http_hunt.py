"""``vaultmem mcp --http`` when its operator and its clients do what they
do: the operator stops the server (SIGTERM, Ctrl-C) while a write is being
answered, a client resumes its event stream with ``Last-Event-ID``, the
server listens on an IPv6 address, the token file is a dangling link or
readable by others.  Every server here is a real ``python -m vaultmem mcp
--http`` process on the loopback, spoken to by the official MCP client or by
raw HTTP.
"""

from __future__ import annotations

import fcntl
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_helpers import ACTOR, HttpServer, Result, Served, assert_clean, free_port, git_out, http_session, result_of
from test_mcp_hunt import with_automatic_sync

TIMEOUT = 60.0  # seconds: a bound on a server starting, answering or exiting, never an expectation of speed
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
HELLO = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": HELLO}


@pytest.fixture
def served(tmp_path: Path) -> Served:
    return Served.make(tmp_path / "mcp")


def token_of(served: Served) -> str:
    return (served.path / "vaultmem" / "mcp-token").read_text(encoding="ascii").strip()


def waits_for_lock(pid: int, lock: Path) -> bool:
    """Whether process ``pid`` waits for the ``flock`` on ``lock`` (Linux's /proc/locks)."""
    inode = os.stat(lock).st_ino
    blocked = re.compile(rf"^\d+: -> FLOCK\s+\S+\s+WRITE\s+{pid}\s+\S+:{inode}\s", re.MULTILINE)
    return bool(blocked.search(Path("/proc/locks").read_text(encoding="ascii")))


# -- the operator stops the server -------------------------------------------------------------


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux's /proc/locks to see the write waiting")
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_a_write_being_answered_when_the_server_is_stopped_gets_its_answer(
    served: Served, tmp_path: Path, stop: signal.Signals
) -> None:
    """The write is held at the vault's lock (another writer has it) while
    the operator stops the server.  It was made, so its client must get the
    answer: one that never comes makes an agent write it again (an insert
    twice).  The server then ends the client's event stream, exits, and the
    automatic sync pushes the write."""
    remote = tmp_path / "server.git"
    with_automatic_sync(served, remote)
    lock = served.path / "vaultmem" / "lock"
    answers: list[Result] = []
    trouble: list[BaseException] = []
    with HttpServer(served) as server:
        assert server.proc is not None
        pid = server.proc.pid

        async def client() -> None:
            with anyio.fail_after(TIMEOUT):
                async with http_session(server.url, token_of(served)) as (session, _init):
                    await session.list_tools()  # as clients do first: the call needs nothing more from the server
                    await session.call_tool("create", {"path": "/memories/notes.txt", "file_text": "start\n"})
                    holder = os.open(lock, os.O_RDWR)
                    try:
                        fcntl.flock(holder, fcntl.LOCK_EX)

                        async def stop_while_it_waits() -> None:
                            while not waits_for_lock(pid, lock):
                                await anyio.sleep(0.02)
                            os.kill(pid, stop)
                            await anyio.sleep(0.5)  # the server is stopping: it takes no new request
                            fcntl.flock(holder, fcntl.LOCK_UN)

                        async with anyio.create_task_group() as group:
                            group.start_soon(stop_while_it_waits)
                            arguments = {"path": "/memories/notes.txt", "insert_line": 0, "insert_text": "once\n"}
                            answers.append(result_of(await session.call_tool("insert", arguments)))
                    finally:
                        os.close(holder)

        try:
            anyio.run(client)
        except Exception as err:  # closing the session (its DELETE) finds the server gone
            trouble.append(err)
        assert answers == [Result("The file /memories/notes.txt has been edited.", False)], trouble
        assert server.proc.wait(TIMEOUT) == (-signal.SIGTERM if stop == signal.SIGTERM else 130)
        log = server.log_text()
    assert "Traceback" not in log and "ERROR" not in log, log
    with served.open() as vault:
        assert vault.read("/memories/notes.txt") == "once\nstart\n"
    pushed = git_out(remote, "log", "--format=%s", "main")
    assert pushed.splitlines()[0] == "memory: insert /memories/notes.txt"


def open_session(port: int, token: str) -> dict[str, str]:
    """A new MCP session over raw HTTP: the headers its later requests carry."""
    authorization = {"Authorization": f"Bearer {token}"}
    opened = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        opened.request("POST", "/mcp", json.dumps(INITIALIZE), {**ACCEPT, **authorization})
        response = opened.getresponse()
        session_id = response.getheader("mcp-session-id")
        response.read()
    finally:
        opened.close()
    assert response.status == 200 and session_id
    return {**authorization, "mcp-session-id": session_id, "mcp-protocol-version": "2025-11-25"}


def test_a_client_event_stream_open_when_the_server_is_stopped_ends_cleanly(served: Served) -> None:
    """A client's GET stream stays open while it waits for the server's
    messages.  SIGTERM ends it with its last chunk (the client sees the
    stream end, not a broken connection), the server exits, and its log
    holds no error."""
    with HttpServer(served) as server:
        assert server.proc is not None
        session = open_session(server.port, token_of(served))
        stream = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT)
        with stream:
            lines = [f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nAccept: text/event-stream\r\n"]
            lines += [f"{name}: {value}\r\n" for name, value in session.items()]
            stream.sendall(("".join(lines) + "\r\n").encode())
            head = b""
            while b"\r\n\r\n" not in head:
                head += stream.recv(4096)
            assert head.startswith(b"HTTP/1.1 200 ") and b"text/event-stream" in head
            server.proc.send_signal(signal.SIGTERM)
            rest = head.split(b"\r\n\r\n", 1)[1]
            while chunk := stream.recv(4096):
                rest += chunk
        assert rest.endswith(b"0\r\n\r\n"), rest
        assert server.proc.wait(TIMEOUT) == -signal.SIGTERM
        log = server.log_text()
    assert "ERROR" not in log and "Traceback" not in log, log


# -- a client resumes its event stream ---------------------------------------------------------


def test_a_client_resuming_its_event_stream_gets_a_new_one(served: Served) -> None:
    """A client that lost its GET stream reconnects with ``Last-Event-ID``.
    The server keeps no events to replay, so the client gets a new stream (as
    MCP allows), not a bare ``500 Internal Server Error`` and an error in the
    server's log."""
    with HttpServer(served) as server:
        session = open_session(server.port, token_of(served))
        for resumed in ("0", "some-event-id-the-server-never-sent"):
            stream = http.client.HTTPConnection("127.0.0.1", server.port, timeout=TIMEOUT)
            try:
                stream.request(
                    "GET", "/mcp", headers={**session, "Accept": "text/event-stream", "Last-Event-ID": resumed}
                )
                answer = stream.getresponse()
                assert answer.status == 200, answer.read()[:300]
                assert answer.getheader("content-type", "").startswith("text/event-stream")
            finally:
                stream.close()  # the client goes: the server ends that stream, and the next one may open
            time.sleep(0.2)
        log = server.log_text()
    assert "ERROR" not in log and "Traceback" not in log, log


# -- an IPv6 address ---------------------------------------------------------------------------


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


def post_initialize(port: int, token: str, headers: dict[str, str]) -> int:
    connection = http.client.HTTPConnection("::1", port, timeout=TIMEOUT)
    try:
        connection.request(
            "POST", "/mcp", json.dumps(INITIALIZE), {**ACCEPT, "Authorization": f"Bearer {token}", **headers}
        )
        response = connection.getresponse()
        assert_clean(response.read().decode("utf-8", "replace"), ())
        return response.status
    finally:
        connection.close()


@pytest.mark.skipif(not ipv6_loopback(), reason="this host has no IPv6 loopback")
@pytest.mark.parametrize("given", ["::1", "[::1]"])
def test_an_ipv6_address_is_served_and_announced_as_a_url_writes_it(served: Served, given: str) -> None:
    """``--host ::1``: the startup line gives a URL a client can use
    (``http://[::1]:PORT/mcp``), and a page at the server's own address
    (``Origin: http://[::1]:PORT``) is the server's own, as docs/mcp.md says."""
    port = free_port()
    log = served.home / "ipv6.log"
    with open(log, "wb") as errors:
        process = subprocess.Popen(
            served.command("--http", "--host", given, "--port", str(port), "--actor", ACTOR),
            env=served.env(),
            cwd=str(served.home),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errors,
        )
    try:
        deadline = time.monotonic() + TIMEOUT
        while True:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the server did not start"
            try:
                socket.create_connection(("::1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.05)
        first = log.read_text(encoding="utf-8").splitlines()[0]
        assert f" over MCP at http://[::1]:{port}/mcp as {ACTOR};" in first, first
        token = token_of(served)
        own: dict[str, Any] = {"Origin": f"http://[::1]:{port}"}
        assert post_initialize(port, token, own) == 200
        assert post_initialize(port, token, {"Host": f"[::1]:{port}"}) == 200
        assert post_initialize(port, token, {"Origin": "http://[::2]:1"}) == 403
        assert post_initialize(port, token, {"Host": "evil.example"}) == 421
    finally:
        process.terminate()
        process.wait(TIMEOUT)


# -- connections kept open between requests -----------------------------------------------------


def answered_and_kept(port: int, request: bytes) -> socket.socket:
    """A connection that sent ``request``, read its whole answer, and stays open (HTTP/1.1 keep-alive)."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    connection.sendall(request)
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = connection.recv(4096)
        assert chunk, f"closed before the answer: {head!r}"
        head += chunk
    length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
    body = head.split(b"\r\n\r\n", 1)[1]
    while len(body) < length:
        body += connection.recv(4096)
    return connection


@pytest.mark.parametrize("with_token", [False, True], ids=["refused-requests", "answered-requests"])
def test_connections_idle_between_requests_cannot_shut_out_a_client_with_the_token(
    served: Served, with_token: bool
) -> None:
    """With 256 files allowed the server holds 56 connections.  60 connections
    that each sent a request, got its answer (401 without the token, 404 for
    a session that is gone with it) and stay open, as HTTP/1.1 lets them (and
    as a client without the token can keep doing, a request every few
    seconds): the server still serves a client with the token at once."""
    with HttpServer(served, open_files=256) as server:
        token = token_of(served)
        authorization = f"Authorization: Bearer {token}\r\n" if with_token else ""
        request = (
            f"DELETE /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n{authorization}"
            "mcp-session-id: 0123456789abcdef0123456789abcdef\r\n\r\n"
        ).encode()
        kept: list[socket.socket] = []
        try:
            for _ in range(60):
                try:
                    kept.append(answered_and_kept(server.port, request))
                except OSError:  # the server closed a connection to take a new one: it is at its limit
                    break
            with server.session(token) as session:
                done = session.call("create", {"path": "/memories/let-in.txt", "file_text": "in\n"})
            assert done == Result("File created successfully at: /memories/let-in.txt", False)
        finally:
            for connection in kept:
                connection.close()
        log = server.log_text()
    assert "Traceback" not in log, log


def test_a_request_without_the_token_gets_its_401_and_the_connection_is_closed(served: Served) -> None:
    with HttpServer(served) as server:
        connection = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT)
        with connection:
            connection.sendall(f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n\r\n".encode())
            answer = b""
            while chunk := connection.recv(4096):  # ends when the server closes the connection
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 401 ")
        assert b"\r\nconnection: close\r\n" in answer.lower()


# -- the token file ------------------------------------------------------------------------------


def refused_start(served: Served, *options: str) -> str:
    """The one line ``vaultmem mcp --http`` prints when it refuses to start (exit 2)."""
    done = subprocess.run(
        served.command("--http", "--port", str(free_port()), *options),
        env=served.env(),
        cwd=str(served.home),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert "Traceback" not in line and "unexpected" not in line
    return line


def test_a_token_file_others_can_read_is_refused_by_its_name(served: Served) -> None:
    """The default token file is deep in the vault: the refusal names it, so
    the operator knows what to ``chmod 600``."""
    default = served.path.resolve() / "vaultmem" / "mcp-token"
    default.write_text("t" * 43 + "\n", encoding="ascii")
    default.chmod(0o644)
    line = refused_start(served)
    assert line == f"vaultmem: the token file {default} is readable by others (mode 0644); run `chmod 600` on it first."


def test_a_token_file_that_is_a_link_to_nothing_is_refused_and_left_alone(served: Served, tmp_path: Path) -> None:
    """``--token-file`` is a link to a secret not there yet: the server says
    so (not ``file exists``), makes nothing through the link, and starts once
    the token is there."""
    target = tmp_path / "secrets" / "mcp-token"
    link = tmp_path / "token-link"
    link.symlink_to(target)
    line = refused_start(served, "--token-file", str(link))
    assert line == (
        f"vaultmem: the token file {link} is a link to {target}, which does not exist; "
        "put the token there, or remove the link to get a new one."
    )
    assert not target.exists() and link.is_symlink()
    missing_folder = tmp_path / "no-such-folder" / "mcp-token"
    line = refused_start(served, "--token-file", str(missing_folder))
    assert line == f"vaultmem: cannot make the token file {missing_folder}: No such file or directory."


# -- Host and Origin in any case -----------------------------------------------------------------


def test_allowed_hosts_and_origins_match_in_any_case(served: Served) -> None:
    """Host names are the same in any case, and clients send them in lower
    case (httpx, every browser): ``--allow-host Vault.Example:*`` lets in
    ``Host: vault.example:PORT``, and ``--allow-origin https://Console.Example/``
    a browser page at ``https://console.example``; other names stay out."""
    options = ("--allow-host", "Vault.Example:*", "--allow-origin", "https://Console.Example/")
    with HttpServer(served, *options) as server:
        token = token_of(served)

        def status(headers: dict[str, str]) -> int:
            connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=TIMEOUT)
            try:
                sent = {**ACCEPT, "Authorization": f"Bearer {token}", **headers}
                connection.request("POST", "/mcp", json.dumps(INITIALIZE), sent)
                response = connection.getresponse()
                response.read()
                return response.status
            finally:
                connection.close()

        port = server.port
        assert status({"Host": f"vault.example:{port}"}) == 200
        assert status({"Host": "VAULT.example"}) == 200
        assert status({"Host": f"LocalHost:{port}"}) == 200
        assert status({"Origin": "https://console.example"}) == 200
        assert status({"Origin": f"HTTP://LOCALHOST:{port}"}) == 200
        assert status({"Host": f"vault.example.evil.example:{port}"}) == 421
        assert status({"Origin": "https://console.example.evil.example"}) == 403
        assert status({"Origin": "null"}) == 403
