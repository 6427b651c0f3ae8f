"""A one-line progress bar for long commands (``verify``, ``key rotate --reencrypt``).

Library functions take ``progress: Callable[[int, int], None] | None`` and call
it with ``(done, total)``; a :class:`ProgressBar` is such a callable.  It draws
``label [#####     ] 42/100`` on one line, redrawn with ``\\r``, and only when
its stream is a terminal: piped or redirected output stays free of control
characters, so scripts and logs see only the command's result.
"""

from __future__ import annotations

import sys
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
        self.enabled = _is_terminal(self.stream)
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


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream
        return False
