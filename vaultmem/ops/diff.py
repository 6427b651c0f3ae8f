"""What changed between two versions, decrypted: per-file changes and a
unified diff.  Folders whose tree ids are equal are skipped unopened."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Literal

from vaultmem.core.paths import MemoryPath
from vaultmem.errors import ErasedError
from vaultmem.git import objects
from vaultmem.git.snapshot import Snapshot, check_depth

Status = Literal["added", "deleted", "modified", "renamed"]


@dataclass(frozen=True)
class FileChange:
    path: str
    status: Status
    old: str | None
    new: str | None
    moved_from: str | None = None  # a renamed file's path before


def with_renames(found: list[FileChange], old: str, new: str) -> list[FileChange]:
    """``found`` with each file a rename of ``old`` to ``new`` (a file or a
    folder) moved shown as one ``renamed`` change instead of a delete and an add."""
    added = {c.path: c for c in found if c.status == "added"}
    out: list[FileChange] = []
    paired: set[str] = set()
    for change in found:
        if change.status == "deleted" and (change.path == old or change.path.startswith(old + "/")):
            target = added.get(new + change.path[len(old) :])
            if target is not None:
                out.append(FileChange(target.path, "renamed", change.old, target.new, change.path))
                paired.add(target.path)
                continue
        out.append(change)
    return sorted((c for c in out if not (c.status == "added" and c.path in paired)), key=lambda c: c.path)


def changes(a: Snapshot, b: Snapshot, path: MemoryPath) -> list[FileChange]:
    """Files at or below ``path`` that differ from ``a`` to ``b``, in path order."""
    found: list[tuple[MemoryPath, bytes | None, bytes | None]] = []
    _compare(a, b, path, a.entry(path), b.entry(path), found)
    out: list[FileChange] = []
    for file_path, old_id, new_id in sorted(found, key=lambda item: item[0].parts):
        old, old_erased = _text(a, file_path, old_id) if old_id else (None, False)
        new, new_erased = _text(b, file_path, new_id) if new_id else (None, False)
        if old == new and not (old_erased or new_erased):
            continue  # re-encrypted (a rekey, a rename back): same text, new blob
        status: Status = "added" if old is None else "deleted" if new is None else "modified"
        out.append(FileChange(file_path.text, status, old, new))
    return out


def _text(snap: Snapshot, file_path: MemoryPath, oid: bytes) -> tuple[str, bool]:
    """A file version's text, and whether it was erased: an erased one is
    one line saying so (its content is gone, and a diff shows that, not an
    error).  Two erased versions read as the same line, yet are a change."""
    try:
        return snap.keyring.open(file_path.text, snap.read_raw(oid)).decode("utf-8"), False
    except ErasedError as err:
        return f"[{err.fact.removeprefix('Error: ').rstrip('.')}]\n", True


def _compare(
    a: Snapshot,
    b: Snapshot,
    path: MemoryPath,
    old: tuple[int, bytes] | None,
    new: tuple[int, bytes] | None,
    out: list[tuple[MemoryPath, bytes | None, bytes | None]],
) -> None:
    if old == new:
        return
    old_is_dir = old is not None and old[0] == objects.MODE_TREE
    new_is_dir = new is not None and new[0] == objects.MODE_TREE
    if not old_is_dir and not new_is_dir:
        out.append((path, old[1] if old else None, new[1] if new else None))
        return
    if old is not None and not old_is_dir:  # a file became a folder
        out.append((path, old[1], None))
        old = None
    if new is not None and not new_is_dir:  # a folder became a file
        out.append((path, None, new[1]))
        new = None
    check_depth((new or old or (0, b""))[1], len(path.parts))  # a tree vaultmem did not write: refused, not a crash
    # By real name: a version that sealed its names stores the same file under another entry
    old_entries = {a.child_path(path, n, e): e for n, e in (a.trees.get(a.read_raw, old[1]) if old else {}).items()}
    new_entries = {b.child_path(path, n, e): e for n, e in (b.trees.get(b.read_raw, new[1]) if new else {}).items()}
    for child in sorted(set(old_entries) | set(new_entries), key=lambda p: p.parts):
        _compare(a, b, child, old_entries.get(child), new_entries.get(child), out)


def unified(found: list[FileChange]) -> str:
    """git-style unified diff text for ``found`` ("" when it is empty)."""
    parts: list[str] = []
    for change in found:
        name = change.path.lstrip("/")
        if change.status == "renamed" and change.moved_from is not None:
            before_name = change.moved_from.lstrip("/")
            parts += [f"rename from {before_name}\n", f"rename to {name}\n"]
            lines = list(
                difflib.unified_diff(
                    _lines(change.old),
                    _lines(change.new),
                    fromfile=f"a/{before_name}",
                    tofile=f"b/{name}",
                    n=3,
                )
            )
            parts += [line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines]
            continue
        before = _lines(change.old)
        after = _lines(change.new)
        lines = list(
            difflib.unified_diff(
                before,
                after,
                fromfile=f"a/{name}" if change.old is not None else "/dev/null",
                tofile=f"b/{name}" if change.new is not None else "/dev/null",
                n=3,
            )
        )
        if not lines and before and before == after:  # both sides erased: the same line, still a change
            lines = [f"--- a/{name}\n", f"+++ b/{name}\n", f"@@ -{_span(before)} +{_span(after)} @@\n"]
            lines += [f"-{line}" for line in before] + [f"+{line}" for line in after]
        if not lines:  # an empty file added or deleted
            lines = [
                f"--- {'a/' + name if change.old is not None else '/dev/null'}\n",
                f"+++ {'b/' + name if change.new is not None else '/dev/null'}\n",
            ]
        for line in lines:
            parts.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(parts)


def _lines(text: str | None) -> list[str]:
    """``text``'s lines, each with its ``\n``: split on ``\n`` only, as the
    memory tool numbers them (``str.splitlines`` would also end a line at a
    lone CR, a form feed or U+2028, and show lines the file does not have)."""
    if not text:
        return []
    lines = text.split("\n")
    last = lines.pop()
    return [line + "\n" for line in lines] + ([last] if last else [])


def _span(lines: list[str]) -> str:
    """A hunk's line range from line 1, as git writes it (``1`` for one line)."""
    return "1" if len(lines) == 1 else f"1,{len(lines)}"
