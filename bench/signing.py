"""What signed commits cost: a write through the memory tool signed or not,
one signature on its own, and ``verify`` of a long signed history.

    python bench/signing.py [--rounds 5] [--calls 400] [--commits 100000] [--runs 3] [--out docs]
    python bench/signing.py --quick --out /tmp/x     # small sizes, to check the benchmark (under 30 s)

**The write path.** Two vaults of 1,000 files (one ``import`` commit each):
one with signers (an operator, and the tool's actor as a signer) written by a
``VaultMemoryTool`` given the actor's signing key, one with no signers and no
key.  In one process, each pair of calls is a ``create`` of the same new
1.4 KB file on each vault, one right after the other (A, B, A, B...; which
vault goes first alternates from pair to pair); after each pair the file is
deleted again on both, in the reverse order and untimed, so the vaults stay
at 1,000 files and neither side's calls follow different work.  Wall time
per call (time.perf_counter), and the calling thread's CPU time
(time.thread_time).  Reported, quiet and busy: each side's p50, the p50 of
the per-pair differences (signed minus unsigned, µs) with a 95% interval,
and of the per-pair ratios, each pooled over ``--rounds`` rounds of
``--calls`` pairs, with the spread of the rounds' own medians beside it.
Quiet and busy rounds alternate; a busy round runs beside another process
appending 1-4 MB chunks and fsyncing each, 64 MB/s asked (bench/busy.py), as
in benchmarks.md.
Target: signing adds at most 100 µs per commit at p50 (the p50 of the
per-pair differences), quiet and busy.

**The machine's noise.** The same rounds time a control: two more vaults,
both unsigned and built alike, paired the same way.  Their p50 difference is
what this machine shows between two identical writes; a signing cost inside
it is not measurable here.

**One signature.** ``SigningKey.sign`` of a create commit's bytes (taken
from the signed vault: about 400 bytes, seal included), and the check verify
makes of each signed commit (parse the signature, verify it, judge the
signer), p50 and p99 of many calls.

**verify.** A vault of ``--commits`` commits (100,000 by default): signers set
up, one signed ``import`` of 1,000 files through the library, then edits of
one file each (as bench/run.py's history vault: ``note 3:`` becomes ``note 3
[k]:``), one second apart.  Writing them one by one through the tool takes
minutes per history, so these commits are made as the vault makes them, in
bulk: each file version sealed with the vault's keyring
(``keyring.seal``), the trees encoded, the commit encoded by the commit path
(``vaultmem.git.commits.encode``) with the vault's seal and the signer's
``SigningKey.sign``, and the objects written as packs of 10,000 commits before
``main`` is moved to the last one.  The same history is built a second time
without signers and unsigned, and ``vault.verify()`` times both, alternately,
``--runs`` times each on a quiet disk.  Target: under 60 s for 100,000 signed
commits, with every commit's signature counted (``report.signed``) and no
finding.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pygit2

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from backends import BODY, FOLDERS, memory_path, write_memory_folder  # noqa: E402
from busy import BusyDisk, BusyReport  # noqa: E402
from machine import CPU_PRESSURE, cpu_pressure, io_pressure, io_stall, machine  # noqa: E402
from measure import percentile, positive  # noqa: E402

from vaultmem import SigningKey, Vault, VaultMemoryTool, generate_key  # noqa: E402
from vaultmem.core import paths  # noqa: E402
from vaultmem.core.signing import ENV_SIGNING_KEY, ENV_SIGNING_PASSPHRASE, split_signature  # noqa: E402
from vaultmem.core.versions import SEAL_HEADER, format_message  # noqa: E402
from vaultmem.git import commits as commit_path  # noqa: E402
from vaultmem.git import objects  # noqa: E402
from vaultmem.git.snapshot import root_tree  # noqa: E402
from vaultmem.repo.signed import commit_facts, judge  # noqa: E402

WRITE_TARGET = 100.0  # µs: the p50 of what signing adds to one commit
VERIFY_TARGET = 60.0  # seconds for 100,000 signed commits
VERIFY_COMMITS = 100_000  # the history the verify target is about
ACTOR = "bench"
OPERATOR = "ops"
PACK_COMMITS = 10_000  # commits per pack when building a long history
QUIET, BUSY = "quiet", "busy"
SIGNED, UNSIGNED, CONTROL_A, CONTROL_B = "signed", "unsigned", "control A", "control B"
BUSY_SECONDS = 900.0  # no busy round lasts this long: a writer still running then stops by itself

FULL = {"files": 1000, "rounds": 5, "calls": 400, "warmup": 20, "runs": 3, "samples": 2000, "commits": 100_000}
QUICK = {"files": 100, "rounds": 2, "calls": 15, "warmup": 3, "runs": 1, "samples": 200, "commits": 2_000}
BUSY_FULL = (64.0, (1.0, 4.0), 64.0)  # MB/s asked, chunk MB, cap MB (as bench/run.py and bench/erasure.py)
BUSY_QUICK = (8.0, (0.25, 0.5), 2.0)


def log(line: str) -> None:
    print(line, flush=True)


class Clock:
    """A clock the history build sets: its commits are one second apart."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def add_signers(vault: Vault, actor: str) -> SigningKey:
    """An operator adds themself, then ``actor`` as a signer; every commit
    made as ``actor`` is signed from then on.  Returns ``actor``'s key."""
    operator, writer = SigningKey.generate(), SigningKey.generate()
    vault.sign_as(OPERATOR, operator)
    vault.add_signer(OPERATOR, operator.public, actor=OPERATOR, operator=True)
    vault.add_signer(actor, writer.public, actor=OPERATOR)
    vault.sign_as(actor, writer)
    return writer


