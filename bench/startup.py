"""How long a `vaultmem` command takes to start and finish, and what it imports.

    python bench/startup.py [--runs 21] [--out docs]      # writes docs/startup.md
    python bench/startup.py --quick --out /tmp/x            # one run of each, for the tests

Each command runs as a user runs it, the installed `vaultmem` script on a
small vault (10 files, 10 versions), one process per run, in turn with the
others so that the machine's noise falls on all of them alike.  Wall time is
measured around the process (time.perf_counter); quiet is the machine as it
is, busy is with one process per core burning CPU beside it.  Every command is
also run once under ``python -X importtime`` to show what it imports and how
long that takes; `anthropic` must not be among it.  In the same run, the same
measurements for ``python -c pass`` (the interpreter alone) and ``git
--version`` give the floor a command cannot go under.

Target (issue 15): `vaultmem ls`, `log`, `cat` and `call` under 300 ms each,
at the median, on the quiet machine.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TARGET_MS = 300.0
TARGETED = ("ls", "log", "cat", "call")


def commands(vault: Path) -> dict[str, list[str]]:
    script = shutil.which("vaultmem") or "vaultmem"
    base = [script, "--vault", str(vault)]
    return {
        "ls": [*base, "ls"],
        "log": [*base, "log"],
        "cat": [*base, "cat", "/memories/notes/n3.txt"],
        "call": [*base, "call", '{"command": "view", "path": "/memories"}'],
        "show": [*base, "show", "main"],
        "verify": [*base, "verify"],
        "--version": [script, "--version"],
        "python -c pass (floor)": [sys.executable, "-c", "pass"],
        "git --version (floor)": ["git", "--version"],
    }


def build_vault(folder: Path, key: str) -> Path:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from vaultmem.ops.memory import MemoryCommands
    from vaultmem.vault import Vault

    vault = folder / "bench.vault"
    with Vault.init(vault, key=key) as opened:
        tool = MemoryCommands(opened, actor="bench", session="startup")
        for n in range(10):
            tool.run({"command": "create", "path": f"/memories/notes/n{n}.txt", "file_text": f"note {n}\n" * 20})
    return vault


def _burn(stop: multiprocessing.synchronize.Event) -> None:  # type: ignore[name-defined]
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x += 1


@contextmanager
def busy() -> Iterator[None]:
    """One CPU-burning process per core while the block runs."""
    stop = multiprocessing.Event()
    procs = [multiprocessing.Process(target=_burn, args=(stop,)) for _ in range(os.cpu_count() or 1)]
    for p in procs:
        p.start()
    try:
        yield
    finally:
        stop.set()
        for p in procs:
            p.join()


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    took = (time.perf_counter() - start) * 1000
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.decode()}")
    return took


Imports = tuple[float, list[tuple[str, float]], bool]


def sweep(cmds: dict[str, list[str]], env: dict[str, str], runs: int, warm: bool = True) -> dict[str, list[float]]:
    """Every command ``runs`` times, interleaved, after one warm-up run each
    (unless ``warm`` is false)."""
    for argv in cmds.values() if warm else ():
        timed(argv, env)
    samples: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(runs):
        for name, argv in cmds.items():
            samples[name].append(timed(argv, env))
    return samples


def imports(argv: list[str], env: dict[str, str]) -> Imports:
    """Under -X importtime: the total import time (ms), the packages whose
    modules took longest to import (their own time, summed), and whether the
    Anthropic SDK was loaded."""
    if not argv[0].endswith("vaultmem"):
        return 0.0, [], False
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "vaultmem", *argv[1:]],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=True,
    )
    by_package: dict[str, float] = {}
    total = 0.0
    sdk = False
    for line in done.stderr.splitlines():
        found = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", line)
        if not found:
            continue
        own, package = int(found.group(1)) / 1000, found.group(2).split(".")[0]
        sdk = sdk or package == "anthropic"
        total += own
        by_package[package] = by_package.get(package, 0.0) + own
    top = list(by_package.items())
    return total, sorted(top, key=lambda item: -item[1])[:4], sdk


def render(
    quiet: dict[str, list[float]],
    loaded: dict[str, list[float]],
    detail: dict[str, tuple[float, list[tuple[str, float]], bool]],
    runs: int,
) -> str:
    cpu = os.cpu_count()
    lines = [
        "# Start-up time of `vaultmem` commands",
        "",
        "Written by `python bench/startup.py` (see its docstring for the method):",
        f"each command {runs} times as a process, interleaved, on a vault of 10 files;",
        f"busy is with {cpu} CPU-burning processes beside it. Times in ms.",
        "",
        f"Target: `vaultmem ls`, `log`, `cat` and `call` under {TARGET_MS:.0f} ms each at the quiet median.",
        "",
        "| command | quiet median | quiet p90 | busy median | importing (-X importtime) "
        "| slowest packages to import | loads `anthropic` | target |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in quiet:
        q = statistics.median(quiet[name])
        p90 = sorted(quiet[name])[int(0.9 * (len(quiet[name]) - 1))]
        b = f"{statistics.median(loaded[name]):.0f}" if loaded[name] else "-"
        total, top, sdk = detail[name]
        slow = ", ".join(f"{mod} {ms:.0f}" for mod, ms in top) or "-"
        verdict = ("met" if q < TARGET_MS else "missed") if name in TARGETED else "-"
        imported = f"{total:.0f}" if total else "-"
        sdk_text = ("yes" if sdk else "no") if total else "-"
        lines.append(f"| `{name}` | {q:.0f} | {p90:.0f} | {b} | {imported} | {slow} | {sdk_text} | {verdict} |")
    lines += [
        "",
        "The floor rows show what no command can beat on this machine: the",
        "interpreter starting with nothing to import, and git starting.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=21, help="runs of each command (default 21)")
    parser.add_argument("--quick", action="store_true", help="one run, no warm-up and no busy run, for the tests")
    parser.add_argument("--out", default="docs", help="folder for startup.md (default: docs)")
    args = parser.parse_args()
    runs = 1 if args.quick else args.runs
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from vaultmem import generate_key

    key = generate_key()
    with tempfile.TemporaryDirectory(prefix="vaultmem-startup-") as tmp:
        vault = build_vault(Path(tmp), key)
        env = {**os.environ, "VAULTMEM_KEY": key}
        env.pop("VAULTMEM_VAULT", None)
        cmds = commands(vault)
        quiet = sweep(cmds, env, runs, warm=not args.quick)
        loaded: dict[str, list[float]] = {name: [] for name in cmds}
        if not args.quick:  # the tests run it beside other tests: no burners there
            with busy():
                loaded = sweep(cmds, env, runs)
        detail = {name: imports(argv, env) for name, argv in cmds.items()}
    page = render(quiet, loaded, detail, runs)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "startup.md").write_text(page, encoding="utf-8")
    print(page)


if __name__ == "__main__":
    main()
