"""vaultmem.testing.replay: the local stand-in for Claude that the demo and the end-to-end tests run against.

It must answer like the Messages API (the real SDK parses its JSON and its
server-sent events) and refuse what the API would refuse, so a test that passes
against it says something about the real thing.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anthropic
import anyio
import pytest

from vaultmem import Vault, VaultMemoryTool, generate_key, memory_request
from vaultmem.testing.replay import (
    Conversation,
    Replay,
    ReplayServer,
    Reply,
    Request,
    ToolResult,
    events,
    reply,
    text,
    tool_use,
)

MODEL = "claude-sonnet-4-6"
BETA = "context-management-2025-06-27"
MEMORY_TOOL = {"type": "memory_20250818", "name": "memory"}
WEATHER_TOOL = {
    "name": "weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
HELLO = [{"role": "user", "content": "Hello"}]


def client_for(server: ReplayServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="test", max_retries=0)


def create(server: ReplayServer, **params: Any) -> Any:
    """A beta messages.create with the memory tool and beta unless overridden."""
    args: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 256,
        "messages": HELLO,
        "tools": [MEMORY_TOOL],
        "betas": [BETA],
        **params,
    }
    return client_for(server).beta.messages.create(**args)


def raw(
    server: ReplayServer,
    data: bytes | None,
    *,
    method: str = "POST",
    path: str = "/v1/messages",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """A request without the SDK: (status, headers, body)."""
    request = urllib.request.Request(server.url + path, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers.items()), response.read()
    except urllib.error.HTTPError as err:
        with err:
            return err.code, dict(err.headers.items()), err.read()


def raw_json(server: ReplayServer, body: Any, *, betas: str = BETA) -> tuple[int, Any]:
    status, _, data = raw(
        server,
        json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "anthropic-beta": betas, "anthropic-version": "2023-06-01"},
    )
    return status, json.loads(data)


def body(**params: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 256, "messages": HELLO, "tools": [MEMORY_TOOL], **params}


@pytest.fixture
def server() -> Iterator[ReplayServer]:
    with ReplayServer([reply(text("first")), reply(text("second"))]) as replay:
        yield replay


def assert_refused(server: ReplayServer, reason: str, *, turns_left: int = 2) -> Request:
    """The last request was refused for ``reason``, recorded as such, and consumed no turn."""
    last = server.requests[-1]
    assert last.refused is not None
    assert reason in last.refused
    assert last.conversation is None
    assert server.remaining == turns_left
    return last


def assert_bad_request(info: pytest.ExceptionInfo[anthropic.BadRequestError], reason: str) -> None:
    assert info.value.status_code == 400
    assert isinstance(info.value.body, dict)
    assert info.value.body["type"] == "error"
    assert info.value.body["error"]["type"] == "invalid_request_error"
    assert reason in info.value.body["error"]["message"]


# -- the listener -----------------------------------------------------------------


def test_the_server_listens_on_127_0_0_1_only() -> None:
    with ReplayServer([]) as server:
        address = urlsplit(server.url)
        assert address.scheme == "http"
        assert address.hostname == "127.0.0.1"
        assert address.port
        socket.create_connection(("127.0.0.1", address.port), timeout=10).close()
        # Another loopback address reaches a socket bound to 0.0.0.0, but not one bound to 127.0.0.1.
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.2", address.port), timeout=10)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", address.port), timeout=10)


# -- replies ------------------------------------------------------------------------


def test_reply_stops_for_tool_use_when_a_block_calls_a_tool() -> None:
    assert reply(text("hi"))["stop_reason"] == "end_turn"
    assert reply(text("hi"), tool_use("view", path="/memories"))["stop_reason"] == "tool_use"
    assert reply(text("cut"), stop_reason="max_tokens")["stop_reason"] == "max_tokens"
    answer = reply(text("a"), text("b"))
    assert answer["type"] == "message"
    assert answer["role"] == "assistant"
    assert answer["content"] == [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]


def test_tool_use_calls_the_memory_tool_with_fresh_ids() -> None:
    first = tool_use("view", path="/memories", view_range=[1, 2])
    second = tool_use("view", path="/memories")
    assert first["type"] == "tool_use"
    assert first["name"] == "memory"
    assert first["input"] == {"command": "view", "path": "/memories", "view_range": [1, 2]}
    assert first["id"] != second["id"]
    assert tool_use("delete", id="toolu_x", name="other", path="/m")["id"] == "toolu_x"
    assert tool_use("delete", id="toolu_x", name="other", path="/m")["name"] == "other"


def test_a_recorded_reply_is_served_as_a_messages_api_message(server: ReplayServer) -> None:
    message = create(server)
    assert message.id == "msg_replay_0001"
    assert message.type == "message"
    assert message.role == "assistant"
    assert message.model == MODEL
    assert [(b.type, b.text) for b in message.content] == [("text", "first")]
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens > 0
    assert message.usage.output_tokens > 0
    assert server.remaining == 1
    assert create(server).content[0].text == "second"
    assert server.remaining == 0


def test_the_server_answers_with_the_model_asked_for() -> None:
    with ReplayServer([reply(text("x"))]) as server:
        assert create(server, model="claude-opus-4-1").model == "claude-opus-4-1"


def test_requests_are_recorded_with_lowercase_headers_and_betas(server: ReplayServer) -> None:
    create(server, betas=["files-api-2025-04-14", BETA], metadata={"user_id": "u-7"})
    [request] = server.requests
    assert request.method == "POST"
    assert request.path.split("?")[0] == "/v1/messages"
    assert all(name == name.lower() for name in request.headers)
    assert request.headers["content-type"] == "application/json"
    assert request.headers["user-agent"].startswith("Anthropic/Python")
    assert request.betas == ["files-api-2025-04-14", BETA]
    assert request.body["metadata"] == {"user_id": "u-7"}
    assert request.refused is None
    assert request.conversation is not None
    assert request.conversation.messages == HELLO


def test_request_betas_splits_the_header_and_ignores_blanks() -> None:
    request = Request("POST", "/v1/messages", {"anthropic-beta": " a-1 ,b-2,, c-3 "}, {})
    assert request.betas == ["a-1", "b-2", "c-3"]
    assert Request("POST", "/v1/messages", {}, {}).betas == []


# -- what it refuses ------------------------------------------------------------------


def test_it_refuses_a_request_without_the_beta_header(server: ReplayServer) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        create(server, betas=[])
    assert_bad_request(info, "the memory tool needs the beta header anthropic-beta: context-management-2025-06-27")
    request = assert_refused(server, "anthropic-beta: context-management-2025-06-27")
    assert request.betas == []
    assert request.body["tools"] == [MEMORY_TOOL]


def test_it_refuses_other_betas_without_the_memory_beta(server: ReplayServer) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        create(server, betas=["files-api-2025-04-14", "context-management-2025-06-28"])
    assert_bad_request(info, "context-management-2025-06-27")
    assert_refused(server, "beta header")


@pytest.mark.parametrize("tools", [[], [WEATHER_TOOL]], ids=["no-tools", "other-tool"])
def test_it_refuses_a_request_without_the_memory_tool(server: ReplayServer, tools: list[dict[str, Any]]) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        create(server, tools=tools)
    assert_bad_request(info, "tools: the memory_20250818 tool is not declared")
    assert_refused(server, "memory_20250818")


def test_it_refuses_a_tool_use_left_unanswered(server: ReplayServer) -> None:
    messages = [
        {"role": "user", "content": "Remember my name."},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_lost", "name": "memory", "input": {"command": "view"}}],
        },
        {"role": "user", "content": "Did you?"},
    ]
    with pytest.raises(anthropic.BadRequestError) as info:
        create(server, messages=messages)
    assert_bad_request(info, "messages.2: tool_use ids ['toolu_lost'] have no tool_result in the next user message")
    assert_refused(server, "toolu_lost")


def test_it_refuses_a_tool_use_answered_only_in_part(server: ReplayServer) -> None:
    messages = [
        {"role": "user", "content": "Remember my name."},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_a", "name": "memory", "input": {"command": "view"}},
                {"type": "tool_use", "id": "toolu_b", "name": "memory", "input": {"command": "view"}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "ok"}]},
    ]
    with pytest.raises(anthropic.BadRequestError) as info:
        create(server, messages=messages)
    assert_bad_request(info, "tool_use ids ['toolu_b'] have no tool_result")
    assert_refused(server, "toolu_b")


def test_it_refuses_a_conversation_that_starts_with_the_assistant(server: ReplayServer) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        create(server, messages=[{"role": "assistant", "content": "Hi"}, {"role": "user", "content": "Hello"}])
    assert_bad_request(info, "the first message must be from the user")
    assert_refused(server, "first message")


def test_it_refuses_to_continue_an_unknown_thread(server: ReplayServer) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        create(server, thread={"type": "continue", "previous_message_id": "msg_never_sent"})
    assert_bad_request(info, "thread: no reply 'msg_never_sent' to continue from")
    assert_refused(server, "msg_never_sent")


def test_it_refuses_a_body_that_is_not_json(server: ReplayServer) -> None:
    status, headers, data = raw(
        server, b"{not json", headers={"Content-Type": "application/json", "anthropic-beta": BETA}
    )
    assert status == 400
    assert headers["Content-Type"] == "application/json"
    assert json.loads(data) == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "the body is not JSON"},
    }
    request = assert_refused(server, "the body is not JSON")
    assert request.body is None


def test_it_refuses_a_json_body_that_is_not_an_object(server: ReplayServer) -> None:
    status, error = raw_json(server, [body()])
    assert status == 400
    assert error["error"] == {"type": "invalid_request_error", "message": "the body is not a JSON object"}
    assert_refused(server, "not a JSON object")


def test_it_refuses_get_and_other_paths(server: ReplayServer) -> None:
    status, _, data = raw(server, None, method="GET", path="/v1/messages")
    assert status == 400
    assert json.loads(data)["error"] == {
        "type": "invalid_request_error",
        "message": "GET /v1/messages is not served here; only POST /v1/messages",
    }
    get = assert_refused(server, "GET /v1/messages is not served here")
    assert get.method == "GET"

    status, _, data = raw(server, json.dumps(body()).encode(), path="/v1/complete", headers={"anthropic-beta": BETA})
    assert status == 400
    assert json.loads(data)["error"]["type"] == "invalid_request_error"
    assert_refused(server, "POST /v1/complete is not served here")
    assert len(server.requests) == 2


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH"])
def test_it_refuses_other_methods_like_get(server: ReplayServer, method: str) -> None:
    """Any method but POST is refused the same way: a 400 invalid_request_error, recorded."""
    data = json.dumps(body()).encode() if method != "DELETE" else None
    status, _, answer = raw(server, data, method=method, headers={"anthropic-beta": BETA})
    assert status == 400
    assert json.loads(answer)["error"] == {
        "type": "invalid_request_error",
        "message": f"{method} /v1/messages is not served here; only POST /v1/messages",
    }
    request = assert_refused(server, f"{method} /v1/messages is not served here")
    assert request.method == method


def test_a_chunked_json_body_is_read_as_json(server: ReplayServer) -> None:
    """A client may send the body chunked, without Content-Length; it is still the same JSON request."""
    port = urlsplit(server.url).port
    assert port
    data = json.dumps(body()).encode()
    head = (
        "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"anthropic-beta: {BETA}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    chunked = f"{len(data):x}\r\n".encode() + data + b"\r\n0\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        connection.sendall(head.encode() + chunked)
        connection.shutdown(socket.SHUT_WR)
        response = b"".join(iter(lambda: connection.recv(65536), b""))
    status_line, _, rest = response.partition(b"\r\n")
    answer = json.loads(rest.partition(b"\r\n\r\n")[2])
    assert server.requests[0].refused is None, server.requests[0].refused
    assert status_line.split()[1] == b"200"
    assert answer["content"] == [{"type": "text", "text": "first"}]


def test_a_refused_streaming_request_raises_before_any_event(server: ReplayServer) -> None:
    args: dict[str, Any] = {"model": MODEL, "max_tokens": 64, "messages": HELLO, "tools": [MEMORY_TOOL]}
    with (
        pytest.raises(anthropic.BadRequestError) as info,
        client_for(server).beta.messages.stream(**args) as stream,
    ):
        stream.get_final_message()
    assert_bad_request(info, "beta header")
    assert_refused(server, "beta header")
    assert server.requests[-1].body["stream"] is True


def test_a_refused_request_does_not_use_up_a_turn(server: ReplayServer) -> None:
    with pytest.raises(anthropic.BadRequestError):
        create(server, betas=[])
    assert create(server).content[0].text == "first"
    assert [r.refused is None for r in server.requests] == [False, True]


def test_it_says_when_the_recorded_session_is_over() -> None:
    with ReplayServer([reply(text("the only turn"))]) as server:
        assert create(server).content[0].text == "the only turn"
        with pytest.raises(anthropic.BadRequestError) as info:
            create(server)
        assert_bad_request(info, "the recorded session is over")
        assert len(server.requests) == 2
        assert server.remaining == 0
        assert server.requests[1].conversation is not None


def test_with_require_memory_off_it_accepts_a_plain_request() -> None:
    plain = {"model": MODEL, "max_tokens": 64, "messages": HELLO}
    with ReplayServer([reply(text("plain"))]) as strict:
        with pytest.raises(anthropic.BadRequestError) as info:
            client_for(strict).messages.create(**plain)
        assert_bad_request(info, "beta header")
    with ReplayServer([reply(text("plain"))], require_memory=False) as lenient:
        message = client_for(lenient).messages.create(**plain)
        assert message.content[0].type == "text"
        assert message.content[0].text == "plain"
        [request] = lenient.requests
        assert request.refused is None
        assert request.betas == []
        assert request.conversation is not None
        assert request.conversation.tools == []
        # The conversation rules still hold without the memory requirement.
        with pytest.raises(anthropic.BadRequestError) as info:
            client_for(lenient).messages.create(**{**plain, "messages": [{"role": "assistant", "content": "Hi"}]})
        assert_bad_request(info, "the first message must be from the user")


# -- streaming ----------------------------------------------------------------------


def _turn() -> Reply:
    return reply(
        text("Let me look."),
        tool_use("view", id="toolu_s1", path="/memories/notes.txt", view_range=[2, -1]),
        tool_use("create", id="toolu_s2", path="/memories/ü ñ.txt", file_text='quote " and\nnewline {}\n'),
    )


def test_a_streamed_reply_gives_the_sdk_the_same_message_as_the_json_reply() -> None:
    with ReplayServer([_turn()]) as json_server:
        created = create(json_server)
    with ReplayServer([_turn()]) as sse_server:
        args: dict[str, Any] = {"model": MODEL, "max_tokens": 256, "messages": HELLO, "tools": [MEMORY_TOOL]}
        with client_for(sse_server).beta.messages.stream(**args, betas=[BETA]) as stream:
            kinds = [event.type for event in stream]
            streamed = stream.get_final_message()
    assert sse_server.requests[0].body["stream"] is True
    assert kinds[0] == "message_start"
    assert kinds[-1] == "message_stop"
    assert streamed.model_dump() == created.model_dump()
    assert [b.type for b in streamed.content] == ["text", "tool_use", "tool_use"]
    assert streamed.content[0].text == "Let me look."
    assert [(b.id, b.name, b.input) for b in streamed.content[1:]] == [
        ("toolu_s1", "memory", {"command": "view", "path": "/memories/notes.txt", "view_range": [2, -1]}),
        (
            "toolu_s2",
            "memory",
            {"command": "create", "path": "/memories/ü ñ.txt", "file_text": 'quote " and\nnewline {}\n'},
        ),
    ]
    assert streamed.stop_reason == "tool_use"


def test_a_streamed_text_reply_arrives_as_text_deltas() -> None:
    with ReplayServer([reply(text("Hello, Ada."))]) as server:
        args: dict[str, Any] = {"model": MODEL, "max_tokens": 64, "messages": HELLO, "tools": [MEMORY_TOOL]}
        with client_for(server).beta.messages.stream(**args, betas=[BETA]) as stream:
            assert "".join(stream.text_stream) == "Hello, Ada."
            final = stream.get_final_message()
    assert final.stop_reason == "end_turn"
    assert final.id == "msg_replay_0001"
    assert final.usage.output_tokens > 0


def test_the_event_stream_on_the_wire() -> None:
    with ReplayServer([_turn()]) as server:
        status, headers, data = raw(
            server,
            json.dumps(body(stream=True)).encode(),
            headers={"Content-Type": "application/json", "anthropic-beta": BETA},
        )
    assert status == 200
    assert headers["Content-Type"] == "text/event-stream"
    frames = [frame for frame in data.decode().split("\n\n") if frame]
    names = [frame.split("\n")[0].removeprefix("event: ") for frame in frames]
    payloads = [json.loads(frame.split("\n")[1].removeprefix("data: ")) for frame in frames]
    assert names == [
        "message_start",
        *["content_block_start", "content_block_delta", "content_block_stop"] * 3,
        "message_delta",
        "message_stop",
    ]
    assert [p["type"] for p in payloads] == names
    assert payloads[0]["message"]["content"] == []
    assert payloads[0]["message"]["stop_reason"] is None
    assert payloads[-2]["delta"]["stop_reason"] == "tool_use"
    deltas = [p["delta"] for p in payloads if p["type"] == "content_block_delta"]
    assert deltas[0] == {"type": "text_delta", "text": "Let me look."}
    assert json.loads(deltas[2]["partial_json"])["file_text"] == 'quote " and\nnewline {}\n'


def test_events_rebuild_the_message() -> None:
    message = {**_turn(), "id": "msg_x", "model": MODEL, "usage": {"input_tokens": 5, "output_tokens": 9}}
    stream = list(events(message))
    start = stream[0][1]["message"]
    assert start["id"] == "msg_x"
    assert start["usage"] == {"input_tokens": 5, "output_tokens": 1}
    blocks: list[dict[str, Any]] = []
    for name, data in stream:
        if name == "content_block_start":
            assert data["index"] == len(blocks)
            blocks.append(dict(data["content_block"]))
        elif name == "content_block_delta":
            delta = data["delta"]
            if delta["type"] == "text_delta":
                blocks[data["index"]]["text"] += delta["text"]
            else:
                blocks[data["index"]]["input"] = json.loads(delta["partial_json"])
    assert blocks == message["content"]
    assert stream[-2][1]["usage"] == {"output_tokens": 9}


# -- threads and the conversation ---------------------------------------------------------


def test_a_continued_thread_sees_the_whole_history() -> None:
    turns = [
        reply(text("Checking."), tool_use("view", id="toolu_t1", path="/memories")),
        reply(tool_use("create", id="toolu_t2", path="/memories/a.txt", file_text="a\n")),
        reply(text("Done.")),
    ]
    system = "Be brief."
    cm = {"edits": [{"type": "clear_tool_uses_20250919", "exclude_tools": ["memory"]}]}
    with ReplayServer(turns) as server:
        first = create(server, system=system, context_management=cm, thread={"type": "create"})
        result_1 = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_t1", "content": "0B"}]}
        # Later turns send only the new message, no tools or system: the thread holds them.
        status, second = raw_json(
            server,
            {
                "model": MODEL,
                "max_tokens": 256,
                "messages": [result_1],
                "thread": {"type": "continue", "previous_message_id": first.id},
            },
        )
        assert status == 200
        result_2 = {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_t2", "content": "created", "is_error": False}],
        }
        status, third = raw_json(
            server,
            {
                "model": MODEL,
                "max_tokens": 256,
                "messages": [result_2],
                "thread": {"type": "continue", "previous_message_id": second["id"]},
            },
        )
        assert status == 200
        assert third["content"] == [{"type": "text", "text": "Done."}]

    assert [r.refused for r in server.requests] == [None, None, None]
    conversations = [r.conversation for r in server.requests]
    assert all(c is not None for c in conversations)
    last = conversations[-1]
    assert last is not None
    assert last.messages == [
        HELLO[0],
        {"role": "assistant", "content": turns[0]["content"]},
        result_1,
        {"role": "assistant", "content": turns[1]["content"]},
        result_2,
    ]
    assert last.system == system
    assert last.tools == [MEMORY_TOOL]
    assert last.tool_results() == [ToolResult("toolu_t2", "created", False)]
    assert len(server.requests[-1].body["messages"]) == 1


def test_a_continued_thread_must_still_answer_the_tool_use() -> None:
    with ReplayServer([reply(tool_use("view", id="toolu_q", path="/memories")), reply(text("x"))]) as server:
        first = create(server, thread={"type": "create"})
        with pytest.raises(anthropic.BadRequestError) as info:
            create(
                server,
                messages=[{"role": "user", "content": "never mind"}],
                thread={"type": "continue", "previous_message_id": first.id},
            )
        assert_bad_request(info, "messages.2: tool_use ids ['toolu_q'] have no tool_result")
        assert_refused(server, "toolu_q", turns_left=1)


def test_a_callable_turn_sees_the_conversation_so_far() -> None:
    seen: list[Conversation] = []

    def echo(conversation: Conversation) -> Reply:
        seen.append(conversation)
        return reply(text(f"You said: {conversation.last_user_text()}"))

    cm = {"edits": [{"type": "clear_tool_uses_20250919"}]}
    with ReplayServer([echo]) as server:
        message = create(server, system=[{"type": "text", "text": "Be brief."}], context_management=cm)
    assert message.content[0].text == "You said: Hello"
    [conversation] = seen
    assert conversation.model == MODEL
    assert conversation.system == [{"type": "text", "text": "Be brief."}]
    assert conversation.tools == [MEMORY_TOOL]
    assert conversation.context_management == cm
    assert conversation.messages == HELLO
    assert conversation.tool_results() == []


def test_conversation_reads_tool_results_and_the_last_user_text() -> None:
    conversation = Conversation(
        MODEL,
        None,
        [MEMORY_TOOL],
        [
            {"role": "user", "content": [{"type": "text", "text": "Remember"}, {"type": "text", "text": "this."}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "memory", "input": {}},
                    {"type": "tool_use", "id": "toolu_2", "name": "memory", "input": {}},
                    {"type": "tool_use", "id": "toolu_3", "name": "memory", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "plain"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": [{"type": "text", "text": "in "}, {"type": "text", "text": "blocks"}],
                    },
                    {"type": "tool_result", "tool_use_id": "toolu_3", "content": "Error: no", "is_error": True},
                ],
            },
        ],
        None,
    )
    assert conversation.tool_results() == [
        ToolResult("toolu_1", "plain", False),
        ToolResult("toolu_2", "in blocks", False),
        ToolResult("toolu_3", "Error: no", True),
    ]
    assert conversation.last_user_text() == "Remember\nthis."
    ended = Conversation(MODEL, None, [], [*conversation.messages, {"role": "assistant", "content": "ok"}], None)
    assert ended.tool_results() == []


def test_the_sdk_client_of_a_replay_runs_the_tool_runner_without_a_socket(tmp_path: Path) -> None:
    """``Replay.client()``: the real SDK client and tool runner, answered through
    an httpx transport; the tool call lands in the vault as a commit."""
    vault = Vault.init(tmp_path / "agent.vault", key=generate_key())
    memory = VaultMemoryTool(vault, actor="support-bot")
    turns = [reply(tool_use("create", path="/memories/a.txt", file_text="hello\n")), reply(text("Saved."))]
    with Replay(turns) as replay:
        client = replay.client()
        request = memory_request(memory, model=MODEL, max_tokens=256, messages=[{"role": "user", "content": "hi"}])
        final = client.beta.messages.tool_runner(**request).until_done()
        assert [b.text for b in final.content if b.type == "text"] == ["Saved."]
        assert replay.remaining == 0 and all(r.refused is None for r in replay.requests)
    assert vault.read("/memories/a.txt") == "hello\n"
    vault.close()


def test_the_async_sdk_client_of_a_replay_streams_too() -> None:
    async def ask() -> str:
        with Replay([reply(text("streamed"))], require_memory=False) as replay:
            client = replay.async_client()
            async with client.messages.stream(model=MODEL, max_tokens=64, messages=HELLO) as stream:
                message = await stream.get_final_message()
            return "".join(b.text for b in message.content if b.type == "text")

    assert anyio.run(ask) == "streamed"
