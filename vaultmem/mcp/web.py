"""Serving the memory over streamable HTTP: a bearer token every request
must carry, the ``Origin`` and ``Host`` checks against DNS rebinding, and a
cap on the size of a request (docs/mcp.md, "Over HTTP").

The token is generated once, kept in a file of mode 0600 (by default in
the vault's state folder), and compared in constant time.  A request
without it gets 401, never reaches the MCP session layer, and its
connection is closed.

A connection must deliver each request whole (headers and body) within the
request timeout, or it is closed; when the server holds as many connections
as it allows, a new one closes one idle between requests, or else the
oldest still sending its request.  So connections that never finish a
request, or sit idle between requests, can neither hold the server's file
descriptors nor shut out a client with the token.

Stopped by SIGTERM or SIGINT, the server takes no new request, answers
every request it has begun (for at most ``ANSWER_TIMEOUT`` seconds), and
only then ends the clients' event streams and closes the vault: a write
that was made is answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import re
import resource
import socket
import sys
from collections.abc import Callable, Sequence
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from sse_starlette.sse import AppStatus
from starlette.requests import Request
from uvicorn.protocols.http.h11_impl import H11Protocol

from vaultmem.errors import VaultError
from vaultmem.mcp.bearer import ENV_TOKEN as ENV_TOKEN
from vaultmem.mcp.bearer import TOKEN_FILE as TOKEN_FILE
from vaultmem.mcp.bearer import load_or_make_token as load_or_make_token
from vaultmem.mcp.bearer import token_problem as token_problem
from vaultmem.mcp.server import (
    ENVELOPE_BYTES,
    SENT_BYTES,
    _message,
    _not_unicode,
    _Server,
    _unreadable,
    _wrong_id,
)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
PATH = "/mcp"
REQUEST_TIMEOUT = 30.0  # seconds a connection has to deliver a request whole
ANSWER_TIMEOUT = 30.0  # seconds a stopping server gives the requests it has begun to be answered
MAX_CONNECTIONS = 1000  # at most; fewer if the process may not open so many files
FILES_KEPT_FREE = 200  # file descriptors kept from connections: the vault's files, accepts in flight

_NAMED = (b"host", b"origin")  # the headers whose values name a host
# What a Host header and an Origin may be (RFC 9110, RFC 6454), in lower case:
# a name or an address, and a port of digits only.  The SDK's ``name:*``
# patterns match any text after ``name:``, so ``127.0.0.1:8765@evil.example``
# would pass them; a value of any other shape is refused first.
_AUTHORITY = r"(?:[a-z0-9._~-]+|\[[0-9a-f:.]+\])(?::(?P<port>[0-9]{1,5}))?"
_HOST_SHAPE = re.compile(_AUTHORITY)
_ORIGIN_SHAPE = re.compile(r"https?://" + _AUTHORITY)


def _shaped(shape: re.Pattern[str], text: str) -> bool:
    """Whether ``text`` is a Host or Origin of ``shape`` with a port, if any,
    of 1 to 65535."""
    found = shape.fullmatch(text)
    return found is not None and (found["port"] is None or 0 < int(found["port"]) < 65536)


Scope = dict[str, Any]
ASGIApp = Any


class BearerToken:
    """ASGI middleware: HTTP requests without ``Authorization: Bearer TOKEN`` get 401."""

    def __init__(
        self,
        app: ASGIApp,
        token: str,
        max_body: int,
        on_stop: Callable[[], None] | None = None,
        security: TransportSecuritySettings | None = None,
    ) -> None:
        self.app = app
        self.expected = token.encode("ascii")
        self.max_body = max_body
        self.on_stop = on_stop  # run as the server stops (lifespan shutdown), before the process ends
        self.answering = 0  # requests begun and not yet answered, the GET event streams aside
        self.in_flight: set[tuple[bytes, str]] = set()  # (session, request id) of the requests being answered
        # The app's own Host, Origin and Content-Type checks, for the requests answered here.
        self.security = TransportSecurityMiddleware(security) if security is not None else None

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":  # the session manager starts and stops here
            await self.app(scope, receive, self._stopping(send))
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = b""
        sent = [value for name, value in scope.get("headers", []) if name.lower() == b"authorization"]
        if len(sent) == 1:  # two are refused: which one counts would be the server's guess
            scheme, _, credentials = sent[0].partition(b" ")
            if scheme.lower() == b"bearer":  # the scheme is case-insensitive (RFC 7235)
                given = credentials.strip()
        if not hmac.compare_digest(given, self.expected):
            body = b'{"error": "unauthorized: send one Authorization: Bearer <token>"}'
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", b'Bearer realm="vaultmem"'),
                        (b"content-length", str(len(body)).encode()),
                        (b"connection", b"close"),  # kept open, it would hold a connection the server may need
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        refused = _badly_formed(scope.get("headers", []))
        if refused is not None:
            status, text = refused
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(text))],
                }
            )
            await send({"type": "http.response.body", "body": text})
            return
        if scope.get("method") == "GET":  # an event stream, open until the client or the server ends it
            # The server keeps no events to replay: a client resuming a stream
            # with Last-Event-ID gets a new one, as MCP allows (the SDK would
            # answer 500 without a word).
            headers = [(name, value) for name, value in scope.get("headers", []) if name.lower() != b"last-event-id"]
            await self._stream({**scope, "headers": headers}, receive, send)
            return
        self.answering += 1
        try:
            await self._serve(scope, receive, send)
        finally:
            self.answering -= 1

    async def _stream(self, scope: Scope, receive: Any, send: Any) -> None:
        """A GET: the client's event stream.  The SDK's stream stops without
        its last chunk when the server stops; it is sent here, so the client
        sees the stream end and the server's log no error."""
        state = {"started": False, "ended": False}

        async def watched(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                state["started"] = True
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                state["ended"] = True
            await send(message)

        await self._serve(scope, receive, watched)
        if state["started"] and not state["ended"] and AppStatus.should_exit:
            with contextlib.suppress(OSError, RuntimeError):
                await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _serve(self, scope: Scope, receive: Any, send: Any) -> None:
        # Names in Host and Origin are the same in any case (browsers and
        # most clients send them in lower case): checked in lower case.
        headers = scope.get("headers", [])
        scope = {**scope, "headers": [(n, v.lower() if n.lower() in _NAMED else v) for n, v in headers]}
        # The body whole before the MCP layer sees the request: a client that
        # goes (or is closed for taking too long) halfway through it is no
        # failure of the server.  Past max_body the SDK answers 413.
        messages: list[dict[str, Any]] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            messages.append(message)
            size += len(message.get("body", b""))
            if not message.get("more_body", False) or size > self.max_body:
                break
        queued = iter(messages)

        async def replay() -> Any:
            message = next(queued, None)
            return message if message is not None else await receive()

        if scope.get("method") != "POST" or size > self.max_body:
            await self.app(scope, replay, send)
            return
        scope[SENT_BYTES] = size  # a tool call is held to the limit as it was sent (MemoryServer.call)
        body = b"".join(message.get("body", b"") for message in messages)
        ident, refused = _request_id_of(body)
        if refused is None:  # the SDK's parser refuses it with the id null: answered as over stdio
            try:
                refused = _not_unicode(body.decode("utf-8"))
            except UnicodeDecodeError:  # UTF-16 or UTF-32: the SDK answers it
                refused = None
        session = next((value for name, value in headers if name.lower() == b"mcp-session-id"), None)
        if refused is None and ident is not None and (session, str(ident)) in self.in_flight:
            refused = _id_in_use(ident)
        if refused is not None:
            await self._refuse(scope, replay, send, refused)
            return
        if ident is None or session is None:
            await self.app(scope, replay, send)
            return
        key = (session, str(ident))  # the SDK's key: 7 and "7" are one request to it
        self.in_flight.add(key)
        try:
            await self.app(scope, replay, send)
        finally:
            self.in_flight.discard(key)

    async def _refuse(self, scope: Scope, receive: Any, send: Any, answer: dict[str, Any]) -> None:
        """Answer ``answer`` (a JSON-RPC error) with 400, once the request
        passes the Host, Origin and Content-Type checks the app would make."""
        if self.security is not None:
            response = await self.security.validate_request(Request(scope, receive), is_post=True)
            if response is not None:
                await response(scope, receive, send)
                return
        body = json.dumps(answer).encode("utf-8")
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 400, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _stopping(self, send: Any) -> Any:
        """``send`` for the lifespan: ``on_stop`` runs before the shutdown is
        reported complete (after it, uvicorn ends the process on a signal)."""

        async def send_after_stop(message: dict[str, Any]) -> None:
            if message.get("type") == "lifespan.shutdown.complete" and self.on_stop is not None:
                await asyncio.to_thread(self.on_stop)
            await send(message)

        return send_after_stop


def http_app(
    server: MCPServer,
    *,
    token: str,
    host: str,
    port: int,
    origins: Sequence[str],
    max_request_bytes: int,
    hosts: Sequence[str] = (),
) -> ASGIApp:
    """The ASGI app ``vaultmem mcp --http`` serves: the server's streamable
    HTTP endpoint at ``/mcp`` behind the token, Host and Origin checks.
    ``hosts`` are more ``Host`` values to accept (``name:port`` or
    ``name:*``): the names clients on other hosts, or a proxy, reach it by.
    "Any port" includes none, the scheme's default (a TLS proxy on 443
    passes ``Host: name`` on)."""
    name = authority(host).lower()
    hosts = [value.lower() for value in hosts]
    origins = [value.lower().rstrip("/") for value in origins]  # an origin has no path: https://name[:port]
    allowed_hosts = _any_port([*hosts, f"{name}:{port}", f"{name}:*", "127.0.0.1:*", "localhost:*", "[::1]:*"])
    allowed_origins = _any_port([*origins, f"http://{name}:{port}", "http://127.0.0.1:*", "http://localhost:*"])
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=allowed_hosts, allowed_origins=allowed_origins
    )
    app = server.streamable_http_app(
        streamable_http_path=PATH,
        max_request_body_size=max_request_bytes + ENVELOPE_BYTES,
        transport_security=security,
        host=host,
    )
    on_stop = server.memory.close if isinstance(server, _Server) else None
    return BearerToken(app, token, max_request_bytes + ENVELOPE_BYTES, on_stop, security)


