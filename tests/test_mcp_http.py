"""``vaultmem mcp --http``: a real server process on 127.0.0.1 at a free port,
driven by the official MCP client and by raw HTTP requests.

The bearer token (from the token file or ``VAULTMEM_MCP_TOKEN``), the
Origin, Host and body size checks, the tools over streamable HTTP, and two
clients writing at once without losing an update, each recorded under its
own session.  Every result text is checked for a traceback or a host path.
"""

from __future__ import annotations

import json
import re
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from conftest import commit_count
from mcp import MCPError
from mcp_helpers import (
    ACTOR,
    CLIENT,
    HttpServer,
    Result,
    Served,
    assert_clean,
    commits,
    host_paths,
    http_session,
    result_of,
)

from vaultmem import VaultMemoryTool
from vaultmem.mcp.server import too_large

MAX_REQUEST = 10_000  # --max-request-bytes of the module's server; bodies over it + 64 KiB get 413
ALLOWED_ORIGIN = "https://console.example.com"
ALLOWED_HOST = "vault.internal.example:443"
PROXIED_HOST = "agents.example.com"  # allowed on any port (NAME:*), the default one included
SESSION = re.compile(rf"mcp-{CLIENT}-[A-Za-z0-9_-]{{12}}")
NINE_TOOLS = ["create", "delete", "diff", "history", "insert", "read_version", "rename", "str_replace", "view"]
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}
CLIENT_TIMEOUT = 60.0  # seconds: a bound on one client's whole conversation


@pytest.fixture(scope="module")
def hidden(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, ...]:
    return host_paths(tmp_path_factory)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, hidden: tuple[str, ...]) -> Iterator[HttpServer]:
    """One HTTP server for this module, its token in the default token file."""
    served = Served.make(tmp_path_factory.mktemp("mcp-http"), hidden)
    options = (
        *("--max-request-bytes", str(MAX_REQUEST), "--allow-origin", ALLOWED_ORIGIN),
        *("--allow-host", ALLOWED_HOST, "--allow-host", f"{PROXIED_HOST}:*"),
    )
    with HttpServer(served, *options) as running:
        yield running


@pytest.fixture(scope="module")
def token(server: HttpServer) -> str:
    return token_file(server).read_text(encoding="ascii").strip()


def token_file(server: HttpServer) -> Path:
    return server.served.path.resolve() / "vaultmem" / "mcp-token"


def post(server: HttpServer, body: Any, headers: dict[str, str]) -> httpx2.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
    response = httpx2.post(server.url, headers={**ACCEPT, **headers}, content=data, timeout=30.0)
    assert_clean(response.text, server.served.forbidden)
    return response


def exceptions_in(err: BaseException) -> list[BaseException]:
    """``err`` and everything grouped inside it."""
    found = [err]
    for inner in getattr(err, "exceptions", ()):
        found += exceptions_in(inner)
    return found


async def call(session: Any, name: str, arguments: dict[str, Any], hidden: tuple[str, ...]) -> Result:
    result = result_of(await session.call_tool(name, arguments))
    assert_clean(result.text, hidden)
    return result


# -- the token ---------------------------------------------------------------------------


def test_the_token_file_is_private_and_the_startup_line_names_it(server, token):
    path = token_file(server)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(token) >= 32
    first_line = server.log_text().splitlines()[0]
    assert first_line == (
        f"vaultmem: serving {server.served.path} over MCP at http://127.0.0.1:{server.port}/mcp as {ACTOR}; "
        f"clients send the token in {path}"
    )


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer not-the-token", "Basic dXNlcjpwYXNz", "Bearer", "TOKEN", "Bearer TOKEN extra", "Bearer TOKEN-"],
    ids=["none", "wrong", "basic", "scheme-alone", "token-alone", "trailing-word", "token-and-more"],
)
def test_a_request_without_the_right_token_gets_401(server, token, authorization):
    before = commit_count(server.served.path)
    headers = {} if authorization is None else {"Authorization": authorization.replace("TOKEN", token)}
    create = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "create", "arguments": {"path": "/memories/no-token.txt", "file_text": "x"}},
    }
    for body in (INITIALIZE, create):
        response = post(server, body, headers)
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == 'Bearer realm="vaultmem"'
        assert response.headers["content-type"].startswith("application/json")
        assert "error" in response.json()
        assert token not in response.text
    assert httpx2.get(server.url, headers=headers, timeout=30.0).status_code == 401
    assert httpx2.delete(server.url, headers=headers, timeout=30.0).status_code == 401
    assert commit_count(server.served.path) == before


