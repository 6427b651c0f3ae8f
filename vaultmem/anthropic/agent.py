"""Building a Messages API request that gives Claude a vault as its memory.

:func:`memory_request` returns the keyword arguments for
``client.beta.messages.tool_runner(...)`` with the settings the memory tool's
documentation recommends, so application code stays short::

    request = memory_request(memory, model="claude-sonnet-5-5", messages=[...])
    for message in client.beta.messages.tool_runner(**request):
        ...

What it sets, each overridable:

* ``tools``: the memory tool first, then any others given.
* ``betas``: ``context-management-2025-06-27`` (needed by the memory tool and
  context editing), plus any others given.
* ``context_management``: ``clear_tool_uses_20250919`` with
  ``exclude_tools: ["memory"]``, so old tool results are cleared as the context
  grows while memory calls stay; ``trigger``/``keep``/``clear_at_least`` are
  passed through when given.
* ``system``: the application's own prompt, then short memory guidance
  (:func:`memory_system_prompt`).  The API adds its own memory protocol
  ("ALWAYS VIEW YOUR MEMORY DIRECTORY BEFORE DOING ANYTHING ELSE ...") whenever
  the tool is present, so it is not repeated here.

Nothing here does I/O; it only builds dictionaries.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from vaultmem.core.text import visible
from vaultmem.core.values import is_int
from vaultmem.errors import VaultError

MEMORY_BETA = "context-management-2025-06-27"
MEMORY_TOOL_TYPE = "memory_20250818"
MEMORY_TOOL_NAME = "memory"
CLEAR_TOOL_USES = "clear_tool_uses_20250919"
DEFAULT_MODEL = "claude-sonnet-5-5"
DEFAULT_MAX_TOKENS = 4096

TIDY_NOTE = (
    "Note: when editing your memory folder, always try to keep its content up-to-date, coherent and organized. "
    "You can rename or delete files that are no longer relevant. Do not create new files unless necessary."
)
AUDIT_NOTE = (
    "Your memory directory is encrypted and every change to it is recorded for audit. "
    "Never write passwords, API keys, card numbers or other secrets to it."
)


def memory_system_prompt(*, topic: str | None = None, tidy: bool = True, audited: bool = True) -> str:
    """Guidance for what Claude writes to its memory (empty if all is off).

    ``topic`` adds "Only write down information relevant to <topic> in your
    memory system."; ``tidy`` adds the note on keeping the folder organised;
    ``audited`` tells Claude its memory is audited and must hold no secrets.
    """
    parts = []
    if topic is not None:
        if not isinstance(topic, str) or not topic.strip():
            raise VaultError("Error: topic must be a non-empty string.")
        parts.append(f"Only write down information relevant to {topic.strip()} in your memory system.")
    if tidy:
        parts.append(TIDY_NOTE)
    if audited:
        parts.append(AUDIT_NOTE)
    return "\n\n".join(parts)


def context_management(
    *,
    trigger_tokens: int | None = None,
    keep_tool_uses: int | None = None,
    clear_at_least_tokens: int | None = None,
    keep_memory: bool = True,
) -> dict[str, Any]:
    """A ``context_management`` value with one ``clear_tool_uses_20250919`` edit.

    By default it keeps every memory call (``exclude_tools: ["memory"]``) and
    leaves the trigger and how much to keep to the API's defaults.
    """
    edit: dict[str, Any] = {"type": CLEAR_TOOL_USES}
    for name, value in (
        ("trigger_tokens", trigger_tokens),
        ("keep_tool_uses", keep_tool_uses),
        ("clear_at_least_tokens", clear_at_least_tokens),
    ):
        if value is not None and (not is_int(value) or value < 0):
            raise VaultError(f"Error: {name} must be a whole number of at least 0, not {value!r}.")
    if trigger_tokens is not None:
        edit["trigger"] = {"type": "input_tokens", "value": trigger_tokens}
    if keep_tool_uses is not None:
        edit["keep"] = {"type": "tool_uses", "value": keep_tool_uses}
    if clear_at_least_tokens is not None:
        edit["clear_at_least"] = {"type": "input_tokens", "value": clear_at_least_tokens}
    if keep_memory:
        edit["exclude_tools"] = [MEMORY_TOOL_NAME]
    return {"edits": [edit]}


def _tool_type(tool: Any) -> str | None:
    """The ``type`` a tool is declared with: a dict's own, or a runnable tool's ``to_dict()``."""
    if isinstance(tool, Mapping):
        declared = tool
    else:
        to_dict = getattr(tool, "to_dict", None)
        if not callable(to_dict):
            return None
        declared = to_dict()
    kind = declared.get("type") if isinstance(declared, Mapping) else None
    return kind if isinstance(kind, str) else None


def _system(system: str | Iterable[Mapping[str, Any]] | None, guidance: str) -> str | list[dict[str, Any]] | None:
    if system is None:
        return guidance or None
    if isinstance(system, str):
        return "\n\n".join(part for part in (system, guidance) if part)
    given = list(system) if isinstance(system, Iterable) and not isinstance(system, (bytes, Mapping)) else None
    if given is None or not all(isinstance(block, Mapping) for block in given):
        raise VaultError(
            "Error: system must be a string or a list of text blocks ({'type': 'text', 'text': ...}), "
            f"not {type(system).__name__}."
        )
    blocks = [dict(block) for block in given]
    if guidance:
        blocks.append({"type": "text", "text": guidance})
    return blocks


def memory_request(
    memory: Any,
    *,
    messages: Sequence[Mapping[str, Any]],
    model: str = DEFAULT_MODEL,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    system: str | Iterable[Mapping[str, Any]] | None = None,
    topic: str | None = None,
    tidy: bool = True,
    audited: bool = True,
    tools: Iterable[Any] = (),
    betas: Iterable[str] = (),
    context_editing: bool | Mapping[str, Any] = True,
    **params: Any,
) -> dict[str, Any]:
    """Keyword arguments for ``client.beta.messages.tool_runner(**...)``.

    ``memory`` is a :class:`~vaultmem.VaultMemoryTool` (or its async twin, for
    ``AsyncAnthropic``).  ``context_editing`` is True for the defaults of
    :func:`context_management`, False for none, or a ``context_management``
    value of your own.  Any other keyword (``temperature``, ``metadata``, ...)
    is passed through unchanged.
    """
    if _tool_type(memory) != MEMORY_TOOL_TYPE:
        raise VaultError(
            f"Error: the first argument must be the memory tool (a VaultMemoryTool), declared as {MEMORY_TOOL_TYPE}."
        )
    if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Iterable):
        raise VaultError("Error: tools must be a list of tools, not a single tool.")
    if isinstance(betas, (str, bytes)) or not isinstance(betas, Iterable):
        raise VaultError("Error: betas must be a list of beta names, not a single string.")
    others = list(tools)
    if any(_tool_type(tool) == MEMORY_TOOL_TYPE for tool in others):
        raise VaultError("Error: tools= already holds a memory tool; a request may declare only one.")
    if isinstance(messages, Mapping):
        raise VaultError("Error: messages must be a list of message dicts, not one message: put it in [...].")
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Iterable) or not messages:
        raise VaultError("Error: messages must be a non-empty list of message dicts.")
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise VaultError(
                f"Error: messages[{index}] must be a message dict such as {{'role': 'user', 'content': ...}}, "
                f"not {type(message).__name__}."
            )
    if not isinstance(model, str) or not model.strip():
        raise VaultError(f"Error: model must be a model name such as {DEFAULT_MODEL!r}, not {model!r}.")
    if not is_int(max_tokens) or max_tokens < 1:
        raise VaultError(f"Error: max_tokens must be a whole number of at least 1, not {max_tokens!r}.")
    all_betas = [MEMORY_BETA]
    for beta in betas:
        if not isinstance(beta, str) or not beta:
            raise VaultError(f"Error: each beta must be a non-empty string, not {beta!r}.")
        if beta not in all_betas:
            all_betas.append(beta)
    request: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "messages": list(messages),
        "tools": [memory, *others],
        "betas": all_betas,
    }
    prompt = _system(system, memory_system_prompt(topic=topic, tidy=tidy, audited=audited))
    if prompt:
        request["system"] = prompt
    if context_editing is True:
        request["context_management"] = context_management()
    elif isinstance(context_editing, Mapping):
        request["context_management"] = dict(context_editing)
    elif context_editing is not False:
        raise VaultError("Error: context_editing must be True, False or a context_management dict.")
    clash = sorted(set(params) & set(request))
    if clash:
        raise VaultError(f"Error: {', '.join(clash)} given twice.")
    request.update(params)
    return request


# -- showing a session to people ---------------------------------------------------

SHOWN_VALUE_CHARS = 80  # a longer path (or other value) is cut when a call is shown
# Stop reasons of a reply Claude had not finished: out of tokens, or of context.
CUT_SHORT = ("max_tokens", "model_context_window_exceeded")
NOT_RUN = (
    "Error: this memory call was not run: the reply stopped ({stop_reason}) before it was complete. "
    "Make the call again if it is still needed."
)


def _shown_value(value: object) -> str:
    raw = value if isinstance(value, str) else repr(value)
    shown = visible(raw)
    if len(shown) <= SHOWN_VALUE_CHARS:
        return shown
    return f"{shown[:SHOWN_VALUE_CHARS]}... [{len(raw):,} characters]"


def describe_call(params: object) -> str:
    """A memory call as one short printable line: ``create /memories/a.txt``,
    ``rename A -> B``; whatever the model sent (a long or odd path, no
    command, an input that is not an object) is shown, never trusted."""
    if not isinstance(params, Mapping):
        return f"(not a JSON object: {type(params).__name__})"
    command = params.get("command")
    shown = "(no command)" if command is None else _shown_value(command)
    if command == "rename":
        return f"rename {_shown_value(params.get('old_path'))} -> {_shown_value(params.get('new_path'))}"
    return f"{shown} {_shown_value(params.get('path'))}"


def result_text(result: Mapping[str, Any]) -> str:
    """The text of a ``tool_result`` block (its content is a string or text blocks)."""
    content = result.get("content")
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content if isinstance(part, Mapping))
    return content if isinstance(content, str) else ""


def tool_results(response: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """The ``tool_result`` blocks of the user message a tool runner sends back."""
    if response is None or not isinstance(response.get("content"), list):
        return []
    return [b for b in response["content"] if isinstance(b, Mapping) and b.get("type") == "tool_result"]


def _not_run(message: Any) -> dict[str, Any] | None:
    """The answer to the tool calls of a reply that stopped before it was
    complete (``max_tokens``, ``refusal``, ...): none of them runs, since its
    input may be cut short, and each is answered as not run so that the
    conversation stays one the API accepts."""
    calls = [block for block in message.content if block.type == "tool_use"]
    if not calls:
        return None
    why = NOT_RUN.format(stop_reason=message.stop_reason or "no stop reason")
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": c.id, "content": why, "is_error": True} for c in calls],
    }


class NoMessage(Exception):
    """A streamed answer that held no message (not the API's event stream)."""


class IncompleteReply(Exception):
    """A streamed reply that ended before it was complete (no stop reason)."""


def whole_message(item: Any) -> Any:
    """A tool runner's item as the whole message: a streamed reply
    (``tool_runner(stream=True)``) is read to its end first.  A stream that
    ends before the reply's stop reason (a connection closed early) raises
    :class:`IncompleteReply`: what it holds, a memory call's input included,
    may be cut short."""
    final = getattr(item, "get_final_message", None)
    if not callable(final):
        return item
    try:
        message = final()
    except AssertionError:  # the stream ended before its first event
        message = None
    if message is None:
        raise NoMessage("the answer held no message_start event")
    if message.stop_reason is None:
        raise IncompleteReply("the stream ended before the reply's stop reason")
    return message


def converse(
    client: Any,
    request: Mapping[str, Any],
    conversation: list[Any],
    *,
    on_text: Callable[[str], None],
    on_call: Callable[[object], None],
    on_result: Callable[[Mapping[str, Any]], None],
    waiting: Callable[[str], AbstractContextManager[object]] | None = None,
    on_cut_short: Callable[[str], None] | None = None,
) -> None:
    """One user turn through the SDK's tool runner (``client.beta.messages``):
    each message Claude sends and each batch of tool results sent back is
    appended to ``conversation`` and reported: Claude's text to ``on_text``,
    each memory call's input (as Claude sent it: any JSON value) to
    ``on_call``, each ``tool_result`` to ``on_result``.  Tool calls run only
    when the reply asks for them (stop reason ``tool_use``); those of a reply
    cut short are answered as not run.  ``waiting(what)`` wraps the waits (a
    spinner).  The request may ask for a stream (``stream=True``): each reply
    is then read to its end before it is reported.  ``on_cut_short(stop_reason)``
    hears of a reply that ended before Claude had finished (:data:`CUT_SHORT`)."""
    wait = waiting if waiting is not None else (lambda what: contextlib.nullcontext())
    runner = client.beta.messages.tool_runner(**request)
    try:
        _converse(
            runner,
            conversation,
            wait,
            on_text=on_text,
            on_call=on_call,
            on_result=on_result,
            on_cut_short=on_cut_short if on_cut_short is not None else (lambda stop_reason: None),
        )
    except BaseException:
        with contextlib.suppress(Exception):
            runner.close()  # a reply left half read (an error, Ctrl-C) releases its connection
        raise


def _converse(
    runner: Any,
    conversation: list[Any],
    wait: Callable[[str], AbstractContextManager[object]],
    *,
    on_text: Callable[[str], None],
    on_call: Callable[[object], None],
    on_result: Callable[[Mapping[str, Any]], None],
    on_cut_short: Callable[[str], None],
) -> None:
    while True:
        with wait("waiting for Claude"):
            item = next(runner, None)
            message = None if item is None else whole_message(item)
        if message is None:
            return
        conversation.append(message.to_param())
        for block in message.content:
            if block.type == "text":
                on_text(block.text)
            elif block.type == "tool_use" and block.name == "memory":
                on_call(block.input)
        if message.stop_reason == "tool_use":
            with wait("running memory commands"):
                response = runner.generate_tool_call_response()
        elif message.stop_reason in ("pause_turn", "compaction"):
            continue  # the runner sends the turn back for the API to finish
        else:
            response = _not_run(message)
        if response is not None:
            conversation.append(response)
            for result in tool_results(response):
                on_result(result)
        if message.stop_reason in CUT_SHORT:
            on_cut_short(message.stop_reason)
