"""What erasure costs: how fast `find` scans a history (the first step of an
erasure request), what per-version keys cost the write path, and how long
`forget` takes on a long history.

    python bench/erasure.py [--runs 5] [--out docs]    # writes docs/erasure-speed.md
    python bench/erasure.py --quick --out /tmp/x        # small and one run: for the tests

**find.**
A vault gets VERSIONS versions, each writing a new 10 KB version of one of 100
files (so every version is a file version `find` must decrypt and search);
then `vault.find` looks for a text that is nowhere, which makes it read
everything.  The rate is the plaintext scanned (VERSIONS x 10 KB) over the
wall time (time.perf_counter), the median of ``--runs`` runs with the spread
beside it, on a quiet disk and on a busy one (another process appending 1-4 MB
chunks and fsyncing each, 64 MB/s asked, as in benchmarks.md), in one run.
Target (issue 17): at least 20 MB/s.

**The write path.** Two vaults, one in storage format 1 (data keys shared by
many versions) and one in format 2 (a key per version, derived from the
epoch's key tree), each written by a ``VaultMemoryTool``; each round makes one
``create`` on each, in alternating order, and the result is the median of the
per-round ratios (format 2 over format 1) and each side's p50, quiet and busy,
in one run.  Target: at most 1.10.  A third vault, format 2 with sealed names
(every path segment stored as a keyed token), is written in the same rounds:
its ratio over plain format 2 is what sealing names costs a write (target:
at most 1.10 too).  Each call creates ``/memories/customers/cN.md``, so two
segments are sealed per call.

**forget.** A vault of ``--commits`` commits (100,000 by default; built once,
through ``Vault.mutate``), in which one customer's file was written 20 times
spread over the history; ``vault.forget`` of that path, wall time, including
its commit, the keyring replaced and the old one removed from the disk.
Target: under 10 s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from busy import BusyDisk  # noqa: E402

from vaultmem import VaultMemoryTool, generate_key  # noqa: E402
from vaultmem.core import paths  # noqa: E402
from vaultmem.repo.store import Change  # noqa: E402
from vaultmem.vault import Vault  # noqa: E402

FILE_BYTES = 10_240
TARGET = 20.0  # MB/s


def build(folder: Path, versions: int, key: str) -> Path:
    path = folder / "history.vault"
    with Vault.init(path, key=key) as vault:
        for n in range(versions):
            line = f"version {n} of a customer note, nothing personal in it. "
            text = (line * (FILE_BYTES // len(line) + 1))[: FILE_BYTES - 1] + "\n"
            target = paths.parse(f"/memories/notes/{n % 100}.md")
            change = Change("create", (target,)).write(target, text.encode())
            vault.mutate(lambda snap, change=change: change, actor="bench", session="build")
    return path


def scan(path: Path, key: str) -> tuple[float, int]:
    """(seconds, plaintext bytes scanned) of one find that matches nothing."""
    with Vault.open(path, key=key) as vault:
        start = time.perf_counter()
        found = vault.find("a text that is nowhere in this vault")
        seconds = time.perf_counter() - start
        assert found == []
        scanned = sum(1 for _ in vault.history()) * FILE_BYTES
    return seconds, scanned


WRITE_TARGET = 1.10
FORGET_TARGET = 10.0  # seconds


SEALED = 3  # the third vault of write_cost: format 2 with sealed names
ORDERS = ((1, 2, SEALED), (2, SEALED, 1), (SEALED, 1, 2))


def write_cost(folder: Path, key: str, calls: int) -> tuple[float, float, float, float, float]:
    """(median per-round ratio format 2 / format 1, p50 format 1 µs, p50 format 2 µs,
    median per-round ratio sealed names / format 2, p50 sealed names µs)."""
    tools = {}
    for kind in (1, 2, SEALED):
        fmt = 1 if kind == 1 else 2
        vault = Vault.init(folder / f"v{kind}.vault", key=key, storage_format=fmt, sealed_names=kind == SEALED)
        tools[kind] = VaultMemoryTool(vault, actor="bench", session="write")
    times: dict[int, list[float]] = {1: [], 2: [], SEALED: []}
    text = "A customer note of a few lines, the size of a real memory file.\n" * 8
    for n in range(calls):
        for kind in ORDERS[n % 3]:
            start = time.perf_counter()
            tools[kind].call({"command": "create", "path": f"/memories/customers/c{n}.md", "file_text": text})
            times[kind].append(time.perf_counter() - start)
    for tool in tools.values():
        tool.vault.close()
    ratios = [b / a for a, b in zip(times[1], times[2], strict=True)]
    sealed = [c / b for b, c in zip(times[2], times[SEALED], strict=True)]
    return (
        statistics.median(ratios),
        statistics.median(times[1]) * 1e6,
        statistics.median(times[2]) * 1e6,
        statistics.median(sealed),
        statistics.median(times[SEALED]) * 1e6,
    )


def build_long(folder: Path, commits: int, key: str) -> Path:
    """A vault of ``commits`` commits; /memories/customers/ada.md is written 20 times along it."""
    path = folder / "long.vault"
    every = max(1, commits // 20)
    with Vault.init(path, key=key) as vault:
        for n in range(commits):
            if n % every == 0:
                target = paths.parse("/memories/customers/ada.md")
                text = f"ada.lovelace@example.com, note {n}\n"
            else:
                target = paths.parse(f"/memories/notes/{n % 500}.md")
                text = f"note {n}\n"
            change = Change("create", (target,)).write(target, text.encode())
            vault.mutate(lambda snap, change=change: change, actor="bench", session="build")
            if commits >= 10_000 and n % 10_000 == 0:
                print(f"  building: {n:,} / {commits:,} commits", flush=True)
    return path


def forget_time(path: Path, key: str) -> tuple[float, int]:
    with Vault.open(path, key=key) as vault:
        start = time.perf_counter()
        result = vault.forget("/memories/customers/ada.md", reason="bench")
        return time.perf_counter() - start, len(result.versions)


def ratio_row(disk: str, runs: list[tuple[float, ...]], ratio: int, before: int, after: int) -> str:
    """One table row: the median ratio (field ``ratio`` of each run) with its
    spread, both sides' p50 (fields ``before`` and ``after``), the verdict."""
    ratios = [run[ratio] for run in runs]
    middle = statistics.median(ratios)
    spread = f" ({min(ratios):.2f}-{max(ratios):.2f})" if len(runs) > 1 else ""
    verdict = "met" if middle <= WRITE_TARGET else "missed"
    one, two = statistics.median(run[before] for run in runs), statistics.median(run[after] for run in runs)
    return f"| {disk} | {middle:.2f}{spread} | {one:,.0f} | {two:,.0f} | at most {WRITE_TARGET:.2f} | {verdict} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="runs of each case (default 5)")
    parser.add_argument("--quick", action="store_true", help="200 versions, one run, quiet only: for the tests")
    parser.add_argument("--out", default="docs", help="folder for erasure-speed.md (default: docs)")
    parser.add_argument("--commits", type=int, default=100_000, help="history of the forget case (default 100,000)")
    parser.add_argument("--calls", type=int, default=400, help="create calls on each vault (default 400)")
    args = parser.parse_args()
    key = generate_key()
    versions = 200 if args.quick else 4_000
    runs = 1 if args.quick else args.runs
    disks = ("quiet",) if args.quick else ("quiet", "busy")
    commits = 400 if args.quick else args.commits
    calls = 40 if args.quick else args.calls
    rates: dict[str, list[float]] = {}
    writes: dict[str, list[tuple[float, float, float, float, float]]] = {}
    forgets: list[tuple[float, int]] = []
    with tempfile.TemporaryDirectory(prefix="vaultmem-erasure-bench-") as tmp:
        vault = build(Path(tmp), versions, key)
        long = build_long(Path(tmp), commits, key)
        for disk in disks:
            with contextlib.ExitStack() as stack:
                if disk == "busy":
                    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vaultmem-busy-")))
                    stack.enter_context(BusyDisk(folder, rate=64, chunk=(1, 4)))
                rates[disk] = []
                writes[disk] = []
                for run in range(runs):
                    seconds, scanned = scan(vault, key)
                    rates[disk].append(scanned / seconds / 1e6)
                    place = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"vaultmem-write-{run}-")))
                    writes[disk].append(write_cost(place, key, calls))
            ratio = statistics.median(w[0] for w in writes[disk])
            sealing = statistics.median(w[3] for w in writes[disk])
            print(
                f"{disk} disk: find scans {statistics.median(rates[disk]):.1f} MB/s; writes {ratio:.2f}x; "
                f"sealed names {sealing:.2f}x",
                flush=True,
            )
        for run in range(runs):
            copy = Path(tmp) / f"forget-{run}.vault"
            shutil.copytree(long, copy)
            forgets.append(forget_time(copy, key))
            shutil.rmtree(copy)
        print(f"forget across {commits:,} commits: {statistics.median(f[0] for f in forgets):.2f} s", flush=True)
    megabytes = versions * FILE_BYTES / 1e6
    lines = [
        "# Erasure speed",
        "",
        "Written by `python bench/erasure.py` (see its docstring for the method): the median of",
        f"{runs} run(s), with the spread (min-max) beside it, on a {os.cpu_count()}-core machine.",
        "",
        "## find",
        "",
        f"`vault.find` over a history of {versions:,} versions, each a new 10 KB version of one of 100 files",
        f"({megabytes:,.1f} MB of plaintext to decrypt and search), looking for a text that is nowhere.",
        "",
        "| disk | MB/s of plaintext | target | verdict |",
        "|---|---|---|---|",
    ]
    for disk in disks:
        got = rates[disk]
        spread = f" ({min(got):.1f}-{max(got):.1f})" if len(got) > 1 else ""
        verdict = "met" if statistics.median(got) >= TARGET else "missed"
        lines.append(f"| {disk} | {statistics.median(got):.1f}{spread} | at least {TARGET:.0f} | {verdict} |")
    lines += [
        "",
        "## The write path with per-version keys",
        "",
        f"`create` through `VaultMemoryTool`, {calls} calls on each of the vaults (storage format 1 and 2),",
        "in rotating order; the median of the per-call ratios, and each side's p50.",
        "",
        "| disk | format 2 / format 1 | p50 format 1 (µs) | p50 format 2 (µs) | target | verdict |",
        "|---|---|---|---|---|---|",
    ]
    lines += [ratio_row(disk, writes[disk], ratio=0, before=1, after=2) for disk in disks]
    lines += [
        "",
        "## The write path with sealed names",
        "",
        f"The same rounds, a third vault: format 2 with sealed names ({calls} calls, two segments sealed",
        "each); the median of the per-call ratios over plain format 2, and its p50.",
        "",
        "| disk | sealed / plain names | p50 plain (µs) | p50 sealed (µs) | target | verdict |",
        "|---|---|---|---|---|---|",
    ]
    lines += [ratio_row(disk, writes[disk], ratio=3, before=2, after=4) for disk in disks]
    seconds = [f[0] for f in forgets]
    spread = f" ({min(seconds):.2f}-{max(seconds):.2f})" if len(seconds) > 1 else ""
    verdict = "met" if statistics.median(seconds) < FORGET_TARGET else "missed"
    lines += [
        "",
        "## forget",
        "",
        f"`vault.forget` of one path written {forgets[0][1]} times along a history of {commits:,} commits",
        "(its commit, the keyring replaced, the old keyring removed from the disk), quiet disk.",
        "",
        "| commits | seconds | target | verdict |",
        "|---|---|---|---|",
        f"| {commits:,} | {statistics.median(seconds):.2f}{spread} | under {FORGET_TARGET:.0f} | {verdict} |",
        "",
    ]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "erasure-speed.md").write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    main()
