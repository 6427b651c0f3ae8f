"""Pure text rules of the memory tool: sizes, line splitting, numbering, caps.

No I/O, no state: everything here is tested without a disk.
"""

from __future__ import annotations

import re
import unicodedata

MAX_LINES = 999_999
LINE_NUMBER_WIDTH = 6


def format_size(n: int) -> str:
    """Human-readable, 1024-based: ``0B``, ``512B``, ``1.5K``, ``4.0K``, ``1.2M``."""
    if n < 1024:
        return f"{n}B"
    value = float(n)
    for unit in ("K", "M", "G"):
        value /= 1024
        if round(value, 1) < 1024 or unit == "G":
            return f"{value:.1f}{unit}"
    raise AssertionError("unreachable")  # pragma: no cover


def split_lines(text: str) -> list[str]:
    """Lines split on ``\\n``; a final ``\\n`` does not make an extra empty line."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def count_lines(text: str) -> int:
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def numbered(line_no: int, line: str) -> str:
    return f"{line_no:>{LINE_NUMBER_WIDTH}}\t{line}"


def capped_lines(lines: list[str], first: int, cap: int) -> tuple[list[str], int]:
    """Number ``lines`` (the first is ``first``) until the next whole line would
    pass ``cap`` characters.  Returns the rendered lines and how many source
    lines they cover.  At least one line is shown; one line longer than the cap
    on its own is cut and marked, so paging always makes progress, and the
    marker names the ``view_range`` of that line alone, which shows it whole."""
    rendered_all = [f"{first + offset:>{LINE_NUMBER_WIDTH}}\t{line}" for offset, line in enumerate(lines)]
    if sum(map(len, rendered_all)) + len(rendered_all) - 1 <= cap:
        return rendered_all, len(lines)
    out: list[str] = []
    used = 0
    for offset, line in enumerate(lines):
        rendered = numbered(first + offset, line)
        cost = len(rendered) + (1 if out else 0)
        if used + cost > cap:
            if not out:
                keep = max(cap - LINE_NUMBER_WIDTH - 1, 0)
                out.append(
                    numbered(first, line[:keep])
                    + f" [line {first} cut at {cap:,} characters; view_range [{first}, {first}] shows it whole]"
                )
                return out, 1
            return out, offset
        out.append(rendered)
        used += cost
    return out, len(lines)


def edit_snippet(lines: list[str], first: int, last: int, cap: int, context: int = 2) -> tuple[list[str], int, int]:
    """The numbered lines around an edit of lines ``first``..``last`` of the
    edited file's ``lines``: ``context`` lines each side, within ``cap``
    characters.  The edited lines come first: context that does not fit is
    left out (a long line above the edit never pushes the edit itself out).

    Returns the rendered lines, the last edited line they show and the last
    edited line; the two differ when the edit alone is longer than ``cap``."""
    lo, hi = max(1, first - context), min(len(lines), max(first, last) + context)
    if lo > hi:
        return [], 0, 0
    top, bottom = min(first, hi), min(max(first, last), hi)
    rendered: list[str] = []
    covered = 0
    for start in range(lo, top + 1):  # fewer lines of context above, until the edit fits
        rendered, covered = capped_lines(lines[start - 1 : hi], start, cap)
        if start + covered - 1 >= bottom:
            return rendered, bottom, bottom
    return rendered, top + covered - 1, bottom


def insert_text(content: str, after_line: int, text: str) -> str:
    """Insert ``text`` as whole lines after line ``after_line`` (0 = the top).

    ``text``'s own lines become lines of the file, a final ``\\n`` in it adds no
    empty line, and the rest of the file keeps its bytes.  Empty text inserts
    one empty line.
    """
    block = text if text.endswith("\n") else text + "\n"
    if after_line == 0:
        return block + content
    offset = 0
    for _ in range(after_line):
        nl = content.find("\n", offset)
        if nl == -1:
            # After the last line, which has no newline of its own: the file
            # keeps having none (an empty inserted line cannot, so it gets one).
            lines_text = text[:-1] if text.endswith("\n") else text
            # An empty last inserted line needs its newline to exist at all.
            closing = "\n" if lines_text == "" or lines_text.endswith("\n") else ""
            return content + "\n" + lines_text + closing
        offset = nl + 1
    return content[:offset] + block + content[offset:]


def match_lines(content: str, needle: str) -> list[int]:
    """The 1-indexed starting line of every occurrence of ``needle``
    (overlapping occurrences included)."""
    lines: list[int] = []
    start = 0
    line = 1
    counted_to = 0
    while True:
        pos = content.find(needle, start)
        if pos == -1:
            return lines
        line += content.count("\n", counted_to, pos)
        counted_to = pos
        lines.append(line)
        start = pos + 1


# What a commit holds (an actor, a session, a path, a message), what a memory
# file holds and what Claude writes reach a person's terminal: a control
# character there could move the cursor, erase a line or retitle the window,
# and so hide a version or a planted line.  They are shown spelled as escapes
# (``\x1b``).
_HIDDEN = frozenset(("Cc", "Cf", "Zl", "Zp", "Cs"))  # control, format, line and paragraph separators
# In a file's text, tabs and line ends stay (a CR that ends a line moves nothing).
_CONTENT_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|\r(?!\n)")


def _escape(char: str) -> str:
    return repr(char)[1:-1]  # \x1b, \r, \u202e


def visible(text: str) -> str:
    """``text`` (a name, an actor, a message) with every control, format and
    line-separator character spelled as an escape: a commit written by hand
    cannot drive the terminal of whoever reads it."""
    if text.isprintable():
        return text
    return "".join(_escape(ch) if unicodedata.category(ch) in _HIDDEN else ch for ch in text)


# The zero-width joiners shape emoji (a ZWJ sequence) and scripts such as
# Persian and the Indic ones: they neither move nor hide text, so they stay.
_JOINERS = frozenset("\u200c\u200d")


def visible_content(text: str) -> str:
    """A file's text with its control, format (bidi controls, zero-width
    characters) and line-separator characters spelled as escapes, but for
    tabs, line ends and the zero-width joiners, so each line shows as it is
    and nothing more: a bidi override cannot show a reader a line in an
    order other than the one it holds."""
    text = _CONTENT_CONTROL.sub(lambda found: _escape(found.group()), text)
    if text.isascii():
        return text
    return "".join(
        _escape(ch) if not ch.isascii() and ch not in _JOINERS and unicodedata.category(ch) in _HIDDEN else ch
        for ch in text
    )