# -- the write path ------------------------------------------------------------------


@dataclass
class Side:
    """One vault of the write path and its tool."""

    name: str
    vault: Vault
    tool: VaultMemoryTool
    writer: SigningKey | None


def make_side(folder: Path, name: str, key: str, source: Path, files: int, signed: bool) -> Side:
    vault = Vault.init(folder / f"{name.replace(' ', '-')}.vault", key=key)
    writer = add_signers(vault, ACTOR) if signed else None
    imported = vault.import_folder(source, actor=ACTOR, session="build")
    if imported.files != files:
        raise RuntimeError(f"importing {source} recorded {imported.files} files, expected {files}")
    tool = VaultMemoryTool(vault, actor=ACTOR, session="bench", signing_key=writer)
    return Side(name, vault, tool, writer)


@dataclass
class Round:
    """One round of one scenario: per-call seconds of each side, call ``i``
    of one side paired with call ``i`` of the other."""

    scenario: str
    times: dict[str, list[float]]
    cpu: dict[str, list[float]]  # the calling thread's CPU time of the same calls
    seconds: float
    stalled: float | None  # seconds in which some task waited for I/O meanwhile
    waited: float | None  # seconds in which some task waited for a CPU meanwhile


def timed_create(side: Side, path: str) -> tuple[float, float]:
    """(wall seconds, the calling thread's CPU seconds) of one create."""
    params = {"command": "create", "path": path, "file_text": BODY}
    cpu, start = time.thread_time(), time.perf_counter()
    result = side.tool.call(params)
    elapsed, used = time.perf_counter() - start, time.thread_time() - cpu
    if not result.startswith(f"File created successfully at: {path}"):
        raise RuntimeError(f"{side.name}: create {path} returned {result!r}")
    return elapsed, used


def delete(side: Side, path: str) -> None:
    result = side.tool.call({"command": "delete", "path": path})
    if not result.startswith(f"Successfully deleted {path}"):
        raise RuntimeError(f"{side.name}: delete {path} returned {result!r}")


Timings = dict[str, list[float]]  # side -> seconds of each call


def pairs(a: Side, b: Side, tag: str, calls: int) -> tuple[Timings, Timings]:
    """``calls`` pairs: the same create on ``a`` and on ``b``, one right
    after the other, the first side alternating; then the file is deleted on
    both (in the reverse order), untimed.  Wall times and CPU times."""
    times: Timings = {a.name: [], b.name: []}
    cpu: Timings = {a.name: [], b.name: []}
    for i in range(calls):
        path = f"/memories/d{i % FOLDERS}/new-{tag}-{i}.txt"
        order = (a, b) if i % 2 == 0 else (b, a)
        for side in order:
            elapsed, used = timed_create(side, path)
            times[side.name].append(elapsed)
            cpu[side.name].append(used)
        for side in reversed(order):  # A B B A, then B A A B: each side's create follows the same calls
            delete(side, path)
    return times, cpu


