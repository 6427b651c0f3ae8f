"""Progress on a terminal: a bar for long commands (``verify``, ``key rotate
--reencrypt``) and a spinner while ``vaultmem chat`` waits for Claude.

Library functions take ``progress: Callable[[int, int], None] | None`` and call
it with ``(done, total)``; a :class:`ProgressBar` is such a callable.  It draws
``label [#####     ] 42/100`` on one line, redrawn with ``\\r``, and only when
its stream is a terminal: piped or redirected output stays free of control
characters, so scripts and logs see only the command's result.
"""

from __future__ import annotations

import sys
import threading
from typing import TextIO

WIDTH = 30


def render(label: str, done: int, total: int, width: int = WIDTH) -> str:
    """The bar's text for ``done`` of ``total`` (pure, for tests and drawing)."""
    done = max(0, min(done, total)) if total > 0 else 0
    filled = width if total <= 0 else done * width // total
    return f"{label} [{'#' * filled}{' ' * (width - filled)}] {done}/{max(total, 0)}"


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
        line = render(self.label, done, total)
        if line == self._last:
            return
        self._last = line
        self.stream.write("\r" + line)
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
        while True:
            frame = SPINNER_FRAMES[self.frames % len(SPINNER_FRAMES)]
            self.stream.write(f"\r{frame} {self.label}")
            self.stream.flush()
            self.frames += 1
            if self._stop.wait(self.interval):
                break
        self.stream.write("\r" + " " * (len(self.label) + 2) + "\r")
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