def _request_id_of(body: bytes) -> tuple[str | int | None, dict[str, Any] | None]:
    """The id of the request in ``body`` (None for any other message, or
    one the SDK refuses itself), and the JSON-RPC error answering a request
    whose id is neither a string nor an integer (null, 1.5, true, an
    object), or None.

    The SDK reads a request with such an id as a notification: it would
    answer ``202 Accepted`` and nothing more, and its client would wait for
    an answer that never comes.  Over stdio the server answers it the same way."""
    try:
        raw = json.loads(body)
    except (ValueError, RecursionError):
        return None, None  # not JSON it reads: the SDK answers 400 itself
    if not _plain(raw):  # the SDK would answer -32602 with its validator's text, and the id null
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:  # UTF-16 or UTF-32, which json reads and the SDK refuses with 400
            return None, None
        if _message(text) is None:
            return None, _unreadable(text, body)  # as over stdio
    if not isinstance(raw, dict) or "method" not in raw or "id" not in raw:
        return None, None
    ident = raw["id"]
    if isinstance(ident, str) or (isinstance(ident, int) and not isinstance(ident, bool)):
        return ident, None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:  # UTF-16 or UTF-32, which json reads and the SDK refuses with 400
        return None, None
    message = _message(text)
    return None, (None if message is None else _wrong_id(text, message))


