"""How the CLI shows versions, times and changes, shared by its commands and the demo."""

from __future__ import annotations

import codecs
import dataclasses
import io
import json
import os
import re
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TextIO

from vaultmem.cli import progress
from vaultmem.core.text import visible, visible_content
from vaultmem.core.versions import Version, utc_text
from vaultmem.ops.diff import FileChange

SHORT = 10  # hex digits of a version id shown to people; any unambiguous prefix is accepted back
NO_VERSION = "0" * 40  # what an undo back past the first version was restored from: the empty memory


# Colour, as git shows it: on a terminal only, never on a pipe or a file,
# and never when NO_COLOR is set (https://no-color.org) or TERM is dumb.
YELLOW, GREEN, RED, CYAN, BOLD = "33", "32", "31", "36", "1"


def colour_on(stream: TextIO) -> bool:
    """Whether output to ``stream`` gets colour."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return progress.is_terminal(stream)


def paint(text: str, code: str, on: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[m" if on and text else text


def painted_log_line(line: str, on: bool) -> str:
    """A ``log_lines`` row with its version id in yellow, as ``git log`` shows ids."""
    return paint(line[:SHORT], YELLOW, on) + line[SHORT:]


def painted_diff(text: str, on: bool) -> str:
    """A unified diff with added lines green, removed red, hunks cyan and file headers bold."""
    if not on:
        return text
    out = []
    for line in text.splitlines(keepends=True):
        body, end = (line[:-1], "\n") if line.endswith("\n") else (line, "")
        if body.startswith(("diff --git ", "--- ", "+++ ", "rename from ", "rename to ", "new file", "deleted file")):
            body = paint(body, BOLD, on)
        elif body.startswith("@@"):
            body = paint(body, CYAN, on)
        elif body.startswith("+"):
            body = paint(body, GREEN, on)
        elif body.startswith("-"):
            body = paint(body, RED, on)
        out.append(body + end)
    return "".join(out)


def shown_changes(changes: Sequence[FileChange]) -> list[FileChange]:
    """``changes`` as a diff shows them on a screen: paths and texts through
    :func:`visible` and :func:`visible_content`."""
    return [
        dataclasses.replace(
            change,
            path=visible(change.path),
            old=visible_content(change.old) if change.old is not None else None,
            new=visible_content(change.new) if change.new is not None else None,
            moved_from=visible(change.moved_from) if change.moved_from is not None else None,
        )
        for change in changes
    ]


def when(moment: datetime) -> str:
    return utc_text(moment)


def short(version_id: str | None) -> str:
    return version_id[:SHORT] if version_id else "-"


def unicode_out(stream: TextIO) -> bool:
    """Whether ``stream`` writes UTF-8, so that it can spell every name."""
    try:
        return codecs.lookup(stream.encoding or "ascii").name == "utf-8"
    except LookupError:
        return False


def tolerate_narrow_output() -> None:
    """On an output whose encoding cannot spell every character (an ASCII or
    Latin-1 locale, PYTHONIOENCODING), write what it cannot as ``\\u65e5``
    escapes instead of failing half-way through.  On a UTF-8 output, a folder
    name given in bytes that are not UTF-8 (``--vault``, ``export FOLDER``)
    is written back as those bytes, as the shell gave them."""
    for stream in (sys.stdout, sys.stderr):
        if not isinstance(stream, io.TextIOWrapper):
            continue
        if not unicode_out(stream):
            stream.reconfigure(errors="backslashreplace")
        elif stream.errors == "strict":
            stream.reconfigure(errors="surrogateescape")


# A lone surrogate: what Python makes of a byte that is not UTF-8 in a path.
_SURROGATE = re.compile("[\ud800-\udfff]")


def print_json(data: Any) -> None:
    """JSON, with every character as itself on a UTF-8 output, else as a JSON
    escape; a lone surrogate (a path's byte that is not UTF-8) is always an
    escape such as ``\\udcff``, so the output stays UTF-8, valid JSON."""
    text = json.dumps(data, indent=2, ensure_ascii=not unicode_out(sys.stdout))
    print(_SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text))


def write_text(text: str) -> None:
    """Text exactly as stored, ending with a newline so the prompt starts a line."""
    sys.stdout.write(text if not text or text.endswith("\n") else text + "\n")


def write_exact(text: str) -> None:
    """A file's text exactly as stored: its UTF-8 bytes, whatever the output's encoding."""
    if unicode_out(sys.stdout):
        sys.stdout.write(text)
        return
    sys.stdout.flush()
    sys.stdout.buffer.write(text.encode("utf-8"))


def version_data(version: Version) -> dict[str, Any]:
    return {
        "id": version.id,
        "time": when(version.time),
        "actor": version.actor,
        "session": version.session,
        "command": version.command,
        "paths": list(version.paths),
        "restored_from": version.restored_from,
        "merged": version.merged,
        "conflicts": list(version.conflicts),
        "reason": version.reason,
        "erased": [dict(zip(("version", "blob"), item.split(" ", 1), strict=False)) for item in version.erased],
    }


def change_data(change: FileChange) -> dict[str, Any]:
    data: dict[str, Any] = {"path": change.path, "status": change.status}
    if change.moved_from is not None:
        data["from"] = change.moved_from
    return {**data, "old": change.old, "new": change.new}


def log_lines(versions: Sequence[Version]) -> list[str]:
    rows = [
        [
            short(v.id),
            when(v.time),
            visible(v.actor),
            visible(v.session or "-"),
            visible(v.command),
            visible(paths_text(v.paths, v.restored_from, v.command) + merge_text(v)),
        ]
        for v in versions
    ]
    widths = [max((len(row[i]) for row in rows), default=0) for i in range(5)]
    return ["  ".join([*(cell.ljust(w) for cell, w in zip(row[:5], widths, strict=True)), row[5]]) for row in rows]


def merge_text(version: Version) -> str:
    """`` (merged ID from REMOTE; N conflicts kept beside)`` for a merge."""
    return version.merge_note(SHORT)


def paths_text(paths: Sequence[str], restored_from: str | None, command: str) -> str:
    text = " -> ".join(paths) if command == "rename" else ", ".join(paths)
    if restored_from == NO_VERSION:
        return f"{text} (from the empty memory)"
    return f"{text} (from {short(restored_from)})" if restored_from else text
