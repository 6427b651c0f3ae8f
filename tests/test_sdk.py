"""The vault inside the real Anthropic SDK tool runner, end to end.

The application side is all real: ``anthropic.Anthropic`` / ``AsyncAnthropic``,
``client.beta.messages.tool_runner(**memory_request(...))``, the vault, git.
Only Claude is scripted: :class:`vaultmem.replay.ReplayServer` answers the
Messages API on 127.0.0.1 with recorded turns and refuses what the API would.
The recorded session runs every command, successful and failing, in each of
sync/async x JSON/streamed x server-side thread/full history.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anthropic
import pytest
from anthropic.types.beta import BetaMemoryTool20250818CreateCommand, BetaMemoryTool20250818ViewCommand
from conftest import commit_count, git

from vaultmem import AsyncVaultMemoryTool, NotFoundError, Vault, VaultMemoryTool, memory_request
from vaultmem.testing.replay import Conversation, ReplayServer, Reply, Request, ToolResult, reply, text, tool_use

MODEL = "claude-sonnet-4-6"
BETA = "context-management-2025-06-27"
MEMORY_TOOL = {"type": "memory_20250818", "name": "memory"}
ACTOR = "support-bot"
SESSION = "sess-sdk"
USER = "Remember that I drink coffee now, not tea, and that I live in London."

APP_SYSTEM = "You are the support assistant of a coffee shop."
TOPIC = "the customer's preferences"
SYSTEM = (
    "You are the support assistant of a coffee shop.\n\n"
    "Only write down information relevant to the customer's preferences in your memory system.\n\n"
    "Note: when editing your memory folder, always try to keep its content up-to-date, coherent and organized. "
    "You can rename or delete files that are no longer relevant. Do not create new files unless necessary.\n\n"
    "Your memory directory is encrypted and every change to it is recorded for audit. "
    "Never write passwords, API keys, card numbers or other secrets to it."
)
CONTEXT_MANAGEMENT = {"edits": [{"type": "clear_tool_uses_20250919", "exclude_tools": ["memory"]}]}

DIR = "Here're the files and directories up to 2 levels deep in {}, excluding hidden items and node_modules:"
FILE = "Here's the content of {} with line numbers:"
PREFS = "/memories/prefs.txt"
OLD = "/memories/old.txt"
ADA = "/memories/profile/ada.txt"
FINAL_TEXT = "name: Ada\ndrink: coffee\nfood: tea cakes\ncity: London\n"  # 53 bytes


@dataclass(frozen=True)
class Call:
    """One memory call of the script and the exact tool_result it must get back (SPEC.md)."""

    id: str
    input: dict[str, Any]
    result: str
    is_error: bool = False


@dataclass(frozen=True)
class Step:
    say: str | None
    calls: tuple[Call, ...]
    commits_after: int  # commits in the vault once this step's calls have run


def _view(id: str, path: str, result: str, **more: Any) -> Call:
    return Call(id, {"command": "view", "path": path, **more}, result, False)


# What Claude does in the recorded session, turn by turn; the last turn (a summary) is built from what it was sent.
STEPS = [
    Step(
        "Let me check my memory first.",
        (_view("toolu_01", "/memories", DIR.format("/memories") + "\n0B\t/memories"),),
        0,
    ),
    Step(
        None,
        (
            Call(
                "toolu_02",
                {"command": "create", "path": PREFS, "file_text": "name: Ada\ndrink: tea\nfood: tea cakes\n"},
                f"File created successfully at: {PREFS}",
            ),
            Call(
                "toolu_03",
                {"command": "create", "path": PREFS, "file_text": "clobber"},
                f"Error: File {PREFS} already exists",
                True,
            ),
        ),
        1,
    ),
    Step(
        "Updating the drink.",
        (
            Call(
                "toolu_04",
                {"command": "str_replace", "path": PREFS, "old_str": "tea", "new_str": "coffee"},
                "No replacement was performed. Multiple occurrences of old_str `tea` in lines: 2, 3. "
                "Please ensure it is unique",
                True,
            ),
            Call(
                "toolu_05",
                {"command": "str_replace", "path": PREFS, "old_str": "drink: tea", "new_str": "drink: coffee"},
                "The memory file has been edited. Here is the snippet showing the change (with line numbers):\n"
                "     1\tname: Ada\n     2\tdrink: coffee\n     3\tfood: tea cakes",
            ),
            Call(
                "toolu_06",
                {"command": "str_replace", "path": PREFS, "old_str": "juice", "new_str": "water"},
                f"No replacement was performed, old_str `juice` did not appear verbatim in {PREFS}.",
                True,
            ),
        ),
        2,
    ),
    Step(
        None,
        (
            Call(
                "toolu_07",
                {"command": "insert", "path": PREFS, "insert_line": 3, "insert_text": "city: London\n"},
                f"The file {PREFS} has been edited.",
            ),
            Call(
                "toolu_08",
                {"command": "insert", "path": PREFS, "insert_line": 99, "insert_text": "zip: N1\n"},
                "Error: Invalid `insert_line` parameter: 99. It should be within the range of lines of the file: "
                "[0, 4]",
                True,
            ),
        ),
        3,
    ),
    Step(
        "Checking what I wrote.",
        (
            _view(
                "toolu_09",
                PREFS,
                FILE.format(PREFS) + "\n     2\tdrink: coffee\n     3\tfood: tea cakes",
                view_range=[2, 3],
            ),
            Call(
                "toolu_10",
                {"command": "view", "path": "/memories/nope.txt"},
                "The path /memories/nope.txt does not exist. Please provide a valid path.",
                True,
            ),
            Call(
                "toolu_11",
                {"command": "view", "path": "/memories/../etc/passwd"},
                "Error: Invalid `path`: '.' and '..' segments are not allowed. Use a path such as /memories/notes.txt.",
                True,
            ),
            Call(
                "toolu_12",
                {"command": "undo", "path": PREFS},
                "Error: Unknown command `undo`. Use one of: view, create, str_replace, insert, delete, rename.",
                True,
            ),
        ),
        3,
    ),
    Step(
        "Tidying up.",
        (
            Call(
                "toolu_13",
                {"command": "create", "path": OLD, "file_text": "stale\n"},
                f"File created successfully at: {OLD}",
            ),
            Call(
                "toolu_14",
                {"command": "rename", "old_path": PREFS, "new_path": OLD},
                f"Error: The destination {OLD} already exists",
                True,
            ),
            Call(
                "toolu_15",
                {"command": "rename", "old_path": PREFS, "new_path": ADA},
                f"Successfully renamed {PREFS} to {ADA}",
            ),
        ),
        5,
    ),
    Step(
        None,
        (
            Call("toolu_16", {"command": "delete", "path": OLD}, f"Successfully deleted {OLD}"),
            Call("toolu_17", {"command": "delete", "path": OLD}, f"Error: The path {OLD} does not exist", True),
            _view(
                "toolu_18",
                "/memories",
                DIR.format("/memories") + "\n53B\t/memories\n53B\t/memories/profile/\n53B\t/memories/profile/ada.txt",
            ),
        ),
        6,
    ),
]
CALLS = [call for step in STEPS for call in step.calls]
EXPECTED_RESULTS = {call.id: (call.result, call.is_error) for call in CALLS}
SUMMARY = "Noted. In my last step 2 calls worked and 1 failed."
N_TURNS = len(STEPS) + 1

# The vault's history, newest first: one commit per successful mutation, nothing for views and failures.
EXPECTED_HISTORY = [
    ("delete", (OLD,)),
    ("rename", (PREFS, ADA)),
    ("create", (OLD,)),
    ("insert", (PREFS,)),
    ("str_replace", (PREFS,)),
    ("create", (PREFS,)),
]


def _blocks(step: Step) -> list[dict[str, Any]]:
    said = [text(step.say)] if step.say else []
    calls = [
        tool_use(c.input["command"], id=c.id, **{k: v for k, v in c.input.items() if k != "command"})
        for c in step.calls
    ]
    return [*said, *calls]


@dataclass
class Script:
    """Claude's side.  The first turn is a recorded reply; every later one is a function of the conversation that
    notes, from the model's side, what the application sent back and how many commits the vault had by then."""

    vault: Vault
    seen: list[tuple[list[ToolResult], int]] = field(default_factory=list)

    def turns(self) -> list[Reply | Callable[[Conversation], Reply]]:
        later = [self._observing(reply(*_blocks(step))) for step in STEPS[1:]]
        return [reply(*_blocks(STEPS[0])), *later, self._summary]

    def _observe(self, conversation: Conversation) -> None:
        self.seen.append((conversation.tool_results(), commit_count(self.vault.path)))

    def _observing(self, answer: Reply) -> Callable[[Conversation], Reply]:
        def turn(conversation: Conversation) -> Reply:
            self._observe(conversation)
            return answer

        return turn

    def _summary(self, conversation: Conversation) -> Reply:
        self._observe(conversation)
        results = conversation.tool_results()
        worked = sum(not r.is_error for r in results)
        return reply(text(f"Noted. In my last step {worked} calls worked and {len(results) - worked} failed."))


