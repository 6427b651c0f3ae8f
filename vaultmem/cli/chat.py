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
from types import FrameType
from typing import Any, TextIO

from vaultmem.anthropic.agent import IncompleteReply, converse, describe_call, memory_request, result_text
from vaultmem.cli.progress import Spinner
from vaultmem.core.text import visible, visible_content
from vaultmem.git.durable import WriterLock

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


def _unconnected(error: Any) -> str:
    """Why no connection was made (the SDK says only "Connection error."), as one sentence."""
    import httpx2

    cause = error.__cause__
    if cause is None or isinstance(cause, httpx2.LocalProtocolError):  # its words may quote a header: the key
        return _reason(error)
    text = f"{error.message.rstrip('.')} ({type(cause).__name__}: {cause})"
    if isinstance(cause, httpx2.UnsupportedProtocol):
        text += f"; {BASE_URL_ENV} must start with https:// or http://"
    return _sentence(text)


def _unreadable(error: Exception) -> str:
    """Why an answer that is not the Messages API's could not be used, as one sentence."""
    detail = str(error) or type(error).__name__
    return _sentence(
        f"the answer could not be read as the Messages API's ({type(error).__name__}: {detail}); "
        f"is something other than the API (a proxy, or {BASE_URL_ENV}) answering?"
    )


def _broken(error: Exception) -> str:
    """A connection that broke off in the middle of an answer, as one sentence."""
    detail = str(error) or type(error).__name__
    return _sentence(f"the connection broke off before the answer was complete ({type(error).__name__}: {detail})")


PROXY_ENVS = ("ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")


DEFAULT_BASE_URL = "https://api.anthropic.com"


def _client_options() -> dict[str, Any] | str:
    """What the client is given beyond what it reads from the environment
    itself, or why the environment cannot work, as one sentence.

    A key pasted with a line end or spaces around it (an ``.env`` file saved
    with CRLF) would make every request fail with "Connection error.", since
    it cannot go into a header: it is used without them.  An empty
    ``ANTHROPIC_BASE_URL`` (``export ANTHROPIC_BASE_URL=``) means the API's
    own address, not a URL with no scheme.  The key itself is never shown."""
    options: dict[str, Any] = {}
    key = os.environ.get(API_KEY_ENV, "")
    if key != key.strip():
        options["api_key"] = key.strip()
    if not key.strip().isprintable():
        return (
            f"{API_KEY_ENV} holds a control character inside the key; "
            "set it to the key alone (sk-ant-...), copied again from https://console.anthropic.com/settings/keys."
        )
    base_url = os.environ.get(BASE_URL_ENV)
    if base_url is not None and (not base_url.strip() or base_url != base_url.strip()):
        options["base_url"] = base_url.strip() or DEFAULT_BASE_URL
    return options


def _client() -> Any:
    """The SDK's client, or why it cannot be made, as one sentence: a SOCKS
    proxy in the environment needs the ``socksio`` package, which the SDK
    does not install; ``ANTHROPIC_BASE_URL`` may not be a URL at all."""
    import anthropic
    import httpx2

    options = _client_options()
    if isinstance(options, str):
        return options
    hook = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: None  # the half-made client fails again as it is collected
    try:
        try:
            return anthropic.Anthropic(**options)
        except ImportError as error:
            if "socksio" not in str(error):
                raise
        except httpx2.InvalidURL as error:
            return (
                f"{BASE_URL_ENV} is not a URL ({_sentence(str(error))[:-1]}); set it to the API's address, "
                f"such as {DEFAULT_BASE_URL}, or unset it."
            )
        gc.collect()
    finally:
        sys.unraisablehook = hook
    names = [n for n in PROXY_ENVS if os.environ.get(n, "").strip().lower().startswith("socks")]
    name = names[0] if names else "the proxy variable"
    return f"{name} names a SOCKS proxy, which needs the socksio package: run `pip install socksio`, or unset {name}."


def _waiting_for_the_lock(frame: FrameType | None) -> bool:
    """Whether the code Ctrl-C interrupted waits for the vault's writer lock
    (``WriterLock._take``, before the write has begun)."""
    return frame is not None and frame.f_code is WriterLock._take.__code__


