"""The memory tool over the Model Context Protocol (docs/mcp.md).

``vaultmem mcp`` serves a vault to any MCP client (Claude Code, Claude
Desktop, an agent on another host) with the official ``mcp`` package's
:class:`MCPServer`: the six memory commands as six tools, with the same
arguments, results and errors as :class:`~vaultmem.anthropic.tool.VaultMemoryTool`
(they run through the same :class:`~vaultmem.ops.memory.MemoryCommands`, so
the vault's policies apply as they do there), and three read-only audit
tools.  Each MCP session is a vaultmem session: its id and the client's
name are recorded on every version it writes (``vaultmem log --session``).

The tools take their arguments as the client sent them: the memory
commands check them and answer with SPEC.md's own messages.  Nothing of
the host leaks into a result: an unexpected failure is one line saying so,
and its traceback goes to the server's log (standard error).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import os
import re
import secrets
import signal
import stat
import sys
import threading
import weakref
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any, NoReturn

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.tools.base import Tool
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INVALID_PARAMS,
    CallToolResult,
    GetPromptResult,
    InputRequiredResult,
    JSONRPCNotification,
    JSONRPCRequest,
    TextContent,
    ToolAnnotations,
    jsonrpc_message_adapter,
)
from mcp.types import Tool as MCPTool

from vaultmem.anthropic.agent import memory_system_prompt
from vaultmem.core import paths
from vaultmem.core.lru import LRU
from vaultmem.core.policy import Policy
from vaultmem.core.versions import utc_text
from vaultmem.errors import CommandError, InvalidPathError, NotFoundError, StorageError, VaultError
from vaultmem.git.durable import WriterLock
from vaultmem.ops.autosync import AutoSync
from vaultmem.ops.guard import Guard
from vaultmem.ops.memory import MemoryCommands, _echo, _type_name
from vaultmem.repo.engine import _check_label
from vaultmem.vault import Vault

log = logging.getLogger("vaultmem.mcp")

SERVER_NAME = "vaultmem"
DEFAULT_MAX_REQUEST_BYTES = 1_048_576  # the largest tool call accepted, in bytes of JSON
ENVELOPE_BYTES = 65_536  # what a message may hold beyond a call's arguments: the JSON-RPC envelope
_REQUEST_ID = re.compile(rb'"id"\s*:\s*(-?\d{1,40}(?!\d)|"(?:[^"\\]|\\.){0,256}")')
# An answer as the SDK writes it: its id, of any length, comes right after the version.
_ANSWER = re.compile(r'\{"jsonrpc":"2\.0","id":(-?\d+|"(?:[^"\\]|\\.)*"),"(?:result|error)":')
SYNC_CLOSE_SECONDS = 30.0  # how long a stopping server tries to push what its clients wrote
DRAIN_SECONDS = 30.0  # how long a server whose input ended waits to answer the requests it read
MEMORY_TOOLS = ("view", "create", "str_replace", "insert", "delete", "rename")
AUDIT_TOOLS = ("history", "read_version", "diff")
READ_TOOLS = frozenset({"view", *AUDIT_TOOLS})
WAIT_FIRST = 0.001  # seconds: the first look again at a writer lock another write holds (stdio)
WAIT_MOST = 0.05  # seconds: the longest between two looks
SESSIONS_KEPT = 1_024  # MCP sessions whose commands a server keeps ready
EMPTY_MEMORY = "0" * 40  # what an undo back past the first version restored
HISTORY_SHOWN = 20  # versions a history lists unless asked for another number (`limit`)
HISTORY_COUNTED = 200  # older versions a history without `limit` counts, at most, to say how many it left out
LONGEST_ARGUMENT = 1_000  # characters of an audit tool's version argument (an id or a time)
READ_ONLY_REFUSAL = (
    "Error: this memory server is read-only (vaultmem mcp --read-only); nothing was written. "
    "Use view, history, read_version or diff."
)
STOPPED_WAITING = (
    "Error: the memory server is stopping (Ctrl-C) while this command waited for another process's write "
    "to the vault to end; nothing was written."
)
INTERNAL_ERROR = (
    "Error: the memory server failed while running this command; nothing more is known here. "
    "Its operator finds the cause in the server's log."
)

PROTOCOL = (
    "IMPORTANT: ALWAYS VIEW YOUR MEMORY DIRECTORY BEFORE DOING ANYTHING ELSE.\n"
    "MEMORY PROTOCOL:\n"
    "1. Use the `view` tool of this server to check for earlier progress in /memories.\n"
    "2. ... (work on the task) ...\n"
    "     - As you make progress, record status / progress / thoughts etc in your memory.\n"
    "ASSUME INTERRUPTION: Your context window might be reset at any moment, so you risk losing any progress "
    "that is not recorded in your memory directory."
)

_STRING = {"type": "string"}
_PATH = {"type": "string", "description": "a path under /memories, such as /memories/notes.txt"}
_SCHEMAS: dict[str, dict[str, Any]] = {
    "view": {
        "properties": {
            "path": {**_PATH, "description": "a file or folder under /memories (/memories itself lists everything)"},
            "view_range": {
                "type": "array",
                "items": {"type": "integer"},
                "minItems": 2,
                "maxItems": 2,
                "description": "[first line, last line] of a file, numbered from 1; -1 as the last means the end",
            },
        },
        "required": ["path"],
    },
    "create": {"properties": {"path": _PATH, "file_text": _STRING}, "required": ["path", "file_text"]},
    "str_replace": {
        "properties": {"path": _PATH, "old_str": _STRING, "new_str": _STRING},
        "required": ["path", "old_str", "new_str"],
    },
    "insert": {
        "properties": {
            "path": _PATH,
            "insert_line": {"type": "integer", "description": "insert after this line (0: at the start)"},
            "insert_text": _STRING,
        },
        "required": ["path", "insert_line", "insert_text"],
    },
    "delete": {"properties": {"path": _PATH}, "required": ["path"]},
    "rename": {"properties": {"old_path": _PATH, "new_path": _PATH}, "required": ["old_path", "new_path"]},
    "history": {
        "properties": {
            "path": {**_PATH, "description": "a file or folder (default: the whole memory)"},
            "limit": {
                "type": "integer",
                "minimum": 1,
                "description": "at most this many versions (default 20: the newest, and how many older ones there are)",
            },
        },
        "required": [],
    },
    "read_version": {
        "properties": {
            "path": _PATH,
            "version": {
                "type": "string",
                "description": "a version id from history, or a time such as 2026-11-04 12:00",
            },
        },
        "required": ["path", "version"],
    },
    "diff": {
        "properties": {
            "from_version": {"type": "string", "description": "the older version: an id from history, or a time"},
            "to_version": {"type": "string", "description": "the newer version (default: the latest)"},
            "path": {**_PATH, "description": "only this file or folder (default: everything)"},
        },
        "required": ["from_version"],
    },
}
_DESCRIPTIONS = {
    "view": "Show a memory folder's contents (two levels deep, with sizes) or a file's lines, numbered.",
    "create": "Create a new memory file with the given text (an existing file is never overwritten).",
    "str_replace": "Replace the one occurrence of old_str in a memory file with new_str.",
    "insert": "Insert text after a line of a memory file (0: at the start).",
    "delete": "Delete a memory file or folder (its history stays readable by auditors).",
    "rename": "Rename or move a memory file or folder (never over an existing one).",
    "history": "The versions of the memory, or of one file or folder, newest first: id, time, actor, session, command.",
    "read_version": "A memory file's text as it was at an earlier version.",
    "diff": "What changed between two versions of the memory, as a unified diff of the decrypted text.",
}
_TITLES = {
    "view": "View memory",
    "create": "Create a memory file",
    "str_replace": "Edit a memory file",
    "insert": "Insert into a memory file",
    "delete": "Delete from memory",
    "rename": "Rename in memory",
    "history": "Memory history",
    "read_version": "Memory file at a version",
    "diff": "Memory diff",
}
_CLIENT = re.compile(r"[^A-Za-z0-9._-]+")


READ_ONLY_PROTOCOL = (
    "IMPORTANT: ALWAYS VIEW YOUR MEMORY DIRECTORY BEFORE DOING ANYTHING ELSE.\n"
    "This memory server is read-only: use the `view` tool to read what is in /memories, and `history`, "
    "`read_version` and `diff` to see how it changed. It writes nothing: do not try to record progress in it."
)


def instructions(read_only: bool = False) -> str:
    """What a client gives the model about this server: the memory protocol
    and the guidance :func:`~vaultmem.anthropic.agent.memory_system_prompt`
    gives; for a read-only server, how to read it and that it writes nothing
    (no protocol telling the model to record its progress there)."""
    if read_only:
        return READ_ONLY_PROTOCOL + "\n\n" + memory_system_prompt(tidy=False)
    return PROTOCOL + "\n\n" + memory_system_prompt()


def tool_annotations(name: str) -> ToolAnnotations:
    read_only = name == "view" or name in AUDIT_TOOLS
    return ToolAnnotations(
        title=_TITLES[name],
        read_only_hint=read_only,
        # MCP's "not destructive" means only additive updates: str_replace replaces (or removes) text.
        destructive_hint=None if read_only else name in ("str_replace", "delete", "rename"),
        idempotent_hint=read_only,
        open_world_hint=False,
    )


def _error(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def _ok(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=False)


def _plain_log() -> None:
    """The server's log (standard error), one record a line and a traceback
    as Python prints it, unless the application configured logging itself.
    Without it, the SDK's own configuration renders each record in columns
    80 characters wide, a traceback's code cut to 20 of them."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.WARNING)


