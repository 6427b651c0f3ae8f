"""Timing: interleaved per-command sweeps, whole-history operations, opening
a vault, and peak memory, with the statistics the report quotes."""

from __future__ import annotations

import argparse
import math
import os
import resource
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backends import BODY, BenchError, ToolProcess, folder_path, memory_path
from busy import BusyDisk, BusyReport
from machine import io_stall

from vaultmem import Vault, VaultMemoryTool
from vaultmem.cli.progress import ProgressBar

# The table's order; RUN_ORDER is the order within a round (a file is
# created, then renamed, then deleted).
COMMANDS = ("view file", "view dir", "create", "str_replace", "insert", "delete", "rename")
RUN_ORDER = ("view file", "view dir", "create", "str_replace", "insert", "rename", "delete")
MUTATING = ("create", "str_replace", "insert", "rename", "delete")
CUT = "[Listing cut at"
Log = Callable[[str], None]


# -- statistics --------------------------------------------------------------


def positive(text: str) -> int:
    """A command-line count: a whole number of at least 1 (``10_000`` and ``10,000`` too)."""
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from err
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {text!r}")
    return value


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile: the smallest sample with at least
    ``q`` per cent of the samples at or below it (always a measured value)."""
    if not values:
        raise ValueError("percentile of no samples")
    if not 0 < q <= 100:
        raise ValueError("q must be in (0, 100]")
    ordered = sorted(values)
    rank = math.ceil(round(q * len(ordered) / 100, 9))
    return ordered[max(rank, 1) - 1]


@dataclass(frozen=True)
class Summary:
    """One backend's samples of one command, in seconds: median, p99 and mean
    of all rounds pooled, and the lowest and highest of the rounds' medians."""

    median: float
    p99: float
    mean: float
    round_low: float
    round_high: float
    count: int


def summarize(rounds: Sequence[Sequence[float]]) -> Summary:
    pooled = [s for samples in rounds for s in samples]
    medians = [statistics.median(samples) for samples in rounds if samples]
    return Summary(
        statistics.median(pooled),
        percentile(pooled, 99),
        statistics.fmean(pooled),
        min(medians),
        max(medians),
        len(pooled),
    )


# -- the command sweep ---------------------------------------------------------


@dataclass(frozen=True)
class Call:
    params: dict[str, Any]
    expect: str  # the start of the command's success text


def make_call(command: str, tag: str, i: int, k: int, files: int) -> Call:
    """Call ``i`` of ``command`` in round ``tag``; ``k`` picks the existing
    file or folder it reads or edits.  Every call is valid in the round's order:
    create makes new{tag}/n{i}.txt, rename moves it to m{i}.txt, delete removes that."""
    path = memory_path(k % files)
    if command == "view file":
        return Call({"command": "view", "path": path}, f"Here's the content of {path} with line numbers:")
    if command == "view dir":
        folder = folder_path(k, files)
        return Call(
            {"command": "view", "path": folder}, f"Here're the files and directories up to 2 levels deep in {folder}"
        )
    if command == "create":
        new = f"/memories/new{tag}/n{i}.txt"
        return Call({"command": "create", "path": new, "file_text": BODY}, f"File created successfully at: {new}")
    if command == "str_replace":
        # "note 7" is unique in BODY, and each edit only lengthens it.
        return Call(
            {"command": "str_replace", "path": path, "old_str": "note 7", "new_str": "note 7+"},
            "The memory file has been edited.",
        )
    if command == "insert":
        params = {"command": "insert", "path": path, "insert_line": 3, "insert_text": "an inserted line"}
        return Call(params, f"The file {path} has been edited.")
    old, new = f"/memories/new{tag}/n{i}.txt", f"/memories/new{tag}/m{i}.txt"
    if command == "rename":
        return Call({"command": "rename", "old_path": old, "new_path": new}, f"Successfully renamed {old} to {new}")
    if command == "delete":
        return Call({"command": "delete", "path": new}, f"Successfully deleted {new}")
    raise ValueError(f"unknown command {command!r}")