def _request(tool: VaultMemoryTool | AsyncVaultMemoryTool, *, stream: bool, thread: bool) -> dict[str, Any]:
    extra: dict[str, Any] = {} if thread else {"thread": False}
    return memory_request(
        tool,
        messages=[{"role": "user", "content": USER}],
        model=MODEL,
        max_tokens=1024,
        system=APP_SYSTEM,
        topic=TOPIC,
        stream=stream,
        **extra,
    )


def run_sync(server: ReplayServer, tool: VaultMemoryTool, *, stream: bool, thread: bool, until_done: bool) -> list[Any]:
    """Drive the real sync runner; every assistant message it produced (only the last with until_done)."""
    client = anthropic.Anthropic(base_url=server.url, api_key="test", max_retries=0)
    runner = client.beta.messages.tool_runner(**_request(tool, stream=stream, thread=thread))
    if until_done:
        return [runner.until_done()]
    messages = []
    for item in runner:
        if stream:
            kinds = [event.type for event in item]  # read every event of the reply
            assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
            messages.append(item.get_final_message())
        else:
            messages.append(item)
    return messages


def run_async(
    server: ReplayServer, tool: AsyncVaultMemoryTool, *, stream: bool, thread: bool, until_done: bool
) -> list[Any]:
    """Drive the real async runner the same way."""

    async def main() -> list[Any]:
        client = anthropic.AsyncAnthropic(base_url=server.url, api_key="test", max_retries=0)
        runner = client.beta.messages.tool_runner(**_request(tool, stream=stream, thread=thread))
        if until_done:
            return [await runner.until_done()]
        messages = []
        async for item in runner:
            if stream:
                kinds = [event.type async for event in item]
                assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
                messages.append(await item.get_final_message())
            else:
                messages.append(item)
        return messages

    return asyncio.run(main())


