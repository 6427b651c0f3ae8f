"""vaultmem.anthropic.agent: the request the application hands to the SDK's tool runner.

Pure functions: these tests build dictionaries and compare them exactly.  The
end-to-end behaviour of the same request against the real SDK is in test_sdk.py.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from conftest import commit_count

import vaultmem
from vaultmem import (
    MEMORY_BETA,
    AsyncVaultMemoryTool,
    Vault,
    VaultError,
    VaultMemoryTool,
    context_management,
    memory_request,
    memory_system_prompt,
)

MESSAGES = [{"role": "user", "content": "Remember that I like coffee."}]
MEMORY_TOOL = {"type": "memory_20250818", "name": "memory"}
BASH_TOOL = {"type": "bash_20250124", "name": "bash"}
WEATHER_TOOL = {
    "name": "weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}

TIDY = (
    "Note: when editing your memory folder, always try to keep its content up-to-date, coherent and organized. "
    "You can rename or delete files that are no longer relevant. Do not create new files unless necessary."
)
AUDIT = (
    "Your memory directory is encrypted and every change to it is recorded for audit. "
    "Never write passwords, API keys, card numbers or other secrets to it."
)
DEFAULT_EDITS = {"edits": [{"type": "clear_tool_uses_20250919", "exclude_tools": ["memory"]}]}


@pytest.fixture(params=["sync", "async"])
def memory(request: pytest.FixtureRequest, vault: Vault) -> VaultMemoryTool | AsyncVaultMemoryTool:
    """The sync tool (for Anthropic) and the async one (for AsyncAnthropic): the helper treats both alike."""
    if request.param == "sync":
        return VaultMemoryTool(vault, actor="support-bot", session="sess-agent")
    return AsyncVaultMemoryTool(vault, actor="support-bot", session="sess-agent")


# -- the constants ----------------------------------------------------------------


def test_memory_beta_is_the_context_management_beta() -> None:
    assert MEMORY_BETA == "context-management-2025-06-27"


def test_the_helpers_are_exported_from_the_package() -> None:
    from vaultmem.anthropic import agent

    assert vaultmem.memory_request is agent.memory_request
    assert vaultmem.memory_system_prompt is agent.memory_system_prompt
    assert vaultmem.context_management is agent.context_management
    assert vaultmem.MEMORY_BETA is agent.MEMORY_BETA
    for name in ("MEMORY_BETA", "memory_request", "memory_system_prompt", "context_management"):
        assert name in vaultmem.__all__


# -- memory_system_prompt -----------------------------------------------------------


def test_system_prompt_by_default_is_the_tidy_note_then_the_audit_note() -> None:
    assert memory_system_prompt() == TIDY + "\n\n" + AUDIT


def test_system_prompt_topic_sentence_comes_first() -> None:
    assert memory_system_prompt(topic="cooking") == (
        "Only write down information relevant to cooking in your memory system.\n\n" + TIDY + "\n\n" + AUDIT
    )


def test_system_prompt_topic_is_stripped() -> None:
    prompt = memory_system_prompt(topic="  the customer's orders \n", tidy=False, audited=False)
    assert prompt == "Only write down information relevant to the customer's orders in your memory system."


def test_system_prompt_leaves_out_each_note_that_is_off() -> None:
    assert memory_system_prompt(tidy=False) == AUDIT
    assert memory_system_prompt(audited=False) == TIDY
    assert memory_system_prompt(topic="x", tidy=False) == (
        "Only write down information relevant to x in your memory system.\n\n" + AUDIT
    )


def test_system_prompt_is_empty_when_everything_is_off() -> None:
    assert memory_system_prompt(tidy=False, audited=False) == ""


@pytest.mark.parametrize("topic", ["", "   ", "\n\t", 5, b"cooking"])
def test_system_prompt_refuses_an_empty_or_non_string_topic(topic: Any) -> None:
    with pytest.raises(VaultError, match="topic must be a non-empty string"):
        memory_system_prompt(topic=topic)


# -- context_management -----------------------------------------------------------


def test_context_management_by_default_keeps_memory_calls_and_leaves_the_rest_to_the_api() -> None:
    assert context_management() == DEFAULT_EDITS


def test_context_management_passes_trigger_keep_and_clear_at_least_through() -> None:
    assert context_management(trigger_tokens=30_000, keep_tool_uses=3, clear_at_least_tokens=5_000) == {
        "edits": [
            {
                "type": "clear_tool_uses_20250919",
                "trigger": {"type": "input_tokens", "value": 30_000},
                "keep": {"type": "tool_uses", "value": 3},
                "clear_at_least": {"type": "input_tokens", "value": 5_000},
                "exclude_tools": ["memory"],
            }
        ]
    }


def test_context_management_accepts_zero() -> None:
    edit = context_management(trigger_tokens=0, keep_tool_uses=0, clear_at_least_tokens=0)["edits"][0]
    assert edit["trigger"]["value"] == edit["keep"]["value"] == edit["clear_at_least"]["value"] == 0


def test_context_management_without_keep_memory_may_clear_memory_calls() -> None:
    assert context_management(keep_memory=False) == {"edits": [{"type": "clear_tool_uses_20250919"}]}


def test_context_management_returns_a_new_value_each_time() -> None:
    first = context_management()
    first["edits"][0]["exclude_tools"].append("bash")
    assert context_management() == DEFAULT_EDITS


@pytest.mark.parametrize("name", ["trigger_tokens", "keep_tool_uses", "clear_at_least_tokens"])
@pytest.mark.parametrize("value", [-1, True, False, 1.5, "100", [1]])
def test_context_management_refuses_a_value_that_is_not_a_whole_number(name: str, value: Any) -> None:
    with pytest.raises(VaultError, match=f"{name} must be a whole number of at least 0"):
        context_management(**{name: value})


# -- memory_request: defaults -----------------------------------------------------


def test_request_defaults(memory: VaultMemoryTool | AsyncVaultMemoryTool) -> None:
    request = memory_request(memory, messages=MESSAGES)
    assert request == {
        "model": "claude-sonnet-5-5",
        "max_tokens": 4096,
        "messages": MESSAGES,
        "tools": [memory],
        "betas": [MEMORY_BETA],
        "system": TIDY + "\n\n" + AUDIT,
        "context_management": DEFAULT_EDITS,
    }
    assert request["tools"][0] is memory
    assert request["context_management"]["edits"][0]["exclude_tools"] == ["memory"]


def test_request_puts_the_memory_tool_first_then_the_others_in_order(
    memory: VaultMemoryTool | AsyncVaultMemoryTool,
) -> None:
    request = memory_request(memory, messages=MESSAGES, tools=[WEATHER_TOOL, BASH_TOOL])
    assert request["tools"] == [memory, WEATHER_TOOL, BASH_TOOL]
    assert request["tools"][0] is memory


def test_request_accepts_tools_from_any_iterable(memory: VaultMemoryTool | AsyncVaultMemoryTool) -> None:
    request = memory_request(memory, messages=MESSAGES, tools=(t for t in [BASH_TOOL]))
    assert request["tools"] == [memory, BASH_TOOL]


def test_request_puts_the_memory_beta_first_and_drops_duplicates(
    memory: VaultMemoryTool | AsyncVaultMemoryTool,
) -> None:
    request = memory_request(
        memory,
        messages=MESSAGES,
        betas=["files-api-2025-04-14", MEMORY_BETA, "files-api-2025-04-14", "interleaved-thinking-2025-05-14"],
    )
    assert request["betas"] == [MEMORY_BETA, "files-api-2025-04-14", "interleaved-thinking-2025-05-14"]


def test_request_takes_a_single_beta_string_as_one_beta_or_refuses_it(
    memory: VaultMemoryTool | AsyncVaultMemoryTool,
) -> None:
    """``betas="files-api-2025-04-14"`` (a str is an Iterable[str]) must not become one beta per character."""
    try:
        request = memory_request(memory, messages=MESSAGES, betas="files-api-2025-04-14")
    except VaultError:
        return
    assert request["betas"] == [MEMORY_BETA, "files-api-2025-04-14"]


def test_request_takes_a_single_tool_dict_as_one_tool_or_refuses_it(
    memory: VaultMemoryTool | AsyncVaultMemoryTool,
) -> None:
    """``tools=WEATHER_TOOL`` (a dict is an Iterable) must not become one "tool" per key."""
    try:
        request = memory_request(memory, messages=MESSAGES, tools=WEATHER_TOOL)
    except VaultError:
        return
    assert request["tools"] == [memory, WEATHER_TOOL]


def test_request_copies_the_messages(memory: VaultMemoryTool | AsyncVaultMemoryTool) -> None:
    messages = [dict(m) for m in MESSAGES]
    request = memory_request(memory, messages=tuple(messages))
    assert request["messages"] == messages
    assert isinstance(request["messages"], list)
    request["messages"].append({"role": "assistant", "content": "ok"})
    assert messages == MESSAGES


def test_request_passes_model_max_tokens_and_other_params_through(
    memory: VaultMemoryTool | AsyncVaultMemoryTool,
) -> None:
    request = memory_request(
        memory,
        messages=MESSAGES,
        model="claude-opus-4-1",
        max_tokens=1,
        temperature=0.2,
        metadata={"user_id": "u-1"},
        thread=False,
        stream=True,
    )
    assert request["model"] == "claude-opus-4-1"
    assert request["max_tokens"] == 1
    assert request["temperature"] == 0.2
    assert request["metadata"] == {"user_id": "u-1"}
    assert request["thread"] is False
    assert request["stream"] is True


def test_request_does_no_io_and_changes_no_input(vault: Vault, memory: VaultMemoryTool | AsyncVaultMemoryTool) -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    system = [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}]
    edits = context_management(trigger_tokens=10)
    before = copy.deepcopy((messages, system, edits))
    memory_request(memory, messages=messages, system=system, context_editing=edits, topic="cooking")
    assert (messages, system, edits) == before
    assert commit_count(vault.path) == 0


# -- memory_request: system ---------------------------------------------------------


def test_request_system_str_comes_before_the_guidance(memory: VaultMemoryTool | AsyncVaultMemoryTool) -> None:
    request = memory_request(memory, messages=MESSAGES, system="You are a support assistant.", topic="orders")
    assert request["system"] == (
        "You are a support assistant.\n\n"
        "Only write down information relevant to orders in your memory system.\n\n" + TIDY + "\n\n" + AUDIT
    )


def test_request_system_blocks_get_the_guidance_as_a_last_text_block(
    memory: VaultMemoryTool | AsyncVaultMemoryTool,
) -> None:
    system = [
        {"type": "text", "text": "You are a support assistant."},
        {"type": "text", "text": "A long policy document.", "cache_control": {"type": "ephemeral"}},
    ]
    request = memory_request(memory, messages=MESSAGES, system=system, topic="orders")
    assert request["system"] == [
        {"type": "text", "text": "You are a support assistant."},
        {"type": "text", "text": "A long policy document.", "cache_control": {"type": "ephemeral"}},
        {
            "type": "text",
            "text": "Only write down information relevant to orders in your memory system.\n\n" + TIDY + "\n\n" + AUDIT,
        },
    ]
    assert len(system) == 2


def test_request_topic_and_notes_shape_the_guidance(memory: VaultMemoryTool | AsyncVaultMemoryTool) -> None:
    request = memory_request(memory, messages=MESSAGES, topic="cooking", tidy=False)
    assert request["system"] == "Only write down information relevant to cooking in your memory system.\n\n" + AUDIT
    request = memory_request(memory, messages=MESSAGES, audited=False)
    assert request["system"] == TIDY
    assert "secrets" not in request["system"]


def test_request_without_any_guidance_keeps_the_application_system_as_given(
    memory: VaultMemoryTool | AsyncVaultMemoryTool,
) -> None:
    assert "system" not in memory_request(memory, messages=MESSAGES, tidy=False, audited=False)
    request = memory_request(memory, messages=MESSAGES, system="Be brief.", tidy=False, audited=False)
    assert request["system"] == "Be brief."
    blocks = [{"type": "text", "text": "Be brief."}]
    request = memory_request(memory, messages=MESSAGES, system=blocks, tidy=False, audited=False)
    assert request["system"] == blocks


# -- memory_request: context editing ------------------------------------------------


def test_request_without_context_editing_has_no_context_management(
    memory: VaultMemoryTool | AsyncVaultMemoryTool,
) -> None:
    request = memory_request(memory, messages=MESSAGES, context_editing=False)
    assert "context_management" not in request
    assert request["betas"] == [MEMORY_BETA]  # the memory tool needs the beta all the same


def test_request_uses_a_context_management_dict_as_given(memory: VaultMemoryTool | AsyncVaultMemoryTool) -> None:
    own = context_management(trigger_tokens=50_000, keep_tool_uses=2)
    request = memory_request(memory, messages=MESSAGES, context_editing=own)
    assert request["context_management"] == own
    custom = {"edits": [{"type": "clear_tool_uses_20250919", "exclude_tools": ["memory", "web_search"]}]}
    assert memory_request(memory, messages=MESSAGES, context_editing=custom)["context_management"] == custom


@pytest.mark.parametrize("value", [None, 1, "yes", [DEFAULT_EDITS]])
def test_request_refuses_a_context_editing_that_is_not_a_bool_or_a_dict(
    memory: VaultMemoryTool | AsyncVaultMemoryTool, value: Any
) -> None:
    with pytest.raises(VaultError, match="context_editing must be True, False or a context_management dict"):
        memory_request(memory, messages=MESSAGES, context_editing=value)


# -- memory_request: errors ---------------------------------------------------------


@pytest.mark.parametrize("not_memory", [BASH_TOOL, WEATHER_TOOL, "memory", None, object(), {"name": "memory"}])
def test_request_refuses_a_first_argument_that_is_not_the_memory_tool(not_memory: Any) -> None:
    with pytest.raises(VaultError, match="the first argument must be the memory tool"):
        memory_request(not_memory, messages=MESSAGES)


def test_request_refuses_a_second_memory_tool(vault: Vault, memory: VaultMemoryTool | AsyncVaultMemoryTool) -> None:
    for second in (MEMORY_TOOL, VaultMemoryTool(vault), AsyncVaultMemoryTool(vault)):
        with pytest.raises(VaultError, match="tools= already holds a memory tool"):
            memory_request(memory, messages=MESSAGES, tools=[BASH_TOOL, second])


@pytest.mark.parametrize("messages", [[], (), "Remember that I like coffee.", b"hi"])
def test_request_refuses_empty_messages(memory: VaultMemoryTool | AsyncVaultMemoryTool, messages: Any) -> None:
    with pytest.raises(VaultError, match="messages must be a non-empty list of message dicts"):
        memory_request(memory, messages=messages)


@pytest.mark.parametrize("max_tokens", [0, -5, True, 1.5, "4096", None])
def test_request_refuses_a_bad_max_tokens(memory: VaultMemoryTool | AsyncVaultMemoryTool, max_tokens: Any) -> None:
    with pytest.raises(VaultError, match="max_tokens must be a whole number of at least 1"):
        memory_request(memory, messages=MESSAGES, max_tokens=max_tokens)


@pytest.mark.parametrize("topic", ["", "  "])
def test_request_refuses_an_empty_topic(memory: VaultMemoryTool | AsyncVaultMemoryTool, topic: str) -> None:
    with pytest.raises(VaultError, match="topic must be a non-empty string"):
        memory_request(memory, messages=MESSAGES, topic=topic)


def test_request_refuses_a_param_it_already_sets(memory: VaultMemoryTool | AsyncVaultMemoryTool) -> None:
    with pytest.raises(VaultError, match="context_management given twice"):
        memory_request(memory, messages=MESSAGES, context_management=DEFAULT_EDITS)


def test_request_errors_are_vault_errors_with_the_error_prefix(memory: VaultMemoryTool | AsyncVaultMemoryTool) -> None:
    calls = [
        lambda: memory_request(BASH_TOOL, messages=MESSAGES),
        lambda: memory_request(memory, messages=[]),
        lambda: memory_request(memory, messages=MESSAGES, max_tokens=0),
        lambda: memory_request(memory, messages=MESSAGES, topic=""),
        lambda: memory_request(memory, messages=MESSAGES, tools=[MEMORY_TOOL]),
        lambda: memory_request(memory, messages=MESSAGES, context_editing="on"),
        lambda: memory_request(memory, messages=MESSAGES, context_management={}),
        lambda: context_management(keep_tool_uses=-1),
    ]
    for make in calls:
        with pytest.raises(VaultError) as info:
            make()
        assert type(info.value) is VaultError
        assert str(info.value).startswith("Error: ")


def test_the_default_model_is_not_one_the_sdk_calls_deprecated() -> None:
    from anthropic.resources.messages.messages import DEPRECATED_MODELS

    from vaultmem.anthropic.agent import DEFAULT_MODEL

    assert DEFAULT_MODEL not in DEPRECATED_MODELS


def test_describe_call_names_the_command_and_its_paths() -> None:
    from vaultmem.anthropic.agent import describe_call

    assert describe_call({"command": "create", "path": "/memories/a.txt", "file_text": "secret"}) == (
        "create /memories/a.txt"
    )
    assert describe_call({"command": "rename", "old_path": "/memories/a", "new_path": "/memories/b"}) == (
        "rename /memories/a -> /memories/b"
    )


def test_result_text_and_tool_results_read_what_the_runner_sends_back() -> None:
    from vaultmem.anthropic.agent import result_text, tool_results

    response = {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "File created successfully at: /memories/a"},
            {"type": "text", "text": "not a result"},
            {
                "type": "tool_result",
                "tool_use_id": "t2",
                "content": [{"type": "text", "text": "Error: "}, {"type": "text", "text": "x"}],
                "is_error": True,
            },
        ],
    }
    results = tool_results(response)
    assert [r["tool_use_id"] for r in results] == ["t1", "t2"]
    assert [result_text(r) for r in results] == ["File created successfully at: /memories/a", "Error: x"]
    assert tool_results(None) == []
    assert result_text({"content": None}) == ""
