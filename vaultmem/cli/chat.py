"""``vaultmem chat``: talk to Claude with a vault as its memory.

Each line typed is one user turn, run through the SDK's tool runner with the
request :func:`vaultmem.agent.memory_request` builds (memory tool, context
management beta, context editing that keeps memory calls).  Every memory
change Claude makes is a commit recorded with the chat's actor and session.
The API key comes from ``ANTHROPIC_API_KEY`` (and ``ANTHROPIC_BASE_URL`` is
honoured, as the SDK does); without a key the command explains how to get one.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TextIO

from vaultmem.anthropic.agent import converse, describe_call, memory_request, result_text
from vaultmem.cli.progress import Spinner
from vaultmem.core.text import visible, visible_content

API_KEY_ENV = "ANTHROPIC_API_KEY"
BASE_URL_ENV = "ANTHROPIC_BASE_URL"
EXIT_WORDS = ("/exit", "/quit")

NO_KEY = f"""vaultmem chat talks to Claude, so it needs an Anthropic API key.
Create one at https://console.anthropic.com/settings/keys, then run:

    export {API_KEY_ENV}=sk-ant-...
    vaultmem --vault agent.vault chat

To watch vaultmem work inside an agent loop without a key, run: vaultmem demo"""


def has_api_key() -> bool:
    return bool(os.environ.get(API_KEY_ENV, "").strip())


REASON_CHARS = 500  # an error message longer than this (a proxy's whole HTML page) is cut


def _first_line(text: str) -> str:
    first, _, rest = text.partition("\n")
    return visible(first) + (" ..." if rest else "")


def _sentence(text: str) -> str:
    text = visible(" ".join(text.split()))
    if len(text) > REASON_CHARS:
        text = text[:REASON_CHARS] + " ..."
    return text if text.endswith((".", "!", "?")) else text + "."


def _reason(error: Any) -> str:
    """The API's own words for an error (its ``error.message``), as one sentence."""
    body = getattr(error, "body", None)
    detail = body.get("error") if isinstance(body, dict) else None
    message = detail.get("message") if isinstance(detail, dict) else None
    return _sentence(str(message if isinstance(message, str) and message else error.message))


def _unreadable(error: Exception) -> str:
    """Why an answer that is not the Messages API's could not be used, as one sentence."""
    detail = str(error) or type(error).__name__
    return _sentence(
        f"the answer could not be read as the Messages API's ({type(error).__name__}: {detail}); "
        f"is something other than the API (a proxy, or {BASE_URL_ENV}) answering?"
    )


PROXY_ENVS = ("ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")


def _client() -> Any:
    """The SDK's client, or why it cannot be made, as one sentence: a SOCKS
    proxy in the environment needs the ``socksio`` package, which the SDK
    does not install."""
    import anthropic

    hook = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: None  # the half-made client fails again as it is collected
    try:
        try:
            return anthropic.Anthropic()
        except ImportError as error:
            if "socksio" not in str(error):
                raise
        gc.collect()
    finally:
        sys.unraisablehook = hook
    names = [n for n in PROXY_ENVS if os.environ.get(n, "").strip().lower().startswith("socks")]
    name = names[0] if names else "the proxy variable"
    return f"{name} names a SOCKS proxy, which needs the socksio package: run `pip install socksio`, or unset {name}."


class _CtrlC:
    """Ctrl-C that waits for the memory call under way to finish.

    A memory call is one commit; a ``KeyboardInterrupt`` raised in the middle
    of one (after the ref is locked, before it is moved) would leave the
    commit half done.  While a call runs, Ctrl-C is noted and raised as soon
    as the call returns; anywhere else it is raised at once, as usual."""

    def __init__(self) -> None:
        self.calls = 0
        self.pending = False

    def handler(self, signum: int, frame: object) -> None:
        if self.calls:
            self.pending = True
            return
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        self.calls += 1
        try:
            yield
        finally:
            self.calls -= 1
        if self.pending and not self.calls:
            self.pending = False
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def installed(self, memory: Any) -> Iterator[None]:
        """The handler, and ``memory.call`` wrapped, for the chat's length (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        plain = memory.call

        def guarded(params: object) -> Any:
            with self.call():
                return plain(params)

        previous = signal.signal(signal.SIGINT, self.handler)
        memory.call = guarded
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)
            del memory.call  # the class's own method again


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
    if client is None:
        client = _client()
        if isinstance(client, str):
            err.write(f"vaultmem: {client}\n")
            return 2
    out.write(
        f"Chatting with {model}. Memory: {memory.vault.path} (actor {memory.actor}, session {memory.session}).\n"
        f"Every memory change is a commit: vaultmem log --session {memory.session}\n"
        "Type /exit or press Ctrl-D to leave.\n"
    )
    out.flush()
    with _CtrlC().installed(memory):
        return _loop(
            memory, client, model, max_tokens, read_line, out, err, topic=topic, context_editing=context_editing
        )


def _loop(
    memory: Any,
    client: Any,
    model: str,
    max_tokens: int,
    read_line: Callable[[str], str],
    out: TextIO,
    err: TextIO,
    *,
    topic: str | None,
    context_editing: bool,
) -> int:
    import anthropic

    conversation: list[Any] = []
    while True:
        try:
            line = read_line("you> ")
        except EOFError:
            out.write("\n")
            return 0
        except KeyboardInterrupt:  # Ctrl-C at the prompt: leave, on a line of its own
            out.write("\n")
            return 130
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
        except KeyboardInterrupt:
            # A memory call is one commit, made whole or not at all: what was
            # written before Ctrl-C stays; say where to see it.
            out.flush()
            err.write(
                "vaultmem: interrupted. Memory changes made before it are kept, each a version: "
                f"vaultmem log --session {memory.session}\n"
            )
            return 130
        except anthropic.AuthenticationError as error:
            err.write(f"vaultmem: the API refused the key in {API_KEY_ENV}: {_reason(error)}\n")
            return 2
        except Exception as error:  # the API's errors, or an answer that is not the API's
            # Memory changes already made stay (each is a commit); the conversation
            # goes back to before this line so it stays well-formed.
            del conversation[start:]
            why = _reason(error) if isinstance(error, anthropic.APIError) else _unreadable(error)
            err.write(f"vaultmem: the request to Claude failed: {why} Try again, or /exit.\n")


def _turn(client: Any, request: dict[str, Any], conversation: list[Any], out: TextIO, err: TextIO) -> None:
    def show(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    def result(block: Mapping[str, Any]) -> None:
        marker = "  [error] " if block.get("is_error") else "  [done] "
        show(marker + _first_line(result_text(block)))

    with warnings.catch_warnings():
        # The SDK's warnings (a tool Claude was not given, an input it did not
        # expect) are for developers; the chat shows the call's error result.
        warnings.simplefilter("ignore")
        converse(
            client,
            request,
            conversation,
            on_text=lambda text: show(f"claude> {visible_content(text)}"),
            on_call=lambda params: show(f"  [memory] {describe_call(params)}"),
            on_result=result,
            waiting=lambda what: Spinner(what, stream=err),
        )
