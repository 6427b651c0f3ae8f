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
import json
import logging
import os
import re
import secrets
import threading
from collections.abc import Callable, Mapping
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.tools.base import Tool
from mcp.server.stdio import stdio_server
from mcp.types import CallToolResult, InputRequiredResult, TextContent, ToolAnnotations, jsonrpc_message_adapter
from mcp.types import Tool as MCPTool

from vaultmem.anthropic.agent import memory_system_prompt
from vaultmem.core.lru import LRU
from vaultmem.core.policy import Policy
from vaultmem.errors import CommandError, VaultError
from vaultmem.ops.memory import MemoryCommands
from vaultmem.vault import Vault

log = logging.getLogger("vaultmem.mcp")

SERVER_NAME = "vaultmem"
DEFAULT_MAX_REQUEST_BYTES = 1_048_576  # the largest tool call accepted, in bytes of JSON
ENVELOPE_BYTES = 65_536  # what a message may hold beyond a call's arguments: the JSON-RPC envelope
_REQUEST_ID = re.compile(rb'"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,256}")')
MEMORY_TOOLS = ("view", "create", "str_replace", "insert", "delete", "rename")
AUDIT_TOOLS = ("history", "read_version", "diff")
READ_TOOLS = frozenset({"view", *AUDIT_TOOLS})
SESSIONS_KEPT = 1_024  # MCP sessions whose commands a server keeps ready
LONGEST_ARGUMENT = 1_000  # characters of an audit tool's text argument (an id, a time or a path)
READ_ONLY_REFUSAL = (
    "Error: this memory server is read-only (vaultmem mcp --read-only); nothing was written. "
    "Use view, history, read_version or diff."
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
            "limit": {"type": "integer", "minimum": 1, "description": "at most this many versions (default 20)"},
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


def instructions() -> str:
    """What a client gives the model about this server: the memory protocol
    and the guidance :func:`~vaultmem.anthropic.agent.memory_system_prompt` gives."""
    return PROTOCOL + "\n\n" + memory_system_prompt()


def tool_annotations(name: str) -> ToolAnnotations:
    read_only = name == "view" or name in AUDIT_TOOLS
    return ToolAnnotations(
        title=_TITLES[name],
        read_only_hint=read_only,
        destructive_hint=None if read_only else name in ("delete", "rename"),
        idempotent_hint=read_only,
        open_world_hint=False,
    )


def _error(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def _ok(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=False)


class Sessions:
    """One :class:`MemoryCommands` per MCP session, each a vaultmem session
    named ``mcp-CLIENT-ID`` (the client's name and the session id)."""

    def __init__(self, factory: Callable[[str], MemoryCommands]) -> None:
        self._factory = factory
        # A long-running HTTP server sees sessions come and go: the most recent
        # are kept (one that comes back after eviction gets a fresh one, same name).
        self._by_key: LRU[str, MemoryCommands] = LRU(SESSIONS_KEPT)
        self._lock = threading.Lock()
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
            return found


class _Server(MCPServer):
    """An MCPServer that lists only the tools it serves (``--read-only``) and
    hands its own tools' calls straight to :meth:`MemoryServer.call`.

    The SDK's way to a tool (its tool manager, an arguments model checked
    with pydantic, a worker thread for a function that is not a coroutine)
    checks nothing the memory commands do not check themselves, and cost a
    write about 0.09 ms more at p50 (CHANGELOG).  The tools named in ``inline`` run in the event loop's
    own thread: over stdio one client sends the calls, and a memory command
    takes about a millisecond, so handing it to a worker thread and back
    only adds two thread switches.  The others, and every tool over HTTP
    (many clients at once), run in a worker thread as the SDK would run them.
    """

    def __init__(self, listed: set[str], memory: MemoryServer, inline: frozenset[str], **settings: Any) -> None:
        super().__init__(**settings)
        self._listed = listed
        self._memory = memory
        self._inline = inline

    async def list_tools(self) -> list[MCPTool]:
        return [tool for tool in await super().list_tools() if tool.name in self._listed]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        if context is None or name not in _SCHEMAS:
            return await super().call_tool(name, arguments, context)  # the SDK's own answer to an unknown tool
        raw = _raw_arguments(context)
        if name in self._inline:
            return self._memory.call(name, raw, context)
        return await anyio.to_thread.run_sync(self._memory.call, name, raw, context)


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
        self.vault = vault
        self.actor = actor
        self.read_only = read_only
        self.max_request_bytes = max_request_bytes
        MemoryCommands(vault, actor=actor, session="mcp-check", policy=policy)  # refuses a bad actor or policy now
        self.sessions = Sessions(lambda label: MemoryCommands(vault, actor=actor, session=label, policy=policy))

    def build(self, *, inline: bool = False, **settings: Any) -> MCPServer:
        """The server: every tool registered, so a write to a read-only
        server gets its own refusal; only the ones it serves listed.  With
        ``inline`` (stdio: one client) the memory commands run in the event
        loop's thread; the audit tools, which may read a long history, and
        every tool without it run in a worker thread."""
        tools = [self._tool(name) for name in (*MEMORY_TOOLS, *AUDIT_TOOLS)]
        listed = {t.name for t in tools if not self.read_only or t.name in READ_TOOLS}
        return _Server(
            listed,
            self,
            frozenset(MEMORY_TOOLS) if inline else frozenset(),
            name=SERVER_NAME,
            instructions=instructions(),
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
        """Run one tool call; every outcome is a result, never an exception."""
        try:
            size = len(json.dumps(arguments, ensure_ascii=False).encode("utf-8"))
        except (TypeError, ValueError):
            return _error("Error: the tool's arguments are not a JSON object; nothing was changed.")
        if size > self.max_request_bytes:
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
            return _ok(self._audit(name, arguments))
        except CommandError as err:
            return _error(str(err))
        except VaultError as err:
            return _error(str(err) if str(err).startswith("Error:") else f"Error: {err}")
        except Exception:  # never a traceback or a host path to the client
            log.exception("vaultmem mcp: the tool %s failed", name)
            return _error(INTERNAL_ERROR)

    # -- the audit tools -----------------------------------------------------------------

    def _audit(self, name: str, arguments: dict[str, Any]) -> str:
        allowed = set(_SCHEMAS[name]["properties"])
        unknown = sorted(set(arguments) - allowed)
        if unknown:
            raise VaultError(f"Error: {name} takes no parameter {', '.join(map(repr, unknown))}.")
        for field in allowed & set(arguments):
            value = arguments[field]
            wanted = _SCHEMAS[name]["properties"][field]["type"]
            if (wanted == "string" and not isinstance(value, str)) or (
                wanted == "integer" and (not isinstance(value, int) or isinstance(value, bool))
            ):
                raise VaultError(f"Error: `{field}` must be {'an integer' if wanted == 'integer' else 'a string'}.")
            if isinstance(value, str) and len(value) > LONGEST_ARGUMENT:
                raise VaultError(
                    f"Error: `{field}` is {len(value):,} characters long; an id, a time or a path here is at most "
                    f"{LONGEST_ARGUMENT:,}."
                )
        for field in _SCHEMAS[name]["required"]:
            if field not in arguments:
                raise VaultError(f"Error: {name} needs `{field}`.")
        if name == "history":
            limit = arguments.get("limit", 20)
            if limit < 1:
                raise VaultError("Error: `limit` must be at least 1.")
            versions = self.vault.history(path=arguments.get("path"), limit=limit)
            if not versions:
                return "No versions yet."
            lines = []
            for v in versions:
                where = " -> ".join(v.paths) if v.command == "rename" else ", ".join(v.paths)
                lines.append(
                    f"{v.id[:12]}  {v.time.strftime('%Y-%m-%dT%H:%M:%SZ')}  {v.actor}  {v.session or '-'}  "
                    f"{v.command} {where}"
                )
            return "\n".join(lines)
        if name == "read_version":
            return self.vault.read(arguments["path"], at=arguments["version"])
        diff = self.vault.diff(arguments["from_version"], arguments.get("to_version"), arguments.get("path"))
        return diff or "No changes."


# -- stdio without a thread per line ------------------------------------------------------


class _PipeLines:
    """Standard input as the lines of an asyncio pipe (the SDK's own stdio
    reads each line in a worker thread, a thread hop per message).  A
    request the SDK could not parse would get no answer at all, and its
    client would wait until it gave up: one holding text that is not
    Unicode (a lone surrogate escape) is answered here with an error, and
    so is every message the SDK's own validation refuses.  So is
    a line longer than ``limit`` bytes (the reader's limit), which is dropped
    as it arrives, never held whole: its answer carries the id found at the
    start or the end of the line."""

    def __init__(self, reader: asyncio.StreamReader, writer: _PipeWriter, limit: int) -> None:
        self.reader = reader
        self.writer = writer
        self.limit = limit

    def __aiter__(self) -> _PipeLines:
        return self

    async def __anext__(self) -> str:
        while True:
            try:
                line = await self.reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as end:  # the last line has no newline, or there is none
                if not end.partial:
                    raise StopAsyncIteration from None
                line = end.partial
            except asyncio.LimitOverrunError as over:
                await self.writer.write(json.dumps(await self._too_long(over.consumed)) + "\n")
                continue
            text = line.decode("utf-8", "replace")
            refused = _not_unicode(text) or _unreadable(text, line)
            if refused is None:
                return text
            await self.writer.write(json.dumps(refused) + "\n")

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
    return json.loads(found.group(1)) if found else None


def _unreadable(text: str, line: bytes) -> dict[str, Any] | None:
    """The error answering a message the SDK cannot validate, or None.

    The SDK drops such a message without a word (JSON nested deeper or a
    number longer than its parser reads, a batch, a field of the wrong
    kind), and a client waiting for that request would wait until it gave
    up; the same validation here lets the server answer it, with the id it
    can find, and go on.  A blank line is left to the SDK: no request, no answer."""
    if not text.strip() or _valid_message(text):
        return None
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
            "Error: the message is not a JSON-RPC request this memory server takes (one object a line, "
            "no batches, each field of its kind); nothing was changed."
        )
    ident = _request_id(line[:4096], line[-4096:])
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}


def _valid_message(text: str) -> bool:
    """Whether the SDK's validation takes ``text`` as a JSON-RPC message."""
    try:
        jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValueError:
        return False
    return True


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
    except ValueError:
        return None  # not JSON: _unreadable answers it
    return None


class _PipeWriter:
    """Standard output written whole, line by line, from the event loop."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    async def write(self, text: str) -> None:
        data = memoryview(text.encode("utf-8"))
        while data:
            try:
                data = data[os.write(self.fd, data) :]
            except BlockingIOError:  # the client reads slowly: wait for room
                await asyncio.sleep(0.001)

    async def flush(self) -> None:
        return None


async def serve_stdio(server: MCPServer, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> None:
    """Serve ``server`` on this process's standard input and output; a
    message longer than ``max_request_bytes`` plus the envelope is refused
    unread."""
    lowlevel = getattr(server, "_lowlevel_server", None)
    if lowlevel is None:  # another version of the SDK: its own stdio
        await server.run_stdio_async()
        return
    loop = asyncio.get_running_loop()
    limit = max_request_bytes + ENVELOPE_BYTES
    reader = asyncio.StreamReader(limit=limit)
    stdin = os.fdopen(os.dup(0), "rb", buffering=0)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
    out = os.dup(1)
    os.dup2(2, 1)  # stray output of any library lands on standard error, never on the wire
    writer = _PipeWriter(out)
    async with stdio_server(stdin=_PipeLines(reader, writer, limit), stdout=writer) as (read, write):  # type: ignore[arg-type]
        await lowlevel.run(read, write, lowlevel.create_initialization_options())