class _CtrlC:
    """Ctrl-C that waits for the memory call under way to finish, and is never lost.

    A memory call is one commit; a ``KeyboardInterrupt`` raised in the middle
    of one (after the ref is locked, before it is moved) would leave the
    commit half done.  While a call runs, Ctrl-C is noted and raised as soon
    as the call returns; anywhere else it is raised at once, as usual.  A
    call still waiting for the vault's writer lock (another process holds it:
    an import, a re-encryption, a writer stopped with Ctrl-Z) has written
    nothing: Ctrl-C stops it at once, rather than when that process lets go.

    Raised at once, the interrupt lands wherever the main thread is, and code
    there may catch it and go on (a finalizer, an HTTP client's event hook, a
    library's ``except BaseException``).  So a press is also remembered: no
    memory call starts after it, and :meth:`check` raises it again once the
    reply is in."""

    def __init__(self) -> None:
        self.calls = 0
        self.pressed = False

    def handler(self, signum: int, frame: FrameType | None) -> None:
        self.pressed = True
        if self.calls and not _waiting_for_the_lock(frame):
            return  # raised when the call returns
        raise KeyboardInterrupt

    def check(self) -> None:
        """Raise the interrupt of a press the code it landed in swallowed."""
        if self.pressed:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        if not self.calls:
            self.check()  # pressed and swallowed: no further memory call starts
        self.calls += 1
        try:
            yield
        finally:
            self.calls -= 1
        if not self.calls:
            self.check()

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
    # The request is built once before the banner, so that a bad --model or
    # --topic is refused at once rather than after the first line typed.
    memory_request(memory, model=model, max_tokens=max_tokens, messages=[{"role": "user", "content": "-"}], topic=topic)
    if client is None:
        client = _client()
        if isinstance(client, str):
            err.write(f"vaultmem: {client}\n")
            return 2
    out.write(
        f"Chatting with {visible(model)}. Memory: {memory.vault.path} "
        f"(actor {memory.actor}, session {memory.session}).\n"
        f"Every memory change is a commit: vaultmem log --session {memory.session}\n"
        "Type /exit or press Ctrl-D to leave.\n"
    )
    out.flush()
    ctrl_c = _CtrlC()
    with ctrl_c.installed(memory):
        return _loop(
            memory,
            client,
            model,
            max_tokens,
            read_line,
            out,
            err,
            ctrl_c=ctrl_c,
            topic=topic,
            context_editing=context_editing,
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
    ctrl_c: _CtrlC,
    topic: str | None,
    context_editing: bool,
) -> int:
    import anthropic
    import httpx2

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
        if not _utf8(line):
            err.write(
                "vaultmem: that line is not UTF-8 text (is the terminal set to another encoding?); "
                "it was not sent. Type it again, or /exit.\n"
            )
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
            # Streamed: without a stream the SDK refuses any max_tokens above
            # 21,333 (an answer that could take over 10 minutes).
            stream=True,
        )
        try:
            _turn(client, request, conversation, out, err)
            ctrl_c.check()  # pressed while waiting, and swallowed where it landed
        except KeyboardInterrupt:
            # A memory call is one commit, made whole or not at all: what was
            # written before Ctrl-C stays; say where to see it.
            out.flush()
            err.write(
                "vaultmem: interrupted. Memory changes made before it are kept, each a version: "
                f"vaultmem log --session {memory.session}\n"
            )
            return 130
        except _OutputFailed as failed:
            raise failed.error from None  # the command's own handling: a closed pipe ends it quietly
        except anthropic.AuthenticationError as error:
            err.write(f"vaultmem: the API refused the key in {API_KEY_ENV}: {_reason(error)}\n")
            return 2
        except Exception as error:  # the API's errors, or an answer that is not the API's
            # Memory changes already made stay (each is a commit); the conversation
            # goes back to before this line so it stays well-formed.
            del conversation[start:]
            if isinstance(error, anthropic.APIConnectionError):
                why = _unconnected(error)
            elif isinstance(error, anthropic.APIError):
                why = _reason(error)
            elif isinstance(error, (httpx2.TransportError, IncompleteReply)):
                why = _broken(error)
            else:
                why = _unreadable(error)
            err.write(f"vaultmem: the request to Claude failed: {why} Try again, or /exit.\n")


def _utf8(line: str) -> bool:
    """Whether ``line`` can be sent: bytes read that were not UTF-8 arrive as lone surrogates."""
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _OutputFailed(Exception):
    """Standard output could not be written during a turn (kept apart from the API's errors)."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


def _turn(client: Any, request: dict[str, Any], conversation: list[Any], out: TextIO, err: TextIO) -> None:
    def show(line: str) -> None:
        try:
            out.write(line + "\n")
            out.flush()
        except OSError as error:  # `vaultmem chat | head`, or a full disk: not the API's doing
            raise _OutputFailed(error) from error

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
            on_cut_short=lambda stop_reason: show(_cut_short(stop_reason, request["max_tokens"])),
        )


def _cut_short(stop_reason: str, max_tokens: int) -> str:
    """Why Claude's reply ended before Claude had finished, and what to do."""
    if stop_reason == "max_tokens":
        return (
            f"  [cut short] the reply reached the limit of {max_tokens:,} tokens: ask Claude to go on, "
            "or start the chat with a higher --max-tokens."
        )
    return "  [cut short] the conversation fills Claude's context window: start a new chat (the memory stays)."
