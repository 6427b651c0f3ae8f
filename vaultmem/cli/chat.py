"""``vaultmem chat``: talk to Claude with a vault as its memory.

Each line typed is one user turn, run through the SDK's tool runner with the
request :func:`vaultmem.agent.memory_request` builds (memory tool, context
management beta, context editing that keeps memory calls).  Every memory
change Claude makes is a commit recorded with the chat's actor and session.
The API key comes from ``ANTHROPIC_API_KEY`` (and ``ANTHROPIC_BASE_URL`` is
honoured, as the SDK does); without a key the command explains how to get one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from vaultmem.anthropic.agent import converse, describe_call, memory_request, result_text
from vaultmem.cli.progress import Spinner

API_KEY_ENV = "ANTHROPIC_API_KEY"
EXIT_WORDS = ("/exit", "/quit")

NO_KEY = f"""vaultmem chat talks to Claude, so it needs an Anthropic API key.
Create one at https://console.anthropic.com/settings/keys, then run:

    export {API_KEY_ENV}=sk-ant-...
    vaultmem --vault agent.vault chat

To watch vaultmem work inside an agent loop without a key, run: vaultmem demo"""


def has_api_key() -> bool:
    return bool(os.environ.get(API_KEY_ENV, "").strip())


def _first_line(text: str) -> str:
    first, _, rest = text.partition("\n")
    return first + (" ..." if rest else "")


def _reason(error: Any) -> str:
    """The API's own words for an error (its ``error.message``), as one sentence."""
    body = getattr(error, "body", None)
    detail = body.get("error") if isinstance(body, dict) else None
    message = detail.get("message") if isinstance(detail, dict) else None
    text = " ".join(str(message if isinstance(message, str) and message else error.message).split())
    return text if text.endswith((".", "!", "?")) else text + "."


def run(
    memory: Any,
    *,
    model: str,
    max_tokens: int,
    read_line: Callable[[str], str],
    out: TextIO,
    err: TextIO,
    topic: str | None = None,
    context_editing: bool = True,
    client: Any = None,
) -> int:
    """The chat loop; returns the exit code.  ``read_line(prompt)`` raises
    EOFError at the end of input (``input`` does)."""
    import anthropic

    if client is None:
        client = anthropic.Anthropic()
    out.write(
        f"Chatting with {model}. Memory: {memory.vault.path} (actor {memory.actor}, session {memory.session}).\n"
        f"Every memory change is a commit: vaultmem log --session {memory.session}\n"
        "Type /exit or press Ctrl-D to leave.\n"
    )
    out.flush()
    conversation: list[Any] = []
    while True:
        try:
            line = read_line("you> ")
        except EOFError:
            out.write("\n")
            return 0
        if line.strip() in EXIT_WORDS:
            return 0
        if not line.strip():
            continue
        start = len(conversation)
        conversation.append({"role": "user", "content": line})
        request = memory_request(
            memory,
            model=model,
            max_tokens=max_tokens,
            messages=conversation,
            topic=topic,
            context_editing=context_editing,
        )
        try:
            _turn(client, request, conversation, out, err)
        except anthropic.AuthenticationError as error:
            err.write(f"vaultmem: the API refused the key in {API_KEY_ENV}: {_reason(error)}\n")
            return 2
        except anthropic.APIError as error:
            # Memory changes already made stay (each is a commit); the conversation
            # goes back to before this line so it stays well-formed.
            del conversation[start:]
            err.write(f"vaultmem: the request to Claude failed: {_reason(error)} Try again, or /exit.\n")


def _turn(client: Any, request: dict[str, Any], conversation: list[Any], out: TextIO, err: TextIO) -> None:
    def show(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    def result(block: Mapping[str, Any]) -> None:
        marker = "  [error] " if block.get("is_error") else "  [done] "
        show(marker + _first_line(result_text(block)))

    converse(
        client,
        request,
        conversation,
        on_text=lambda text: show(f"claude> {text}"),
        on_call=lambda params: show(f"  [memory] {describe_call(params)}"),
        on_result=result,
        waiting=lambda what: Spinner(what, stream=err),
    )
