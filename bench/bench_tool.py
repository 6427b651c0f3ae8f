"""vaultmem vs the SDK's BetaLocalFilesystemMemoryTool, in one process.

    python bench/bench_tool.py [--files 1000] [--rounds 5] [--calls 100] [--history 100,10000]

Both backends are durable (the SDK fsyncs each file it writes; vaultmem makes
each commit durable before it returns).  Calls to the two are interleaved one
by one, so machine noise hits both alike; each round reports medians, and the
spread of the SDK's medians across rounds is printed as the noise figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from anthropic.tools import BetaLocalFilesystemMemoryTool

from vaultmem import Vault, VaultMemoryTool, generate_key

BODY = "".join(f"note {i}: the customer prefers e-mail follow-ups\n" for i in range(30))
Cmd = Callable[[int], dict[str, Any]]


def populate(tools: list[Any], files: int) -> None:
    for i in range(files):
        for tool in tools:
            tool.call({"command": "create", "path": f"/memories/d{i % 20}/f{i}.txt", "file_text": BODY})


def commands(files: int, tag: str) -> dict[str, Cmd]:
    return {
        "view file": lambda i: {"command": "view", "path": f"/memories/d{i % 20}/f{i % files}.txt"},
        "view dir": lambda i: {"command": "view", "path": f"/memories/d{i % 20}"},
        "create": lambda i: {"command": "create", "path": f"/memories/new{tag}/n{i}.txt", "file_text": BODY},
        "str_replace": lambda i: {
            "command": "str_replace",
            "path": f"/memories/d{i % 20}/f{i % files}.txt",
            "old_str": "note 7",  # stays unique: each edit only appends to it
            "new_str": "note 7+",
        },
        "insert": lambda i: {
            "command": "insert",
            "path": f"/memories/d{i % 20}/f{i % files}.txt",
            "insert_line": 3,
            "insert_text": "an inserted line",
        },
    }


def timed(tool: Any, cmd: dict[str, Any]) -> float:
    start = time.perf_counter()
    tool.call(cmd)
    return time.perf_counter() - start


def compare(sdk: Any, vm: Any, files: int, rounds: int, calls: int) -> dict[str, list[tuple[float, float]]]:
    results: dict[str, list[tuple[float, float]]] = {}
    for r in range(rounds):
        for name, make in commands(files, f"r{r}").items():
            a: list[float] = []
            b: list[float] = []
            for i in range(calls):
                cmd = make(i + r * calls)
                a.append(timed(sdk, cmd))
                b.append(timed(vm, cmd))
            results.setdefault(name, []).append((statistics.median(a), statistics.median(b)))
    return results


def report(results: dict[str, list[tuple[float, float]]]) -> None:
    print(f"{'command':12} {'SDK µs':>9} {'vaultmem µs':>12} {'ratio':>6}   SDK noise (min-max of round medians)")
    for name, rows in results.items():
        sdk = statistics.median(r[0] for r in rows) * 1e6
        vm = statistics.median(r[1] for r in rows) * 1e6
        lo, hi = min(r[0] for r in rows) * 1e6, max(r[0] for r in rows) * 1e6
        print(f"{name:12} {sdk:9.0f} {vm:12.0f} {vm / sdk:6.2f}   {lo:.0f}-{hi:.0f}")


def history_growth(lengths: list[int], calls: int) -> None:
    """Per-call cost of vaultmem at different history lengths (same memory size)."""
    print("\nper-call cost against history length (20-file memory)")
    with tempfile.TemporaryDirectory(dir=".") as tmp:
        vaults = []
        for n in lengths:
            vault = Vault.init(Path(tmp) / f"h{n}", key=generate_key())
            tool = VaultMemoryTool(vault, actor="bench", session="history")
            populate([tool], 20)
            for i in range(n - 20):
                tool.call(
                    {
                        "command": "str_replace",
                        "path": f"/memories/d{i % 20}/f{i % 20}.txt",
                        "old_str": "note 3:" if i < 20 else f"note 3 [{i - 20}]:",
                        "new_str": f"note 3 [{i}]:",
                    }
                )
            vaults.append(tool)
        os.sync()  # let the build's writes settle so they do not land on the first measurements
        rows: dict[str, list[float]] = {}
        for name, make in commands(20, "h").items():
            samples: list[list[float]] = [[] for _ in vaults]
            for i in range(calls):  # interleaved, so drift in the machine hits every length alike
                for k, tool in enumerate(vaults):
                    samples[k].append(timed(tool, make(i)))
            rows[name] = [statistics.median(s) * 1e6 for s in samples]
        print(f"{'command':12} " + " ".join(f"{n:>10} commits" for n in lengths) + "   ratio (longest/shortest)")
        for name, values in rows.items():
            print(f"{name:12} " + " ".join(f"{v:15.0f}µs" for v in values) + f"   {values[-1] / values[0]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--history", default="100,10000", help="comma-separated history lengths ('' to skip)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=".") as tmp:
        sdk = BetaLocalFilesystemMemoryTool(base_path=str(Path(tmp) / "sdk"))
        vault = Vault.init(Path(tmp) / "vault", key=generate_key())
        vm = VaultMemoryTool(vault, actor="bench", session="bench")
        populate([sdk, vm], args.files)
        print(f"{args.files}-file memory, {args.rounds} rounds x {args.calls} interleaved calls per command")
        report(compare(sdk, vm, args.files, args.rounds, args.calls))
    if args.history:
        history_growth([int(n) for n in args.history.split(",")], args.calls)


if __name__ == "__main__":
    main()
