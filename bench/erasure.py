"""How fast `find` scans a history: the first step of an erasure request.

    python bench/erasure.py [--runs 5] [--out docs]    # writes docs/erasure-speed.md
    python bench/erasure.py --quick --out /tmp/x        # a small history, one run: for the tests

A vault gets VERSIONS versions, each writing a new 10 KB version of one of 100
files (so every version is a file version `find` must decrypt and search);
then `vault.find` looks for a text that is nowhere, which makes it read
everything.  The rate is the plaintext scanned (VERSIONS x 10 KB) over the
wall time (time.perf_counter), the median of ``--runs`` runs with the spread
beside it, on a quiet disk and on a busy one (another process appending 1-4 MB
chunks and fsyncing each, 64 MB/s asked, as in benchmarks.md), in one run.
Target (issue 17): at least 20 MB/s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from busy import BusyDisk  # noqa: E402

from vaultmem import generate_key  # noqa: E402
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="runs of each case (default 5)")
    parser.add_argument("--quick", action="store_true", help="200 versions, one run, quiet only: for the tests")
    parser.add_argument("--out", default="docs", help="folder for erasure-speed.md (default: docs)")
    args = parser.parse_args()
    key = generate_key()
    versions = 200 if args.quick else 4_000
    runs = 1 if args.quick else args.runs
    disks = ("quiet",) if args.quick else ("quiet", "busy")
    rates: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="vaultmem-erasure-bench-") as tmp:
        vault = build(Path(tmp), versions, key)
        for disk in disks:
            with contextlib.ExitStack() as stack:
                if disk == "busy":
                    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vaultmem-busy-")))
                    stack.enter_context(BusyDisk(folder, rate=64, chunk=(1, 4)))
                rates[disk] = []
                for _ in range(runs):
                    seconds, scanned = scan(vault, key)
                    rates[disk].append(scanned / seconds / 1e6)
            print(f"{disk} disk: find scans {statistics.median(rates[disk]):.1f} MB/s", flush=True)
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
    lines.append("")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "erasure-speed.md").write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    main()
