"""A busy disk: another process writing and syncing steadily to the file
system being measured, as other programs on a user's machine do.

    python bench/busy.py FOLDER [--rate MB/s] [--chunk MIN,MAX] [--cap MB] [--seconds S]

The writer appends a chunk of MIN to MAX MB (a random size each time) to one
file in FOLDER, fsyncs it, then waits until the next chunk is due, so that on
average it writes ``--rate`` MB a second.  When the disk cannot keep up it
writes chunk after chunk without waiting, and never bursts to catch up.  It is
bounded: the file is emptied whenever it would grow past ``--cap`` MB, and the
writer stops by itself after ``--seconds``.

It announces itself with one JSON line on stdout once its first chunk is
synced (``{"file": ...}``), and stops when a line ``stop`` arrives on stdin,
when stdin closes (the parent died: the pipe's other end closed with it), when
its parent changes, on SIGTERM or SIGINT, or at its time limit.  Whatever
stopped it, it removes its file and prints a last JSON line: bytes written,
chunks, syncs, seconds, the fsyncs' own p50 and p99, and why it stopped.

:class:`BusyDisk` runs it as a child process for the benchmark.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import select
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

MB = 1 << 20
PAGE = 4096
RATE = 32.0  # MB/s, about an eighth of what the benchmark's disk syncs when nothing else runs
CHUNK = (1.0, 4.0)  # MB
CAP = 64.0  # MB
SECONDS = 600.0
UNPACED = 1e9  # MB/s: a rate no disk reaches, so the writer never waits
READY_WITHIN = 30.0  # seconds the parent waits for the first synced chunk
STOP_WITHIN = 30.0  # seconds the parent waits for the writer to stop before killing it


def nearest_rank(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(math.ceil(round(q * len(ordered) / 100, 9)), 1) - 1]


# -- the writer (the child process) ---------------------------------------------


class Stop(Exception):
    """Raised by the signal handler: stop writing, clean up, report."""


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise Stop(signal.Signals(signum).name)


def _wait(seconds: float, parent: int) -> str | None:
    """Sleep up to ``seconds`` (0: just look), waking at once if told to stop:
    a line on stdin, stdin closed, or a new parent.  Returns why, or None."""
    if os.getppid() != parent:
        return "parent gone"
    readable, _, _ = select.select([sys.stdin], [], [], max(seconds, 0.0))
    if readable:
        line = sys.stdin.readline()
        return "parent gone" if line == "" else "asked to stop"
    return None


def _say(message: dict[str, Any]) -> bool:
    """One JSON line on stdout; False when nobody reads it any more."""
    try:
        print(json.dumps(message), flush=True)
        return True
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the exit's flush does not fail again
        os.close(devnull)
        return False


def write(folder: Path, rate: float, chunk: tuple[float, float], cap: float, seconds: float, seed: int) -> int:
    """The writer's loop (run in the child process; see the module's text)."""
    parent = os.getppid()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _on_signal)
    low, high = (max(PAGE, round(c * MB) // PAGE * PAGE) for c in chunk)
    limit = max(high, round(cap * MB))
    pick = random.Random(seed)
    data = memoryview(random.Random(seed + 1).randbytes(high))  # incompressible, made once
    path = folder / f"busy-{os.getpid()}.bin"
    written = chunks = syncs = size = 0
    sync_times: list[float] = []
    reason = "time limit"
    started = time.monotonic()
    deadline = started + seconds
    due = started
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        try:
            while time.monotonic() < deadline:
                n = pick.randrange(low, high + 1, PAGE)
                if size + n > limit:
                    os.ftruncate(fd, 0)
                    os.lseek(fd, 0, os.SEEK_SET)
                    size = 0
                done = 0
                while done < n:
                    done += os.write(fd, data[done:n])
                begin = time.monotonic()
                os.fsync(fd)
                sync_times.append(time.monotonic() - begin)
                written, chunks, syncs, size = written + n, chunks + 1, syncs + 1, size + n
                if chunks == 1 and not _say({"file": str(path), "pid": os.getpid()}):
                    reason = "parent gone"
                    break
                now = time.monotonic()
                due = max(due + n / (rate * MB), now)  # never owe more than the chunk just written
                stop = _wait(min(due, deadline) - now, parent)
                if stop is not None:
                    reason = stop
                    break
        except Stop as signalled:
            reason = str(signalled)
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)  # nothing interrupts the clean-up
        elapsed = time.monotonic() - started
        os.close(fd)
        path.unlink(missing_ok=True)
    _say(
        {
            "bytes": written,
            "chunks": chunks,
            "syncs": syncs,
            "seconds": elapsed,
            "sync_p50": nearest_rank(sync_times, 50),
            "sync_p99": nearest_rank(sync_times, 99),
            "reason": reason,
        }
    )
    return 0


# -- the parent's handle -------------------------------------------------------------


class BusyError(RuntimeError):
    """The writer did not start, or stopped before it was asked to."""


@dataclass(frozen=True)
class BusyReport:
    """What one writer did while it ran."""

    rate: float  # MB/s asked for
    bytes: int
    chunks: int
    syncs: int
    seconds: float
    sync_p50: float  # seconds one fsync of a chunk took
    sync_p99: float
    reason: str

    @property
    def achieved(self) -> float:
        """MB/s written and synced."""
        return self.bytes / MB / self.seconds if self.seconds > 0 else 0.0


class BusyDisk:
    """The busy writer as a context manager: ``with BusyDisk(folder) as busy:``
    starts it and returns once its first chunk is synced; leaving the block
    stops it, waits for it, removes its file if it could not, and sets
    ``busy.report``.  A writer that stopped before it was asked to is an error
    (whatever ran meanwhile was not measured on a busy disk)."""

    def __init__(
        self,
        folder: Path,
        rate: float = RATE,
        chunk: tuple[float, float] = CHUNK,
        cap: float = CAP,
        seconds: float = SECONDS,
        seed: int = 0,
    ) -> None:
        self.folder = Path(folder)
        self.rate, self.chunk, self.cap, self.seconds, self.seed = rate, chunk, cap, seconds, seed
        self.process: subprocess.Popen[str] | None = None
        self.file: Path | None = None
        self.report: BusyReport | None = None

    def command(self) -> list[str]:
        return [
            sys.executable,
            str(Path(__file__).resolve()),
            str(self.folder),
            "--rate",
            repr(self.rate),
            "--chunk",
            f"{self.chunk[0]!r},{self.chunk[1]!r}",
            "--cap",
            repr(self.cap),
            "--seconds",
            repr(self.seconds),
            "--seed",
            str(self.seed),
        ]

    def start(self) -> BusyDisk:
        self.process = subprocess.Popen(
            self.command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        readable, _, _ = select.select([self.process.stdout], [], [], READY_WITHIN)
        line = self.process.stdout.readline() if readable else ""
        try:
            self.file = Path(json.loads(line)["file"])
        except (ValueError, KeyError, TypeError):
            out, err = self._end()
            self.process = None
            raise BusyError(f"the busy writer did not start: {(line + out + err).strip()!r}") from None
        return self

    def _end(self) -> tuple[str, str]:
        """Stop the writer, however it takes, and remove its file; return what
        it printed (after its first line) on stdout and on stderr."""
        process = self.process
        if process is None:
            return "", ""
        try:
            out, err = process.communicate("stop\n", timeout=STOP_WITHIN)
        except (subprocess.TimeoutExpired, BrokenPipeError, ValueError):
            process.kill()
            out, err = process.communicate()
        if self.file is not None:
            self.file.unlink(missing_ok=True)
        return out or "", err or ""

    def stop(self) -> BusyReport:
        """Stop the writer and return what it did."""
        if self.process is None:
            raise BusyError("the busy writer was never started")
        early = self.process.poll() is not None
        out, err = self._end()
        self.process = None
        lines = [line for line in out.splitlines() if line.strip()]
        try:
            found: dict[str, Any] = json.loads(lines[-1])
            self.report = BusyReport(
                self.rate,
                int(found["bytes"]),
                int(found["chunks"]),
                int(found["syncs"]),
                float(found["seconds"]),
                float(found["sync_p50"]),
                float(found["sync_p99"]),
                str(found["reason"]),
            )
        except (IndexError, ValueError, KeyError, TypeError):
            raise BusyError(f"the busy writer ended without its report: {(out + err).strip()!r}") from None
        if early or self.report.reason != "asked to stop":
            raise BusyError(f"the busy writer stopped before it was asked to ({self.report.reason})")
        return self.report

    def __enter__(self) -> BusyDisk:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self.process is None:
            return
        if kind is None:
            self.stop()
        else:  # the block failed: stop quietly and let its error through
            self._end()
            self.process = None


def unpaced(folder: Path, seconds: float, chunk: tuple[float, float] = CHUNK, cap: float = CAP) -> BusyReport:
    """What the disk syncs of such writes with nothing holding the writer
    back: the writer, unpaced, for ``seconds``."""
    writer = BusyDisk(folder, UNPACED, chunk, cap, seconds=max(10 * seconds, SECONDS))
    with writer:
        time.sleep(seconds)
    assert writer.report is not None
    return writer.report


# -- the command line -----------------------------------------------------------------


def _chunk(text: str) -> tuple[float, float]:
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected MIN,MAX in MB, got {text!r}") from err
    if not 0 < low <= high:
        raise argparse.ArgumentTypeError(f"expected 0 < MIN <= MAX, got {text!r}")
    return low, high


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from err
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected more than 0, got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python bench/busy.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folder", type=Path, help="where to write (its file system is the one made busy)")
    parser.add_argument("--rate", type=_positive, default=RATE, help=f"MB a second (default {RATE:g})")
    parser.add_argument("--chunk", type=_chunk, default=CHUNK, help="MIN,MAX MB per write (default 1,4)")
    parser.add_argument("--cap", type=_positive, default=CAP, help=f"largest size of the file, MB (default {CAP:g})")
    parser.add_argument("--seconds", type=_positive, default=SECONDS, help=f"time limit (default {SECONDS:g})")
    parser.add_argument("--seed", type=int, default=0, help="seed of the chunk sizes")
    args = parser.parse_args(argv)
    return write(args.folder, args.rate, args.chunk, args.cap, args.seconds, args.seed)


if __name__ == "__main__":
    sys.exit(main())