def write_rounds(
    sides: dict[str, Side],
    rounds: int,
    calls: int,
    warmup: int,
    scenarios: Sequence[str],
    busy: Callable[[], BusyDisk],
) -> tuple[list[Round], list[BusyReport]]:
    """A warm-up round (quiet, unrecorded), then ``rounds`` rounds of each
    scenario, alternating; each round times ``calls`` pairs signed/unsigned,
    then ``calls`` pairs of the control vaults."""
    pairs(sides[SIGNED], sides[UNSIGNED], "warm", warmup)
    pairs(sides[CONTROL_A], sides[CONTROL_B], "warm", warmup)
    done: list[Round] = []
    writers: list[BusyReport] = []
    previous = QUIET
    for r in range(rounds):
        for scenario in scenarios:
            if scenario == QUIET and previous == BUSY:
                os.sync()  # the busy writer's data reaches the disk before a quiet round
                time.sleep(1.0)
            writer = busy() if scenario == BUSY else None
            with writer if writer is not None else contextlib.nullcontext():
                clock, stall, cpu = time.perf_counter(), io_stall(), io_stall(CPU_PRESSURE)
                tag = f"{scenario[0]}{r}"
                times, cpu_times = pairs(sides[SIGNED], sides[UNSIGNED], tag, calls)
                control, control_cpu = pairs(sides[CONTROL_A], sides[CONTROL_B], tag, calls)
                times.update(control)
                cpu_times.update(control_cpu)
                stall_end, cpu_end, seconds = io_stall(), io_stall(CPU_PRESSURE), time.perf_counter() - clock
            if writer is not None and writer.report is not None:
                writers.append(writer.report)
            stalled = None if stall is None or stall_end is None else stall_end - stall
            waited = None if cpu is None or cpu_end is None else cpu_end - cpu
            done.append(Round(scenario, times, cpu_times, seconds, stalled, waited))
            previous = scenario
            log(f"  {scenario} round {r + 1}/{rounds}: {seconds:.1f} s")
    return done, writers


@dataclass(frozen=True)
class Spread:
    """A pooled median (µs or a ratio) and the lowest and highest of the rounds' medians."""

    median: float
    low: float
    high: float


def spread(per_round: Sequence[Sequence[float]], scale: float = 1.0) -> Spread:
    pooled = [v for values in per_round for v in values]
    medians = [statistics.median(values) for values in per_round if values]
    return Spread(statistics.median(pooled) * scale, min(medians) * scale, max(medians) * scale)


def median_interval(values: Sequence[float]) -> tuple[float, float]:
    """A 95% confidence interval of the median of ``values`` (distribution
    free: the order statistics around the middle, by the binomial's normal
    approximation)."""
    ordered = sorted(values)
    n = len(ordered)
    half = 0.98 * math.sqrt(n)  # 1.96 standard deviations of a Binomial(n, 1/2), halved
    low = max(math.floor(n / 2 - half), 1)
    high = min(math.ceil(n / 2 + 1 + half), n)
    return ordered[low - 1], ordered[high - 1]


@dataclass(frozen=True)
class Paired:
    """Per-pair differences (first side minus second, µs): their pooled p50
    with the spread of the rounds' medians, a 95% interval of the pooled
    p50, and the pooled p25 and p75."""

    median: Spread
    interval: tuple[float, float]
    quartiles: tuple[float, float]


def paired(rounds: Sequence[Round], first: str, second: str, cpu: bool = False) -> Paired:
    table = [r.cpu if cpu else r.times for r in rounds]
    per_round = [[(a - b) * 1e6 for a, b in zip(t[first], t[second], strict=True)] for t in table]
    pooled = [d for values in per_round for d in values]
    return Paired(spread(per_round), median_interval(pooled), (percentile(pooled, 25), percentile(pooled, 75)))


@dataclass(frozen=True)
class WriteCost:
    """One scenario's numbers, in µs (the ratios excepted)."""

    scenario: str
    calls: int
    unsigned: Spread
    signed: Spread
    difference: Paired  # signed minus unsigned, wall time
    ratio: Spread  # signed over unsigned, per pair
    control: Paired  # control A minus control B, wall time
    cpu_unsigned: Spread  # the calling thread's CPU time
    cpu_signed: Spread
    cpu_difference: Paired
    cpu_control: Paired
    stall_share: float | None  # of the scenario's time, some task waited for I/O
    cpu_share: float | None  # of the scenario's time, some task waited for a CPU

    @property
    def met(self) -> bool:
        return self.difference.median.median <= WRITE_TARGET


