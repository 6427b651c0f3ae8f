"""docs/benchmarks.md: the machine, the targets (met or missed, computed
here), the tables, and the method, all from one run's numbers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from measure import COMMANDS, HistoryOps, MemoryPhase, OpenTime, Sweep

SDK = "durable SDK"
STOCK = "stock SDK"
VAULT = "vaultmem"

RATIO_TARGETS = (
    ("view file", 1.0),
    ("view dir", 1.0),
    ("create", 1.5),
    ("str_replace", 1.5),
    ("insert", 1.5),
    ("delete", 2.0),
    ("rename", 2.0),
)
GROWTH_LIMIT = 1.2
HISTORY_PATH_LIMIT = 1.0  # seconds
VERIFY_LIMIT = 60.0  # seconds
OPEN_LIMIT = 0.020  # seconds


def vault_at(commits: int) -> str:
    """The backend name of the history sweep's vault of ``commits`` commits."""
    return f"vaultmem@{commits}"


# -- targets -------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    target: str
    measured: str
    met: bool


def shown(value: float, digits: int, unit: str, limit: float) -> str:
    """``value`` rounded for reading, with more digits when rounding would
    make it look equal to a limit it does not equal."""
    text = f"{value:,.{digits}f}"
    if text == f"{limit:,.{digits}f}" and value != limit:
        text = f"{value:,.{digits + 4}f}"
    return text + unit


def evaluate_targets(
    size_ratios: Mapping[int, Mapping[str, float]],
    growth: Mapping[str, float],
    shortest: int,
    longest: int,
    history_path: float,
    verify: float,
    verify_ok: bool,
    progress_calls: int,
    opens: Mapping[str, float],
) -> list[Target]:
    """Each target met or missed.  ``size_ratios[files][command]`` is vaultmem's
    median over the durable SDK's; ``growth[command]`` vaultmem's median at the
    longest history over its median at the shortest; times are in seconds;
    ``opens`` maps each vault to its median open time."""
    rows: list[Target] = []
    sizes = sorted(size_ratios)
    for command, limit in RATIO_TARGETS:
        ratios = [size_ratios[n][command] for n in sizes]
        measured = " / ".join(shown(r, 2, "x", limit) for r in ratios)
        where = " / ".join(f"{n:,}" for n in sizes)
        rows.append(
            Target(
                f"{command} ≤ {limit:.1f}x the durable SDK, at every size",
                f"{measured} at {where} files",
                all(r <= limit for r in ratios),
            )
        )
    worst = max(COMMANDS, key=lambda c: growth[c])
    rows.append(
        Target(
            f"every command at {longest:,} commits ≤ {GROWTH_LIMIT:.1f}x itself at {shortest:,}",
            f"highest: {worst} {shown(growth[worst], 2, 'x', GROWTH_LIMIT)}",
            all(growth[c] <= GROWTH_LIMIT for c in COMMANDS),
        )
    )
    rows.append(
        Target(
            f"history(path) < {HISTORY_PATH_LIMIT:.0f} s at {longest:,} commits",
            shown(history_path, 3, " s", HISTORY_PATH_LIMIT),
            history_path < HISTORY_PATH_LIMIT,
        )
    )
    verdict = "ok" if verify_ok else "found problems"
    progress = f"progress reported {progress_calls:,} times" if progress_calls else "no progress reported"
    rows.append(
        Target(
            f"verify < {VERIFY_LIMIT:.0f} s at {longest:,} commits, with progress",
            f"{shown(verify, 1, ' s', VERIFY_LIMIT)}, {verdict}, {progress}",
            verify < VERIFY_LIMIT and verify_ok and progress_calls > 0,
        )
    )
    slowest = max(opens, key=lambda label: opens[label])
    rows.append(
        Target(
            f"open < {OPEN_LIMIT * 1000:.0f} ms, every vault measured",
            f"slowest: {shown(opens[slowest] * 1000, 1, ' ms', OPEN_LIMIT * 1000)} ({slowest})",
            all(t < OPEN_LIMIT for t in opens.values()),
        )
    )
    return rows


# -- the page ------------------------------------------------------------------