def _log_storage_failure(name: str, err: BaseException) -> None:
    """Log, for the operator, the host's failure behind a refused write (a
    full or read-only disk): the client is told to ask the operator, and
    gets no host path itself."""
    cause: BaseException | None = err.__cause__
    found: BaseException | None = None
    while cause is not None:
        if isinstance(cause, OSError | StorageError):
            found = cause
        cause = cause.__cause__
    if found is not None:
        log.warning("the tool %s failed on the host's storage: %s", name, found)


class Sessions:
    """One :class:`MemoryCommands` per MCP session, each a vaultmem session
    named ``mcp-CLIENT-ID`` (the client's name and the session id)."""

    def __init__(self, factory: Callable[[str], MemoryCommands]) -> None:
        self._factory = factory
        # A long-running HTTP server sees sessions come and go: the most recent
        # are kept (one that comes back after eviction gets a fresh one, same name).
        self._by_key: LRU[str, MemoryCommands] = LRU(SESSIONS_KEPT)
        self._lock = threading.Lock()
        # The sessions' automatic syncs, pushed out by close(): held weakly, so
        # an evicted session's goes once it has nothing left to push.
        self._syncing: weakref.WeakSet[AutoSync] = weakref.WeakSet()
        self.connection = secrets.token_hex(6)  # stdio, or HTTP without session ids: one per process

    def commands(self, ctx: Context[Any, Any]) -> MemoryCommands:
        headers = ctx.headers
        session_id = headers.get("mcp-session-id") if headers else None
        ident = (session_id or self.connection)[:12]
        client = "client"
        params = getattr(ctx.session, "client_params", None)
        info = getattr(params, "client_info", None)
        if info is not None and isinstance(getattr(info, "name", None), str):
            client = _CLIENT.sub("-", info.name).strip("-")[:40] or "client"
        label = f"mcp-{client}-{ident}"
        with self._lock:
            found = self._by_key.get(label)
            if found is None:
                found = self._factory(label)
                self._by_key.put(label, found)
                if found.autosync is not None:
                    self._syncing.add(found.autosync)
            return found

    def close(self, timeout: float = SYNC_CLOSE_SECONDS) -> None:
        """Push what the sessions wrote and have not pushed yet (automatic
        sync pushes in the background, within a second of each write), and
        stop their sync threads."""
        with self._lock:
            syncing, self._syncing = list(self._syncing), weakref.WeakSet()
        for autosync in syncing:
            autosync.close(timeout)