@pytest.mark.parametrize("sent", [None, "wrong-token-" + "x" * 40])
def test_the_official_client_fails_cleanly_without_the_right_token(server, sent):
    before = commit_count(server.served.path)

    async def connect() -> None:
        with anyio.fail_after(CLIENT_TIMEOUT):
            async with http_session(server.url, sent) as (session, _init):
                await session.call_tool("create", {"path": "/memories/refused.txt", "file_text": "x"})

    with pytest.raises(Exception) as info:  # the SDK raises a group around its MCPError
        anyio.run(connect)
    found = exceptions_in(info.value)
    assert not any(isinstance(err, TimeoutError) for err in found), found
    assert any(isinstance(err, MCPError) for err in found), found
    assert commit_count(server.served.path) == before


def test_the_token_can_come_from_the_environment(tmp_path, hidden):
    served = Served.make(tmp_path / "mcp", hidden)
    env_token = "env-token-" + "t" * 40
    unused = tmp_path / "unused-token"
    with HttpServer(served, "--token-file", str(unused), env={"VAULTMEM_MCP_TOKEN": env_token}) as running:
        assert running.log_text().splitlines()[0].endswith("; clients send the token in VAULTMEM_MCP_TOKEN")
        assert not unused.exists()
        assert not (served.path / "vaultmem" / "mcp-token").exists()
        assert post(running, INITIALIZE, {}).status_code == 401
        assert post(running, INITIALIZE, {"Authorization": "Bearer not-it"}).status_code == 401
        with running.session(env_token) as session:
            assert sorted(tool.name for tool in session.tools()) == NINE_TOOLS
            assert session.call("create", {"path": "/memories/env.txt", "file_text": "e\n"}) == Result(
                "File created successfully at: /memories/env.txt", False
            )
    assert [author for _c, author, _s in commits(served.path)] == [ACTOR]


@pytest.mark.parametrize(
    ("token", "words"),
    [
        ("too-short", "shorter than 32 characters"),
        ("clé-" + "x" * 40, "characters a bearer token cannot"),
        ("two words " + "x" * 40, "characters a bearer token cannot"),
        (" " * 40, "shorter than 32 characters"),
    ],
    ids=["short", "not-ascii", "space", "blank"],
)
def test_a_token_clients_could_not_send_is_refused_before_serving(tmp_path, hidden, token, words):
    served = Served.make(tmp_path / "mcp", hidden)
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n", encoding="utf-8")
    token_file.chmod(0o600)
    from_env = "VAULTMEM_MCP_TOKEN" if token.strip() else str(token_file)  # a blank variable is no token
    for env, source in (({"VAULTMEM_MCP_TOKEN": token}, from_env), ({}, str(token_file))):
        result = subprocess.run(
            served.command("--http", "--port", "1", "--token-file", str(token_file)),
            env=served.env(**env),
            cwd=str(served.home),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 2, result.stderr
        (line,) = result.stderr.splitlines()
        assert source in line and words in line, line
        assert "unexpected" not in line


def test_a_short_environment_token_is_refused_before_serving(tmp_path, hidden):
    served = Served.make(tmp_path / "mcp", hidden)
    result = subprocess.run(
        served.command("--http", "--port", "1"),
        env=served.env(VAULTMEM_MCP_TOKEN="too-short"),
        cwd=str(served.home),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "VAULTMEM_MCP_TOKEN" in result.stderr
    assert "32 characters" in result.stderr
    assert "Traceback" not in result.stderr


# -- Origin, Host and size ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "status"),
    [
        ({"Origin": "http://evil.example"}, 403),
        ({"Origin": "https://console.example.com.evil.example"}, 403),
        ({"Origin": "null"}, 403),
        ({"Host": "evil.example"}, 421),
        ({"Host": "evil.example:80"}, 421),
        ({"Host": "vault.internal.example:8443"}, 421),  # the allowed name, another port
        ({"Host": ALLOWED_HOST}, 200),  # the name a proxy or a remote client reaches it by
        ({}, 200),
        ({"Origin": ALLOWED_ORIGIN}, 200),
        ({"Origin": "http://127.0.0.1:PORT"}, 200),
        ({"Host": "127.0.0.1"}, 200),  # any port includes none
        ({"Host": "localhost"}, 200),
        ({"Origin": "http://localhost"}, 200),
        ({"Host": PROXIED_HOST}, 200),  # a TLS proxy on 443 passes the name on without a port
        ({"Host": f"{PROXIED_HOST}:8443"}, 200),
        ({"Host": f"{PROXIED_HOST}.evil.example"}, 421),
        ({"Host": "vault.internal.example"}, 421),  # allowed on 443 only
        ({"Host": "127.0.0.1:PORT@evil.example"}, 421),  # the SDK's 127.0.0.1:* pattern passes any tail
        ({"Host": "localhost:PORT.evil.example"}, 421),
        ({"Host": "127.0.0.1:"}, 421),
        ({"Origin": "http://127.0.0.1:PORT@evil.example"}, 403),
        ({"Origin": "http://localhost:PORT/evil"}, 403),
        ({"Host": "127.0.0.1:99999"}, 421),  # no port is above 65535
        ({"Host": "localhost:65536"}, 421),
        ({"Host": "127.0.0.1:0"}, 421),  # nor 0
        ({"Host": "127.0.0.1:65535"}, 200),
        ({"Origin": "http://127.0.0.1:99999"}, 403),
        ({"Origin": "http://localhost:00000"}, 403),
    ],
)
def test_origin_and_host_are_checked_after_the_token(server, token, extra, status):
    headers = {name: value.replace("PORT", str(server.port)) for name, value in extra.items()}
    response = post(server, INITIALIZE, {"Authorization": f"Bearer {token}", **headers})
    assert response.status_code == status, response.text[:300]
    if status != 200:
        assert "mcp-session-id" not in response.headers
    assert post(server, INITIALIZE, headers).status_code == 401  # the token comes first


def test_an_oversized_body_gets_413_and_writes_nothing(server, token):
    before = commit_count(server.served.path)
    arguments = {"path": "/memories/huge-body.txt", "file_text": "x" * (MAX_REQUEST + 70_000)}
    body = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "create", "arguments": arguments}}
    response = post(server, body, {"Authorization": f"Bearer {token}"})
    assert response.status_code == 413
    assert commit_count(server.served.path) == before
    assert post(server, INITIALIZE, {"Authorization": f"Bearer {token}"}).status_code == 200  # still serving