@dataclass
class Results:
    command_line: str
    quick: bool
    rounds: int
    calls: int
    warmup: int
    repeats: int
    open_repeats: int
    machine: list[tuple[str, str]]
    pressure_start: str | None
    pressure_measure: str | None
    started: datetime
    seconds: float
    size_sweeps: list[Sweep]  # ascending files; backends SDK, STOCK, VAULT
    size_history: int
    history_sweep: Sweep  # backends SDK, STOCK, vault_at(h) for each length
    histories: list[int]
    ops: HistoryOps
    opens: list[OpenTime]
    memory: list[MemoryPhase]
    lifetime_peak_mb: float | None  # when peaks per phase are not available


def size_ratios(results: Results) -> dict[int, dict[str, float]]:
    return {
        sweep.files: {c: sweep.median(c, VAULT) / sweep.median(c, SDK) for c in COMMANDS}
        for sweep in results.size_sweeps
    }


def growth(results: Results) -> dict[str, float]:
    sweep, first, last = results.history_sweep, results.histories[0], results.histories[-1]
    return {c: sweep.median(c, vault_at(last)) / sweep.median(c, vault_at(first)) for c in COMMANDS}


def targets(results: Results) -> list[Target]:
    ops = results.ops
    return evaluate_targets(
        size_ratios(results),
        growth(results),
        results.histories[0],
        results.histories[-1],
        ops.history_path,
        ops.verify,
        ops.verify_ok,
        ops.progress_calls,
        {t.label: t.open for t in results.opens},
    )


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> list[str]:
    """A markdown table; ``align`` has one letter per column, ``l`` or ``r``
    (default: the first column left, the others right)."""
    align = align or "l" + "r" * (len(header) - 1)
    marks = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(marks) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


METHOD = """\
- **One process, real calls.** Each backend is called through `.call(dict)`,
  as the SDK's tool runner calls it, and each call is timed on its own with
  `time.perf_counter()`.
- **Both durable.** vaultmem acknowledges a mutation only once it is on disk
  (docs/format.md). The SDK's `BetaLocalFilesystemMemoryTool` fsyncs the file
  it writes but never a folder, and `delete` and `rename` fsync nothing; a
  created, renamed or deleted name is durable on POSIX only once its folder is
  fsynced. `DurableSDK` (bench/backends.py) adds those fsyncs: the parent
  folder of each path a successful call touched (both folders for a rename),
  and the parent of any folder the call created. Ratios are vaultmem over
  `DurableSDK`; the stock SDK's column shows what those fsyncs cost it.
- **Interleaved.** Within a round, every call is made on each backend in turn
  (durable SDK, stock SDK, then the vault or vaults), so a drift in the
  machine hits them all alike. The history sweep sends each call to the SDK
  and to every vault in turn.
- **Every call valid and checked.** In each round `create` makes
  `/memories/new{round}/n{i}.txt`, `rename` moves it to `m{i}.txt` and
  `delete` removes that file; `str_replace` (`note 7` to `note 7+`) and
  `insert` edit the existing files in turn; `view` reads them and their
  folders. Every result must start with the command's success text, or the
  run stops. A warm-up of a few calls per command comes first, unrecorded.
- **Statistics.** Median, p99 (nearest rank: a measured value) and mean are
  over every sample of every round, pooled. The noise figure is the lowest
  and highest of the durable SDK's per-round medians: a difference smaller
  than that spread is within what the machine varies by.
- **Starting state.** Files are `/memories/d{i % 20}/f{i}.txt`, 30 lines
  each. The SDK's folders are written directly; each vault imports a pristine
  copy of the same folder as one commit, then `str_replace` edits bring its
  history to the length shown. Built vaults are synced before any timing.
- **Targets** compare medians; the result column is computed from the
  numbers below by bench/report.py, not written by hand.
"""

WRITES = """## What a write costs, and why

A vaultmem mutation is one git commit that stock git can read after any
crash. It writes one small pack (the file's new ciphertext, the changed trees
and the commit) and the pack's index (by rename); it rewrites in place the
pending record (inside the writer lock file) and one of three ref files,
which it links as `refs/heads/main.lock`; one `syncfs()` makes all of it
durable; then the lock is renamed over `refs/heads/main`. No file is freed
on the way (docs/format.md, "The ref files"), and a large folder's tree is
patched, not encoded again, when only ids in it change. Every 16 commits
small packs are merged, and the packs a merge replaced are removed after the
next sync: about two freed files a commit, paid by the calls that do it,
which is what the p99 and mean columns carry. The SDK writes one file and
fsyncs it (plus, here, its folder), and for an edit renames it over the old
one; its delete and rename create no file.

So a write creates two files where the SDK creates one or none, and on this
machine creating a file is the cost that varies most. When the work folder's
ext4 keeps no journal (see Machine), ext4 makes each new file skip every
inode freed in the last 30 seconds, reading their inode blocks to check: the
more files were deleted nearby, the more a create costs. Writes free about
two files each, and on this machine creating a file took about 15 µs in a
quiet folder but about 150 µs in a vault's pack folder after a few thousand
writes, so the sections measured last show it most. A journaled ext4 skips
that check. One
sync, which flushes the folders' metadata too, plus those creates is the
floor the write ratios show. Reads cost no file operations at all (trees are
decoded once and cached by id, sizes come from blob headers), which is why
views are faster than the SDK's.
"""