def _plain(raw: object) -> bool:
    """Whether a message plainly has the shape JSON-RPC gives one (an object,
    ``jsonrpc`` 2.0, a method name and an object of params where given), so
    that the SDK's validation of it (2.6 ms for a 1 MB body) need not be run
    twice to find one it refuses."""
    return (
        isinstance(raw, dict)
        and raw.get("jsonrpc") == "2.0"
        and isinstance(raw.get("method", ""), str)
        and isinstance(raw.get("params", {}), dict)
    )


def _id_in_use(ident: str | int) -> dict[str, Any]:
    """The JSON-RPC error answering a request whose id is that of another
    request of the session still being answered.

    The SDK keeps one answer channel for each id (and takes 7 and "7" for
    one id): the earlier request's answer would go to this one, and the
    earlier client would wait for it forever."""
    message = (
        f"Error: a request with the id {json.dumps(ident)} is still being answered in this session; "
        "nothing was changed. Send each request of a session with an id of its own."
    )
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": -32600, "message": message}}


def authority(host: str, port: int | None = None) -> str:
    """``host`` (and ``:port``) as a URL and a ``Host`` header write it: an
    IPv6 address in brackets, such as ``[::1]:8765``."""
    name = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return name if port is None else f"{name}:{port}"


def url(host: str, port: int) -> str:
    """The address clients reach the server at, such as ``http://127.0.0.1:8765/mcp``."""
    return f"http://{authority(host, port)}{PATH}"


