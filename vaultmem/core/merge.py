"""The rules of a merge of two histories, file by file, on decrypted content.

Pure rules, no I/O: the caller hands in three listings (the common ancestor,
this vault, the other side: path -> blob id), the renames each side made since
the ancestor, and a way to read a file's plain text; :func:`merge` says what
lands at each path.  docs/sync.md, "When both sides wrote", is the user's
version of these rules:

- a file changed on one side only takes that side;
- changed on both sides with edits that do not overlap: a 3-way text merge
  (``merge3``, the merge of Bazaar and Breezy);
- a real conflict keeps both versions: the newer side's at the path, the
  other beside it as ``NAME.conflict-ID.EXT`` (ID: the first 8 characters of
  that side's commit);
- delete against modify keeps the modified file;
- a rename on one side is followed: the other side's edits land at the new name.

Nothing either side wrote is dropped: every version a side holds at its tip
ends up at a path of the result, merged or whole.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import merge3

from vaultmem.core.paths import MAX_PATH_BYTES, MAX_SEGMENT_BYTES

Side = Literal["base", "ours", "theirs"]
TipSide = Literal["ours", "theirs"]
Reader = Callable[[Side, str], bytes]  # (side, path) -> the file's plain bytes
SIDES: tuple[TipSide, TipSide] = ("ours", "theirs")


@dataclass(frozen=True)
class Tip:
    """One side of a merge: its files (path -> blob id), the renames it made
    since the common ancestor (ancestor's path -> its path now, files only),
    and the label its conflict copies carry."""

    files: Mapping[str, bytes]
    renames: Mapping[str, str] = field(default_factory=dict)
    label: str = ""


@dataclass(frozen=True)
class Take:
    """What lands at a path: a side's file as it is (``side``, ``source``), or
    new ``content`` the merge made."""

    side: Side | None = None
    source: str | None = None
    content: bytes | None = None


@dataclass
class Result:
    files: dict[str, Take]
    merged: list[str] = field(default_factory=list)  # merged as text
    conflicts: list[tuple[str, str]] = field(default_factory=list)  # (path, the copy beside it)
    kept: list[str] = field(default_factory=list)  # modified on one side, deleted on the other: kept
    renamed: list[tuple[str, str]] = field(default_factory=list)  # (from, to) followed from one side


def conflict_name(path: str, label: str, taken: set[str]) -> str:
    """``/memories/a/notes.md`` -> ``/memories/a/notes.conflict-LABEL.md``
    (``-2``, ``-3`` ... appended when that name is taken), within the path
    rules: the name is cut from the end of its stem (on a character's edge)
    to keep to :data:`MAX_SEGMENT_BYTES` and :data:`MAX_PATH_BYTES`; where
    not even the stem's first character fits beside the file, the copy goes
    into the nearest folder above where it does.  An extension too long to
    keep with the stem's first character in one name counts as stem."""
    folder, _, name = path.rpartition("/")
    stem, dot, ext = name.rpartition(".")
    if not stem:  # no extension, or a name such as ".profile"
        stem, dot, ext = name, "", ""
    folders = [folder]
    while folders[-1].count("/") > 1:  # up to /memories
        folders.append(folders[-1].rpartition("/")[0])
    for n in range(1, 10_000):
        tag = f".conflict-{label}" + (f"-{n}" if n > 1 else "")
        candidate = _fitted(folders, stem, tag + dot + ext) or _fitted(folders, name, tag)
        if candidate is None:
            break
        if candidate not in taken:
            return candidate
    raise ValueError(f"no free conflict name beside {path}")


def _fitted(folders: list[str], stem: str, tail: str) -> str | None:
    """``STEM TAIL`` in the first of ``folders`` where it keeps to the path
    rules with at least the first character of ``stem`` (cut from its end to
    fit); None if there is no such folder."""
    for where in folders:
        room = min(MAX_SEGMENT_BYTES, MAX_PATH_BYTES - len(where.encode()) - 1) - len(tail.encode())
        short = stem.encode()[: max(room, 0)].decode("utf-8", "ignore")
        while short and unicodedata.normalize("NFC", short) != short:
            short = short[:-1]  # a cut that would change under normalisation (a character's marks)
        if short:
            return f"{where}/{short}{tail}"
    return None


def text_merge(base: bytes, ours: bytes, theirs: bytes) -> bytes | None:
    """The 3-way merge of three texts line by line, or None where both sides
    changed the same lines (or lines next to each other)."""
    merger = merge3.Merge3(
        base.splitlines(keepends=True), ours.splitlines(keepends=True), theirs.splitlines(keepends=True)
    )
    out: list[bytes] = []
    for group in merger.merge_groups():
        if group[0] == "conflict":
            return None
        out.extend(group[1])
    return b"".join(out)


@dataclass
class _Placed:
    path: str
    take: Take
    side: TipSide  # whose label a conflict copy of it carries ("ours" for content both sides agree on)


class _Merger:
    def __init__(self, base: Mapping[str, bytes], ours: Tip, theirs: Tip, read: Reader, prefer: TipSide) -> None:
        self.base = base
        self.tips: dict[TipSide, Tip] = {"ours": ours, "theirs": theirs}
        self.read = read
        self.prefer = prefer
        self.other: TipSide = "theirs" if prefer == "ours" else "ours"
        self.result = Result({})
        self._plain: dict[tuple[Side, str], bytes] = {}

    def plain(self, side: Side, path: str) -> bytes:
        key = (side, path)
        if key not in self._plain:
            self._plain[key] = self.read(side, path)
        return self._plain[key]

    def files(self, side: Side) -> Mapping[str, bytes]:
        return self.base if side == "base" else self.tips[side].files

    def same(self, a: tuple[Side, str], b: tuple[Side, str]) -> bool:
        if a[1] == b[1] and self.files(a[0])[a[1]] == self.files(b[0])[b[1]]:
            return True  # one blob: the same bytes
        return self.plain(*a) == self.plain(*b)

    def run(self) -> Result:
        placed: list[_Placed] = []
        claimed: dict[TipSide, set[str]] = {"ours": set(), "theirs": set()}
        for path in sorted(self.base):
            at = {side: self.tips[side].renames.get(path, path) for side in SIDES}
            for side in SIDES:
                if at[side] in self.tips[side].files:
                    claimed[side].add(at[side])
            placed += self._lineage(path, at)
        added: dict[str, dict[TipSide, str]] = {}
        for side in SIDES:
            for path in self.tips[side].files:
                if path not in claimed[side]:
                    added.setdefault(path, {})[side] = path
        for path in sorted(added):
            placed += self._added(path, added[path])
        self._settle(placed)
        return self.result

    # -- one file's lineage --------------------------------------------------

    def _lineage(self, path: str, at: dict[TipSide, str]) -> list[_Placed]:
        """A file of the common ancestor, as each side left it."""
        present = {side: at[side] in self.tips[side].files for side in SIDES}
        changed = {
            side: (not present[side]) or at[side] != path or not self.same(("base", path), (side, at[side]))
            for side in SIDES
        }
        renamed = {side: present[side] and at[side] != path for side in SIDES}
        if not present["ours"] and not present["theirs"]:
            return []
        if not present["ours"] or not present["theirs"]:
            gone: TipSide = "ours" if not present["ours"] else "theirs"
            left: TipSide = "theirs" if gone == "ours" else "ours"
            if not changed[left]:
                return []  # deleted on one side, untouched on the other
            self.result.kept.append(at[left])  # delete against modify: the modified file stays
            if renamed[left]:
                self.result.renamed.append((path, at[left]))
            return [_Placed(at[left], Take(left, at[left]), left)]
        # Present on both sides: the content first, then where it lands.
        if not changed["theirs"] or not changed["ours"]:  # a rename counts as a change
            source: TipSide = "ours" if not changed["theirs"] else "theirs"
            takes: list[tuple[Take, TipSide]] = [(Take(source, at[source]), source)]
        elif self.same(("ours", at["ours"]), ("theirs", at["theirs"])):
            takes = [(Take("ours", at["ours"]), "ours")]
        else:
            base_text = self.plain("base", path)
            ours_text = self.plain("ours", at["ours"])
            theirs_text = self.plain("theirs", at["theirs"])
            if ours_text == base_text:
                takes = [(Take("theirs", at["theirs"]), "theirs")]
            elif theirs_text == base_text:
                takes = [(Take("ours", at["ours"]), "ours")]
            else:
                merged = text_merge(base_text, ours_text, theirs_text)
                if merged is not None:
                    takes = [(Take(content=merged), "ours")]
                    self.result.merged.append(self._where(path, at, renamed)[0])
                else:  # both versions stay: the preferred one at the path
                    takes = [
                        (Take(self.prefer, at[self.prefer]), self.prefer),
                        (Take(self.other, at[self.other]), self.other),
                    ]
        wheres = self._where(path, at, renamed)
        for where in wheres:
            if where != path:
                self.result.renamed.append((path, where))
        if len(takes) == 2:
            return [_Placed(wheres[0], takes[0][0], takes[0][1]), _Placed(wheres[0], takes[1][0], takes[1][1])]
        return [_Placed(where, takes[0][0], takes[0][1]) for where in wheres]

    def _where(self, path: str, at: dict[TipSide, str], renamed: dict[TipSide, bool]) -> list[str]:
        """Where a file both sides hold lands: the new name if one side renamed
        it; both names if both sides renamed it differently."""
        if renamed["ours"] and renamed["theirs"] and at["ours"] != at["theirs"]:
            return [at[self.prefer], at[self.other]]
        for side in SIDES:
            if renamed[side]:
                return [at[side]]
        return [path]

    def _added(self, path: str, sides: dict[TipSide, str]) -> list[_Placed]:
        """A file the common ancestor did not have."""
        if len(sides) == 1:
            side = next(iter(sides))
            return [_Placed(path, Take(side, path), side)]
        if self.same(("ours", path), ("theirs", path)):
            return [_Placed(path, Take("ours", path), "ours")]
        return [_Placed(path, Take(self.prefer, path), self.prefer), _Placed(path, Take(self.other, path), self.other)]

    # -- putting every file at a path of its own ---------------------------------

    def _settle(self, placed: list[_Placed]) -> None:
        taken = {p.path for p in placed}
        by_path: dict[str, list[_Placed]] = {}
        for item in placed:
            by_path.setdefault(item.path, []).append(item)
        final: dict[str, _Placed] = {}
        for path in sorted(by_path):
            items = self._distinct(by_path[path])
            items.sort(key=lambda p: p.side != self.prefer)  # the preferred side's stays at the path
            final[path] = items[0]
            for loser in items[1:]:
                beside = conflict_name(path, self.tips[loser.side].label, taken)
                taken.add(beside)
                final[beside] = _Placed(beside, loser.take, loser.side)
                self.result.conflicts.append((path, beside))
        # A file where the other side made a folder: the file moves beside it.
        changed = True
        while changed:
            changed = False
            for path in sorted(final):
                if any(other.startswith(path + "/") for other in final):
                    item = final.pop(path)
                    beside = conflict_name(path, self.tips[item.side].label, taken)
                    taken.add(beside)
                    final[beside] = _Placed(beside, item.take, item.side)
                    self.result.conflicts.append((path, beside))
                    changed = True
                    break
        self.result.files = {path: item.take for path, item in sorted(final.items())}
        self.result.conflicts.sort()
        self.result.merged.sort()
        self.result.kept.sort()
        self.result.renamed = sorted(set(self.result.renamed))

    def _distinct(self, items: list[_Placed]) -> list[_Placed]:
        """The items of one path with equal content counted once."""
        out: list[_Placed] = []
        for item in items:
            if not any(self._same_take(item.take, kept.take) for kept in out):
                out.append(item)
        return out

    def _same_take(self, a: Take, b: Take) -> bool:
        return self._bytes(a) == self._bytes(b)

    def _bytes(self, take: Take) -> bytes:
        if take.content is not None:
            return take.content
        assert take.side is not None and take.source is not None
        return self.plain(take.side, take.source)


def merge(base: Mapping[str, bytes], ours: Tip, theirs: Tip, read: Reader, prefer: TipSide = "ours") -> Result:
    """Merge ``ours`` and ``theirs`` (both descended from ``base``) file by
    file.  ``prefer`` names the side whose version stays at the path in a
    conflict (the other goes beside it); the caller picks the newer side, so
    both clones of a vault make the same merge."""
    return _Merger(base, ours, theirs, read, prefer).run()