QUIET, BUSY = "quiet", "busy"


@dataclass(frozen=True)
class Paired:
    """One backend against another on the same calls: the median of the
    per-call ratios (call ``i`` on one over call ``i`` on the other), the
    lowest and highest of the rounds' own medians of them, and the ratio of
    the two sides' p99s (each over all rounds pooled)."""

    median: float
    round_low: float
    round_high: float
    p99: float
    count: int


def paired(num: Sequence[Sequence[float]], den: Sequence[Sequence[float]]) -> Paired:
    """``num`` against ``den``, both lists of rounds of the same calls in the same order."""
    if [len(r) for r in num] != [len(r) for r in den]:
        raise ValueError("paired samples must be the same calls")
    per_round = [[a / b for a, b in zip(rn, rd, strict=True)] for rn, rd in zip(num, den, strict=True)]
    pooled = [r for ratios in per_round for r in ratios]
    medians = [statistics.median(ratios) for ratios in per_round if ratios]
    p99 = percentile([s for r in num for s in r], 99) / percentile([s for r in den for s in r], 99)
    return Paired(statistics.median(pooled), min(medians), max(medians), p99, len(pooled))


@dataclass(frozen=True)
class RoundDisk:
    """The disk during one recorded round: its wall time, and how long some
    task waited for I/O meanwhile (/proc/pressure/io, None where not reported)."""

    scenario: str
    seconds: float
    stalled: float | None


@dataclass
class Sweep:
    """Every timed call of one configuration: ``samples[scenario][command][backend]``
    is a list of rounds, each a list of seconds, call ``i`` of a round being
    the same call on every backend."""

    label: str
    files: int
    backends: list[str]
    scenarios: list[str]
    samples: dict[str, dict[str, dict[str, list[list[float]]]]] = field(default_factory=dict)
    mutations: int = 0  # commits each vault gained during the sweep
    cut: set[str] = field(default_factory=set)  # backends whose folder listings were cut at their view cap
    writers: list[BusyReport] = field(default_factory=list)  # the busy writer of each busy round
    disk: list[RoundDisk] = field(default_factory=list)

    def summary(self, command: str, backend: str, scenario: str = QUIET) -> Summary:
        return summarize(self.samples[scenario][command][backend])

    def median(self, command: str, backend: str, scenario: str = QUIET) -> float:
        return self.summary(command, backend, scenario).median

    def paired(self, command: str, backend: str, against: str, scenario: str = QUIET) -> Paired:
        """``backend`` against ``against`` on the same calls."""
        table = self.samples[scenario][command]
        return paired(table[backend], table[against])

    def calls(self, scenario: str = QUIET) -> int:
        """Recorded calls per command per backend in ``scenario``."""
        return sum(len(r) for r in self.samples[scenario][COMMANDS[0]][self.backends[0]])

    def stall_share(self, scenario: str) -> float | None:
        """The share of ``scenario``'s rounds' time in which some task waited for I/O."""
        rounds = [d for d in self.disk if d.scenario == scenario]
        if not rounds or any(d.stalled is None for d in rounds):
            return None
        return sum(d.stalled or 0.0 for d in rounds) / sum(d.seconds for d in rounds)


def timed_call(name: str, tool: Any, call: Call) -> tuple[float, str]:
    """One call's wall time; a failed call or an unexpected result stops the run."""
    if isinstance(tool, ToolProcess):  # timed in its own process, around the call alone
        elapsed, result = tool.timed(call.params)
    else:
        start = time.perf_counter()
        try:
            result = tool.call(call.params)
        except Exception as err:
            raise BenchError(f"{name}: {call.params} failed: {err}") from err
        elapsed = time.perf_counter() - start
    if not isinstance(result, str) or not result.startswith(call.expect):
        raise BenchError(f"{name}: {call.params} returned {result!r}, expected it to start with {call.expect!r}")
    return elapsed, result


