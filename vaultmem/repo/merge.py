"""Merging a vault's branches with a clone's that went their own way.

``main`` merges file by file on decrypted content (the rules are
:mod:`vaultmem.core.merge`): one sealed merge commit with both tips as
parents, its trailers naming what merged, every file it writes encrypted
under the current data key.  The keyring merges as the union of both sides'
data keys; the policy merges field by field, and a field both sides set to
different values is refused until an operator chooses a side.

Every function here builds; the store commits, under the writer lock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import pygit2

from vaultmem.core import merge as rules
from vaultmem.core.crypto import Keyring
from vaultmem.core.names import Names, is_sealed_text
from vaultmem.core.paths import MemoryPath, parse, parse_stored
from vaultmem.core.policy import Policy
from vaultmem.core.versions import format_message, parse_trailers
from vaultmem.errors import ConflictError, ErasedError
from vaultmem.git import objects
from vaultmem.git.snapshot import Layouts, ReadRaw, SizeCache, Snapshot, TreeCache, TreeEditor, relay, root_tree
from vaultmem.repo.history import added_since, merge_base

MERGE_TRAILER = "Vaultmem-Merge"
CONFLICT_TRAILER = "Vaultmem-Conflict"
MERGED_TRAILER = "Vaultmem-Merged"
KEPT_TRAILER = "Vaultmem-Kept"
RENAMED_TRAILER = "Vaultmem-Renamed"
LABEL = 8  # characters of a side's commit id in a conflict copy's name


@dataclass
class MergeReport:
    """What a merge of ``main`` did: the commit it merged, the paths it
    changed in this vault, and how each file both sides changed was settled."""

    merged: str  # the other side's commit
    commit: str | None = None  # the merge commit
    changed: list[str] = field(default_factory=list)
    text_merged: list[str] = field(default_factory=list)
    conflicts: list[tuple[str, str]] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    renamed: list[tuple[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {
            "merged": self.merged,
            "commit": self.commit,
            "changed": self.changed,
            "text_merged": self.text_merged,
            "conflicts": [{"path": p, "beside": b} for p, b in self.conflicts],
            "kept": self.kept,
            "renamed": [{"from": a, "to": b} for a, b in self.renamed],
        }


def _files(snap: Snapshot) -> dict[str, bytes]:
    return {path.text: oid for path, oid in snap.files(MemoryPath(()))}


def side_renames(
    repo: pygit2.Repository,
    base: pygit2.Oid | None,
    tip: pygit2.Oid,
    files: Iterable[str],
    reader: tuple[ReadRaw, Keyring, TreeCache] | None = None,
) -> dict[str, str]:
    """Where each of ``files`` (paths at ``base``) went on the way to ``tip``:
    the renames its commits record, oldest first, folder renames included.
    A rename recorded with sealed names is read through ``reader``: the new
    name from the version it wrote."""
    current = {path: path for path in files}
    for commit in added_since(repo, tip, base):  # the parents commits record: a grafts file hides none
        if len(commit.parent_ids) > 1:
            continue  # a merge: the renames it carried are in the commits it merged
        trailers = parse_trailers(commit.message)
        named = trailers.get("Vaultmem-Path", [])
        if trailers.get("Vaultmem-Command", [""])[0] != "rename" or len(named) != 2:
            continue
        old, new = named
        names = reader[1].names if reader is not None else None
        if names is not None and is_sealed_text(old):
            assert reader is not None
            _sealed_rename(reader, commit.id.raw, names, current, old, new)
            continue
        for path, now in current.items():
            if now == old or now.startswith(old + "/"):
                current[path] = new + now[len(old) :]
    return {path: now for path, now in current.items() if now != path}


def _sealed_rename(
    reader: tuple[ReadRaw, Keyring, TreeCache],
    commit: bytes,
    names: Names,
    current: dict[str, str],
    old: str,
    new: str,
) -> None:
    """Apply one rename recorded with sealed names to ``current``."""
    depth = len(parse_stored(old).parts)
    renamed: MemoryPath | None = None
    for path, now in current.items():
        sealed = names.seal_text(now)
        if sealed != old and not sealed.startswith(old + "/"):
            continue
        if renamed is None:
            read, keyring, trees = reader
            renamed = Snapshot(read, keyring, SizeCache(), trees, commit).unseal(parse_stored(new))
            if renamed is None:
                return  # the new name was erased since: nothing to follow
        current[path] = MemoryPath(renamed.parts + parse_stored(now).parts[depth:]).text


def build_main_merge(
    repo: pygit2.Repository,
    read: ReadRaw,
    trees: TreeCache,
    layouts: Layouts,
    keyring: Keyring,
    ours: pygit2.Oid,
    theirs: pygit2.Oid,
    remote: str,
    actor: str,
    now: int,
) -> tuple[list[objects.PackedObject], bytes, str, MergeReport]:
    """The objects, root tree and message of the merge of ``theirs`` into
    ``ours`` (both tips of ``main``)."""
    base = merge_base(repo, ours, theirs)
    sizes = SizeCache()
    snaps = {
        "base": Snapshot(read, keyring, sizes, trees, base.raw if base is not None else None),
        "ours": Snapshot(read, keyring, sizes, trees, ours.raw),
        "theirs": Snapshot(read, keyring, sizes, trees, theirs.raw),
    }
    listed = {side: _files(snap) for side, snap in snaps.items()}

    def plain(side: rules.Side, path: str) -> bytes:
        try:
            return keyring.open(path, read(listed[side][path]))
        except ErasedError:
            if side != "base":
                raise
            return b""  # an erased common version: both sides' texts stand alone (a conflict keeps both)

    reader = (read, keyring, trees)
    tips = {
        side: rules.Tip(listed[side], side_renames(repo, base, tip, listed["base"], reader), str(tip)[:LABEL])
        for side, tip in (("ours", ours), ("theirs", theirs))
    }
    ours_commit, theirs_commit = repo[ours].peel(pygit2.Commit), repo[theirs].peel(pygit2.Commit)
    newer_theirs = (theirs_commit.commit_time, str(theirs)) > (ours_commit.commit_time, str(ours))
    result = rules.merge(listed["base"], tips["ours"], tips["theirs"], plain, "theirs" if newer_theirs else "ours")

    names = keyring.names
    editor = TreeEditor(read, trees, snaps["ours"].memories_id, layouts, names)
    if names is not None and not snaps["ours"].sealed and snaps["ours"].memories_id is not None:
        relay(snaps["ours"], editor)
    ours_files = listed["ours"]
    changed: set[str] = set()
    for path in sorted(set(ours_files) - set(result.files)):
        editor.delete(parse(path))
        changed.add(path)
    for path, take in result.files.items():
        target = parse(path)
        if take.side is not None and take.source == path:
            oid = listed[take.side][path]
            if ours_files.get(path) == oid:
                continue
            editor.set(target, (objects.MODE_BLOB, oid))  # that side's blob as it is
        else:
            content = take.content if take.content is not None else plain(take.side or "ours", take.source or path)
            editor.write_blob(target, keyring.seal(path, content, now))
        changed.add(path)
    memories = editor.write()
    root, made = root_tree(memories, sealed=names is not None, marker_known=snaps["ours"].sealed)
    report = MergeReport(
        merged=str(theirs),
        changed=sorted(changed),
        text_merged=result.merged,
        conflicts=result.conflicts,
        kept=result.kept,
        renamed=result.renamed,
    )

    def stored(text: str) -> str:
        return names.seal_text(text) if names is not None else text

    trailers = [(MERGE_TRAILER, f"{theirs} from {remote}")]
    trailers += [(MERGED_TRAILER, stored(path)) for path in result.merged]
    trailers += [(CONFLICT_TRAILER, f"{stored(path)} -> {stored(beside)}") for path, beside in result.conflicts]
    trailers += [(KEPT_TRAILER, stored(path)) for path in result.kept]
    trailers += [(RENAMED_TRAILER, f"{stored(old)} -> {stored(new)}") for old, new in result.renamed]
    named = tuple(parse_stored(stored(p)) for p in report.changed) or (MemoryPath(()),)
    subject = f"{str(theirs)[:10]} from {remote}: " + _counted(report)
    message = format_message("merge", named, actor, None, trailers, subject)
    return [*editor.new, *made], root.id, message, report


def _counted(report: MergeReport) -> str:
    parts = [f"{len(report.changed)} {'path' if len(report.changed) == 1 else 'paths'} changed"]
    if report.text_merged:
        parts.append(f"{len(report.text_merged)} merged as text")
    if report.conflicts:
        parts.append(f"{len(report.conflicts)} {'conflict' if len(report.conflicts) == 1 else 'conflicts'} kept beside")
    return ", ".join(parts)


# -- the side branches ------------------------------------------------------------


def merge_keyrings(ours: Keyring, theirs: Keyring, new_key_given: bool, now: int) -> Keyring:
    """Both keyrings' data keys in one, wrapped under this vault's user key,
    or under the new key given for the pull (a key change on the other clone)."""
    target = theirs if new_key_given else ours
    return Keyring.union([ours, theirs], target.user_key, dict(target.protector), now)


def merge_policies(base: Policy, ours: Policy, theirs: Policy, prefer: str | None) -> tuple[Policy, list[str]]:
    """Field by field: a field one side changed takes that side; one both
    sides set differently is refused (ConflictError naming it) unless
    ``prefer`` ("ours" or "theirs") says which side wins.  Returns the policy
    and the fields it changes in this vault."""
    b, o, t = base.to_dict(), ours.to_dict(), theirs.to_dict()
    merged = dict(o)
    clashes = []
    for name in o:
        if o[name] == t[name] or t[name] == b[name]:
            continue
        if o[name] == b[name] or prefer == "theirs":
            merged[name] = t[name]
        elif prefer != "ours":
            clashes.append(name)
    if clashes:
        raise ConflictError(
            f"Error: this vault and the remote both changed the policy's {', '.join(clashes)} to different values. "
            "Nothing was changed.",
            step="choose-policy",
        )
    result = Policy.from_dict(merged)
    return result, [name for name in o if merged[name] != o[name]]
