"""docs/benchmarks.md: the machine, the targets (met or missed, computed
here), the tables, and the method, all from one run's numbers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from busy import BusyReport
from measure import BUSY, COMMANDS, MUTATING, QUIET, HistoryOps, MemoryPhase, OpenTime, Sweep

SDK = "SDK"  # the SDK's own BetaLocalFilesystemMemoryTool: what the targets compare with
DURABLE = "durable SDK"  # the same, with the folder fsyncs a durable create, delete or rename needs
VAULT = "vaultmem"
SCENARIOS = (QUIET, BUSY)

# vaultmem's median per-call ratio to the SDK, for every command, quiet and busy
P50_TARGETS = (
    ("view file", 1.0),
    ("view dir", 1.0),
    ("create", 1.2),
    ("str_replace", 1.2),
    ("insert", 1.2),
    ("delete", 2.0),  # the SDK syncs nothing for these two
    ("rename", 2.0),
)
P99_LIMIT = 3.0  # vaultmem's p99 over the SDK's, every mutating command, quiet and busy
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
    p50_ratios: Mapping[str, Mapping[int, Mapping[str, float]]],
    p99_ratios: Mapping[str, Mapping[int, Mapping[str, float]]],
    growth: Mapping[str, float],
    shortest: int,
    longest: int,
    history_path: float,
    verify: float,
    verify_ok: bool,
    progress_calls: int,
    opens: Mapping[str, float],
) -> list[Target]:
    """Each target met or missed.  ``p50_ratios[scenario][files][command]`` is
    the median of vaultmem's per-call ratios to the SDK in that scenario at
    that size, ``p99_ratios`` the same shape for vaultmem's p99 over the
    SDK's (mutating commands only); ``growth[command]`` is vaultmem's median
    at the longest history over its median at the shortest; times are in
    seconds; ``opens`` maps each vault to its median open time."""
    rows: list[Target] = []
    for scenario, by_size in p50_ratios.items():
        sizes = sorted(by_size)
        where = " / ".join(f"{n:,}" for n in sizes)
        for command, limit in P50_TARGETS:
            ratios = [by_size[n][command] for n in sizes]
            rows.append(
                Target(
                    f"{command} p50 ≤ {limit:.1f}x the SDK, {scenario} disk",
                    f"{' / '.join(shown(r, 2, 'x', limit) for r in ratios)} at {where} files",
                    all(r <= limit for r in ratios),
                )
            )
    for scenario, by_size in p99_ratios.items():
        sizes = sorted(by_size)
        where = " / ".join(f"{n:,}" for n in sizes)
        for command in (c for c in COMMANDS if c in MUTATING):
            ratios = [by_size[n][command] for n in sizes]
            rows.append(
                Target(
                    f"{command} p99 ≤ {P99_LIMIT:.1f}x the SDK's p99, {scenario} disk",
                    f"{' / '.join(shown(r, 2, 'x', P99_LIMIT) for r in ratios)} at {where} files",
                    all(r <= P99_LIMIT for r in ratios),
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


@dataclass(frozen=True)
class BusySettings:
    """What the busy writer was asked to do (bench/busy.py)."""

    rate: float  # MB/s
    chunk: tuple[float, float]  # MB, smallest and largest write
    cap: float  # MB, largest size of its file
    calm: float  # seconds the disk is left after a busy round, before a quiet one


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
    busy: BusySettings
    disk: BusyReport  # the busy writer unpaced, before timing: what the disk syncs
    history_calls: int
    pressure_start: str | None
    pressure_measure: str | None
    started: datetime
    seconds: float
    size_sweeps: list[Sweep]  # ascending files; backends VAULT, SDK, DURABLE; quiet and busy
    size_history: int
    history_sweep: Sweep  # backends vault_at(h) for each length, SDK, DURABLE; quiet only
    histories: list[int]
    ops: HistoryOps
    opens: list[OpenTime]
    memory: list[MemoryPhase]
    lifetime_peak_mb: float | None  # when peaks per phase are not available


def size_ratios(results: Results) -> dict[str, dict[int, dict[str, float]]]:
    """``[scenario][files][command]``: the median of vaultmem's per-call ratios to the SDK."""
    return {
        scenario: {
            sweep.files: {c: sweep.paired(c, VAULT, SDK, scenario).median for c in COMMANDS}
            for sweep in results.size_sweeps
        }
        for scenario in SCENARIOS
    }