def _raw_results(request: Request) -> list[tuple[str, Any, bool]]:
    """The tool_result blocks of the last message of a request body, read straight from the JSON."""
    last = request.body["messages"][-1]
    if last["role"] != "user" or isinstance(last["content"], str):
        return []
    return [
        (block["tool_use_id"], block.get("content"), block.get("is_error", False))
        for block in last["content"]
        if block.get("type") == "tool_result"
    ]


def seen_by_model(request: Request) -> Conversation:
    """The conversation of an accepted request, threads resolved."""
    assert request.conversation is not None
    return request.conversation


def assert_requests(server: ReplayServer, *, stream: bool, thread: bool) -> None:
    requests = server.requests
    assert len(requests) == N_TURNS
    assert server.remaining == 0
    assert [r.refused for r in requests] == [None] * N_TURNS
    for request in requests:
        assert request.method == "POST"
        assert request.path.split("?")[0] == "/v1/messages"
        assert BETA in request.betas
        assert request.body["model"] == MODEL
        assert request.body["max_tokens"] == 1024
        assert request.body.get("stream", False) is stream
        assert request.body.get("tools", [MEMORY_TOOL]) == [MEMORY_TOOL]
        assert request.body["context_management"] == CONTEXT_MANAGEMENT
        conversation = seen_by_model(request)
        assert conversation.model == MODEL
        assert conversation.tools == [MEMORY_TOOL]
        assert conversation.system == SYSTEM
        assert conversation.context_management == CONTEXT_MANAGEMENT

    first = requests[0].body
    assert first["tools"] == [MEMORY_TOOL]
    assert first["system"] == SYSTEM
    assert first["context_management"] == CONTEXT_MANAGEMENT
    assert first["messages"] == [{"role": "user", "content": USER}]

    if thread:
        # Server-side thread: one create, then each request continues the reply before it and sends only the new
        # message (the tool results); the server resolves the rest.
        assert first["thread"] == {"type": "create"}
        for n, request in enumerate(requests[1:], start=1):
            assert request.body["thread"] == {"type": "continue", "previous_message_id": f"msg_replay_{n:04d}"}
            assert len(request.body["messages"]) == 1
    else:
        # Full history: every request resends the tool, the system prompt and the whole conversation.
        for n, request in enumerate(requests):
            assert "thread" not in request.body
            assert request.body["tools"] == [MEMORY_TOOL]
            assert request.body["system"] == SYSTEM
            assert len(request.body["messages"]) == 2 * n + 1

    # The whole conversation as the model saw it on the last request, threads resolved.
    history = seen_by_model(requests[-1]).messages
    assert [m["role"] for m in history] == ["user", *["assistant", "user"] * len(STEPS)]
    assert history[0] == {"role": "user", "content": USER}
    for step, said in zip(STEPS, history[1::2], strict=True):
        uses = [b for b in said["content"] if b["type"] == "tool_use"]
        assert [(b["id"], b["name"], b["input"]) for b in uses] == [(c.id, "memory", c.input) for c in step.calls]

    # Every tool result, as the server parsed it and as the JSON carried it, in the order of the calls.
    parsed = [(r.tool_use_id, r.content, r.is_error) for q in requests for r in seen_by_model(q).tool_results()]
    assert parsed == [(c.id, c.result, c.is_error) for c in CALLS]
    raw = [result for request in requests for result in _raw_results(request)]
    assert raw == [(c.id, c.result, c.is_error) for c in CALLS]
    for request, step in zip(requests[1:], STEPS, strict=True):
        assert [r.tool_use_id for r in seen_by_model(request).tool_results()] == [c.id for c in step.calls]


