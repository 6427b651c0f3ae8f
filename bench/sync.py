"""How long sharing takes: push and pull of 1 and of 1,000 new versions, a
merge of two histories that diverged by 100 versions each, and a tool call
with automatic sync on and off.

    python bench/sync.py [--runs 5] [--out docs]      # writes docs/sync-speed.md
    python bench/sync.py --quick --out /tmp/x          # 1 and 20 versions, one run: for the tests

For each transport (a bare repository over ``file://``, and smart HTTP: git's
own ``git http-backend`` behind a local HTTP server on 127.0.0.1 with basic
auth, as in the tests) and each size, a fresh server and two clones: one host
writes the versions, then its ``push`` is timed, then the other host's
``pull`` (which fetches, checks every incoming commit's seal and moves its
branch through the commit path).  Wall time with time.perf_counter, the median
of ``--runs`` runs, each on new folders; the machine's noise shows as the
spread (min-max) beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

from busy import BusyDisk  # noqa: E402
from githttp import git_http  # noqa: E402  (the tests' HTTP server: the same one they trust)

from vaultmem.ops.memory import MemoryCommands  # noqa: E402
from vaultmem.vault import Vault  # noqa: E402


@contextmanager
def file_server(folder: Path) -> Iterator[str]:
    yield (folder / "server.git").as_uri()


@contextmanager
def http_server(folder: Path) -> Iterator[str]:
    os.environ["VAULTMEM_GIT_USERNAME"], os.environ["VAULTMEM_GIT_PASSWORD"] = "bench", "bench-pw"
    with git_http(folder, "bench", "bench-pw") as (base, _):
        yield f"{base}/server.git"


TRANSPORTS: dict[str, Callable[[Path], AbstractContextManager[str]]] = {
    "file://": file_server,
    "http:// (basic auth)": http_server,
}


def one_run(transport: str, count: int, key: str) -> tuple[float, float]:
    """(push seconds, pull seconds) for ``count`` new versions."""
    with tempfile.TemporaryDirectory(prefix="vaultmem-sync-bench-") as tmp:
        folder = Path(tmp)
        subprocess.run(["git", "init", "-q", "--bare", str(folder / "server.git")], check=True)
        with TRANSPORTS[transport](folder) as url:
            writer = Vault.init(folder / "writer.vault", key=key)
            MemoryCommands(writer, actor="bench", session="base").run(
                {"command": "create", "path": "/memories/base.txt", "file_text": "base\n"}
            )
            writer.add_remote("origin", str(url))
            writer.push()
            reader = Vault.clone(str(url), folder / "reader.vault", key=key)
            tool = MemoryCommands(writer, actor="bench", session="burst")
            for n in range(count):
                tool.run({"command": "create", "path": f"/memories/burst/{n}.txt", "file_text": f"note {n}\n" * 5})
            start = time.perf_counter()
            writer.push()
            pushed = time.perf_counter() - start
            start = time.perf_counter()
            moved = reader.pull()
            pulled = time.perf_counter() - start
            assert "main" in moved.moved
            writer.close()
            reader.close()
    return pushed, pulled


def merge_run(count: int, key: str, order: bool) -> tuple[float, float, int, int]:
    """(seconds of a pull that merges, seconds of a pull that fast-forwards
    over as many versions, conflicts, text merges) for two hosts that each
    wrote ``count`` versions since they last synced: a quarter edit lines of
    one shared file (their own lines: merged as text), a quarter set one line
    both set (a conflict), the rest create files of their own."""
    with tempfile.TemporaryDirectory(prefix="vaultmem-sync-bench-") as tmp:
        folder = Path(tmp)
        subprocess.run(["git", "init", "-q", "--bare", str(folder / "server.git")], check=True)
        url = (folder / "server.git").as_uri()
        first = Vault.init(folder / "a.vault", key=key)
        shared = "".join(f"a{n}\n\n" for n in range(count)) + "middle\n\n" + "".join(f"b{n}\n\n" for n in range(count))
        setup = MemoryCommands(first, actor="bench", session="setup")
        setup.run({"command": "create", "path": "/memories/shared.md", "file_text": shared})
        setup.run({"command": "create", "path": "/memories/hot.md", "file_text": "nobody\n"})
        first.add_remote("origin", url)
        first.push()
        second = Vault.clone(url, folder / "b.vault", key=key)
        third = Vault.clone(url, folder / "c.vault", key=key)
        for name, vault in (("a", first), ("b", second)):
            tool = MemoryCommands(vault, actor=f"host-{name}", session=name)
            for n in range(count):
                if n % 4 == 0:
                    tool.run(
                        {
                            "command": "str_replace",
                            "path": "/memories/shared.md",
                            "old_str": f"{name}{n}\n",
                            "new_str": f"{name}{n} done\n",
                        }
                    )
                elif n % 4 == 1:
                    old = vault.read("/memories/hot.md").rstrip("\n")
                    tool.run(
                        {"command": "str_replace", "path": "/memories/hot.md", "old_str": old, "new_str": f"{name} {n}"}
                    )
                else:
                    tool.run({"command": "create", "path": f"/memories/{name}/{n}.md", "file_text": f"{n}\n" * 5})
        first.push()
        timed: dict[str, float] = {}
        pulls = {"merge": lambda: second.pull(actor="bench"), "forward": third.pull}
        done = {}
        for name in sorted(pulls, reverse=order):  # the order alternates between runs
            start = time.perf_counter()
            done[name] = pulls[name]()
            timed[name] = time.perf_counter() - start
        merged, forward = done["merge"], done["forward"]
        merging, forwarding = timed["merge"], timed["forward"]
        assert merged.merge is not None and "main" in forward.moved
        for vault in (first, second, third):
            vault.close()
    return merging, forwarding, len(merged.merge.conflicts), len(merged.merge.text_merged)


def call_latency(sync: bool, calls: int, key: str) -> list[float]:
    """Each ``create``'s wall time through the memory commands, with automatic
    sync to a ``file://`` server on or off (its pushes run in the background)."""
    with tempfile.TemporaryDirectory(prefix="vaultmem-sync-bench-") as tmp:
        folder = Path(tmp)
        subprocess.run(["git", "init", "-q", "--bare", str(folder / "server.git")], check=True)
        vault = Vault.init(folder / "agent.vault", key=key)
        vault.add_remote("origin", (folder / "server.git").as_uri())
        tool = MemoryCommands(vault, actor="bench", session="latency", sync="origin" if sync else None)
        samples = []
        for n in range(calls):
            start = time.perf_counter()
            tool.run({"command": "create", "path": f"/memories/l/{n}.txt", "file_text": f"note {n}\n"})
            samples.append(time.perf_counter() - start)
        if tool.autosync is not None:
            tool.autosync.close()
        vault.close()
    return samples