def run_sweep(
    label: str,
    backends: Sequence[tuple[str, Any]],
    files: int,
    rounds: int,
    calls: int,
    warmup: int,
    log: Log,
    busy: Callable[[], BusyDisk] | None = None,
    calm: float = 0.0,
) -> Sweep:
    """``rounds`` rounds per scenario; in each, ``calls`` calls per command,
    each made on every backend in turn (in the order given), so a drift in
    the machine hits them all alike.  With ``busy`` (a factory of busy
    writers) quiet and busy rounds alternate, the busy ones measured while a
    writer from ``busy()`` runs; before a quiet round that follows a busy one
    the disk is synced and left ``calm`` seconds.  A warm-up round of
    ``warmup`` calls per command comes first, quiet and unrecorded."""
    scenarios = [QUIET] if busy is None else [QUIET, BUSY]
    sweep = Sweep(label, files, [name for name, _ in backends], scenarios)
    for scenario in scenarios:
        sweep.samples[scenario] = {command: {name: [] for name, _ in backends} for command in COMMANDS}
    started = time.perf_counter()
    plan = [("warm", QUIET, warmup, False)]
    plan += [(f"{scenario[0]}{r}", scenario, calls, True) for r in range(rounds) for scenario in scenarios]
    for number, (tag, scenario, count, recorded) in enumerate(plan):
        if scenario == QUIET and number > 0 and plan[number - 1][1] == BUSY:
            os.sync()
            time.sleep(calm)
        writer = busy() if scenario == BUSY and busy is not None else None
        with writer if writer is not None else nullcontext():
            clock, stall = time.perf_counter(), io_stall()
            taken = {
                command: run_round(sweep, backends, command, tag, count, (number - 1) * calls, files)
                for command in RUN_ORDER
            }
            stall_end, seconds = io_stall(), time.perf_counter() - clock
        if writer is not None and writer.report is not None:
            sweep.writers.append(writer.report)
        if recorded:
            stalled = None if stall is None or stall_end is None else stall_end - stall
            sweep.disk.append(RoundDisk(scenario, seconds, stalled))
            for command, by_backend in taken.items():
                for name, samples in by_backend.items():
                    sweep.samples[scenario][command][name].append(samples)
            done = sum(1 for entry in plan[1 : number + 1] if entry[1] == scenario)
            log(f"  {label}: {scenario} round {done}/{rounds} done, {time.perf_counter() - started:.0f} s")
        sweep.mutations += count * len(MUTATING)
    return sweep


def run_round(
    sweep: Sweep, backends: Sequence[tuple[str, Any]], command: str, tag: str, count: int, base: int, files: int
) -> dict[str, list[float]]:
    """``count`` calls of ``command``, each on every backend in turn; the
    ``i``-th edit or view goes to file ``base + i`` (modulo ``files``)."""
    taken: dict[str, list[float]] = {name: [] for name, _ in backends}
    for i in range(count):
        call = make_call(command, tag, i, max(base, 0) + i, files)
        for name, tool in backends:
            elapsed, result = timed_call(name, tool, call)
            taken[name].append(elapsed)
            if command == "view dir" and CUT in result:
                sweep.cut.add(name)
    return taken


# -- whole-history operations --------------------------------------------------


@dataclass(frozen=True)
class HistoryOps:
    """Whole-history operations on one vault (seconds; medians of ``repeats``)."""

    files: int
    commits: int
    repeats: int
    path: str
    history_path: float
    versions: int
    history_limit: float
    limited: int
    read_at: float
    old: str
    restore: float
    restored: str | None
    verify: float
    verify_ok: bool
    verify_commits: int
    verify_problems: tuple[str, ...]
    progress_calls: int