# -- the tools over HTTP -------------------------------------------------------------------


def test_the_official_client_lists_and_calls_the_tools(server, token):
    before = commit_count(server.served.path)
    with server.session(token) as session:
        assert session.init is not None
        assert (session.init.instructions or "").startswith("IMPORTANT: ALWAYS VIEW YOUR MEMORY DIRECTORY")
        tools = {tool.name: tool for tool in session.tools()}
        assert sorted(tools) == NINE_TOOLS
        assert tools["delete"].annotations is not None and tools["delete"].annotations.destructive_hint is True
        path = "/memories/http/notes.txt"
        assert session.call("create", {"path": path, "file_text": "one\n"}) == Result(
            f"File created successfully at: {path}", False
        )
        assert session.call("create", {"path": path, "file_text": "again"}) == Result(
            f"Error: File {path} already exists", True
        )
        assert session.call("insert", {"path": path, "insert_line": 1, "insert_text": "two\n"}) == Result(
            f"The file {path} has been edited.", False
        )
        assert session.call("view", {"path": path}) == Result(
            f"Here's the content of {path} with line numbers:\n     1\tone\n     2\ttwo", False
        )
        assert session.call("view", {"command": "delete", "path": path}).is_error
        big = {"path": "/memories/http/big.txt", "file_text": "y" * 20_000}
        refused = session.call("create", big)
        sent = re.fullmatch(r"Error: the request is ([0-9,]+) bytes, .*", refused.text)
        assert refused.is_error and sent is not None, refused
        size = int(sent.group(1).replace(",", ""))  # the body as the client sent it: the arguments and more
        assert size > len(json.dumps(big).encode("utf-8"))
        assert refused.text == too_large(size, MAX_REQUEST)
        history = session.call("history", {"path": path})
        assert not history.is_error
        lines = history.text.splitlines()
        assert len(lines) == 2
        sessions = {line.split("  ")[3] for line in lines}
        assert len(sessions) == 1
        assert SESSION.fullmatch(sessions.pop())
        assert {line.split("  ")[2] for line in lines} == {ACTOR}
    assert commit_count(server.served.path) == before + 2


