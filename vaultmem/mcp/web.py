"""Serving the memory over streamable HTTP: a bearer token every request
must carry, the ``Origin`` and ``Host`` checks against DNS rebinding, and a
cap on the size of a request (docs/mcp.md, "Over HTTP").

The token is generated once, kept in a file of mode 0600 (by default in
the vault's state folder), and compared in constant time.  A request
without it gets 401 and never reaches the MCP session layer.
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

from vaultmem.core.crypto import read_secret_file
from vaultmem.errors import BadKeyError, VaultError
from vaultmem.mcp.server import ENVELOPE_BYTES

ENV_TOKEN = "VAULTMEM_MCP_TOKEN"
TOKEN_FILE = "mcp-token"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
PATH = "/mcp"

Scope = dict[str, Any]
ASGIApp = Any


def load_or_make_token(path: Path) -> str:
    """The bearer token in ``path``; a new random one (mode 0600) if there is none."""
    if path.exists():
        token = read_secret_file(path, "token file").strip()
        if len(token) < 32:
            raise BadKeyError(f"Error: the token in {path} is shorter than 32 characters; remove it to get a new one.")
        return token
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IRUSR | stat.S_IWUSR)
    try:
        os.write(fd, (token + "\n").encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    return token


class BearerToken:
    """ASGI middleware: HTTP requests without ``Authorization: Bearer TOKEN`` get 401."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = token.encode("ascii")

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # lifespan: the session manager starts and stops here
            await self.app(scope, receive, send)
            return
        given = b""
        for name, value in scope.get("headers", []):
            if name.lower() == b"authorization":
                scheme, _, credentials = value.partition(b" ")
                if scheme.lower() == b"bearer":  # the scheme is case-insensitive (RFC 7235)
                    given = credentials.strip()
                break
        if not hmac.compare_digest(given, self.expected):
            body = b'{"error": "unauthorized: send Authorization: Bearer <token>"}'
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", b'Bearer realm="vaultmem"'),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


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
    ``name:*``): the names clients on other hosts, or a proxy, reach it by."""
    allowed_hosts = [*hosts, f"{host}:{port}", f"{host}:*", "127.0.0.1:*", "localhost:*", "[::1]:*"]
    allowed_origins = [*origins, f"http://{host}:{port}", "http://127.0.0.1:*", "http://localhost:*"]
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=allowed_hosts, allowed_origins=allowed_origins
    )
    app = server.streamable_http_app(
        streamable_http_path=PATH,
        max_request_body_size=max_request_bytes + ENVELOPE_BYTES,
        transport_security=security,
        host=host,
    )
    return BearerToken(app, token)


def serve(app: ASGIApp, host: str, port: int) -> None:
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, server_header=False)
    except OSError as err:  # the port is taken, the address is not this host's
        raise VaultError(f"Error: cannot listen on {host}:{port}: {err.strerror or err}.") from err