def shown(samples: list[float]) -> str:
    ms = [s * 1000 for s in samples]
    spread = f" ({min(ms):,.0f}-{max(ms):,.0f})" if len(ms) > 1 else ""
    return f"{statistics.median(ms):,.0f}{spread}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="runs of each case (default 5)")
    parser.add_argument("--quick", action="store_true", help="1 and 20 versions, one run each, for the tests")
    parser.add_argument("--out", default="docs", help="folder for sync-speed.md (default: docs)")
    args = parser.parse_args()
    from vaultmem import generate_key

    key = generate_key()
    sizes = (1, 20) if args.quick else (1, 1000)
    runs = 1 if args.quick else args.runs
    rows = []
    for transport in TRANSPORTS:
        for count in sizes:
            results = [one_run(transport, count, key) for _ in range(runs)]
            rows.append((transport, count, [r[0] for r in results], [r[1] for r in results]))
            print(f"{transport} {count}: push {shown(rows[-1][2])} ms, pull {shown(rows[-1][3])} ms", flush=True)
    diverged = 10 if args.quick else 100
    merges = [merge_run(diverged, key, run % 2 == 1) for run in range(runs)]
    merge_s, forward_s = [m[0] for m in merges], [m[1] for m in merges]
    print(f"merge of {diverged}+{diverged}: {shown(merge_s)} ms (fast-forward pull: {shown(forward_s)} ms)", flush=True)
    calls = 30 if args.quick else 300
    disks = ("quiet",) if args.quick else ("quiet", "busy")
    p50: dict[tuple[str, bool], float] = {}
    for disk in disks:
        latency: dict[bool, list[float]] = {False: [], True: []}
        with contextlib.ExitStack() as stack:
            if disk == "busy":  # another process appending 1-4 MB chunks and fsyncing each, 64 MB/s asked
                folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vaultmem-busy-")))
                stack.enter_context(BusyDisk(folder, rate=64, chunk=(1, 4)))
            for run in range(runs):  # interleaved rounds, the order alternating, so the noise falls on both
                for sync in (False, True) if run % 2 == 0 else (True, False):
                    latency[sync] += call_latency(sync, calls, key)
        for flag in (False, True):
            p50[disk, flag] = statistics.median(latency[flag]) * 1e6
        off, on = p50[disk, False], p50[disk, True]
        print(f"{disk} disk, create p50: {off:,.0f} us without sync, {on:,.0f} us with automatic sync", flush=True)
    lines = [
        "# Push and pull speed",
        "",
        "Written by `python bench/sync.py` (see its docstring for the method): the median of",
        f"{runs} run(s) in ms, with the spread (min-max) beside it, on a {os.cpu_count()}-core machine.",
        "",
        "| transport | new versions | push | pull |",
        "|---|---|---|---|",
    ]
    lines += [f"| {t} | {c:,} | {shown(p)} | {shown(q)} |" for t, c, p, q in rows]
    lines += [
        "",
        "## A merge",
        "",
        f"Two hosts each write {diverged} versions since they last synced (a quarter edit their own lines of one",
        "shared file, a quarter set one line both set, the rest create files); the second host's `pull`, which",
        "fetches, checks every seal, decrypts and merges file by file and commits the merge, is timed, and in",
        f"the same run a third clone's `pull` of the first host's {diverged} versions (a fast-forward), over `file://`.",
        "",
        "| pull | ms | conflicts | merged as text |",
        "|---|---|---|---|",
        f"| merge of {diverged} + {diverged} versions | {shown(merge_s)} | {merges[0][2]} | {merges[0][3]} |",
        f"| fast-forward of {diverged} versions | {shown(forward_s)} | | |",
    ]
    lines += [
        "",
        "## A tool call with automatic sync",
        "",
        f"`create` through the memory commands, {calls} calls a round, {runs} round(s) with automatic sync",
        "to a `file://` server and as many without, interleaved; p50 of all calls (target: within 10%). The busy",
        "disk: another process appending 1-4 MB chunks to the same file system and fsyncing each, at 64 MB/s",
        "asked (bench/busy.py, as in benchmarks.md).",
        "",
        "| disk | automatic sync | create p50 (µs) | ratio |",
        "|---|---|---|---|",
    ]
    for disk in disks:
        off = p50[disk, False]
        lines += [
            f"| {disk} | off | {off:,.0f} | 1.00x |",
            f"| {disk} | on | {p50[disk, True]:,.0f} | {p50[disk, True] / off:.2f}x |",
        ]
    lines.append("")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sync-speed.md").write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    main()