def _badly_formed(headers: Sequence[tuple[bytes, bytes]]) -> tuple[int, bytes] | None:
    """The status and text refusing a request whose Host or Origin is not
    shaped as one (the answers the SDK gives a Host or Origin it does not
    allow), or None.  An ``Origin: null`` is left to the SDK, which refuses it.
    Two ``Origin`` headers are refused: the SDK checks the first only, so a
    foreign one after an allowed one would pass (HTTP itself refuses two ``Host``)."""
    origins = 0
    for name, value in headers:
        lowered = name.lower()
        if lowered not in _NAMED:
            continue
        if lowered == b"origin":
            origins += 1
            if origins > 1:
                return 403, b"Invalid Origin header"
        text = value.decode("latin-1").lower()
        if lowered == b"host" and not _shaped(_HOST_SHAPE, text):
            return 421, b"Invalid Host header"
        if lowered == b"origin" and text != "null" and not _shaped(_ORIGIN_SHAPE, text):
            return 403, b"Invalid Origin header"
    return None


def _any_port(allowed: Sequence[str]) -> list[str]:
    """``allowed`` and, for each ``NAME:*``, ``NAME`` itself (no port given)."""
    return [*allowed, *(value[:-2] for value in allowed if value.endswith(":*"))]


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port``, or a clear error (the port is
    taken, the address is not this host's) before anything is announced."""
    address = host[1:-1] if host.startswith("[") and host.endswith("]") else host  # [::1], as in a URL
    try:
        info = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(info[0], socket.SOCK_STREAM)
    except OSError as err:
        raise VaultError(f"Error: cannot listen on {host}:{port}: {err.strerror or err}.") from err
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(info[4])
        sock.listen(2048)
    except OSError as err:
        sock.close()
        raise VaultError(f"Error: cannot listen on {host}:{port}: {err.strerror or err}.") from err
    sock.set_inheritable(True)
    return sock


def connection_limit() -> int:
    """How many connections the server holds at once: MAX_CONNECTIONS, or
    fewer if this process may not open that many files.

    The soft limit on open files is raised to the hard one (at most 4,096)
    first.  The connections leave room for the vault's own files and for a
    burst of accepted connections not yet closed (the event loop accepts up
    to 100 at a time)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4096 if hard == resource.RLIM_INFINITY else min(hard, 4096)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(8, min(MAX_CONNECTIONS, soft - FILES_KEPT_FREE))


def guarded_protocol(request_timeout: float, max_connections: int) -> type[H11Protocol]:
    """uvicorn's HTTP/1.1 protocol, closing a connection that takes longer
    than ``request_timeout`` to deliver a request whole, and, past
    ``max_connections``, the oldest connection still sending one."""
    sending: dict[H11Protocol, None] = {}  # connections in the middle of a request, oldest first

    class Guarded(H11Protocol):
        deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # type: ignore[arg-type]
            if len(self.connections) > max_connections:
                # A connection idle between requests goes first (its client
                # opens another when it has one), then the oldest one still
                # sending its request.
                oldest = self._an_idle_one() or next(iter(sending), None)
                if oldest is None:  # every connection is being answered: this one waits its turn elsewhere
                    transport.close()
                    return
                oldest.transport.close()
                self._settle(oldest)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self.deadline is None and (self.cycle is None or self.cycle.response_complete):
                self._arm()  # a new request begins
            super().data_received(data)
            cycle = self.cycle
            if self.deadline is not None and cycle is not None and not cycle.more_body and not cycle.response_complete:
                self._settle(self)  # the request is whole: the answer may take as long as it needs

        def connection_lost(self, exc: Exception | None) -> None:
            self._settle(self)
            super().connection_lost(exc)

        def _arm(self) -> None:
            self.deadline = self.loop.call_later(request_timeout, self._too_slow)
            sending[self] = None

        def _too_slow(self) -> None:
            self.deadline = None
            sending.pop(self, None)
            if not self.transport.is_closing():
                self.transport.close()

        def _an_idle_one(self) -> H11Protocol | None:
            """Another connection between requests (its last answer sent, no new request begun), if any."""
            for other in self.connections:
                if other is self or not isinstance(other, H11Protocol) or other in sending:
                    continue
                if (other.cycle is None or other.cycle.response_complete) and not other.transport.is_closing():
                    return other
            return None

        @staticmethod
        def _settle(protocol: H11Protocol) -> None:
            sending.pop(protocol, None)
            handle = getattr(protocol, "deadline", None)
            if handle is not None:
                handle.cancel()
                protocol.deadline = None  # type: ignore[attr-defined]

    return Guarded


def serve(app: ASGIApp, sock: socket.socket, *, request_timeout: float = REQUEST_TIMEOUT) -> None:
    """Serve ``app`` on ``sock`` (from :func:`listen`) until stopped."""
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        server_header=False,
        http=guarded_protocol(request_timeout, connection_limit()),
    )
    server = _Stopping(config, app if isinstance(app, BearerToken) else None)
    # One line for each request uvicorn cannot parse would let any client
    # that reaches the port fill the server's log: such lines are kept sparse.
    sparse = _Sparse()
    uvicorn_log = logging.getLogger("uvicorn.error")
    uvicorn_log.addFilter(sparse)
    # The SDK's event streams would otherwise end the moment a signal comes,
    # the answers to requests in progress with them: the server ends them
    # itself once those are answered (_Stopping).
    AppStatus.enable_automatic_graceful_drain = False
    AppStatus.should_exit = False  # a server served earlier in this process ended its streams with it

    async def run() -> None:
        asyncio.get_running_loop().set_exception_handler(_LoopTrouble())
        await server.serve(sockets=[sock])

    try:
        asyncio.run(run())
    finally:
        uvicorn_log.removeFilter(sparse)


class _Sparse(logging.Filter):
    """A log filter keeping each warning (a request that is not HTTP, an
    upgrade the server does not take) to one line every ten seconds, the
    next one saying how many like it were left out.  Errors all pass."""

    SECONDS = 10.0

    def __init__(self) -> None:
        super().__init__()
        self.said: dict[tuple[int, str], tuple[float, int]] = {}  # when last logged, how many left out since

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        key = (record.levelno, str(record.msg))
        when, left_out = self.said.get(key, (-self.SECONDS, 0))
        if record.created - when < self.SECONDS:
            self.said[key] = (when, left_out + 1)
            return False
        self.said[key] = (record.created, 0)
        if left_out:
            record.msg = f"{record.msg} ({left_out:,} more like it not logged in the {self.SECONDS:.0f} s before)"
        return True


class _Stopping(uvicorn.Server):
    """uvicorn's server, whose shutdown (SIGTERM, SIGINT) answers every
    request begun before it ends the clients' event streams, so a client
    whose write was made gets its answer."""

    def __init__(self, config: uvicorn.Config, app: BearerToken | None) -> None:
        super().__init__(config)
        self.gate = app

    def handle_exit(self, sig: int, frame: Any) -> None:
        # uvicorn's own: the SDK's event stream library replaces it with one
        # that ends every stream at once (in versions without the switch above).
        original: Any = getattr(AppStatus, "original_handler", None) or uvicorn.Server.handle_exit
        original(self, sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        ending = asyncio.ensure_future(self._end_streams_once_answered())
        try:
            await super().shutdown(sockets)  # takes no new request; waits for every connection to close
        finally:
            ending.cancel()
            AppStatus.should_exit = True

    async def _end_streams_once_answered(self) -> None:
        deadline = asyncio.get_running_loop().time() + ANSWER_TIMEOUT
        while self.gate is not None and self.gate.answering > 0 and not self.force_exit:
            if asyncio.get_running_loop().time() >= deadline:
                break
            await asyncio.sleep(0.02)
        AppStatus.should_exit = True  # the event streams end, and their connections close


class _LoopTrouble:
    """The event loop's exception handler: one plain line on stderr for each
    kind of trouble at most every ten seconds (the event loop retries an
    accept that ran out of file descriptors every second), with no
    traceback and nothing imported while files may be short."""

    def __init__(self) -> None:
        self.said: dict[str, float] = {}

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message", "trouble in the event loop")).split("\n", 1)[0]
        err = context.get("exception")
        if isinstance(err, OSError) and err.errno is not None:
            message += f": {os.strerror(err.errno)}"
        elif err is not None:
            message += f": {type(err).__name__}"
        now = loop.time()
        if now - self.said.get(message, -60.0) >= 10.0:
            self.said[message] = now
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.write(f"vaultmem: {message}\n")
                sys.stderr.flush()