def assert_model_side(script: Script) -> None:
    """What the script itself saw at each turn: the results of the step before, and the commits so far."""
    assert len(script.seen) == len(STEPS)
    for (results, commits), step in zip(script.seen, STEPS, strict=True):
        assert [(r.tool_use_id, r.content, r.is_error) for r in results] == [
            (c.id, c.result, c.is_error) for c in step.calls
        ]
        assert commits == step.commits_after


def assert_messages(messages: list[Any], *, until_done: bool) -> None:
    final = messages[-1]
    assert final.content[0].type == "text"
    assert final.content[0].text == SUMMARY
    assert final.stop_reason == "end_turn"
    assert final.model == MODEL
    if until_done:
        assert len(messages) == 1
        assert final.id == f"msg_replay_{N_TURNS:04d}"
        return
    # The runner yields each assistant turn, in order, as the script wrote it.
    assert [m.id for m in messages] == [f"msg_replay_{n:04d}" for n in range(1, N_TURNS + 1)]
    for message, step in zip(messages, STEPS, strict=False):
        assert message.stop_reason == "tool_use"
        uses = [b for b in message.content if b.type == "tool_use"]
        assert [(b.id, b.input) for b in uses] == [(c.id, c.input) for c in step.calls]
        texts = [b.text for b in message.content if b.type == "text"]
        assert texts == ([step.say] if step.say else [])


def assert_vault(vault: Vault, actor: str, session: str) -> None:
    assert commit_count(vault.path) == len(EXPECTED_HISTORY)
    history = vault.history()
    assert [(v.command, v.paths) for v in history] == EXPECTED_HISTORY
    assert [(v.actor, v.session) for v in history] == [(actor, session)] * len(EXPECTED_HISTORY)
    # The same seen with stock git, as an auditor would.
    assert git(vault.path, "log", "--format=%an", "refs/heads/main").splitlines() == [actor] * len(EXPECTED_HISTORY)
    sessions = git(vault.path, "log", "--format=%(trailers:key=Vaultmem-Session,valueonly)", "refs/heads/main")
    assert [line for line in sessions.splitlines() if line] == [session] * len(EXPECTED_HISTORY)
    commands = git(vault.path, "log", "--format=%(trailers:key=Vaultmem-Command,valueonly)", "refs/heads/main")
    assert [line for line in commands.splitlines() if line] == [c for c, _ in EXPECTED_HISTORY]
    # The final memory: one file, at its new path.
    assert git(vault.path, "ls-tree", "-r", "--name-only", "refs/heads/main").splitlines() == [
        "memories/profile/ada.txt"
    ]
    assert vault.read(ADA) == FINAL_TEXT
    for gone in (PREFS, OLD):
        with pytest.raises(NotFoundError):
            vault.read(gone)


