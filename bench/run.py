"""vaultmem against the SDK's filesystem memory tool, measured in one process.

    python bench/run.py                       # full run: rewrites docs/benchmarks.md and docs/benchmarks.png
    python bench/run.py --quick --out DIR     # tiny sizes, to check the benchmark: DIR/benchmarks.{md,png}

Run it from the project root on an otherwise quiet machine: the run makes the
disk busy itself, in its busy rounds (bench/busy.py).  The full run builds
vaults of up to 100,000 commits and takes about 13 minutes on a 2-CPU machine,
most of it building; --keep saves that the next time.  Vaults are built in a
work folder on the same disk (default: a temporary folder under the current
directory, removed at the end); --keep keeps the built vaults there, and a
later run with the same --work reuses each one after checking it.

What is measured, and how, is written out in the page this generates.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import plot
from backends import BenchError, BuiltVault, ToolProcess, VaultStore, build_vault, write_memory_folder
from busy import BusyDisk, BusyError, unpaced
from machine import io_pressure, machine
from measure import OpenTime, PeakMemory, Sweep, history_ops, positive, run_sweep, time_opens
from report import DURABLE, SDK, VAULT, BusySettings, Results, printed, render, vault_at

from vaultmem import Vault, VaultMemoryTool

PROJECT = Path(__file__).resolve().parent.parent
FULL: dict[str, Any] = {
    "sizes": [10, 1000, 10000],
    "histories": [100, 10000, 100000],
    "history_files": 1000,
    "rounds": 4,  # per scenario: 4 quiet and 4 busy rounds, alternating
    "calls": 100,  # 400 calls per command per scenario, enough for a p99 (the fifth slowest)
    "warmup": 10,
    "repeats": 5,
    "opens": 20,
    "settle": 30.0,
    "busy_rate": 64.0,  # MB/s
    "busy_chunk": (1.0, 4.0),  # MB
    "busy_cap": 64.0,  # MB
    "calm": 1.0,  # seconds
    "probe": 3.0,  # seconds of the writer unpaced, to see what the disk syncs
    "history_calls": 50,  # the history sweep: rounds x 50 calls per command, quiet only
}
QUICK: dict[str, Any] = {
    "sizes": [3, 10],
    "histories": [5, 30],
    "history_files": 10,
    "rounds": 2,
    "calls": 3,
    "warmup": 2,
    "repeats": 2,
    "opens": 3,
    "settle": 0.0,
    "busy_rate": 8.0,
    "busy_chunk": (0.25, 0.5),
    "busy_cap": 2.0,
    "calm": 0.0,
    "probe": 0.3,
    "history_calls": 3,
}
BUSY_SECONDS = 900.0  # no busy round lasts this long: a writer still running then stops by itself


def log(line: str) -> None:
    print(line, flush=True)


def counts(text: str) -> list[int]:
    """``"10,1000,10_000"`` -> ``[10, 1000, 10000]``: sorted, distinct, each at least 1."""
    try:
        values = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}") from err
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError(f"expected numbers of at least 1, got {text!r}")
    return values


def rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected a number of MB/s, got {text!r}") from err
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected more than 0 MB/s, got {text!r}")
    return value


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python bench/run.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="docs", help="folder for benchmarks.md and benchmarks.png (default: docs)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to check the benchmark (seconds)")
    parser.add_argument("--rounds", type=positive, help="rounds per scenario, quiet and busy (default 4; quick 2)")
    parser.add_argument("--calls", type=positive, help="calls per command per round (default 100; quick 3)")
    parser.add_argument(
        "--busy-rate", type=rate, help="MB/s the busy writer writes and syncs during busy rounds (default 64)"
    )
    parser.add_argument("--sizes", type=counts, help="memory sizes in files (default 10,1000,10000)")
    parser.add_argument(
        "--histories", type=counts, help="history lengths in commits, at least two (default 100,10000,100000)"
    )
    parser.add_argument("--history-files", type=positive, help="files in the history sweep's vaults (default 1000)")
    parser.add_argument(
        "--work", help="where to build vaults, on the same disk as the project (default: a temporary folder here)"
    )
    parser.add_argument("--keep", action="store_true", help="keep built vaults in --work for the next run to reuse")
    args = parser.parse_args(argv)
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    if len(args.histories) < 2:
        parser.error("--histories needs at least two lengths, to compare the longest with the shortest")
    return args


def settle(limit: float) -> None:
    """Let the build's writes reach the disk, then wait (up to ``limit``
    seconds) for I/O pressure to fall, so it does not land on the first timings."""
    os.sync()
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        pressure = io_pressure()
        if pressure is None or float(pressure) < 1.0:
            return
        log(f"waiting for the disk to settle (I/O pressure {pressure})")
        time.sleep(5)


class Bench:
    """One run: builds everything in ``run`` (a scratch folder), then measures."""

    def __init__(self, args: argparse.Namespace, run: Path, store: VaultStore | None) -> None:
        self.args = args
        self.run = run
        self.store = store
        self.memory = PeakMemory()
        self.sources: dict[int, Path] = {}
        self.processes: list[ToolProcess] = []

    def source(self, files: int) -> Path:
        """A pristine SDK folder of ``files`` files, never handed to a tool."""
        if files not in self.sources:
            self.sources[files] = self.run / f"source-f{files}"
            write_memory_folder(self.sources[files], files)
        return self.sources[files]

    def vault(self, role: str, files: int, commits: int) -> BuiltVault:
        dest = self.run / f"{role}-f{files}-h{commits}"
        log(f"vault for the {role} sweep: {files:,} files, {commits:,} commits")
        with self.memory.phase(f"building the {role} sweep's vault of {files:,} files, {commits:,} commits"):
            if self.store is not None:
                return self.store.obtain(self.source(files), files, commits, dest, log)
            return build_vault(dest, self.source(files), files, commits, log)

    def sdks(self, role: str, files: int) -> list[tuple[str, Any]]:
        """The SDK's tool and the durable SDK, in that order, each on its own
        copy and in a process of its own (bench/worker.py), as an application
        using the SDK runs it: vaultmem's background threads in this process
        never hold up their calls."""
        stock, durable = self.run / f"sdk-{role}-f{files}", self.run / f"durable-sdk-{role}-f{files}"
        write_memory_folder(stock, files)
        write_memory_folder(durable, files)
        made = [
            (SDK, ToolProcess(f"{SDK} ({role}, {files:,} files)", ["sdk", str(stock)])),
            (DURABLE, ToolProcess(f"{DURABLE} ({role}, {files:,} files)", ["durable-sdk", str(durable)])),
        ]
        self.processes += [tool for _, tool in made]
        return list(made)

    def close(self) -> None:
        """End the backends' processes."""
        for process in self.processes:
            process.close()

    def busy(self) -> BusyDisk:
        """A busy writer in the run's folder, on the disk the backends use."""
        a = self.args
        return BusyDisk(self.run, a.busy_rate, a.busy_chunk, a.busy_cap, BUSY_SECONDS)

    def sweep(self, label: str, backends: list[tuple[str, Any]], files: int, busy: bool) -> Sweep:
        a = self.args
        kind, calls = ("quiet and busy", a.calls) if busy else ("quiet", a.history_calls)
        log(f"timing {label}: {a.rounds} {kind} rounds x {calls} calls per command on {len(backends)} backends")
        with self.memory.phase(f"command sweep, {label}"):
            factory = self.busy if busy else None
            return run_sweep(label, backends, files, a.rounds, calls, a.warmup, log, factory, a.calm)

    def measure(self) -> Results:
        a = self.args
        started, clock = datetime.now(timezone.utc), time.perf_counter()
        pressure_start = io_pressure()
        shortest, longest = a.histories[0], a.histories[-1]
        by_size = {n: self.vault("size", n, shortest) for n in a.sizes}
        by_history = {h: self.vault("history", a.history_files, h) for h in a.histories}
        size_sdks = {n: self.sdks("size", n) for n in a.sizes}
        history_sdks = self.sdks("history", a.history_files)
        log(f"what the disk syncs: the busy writer unpaced for {a.probe:g} s")
        disk = unpaced(self.run, a.probe, a.busy_chunk, a.busy_cap)
        log(f"  {disk.achieved:,.0f} MB/s")
        settle(a.settle)
        pressure_measure = io_pressure()

        opens: list[OpenTime] = []
        with self.memory.phase("opening every vault"):
            for n, built in by_size.items():
                opens.append(time_opens(f"size sweep, {n:,} files", built.path, built.key, n, shortest, a.opens))
            for h, built in by_history.items():
                label = f"history sweep, {h:,} commits"
                opens.append(time_opens(label, built.path, built.key, a.history_files, h, a.opens))

        size_sweeps: list[Sweep] = []
        for n, built in by_size.items():
            with Vault.open(built.path, key=built.key) as vault:
                tool = VaultMemoryTool(vault, actor="bench", session="bench")
                size_sweeps.append(self.sweep(f"{n:,} files", [(VAULT, tool), *size_sdks[n]], n, busy=True))

        vaults = {h: Vault.open(built.path, key=built.key) for h, built in by_history.items()}
        try:
            tools = [(vault_at(h), VaultMemoryTool(v, actor="bench", session="bench")) for h, v in vaults.items()]
            history_sweep = self.sweep("history lengths", [*tools, *history_sdks], a.history_files, busy=False)
            log(f"whole-history operations at {longest:,} commits")
            ops = history_ops(vaults[longest], a.history_files, longest, a.repeats, self.memory)
        finally:
            for vault in vaults.values():
                vault.close()

        return Results(
            command_line=" ".join(["python bench/run.py", *map(shlex.quote, a.argv)]),
            quick=a.quick,
            rounds=a.rounds,
            calls=a.calls,
            warmup=a.warmup,
            repeats=a.repeats,
            open_repeats=a.opens,
            machine=machine(self.run),
            busy=BusySettings(a.busy_rate, a.busy_chunk, a.busy_cap, a.calm),
            disk=disk,
            history_calls=a.history_calls,
            pressure_start=pressure_start,
            pressure_measure=pressure_measure,
            started=started,
            seconds=time.perf_counter() - clock,
            size_sweeps=size_sweeps,
            size_history=shortest,
            history_sweep=history_sweep,
            histories=a.histories,
            ops=ops,
            opens=opens,
            memory=self.memory.phases,
            lifetime_peak_mb=None if self.memory.per_phase else self.memory.lifetime_peak_mb(),
        )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    plot.pyplot()  # no matplotlib: stop now, not after the measurements
    if args.work is not None:
        work, created = Path(args.work).resolve(), not Path(args.work).exists()
        work.mkdir(parents=True, exist_ok=True)
    else:
        work, created = Path(tempfile.mkdtemp(prefix=".bench-work-", dir=Path.cwd())), True
    if os.stat(work).st_dev != os.stat(PROJECT).st_dev:
        log(f"warning: {work} is not on the project's file system; its timings describe that disk instead")
    run = work / "run"
    shutil.rmtree(run, ignore_errors=True)  # left by an interrupted run
    run.mkdir()
    store = VaultStore(work / "vaults") if args.keep else None
    bench = Bench(args, run, store)
    try:
        results = bench.measure()
    except (BenchError, BusyError) as err:
        print(f"bench/run.py: {err}", file=sys.stderr)
        return 1
    finally:
        bench.close()
        shutil.rmtree(run, ignore_errors=True)
        if args.keep:
            log(f"built vaults kept in {work / 'vaults'}; reuse them with --work {work}")
        elif created:
            shutil.rmtree(work, ignore_errors=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    erasure = out / "erasure-speed.md"  # bench/erasure.py's page: its targets are repeated here
    erasure_page = erasure.read_text(encoding="utf-8") if erasure.exists() else None
    (out / "benchmarks.md").write_text(render(results, erasure_page), encoding="utf-8")
    plot.draw(results, out / "benchmarks.png")
    for line in printed(results):
        log(line)
    log(f"wrote {out / 'benchmarks.md'} and {out / 'benchmarks.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