class _Server(MCPServer):
    """An MCPServer that lists only the tools it serves (``--read-only``) and
    hands its own tools' calls straight to :meth:`MemoryServer.call`.

    The SDK's way to a tool (its tool manager, an arguments model checked
    with pydantic, a worker thread for a function that is not a coroutine)
    checks nothing the memory commands do not check themselves, and cost a
    write about 0.09 ms more at p50 (CHANGELOG).  The tools named in ``inline`` run in the event loop's
    own thread: over stdio one client sends the calls, and a memory command
    takes about a millisecond, so handing it to a worker thread and back
    only adds two thread switches.  They run one at a time, in the order
    they came; a write whose turn comes while another process holds the
    vault's writer lock waits for it without holding up the event loop
    (:meth:`_writer_free`), so pings and the audit tools are answered
    meanwhile.  The others, and every tool over HTTP (many clients at
    once), run in a worker thread as the SDK would run them.
    """

    def __init__(self, listed: set[str], memory: MemoryServer, inline: frozenset[str], **settings: Any) -> None:
        super().__init__(**settings)
        self._listed = listed
        self._memory = memory
        self._inline = inline
        self._turns: asyncio.Lock | None = None  # the inline calls, one at a time, in the order they came
        self.interrupted: asyncio.Event | None = None  # set by serve_stdio's Ctrl-C

    async def list_tools(self) -> list[MCPTool]:
        return [tool for tool in await super().list_tools() if tool.name in self._listed]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        if name not in _SCHEMAS:  # answered as the memory tool answers an unknown command
            offered = ", ".join(tool for tool in (*MEMORY_TOOLS, *AUDIT_TOOLS) if tool in self._listed)
            return _error(f"Error: Unknown tool `{_echo(name)}`. Use one of: {offered}.")
        if context is None:
            return await super().call_tool(name, arguments, context)
        raw = _raw_arguments(context)
        if name in self._inline:
            if self._turns is None:
                self._turns = asyncio.Lock()
            async with self._turns:
                if name not in READ_TOOLS and not await self._writer_free():
                    return _error(STOPPED_WAITING)
                return self._memory.call(name, raw, context)
        return await anyio.to_thread.run_sync(self._memory.call, name, raw, context)

    async def _writer_free(self) -> bool:
        """Wait, without holding up the event loop, until a write would not
        wait for the vault's writer lock: another process's write (an
        import, a writer stopped with Ctrl-Z) must not keep the server from
        answering a ping or an audit tool meanwhile.  False when Ctrl-C came
        first (nothing was begun).  A write another process starts between
        this check and the call's own hold is waited for in the call."""
        delay = WAIT_FIRST
        while self._memory.vault.writer_busy():
            if self.interrupted is not None and self.interrupted.is_set():
                return False
            await asyncio.sleep(delay)
            delay = min(delay * 2, WAIT_MOST)
        return True

    @property
    def memory(self) -> MemoryServer:
        return self._memory

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None, context: Context[Any, Any] | None = None
    ) -> GetPromptResult | InputRequiredResult:
        """The server has no prompts: a client's error, answered as one
        (the SDK's own answer logs it with a traceback, as a server failure)."""
        raise MCPError(INVALID_PARAMS, f"Unknown prompt: {str(name)[:200]}; this server offers no prompts.")


SENT_BYTES = "vaultmem.sent_bytes"  # the ASGI scope's key for the size of the request's body, as it arrived


def _sent_bytes(ctx: Context[Any, Any]) -> int | None:
    """The bytes the client sent for this request, where its transport
    measured them (HTTP: the body), or None."""
    scope = getattr(getattr(ctx.request_context, "request", None), "scope", None)
    sent = scope.get(SENT_BYTES) if isinstance(scope, dict) else None
    return sent if isinstance(sent, int) else None


def too_large(size: int, limit: int) -> str:
    """The refusal of a tool call the client sent in ``size`` bytes, over ``limit``."""
    return (
        f"Error: the request is {size:,} bytes, over this memory server's limit of {limit:,} bytes; "
        "nothing was changed. Send less text in one call: a long file in parts (create, then insert)."
    )


def _raw_arguments(ctx: Context[Any, Any]) -> object:
    """The tool's arguments exactly as the client sent them."""
    params = ctx.request_context.params or {}
    return params.get("arguments")