def _sweep_table(sweep: Sweep) -> list[str]:
    header = [
        "command",
        "SDK median µs",
        "SDK p99 µs",
        "SDK mean µs",
        "SDK noise µs",
        "vaultmem median µs",
        "vaultmem p99 µs",
        "vaultmem mean µs",
        "ratio",
        "p99 ratio",
        "stock SDK median µs",
        "stock SDK p99 µs",
    ]
    rows = []
    for command in COMMANDS:
        sdk, vm, stock = (sweep.summary(command, b) for b in (SDK, VAULT, STOCK))
        rows.append(
            [
                command,
                us(sdk.median),
                us(sdk.p99),
                us(sdk.mean),
                f"{us(sdk.round_low)}–{us(sdk.round_high)}",
                us(vm.median),
                us(vm.p99),
                us(vm.mean),
                f"{vm.median / sdk.median:.2f}x",
                f"{vm.p99 / sdk.p99:.2f}x",
                us(stock.median),
                us(stock.p99),
            ]
        )
    return table(header, rows)


def _cut_note(sweep: Sweep) -> list[str]:
    if not sweep.cut:
        return []
    who = ", ".join(sorted(sweep.cut))
    return [
        f"In this sweep {who}'s `view dir` listings were cut at the tool's view cap (a note instead of the "
        "rest of the entries); the SDK's list every entry.",
        "",
    ]


def _header(results: Results) -> list[str]:
    out = [
        "# Benchmarks",
        "",
        f"Generated by `{results.command_line}`; run `python bench/run.py` from the project root to measure "
        "again. It rewrites this page and benchmarks.png: edit bench/report.py, not this file.",
        "",
    ]
    if results.quick:
        out += ["**Quick run**: tiny sizes, to check the benchmark itself. These numbers are not results.", ""]
    minutes, seconds = divmod(round(results.seconds), 60)
    facts = [
        *results.machine,
        ("date", results.started.strftime("%Y-%m-%d %H:%M UTC")),
        (
            "I/O pressure (`some avg10`)",
            f"{results.pressure_start or 'not reported'} at the start, "
            f"{results.pressure_measure or 'not reported'} when timing began",
        ),
        ("run length", f"{minutes} min {seconds} s" if minutes else f"{results.seconds:.1f} s"),
        (
            "calls",
            f"{results.rounds} rounds × {results.calls} calls per command per backend, "
            f"after {results.warmup} warm-up calls",
        ),
    ]
    return [*out, "## Machine", "", *table(["", ""], [[k, v] for k, v in facts], "ll"), ""]


def _targets(results: Results) -> list[str]:
    rows = [[t.target, t.measured, "met" if t.met else "**missed**"] for t in targets(results)]
    return [
        "## Targets",
        "",
        *table(["target", "measured", "result"], rows, "lll"),
        "",
        "![Median latency against history length and against memory size](benchmarks.png)",
        "",
        "## Method",
        "",
        METHOD,
        "",
        WRITES,
    ]


def _by_size(results: Results) -> list[str]:
    out = [
        "## Per-command latency by memory size",
        "",
        f"Each vault has {results.size_history:,} commits as built. SDK is the durable SDK. Ratio is "
        "vaultmem's median over the SDK's, p99 ratio the same for p99s; SDK noise is the range of its "
        "per-round medians.",
        "",
    ]
    for sweep in results.size_sweeps:
        folders = min(20, sweep.files)
        each = "" if sweep.files % folders == 0 else "about "
        out += [f"### {sweep.files:,} files ({folders} folders of {each}{sweep.files // folders:,})", ""]
        out += [*_sweep_table(sweep), "", *_cut_note(sweep)]
    return out


