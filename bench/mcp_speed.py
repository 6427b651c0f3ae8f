"""What serving the memory over MCP adds to a call: a round trip through the
official MCP client to `vaultmem mcp`, over stdio and over streamable HTTP,
against the same call made directly with ``VaultMemoryTool.call``.

    python bench/mcp_speed.py [--rounds 5] [--calls 100] [--files 1000] [--out docs]   # writes docs/mcp-speed.md
    python bench/mcp_speed.py --quick --out /tmp/x     # small sizes, to check the benchmark (under 30 s)

**The paths.** Six vaults, each an ``import`` of the same ``--files`` files
(1.4 KB each, in 20 folders), each used by one process, as users run them:

- direct: a ``VaultMemoryTool`` (actor ``claude``) on vault A, in a process of
  its own (bench/worker.py), which times each call around
  ``tool.call(params)`` and answers over a pipe;
- stdio: an MCP ``ClientSession`` over ``stdio_client``, in this process's
  asyncio loop, to a ``vaultmem mcp --vault B`` subprocess (``python -m
  vaultmem``, the key in ``VAULTMEM_KEY``);
- control: a second direct path on vault D, in a process of its own too;
- and for the HTTP phase, the same three on vaults of their own: direct on E,
  an MCP ``ClientSession`` over ``streamable_http_client`` to a ``vaultmem mcp
  --http --port P --vault C`` subprocess on 127.0.0.1 (with the bearer token
  the server wrote to C's token file), control on F.

So this process is only the MCP clients, as Claude Code or Claude Desktop
is: no vault's background threads (files made ahead, pack merges) share its
interpreter and hold up its reading of an answer.  ``--topology one`` puts
the direct and control tools in this process instead, beside the clients
(how this benchmark ran before): their background work after each write then
delays the clients too, which no MCP user's client has to bear.

**Phases.** For each command, the stdio phase's three paths are called, then
the HTTP phase's: a server's background work after a write (files made
ahead, pack merges) runs while that phase's own calls go on, never inside
the other transport's calls, on a machine of two CPUs.  Within a phase the
calls go to its paths in runs of ``--block`` calls (10), the first path
rotating from run to run, so a drift in the machine hits them all alike, and
what a path's process still does after a write (files made ahead, pack
merges) falls on that path's own next calls, as it does for a user, rather
than on the call another path's process makes right after it (``--block 1``
alternates call by call; on two CPUs each path then pays for the others'
work after their writes).  A call's wall time is taken around ``tool.call(params)`` or ``await
session.call_tool(name, arguments)`` (time.perf_counter).  Every call must
succeed (no ``is_error``) and return the same text on all of a phase's paths,
or the run stops; at the end, each served vault must hold as many versions
as the direct one, all by the server's actor in one session ``mcp-bench-...``.

**The commands.** A round makes ``--calls`` calls of each command, in this
order: ``view`` of a file, ``create`` of a new file, ``str_replace`` and
``insert`` in existing files (``note 7`` becomes ``note 7+``; a line after
line 3), ``rename`` of a file the round created, ``delete`` of it
(bench/measure.py's calls).  A warm-up round (quiet, unrecorded) comes
first, then ``--rounds`` rounds on a quiet disk and as many on a busy one,
alternating; a busy round runs beside another process appending 1-4 MB
chunks and fsyncing each, 64 MB/s asked (bench/busy.py), as in
benchmarks.md.

**The protocol's own round trip.** Before its calls, each round sends
``--calls`` MCP ``ping`` requests on each MCP path (alternating): the
transport and the SDK on both ends, with no tool and no vault.

**Reported**, per command and disk: each path's p50 and p99 (pooled over the
rounds), what MCP adds at p50 (its p50 minus its phase's direct p50, with the lowest
and highest of the same difference within each round) and the ratio of the
p50s.  Target: stdio adds under 1 ms at p50, for every command.

**The machine's noise.** The control path is the direct path again on
another vault built alike: its p50 minus the direct p50 is what this machine
shows between two identical calls, so an added latency inside it is not
measurable here.  Beside it, the share of each scenario's time in which some
task waited for I/O or for a CPU (/proc/pressure).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# When this file runs as a script, bench/ is first on sys.path and ``import mcp``
# would find the file itself: the official package is imported with bench/ left off.
_saved_path = sys.path[:]
sys.path[:] = [p for p in _saved_path if Path(p or os.curdir).resolve() != HERE]
try:
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
    from mcp.types import CallToolResult, Implementation, TextContent
finally:
    sys.path[:] = _saved_path
sys.path[:0] = [str(ROOT), str(HERE)]

from backends import BenchError, ToolProcess, write_memory_folder  # noqa: E402
from busy import BusyDisk, BusyReport  # noqa: E402
from machine import CPU_PRESSURE, cpu_pressure, io_pressure, io_stall, machine  # noqa: E402
from measure import make_call, percentile, positive  # noqa: E402

from vaultmem import Vault, VaultMemoryTool, generate_key  # noqa: E402

TARGET = 1000.0  # µs: what stdio may add to a call at p50
ACTOR = "claude"  # `vaultmem mcp`'s default actor, and the direct tools'
CLIENT = Implementation(name="bench", version="1")
COMMANDS = ("view", "create", "str_replace", "insert", "delete", "rename")  # the tables' order
RUN_ORDER = ("view", "create", "str_replace", "insert", "rename", "delete")  # a file is created, renamed, deleted
CALLS = {"view": "view file"}  # bench/measure.py's name of a call, where it differs
DIRECT, STDIO, HTTP, CONTROL = "direct", "stdio", "HTTP", "control"
DIRECT_H, CONTROL_H = "direct (HTTP phase)", "control (HTTP phase)"
PATHS = (DIRECT, STDIO, HTTP, CONTROL, DIRECT_H, CONTROL_H)
BASELINE = {STDIO: DIRECT, HTTP: DIRECT_H, CONTROL: DIRECT}  # each path's direct call, in its own phase
QUIET, BUSY = "quiet", "busy"
PROCESSES, ONE_PROCESS = "processes", "one"
TOPOLOGY = {
    PROCESSES: "each direct and control path in a process of its own (bench/worker.py); the MCP clients in "
    "the benchmark's process, with no vault",
    ONE_PROCESS: "the direct and control tools in the benchmark's process, beside the MCP clients (--topology one)",
}
PING = "ping"
READY_WITHIN = 60.0  # seconds a server may take to start
BUSY_SECONDS = 900.0  # no busy round lasts this long: a writer still running then stops by itself

FULL = {"files": 1000, "rounds": 5, "calls": 100, "warmup": 20}
QUICK = {"files": 50, "rounds": 1, "calls": 10, "warmup": 3}
BUSY_FULL = (64.0, (1.0, 4.0), 64.0)  # MB/s asked, chunk MB, cap MB (as bench/run.py and bench/signing.py)
BUSY_QUICK = (8.0, (0.25, 0.5), 2.0)
KEPT_OUT = (  # the servers get the key they are given and nothing else of this environment's vaultmem settings
    "VAULTMEM_VAULT",
    "VAULTMEM_PASSPHRASE",
    "VAULTMEM_MCP_TOKEN",
    "VAULTMEM_SIGNING_KEY",
    "VAULTMEM_SIGNING_PASSPHRASE",
)


def log(line: str) -> None:
    print(line, flush=True)


# -- the paths ---------------------------------------------------------------------------


class Route:
    """One way of making a memory call: ``await path.call(params)`` is
    (wall seconds, the result's text)."""

    name: str

    async def call(self, params: dict[str, Any]) -> tuple[float, str]:
        raise NotImplementedError


class Direct(Route):
    """``VaultMemoryTool.call`` in this process."""

    def __init__(self, name: str, vault: Vault) -> None:
        self.name = name
        self.vault = vault
        self.tool = VaultMemoryTool(vault, actor=ACTOR, session=f"bench-{name}")

    async def call(self, params: dict[str, Any]) -> tuple[float, str]:
        start = time.perf_counter()
        result = self.tool.call(params)
        elapsed = time.perf_counter() - start
        if not isinstance(result, str):
            raise BenchError(f"{self.name}: {params} returned {result!r}")
        return elapsed, result


class Worker(Route):
    """``VaultMemoryTool.call`` in a process of its own (bench/worker.py),
    timed there around the call alone, as an application runs it."""

    def __init__(self, name: str, vault: Path, key: str, errlog: IO[str]) -> None:
        self.name = name
        self.process = ToolProcess(name, ["vaultmem", str(vault), f"bench-{name}"], server_environment(key), errlog)

    async def call(self, params: dict[str, Any]) -> tuple[float, str]:
        return self.process.timed(params)

    def versions(self) -> int:
        return self.process.versions()

    def close(self) -> None:
        self.process.close()


class Remote(Route):
    """An MCP client session: the command is the tool, the rest its arguments."""

    def __init__(self, name: str, session: ClientSession) -> None:
        self.name = name
        self.session = session

    async def ping(self) -> float:
        """The wall seconds of one MCP ``ping``: the transport's and the SDK's round trip, with no tool."""
        start = time.perf_counter()
        await self.session.send_ping()
        return time.perf_counter() - start

    async def call(self, params: dict[str, Any]) -> tuple[float, str]:
        arguments = {k: v for k, v in params.items() if k != "command"}
        start = time.perf_counter()
        result = await self.session.call_tool(params["command"], arguments)
        elapsed = time.perf_counter() - start
        if not isinstance(result, CallToolResult) or not result.content:
            raise BenchError(f"{self.name}: {params} returned {result!r}")
        first = result.content[0]
        text = first.text if isinstance(first, TextContent) else repr(first)
        if result.is_error:
            raise BenchError(f"{self.name}: {params} failed: {text}")
        return elapsed, text


def server_environment(key: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in KEPT_OUT}
    env["VAULTMEM_KEY"] = key
    return env


def vaultmem(*args: str) -> list[str]:
    """The command line of `vaultmem ARGS` run by this interpreter (this checkout's vaultmem)."""
    return [sys.executable, "-m", "vaultmem", *args]


@contextlib.asynccontextmanager
async def stdio_session(vault: Path, key: str, errlog: IO[str]) -> AsyncIterator[ClientSession]:
    """A client session with `vaultmem mcp --vault VAULT` as a subprocess."""
    server = StdioServerParameters(
        command=sys.executable, args=vaultmem("mcp", "--vault", str(vault))[1:], env=server_environment(key)
    )
    async with (
        stdio_client(server, errlog=errlog) as (read, write),
        ClientSession(read, write, client_info=CLIENT) as session,
    ):
        await asyncio.wait_for(session.initialize(), READY_WITHIN)
        yield session


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def http_server(vault: Path, key: str, errlog: IO[str]) -> Iterator[tuple[str, str]]:
    """`vaultmem mcp --http` on a free port of 127.0.0.1, serving ``vault``
    until the block ends; yields (its URL, the token from its token file)."""
    port = free_port()
    process = subprocess.Popen(
        vaultmem("mcp", "--vault", str(vault), "--http", "--port", str(port)),
        env=server_environment(key),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=errlog,
    )
    try:
        deadline = time.monotonic() + READY_WITHIN
        while True:
            if process.poll() is not None:
                raise BenchError(f"vaultmem mcp --http ended with {process.returncode} before serving")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError as err:
                if time.monotonic() > deadline:
                    raise BenchError(
                        f"vaultmem mcp --http did not listen on port {port} within {READY_WITHIN:.0f} s"
                    ) from err
                time.sleep(0.05)
        token = (vault / "vaultmem" / "mcp-token").read_text(encoding="ascii").strip()
        yield f"http://127.0.0.1:{port}/mcp", token
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.asynccontextmanager
async def http_session(url: str, token: str) -> AsyncIterator[ClientSession]:
    """A client session over streamable HTTP, the token in ``Authorization: Bearer``."""
    async with (
        create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write, client_info=CLIENT) as session,
    ):
        await asyncio.wait_for(session.initialize(), READY_WITHIN)
        yield session


