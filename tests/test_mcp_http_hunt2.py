"""``vaultmem mcp --http`` against clients that send what they should not:
a request whose id is neither a string nor an integer, two
``Authorization`` headers, a stream of requests that are not HTTP at all.
Every server here is a real ``python -m vaultmem mcp --http`` process on the
loopback, spoken to by raw HTTP (http.client and sockets).
"""

from __future__ import annotations

import fcntl
import http.client
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import HttpServer, Served
from test_mcp_http_hunt import ACCEPT, open_session, token_of, waits_for_lock

TIMEOUT = 60.0  # seconds: a bound on a server starting, answering or exiting, never an expectation of speed
WRONG_ID = (
    "Error: the request's id must be a string or an integer (MCP allows no other id, not null either); "
    "nothing was changed."
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    served = Served.make(tmp_path_factory.mktemp("mcp-http-hunt2"))
    with HttpServer(served) as running:
        yield running


@pytest.fixture(scope="module")
def session(server: HttpServer) -> dict[str, str]:
    return open_session(server.port, token_of(server.served))


def post(server: HttpServer, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=TIMEOUT)
    try:
        connection.request("POST", "/mcp", body, headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def answer_of(status: int, body: bytes) -> dict[str, Any]:
    """The JSON-RPC message of an answer, sent as JSON or as one server-sent event."""
    text = body.decode("utf-8")
    if text.startswith(("event:", "data:", "id:", "retry:")):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:") and line[5:].strip())
    answer = json.loads(text)
    assert isinstance(answer, dict), (status, body)
    return answer


# -- a request whose id is not a string or an integer ------------------------------------------


@pytest.mark.parametrize(
    ("ident", "echoed"),
    [(None, None), (1.5, 1.5), (True, None), ({}, None), ([3], None)],
    ids=["null", "fraction", "true", "object", "array"],
)
def test_a_request_whose_id_is_not_a_string_or_an_integer_is_answered(
    server: HttpServer, session: dict[str, str], ident: object, echoed: object
) -> None:
    """The SDK takes such a request for a notification and answers ``202
    Accepted`` with no body: its client waits for an answer that never comes,
    and a write it asked for is neither made nor refused.  docs/mcp.md
    promises every request an answer: it gets ``400`` with the JSON-RPC
    error stdio gives it, nothing is written, and the session goes on."""
    path = f"/memories/wrong-id-{json.dumps(ident).strip('[]{}') or 'x'}.txt"
    call = {"name": "create", "arguments": {"path": path, "file_text": "never\n"}}
    request = {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": call}
    status, body = post(server, json.dumps(request).encode(), {**ACCEPT, **session})
    assert status == 400, (status, body)
    assert answer_of(status, body) == {"jsonrpc": "2.0", "id": echoed, "error": {"code": -32600, "message": WRONG_ID}}
    listed = {"jsonrpc": "2.0", "id": 2, "method": "resources/list"}
    status, body = post(server, json.dumps(listed).encode(), {**ACCEPT, **session})
    assert status == 200 and answer_of(status, body)["id"] == 2, body
    view = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "view", "arguments": {"path": path}}}
    status, body = post(server, json.dumps(view).encode(), {**ACCEPT, **session})
    assert "does not exist" in json.dumps(answer_of(status, body)), body


def test_a_request_with_a_wrong_id_still_meets_the_host_and_origin_checks_first(
    server: HttpServer, session: dict[str, str]
) -> None:
    """The answer to a wrong id comes after the checks against DNS
    rebinding, as every other answer does: a page of another site learns
    nothing from it."""
    request = json.dumps({"jsonrpc": "2.0", "id": None, "method": "tools/list"}).encode()
    status, _body = post(server, request, {**ACCEPT, **session, "Host": "attacker.example:80"})
    assert status == 421
    status, _body = post(server, request, {**ACCEPT, **session, "Origin": "http://attacker.example"})
    assert status == 403


# -- two requests of one session with one id -------------------------------------------------


def call(ident: object, name: str, arguments: dict[str, str]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


def create(path: str, ident: object) -> bytes:
    return json.dumps(call(ident, "create", {"path": path, "file_text": "text\n"})).encode()


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux's /proc/locks to see the write waiting")
@pytest.mark.parametrize("second", [1, "1"], ids=["same-id", "same-id-as-a-string"])
def test_a_request_reusing_the_id_of_one_being_answered_is_refused(
    server: HttpServer, session: dict[str, str], second: object
) -> None:
    """A client (or two threads sharing a session) sends a request while
    another with the same id, or the same number as a string, is still
    being answered.  The second one got the first one's answer (``File
    created successfully at: /memories/first.txt`` for a write of another
    file), and the first waited for its answer forever.  The second is
    refused now, at once and with nothing written; the first gets its own
    answer, and the id serves again once it is answered."""
    lock = server.served.path / "vaultmem" / "lock"
    assert server.proc is not None
    answers: dict[str, tuple[int, bytes]] = {}

    def first() -> None:
        answers["first"] = post(server, create("/memories/first.txt", 1), {**ACCEPT, **session})

    holder = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)  # another writer: the first request waits for the lock
        waiting = threading.Thread(target=first)
        waiting.start()
        try:
            deadline = TIMEOUT
            while not waits_for_lock(server.proc.pid, lock) and deadline > 0:
                waiting.join(0.02)
                deadline -= 0.02
            status, body = post(server, create("/memories/second.txt", second), {**ACCEPT, **session})
        finally:
            fcntl.flock(holder, fcntl.LOCK_UN)
            waiting.join(TIMEOUT)
    finally:
        os.close(holder)
    assert status == 400, body
    refused = answer_of(status, body)
    assert refused["id"] == second and refused["error"]["code"] == -32600, refused
    assert "is still being answered in this session; nothing was changed" in refused["error"]["message"]
    status, body = answers["first"]
    assert status == 200 and "/memories/first.txt" in json.dumps(answer_of(status, body)), body
    status, body = post(server, create("/memories/second.txt", second), {**ACCEPT, **session})
    assert "File created successfully at: /memories/second.txt" in json.dumps(answer_of(status, body)), body
    for path in ("/memories/first.txt", "/memories/second.txt"):  # the next run of the test writes them anew
        post(server, json.dumps(call(9, "delete", {"path": path})).encode(), {**ACCEPT, **session})


# -- two Authorization headers -----------------------------------------------------------------


def raw_post(port: int, head: list[str], body: bytes) -> bytes:
    """``body`` POSTed with the header lines ``head`` exactly as given (two of one name too); the answer's bytes."""
    lines = [f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n", *(f"{line}\r\n" for line in head)]
    lines.append(f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as connection:
        connection.sendall("".join(lines).encode() + body)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
            if answer.startswith(b"HTTP/1.1 200 ") and b'"id":7' in answer:
                break  # an event stream: its answer came
    return answer


@pytest.mark.parametrize("right_first", [True, False], ids=["right-one-first", "right-one-second"])
def test_two_authorization_headers_are_refused(server: HttpServer, session: dict[str, str], right_first: bool) -> None:
    """A request carrying the token and another credential (a proxy adding
    its own ``Authorization``) was served when the token came first, and
    refused when it came second: which one counted was the server's guess.
    Both orders get ``401`` now, and one header with the token is served."""
    token = token_of(server.served)
    authorizations = [f"Authorization: Bearer {token}", "Authorization: Bearer someone-elses-credential"]
    if not right_first:
        authorizations.reverse()
    others = [f"{name}: {value}" for name, value in {**ACCEPT, **session}.items() if name != "Authorization"]
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}).encode()
    answer = raw_post(server.port, [*authorizations, *others], body)
    assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]
    assert b'Bearer realm="vaultmem"' in answer
    served = raw_post(server.port, [authorizations[0 if right_first else 1], *others], body)
    assert served.startswith(b"HTTP/1.1 200 "), served[:200]


# -- requests that are not HTTP ----------------------------------------------------------------


def test_requests_that_are_not_http_cannot_fill_the_servers_log(tmp_path: Path) -> None:
    """Each connection that sent bytes that are not HTTP wrote one warning
    line to the server's log, with no limit: 200 of them wrote 200 lines,
    and anyone who reaches the port could fill the disk the log is on. The
    warning now comes at most once in ten seconds; every such connection
    is still answered 400."""
    served = Served.make(tmp_path / "mcp")
    with HttpServer(served) as running:
        began = time.monotonic()
        for _ in range(200):
            with socket.create_connection(("127.0.0.1", running.port), timeout=TIMEOUT) as connection:
                connection.sendall(b"NOT HTTP AT ALL\r\n\r\n")
                assert connection.recv(4096).startswith(b"HTTP/1.1 400 ")
        took = time.monotonic() - began  # one warning each 10 s of it at most: a slow machine may see two or more
        # a client with the token is served as before
        assert open_session(running.port, token_of(served))["mcp-session-id"]
        log = running.log_text()
    warned = [line for line in log.splitlines() if "Invalid HTTP request received" in line]
    assert 1 <= len(warned) <= 2 + int(took / 10), log[-3000:]
    assert "Traceback" not in log, log[-3000:]