def write_cost(rounds: Sequence[Round], scenario: str) -> WriteCost:
    mine = [r for r in rounds if r.scenario == scenario]
    ratios = [[s / u for s, u in zip(r.times[SIGNED], r.times[UNSIGNED], strict=True)] for r in mine]
    total = sum(r.seconds for r in mine)
    stalls, waits = [r.stalled for r in mine], [r.waited for r in mine]
    share = None if any(s is None for s in stalls) else sum(s or 0.0 for s in stalls) / total
    cpu_share = None if any(w is None for w in waits) else sum(w or 0.0 for w in waits) / total
    return WriteCost(
        scenario,
        sum(len(r.times[SIGNED]) for r in mine),
        spread([r.times[UNSIGNED] for r in mine], 1e6),
        spread([r.times[SIGNED] for r in mine], 1e6),
        paired(mine, SIGNED, UNSIGNED),
        spread(ratios),
        paired(mine, CONTROL_A, CONTROL_B),
        spread([r.cpu[UNSIGNED] for r in mine], 1e6),
        spread([r.cpu[SIGNED] for r in mine], 1e6),
        paired(mine, SIGNED, UNSIGNED, cpu=True),
        paired(mine, CONTROL_A, CONTROL_B, cpu=True),
        share,
        cpu_share,
    )


# -- one signature -------------------------------------------------------------------


@dataclass(frozen=True)
class BareCost:
    payload: int  # bytes signed
    samples: int
    sign_p50: float  # µs
    sign_p99: float
    check_p50: float  # µs: verify's check of one signed commit
    check_p99: float


