"""How the CLI shows versions, times and changes, shared by its commands and the demo."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from vaultmem.core.versions import Version
from vaultmem.ops.diff import FileChange

SHORT = 10  # hex digits of a version id shown to people; any unambiguous prefix is accepted back
NO_VERSION = "0" * 40  # what an undo back past the first version was restored from: the empty memory


def when(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def short(version_id: str | None) -> str:
    return version_id[:SHORT] if version_id else "-"


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


def write_text(text: str) -> None:
    """Text exactly as stored, ending with a newline so the prompt starts a line."""
    sys.stdout.write(text if not text or text.endswith("\n") else text + "\n")


def version_data(version: Version) -> dict[str, Any]:
    return {
        "id": version.id,
        "time": when(version.time),
        "actor": version.actor,
        "session": version.session,
        "command": version.command,
        "paths": list(version.paths),
        "restored_from": version.restored_from,
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
            v.actor,
            v.session or "-",
            v.command,
            paths_text(v.paths, v.restored_from, v.command),
        ]
        for v in versions
    ]
    widths = [max((len(row[i]) for row in rows), default=0) for i in range(5)]
    return ["  ".join([*(cell.ljust(w) for cell, w in zip(row[:5], widths, strict=True)), row[5]]) for row in rows]


def paths_text(paths: Sequence[str], restored_from: str | None, command: str) -> str:
    text = " -> ".join(paths) if command == "rename" else ", ".join(paths)
    if restored_from == NO_VERSION:
        return f"{text} (from the empty memory)"
    return f"{text} (from {short(restored_from)})" if restored_from else text
