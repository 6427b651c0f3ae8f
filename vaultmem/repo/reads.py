"""When each memory file was last read or written: the log expiry consults,
kept outside the history in ``<vault>/vaultmem/reads`` (docs on
:mod:`vaultmem.ops.expiry`).  Disposable: a lost log loses no memory."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path

from vaultmem.git import durable

READS_FILE = "reads"
GRANULARITY = 60  # seconds: a path's reads closer together than this are logged once
COMPACT_AT = 1 << 20  # bytes: past this, an expire run rewrites the log with one line per file
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class ReadLog:
    """When each memory file was last read or written (outside the history)."""

    def __init__(self, gitdir: Path, stored: Callable[[str], str] = str) -> None:
        self.path = gitdir / durable.STATE_DIR / READS_FILE
        # How a path is written to the log: a vault with sealed names logs
        # tokens, so the log never holds a real name.
        self.stored = stored
        self._noted: dict[str, int] = {}
        self._lock = threading.Lock()

    def note(self, paths: list[str], when: float, always: bool = False) -> None:
        """Record use of ``paths`` at ``when``; best effort (the log is disposable)."""
        moment = int(when)
        paths = [self.stored(p) for p in paths]
        with self._lock:
            fresh = [p for p in paths if always or moment - self._noted.get(p, -GRANULARITY) >= GRANULARITY]
            for p in fresh:
                self._noted[p] = moment
        if not fresh:
            return
        data = "".join(f"{moment}\t{p}\n" for p in fresh).encode("utf-8")
        with contextlib.suppress(OSError):
            fd = os.open(self.path, _APPEND, 0o600)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)

    def load(self) -> dict[str, int]:
        """The latest time logged for each path, as :attr:`stored` spells it
        (malformed lines are skipped)."""
        latest: dict[str, int] = {}
        try:
            raw = self.path.read_bytes()
        except OSError:
            return latest
        for line in raw.decode("utf-8", "replace").splitlines():
            moment, sep, path = line.partition("\t")
            if not sep or not moment.isdigit() or (path != "/memories" and not path.startswith("/memories/")):
                continue
            if int(moment) > latest.get(path, -1):
                latest[path] = int(moment)
        return latest

    def restate(self) -> None:
        """Rewrite the log with every path as :attr:`stored` spells it now
        (once a vault seals its names, so no real name stays in it).  Best
        effort, like the log itself."""
        latest = self.load()
        if not latest:
            return
        keep: dict[str, int] = {}
        for path, moment in latest.items():
            stored = self.stored(path)
            keep[stored] = max(moment, keep.get(stored, -1))
        self._rewrite(keep)

    def compact(self, keep: dict[str, int]) -> None:
        """Rewrite the log as one line per path in ``keep`` once it is large.  Best
        effort: a read logged by another process meanwhile may be dropped."""
        if not self.path.exists() or self.path.stat().st_size < COMPACT_AT:
            return
        self._rewrite(keep)

    def _rewrite(self, keep: dict[str, int]) -> None:
        tmp = self.path.with_name(READS_FILE + ".new")
        with contextlib.suppress(OSError):
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.writelines(f"{moment}\t{path}\n" for path, moment in sorted(keep.items()))
            os.replace(tmp, self.path)
