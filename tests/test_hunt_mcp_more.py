"""More of what a hostile HTTP client tries against ``vaultmem mcp --http``
(docs/mcp.md, "Over HTTP"), each against a real server process on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from mcp_helpers import HttpServer, Served
from test_mcp_http_hunt import ACCEPT, open_session, token_of
from test_mcp_http_hunt2 import raw_post


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    served = Served.make(tmp_path_factory.mktemp("mcp-hunt-more"))
    with HttpServer(served) as running:
        yield running


@pytest.fixture(scope="module")
def session(server: HttpServer) -> dict[str, str]:
    return open_session(server.port, token_of(server.served))


@pytest.mark.parametrize("allowed_first", [True, False], ids=["allowed-one-first", "allowed-one-second"])
def test_two_origin_headers_are_refused_whichever_comes_first(
    server: HttpServer, session: dict[str, str], allowed_first: bool
) -> None:
    """A request carrying an allowed ``Origin`` and a foreign one was served
    when the allowed one came first and refused when it came second: the
    check read the first header only. Both orders get ``403`` now, and one
    allowed ``Origin`` is still served."""
    origins = [f"Origin: http://127.0.0.1:{server.port}", "Origin: http://evil.example"]
    if not allowed_first:
        origins.reverse()
    others = [f"{name}: {value}" for name, value in {**ACCEPT, **session}.items()]
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}).encode()
    answer = raw_post(server.port, [*origins, *others], body)
    assert answer.startswith(b"HTTP/1.1 403 "), answer[:200]
    assert answer.endswith(b"Invalid Origin header"), answer[-200:]
    served = raw_post(server.port, [f"Origin: http://127.0.0.1:{server.port}", *others], body)
    assert served.startswith(b"HTTP/1.1 200 "), served[:200]
