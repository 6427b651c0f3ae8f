"""A local stand-in for Claude: the Messages API, replaying recorded turns.

The end-to-end tests and ``vaultmem demo`` run the real Anthropic SDK client
and tool runner against it, so the whole loop (requests, tool calls, tool
results, the vault's commits) runs with no network and no API key.  Only the
model's side is scripted; everything the application does is real.

:class:`Replay` hands the SDK client an httpx transport (the SDK's ``httpx2``)
(``Replay(turns).client()``): requests go from the SDK straight to the replay,
through httpx's own request and response objects, with no socket.
:class:`ReplayServer` serves the same replay over HTTP on 127.0.0.1, for a
client in another process (``base_url=server.url``).

Either answers ``POST /v1/messages`` the way the API does, in JSON or, for
``stream: true``, as server-sent events, and checks what a real server would
refuse:

* the ``anthropic-beta`` header carries ``context-management-2025-06-27`` and the
  conversation declares the ``memory_20250818`` tool;
* every ``tool_use`` of an assistant turn is answered by a ``tool_result`` in the
  next user message;
* a ``thread`` continuation names a reply this server gave (the SDK's
  server-side threads: later turns send only the new messages).

A refused request gets a 400 ``invalid_request_error`` that says why.  Each turn
is either a recorded reply (a dict, see :func:`reply`) or a function of the
:class:`Conversation` so far that returns one, for a script that reacts to
what the tools returned.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import httpx2

from vaultmem.anthropic.agent import MEMORY_BETA, MEMORY_TOOL_TYPE

Reply = dict[str, Any]


# -- building replies ---------------------------------------------------------------


def text(content: str) -> dict[str, Any]:
    """A text block of an assistant turn."""
    return {"type": "text", "text": content}


_tool_ids = itertools.count(1)


def tool_use(command: str, *, id: str | None = None, name: str = "memory", **params: Any) -> dict[str, Any]:
    """A ``tool_use`` block calling the memory tool with ``command`` and ``params``."""
    return {
        "type": "tool_use",
        "id": id or f"toolu_replay_{next(_tool_ids):04d}",
        "name": name,
        "input": {"command": command, **params},
    }


def reply(*blocks: dict[str, Any], stop_reason: str | None = None) -> Reply:
    """An assistant turn.  The stop reason is ``tool_use`` if a block calls a
    tool, else ``end_turn``; the server fills in the id, model and usage."""
    calls = any(block.get("type") == "tool_use" for block in blocks)
    return {
        "type": "message",
        "role": "assistant",
        "content": list(blocks),
        "stop_reason": stop_reason or ("tool_use" if calls else "end_turn"),
        "stop_sequence": None,
    }


# -- what the script sees ------------------------------------------------------------


@dataclass(frozen=True)
class ToolResult:
    """One ``tool_result`` block the application sent back."""

    tool_use_id: str
    content: str
    is_error: bool


@dataclass(frozen=True)
class Conversation:
    """The whole conversation of one request, threads resolved: what a model would see."""

    model: str
    system: Any
    tools: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    context_management: Any

    def tool_results(self) -> list[ToolResult]:
        """The tool results of the last user message, in order."""
        if not self.messages or self.messages[-1].get("role") != "user":
            return []
        return [_tool_result(block) for block in _blocks(self.messages[-1]) if block.get("type") == "tool_result"]

    def last_user_text(self) -> str:
        """The text the user typed last (tool results are not text)."""
        for message in reversed(self.messages):
            if message.get("role") != "user":
                continue
            texts = [b.get("text", "") for b in _blocks(message) if b.get("type") == "text"]
            if texts:
                return "\n".join(texts)
        return ""


@dataclass(frozen=True)
class Request:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    conversation: Conversation | None = None
    refused: str | None = None

    @property
    def betas(self) -> list[str]:
        return [b.strip() for b in self.headers.get("anthropic-beta", "").split(",") if b.strip()]


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [block for block in content or [] if isinstance(block, dict)]


def _tool_result(block: dict[str, Any]) -> ToolResult:
    content = block.get("content")
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ToolResult(
        str(block.get("tool_use_id")), content if isinstance(content, str) else "", bool(block.get("is_error"))
    )


class Refused(Exception):
    """The request is one the API would refuse with a 400."""


@dataclass
class _Thread:
    system: Any
    tools: list[dict[str, Any]]
    messages: list[dict[str, Any]] = field(default_factory=list)


# -- the replay ----------------------------------------------------------------------

BASE_URL = "http://replay.invalid"  # what a client of the transport names; nothing resolves it


class Replay:
    """Answers with ``turns`` in order, one per accepted request.

    :meth:`client` and :meth:`async_client` are real SDK clients whose requests
    this replay answers; :attr:`requests` records every request, refused ones
    included.
    """

    def __init__(
        self,
        turns: Iterable[Reply | Callable[[Conversation], Reply]],
        *,
        require_memory: bool = True,
    ) -> None:
        self.turns = list(turns)
        self.require_memory = require_memory
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._threads: dict[str, _Thread] = {}
        self._ids = itertools.count(1)

    def __enter__(self) -> Replay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to release (a server releases its socket)."""

    def client(self, **options: Any) -> anthropic.Anthropic:
        """The SDK's client, answered by this replay through an httpx transport."""
        http = httpx2.Client(transport=ReplayTransport(self), base_url=BASE_URL)
        return anthropic.Anthropic(api_key="replay", base_url=BASE_URL, http_client=http, max_retries=0, **options)

    def async_client(self, **options: Any) -> anthropic.AsyncAnthropic:
        """The SDK's async client, answered by this replay."""
        http = httpx2.AsyncClient(transport=AsyncReplayTransport(self), base_url=BASE_URL)
        return anthropic.AsyncAnthropic(api_key="replay", base_url=BASE_URL, http_client=http, max_retries=0, **options)

    def respond(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, dict[str, str], bytes]:
        """Status, headers and body of the HTTP response to one request."""
        status, payload, stream = self.answer(method, path, headers, raw)
        out = {"request-id": f"req_replay_{id(payload):x}"}
        if stream:
            out["Content-Type"] = "text/event-stream"
            body = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events(payload))
            return status, out, body.encode()
        out["Content-Type"] = "application/json"
        return status, out, json.dumps(payload).encode()

    @property
    def remaining(self) -> int:
        """Turns not yet served."""
        return len(self.turns)

    def answer(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Reply, bool]:
        """(status, payload, stream) for one request; records it."""
        with self._lock:
            body: Any = None
            try:
                if method != "POST" or path.split("?", 1)[0] != "/v1/messages":
                    raise Refused(f"{method} {path} is not served here; only POST /v1/messages")
                try:
                    body = json.loads(raw)
                except ValueError as err:
                    raise Refused("the body is not JSON") from err
                if not isinstance(body, dict):
                    raise Refused("the body is not a JSON object")
                conversation, thread = self._conversation(headers, body)
            except Refused as err:
                self.requests.append(Request(method, path, headers, body, refused=str(err)))
                return 400, _error(str(err)), False
            if not self.turns:
                over = "the recorded session is over: no turn left to replay"
                self.requests.append(Request(method, path, headers, body, conversation, refused=over))
                return 400, _error(over), False
            self.requests.append(Request(method, path, headers, body, conversation))
            turn = self.turns.pop(0)
            message = dict(turn(conversation) if callable(turn) else turn)
            message.setdefault("id", f"msg_replay_{next(self._ids):04d}")
            message.setdefault("type", "message")
            message.setdefault("role", "assistant")
            message.setdefault("stop_sequence", None)
            message["model"] = conversation.model
            message.setdefault("usage", {"input_tokens": _tokens(conversation), "output_tokens": _tokens(message)})
            thread.messages = [*conversation.messages, {"role": "assistant", "content": message["content"]}]
            self._threads[message["id"]] = thread
            return 200, message, bool(body.get("stream"))

    def _conversation(self, headers: dict[str, str], body: dict[str, Any]) -> tuple[Conversation, _Thread]:
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise Refused("messages: a list is required")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise Refused("model: a model name is required")
        spec = body.get("thread")
        if isinstance(spec, dict) and spec.get("type") == "continue":
            previous = self._threads.get(str(spec.get("previous_message_id")))
            if previous is None:
                raise Refused(f"thread: no reply {spec.get('previous_message_id')!r} to continue from")
            thread = _Thread(previous.system, previous.tools)
            history = [*previous.messages, *messages]
        else:
            tools = body.get("tools") or []
            thread = _Thread(body.get("system"), tools if isinstance(tools, list) else [])
            history = list(messages)
        if self.require_memory:
            betas = [b.strip() for b in headers.get("anthropic-beta", "").split(",")]
            if MEMORY_BETA not in betas:
                raise Refused(f"the memory tool needs the beta header anthropic-beta: {MEMORY_BETA}")
            if not any(isinstance(t, dict) and t.get("type") == MEMORY_TOOL_TYPE for t in thread.tools):
                raise Refused(f"tools: the {MEMORY_TOOL_TYPE} tool is not declared")
        _check_tool_results(history)
        conversation = Conversation(model, thread.system, thread.tools, history, body.get("context_management"))
        return conversation, thread