def size_p99_ratios(results: Results) -> dict[str, dict[int, dict[str, float]]]:
    """``[scenario][files][command]``: vaultmem's p99 over the SDK's, mutating commands."""
    return {
        scenario: {
            sweep.files: {c: sweep.paired(c, VAULT, SDK, scenario).p99 for c in MUTATING}
            for sweep in results.size_sweeps
        }
        for scenario in SCENARIOS
    }


def growth(results: Results) -> dict[str, float]:
    sweep, first, last = results.history_sweep, results.histories[0], results.histories[-1]
    return {c: sweep.median(c, vault_at(last)) / sweep.median(c, vault_at(first)) for c in COMMANDS}


def targets(results: Results) -> list[Target]:
    ops = results.ops
    return evaluate_targets(
        size_ratios(results),
        size_p99_ratios(results),
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
- **Real calls, a process each.** Each backend is called through
  `.call(dict)`, as the SDK's tool runner calls it, and each call is timed on
  its own with `time.perf_counter()`. vaultmem runs in the benchmark's
  process; the SDK and the durable SDK each run in a process of their own
  (bench/worker.py), which times the call there and answers over a pipe, as
  an application using the SDK runs it: vaultmem's background threads
  (files made ahead, pack merges) never hold up an SDK call's Python.
- **The SDK, and the SDK made durable.** The targets compare vaultmem with
  the SDK's own `BetaLocalFilesystemMemoryTool` ("SDK"): its `create`,
  `str_replace` and `insert` write a file and fsync it (an edit writes a new
  file and renames it over the old one); its `delete` and `rename` sync
  nothing, and it never fsyncs a folder, so a name it created, renamed or
  deleted can still be lost in a crash. vaultmem acknowledges a mutation only
  once it is on disk (docs/format.md). `DurableSDK` (bench/backends.py) adds
  the fsyncs POSIX asks for: the parent folder of each path a successful call
  touched (both folders for a rename), and the parent of any folder the call
  created. Its columns show what durability costs a plain folder.
- **Paired calls.** Every call is made on vaultmem, then at once the same
  call on the SDK, then on the durable SDK, each holding its own copy of the
  same memory, so whatever the machine is doing at that moment falls on all
  of them alike. A command's ratio is the median, over its calls, of
  vaultmem's time for the call over the SDK's time for the same call (the
  median of per-call ratios), not one median over another taken at other
  moments. The history sweep sends each call to every vault in turn, then to
  the SDK and the durable SDK.
- **Quiet and busy.** Each memory size is measured in rounds that alternate
  between a quiet disk and a busy one. During a busy round another process
  (bench/busy.py) appends chunks of 1 to 4 MB to a file in the work folder
  (the same file system as the vaults and the SDK's folders) and fsyncs each,
  at a steady rate, as other programs on a user's machine write and sync. It
  is started before the round (its first chunk synced), stopped after it, and
  its file removed. Before a quiet round that follows a busy one the disk is
  synced and left to calm down. What the writer achieved, and how much of
  each scenario's time some task spent waiting for the disk, is under "The
  busy disk".
- **Every call valid and checked.** In each round `create` makes
  `/memories/new{round}/n{i}.txt`, `rename` moves it to `m{i}.txt` and
  `delete` removes that file; `str_replace` (`note 7` to `note 7+`) and
  `insert` edit the existing files in turn; `view` reads them and their
  folders. Every result must start with the command's success text, or the
  run stops. A warm-up of a few calls per command comes first, quiet and
  unrecorded.
- **Statistics.** p50 (median), p99 (nearest rank: a measured value) and
  mean are over every call of a scenario, its rounds pooled: a full run makes
  400 calls per command per backend in each scenario, so p99 is the fifth
  slowest call (from 150 calls it would be the second slowest, and moved
  several-fold from run to run). The noise figures come from the rounds, each
  taken at another moment of the run: "SDK noise" is the lowest and highest
  of the SDK's per-round medians, "ratio per round" the lowest and highest
  of the rounds' own medians of per-call ratios. That range is what repeating
  the run is likely to show; a difference smaller than it is within what the
  machine varies by.
- **Starting state.** Files are `/memories/d{i % 20}/f{i}.txt`, 30 lines
  each. The SDK's folders are written directly; each vault imports a pristine
  copy of the same folder as one commit, then `str_replace` edits bring its
  history to the length shown. Built vaults are synced before any timing.
- **Targets** take the p50 ratio as the median of per-call ratios and the p99
  ratio as vaultmem's p99 over the SDK's p99; the result column is computed
  from the numbers below by bench/report.py, not written by hand.
"""

WRITES = """## What a write costs, and why

A vaultmem mutation is one git commit that stock git can read at once and
after any crash (docs/format.md, "The one commit path"). It writes one small
pack (the file's new ciphertext, the changed trees and the commit) and its
index under temporary names, and renames them into place. A
`.keep` hard link protects the pack from `git repack` until `main` reaches
it. The move and the whole pack are appended to a preallocated journal, and
**one `fdatasync` of the journal** makes the write durable. Then `main.lock`
is linked into place and renamed over
`refs/heads/main`; the old ref file waits in the state folder's trash, so
the call frees no file. Git's own files get no sync of their own: a
checkpoint (one `syncfs()`), merging small packs and emptying the trash all
run in the background after the calls, without holding up a call; a write only retires up to 8 of the packs
a merge replaced, with two renames each. The SDK writes one file and fsyncs it (the
durable SDK also its folder), and for an edit renames it over the old one;
its delete and rename create no file and sync nothing.

So a write's one sync is cheaper than the SDK's create: it rewrites blocks of
a file that already exist, with no metadata to commit, and a write frees no
file on the way. That matters on this machine: its ext4 is mounted with
`discard`, so freeing a file's block costs a synchronous discard. Creating a
file still costs more than on most disks: when ext4 keeps no journal (see
Machine), it makes each new file skip every inode freed in the last 30
seconds, reading their inode blocks to check, and a write creates three (the
pack, its index and the ref lock). What a write still pays for and the SDK does not is Python: it
encrypts, hashes, encodes trees and builds a pack (a create took 540-670 µs
at p50 on a memory file system, tmpfs, where file operations cost almost
nothing), and about twenty file operations (links, renames, the lock) where
the SDK makes two or three. The busy scenario shows what the journal saves over a
file-system-wide sync: another program's dirty data is no longer this
write's to flush. Reads cost no file operations at all (trees are decoded
once and cached by id, sizes come from blob headers), which is why views are
faster than the SDK's.
"""


def _range(low: float, high: float, digits: int = 2, unit: str = "") -> str:
    return f"{low:.{digits}f}–{high:.{digits}f}{unit}"


def _sweep_table(sweep: Sweep, scenario: str) -> list[str]:
    header = [
        "command",
        "vaultmem p50 µs",
        "vaultmem p99 µs",
        "vaultmem mean µs",
        "SDK p50 µs",
        "SDK p99 µs",
        "SDK noise µs",
        "ratio",
        "ratio per round",
        "p99 ratio",
        "durable SDK p50 µs",
        "durable SDK p99 µs",
        "ratio to durable SDK",
    ]
    rows = []
    for command in COMMANDS:
        vm, sdk, durable = (sweep.summary(command, b, scenario) for b in (VAULT, SDK, DURABLE))
        ratio = sweep.paired(command, VAULT, SDK, scenario)
        rows.append(
            [
                command,
                us(vm.median),
                us(vm.p99),
                us(vm.mean),
                us(sdk.median),
                us(sdk.p99),
                f"{us(sdk.round_low)}–{us(sdk.round_high)}",
                f"{ratio.median:.2f}x",
                _range(ratio.round_low, ratio.round_high, unit="x"),
                f"{ratio.p99:.2f}x",
                us(durable.median),
                us(durable.p99),
                f"{sweep.paired(command, VAULT, DURABLE, scenario).median:.2f}x",
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
    busy, disk = results.busy, results.disk
    achieved = overall_achieved(results)
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
            f"{results.rounds} quiet and {results.rounds} busy rounds, alternating, × {results.calls} calls "
            f"per command per backend: {results.rounds * results.calls:,} calls per command per scenario, "
            f"after {results.warmup} warm-up calls; the history sweep: {results.rounds} quiet rounds × "
            f"{results.history_calls} calls",
        ),
        (
            "synced writes",
            f"{disk.achieved:,.0f} MB/s: the busy writer alone, unpaced, for {disk.seconds:.1f} s before timing "
            f"(fsync of a {busy.chunk[0]:g}–{busy.chunk[1]:g} MB chunk: p50 {disk.sync_p50 * 1e3:.1f} ms, "
            f"p99 {disk.sync_p99 * 1e3:.1f} ms)",
        ),
        (
            "busy disk",
            f"another process appending {busy.chunk[0]:g}–{busy.chunk[1]:g} MB and fsyncing each, "
            f"at {busy.rate:g} MB/s asked ({share(busy.rate, disk.achieved)} of the synced writes above); achieved "
            + (f"{achieved:.1f} MB/s" if achieved is not None else "nothing (no busy round)"),
        ),
    ]
    return [*out, "## Machine", "", *table(["", ""], [[k, v] for k, v in facts], "ll"), ""]


def share(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole > 0 else "–"


def overall_achieved(results: Results) -> float | None:
    """MB/s the busy writers wrote and synced over all their time, or None if none ran."""
    writers = [w for sweep in results.size_sweeps for w in sweep.writers]
    seconds = sum(w.seconds for w in writers)
    return sum(w.bytes for w in writers) / (1 << 20) / seconds if seconds > 0 else None


def _targets(results: Results) -> list[str]:
    found = targets(results)
    rows = [[t.target, t.measured, "met" if t.met else "**missed**"] for t in found]
    return [
        "## Targets",
        "",
        f'{sum(t.met for t in found)} of {len(found)} met. "The SDK" is `BetaLocalFilesystemMemoryTool` '
        "as the SDK ships it; each p50 ratio is the median of per-call ratios, its spread from round to round "
        "is in the tables below.",
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
        f"Each vault has {results.size_history:,} commits as built. Ratio is the median of vaultmem's per-call "
        "ratios to the SDK, and ratio per round the range of the rounds' own medians of them; p99 ratio is "
        "vaultmem's p99 over the SDK's; SDK noise is the range of the SDK's per-round medians.",
        "",
    ]
    for sweep in results.size_sweeps:
        folders = min(20, sweep.files)
        each = "" if sweep.files % folders == 0 else "about "
        out += [f"### {sweep.files:,} files ({folders} folders of {each}{sweep.files // folders:,})", ""]
        for scenario in sweep.scenarios:
            out += [f"#### {scenario.capitalize()} disk", ""]
            out += [
                f"{sweep.calls(scenario):,} calls per command per backend.",
                "",
                *_sweep_table(sweep, scenario),
                "",
            ]
        out += _cut_note(sweep)
    return out


def _busy(results: Results) -> list[str]:
    busy = results.busy
    header = [
        "memory",
        "busy rounds",
        "writer ran s",
        "written MB",
        "achieved MB/s",
        "fsyncs",
        "writer's fsync p50 ms",
        "writer's fsync p99 ms",
        "I/O wait, quiet rounds",
        "I/O wait, busy rounds",
    ]
    rows = []
    for sweep in results.size_sweeps:
        writers = sweep.writers
        seconds = sum(w.seconds for w in writers)
        written = sum(w.bytes for w in writers) / (1 << 20)
        shares = [sweep.stall_share(s) for s in (QUIET, BUSY)]
        rows.append(
            [
                f"{sweep.files:,} files",
                f"{len(writers)}",
                f"{seconds:,.1f}",
                f"{written:,.0f}",
                f"{written / seconds:,.1f}" if seconds > 0 else "–",
                f"{sum(w.syncs for w in writers):,}",
                _range(min(w.sync_p50 for w in writers) * 1e3, max(w.sync_p50 for w in writers) * 1e3, 1)
                if writers
                else "–",
                _range(min(w.sync_p99 for w in writers) * 1e3, max(w.sync_p99 for w in writers) * 1e3, 1)
                if writers
                else "–",
                *[f"{part:.0%}" if part is not None else "not reported" for part in shares],
            ]
        )
    return [
        "## The busy disk",
        "",
        f"During each busy round a child process (bench/busy.py) appended chunks of {busy.chunk[0]:g} to "
        f"{busy.chunk[1]:g} MB (a random size each) to one file in the work folder and fsynced each, pacing "
        f"itself to {busy.rate:g} MB/s ({share(busy.rate, results.disk.achieved)} of the "
        f"{results.disk.achieved:,.0f} MB/s it synced unpaced, alone, before timing); the file was emptied "
        f"whenever it would pass {busy.cap:g} MB and removed when the writer stopped. It never bursts to "
        "catch up, so where the disk could not keep pace the achieved rate falls short of the one asked. The "
        "writer's fsync times are the range over the rounds of each round's p50 and p99. I/O wait is the "
        "share of the rounds' time in which some task waited for the disk (`some` in /proc/pressure/io), the "
        f"benchmark's own syncs included. After a busy round the disk was synced and left {busy.calm:g} s "
        "before the next quiet round.",
        "",
        *table(header, rows),
        "",
    ]


def _by_history(results: Results) -> list[str]:
    hs, sweep = results.histories, results.history_sweep
    header = ["command", "SDK µs", "durable SDK µs", *[f"{h:,} commits µs" for h in hs]]
    header += [f"{hs[-1]:,} vs {hs[0]:,} commits", *[f"ratio at {h:,}" for h in hs]]
    rows = []
    for c in COMMANDS:
        vms = [sweep.median(c, vault_at(h)) for h in hs]
        row = [c, us(sweep.median(c, SDK)), us(sweep.median(c, DURABLE)), *[us(v) for v in vms]]
        row.append(f"{vms[-1] / vms[0]:.2f}x")
        rows.append(row + [f"{sweep.paired(c, vault_at(h), SDK).median:.2f}x" for h in hs])
    return [
        f"## Per-command latency by history length ({sweep.files:,} files)",
        "",
        f"Medians per call, on a quiet disk ({sweep.calls():,} calls per command per backend). Commit counts "
        f"are as built; during the sweep each vault gains {sweep.mutations:,} more (one per mutating call). The "
        "SDK keeps no history: its column is one figure, measured interleaved with every vault. Ratios are "
        "medians of per-call ratios to the SDK.",
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


ELSEWHERE = [
    "",
    "## Measured on other pages",
    "",
    "- [startup.md](startup.md): how long each CLI command takes to start (`python bench/startup.py`).",
    "- [sync-speed.md](sync-speed.md): push and pull of 1 and 1,000 versions over `file://` and HTTP, a merge of",
    "  two histories that diverged by 100 versions each, and a tool call with automatic sync on and off",
    "  (`python bench/sync.py`).",
    "- [erasure-speed.md](erasure-speed.md): erasure: how fast `find` scans a history, what a key",
    "  per file version costs the write path against format 1 and what sealed names cost it against",
    "  plain names (quiet and busy, one run), and `forget` across 100,000 commits",
    "  (`python bench/erasure.py`).",
    "- [signing-speed.md](signing-speed.md): what signing adds to a `create` (quiet and busy, paired calls), one",
    "  signature, and `verify` of 100,000 signed commits (`python bench/signing.py`).",
    "- [mcp-speed.md](mcp-speed.md): a round trip of each memory command over MCP's stdio and streamable HTTP",
    "  against a direct `VaultMemoryTool.call` in the same run (`python bench/mcp_speed.py`).",
]


def erasure_tables(page: str) -> list[str]:
    """The tables of erasure-speed.md (its targets), under its own headings one
    level down, to be repeated on this page as that page last measured them."""
    lines = ["", "### Erasure targets, as [erasure-speed.md](erasure-speed.md) last measured them"]
    taken = False
    for line in page.splitlines():
        if line.startswith("## "):
            lines += ["", "##" + line, ""]
            taken = True
        elif taken and line.startswith("|"):
            lines.append(line)
    return lines if taken else []


def render(results: Results, erasure_page: str | None = None) -> str:
    """The whole page; with ``erasure_page`` (erasure-speed.md's text), its
    target tables too."""
    sections = [
        _header(results),
        _targets(results),
        _by_size(results),
        _busy(results),
        _by_history(results),
        _whole_history(results.ops),
        _opens(results),
        _memory(results),
        ELSEWHERE,
        erasure_tables(erasure_page) if erasure_page is not None else [],
    ]
    return "\n".join(line for section in sections for line in section) + "\n"


def printed(results: Results) -> list[str]:
    """The targets, for the run to print when it ends."""
    found = targets(results)
    width = max(len(t.target) for t in found)
    lines = [f"targets: {sum(t.met for t in found)} of {len(found)} met"]
    lines += [f"  {'met   ' if t.met else 'MISSED'}  {t.target:<{width}}  {t.measured}" for t in found]
    achieved = overall_achieved(results)
    if achieved is not None:
        lines.append(f"busy writer: {achieved:.1f} MB/s achieved of {results.busy.rate:g} MB/s asked")
    return lines