def sse_messages(response: httpx2.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a response, sent as JSON or as server-sent events."""
    if response.headers["content-type"].startswith("application/json"):
        return [response.json()]
    return [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")]


def test_a_version_written_over_http_names_the_mcp_session_id(server, token, hidden):
    """The session trailer is ``mcp-<client name>-<first 12 characters of the mcp-session-id>``."""
    auth = {"Authorization": f"Bearer {token}"}
    opened = post(server, INITIALIZE, auth)
    assert opened.status_code == 200
    session_id = opened.headers["mcp-session-id"]
    assert len(session_id) >= 12
    headers = {**auth, "mcp-session-id": session_id, "mcp-protocol-version": "2025-11-25"}
    assert post(server, {"jsonrpc": "2.0", "method": "notifications/initialized"}, headers).status_code == 202
    path = "/memories/raw/by-id.txt"
    body = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "create", "arguments": {"path": path, "file_text": "raw\n"}},
    }
    response = post(server, body, headers)
    assert response.status_code == 200
    (message,) = sse_messages(response)
    assert message["result"]["isError"] is False
    assert message["result"]["content"] == [{"type": "text", "text": f"File created successfully at: {path}"}]
    assert_clean(response.text, hidden)
    with server.served.open() as vault:
        (version,) = vault.history(path=path)
    assert (version.actor, version.session) == (ACTOR, f"mcp-raw-{session_id[:12]}")
    assert (version.id, ACTOR, f"mcp-raw-{session_id[:12]}") in commits(server.served.path)


def test_two_clients_writing_at_once_lose_no_update(server, token, hidden):
    """Two sessions at once, each creating, editing its own file and inserting
    into one shared file: every acknowledged write is there after, one commit
    each, and each session's commits carry its own session trailer."""
    served = server.served
    shared = "/memories/race/shared.txt"
    with served.open() as vault:
        VaultMemoryTool(vault, actor="setup").call({"command": "create", "path": shared, "file_text": "start\n"})
    before = commit_count(served.path)
    acknowledged: dict[str, list[tuple[str, dict[str, Any]]]] = {"a": [], "b": []}
    refused: list[Result] = []
    opened: list[str] = []

    async def writer(tag: str, both_open: anyio.Event) -> None:
        own = f"/memories/race/{tag}.txt"
        calls: list[tuple[str, dict[str, Any]]] = [("create", {"path": own, "file_text": "count: 0\n"})]
        for i in range(10):
            calls.append(("insert", {"path": shared, "insert_line": 1, "insert_text": f"{tag} {i}\n"}))
            calls.append(("str_replace", {"path": own, "old_str": f"count: {i}\n", "new_str": f"count: {i + 1}\n"}))
            if i % 4 == 0:
                calls.append(("create", {"path": f"/memories/race/{tag}-{i}.txt", "file_text": f"{tag} made {i}\n"}))
        with anyio.fail_after(CLIENT_TIMEOUT):
            async with http_session(server.url, token) as (session, _init):
                opened.append(tag)
                if len(opened) == 2:
                    both_open.set()
                await both_open.wait()  # both sessions are open before either writes
                for name, arguments in calls:
                    result = await call(session, name, arguments, hidden)
                    if result.is_error:
                        refused.append(result)
                    else:
                        acknowledged[tag].append((name, arguments))

    async def both() -> None:
        both_open = anyio.Event()
        async with anyio.create_task_group() as group:
            group.start_soon(writer, "a", both_open)
            group.start_soon(writer, "b", both_open)

    anyio.run(both)
    for result in refused:  # a refusal is a clean message, never a lost or half-made write
        assert result.text.startswith("Error: "), result
    acks = acknowledged["a"] + acknowledged["b"]
    assert len(acks) >= 20
    assert commit_count(served.path) == before + len(acks)

    with served.open() as vault:
        shared_lines = vault.read(shared).splitlines()
        assert shared_lines[0] == "start"
        inserted = sorted(args["insert_text"].strip() for name, args in acks if name == "insert")
        assert sorted(shared_lines[1:]) == inserted
        for tag in ("a", "b"):
            edits = sum(1 for name, _args in acknowledged[tag] if name == "str_replace")
            assert vault.read(f"/memories/race/{tag}.txt") == f"count: {edits}\n"
        made = [args for name, args in acks if name == "create" and "-" in Path(args["path"]).name]
        for args in made:
            assert vault.read(args["path"]) == args["file_text"]
        report = vault.verify()
        assert report.ok, report.problems
        owners = {tag: {v.session for v in vault.history(path=f"/memories/race/{tag}.txt")} for tag in ("a", "b")}

    race = commits(served.path)[: len(acks)]
    assert {author for _c, author, _s in race} == {ACTOR}
    by_session: dict[str, int] = {}
    for _commit, _author, session in race:
        by_session[session] = by_session.get(session, 0) + 1
    assert len(by_session) == 2
    assert all(SESSION.fullmatch(session) for session in by_session), by_session
    assert len(owners["a"]) == 1 and len(owners["b"]) == 1 and owners["a"] != owners["b"]
    for tag in ("a", "b"):
        (session,) = owners[tag]
        assert by_session[session] == len(acknowledged[tag])


def _stalled(port: int, sent: bytes) -> socket.socket:
    connection = socket.create_connection(("127.0.0.1", port), timeout=10.0)
    connection.sendall(sent)
    return connection


def _closed_by_server(connection: socket.socket, within: float) -> bool:
    connection.settimeout(within)
    try:
        return connection.recv(1024) == b""
    except TimeoutError:
        return False
    except OSError:  # reset
        return True


def test_a_connection_that_does_not_send_a_whole_request_in_time_is_closed(tmp_path, hidden):
    served = Served.make(tmp_path / "mcp", hidden)
    with HttpServer(served, "--request-timeout", "1") as running:
        token = (served.path.resolve() / "vaultmem" / "mcp-token").read_text(encoding="ascii").strip()
        body = json.dumps(INITIALIZE).encode()
        head = (
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{running.port}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        silent = _stalled(running.port, b"")
        half_head = _stalled(running.port, b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        half_body = _stalled(running.port, head + body[:10])  # the token, and a body cut short
        started = time.monotonic()
        for connection in (silent, half_head, half_body):
            assert _closed_by_server(connection, within=20.0)
            connection.close()
        assert 0.9 <= time.monotonic() - started < 20.0
        whole = _stalled(running.port, head + body)  # in time: answered
        whole.settimeout(20.0)
        assert whole.recv(1024).startswith(b"HTTP/1.1 200 ")
        whole.close()
        assert "Traceback" not in running.log_text()


def test_connections_that_never_send_a_request_cannot_shut_out_a_client_with_the_token(tmp_path, hidden):
    """With 256 files allowed, 300 connections that never finish a request:
    each new one closes the oldest of them, the server keeps its files and
    serves the client with the token at once."""
    served = Served.make(tmp_path / "mcp", hidden)
    with HttpServer(served, open_files=256) as running:
        token = (served.path.resolve() / "vaultmem" / "mcp-token").read_text(encoding="ascii").strip()
        stalled = [_stalled(running.port, b"POST /mcp HTTP/1.1\r\n") for _ in range(300)]
        try:
            assert post(running, INITIALIZE, {"Authorization": f"Bearer {token}"}).status_code == 200
            closed = sum(_closed_by_server(connection, within=0.05) for connection in stalled)
            assert closed >= 300 - 256
        finally:
            for connection in stalled:
                connection.close()
        with running.session(token) as session:
            assert not session.call("create", {"path": "/memories/still.txt", "file_text": "s\n"}).is_error
        assert running.proc is not None and running.proc.poll() is None
        log = running.log_text()
        assert "Traceback" not in log and "Logging error" not in log
        assert len(log.splitlines()) <= 5, log[-2000:]


def test_the_server_log_holds_no_traceback(server, token):
    """Refusals, limits and wrong tokens above are answers, not failures of the server."""
    with server.session(token) as session:
        assert session.call("delete", {"path": "/memories"}).is_error
    assert "Traceback" not in server.log_text()


# -- a message the SDK cannot read: answered as over stdio ------------------------------------


NOT_A_REQUEST = (
    "Error: the message is not a JSON-RPC request this memory server takes (one JSON object a message, "
    "no batches, each field of its kind); nothing was changed."
)


@pytest.mark.parametrize(
    ("body", "ident"),
    [
        ([INITIALIZE], 1),  # a batch: the id of the request in it, as stdio finds it
        ({**INITIALIZE, "id": 7, "params": 5}, 7),  # params that are not an object
        ({**INITIALIZE, "id": "eight", "method": 8}, "eight"),  # a method that is not a name
    ],
    ids=["batch", "params", "method"],
)
def test_a_message_the_sdk_cannot_read_gets_the_answer_stdio_gives(server, token, body, ident):
    """Over stdio such a message is answered -32600 with its id; over HTTP the
    SDK answered -32602 with its validator's text.  Both now say the same."""
    before = commit_count(server.served.path)
    response = post(server, body, {"Authorization": f"Bearer {token}"})
    assert response.status_code == 400, response.text[:300]
    assert response.json() == {"jsonrpc": "2.0", "id": ident, "error": {"code": -32600, "message": NOT_A_REQUEST}}
    assert commit_count(server.served.path) == before
    assert post(server, body, {}).status_code == 401  # the token still comes first
    assert post(server, INITIALIZE, {"Authorization": f"Bearer {token}"}).status_code == 200  # still serving
