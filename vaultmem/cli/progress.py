"""Progress on a terminal: a bar for long commands (``verify``, ``key rotate
--reencrypt``) and a spinner while ``vaultmem chat`` waits for Claude.

Library functions take ``progress: Callable[[int, int], None] | None`` and call
it with ``(done, total)``; a :class:`ProgressBar` is such a callable.  It draws
``label [#####     ] 42/100`` on one line, redrawn with ``\\r``, and only when
its stream is a terminal: piped or redirected output stays free of control
characters, so scripts and logs see only the command's result.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import TextIO

WIDTH = 30


def render(label: str, done: int, total: int, width: int = WIDTH, columns: int | None = None) -> str:
    """The bar's text for ``done`` of ``total`` (pure, for tests and drawing).

    With ``columns`` (the terminal's width), the line stays shorter than
    that: the bar narrows, then gives way to ``label 3/9`` alone, so that
    each ``\r`` redraws one line instead of wrapping onto a new one."""
    done = max(0, min(done, total)) if total > 0 else 0
    count = f"{done}/{max(total, 0)}"
    if columns is not None:
        room = columns - 1 - len(label) - len(count) - 4  # "label [" ... "] count", and the last column free
        if room < MIN_WIDTH:
            return f"{label} {count}"[: max(columns - 1, 0)]
        width = min(width, room)
    filled = width if total <= 0 else done * width // total
    return f"{label} [{'#' * filled}{' ' * (width - filled)}] {count}"


MIN_WIDTH = 5  # narrower than this, a bar says nothing the count does not


def columns_of(stream: TextIO) -> int | None:
    """How many columns the terminal behind ``stream`` has (None if unknown)."""
    try:
        size = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return None
    return size if size > 0 else None


class ProgressBar:
    """Draws on ``stream`` (standard error by default) if it is a terminal.

    Use it as a context manager, so the line is ended (or cleared) when the
    work finishes or fails::

        with ProgressBar("verify") as bar:
            report = vault.verify(progress=bar)
    """

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.label = label
        self.stream = sys.stderr if stream is None else stream
        self.enabled = is_terminal(self.stream)
        self.drawn = False
        self._last = ""

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        columns = columns_of(self.stream)
        line = render(self.label, done, total, columns=columns)
        if line == self._last:
            return
        # Spaces over what a longer line drawn before left (the terminal was narrowed meanwhile).
        pad = min(len(self._last), columns - 1 if columns else len(self._last)) - len(line)
        self._last = line
        self.stream.write("\r" + line + " " * max(pad, 0))
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        """End the bar's line, so what follows starts on a fresh one."""
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


SPINNER_FRAMES = "|/-\\"


class Spinner:
    """``label`` with a turning bar on one line of ``stream`` (standard error by
    default) while a block runs, cleared when it ends; nothing at all unless the
    stream is a terminal.  Drawn from a background thread every ``interval``
    seconds, so the waiting code needs no changes::

        with Spinner("waiting for Claude"):
            message = next(runner)
    """

    def __init__(self, label: str, stream: TextIO | None = None, interval: float = 0.1) -> None:
        self.label = label
        self.stream = sys.stderr if stream is None else stream
        self.interval = interval
        self.enabled = is_terminal(self.stream)
        self.frames = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _spin(self) -> None:
        drawn = 0
        while True:
            frame = SPINNER_FRAMES[self.frames % len(SPINNER_FRAMES)]
            columns = columns_of(self.stream)
            limit = columns - 1 if columns else None  # the line never reaches the last column, so never wraps
            line = f"{frame} {self.label}"[:limit]
            pad = (drawn if limit is None else min(drawn, limit)) - len(line)
            self.stream.write("\r" + line + " " * max(pad, 0))
            drawn = len(line)
            self.stream.flush()
            self.frames += 1
            if self._stop.wait(self.interval):
                break
        self.stream.write("\r" + " " * drawn + "\r")
        self.stream.flush()

    def __enter__(self) -> Spinner:
        if self.enabled:
            self._stop.clear()
            self._thread = threading.Thread(target=self._spin, name="vaultmem-spinner", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal (False for a closed or unusual stream)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream
        return False
