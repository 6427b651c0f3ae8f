"""What changed between two versions, decrypted: per-file changes and a
unified diff.  Folders whose tree ids are equal are skipped unopened."""

from __future__ import annotations

import bisect
import difflib
from collections.abc import Iterator, Sequence
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
            lines = list(_unified_lines(_lines(change.old), _lines(change.new), f"a/{before_name}", f"b/{name}"))
            parts += [line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines]
            continue
        before = _lines(change.old)
        after = _lines(change.new)
        lines = list(
            _unified_lines(
                before,
                after,
                f"a/{name}" if change.old is not None else "/dev/null",
                f"b/{name}" if change.new is not None else "/dev/null",
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


# difflib compares every line with every other in the worst case: two 100 KB
# files of short lines, one interleaved with the other, took a minute.  Above
# this many pairs of lines, lines unique on both sides anchor the diff first
# (patience diff, as git's); difflib then matches what lies between anchors.
_PAIRS = 4_000_000
_ANCHOR_DEPTH = 8  # rounds of anchoring within what lies between anchors


def _unified_lines(a: list[str], b: list[str], fromfile: str, tofile: str, n: int = 3) -> Iterator[str]:
    """``difflib.unified_diff(a, b, fromfile, tofile, n=n)``, in bounded
    time: above :data:`_PAIRS` pairs of lines the matching is anchored."""
    matcher = _Matcher(a, b)
    for number, group in enumerate(matcher.get_grouped_opcodes(n)):
        if number == 0:
            yield f"--- {fromfile}\n"
            yield f"+++ {tofile}\n"
        first, last = group[0], group[-1]
        yield f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@\n"
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                yield from (" " + line for line in a[i1:i2])
                continue
            if tag in ("replace", "delete"):
                yield from ("-" + line for line in a[i1:i2])
            if tag in ("replace", "insert"):
                yield from ("+" + line for line in b[j1:j2])


def _range(start: int, stop: int) -> str:
    """A hunk's line range as unified diffs write it (difflib's own rule)."""
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start + 1 if length else start},{length}"


class _Matcher(difflib.SequenceMatcher[str]):
    """difflib's matcher, whose matching blocks are anchored on unique lines
    when the sides are too long for difflib alone."""

    def __init__(self, a: list[str], b: list[str]) -> None:
        super().__init__(None, a, b)
        self._sides = (a, b)
        self._anchored: list[difflib.Match] | None = None

    def get_matching_blocks(self) -> list[difflib.Match]:
        a, b = self._sides
        if len(a) * len(b) <= _PAIRS:
            return super().get_matching_blocks()
        if self._anchored is None:
            found: list[tuple[int, int, int]] = []
            _match(a, b, 0, len(a), 0, len(b), 0, found)
            merged: list[list[int]] = []
            for i, j, size in sorted(found):
                if merged and merged[-1][0] + merged[-1][2] == i and merged[-1][1] + merged[-1][2] == j:
                    merged[-1][2] += size
                else:
                    merged.append([i, j, size])
            blocks = [difflib.Match(i, j, size) for i, j, size in merged]
            self._anchored = [*blocks, difflib.Match(len(a), len(b), 0)]
        return list(self._anchored)


def _match(
    a: Sequence[str],
    b: Sequence[str],
    alo: int,
    ahi: int,
    blo: int,
    bhi: int,
    depth: int,
    found: list[tuple[int, int, int]],
) -> None:
    """Add to ``found`` the matching blocks of ``a[alo:ahi]`` and ``b[blo:bhi]``."""
    while alo < ahi and blo < bhi and a[alo] == b[blo]:  # a common start
        found.append((alo, blo, 1))
        alo, blo = alo + 1, blo + 1
    while alo < ahi and blo < bhi and a[ahi - 1] == b[bhi - 1]:  # a common end
        found.append((ahi - 1, bhi - 1, 1))
        ahi, bhi = ahi - 1, bhi - 1
    if alo == ahi or blo == bhi:
        return
    if (ahi - alo) * (bhi - blo) <= _PAIRS:
        inner = difflib.SequenceMatcher(None, a[alo:ahi], b[blo:bhi])
        found += [(alo + i, blo + j, size) for i, j, size in inner.get_matching_blocks() if size]
        return
    if depth >= _ANCHOR_DEPTH:
        return  # what is left is shown as lines removed and lines added
    anchors = _anchors(a, b, alo, ahi, blo, bhi)
    i, j = alo, blo
    for ai, bj in [*anchors, (ahi, bhi)]:
        _match(a, b, i, ai, j, bj, depth + 1, found)
        if ai < ahi:
            found.append((ai, bj, 1))
        i, j = ai + 1, bj + 1


def _anchors(a: Sequence[str], b: Sequence[str], alo: int, ahi: int, blo: int, bhi: int) -> list[tuple[int, int]]:
    """The lines found once in each range, as ``(index in a, index in b)``,
    the longest run of them in the same order on both sides."""
    seen_a: dict[str, int] = {}
    for i in range(alo, ahi):
        seen_a[a[i]] = -1 if a[i] in seen_a else i
    seen_b: dict[str, int] = {}
    for j in range(blo, bhi):
        seen_b[b[j]] = -1 if b[j] in seen_b else j
    pairs = [(i, seen_b.get(a[i], -1)) for i in range(alo, ahi) if seen_a[a[i]] == i]
    pairs = [(i, j) for i, j in pairs if j >= 0]
    # The longest increasing run of b's indices, by patience sorting.
    tops: list[int] = []  # the smallest b index ending a run of each length
    ends: list[int] = []  # which pair that is
    back: list[int] = []  # the pair before each pair in its run
    for number, (_, j) in enumerate(pairs):
        at = bisect.bisect_left(tops, j)
        back.append(ends[at - 1] if at else -1)
        if at == len(tops):
            tops.append(j)
            ends.append(number)
        else:
            tops[at] = j
            ends[at] = number
    run: list[tuple[int, int]] = []
    at = ends[-1] if ends else -1
    while at >= 0:
        run.append(pairs[at])
        at = back[at]
    return run[::-1]


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