def median_time(run: Callable[[], object], repeats: int) -> tuple[float, object]:
    """The median wall time of ``repeats`` runs, and the last run's result."""
    times: list[float] = []
    result: object = None
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def history_ops(vault: Vault, files: int, commits: int, repeats: int, memory: PeakMemory) -> HistoryOps:
    path = memory_path(0)
    with memory.phase(f"history(path) at {commits:,} commits"):
        history_path, found = median_time(lambda: vault.history(path), repeats)
    versions = list(found) if isinstance(found, list) else []
    if not versions:
        raise BenchError(f"history({path}) found no versions")
    old = versions[-1].id  # the version that first created the file: the import
    history_limit, limited = median_time(lambda: vault.history(limit=20), repeats)
    read_at, text = median_time(lambda: vault.read(path, at=old), repeats)
    if not isinstance(text, str) or "note 3:" not in text:
        raise BenchError(f"read({path}, at={old}) returned {text!r}")
    start = time.perf_counter()
    restored = vault.restore(old, path=path, actor="bench")
    restore = time.perf_counter() - start
    if vault.read(path) != text:
        raise BenchError(f"restore({old}, path={path}) did not bring back the old text")
    progress_calls = 0

    with memory.phase(f"verify at {commits:,} commits"), ProgressBar("verify") as bar:

        def progress(done: int, total: int) -> None:
            nonlocal progress_calls
            progress_calls += 1
            bar(done, total)

        start = time.perf_counter()
        report = vault.verify(progress=progress)
        verify = time.perf_counter() - start
    return HistoryOps(
        files,
        commits,
        repeats,
        path,
        history_path,
        len(versions),
        history_limit,
        len(limited) if isinstance(limited, list) else 0,
        read_at,
        old,
        restore,
        restored.id if restored is not None else None,
        verify,
        report.ok,
        report.commits,
        tuple(report.problems),
        progress_calls,
    )


# -- opening -------------------------------------------------------------------


@dataclass(frozen=True)
class OpenTime:
    label: str
    files: int
    commits: int
    open: float  # median seconds of Vault.open (+ close)
    open_view: float  # median seconds of open + the first view of /memories (+ close)


def time_opens(label: str, path: Path, key: str, files: int, commits: int, repeats: int) -> OpenTime:
    def just_open() -> None:
        Vault.open(path, key=key).close()

    def open_and_view() -> None:
        vault = Vault.open(path, key=key)
        try:
            tool = VaultMemoryTool(vault, actor="bench", session="bench")
            result = tool.call({"command": "view", "path": "/memories"})
            if not result.startswith("Here're the files and directories up to 2 levels deep in /memories"):
                raise BenchError(f"view /memories of {path} returned {result[:200]!r}")
        finally:
            vault.close()

    opened, _ = median_time(just_open, repeats)
    viewed, _ = median_time(open_and_view, repeats)
    return OpenTime(label, files, commits, opened, viewed)


# -- peak memory ---------------------------------------------------------------


@dataclass(frozen=True)
class MemoryPhase:
    phase: str
    before_mb: float
    peak_mb: float


def _status_kb(field_name: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise OSError(f"{field_name} not in /proc/self/status")


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # resets VmHWM to the current RSS
        _status_kb("VmHWM")
        return True
    except OSError:
        return False


class PeakMemory:
    """Peak RSS per phase: Linux resets the peak (VmHWM) through
    /proc/self/clear_refs; elsewhere only the process's lifetime peak is known."""

    def __init__(self) -> None:
        self.per_phase = _reset_peak()
        self.phases: list[MemoryPhase] = []

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if not self.per_phase:
            yield
            return
        _reset_peak()
        before = _status_kb("VmRSS")
        yield
        self.phases.append(MemoryPhase(name, before / 1024, _status_kb("VmHWM") / 1024))

    def lifetime_peak_mb(self) -> float:
        """resource's ru_maxrss (KiB on Linux, bytes on macOS)."""
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / (1024 * 1024) if os.uname().sysname == "Darwin" else peak / 1024