def _by_history(results: Results) -> list[str]:
    hs, sweep = results.histories, results.history_sweep
    header = ["command", "durable SDK µs", "stock SDK µs", *[f"{h:,} commits µs" for h in hs]]
    header += [f"{hs[-1]:,} vs {hs[0]:,} commits", *[f"ratio at {h:,}" for h in hs]]
    rows = []
    for c in COMMANDS:
        sdk = sweep.median(c, SDK)
        vms = [sweep.median(c, vault_at(h)) for h in hs]
        row = [c, us(sdk), us(sweep.median(c, STOCK)), *[us(v) for v in vms], f"{vms[-1] / vms[0]:.2f}x"]
        rows.append(row + [f"{v / sdk:.2f}x" for v in vms])
    return [
        f"## Per-command latency by history length ({sweep.files:,} files)",
        "",
        "Medians per call. Commit counts are as built; during the sweep each vault gains "
        f"{sweep.mutations:,} more (one per mutating call). The SDK keeps no history: its column is one "
        "figure, measured interleaved with every vault.",
        "",
        "The columns to compare are the vault's own, across history lengths. A vault's one `syncfs()` "
        "also flushes whatever else on the disk is waiting to be written, so writes measured while the "
        "disk is still writing back a freshly built 100,000-commit vault (about 500 MB) cost more in "
        "every column alike; fsyncing each file instead costs more still (each fsync is a journal "
        "commit on ext4).",
        "",
        *table(header, rows),
        "",
        *_cut_note(sweep),
    ]


def _whole_history(ops: HistoryOps) -> list[str]:
    many = f"median of {ops.repeats}"
    restored = f"new version {ops.restored[:10]}" if ops.restored else "nothing to change: no new version"
    verdict = "ok" if ops.verify_ok else "problems: " + "; ".join(ops.verify_problems[:3])
    rows = [
        ["`history(path)`", f"{ops.history_path * 1000:,.1f} ms", many, f"{ops.versions:,} versions of `{ops.path}`"],
        ["`history(limit=20)`", f"{ops.history_limit * 1000:,.1f} ms", many, f"{ops.limited} versions"],
        ["`read(path, at=first version)`", f"{ops.read_at * 1000:,.1f} ms", many, f"at {ops.old[:10]} (the import)"],
        ["`restore(first version, path=path)`", f"{ops.restore * 1000:,.1f} ms", "once (a mutation)", restored],
        [
            "`verify(progress=...)`",
            f"{ops.verify:,.2f} s",
            "once",
            f"{verdict}; {ops.verify_commits:,} commits checked; progress reported {ops.progress_calls:,} times",
        ],
    ]
    return [
        f"## Whole-history operations ({ops.files:,} files, {ops.commits:,} commits as built)",
        "",
        *table(["operation", "time", "runs", "detail"], rows, "lrll"),
        "",
    ]


def _opens(results: Results) -> list[str]:
    rows = [
        [t.label, f"{t.files:,}", f"{t.commits:,}", f"{t.open * 1000:,.2f}", f"{t.open_view * 1000:,.2f}"]
        for t in results.opens
    ]
    return [
        "## Opening a vault",
        "",
        f"Median of {results.open_repeats} opens of each vault as built (each closed again).",
        "",
        *table(["vault", "files", "commits", "open ms", "open + first view of /memories ms"], rows),
        "",
    ]


def _memory(results: Results) -> list[str]:
    if not results.memory:
        return [
            "## Peak memory",
            "",
            "This system cannot reset the peak RSS per phase (no /proc/self/clear_refs); the peak of the "
            f"whole run (`getrusage` `ru_maxrss`) was {results.lifetime_peak_mb or 0:,.0f} MB.",
        ]
    rows = [[m.phase, f"{m.before_mb:,.0f}", f"{m.peak_mb:,.0f}"] for m in results.memory]
    return [
        "## Peak memory",
        "",
        "Resident set size of the process: before each phase, and its peak during it. It counts the "
        "pages of pack files that libgit2 maps to read objects (file-backed, given back under memory "
        "pressure) and libgit2's object cache (up to 256 MB, freed when the repository handle is): a "
        "walk over 100,000 commits touches most of a 500 MB history's packs.",
        "",
        *table(["phase", "RSS before, MB", "peak RSS, MB"], rows),
    ]


def render(results: Results) -> str:
    """The whole page."""
    sections = [
        _header(results),
        _targets(results),
        _by_size(results),
        _by_history(results),
        _whole_history(results.ops),
        _opens(results),
        _memory(results),
    ]
    return "\n".join(line for section in sections for line in section) + "\n"