def _check_tool_results(history: list[dict[str, Any]]) -> None:
    if not history or history[0].get("role") != "user":
        raise Refused("messages: the first message must be from the user")
    for i, message in enumerate(history):
        if message.get("role") != "assistant":
            continue
        calls = [b.get("id") for b in _blocks(message) if b.get("type") == "tool_use"]
        if not calls:
            continue
        following = history[i + 1] if i + 1 < len(history) else None
        answered = (
            {b.get("tool_use_id") for b in _blocks(following) if b.get("type") == "tool_result"}
            if following is not None and following.get("role") == "user"
            else set()
        )
        missing = [c for c in calls if c not in answered]
        if missing:
            raise Refused(f"messages.{i + 1}: tool_use ids {missing} have no tool_result in the next user message")


def _tokens(data: Any) -> int:
    """A rough token count (4 characters each), so usage numbers look plausible."""
    return max(1, len(json.dumps(data, default=str)) // 4)


def _error(message: str) -> Reply:
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


def events(message: Reply) -> Iterator[tuple[str, dict[str, Any]]]:
    """A reply as the stream of server-sent events the API sends for ``stream: true``."""
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    start["usage"] = {**message["usage"], "output_tokens": 1}
    yield "message_start", {"type": "message_start", "message": start}
    for index, block in enumerate(message["content"]):
        if block.get("type") == "tool_use":
            opening = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block.get("input", {}))}
        else:
            opening = {**block, "text": ""}
            delta = {"type": "text_delta", "text": block.get("text", "")}
        yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": opening}
        yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": message.get("stop_sequence")},
            "usage": {"output_tokens": message["usage"]["output_tokens"]},
        },
    )
    yield "message_stop", {"type": "message_stop"}