MATRIX = pytest.mark.parametrize(
    ("stream", "thread", "until_done"),
    [
        pytest.param(stream, thread, until_done, id=f"{mode}-{threading}-{how}")
        for stream, mode in ((False, "json"), (True, "stream"))
        for thread, threading in ((True, "thread"), (False, "history"))
        for until_done, how in ((False, "iterate"), (True, "until_done"))
    ],
)


@MATRIX
def test_sync_tool_runner_drives_the_vault_through_every_command(
    vault: Vault, stream: bool, thread: bool, until_done: bool
) -> None:
    tool = VaultMemoryTool(vault, actor=ACTOR, session=SESSION)
    script = Script(vault)
    with ReplayServer(script.turns()) as server:
        messages = run_sync(server, tool, stream=stream, thread=thread, until_done=until_done)
    assert_messages(messages, until_done=until_done)
    assert_requests(server, stream=stream, thread=thread)
    assert_model_side(script)
    assert_vault(vault, ACTOR, SESSION)


@MATRIX
def test_async_tool_runner_drives_the_vault_through_every_command(
    vault: Vault, stream: bool, thread: bool, until_done: bool
) -> None:
    tool = AsyncVaultMemoryTool(vault, actor=ACTOR, session=SESSION)
    script = Script(vault)
    with ReplayServer(script.turns()) as server:
        messages = run_async(server, tool, stream=stream, thread=thread, until_done=until_done)
    assert_messages(messages, until_done=until_done)
    assert_requests(server, stream=stream, thread=thread)
    assert_model_side(script)
    assert_vault(vault, ACTOR, SESSION)


def test_the_tools_declare_the_memory_tool(vault: Vault) -> None:
    for tool in (VaultMemoryTool(vault), AsyncVaultMemoryTool(vault)):
        assert tool.name == "memory"
        assert tool.to_dict() == MEMORY_TOOL


def test_without_a_session_name_the_tool_makes_one_up_and_records_it_on_every_commit(vault: Vault) -> None:
    tool = VaultMemoryTool(vault, actor=ACTOR)
    assert tool.session
    script = Script(vault)
    with ReplayServer(script.turns()) as server:
        messages = run_sync(server, tool, stream=False, thread=True, until_done=False)
    assert_messages(messages, until_done=False)
    assert_vault(vault, ACTOR, tool.session)
    assert tool.session != VaultMemoryTool(vault).session  # one per tool


def test_a_refused_request_stops_the_runner_with_the_servers_reason(vault: Vault) -> None:
    """The replay server is strict: a runner that lost the memory beta gets the API's 400, and nothing runs."""
    tool = VaultMemoryTool(vault, actor=ACTOR, session=SESSION)
    request = _request(tool, stream=False, thread=False)
    request["betas"] = []
    with ReplayServer(Script(vault).turns()) as server:
        client = anthropic.Anthropic(base_url=server.url, api_key="test", max_retries=0)
        with pytest.raises(anthropic.BadRequestError, match="anthropic-beta: context-management-2025-06-27"):
            client.beta.messages.tool_runner(**request).until_done()
    assert len(server.requests) == 1
    assert server.requests[0].refused is not None
    assert server.remaining == N_TURNS
    assert commit_count(vault.path) == 0


def test_sdk_typed_commands_reach_the_vault(vault: Vault) -> None:
    """The SDK's own dispatch path (BetaAbstractMemoryTool.execute with typed commands) works too."""
    tool = VaultMemoryTool(vault, actor="support-bot", session="typed")
    created = tool.execute(
        BetaMemoryTool20250818CreateCommand(command="create", path="/memories/t.txt", file_text="typed\n")
    )
    assert created == "File created successfully at: /memories/t.txt"
    viewed = tool.execute(BetaMemoryTool20250818ViewCommand(command="view", path="/memories/t.txt"))
    assert viewed == "Here's the content of /memories/t.txt with line numbers:\n     1\ttyped"
    assert commit_count(vault.path) == 1
    assert [(v.command, v.actor, v.session) for v in vault.history()] == [("create", "support-bot", "typed")]


def test_tool_error_is_importable_from_vaultmem_as_the_readme_uses_it(vault: Vault) -> None:
    """The README says a call raises ToolError: it is the SDK's class, importable from vaultmem."""
    from anthropic.lib.tools import ToolError as SdkToolError

    from vaultmem import ToolError

    assert ToolError is SdkToolError
    with pytest.raises(ToolError, match="does not exist"):
        VaultMemoryTool(vault).call({"command": "view", "path": "/memories/none.txt"})