# -- the rounds --------------------------------------------------------------------------

Samples = dict[str, dict[str, list[float]]]  # command -> path -> seconds of each call


@dataclass(frozen=True)
class Round:
    """One recorded round: the seconds of every call, and the machine meanwhile."""

    scenario: str
    samples: Samples
    seconds: float
    stalled: float | None  # seconds in which some task waited for I/O
    waited: float | None  # seconds in which some task waited for a CPU


async def run_round(
    phases: Sequence[Sequence[Route]], tag: str, count: int, first: int, files: int, block: int
) -> Samples:
    """``count`` pings on each MCP path, then, phase by phase, ``count``
    calls of each command; within a phase the calls go to every path in
    turn in runs of ``block`` calls, the first path rotating from run to run.
    The ``i``-th edit or view goes to file ``first + i`` (modulo ``files``)."""
    paths = [p for phase in phases for p in phase]
    taken: Samples = {command: {p.name: [] for p in paths} for command in COMMANDS}
    remotes = [p for p in paths if isinstance(p, Remote)]
    taken[PING] = {p.name: [] for p in remotes}
    for i in range(count):
        turn = i % len(remotes)
        for remote in (*remotes[turn:], *remotes[:turn]):
            taken[PING][remote.name].append(await remote.ping())
    for command in RUN_ORDER:
        for phase in phases:
            for start in range(0, count, block):
                run = range(start, min(start + block, count))
                calls = [make_call(CALLS.get(command, command), tag, i, first + i, files) for i in run]
                turn = (start // block) % len(phase)
                texts: list[dict[str, str]] = [{} for _ in run]
                for path in (*phase[turn:], *phase[:turn]):
                    for n, call in enumerate(calls):
                        elapsed, text = await path.call(call.params)
                        if not text.startswith(call.expect):
                            raise BenchError(f"{path.name}: {call.params} returned {text!r}, expected {call.expect!r}")
                        taken[command][path.name].append(elapsed)
                        texts[n][path.name] = text
                for call, said in zip(calls, texts, strict=True):
                    if len(set(said.values())) != 1:
                        raise BenchError(f"{call.params} returned different texts on the paths: {said}")
    return taken


async def all_rounds(
    paths: Sequence[Sequence[Route]],
    rounds: int,
    calls: int,
    warmup: int,
    files: int,
    busy: Callable[[], BusyDisk],
    block: int,
) -> tuple[list[Round], list[BusyReport]]:
    """A warm-up round (quiet, unrecorded), then ``rounds`` quiet and
    ``rounds`` busy rounds, alternating."""
    await run_round(paths, "warm", warmup, 0, files, block)
    done: list[Round] = []
    writers: list[BusyReport] = []
    first = warmup
    started = time.perf_counter()
    for r in range(rounds):
        for scenario in (QUIET, BUSY):
            if scenario == QUIET and r > 0:
                os.sync()  # the busy writer's data reaches the disk before a quiet round
                await asyncio.sleep(1.0)
            writer = busy() if scenario == BUSY else None
            with writer if writer is not None else contextlib.nullcontext():
                clock, stall, wait = time.perf_counter(), io_stall(), io_stall(CPU_PRESSURE)
                samples = await run_round(paths, f"{scenario[0]}{r}", calls, first, files, block)
                stall_end, wait_end = io_stall(), io_stall(CPU_PRESSURE)
                seconds = time.perf_counter() - clock
            if writer is not None and writer.report is not None:
                writers.append(writer.report)
            stalled = None if stall is None or stall_end is None else stall_end - stall
            waited = None if wait is None or wait_end is None else wait_end - wait
            done.append(Round(scenario, samples, seconds, stalled, waited))
            first += calls
            log(f"  {scenario} round {r + 1}/{rounds} done, {time.perf_counter() - started:.0f} s")
    return done, writers


# -- the numbers -------------------------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    """A value over all rounds pooled, and the lowest and highest of the same value within each round."""

    value: float
    low: float
    high: float


@dataclass(frozen=True)
class Row:
    """One command on one disk: µs."""

    command: str
    calls: int  # per path
    p50: dict[str, Spread]  # path -> p50
    p99: dict[str, float]
    added: dict[str, Spread]  # path -> its p50 minus the direct p50
    ratio: dict[str, float]  # path -> its p50 over the direct p50

    @property
    def met(self) -> bool:
        return self.added[STDIO].value < TARGET


def row(rounds: Sequence[Round], command: str) -> Row:
    per_path = {p: [r.samples[command][p] for r in rounds] for p in PATHS}
    pooled = {p: [s * 1e6 for samples in per_path[p] for s in samples] for p in PATHS}
    medians = {p: [statistics.median(samples) * 1e6 for samples in per_path[p]] for p in PATHS}
    p50 = {p: Spread(statistics.median(pooled[p]), min(medians[p]), max(medians[p])) for p in PATHS}
    added = {}
    for p in (STDIO, HTTP, CONTROL):
        base = BASELINE[p]
        within = [m - d for m, d in zip(medians[p], medians[base], strict=True)]
        added[p] = Spread(p50[p].value - p50[base].value, min(within), max(within))
    return Row(
        command,
        len(pooled[DIRECT]),
        p50,
        {p: percentile(pooled[p], 99) for p in PATHS},
        added,
        {p: p50[p].value / p50[BASELINE[p]].value for p in (STDIO, HTTP, CONTROL)},
    )


@dataclass(frozen=True)
class Floor:
    """MCP ``ping`` on one disk, µs: path -> p50 (with the rounds' own), path -> p99."""

    calls: int
    p50: dict[str, Spread]
    p99: dict[str, float]


def floor(rounds: Sequence[Round]) -> Floor:
    p50, p99 = {}, {}
    for p in (STDIO, HTTP):
        per_round = [[s * 1e6 for s in r.samples[PING][p]] for r in rounds]
        pooled = [s for samples in per_round for s in samples]
        medians = [statistics.median(samples) for samples in per_round]
        p50[p] = Spread(statistics.median(pooled), min(medians), max(medians))
        p99[p] = percentile(pooled, 99)
    return Floor(len(pooled), p50, p99)


@dataclass(frozen=True)
class Disk:
    """One scenario's rows, and how much the machine held its tasks up meanwhile."""

    scenario: str
    rows: list[Row]
    ping: Floor
    rounds: int
    seconds: float
    stall_share: float | None
    cpu_share: float | None

    @property
    def met(self) -> bool:
        return all(r.met for r in self.rows)


def disk(rounds: Sequence[Round], scenario: str) -> Disk:
    mine = [r for r in rounds if r.scenario == scenario]
    seconds = sum(r.seconds for r in mine)

    def share(values: list[float | None]) -> float | None:
        return None if any(v is None for v in values) else sum(v or 0.0 for v in values) / seconds

    return Disk(
        scenario,
        [row(mine, command) for command in COMMANDS],
        floor(mine),
        len(mine),
        seconds,
        share([r.stalled for r in mine]),
        share([r.waited for r in mine]),
    )


@dataclass
class Results:
    argv: list[str]
    rounds: int
    calls: int
    warmup: int
    files: int
    busy: tuple[float, tuple[float, float], float]
    machine: list[tuple[str, str]]
    started: datetime
    pressure: str | None
    cpu_pressure: str | None
    load: str
    disks: list[Disk] = field(default_factory=list)
    writers: list[BusyReport] = field(default_factory=list)
    protocol: dict[str, str] = field(default_factory=dict)  # path -> the protocol version it negotiated
    seconds: float = 0.0
    topology: str = PROCESSES
    block: int = 10


# -- the page ----------------------------------------------------------------------------


def us(value: float) -> str:
    return f"{value:,.0f}"


def spread(value: Spread, many: bool) -> str:
    return us(value.value) + (f" ({us(value.low)} to {us(value.high)})" if many else "")


def render(results: Results) -> str:
    many = results.rounds > 1
    rate, chunk, cap = results.busy
    lines = [
        "# MCP speed",
        "",
        f"Written by `{' '.join(['python bench/mcp_speed.py', *results.argv])}` (see its docstring for the method);",
        "run it from the project root to measure again.",
        "",
        "## Machine",
        "",
        "|  |  |",
        "|---|---|",
        *(f"| {name} | {value} |" for name, value in results.machine),
        f"| date | {results.started:%Y-%m-%d %H:%M} UTC |",
        f"| I/O pressure (`some avg10`) | {results.pressure or 'not reported'} at the start |",
        f"| CPU pressure (`some avg10`) | {results.cpu_pressure or 'not reported'} at the start |",
        f"| load average | {results.load} at the start (1, 5, 15 min) |",
        "| run length | {} min {} s |".format(*divmod(round(results.seconds), 60)),
    ]
    if results.writers:
        achieved = statistics.median(w.achieved for w in results.writers)
        lines.append(
            f"| busy disk | another process appending {chunk[0]:g}-{chunk[1]:g} MB chunks (file capped at {cap:g} MB) "
            f"and fsyncing each, {rate:g} MB/s asked; achieved {achieved:.1f} MB/s (median of "
            f"{len(results.writers)} busy rounds) |"
        )
    lines += ["", "## Targets", "", "| target | measured | result |", "|---|---|---|"]
    for found in results.disks:
        most = max(found.rows, key=lambda r: r.added[STDIO].value)
        least = min(found.rows, key=lambda r: r.added[STDIO].value)
        lines.append(
            f"| stdio adds under 1 ms at p50, each of the six commands, {found.scenario} disk "
            f"| {us(least.added[STDIO].value)} µs ({least.command}) to {us(most.added[STDIO].value)} µs "
            f"({most.command}), {found.rows[0].calls:,} calls of each | {'met' if found.met else '**missed**'} |"
        )
    protocols = ", ".join(f"{path} {version}" for path, version in results.protocol.items())
    lines += [
        "",
        "## Round trips",
        "",
        f"Each command through the three paths on vaults of {results.files:,} files: `VaultMemoryTool.call` in",
        (
            "a process of its own, timed there (direct), the official MCP client in the benchmark's process, with no"
            " vault beside it, to a `vaultmem mcp` subprocess over"
            if results.topology == PROCESSES
            else "the benchmark's process (direct), the official MCP client to a `vaultmem mcp` subprocess over"
        ),
        f"stdio, and to a `vaultmem mcp --http` subprocess over streamable HTTP on 127.0.0.1 (protocol {protocols}),",
        (
            "call by call, the first path rotating."
            if results.block == 1
            else f"in runs of {results.block} calls on each path, the first path rotating from run to run (a path's"
            " work after its writes falls on its own next calls, not on another path's)."
        ),
        "Each transport has a phase of its own, with a direct call and a",
        "control call on vaults of its own: the other server's work after its writes stays out of its calls",
        f"(HTTP adds is measured against the HTTP phase's direct p50). {results.rounds} round(s) x",
        f"{results.calls} calls per command, phase and disk after {results.warmup} warm-up calls, quiet and busy",
        "rounds alternating. µs; \"adds\" is the path's p50 minus its phase's direct p50, and in brackets the lowest",
        "and highest of the rounds' own values.",
    ]
    for found in results.disks:
        lines += [
            "",
            f"### {found.scenario.capitalize()} disk",
            "",
            "| command | direct p50 | direct p99 | stdio p50 | stdio p99 | stdio adds | stdio / direct "
            "| HTTP p50 | HTTP p99 | HTTP adds | HTTP / direct | stdio under 1 ms |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in found.rows:
            lines.append(
                f"| {r.command} | {us(r.p50[DIRECT].value)} | {us(r.p99[DIRECT])} | {us(r.p50[STDIO].value)} "
                f"| {us(r.p99[STDIO])} | {spread(r.added[STDIO], many)} | {r.ratio[STDIO]:.2f} "
                f"| {us(r.p50[HTTP].value)} | {us(r.p99[HTTP])} | {spread(r.added[HTTP], many)} "
                f"| {r.ratio[HTTP]:.2f} | {'met' if r.met else '**missed**'} |"
            )
    lines += [
        "",
        "## The protocol's own round trip",
        "",
        "In the same rounds, before each round's calls, MCP `ping` requests on the two MCP paths",
        "(alternating): a request and its empty result through the transport and the SDK on both ends,",
        "with no tool and no vault. What a call adds beyond this is the server's handling of a tool call",
        "(the SDK's dispatch, then the memory command: in the event loop's own thread over stdio, in a",
        "worker thread over HTTP) and the result's way back. µs.",
        "",
        "| disk | pings a path | stdio p50 | stdio p99 | HTTP p50 | HTTP p99 |",
        "|---|---|---|---|---|---|",
    ]
    for found in results.disks:
        ping = found.ping
        lines.append(
            f"| {found.scenario} | {ping.calls:,} | {spread(ping.p50[STDIO], many)} | {us(ping.p99[STDIO])} "
            f"| {spread(ping.p50[HTTP], many)} | {us(ping.p99[HTTP])} |"
        )
    lines += [
        "",
        "## The machine's noise",
        "",
        "In the stdio phase's calls, a third path: `VaultMemoryTool.call` again, on another vault built alike",
        "(control). Its p50 minus the direct p50 is the difference this machine shows between two",
        "identical calls: an added latency inside it is not measurable here. µs, with the rounds' own",
        "values in brackets.",
        "",
        "| command | "
        + " | ".join(f"{d.scenario}: control p50 | {d.scenario}: control minus direct" for d in results.disks)
        + " |",
        "|---|" + "---|---|" * len(results.disks),
    ]
    for n, command in enumerate(COMMANDS):
        cells = []
        for found in results.disks:
            r = found.rows[n]
            cells += [us(r.p50[CONTROL].value), spread(r.added[CONTROL], many)]
        lines.append(f"| {command} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "The share of each disk's rounds' time in which some task waited for I/O, or for a CPU",
        "(/proc/pressure): the client, the two servers and the busy writer share the machine's CPUs, and",
        "what a server still does after it answered can delay the next call, on any path.",
        "",
        "| disk | rounds | seconds | some task waited for I/O | for a CPU |",
        "|---|---|---|---|---|",
    ]
    for found in results.disks:
        io = "not reported" if found.stall_share is None else f"{found.stall_share:.0%}"
        cpu = "not reported" if found.cpu_share is None else f"{found.cpu_share:.0%}"
        lines.append(f"| {found.scenario} | {found.rounds} | {found.seconds:.0f} | {io} | {cpu} |")
    lines.append("")
    return "\n".join(lines)


# -- the run -----------------------------------------------------------------------------


def build(work: Path, name: str, key: str, source: Path, files: int) -> Path:
    path = work / f"{name}.vault"
    with Vault.init(path, key=key) as vault:
        imported = vault.import_folder(source, actor="bench", session="build")
    if imported.files != files:
        raise BenchError(f"importing {source} recorded {imported.files} files, expected {files}")
    return path


def check_attribution(path: Path, key: str, expected: int, client: str) -> None:
    """The served vault holds as many versions as the direct one, each
    written by the server's actor in one MCP session of this client."""
    with Vault.open(path, key=key) as vault:
        versions = [v for v in vault.history() if v.command != "import"]
    sessions = {v.session for v in versions}
    actors = {v.actor for v in versions}
    if len(versions) != expected or actors != {ACTOR} or len(sessions) != 1:
        raise BenchError(f"{path.name}: {len(versions)} versions by {actors} in sessions {sessions}")
    [session] = sessions
    if not (session or "").startswith(f"mcp-{client}-"):
        raise BenchError(f"{path.name}: session {session!r}, expected mcp-{client}-...")


async def measure(args: argparse.Namespace, work: Path) -> Results:
    rate, chunk, cap = BUSY_QUICK if args.quick else BUSY_FULL
    described = machine(work)
    described.insert(-1, ("mcp", importlib.metadata.version("mcp")))
    described.append(("processes", TOPOLOGY[args.topology]))
    results = Results(
        args.argv,
        args.rounds,
        args.calls,
        args.warmup,
        args.files,
        (rate, chunk, cap),
        described,
        datetime.now(timezone.utc),
        io_pressure(),
        cpu_pressure(),
        ", ".join(f"{load:.2f}" for load in os.getloadavg()),
        topology=args.topology,
        block=args.block,
    )
    clock = time.perf_counter()
    key = generate_key()
    source = work / "source"
    write_memory_folder(source, args.files)
    log(f"six vaults of {args.files:,} files")
    vaults = {name: build(work, name, key, source, args.files) for name in "ABCDEF"}
    os.sync()
    with contextlib.ExitStack() as stack:
        errlog = stack.enter_context(open(work / "servers.log", "w", encoding="utf-8"))
        local: dict[str, Direct | Worker] = {}
        for name, letter in ((DIRECT, "A"), (CONTROL, "D"), (DIRECT_H, "E"), (CONTROL_H, "F")):
            if args.topology == ONE_PROCESS:
                local[name] = Direct(name, stack.enter_context(Vault.open(vaults[letter], key=key)))
            else:
                worker = local[name] = Worker(name, vaults[letter], key, errlog)
                stack.callback(worker.close)
        direct, control, direct_h, control_h = (local[name] for name in (DIRECT, CONTROL, DIRECT_H, CONTROL_H))
        url, token = stack.enter_context(http_server(vaults["C"], key, errlog))
        async with contextlib.AsyncExitStack() as sessions:
            stdio = Remote(STDIO, await sessions.enter_async_context(stdio_session(vaults["B"], key, errlog)))
            http = Remote(HTTP, await sessions.enter_async_context(http_session(url, token)))
            for remote in (stdio, http):
                negotiated = remote.session.initialize_result
                results.protocol[remote.name] = negotiated.protocol_version if negotiated is not None else "?"
            log(
                f"timing: a warm-up round, {args.rounds} quiet and {args.rounds} busy rounds x {args.calls} calls "
                f"of each command on each path"
            )
            rounds, results.writers = await all_rounds(
                ((direct, stdio, control), (direct_h, http, control_h)),
                args.rounds,
                args.calls,
                args.warmup,
                args.files,
                lambda: BusyDisk(work, rate, chunk, cap, BUSY_SECONDS),
                args.block,
            )
        if isinstance(direct, Worker):
            expected = direct.versions()
        else:
            expected = sum(1 for v in direct.vault.history() if v.command != "import")
    for name in ("B", "C"):
        check_attribution(vaults[name], key, expected, CLIENT.name)
    results.disks = [disk(rounds, scenario) for scenario in (QUIET, BUSY)]
    for found in results.disks:
        for r in found.rows:
            log(
                f"{found.scenario} {r.command}: direct {us(r.p50[DIRECT].value)} µs, stdio adds "
                f"{us(r.added[STDIO].value)} µs ({r.ratio[STDIO]:.2f}x), HTTP adds {us(r.added[HTTP].value)} µs "
                f"({r.ratio[HTTP]:.2f}x), control {us(r.added[CONTROL].value)} µs"
            )
    results.seconds = time.perf_counter() - clock
    return results


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python bench/mcp_speed.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="docs", help="folder for mcp-speed.md (default: docs)")
    parser.add_argument("--quick", action="store_true", help="small sizes, one round: a smoke run (under 30 s)")
    parser.add_argument("--rounds", type=positive, help="rounds per disk, quiet and busy (default 5; quick 1)")
    parser.add_argument("--calls", type=positive, help="calls of each command per round (default 100; quick 10)")
    parser.add_argument("--files", type=positive, help="files in each vault (default 1,000; quick 50)")
    parser.add_argument("--warmup", type=positive, help="calls of each command before the rounds (default 20)")
    parser.add_argument("--work", help="where to build the vaults (default: a temporary folder)")
    parser.add_argument("--block", type=positive, help="calls in a row on each path (default 10; 1: call by call)")
    parser.add_argument(
        "--topology",
        choices=(PROCESSES, ONE_PROCESS),
        default=PROCESSES,
        help="processes (default): each direct and control path in a process of its own, the MCP clients in this "
        "one, as users run them; one: the direct and control tools in this process, beside the MCP clients",
    )
    args = parser.parse_args(argv)
    if args.block is None:
        args.block = 10
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    with contextlib.ExitStack() as stack:
        if args.work is not None:
            base = Path(args.work).resolve()
            base.mkdir(parents=True, exist_ok=True)
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vaultmem-mcp-", dir=base)))
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vaultmem-mcp-bench-")))
        try:
            results = asyncio.run(measure(args, work))
        except BaseException:
            servers = work / "servers.log"
            if servers.exists() and servers.read_text(encoding="utf-8").strip():
                print(f"the servers' log:\n{servers.read_text(encoding='utf-8')[-4000:]}", file=sys.stderr)
            raise
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    page = out / "mcp-speed.md"
    page.write_text(render(results), encoding="utf-8")
    for found in results.disks:
        log(
            f"{found.scenario} disk: stdio adds under 1 ms at p50 for every command: {'met' if found.met else 'missed'}"
        )
    log(f"wrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