def bare_cost(side: Side, samples: int) -> BareCost:
    """``SigningKey.sign`` of the last create commit's bytes, and verify's
    check of that commit, each ``samples`` times after a short warm-up."""
    assert side.writer is not None
    head = side.vault.repo.references["refs/heads/main"].target
    raw = b""
    for commit in side.vault.repo.walk(head):
        raw = bytes(side.vault.repo.odb.read(commit.id)[1])
        if b"Vaultmem-Command: create" in raw:
            break
    payload, signature = split_signature(raw)
    if signature is None:
        raise RuntimeError("the signed vault's create commit carries no signature")
    signers = side.vault.signers
    if judge(commit_facts(raw), signers) is not None:
        raise RuntimeError("the signed vault's create commit does not pass verify's check")
    signing, checking = [], []
    for _ in range(samples // 10):
        side.writer.sign(payload)
        judge(commit_facts(raw), signers)
    for _ in range(samples):
        start = time.perf_counter()
        side.writer.sign(payload)
        middle = time.perf_counter()
        judge(commit_facts(raw), signers)
        end = time.perf_counter()
        signing.append(middle - start)
        checking.append(end - middle)
    return BareCost(
        len(payload),
        samples,
        statistics.median(signing) * 1e6,
        percentile(signing, 99) * 1e6,
        statistics.median(checking) * 1e6,
        percentile(checking, 99) * 1e6,
    )


# -- a long history, built in bulk ---------------------------------------------------


@dataclass(frozen=True)
class Built:
    path: Path
    commits: int
    signed: bool
    seconds: float
    pack_bytes: int


def install_pack(gitdir: Path, pack: objects.Pack) -> int:
    """Write ``pack`` and its index into the vault's ``objects/pack``, read-only
    as vaultmem writes them, the index last.  Returns the pack's size."""
    stem = gitdir / "objects" / "pack" / f"pack-{pack.name}"
    for suffix, data in ((".pack", pack.data), (".idx", pack.idx)):
        temporary = stem.with_name(f"tmp-{stem.name}{suffix}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(temporary, stem.with_name(stem.name + suffix))
    return len(pack.data)


def read_object(vault: Vault, oid: bytes) -> bytes:
    return bytes(vault.repo.odb.read(pygit2.Oid(raw=oid))[1])


def tree_entries(vault: Vault, oid: bytes) -> dict[bytes, tuple[int, bytes]]:
    return objects.decode_tree(read_object(vault, oid))


def edits(commits: int, files: int) -> Iterator[tuple[int, str]]:
    """The history's edits after its import: file ``j`` gets ``note 3 [k]:``
    on its ``k``-th pass (as bench/backends.py's padding edits)."""
    for n in range(commits - 1):
        j, k = n % files, n // files
        yield j, BODY.replace("note 3:", f"note 3 [{k}]:", 1)


def build_history(folder: Path, key: str, commits: int, files: int, source: Path, signed: bool) -> Built:
    """A vault whose ``main`` holds ``commits`` commits: a signed (or
    unsigned) import of ``files`` files made by the library, then edits made
    in bulk exactly as the commit path makes them (see the module's text)."""
    started = time.perf_counter()
    path = folder / ("signed-history.vault" if signed else "unsigned-history.vault")
    clock = Clock(float(int(time.time()) - commits - 86_400))  # one commit a second, all in the past
    vault = Vault.init(path, key=key, clock=clock)
    try:
        writer = add_signers(vault, ACTOR) if signed else None
        vault.import_folder(source, actor=ACTOR, session="build")
        head = commit_path.read_ref(path, commit_path.MAIN_REF)
        assert head is not None
        tree_line = read_object(vault, head).split(b"\n", 1)[0]  # "tree <hex>"
        root = tree_entries(vault, bytes.fromhex(tree_line[5:].decode("ascii")))
        memories = tree_entries(vault, root[b"memories"][1])
        folders = {name: tree_entries(vault, oid) for name, (_, oid) in memories.items()}
        keyring = vault.keyring
    finally:
        vault.close()

    def seal(plain: bytes) -> list[tuple[bytes, bytes]]:
        return [(SEAL_HEADER, keyring.seal_commit(plain))]

    sign = writer.sign if writer is not None else None
    author = commit_path.ident(ACTOR, ACTOR)
    when = int(clock.now)
    parent = head
    batch: list[objects.PackedObject] = []
    size = 0
    for n, (j, text) in enumerate(edits(commits, files), 1):
        when += 1
        target = paths.parse(memory_path(j))
        blob = objects.packed(objects.BLOB, keyring.seal(target.text, text.encode("utf-8"), when))
        name = f"d{j % FOLDERS}".encode()
        entries = folders[name]
        entries[f"f{j}.txt".encode()] = (objects.MODE_BLOB, blob.id)
        sub = objects.packed(objects.TREE, objects.encode_tree(entries))
        memories[name] = (objects.MODE_TREE, sub.id)
        mem = objects.packed(objects.TREE, objects.encode_tree(memories))
        top, _ = root_tree(mem.id, sealed=False, marker_known=False)
        message = format_message("str_replace", (target,), ACTOR, "build", [])
        draft = commit_path.Draft(top.id, [parent], author, when, message)
        commit = commit_path.encode(draft, seal, sign)
        batch += [blob, sub, mem, top, commit]
        parent = commit.id
        if n % PACK_COMMITS == 0 or n == commits - 1:
            size += install_pack(path, objects.build_pack(batch))
            batch = []
            if commits >= 10 * PACK_COMMITS:
                log(f"  {path.name}: {n + 1:,} / {commits:,} commits, {time.perf_counter() - started:.0f} s")
    ref = path / "refs" / "heads" / "main"
    temporary = ref.with_name("main.bench")
    temporary.write_text(parent.hex() + "\n", encoding="ascii")
    os.replace(temporary, ref)
    return Built(path, commits, signed, time.perf_counter() - started, size)


@dataclass(frozen=True)
class VerifyRun:
    seconds: float
    cpu: float  # the calling thread's CPU seconds
    commits: int
    signed: int
    unsigned: int
    problems: tuple[str, ...]


def time_verify(built: Built, key: str) -> VerifyRun:
    with Vault.open(built.path, key=key) as vault:
        cpu, start = time.thread_time(), time.perf_counter()
        report = vault.verify()
        seconds, used = time.perf_counter() - start, time.thread_time() - cpu
    return VerifyRun(seconds, used, report.commits, report.signed, report.unsigned, tuple(report.problems))


# -- the page --------------------------------------------------------------------------


def shown(value: Spread, digits: int = 0, many: bool = True) -> str:
    text = f"{value.median:,.{digits}f}"
    return text + (f" ({value.low:,.{digits}f} to {value.high:,.{digits}f})" if many else "")


@dataclass
class Results:
    argv: list[str]
    quick: bool
    rounds: int
    calls: int
    warmup: int
    files: int
    runs: int
    busy: tuple[float, tuple[float, float], float]
    machine: list[tuple[str, str]]
    started: datetime
    pressure: str | None
    cpu_pressure: str | None
    load: str
    costs: list[WriteCost] = field(default_factory=list)
    writers: list[BusyReport] = field(default_factory=list)
    bare: BareCost | None = None
    built: list[Built] = field(default_factory=list)
    verifies: dict[bool, list[VerifyRun]] = field(default_factory=dict)
    seconds: float = 0.0


def verify_verdict(results: Results) -> tuple[float, str]:
    """The median seconds of verify on the signed history, and the verdict:
    met, missed, or not judged (a history shorter than the target's)."""
    runs = results.verifies[True]
    median = statistics.median(r.seconds for r in runs)
    commits = runs[0].commits
    clean = all(not r.problems and r.signed == r.commits == commits for r in runs)
    if commits < VERIFY_COMMITS:
        return median, f"not judged: {commits:,} commits"
    return median, "met" if clean and median < VERIFY_TARGET else "missed"


def render(results: Results) -> str:
    many = results.rounds > 1
    rate, chunk, cap = results.busy
    lines = [
        "# Signing speed",
        "",
        f"Written by `{' '.join(['python bench/signing.py', *results.argv])}` (see its docstring for the method);",
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
        f"| run length | {results.seconds / 60:.0f} min {results.seconds % 60:.0f} s |",
    ]
    if results.writers:
        achieved = statistics.median(w.achieved for w in results.writers)
        lines.append(
            f"| busy disk | another process appending {chunk[0]:g}-{chunk[1]:g} MB chunks (file capped at {cap:g} MB) "
            f"and fsyncing each, {rate:g} MB/s asked; achieved {achieved:.1f} MB/s (median of "
            f"{len(results.writers)} busy rounds) |"
        )
    lines += ["", "## Targets", "", "| target | measured | result |", "|---|---|---|"]
    for cost in results.costs:
        low, high = cost.difference.interval
        lines.append(
            f"| signing adds at most {WRITE_TARGET:.0f} µs per commit at p50, {cost.scenario} disk | "
            f"{cost.difference.median.median:,.0f} µs, p50 of {cost.calls:,} per-pair differences (95% interval "
            f"{low:,.0f} to {high:,.0f}; CPU time: {cost.cpu_difference.median.median:,.0f} µs) | "
            f"{'met' if cost.met else '**missed**'} |"
        )
    if results.verifies:
        median, verdict = verify_verdict(results)
        run = results.verifies[True][0]
        lines.append(
            f"| verify of {VERIFY_COMMITS:,} signed commits under {VERIFY_TARGET:.0f} s | {median:.1f} s for "
            f"{run.commits:,} commits, {run.signed:,} signatures counted, "
            f"{'ok' if not run.problems else f'{len(run.problems)} findings'} "
            f"| {'**missed**' if verdict == 'missed' else verdict} |"
        )

    def interval(pair: Paired) -> str:
        return f"{pair.interval[0]:,.0f} to {pair.interval[1]:,.0f}"

    def quartiles(pair: Paired) -> str:
        return f"{pair.quartiles[0]:,.0f} to {pair.quartiles[1]:,.0f}"

    lines += [
        "",
        "## The write path",
        "",
        f"`create` of a new 1.4 KB file through `VaultMemoryTool` on two vaults of {results.files:,} files, one with",
        "signers and the actor's signing key, one with neither: the same call on each, one right after the",
        f"other (the first side alternating), {results.rounds} round(s) x {results.calls} pairs per scenario after "
        f"{results.warmup} warm-up pairs, quiet and",
        "busy rounds alternating, each file deleted again (untimed) after its pair. Wall time in µs; in",
        "brackets, the lowest and highest of the rounds' own medians; the 95% interval is that of the",
        "pooled p50 of the differences (from the order statistics around it).",
        "",
        "| disk | calls a side | p50 unsigned | p50 signed | p50 of the differences | 95% interval "
        "| p25 to p75 of the differences | p50 of the ratios | target | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for cost in results.costs:
        lines.append(
            f"| {cost.scenario} | {cost.calls:,} | {shown(cost.unsigned, 0, many)} | {shown(cost.signed, 0, many)} "
            f"| {shown(cost.difference.median, 0, many)} | {interval(cost.difference)} "
            f"| {quartiles(cost.difference)} | {shown(cost.ratio, 3, many)} | at most {WRITE_TARGET:.0f} µs "
            f"| {'met' if cost.met else 'missed'} |"
        )
    lines += [
        "",
        "Each side's p50 moves with how many of its calls other processes held up, so the difference of",
        "the two p50s is noisier than the p50 of the per-pair differences, which the target reads.",
        "",
        "### CPU time",
        "",
        "The same calls, timed by the calling thread's CPU time (`time.thread_time`): the work the call",
        "did itself, which waiting for a CPU or the disk does not add to. µs.",
        "",
        "| disk | p50 unsigned | p50 signed | p50 of the differences | 95% interval | p25 to p75 of the differences |",
        "|---|---|---|---|---|---|",
    ]
    for cost in results.costs:
        lines.append(
            f"| {cost.scenario} | {shown(cost.cpu_unsigned, 0, many)} | {shown(cost.cpu_signed, 0, many)} "
            f"| {shown(cost.cpu_difference.median, 0, many)} | {interval(cost.cpu_difference)} "
            f"| {quartiles(cost.cpu_difference)} |"
        )
    lines += [
        "",
        "### The machine's noise",
        "",
        "In the same rounds, the same pairs on two more vaults, both unsigned and built alike (control A",
        "minus control B): what this machine shows between two identical writes. µs. The share of each",
        "scenario's time in which some task waited for I/O, or for a CPU, is from /proc/pressure.",
        "",
        "| disk | p50 of the differences | 95% interval | p25 to p75 | CPU time: p50 of the differences "
        "| 95% interval | some task waited for I/O | for a CPU |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for cost in results.costs:
        io = "not reported" if cost.stall_share is None else f"{cost.stall_share:.0%}"
        cpu = "not reported" if cost.cpu_share is None else f"{cost.cpu_share:.0%}"
        lines.append(
            f"| {cost.scenario} | {shown(cost.control.median, 0, many)} | {interval(cost.control)} "
            f"| {quartiles(cost.control)} | {shown(cost.cpu_control.median, 0, many)} | {interval(cost.cpu_control)} "
            f"| {io} | {cpu} |"
        )
    if results.bare is not None:
        bare = results.bare
        lines += [
            "",
            "## One signature",
            "",
            f"{bare.samples:,} calls each, µs: `SigningKey.sign` of a create commit's {bare.payload} bytes (seal",
            "included), and what verify does for each signed commit (read its signature, check it, judge the",
            "signer at the commit's time).",
            "",
            "| operation | p50 (µs) | p99 (µs) |",
            "|---|---|---|",
            f"| `SigningKey.sign` ({bare.payload} bytes) | {bare.sign_p50:,.1f} | {bare.sign_p99:,.1f} |",
            f"| verify's check of one signed commit | {bare.check_p50:,.1f} | {bare.check_p99:,.1f} |",
        ]
    if results.verifies:
        signed_runs, unsigned_runs = results.verifies[True], results.verifies[False]
        commits = signed_runs[0].commits
        lines += [
            "",
            "## verify",
            "",
            f"`vault.verify()` of a history of {commits:,} commits of one file each ({results.files:,} files), "
            "built in bulk",
            "(see the docstring), signed and, for comparison, the same history unsigned in a vault without",
            f"signers; {results.runs} run(s) of each, alternating, quiet disk, after the build was synced to disk.",
            "",
            "| vault | commits | signatures counted | seconds | CPU seconds | findings | target | verdict |",
            "|---|---|---|---|---|---|---|---|",
        ]
        median, verdict = verify_verdict(results)

        def seconds(values: Sequence[float]) -> str:
            middle = f"{statistics.median(values):.1f}"
            return middle + (f" ({min(values):.1f} to {max(values):.1f})" if len(values) > 1 else "")

        for runs, name in ((signed_runs, "signed"), (unsigned_runs, "unsigned, no signers")):
            found = len(runs[-1].problems)
            target, judged = (f"under {VERIFY_TARGET:.0f} s", verdict) if runs is signed_runs else ("", "")
            lines.append(
                f"| {name} | {runs[0].commits:,} | {runs[0].signed:,} | {seconds([r.seconds for r in runs])} "
                f"| {seconds([r.cpu for r in runs])} | {found or 'none'} | {target} | {judged} |"
            )
        added = median - statistics.median(r.seconds for r in unsigned_runs)
        cpu_added = statistics.median(r.cpu for r in signed_runs) - statistics.median(r.cpu for r in unsigned_runs)
        lines += [
            "",
            "CPU seconds are the calling thread's (`time.thread_time`): what verify did itself, without the",
            f"time it waited for a CPU or the disk. Checking the signatures added {cpu_added:.1f} s of CPU time",
            f"({cpu_added / commits * 1e6:,.0f} µs per commit) and {added:.1f} s of wall time (the difference of",
            "the medians).",
            "",
            "| history | commits | built in (s) | packs (MB) |",
            "|---|---|---|---|",
        ]
        for built in results.built:
            lines.append(
                f"| {'signed' if built.signed else 'unsigned'} | {built.commits:,} | {built.seconds:.0f} "
                f"| {built.pack_bytes / 1e6:,.0f} |"
            )
        if any(r.problems for r in signed_runs + unsigned_runs):
            lines += ["", "Findings of the last run:", ""]
            for runs in (signed_runs, unsigned_runs):
                lines += [f"- {problem}" for problem in runs[-1].problems[:10]]
    lines.append("")
    return "\n".join(lines)


# -- the run ---------------------------------------------------------------------------


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python bench/signing.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="docs", help="folder for signing-speed.md (default: docs)")
    parser.add_argument("--quick", action="store_true", help="small sizes, one verify run: a smoke run (under 30 s)")
    parser.add_argument("--rounds", type=positive, help="rounds per scenario, quiet and busy (default 5; quick 2)")
    parser.add_argument("--calls", type=positive, help="pairs of create calls per round (default 400; quick 15)")
    parser.add_argument("--commits", type=positive, help="commits of the verify history (default 100,000; quick 2,000)")
    parser.add_argument("--runs", type=positive, help="verify runs of each history (default 3; quick 1)")
    parser.add_argument("--work", help="where to build the vaults (default: a temporary folder)")
    args = parser.parse_args(argv)
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    if args.commits < 2:
        parser.error("--commits needs at least 2: the import and one edit")
    return args


def measure(args: argparse.Namespace, work: Path) -> Results:
    rate, chunk, cap = BUSY_QUICK if args.quick else BUSY_FULL
    results = Results(
        args.argv,
        args.quick,
        args.rounds,
        args.calls,
        args.warmup,
        args.files,
        args.runs,
        (rate, chunk, cap),
        machine(work),
        datetime.now(timezone.utc),
        io_pressure(),
        cpu_pressure(),
        ", ".join(f"{load:.2f}" for load in os.getloadavg()),
    )
    clock = time.perf_counter()
    key = generate_key()
    source = work / "source"
    write_memory_folder(source, args.files)

    log(f"the write path: four vaults of {args.files:,} files")
    sides = {
        name: make_side(work, name, key, source, args.files, signed=name == SIGNED)
        for name in (SIGNED, UNSIGNED, CONTROL_A, CONTROL_B)
    }
    try:
        os.sync()
        log(f"timing: {args.rounds} quiet and {args.rounds} busy rounds x {args.calls} pairs, two pairings")
        rounds, results.writers = write_rounds(
            sides,
            args.rounds,
            args.calls,
            args.warmup,
            (QUIET, BUSY),
            lambda: BusyDisk(work, rate, chunk, cap, BUSY_SECONDS),
        )
        results.costs = [write_cost(rounds, scenario) for scenario in (QUIET, BUSY)]
        for cost in results.costs:
            log(
                f"{cost.scenario} disk: p50 unsigned {cost.unsigned.median:,.0f} µs, signed {cost.signed.median:,.0f} "
                f"µs; signing adds {cost.difference.median.median:,.0f} µs ({cost.ratio.median:.3f}x; CPU time "
                f"{cost.cpu_difference.median.median:,.0f} µs); control {cost.control.median.median:,.0f} µs"
            )
        results.bare = bare_cost(sides[SIGNED], args.samples)
        log(f"SigningKey.sign of {results.bare.payload} bytes: p50 {results.bare.sign_p50:.1f} µs")
    finally:
        for side in sides.values():
            side.vault.close()

    log(f"verify: building two histories of {args.commits:,} commits")
    for signed in (True, False):
        built = build_history(work, key, args.commits, args.files, source, signed)
        results.built.append(built)
        log(f"  built {built.path.name} in {built.seconds:.0f} s")
    os.sync()
    results.verifies = {True: [], False: []}
    for run in range(args.runs):
        for built in results.built:
            found = time_verify(built, key)
            results.verifies[built.signed].append(found)
            log(
                f"  verify {built.path.name} ({run + 1}/{args.runs}): {found.seconds:.1f} s, "
                f"{found.commits:,} commits, {found.signed:,} signed, {len(found.problems)} findings"
            )
    results.seconds = time.perf_counter() - clock
    return results


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    for name in (ENV_SIGNING_KEY, ENV_SIGNING_PASSPHRASE):
        os.environ.pop(name, None)  # the unsigned tools must not pick a key up from the environment
    with contextlib.ExitStack() as stack:
        if args.work is not None:
            work = Path(args.work).resolve()
            work.mkdir(parents=True, exist_ok=True)
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vaultmem-signing-", dir=work)))
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vaultmem-signing-bench-")))
        results = measure(args, work)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    page = out / "signing-speed.md"
    page.write_text(render(results), encoding="utf-8")
    median, verdict = verify_verdict(results)
    log(f"verify of {results.verifies[True][0].commits:,} signed commits: {median:.1f} s ({verdict})")
    log(f"wrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