class MemoryServer:
    """The tools, bound to one vault and one actor."""

    def __init__(
        self,
        vault: Vault,
        *,
        actor: str,
        read_only: bool = False,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        policy: Policy | Mapping[str, Any] | None = None,
    ) -> None:
        if max_request_bytes < 1:
            raise VaultError("Error: the request size limit must be at least 1 byte.")
        _check_label("actor", actor)  # every version's author: refused now, not at each write
        self.vault = vault
        self.actor = actor
        self.read_only = read_only
        self.max_request_bytes = max_request_bytes
        if read_only:  # the policy's automatic expiry and retention are writes, and so is a sync's pull: not here
            off: dict[str, Any] = dict.fromkeys(("expire_after", "content_retention", "sync_remote", "sync_every"))
            policy = dataclasses.replace(policy, **off) if isinstance(policy, Policy) else {**(policy or {}), **off}
        Guard(vault, policy).policy()  # a bad policy refused now (no session, no sync: nothing is written)
        self.sessions = Sessions(lambda label: MemoryCommands(vault, actor=actor, session=label, policy=policy))

    def close(self) -> None:
        """At the end of serving: push what automatic sync has not pushed yet."""
        self.sessions.close()

    def build(self, *, inline: bool = False, **settings: Any) -> MCPServer:
        """The server: every tool registered, so a write to a read-only
        server gets its own refusal; only the ones it serves listed.  With
        ``inline`` (stdio: one client) the memory commands run in the event
        loop's thread; the audit tools, which may read a long history, and
        every tool without it run in a worker thread."""
        _plain_log()
        tools = [self._tool(name) for name in (*MEMORY_TOOLS, *AUDIT_TOOLS)]
        listed = {t.name for t in tools if not self.read_only or t.name in READ_TOOLS}
        return _Server(
            listed,
            self,
            frozenset(MEMORY_TOOLS) if inline else frozenset(),
            name=SERVER_NAME,
            instructions=instructions(self.read_only),
            tools=tools,
            log_level="WARNING",
            **settings,
        )

    def _tool(self, name: str) -> Tool:
        def run(ctx: Context[Any, Any]) -> CallToolResult:  # the SDK's way in, when it calls a tool itself
            return self.call(name, _raw_arguments(ctx), ctx)

        tool = Tool.from_function(
            run,
            name=name,
            title=_TITLES[name],
            description=_DESCRIPTIONS[name],
            annotations=tool_annotations(name),
            structured_output=False,
        )
        tool.parameters = {"type": "object", **_SCHEMAS[name]}
        return tool

    def call(self, name: str, arguments: object, ctx: Context[Any, Any]) -> CallToolResult:
        """Run one tool call; every outcome is a result, never an exception.

        A call is held to ``max_request_bytes`` as the client sent it: over
        HTTP the request's body (measured by :mod:`vaultmem.mcp.web`), over
        stdio its line (refused before it gets here, :class:`_PipeLines`).
        Through any other transport, its arguments as compact JSON."""
        sent = _sent_bytes(ctx)
        if sent is not None and sent > self.max_request_bytes:
            return _error(too_large(sent, self.max_request_bytes))
        try:
            size = len(json.dumps(arguments, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
        except (TypeError, ValueError):
            return _error("Error: the tool's arguments are not a JSON object; nothing was changed.")
        if sent is None and size > self.max_request_bytes:
            return _error(
                f"Error: the arguments are {size:,} bytes, over this memory server's limit of "
                f"{self.max_request_bytes:,} bytes; nothing was changed."
            )
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return _error("Error: the tool's arguments are not a JSON object; nothing was changed.")
        if self.read_only and name not in READ_TOOLS:
            return _error(READ_ONLY_REFUSAL)
        try:
            commands = self.sessions.commands(ctx)
            if name in MEMORY_TOOLS:
                if "command" in arguments:  # the tool is the command: no other can be slipped in
                    takes = ", ".join(f"`{p}`" for p in _SCHEMAS[name]["properties"])
                    return _error(f"Error: Unexpected parameter `command` for command `{name}`. It takes: {takes}.")
                return _ok(commands.run({**arguments, "command": name}))
            return _ok(self._audit(name, arguments, commands.view_cap))
        except _StoppedWaiting:  # Ctrl-C while it waited for the writer lock: nothing begun
            return _error(STOPPED_WAITING)
        except CommandError as err:
            _log_storage_failure(name, err)
            return _error(str(err))
        except VaultError as err:
            text = _in_mcp_words(err)
            return _error(text if text.startswith("Error:") else f"Error: {text}")
        except Exception:  # never a traceback or a host path to the client
            log.exception("the tool %s failed", name)
            return _error(INTERNAL_ERROR)

    # -- the audit tools -----------------------------------------------------------------

    def _audit(self, name: str, arguments: dict[str, Any], cap: int) -> str:
        """An audit tool's text; a history or a diff longer than ``cap``
        characters (the cap of a ``view``) is cut at a whole line, its last
        line saying how to ask for less; a history without ``limit`` that
        leaves older versions out ends with a line saying how many.  A file
        at a version is given whole: nothing else pages through it, and it
        is within the file size limit."""
        allowed = set(_SCHEMAS[name]["properties"])
        for field in arguments:
            if field not in allowed:  # in the memory commands' words
                takes = ", ".join(f"`{p}`" for p in _SCHEMAS[name]["properties"])
                raise VaultError(f"Error: Unexpected parameter `{_echo(field)}` for tool `{name}`. It takes: {takes}.")
        # null is an argument left out, as the memory commands take it (``view_range: null``)
        arguments = {field: value for field, value in arguments.items() if value is not None}
        for field in allowed & set(arguments):
            value = arguments[field]
            wanted = _SCHEMAS[name]["properties"][field]["type"]
            if (wanted == "string" and not isinstance(value, str)) or (
                wanted == "integer" and (not isinstance(value, int) or isinstance(value, bool))
            ):  # in the memory commands' words (parse_input)
                kind = "an integer" if wanted == "integer" else "a string"
                raise VaultError(f"Error: Parameter `{field}` must be {kind}, got {_type_name(value)}.")
            # a path is held to the path rules (up to 1,024 bytes), which the vault applies with its own words
            if isinstance(value, str) and field != "path" and len(value) > LONGEST_ARGUMENT:
                raise VaultError(
                    f"Error: `{field}` is {len(value):,} characters long; an id or a time here is at most "
                    f"{LONGEST_ARGUMENT:,}."
                )
        for field in _SCHEMAS[name]["required"]:
            if field not in arguments:
                raise VaultError(f"Error: Missing required parameter `{field}` for tool `{name}`.")
        shown: str | None = arguments.get("path")
        if shown is not None:
            try:  # refused in the memory commands' words (MemoryCommands._path)
                target = paths.parse(shown, existing=True)
            except InvalidPathError as err:
                raise VaultError(f"Error: Invalid `path`: {err.rule}. Use a path such as /memories/notes.txt.") from err
        if name == "history":
            limit = arguments.get("limit", HISTORY_SHOWN)
            if limit < 1:
                raise VaultError("Error: `limit` must be at least 1.")
            # Without a limit asked for, more than shown: to say how many were left out (up to HISTORY_COUNTED).
            asked = "limit" in arguments
            found = self.vault.history(path=shown, limit=limit if asked else limit + HISTORY_COUNTED)
            versions = found[:limit]
            if not versions:
                if shown is not None and self.vault.snapshot().kind(target) is None:
                    raise _never_there(shown)
                return "No versions yet."
            lines = []
            for v in versions:
                where = " -> ".join(v.paths) if v.command == "rename" else ", ".join(v.paths)
                if v.restored_from:  # a restore or an undo: the version it brought back, as `vaultmem log` says
                    where += (
                        f" (from {'the empty memory' if v.restored_from == EMPTY_MEMORY else v.restored_from[:12]})"
                    )
                lines.append(
                    f"{v.id[:12]}  {utc_text(v.time)}  {v.actor}  {v.session or '-'}  "
                    f"{v.command} {where}{v.merge_note(12)}"
                )
            shown_text = _capped(
                lines, cap, "History", "versions", "ask for fewer with `limit`, or for one file's with `path`."
            )
            left = len(found) - len(versions)
            if left and shown_text == "\n".join(lines):  # not cut at the cap, and older versions left out
                return shown_text + "\n" + _left_out(len(versions), left, len(found) == limit + HISTORY_COUNTED)
            return shown_text
        if name == "read_version":
            try:
                return self.vault.read(arguments["path"], at=arguments["version"])
            except NotFoundError:  # no such version, or no such file at it: unless the vault never held the path
                if self._never_held(target):
                    raise _never_there(arguments["path"]) from None
                raise
        diff = self.vault.diff(arguments["from_version"], arguments.get("to_version"), shown)
        if not diff:
            if shown is not None and self._never_held(target):
                raise _never_there(shown)
            return "No changes."
        return _capped(
            _lines_of(diff),
            cap,
            "Diff",
            "lines",
            "ask for one file's with `path`, or for versions closer together.",
            joined="",
        )

    def _never_held(self, target: paths.MemoryPath) -> bool:
        """Whether ``target`` is not in the memory and no version ever held it (a mistyped path)."""
        return self.vault.snapshot().kind(target) is None and not self.vault.history(path=target.text, limit=1)


# The library's next steps (vaultmem.errors.STEPS), and its words for where
# version ids are listed, said with this server's tools: its client runs no
# command line.
MCP_STEPS = {"versions": "Use `history` to list the vault's versions."}
_CLI_WORDS = (("as `vaultmem log` shows them", "as `history` shows them"),)


def _in_mcp_words(err: VaultError) -> str:
    text = f"{err.fact} {MCP_STEPS[err.step]}" if err.step in MCP_STEPS else str(err)
    for said, meant in _CLI_WORDS:
        text = text.replace(said, meant)
    return text


def _left_out(shown: int, left: int, more: bool) -> str:
    """The last line of a history that lists the newest ``shown`` versions
    and leaves ``left`` older ones out (at least that many, with ``more``)."""
    if more:
        return (
            f"[The newest {shown:,} versions shown; at least {left:,} older ones left out. "
            "Ask for more with a larger `limit`, or for one file's with `path`.]"
        )
    return (
        f"[The newest {shown:,} of {shown + left:,} versions shown; {left:,} older "
        f"{'one' if left == 1 else 'ones'} left out. Ask for all with `limit` {shown + left:,}.]"
    )


def _never_there(shown: str) -> NotFoundError:
    """What an audit tool answers for a path no version of the vault ever
    held (a mistyped one), in the words of ``view`` for a missing path: not
    the empty answer of a path that is there."""
    return NotFoundError(f"Error: The path {shown} has no versions in this vault. Please provide a valid path.")


def _lines_of(text: str) -> list[str]:
    """``text``'s lines, each with its ``\n``: a line holds whatever else it
    holds (a form feed, U+2028), as a file's lines do (SPEC.md)."""
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


def _capped(lines: list[str], cap: int, what: str, unit: str, instead: str, joined: str = "\n") -> str:
    """``lines`` joined, or as many whole ones as fit in ``cap`` characters
    and a last line saying what was left out and what to ask for instead."""
    used = 0
    for index, line in enumerate(lines):
        used += len(line) + len(joined)
        if used > cap:
            note = f"[{what} cut at {cap:,} characters after {index:,} of {len(lines):,} {unit}; {instead}]"
            if joined:  # the note is one more line
                return joined.join([*lines[:index], note])
            return "".join(lines[:index]) + note  # the lines shown keep their own line ends
    return joined.join(lines)


# -- stdio without a thread per line ------------------------------------------------------


class _Outstanding:
    """The requests read and not yet answered, by id, so a server whose
    input ends answers them before it exits (the SDK cancels them unanswered,
    a write among them made and never acknowledged)."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self.settled = asyncio.Event()  # set while none is waiting for its answer
        self.settled.set()

    def read(self, message: object) -> None:
        """Note a message the SDK is about to get."""
        if isinstance(message, JSONRPCRequest):
            key = _id_key(message.id)
            self._ids[key] = self._ids.get(key, 0) + 1
            self.settled.clear()
        elif isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled":
            params = message.params or {}
            ident = params.get("requestId")
            if isinstance(ident, str | int) and not isinstance(ident, bool):
                self._answered(_id_key(ident))  # a cancelled request gets no answer

    def written(self, text: str) -> None:
        """Note a message written to the client."""
        found = _ANSWER.match(text)
        if found is not None:
            self._answered(_id_key(json.loads(found.group(1))))

    def forget(self) -> None:
        """Nothing more can be answered (the client is gone)."""
        self._ids.clear()
        self.settled.set()

    def _answered(self, key: str) -> None:
        left = self._ids.pop(key, 0) - 1
        if left > 0:
            self._ids[key] = left
        if not self._ids:
            self.settled.set()


def _id_key(ident: object) -> str:
    """A request id as the SDK correlates it (its ``coerce_request_id``): a
    string Python reads as an integer is that integer, so 7, "7", "07" and
    " +7" are one id.  A cancellation naming any of them cancels the request
    the SDK knows by it, which then gets no answer."""
    if isinstance(ident, str):
        try:
            return str(int(ident))
        except ValueError:  # not an integer, or too long for one
            return ident
    return str(ident)


class _PipeLines:
    """Standard input as the lines of an asyncio stream (the SDK's own stdio
    reads each line in a worker thread, a thread hop per message).  A
    request the SDK could not parse would get no answer at all, and its
    client would wait until it gave up: one holding text that is not
    Unicode (a lone surrogate escape) or bytes that are not UTF-8 (which the
    SDK would store replaced by U+FFFD) is answered here with an error, and
    so is every message the SDK's own validation refuses.  So is
    a line longer than ``limit`` bytes (the reader's limit), which is dropped
    as it arrives, never held whole: its answer carries the id found at the
    start or the end of the line.

    When the input ends (the client closed it, or :meth:`stop`), the lines
    end only once every request read has been answered, or after
    :data:`DRAIN_SECONDS`."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: _PipeWriter, limit: int, max_request_bytes: int | None = None
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.limit = limit
        self.max_request_bytes = max_request_bytes
        self.outstanding = writer.outstanding
        self.stopped = False
        self._close_input: Callable[[], None] | None = None

    def closing_input_with(self, close: Callable[[], None]) -> None:
        """How :meth:`stop` ends the input: it closes what feeds the reader."""
        self._close_input = close

    def stop(self) -> None:
        """Read no more requests: answer those read, then end (Ctrl-C, or the client is gone)."""
        if self.stopped:
            return
        self.stopped = True
        if self._close_input is not None:
            self._close_input()

    def __aiter__(self) -> _PipeLines:
        return self

    async def __anext__(self) -> str:
        while True:
            if self.stopped:
                await self._end()
            try:
                line = await self.reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as end:  # the last line has no newline, or there is none
                if not end.partial or self.stopped:
                    await self._end()
                line = end.partial
            except asyncio.LimitOverrunError as over:
                await self.writer.write(json.dumps(await self._too_long(over.consumed)) + "\n")
                continue
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError:  # stored as it came, its text would be changed (U+FFFD): refused
                await self.writer.write(json.dumps(_not_utf8(line)) + "\n")
                continue
            try:
                refused = _not_unicode(text)
                message = None
                if refused is None and text.strip():
                    message = _message(text)
                    refused = _unreadable(text, line) if message is None else _wrong_id(text, message)
                    if refused is None:
                        refused = self._too_large(line, message)
            except Exception as err:  # one line the server cannot answer must not end the session
                log.error("a message could not be read (%s); it was answered as unreadable", type(err).__name__)
                refused = _unreadable("", b"")
            if refused is None:
                self.outstanding.read(message)
                return text
            await self.writer.write(json.dumps(refused) + "\n")

    def _too_large(self, line: bytes, message: object) -> dict[str, Any] | None:
        """The answer to a tool call whose line (its bytes as they came, the
        line end aside) is over ``max_request_bytes``, or None: a tool
        result saying so, as the tool would give it."""
        if self.max_request_bytes is None or not isinstance(message, JSONRPCRequest):
            return None
        size = len(line) - (2 if line.endswith(b"\r\n") else 1 if line.endswith(b"\n") else 0)
        if message.method != "tools/call" or size <= self.max_request_bytes:
            return None
        text = too_large(size, self.max_request_bytes)
        result = CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
        return {"jsonrpc": "2.0", "id": message.id, "result": result.model_dump(by_alias=True, exclude_none=True)}

    async def _end(self) -> NoReturn:
        """Wait (a bounded time) for the answers to the requests read, then end the lines."""
        try:
            await asyncio.wait_for(self.outstanding.settled.wait(), DRAIN_SECONDS)
        except asyncio.TimeoutError:
            log.warning("the input ended; requests unanswered after %.0f s are dropped", DRAIN_SECONDS)
        raise StopAsyncIteration

    async def _too_long(self, waiting: int) -> dict[str, Any]:
        """Drop the rest of a line over the limit; the error answering it."""
        chunk = await self.reader.readexactly(waiting)
        head, tail, size = chunk[:4096], chunk[-4096:], waiting
        while True:
            try:
                chunk = await self.reader.readuntil(b"\n")
                size, tail = size + len(chunk), (tail + chunk)[-4096:]
                break
            except asyncio.LimitOverrunError as more:
                chunk = await self.reader.readexactly(more.consumed)
                size, tail = size + len(chunk), chunk[-4096:]
            except asyncio.IncompleteReadError as end:
                size, tail = size + len(end.partial), (tail + end.partial)[-4096:]
                break
        ident = _request_id(head, tail)
        message = (
            f"Error: the request is {size:,} bytes, over this memory server's limit of {self.limit:,} bytes "
            "for one message (--max-request-bytes and the JSON-RPC envelope); nothing was changed."
        )
        return {"jsonrpc": "2.0", "id": ident, "error": {"code": -32600, "message": message}}


def _request_id(head: bytes, tail: bytes) -> object:
    """The id of a request that could not be read whole, or None: where
    JSON-RPC writers put it, first (the SDKs) or last."""
    found = _REQUEST_ID.search(head) or next(reversed(list(_REQUEST_ID.finditer(tail))), None)
    if found is None:
        return None
    try:  # the line is not JSON: what looks like its id may not be JSON either ("a\\q", 01, broken UTF-8)
        ident: object = json.loads(found.group(1).decode("utf-8"))
    except ValueError:
        return None
    return ident


def _not_utf8(line: bytes) -> dict[str, Any]:
    """The error answering a line that is not UTF-8 (JSON-RPC's text is):
    read with its bad bytes replaced, a file's text would be stored changed."""
    message = (
        "Error: the message is not UTF-8 text (JSON is UTF-8); nothing was changed. Send the request encoded in UTF-8."
    )
    ident = _request_id(line[:4096], line[-4096:])
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": -32700, "message": message}}


def _wrong_id(text: str, message: object) -> dict[str, Any] | None:
    """The error answering a request whose id is neither a string nor an
    integer (null, a fraction, true, an object), or None.

    The SDK reads such a request as a notification (a message without an
    id) and drops it without a word; its client would wait for an answer
    that never comes.  A fraction is given back as the id, so its client can
    tell which request it was; any other such id cannot be, and is null."""
    if not isinstance(message, JSONRPCNotification) or ('"id"' not in text and "\\u" not in text):
        return None
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(raw, dict) or "id" not in raw:
        return None
    ident = raw["id"]
    message_text = (
        "Error: the request's id must be a string or an integer (MCP allows no other id, not null either); "
        "nothing was changed."
    )
    echoed = ident if isinstance(ident, float) and math.isfinite(ident) else None
    return {"jsonrpc": "2.0", "id": echoed, "error": {"code": -32600, "message": message_text}}


def _unreadable(text: str, line: bytes) -> dict[str, Any]:
    """The error answering a message the SDK cannot validate.

    The SDK drops such a message without a word (JSON nested deeper or a
    number longer than its parser reads, a batch, a field of the wrong
    kind), and a client waiting for that request would wait until it gave
    up; the same validation here lets the server answer it, with the id it
    can find, and go on.  ``text`` is one the SDK's validation refused."""
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        code = -32700
        message = (
            "Error: the message is not JSON this memory server can read (malformed, nested too deep, "
            "or a number too long); nothing was changed."
        )
    else:
        code = -32600
        message = (
            "Error: the message is not a JSON-RPC request this memory server takes (one JSON object a message, "
            "no batches, each field of its kind); nothing was changed."
        )
    ident = _request_id(line[:4096], line[-4096:])
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}


def _message(text: str) -> object | None:
    """``text`` as the SDK's validation reads it (a JSON-RPC message), or None if it refuses it."""
    try:
        return jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValueError:
        return None


def _not_unicode(text: str) -> dict[str, Any] | None:
    """The error answering a request whose strings are not Unicode, or None."""
    if "\\ud" not in text.lower():  # only an escape can carry a lone surrogate
        return None
    try:
        message = json.loads(text)
        json.dumps(message, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        ident = message.get("id") if isinstance(message, dict) else None
        error = {"code": -32602, "message": "Error: the request holds text that is not Unicode (a lone surrogate)."}
        return {"jsonrpc": "2.0", "id": ident, "error": error}
    except (ValueError, RecursionError):
        return None  # not JSON, or nested deeper than it reads: _unreadable answers it
    return None


class _PipeWriter:
    """Standard output written whole, line by line, from the event loop.
    A client that is gone (a closed pipe) is written to no more: its
    answers are dropped, and the input is stopped.  So is an output that
    takes no more (a file on a full disk, an I/O error), which ``failed``
    keeps to be reported."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.outstanding = _Outstanding()
        self.gone = False
        self.failed: OSError | None = None
        self.on_gone: Callable[[], None] | None = None

    async def write(self, text: str) -> None:
        if self.gone:
            return
        data = memoryview(text.encode("utf-8"))
        while data:
            try:
                data = data[os.write(self.fd, data) :]
            except BlockingIOError:  # the client reads slowly: wait for room
                await asyncio.sleep(0.001)
            except OSError as err:  # nobody reads any more, or the output takes no more
                if not isinstance(err, BrokenPipeError | ConnectionResetError):
                    self.failed = err
                self.gone = True
                self.outstanding.forget()
                if self.on_gone is not None:
                    self.on_gone()
                return
        self.outstanding.written(text)

    async def flush(self) -> None:
        return None


class _ThreadedInput:
    """A standard input the event loop cannot watch (a regular file,
    ``/dev/null``, a terminal), read in a thread of its own into ``reader``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, reader: asyncio.StreamReader, fd: int) -> None:
        self.loop = loop
        self.reader = reader
        self.fd = fd
        self.closed = False
        threading.Thread(target=self._read, name="vaultmem-mcp-stdin", daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 65_536)
            except OSError:
                chunk = b""
            try:
                self.loop.call_soon_threadsafe(self._feed, chunk)
            except RuntimeError:  # the loop is closed: the server is done
                return
            if not chunk:
                return

    def _feed(self, chunk: bytes) -> None:
        if self.closed:
            return
        if chunk:
            self.reader.feed_data(chunk)
        else:
            self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.reader.feed_eof()


async def _open_input(reader: asyncio.StreamReader) -> Callable[[], None]:
    """Feed standard input to ``reader``; what ends it (as if the client closed it)."""
    loop = asyncio.get_running_loop()
    fd = os.dup(0)
    if stat.S_ISFIFO(os.fstat(fd).st_mode) or stat.S_ISSOCK(os.fstat(fd).st_mode):  # a client's pipe: no thread
        stdin = os.fdopen(fd, "rb", buffering=0)
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
        return transport.close
    return _ThreadedInput(loop, reader, fd).close


async def serve_stdio(server: MCPServer, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> None:
    """Serve ``server`` on this process's standard input and output; a
    message longer than ``max_request_bytes`` plus the envelope is refused
    unread.

    It ends when the input does, once the requests read are answered; when
    the client stops reading (nothing more to answer to); and on Ctrl-C
    (SIGINT), which stops reading and answers the requests read, then
    raises :class:`KeyboardInterrupt` (a second Ctrl-C stops at once)."""
    lowlevel = getattr(server, "_lowlevel_server", None)
    if lowlevel is None:  # another version of the SDK: its own stdio
        await server.run_stdio_async()
        return
    loop = asyncio.get_running_loop()
    limit = max_request_bytes + ENVELOPE_BYTES
    reader = asyncio.StreamReader(limit=limit)
    close_input = await _open_input(reader)
    out = os.dup(1)
    os.dup2(2, 1)  # stray output of any library lands on standard error, never on the wire
    writer = _PipeWriter(out)
    lines = _PipeLines(reader, writer, limit, max_request_bytes)
    lines.closing_input_with(close_input)
    writer.on_gone = lines.stop
    interrupted = _on_ctrl_c(loop, lines.stop)
    if isinstance(server, _Server):
        server.interrupted = interrupted
    try:
        async with stdio_server(stdin=lines, stdout=writer) as (read, write):  # type: ignore[arg-type]
            await lowlevel.run(read, write, lowlevel.create_initialization_options())
    finally:
        if interrupted is not None:
            loop.remove_signal_handler(signal.SIGINT)
        close_input()
        if isinstance(server, _Server):
            await anyio.to_thread.run_sync(server.memory.close)
    if writer.failed is not None:
        reason = writer.failed.strerror or str(writer.failed)
        raise VaultError(
            f"Error: the answers could not be written to standard output ({reason}); no request was read after that."
        )
    if interrupted is not None and interrupted.is_set():
        raise KeyboardInterrupt


def _on_ctrl_c(loop: asyncio.AbstractEventLoop, stop: Callable[[], None]) -> asyncio.Event | None:
    """Call ``stop`` on the first SIGINT; the event that says it came (None
    where this thread cannot take signals).  A second SIGINT raises
    :class:`KeyboardInterrupt` at once."""
    came = asyncio.Event()

    def interrupt() -> None:
        if came.is_set():
            raise KeyboardInterrupt
        came.set()
        stop()

    try:
        loop.add_signal_handler(signal.SIGINT, interrupt)
        # The event loop sees the signal once it runs again.  A memory
        # command waits for another process's write (an import, a writer
        # stopped with Ctrl-Z) outside the loop's thread (_Server._writer_free)
        # unless that write began just after it looked; then it waits in the
        # loop's thread, which would keep the loop from running until that
        # write ends.  Such a command has begun nothing: it stops.
        signal.signal(signal.SIGINT, _stop_waiting_for_the_lock)
    except (ValueError, RuntimeError, NotImplementedError):  # not the main thread, or no signals here
        return None
    return came


class _StoppedWaiting(BaseException):
    """Ctrl-C came while a memory command waited for the vault's writer lock
    (a BaseException: no ``except Exception`` on its way takes it for a failure)."""


def _stop_waiting_for_the_lock(signum: int, frame: FrameType | None) -> None:
    """SIGINT's handler in Python while the event loop serves: the loop is
    told by its own wakeup (and stops reading); a memory command waiting for
    the writer lock (``WriterLock._take``, nothing written yet) stops now."""
    if frame is not None and frame.f_code is WriterLock._take.__code__:
        raise _StoppedWaiting