class ReplayTransport(httpx2.BaseTransport):
    """An httpx transport answered by a :class:`Replay` (for ``httpx2.Client``)."""

    def __init__(self, replay: Replay) -> None:
        self.replay = replay

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        status, headers, body = self.replay.respond(
            request.method, request.url.raw_path.decode("ascii"), dict(request.headers.items()), request.read()
        )
        return httpx2.Response(status, headers=headers, content=body)


class AsyncReplayTransport(httpx2.AsyncBaseTransport):
    """The same for ``httpx2.AsyncClient``."""

    def __init__(self, replay: Replay) -> None:
        self.replay = replay

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        raw = await request.aread()
        status, headers, body = self.replay.respond(
            request.method, request.url.raw_path.decode("ascii"), dict(request.headers.items()), raw
        )
        return httpx2.Response(status, headers=headers, content=body)


# -- over HTTP, for another process ----------------------------------------------------


class ReplayServer(Replay):
    """The replay served on 127.0.0.1, for a client in another process.

    Use as a context manager; :attr:`url` is the ``base_url`` for
    ``anthropic.Anthropic(base_url=..., api_key=...)``.
    """

    def __init__(
        self,
        turns: Iterable[Reply | Callable[[Conversation], Reply]],
        *,
        require_memory: bool = True,
    ) -> None:
        super().__init__(turns, require_memory=require_memory)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._serving = threading.Thread(target=self._server.serve_forever, name="vaultmem-replay", daemon=True)
        self._serving.start()

    def __enter__(self) -> ReplayServer:
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._serving.join(timeout=10)


def _handler(replay: Replay) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _body(self) -> bytes:
            """The request's body, sent with its length or chunked (HTTP/1.1)."""
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                chunks: list[bytes] = []
                while True:
                    size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass  # trailers
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length > 0 else b""

        def _serve(self) -> None:
            try:
                raw = self._body()
            except ValueError:
                raw = b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, out, body = replay.respond(self.command, self.path, headers, raw)
            self.send_response(status)
            for name, value in out.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the demo's output is the conversation, not an access log

    return Handler
