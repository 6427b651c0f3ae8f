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

import hashlib
import hmac
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pygit2

from vaultmem.core import merge as rules
from vaultmem.core.crypto import Keyring, document_mac
from vaultmem.core.names import Names, is_sealed_text
from vaultmem.core.paths import MemoryPath, parse, parse_stored
from vaultmem.core.policy import Policy
from vaultmem.core.versions import format_message, parse_trailers
from vaultmem.errors import ConflictError, ErasedError
from vaultmem.git import objects
from vaultmem.git.snapshot import Layouts, ReadRaw, SizeCache, Snapshot, TreeCache, TreeEditor, relay, root_tree
from vaultmem.repo.history import merge_bases, reached_since
from vaultmem.repo.keys import keyring_blob

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
    bases: Sequence[pygit2.Oid],
    tips: Sequence[pygit2.Oid],
    files: Iterable[str],
    reader: tuple[ReadRaw, Keyring, TreeCache] | None = None,
) -> dict[str, str]:
    """Where each of ``files`` (paths at the merge of ``bases``) went on the
    way to ``tips``: the renames the commits since record, oldest first,
    folder renames included.  A rename recorded with sealed names is read
    through ``reader``: the new name from the version it wrote."""
    current = {path: path for path in files}
    for commit in reached_since(repo, tips, bases):  # the parents commits record: a grafts file hides none
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


@dataclass
class _Version:
    """One side of a merge as the rules read it: its files (path -> blob id,
    or for a file a virtual base merged, an id of its own), their plain text,
    the commits it stands for (several for a virtual base), and its newest
    commit's time and id (the newer side keeps the path in a conflict)."""

    files: dict[str, bytes]
    plain: Callable[[str], bytes]
    commits: list[pygit2.Oid]
    newest: tuple[int, str]
    snapshot: Snapshot | None = None

    @property
    def label(self) -> str:
        return self.newest[1][:LABEL]


@dataclass
class _Reading:
    repo: pygit2.Repository
    read: ReadRaw
    keyring: Keyring
    trees: TreeCache
    sizes: SizeCache = field(default_factory=SizeCache)

    def at(self, commit: pygit2.Oid | None, common: bool) -> _Version:
        """The files of ``commit`` (None: the empty memory); ``common``: a
        version both sides shared, where an erased file reads as empty."""
        snap = Snapshot(self.read, self.keyring, self.sizes, self.trees, commit.raw if commit is not None else None)
        files = _files(snap)

        def plain(path: str) -> bytes:
            try:
                return self.keyring.open(path, self.read(files[path]))
            except ErasedError:
                if not common:
                    raise
                return b""  # an erased common version: both sides' texts stand alone (a conflict keeps both)

        if commit is None:
            return _Version(files, plain, [], (0, ""), snap)
        when = self.repo[commit].peel(pygit2.Commit).commit_time
        return _Version(files, plain, [commit], (when, str(commit)), snap)

    def common(self, ones: Sequence[pygit2.Oid], others: Sequence[pygit2.Oid]) -> _Version:
        """What ``ones`` and ``others`` last shared: their merge base, or
        when they have several (a criss-cross), the merge of those bases by
        the same rules, as git's recursive merge makes a virtual base."""
        found = merge_bases(self.repo, ones, others)
        version = self.at(found[0] if found else None, common=True)
        for other in found[1:]:
            right = self.at(other, common=True)
            base = self.common(version.commits, right.commits)
            version = self.virtual(base, version, right, self.merge(base, version, right))
        return version

    def merge(self, base: _Version, ours: _Version, theirs: _Version) -> rules.Result:
        versions: dict[rules.Side, _Version] = {"base": base, "ours": ours, "theirs": theirs}
        reader = (self.read, self.keyring, self.trees)
        tips = {
            side: rules.Tip(
                version.files, side_renames(self.repo, base.commits, version.commits, base.files, reader), version.label
            )
            for side, version in (("ours", ours), ("theirs", theirs))
        }
        prefer: rules.TipSide = "theirs" if theirs.newest > ours.newest else "ours"
        return rules.merge(base.files, tips["ours"], tips["theirs"], lambda s, p: versions[s].plain(p), prefer)

    @staticmethod
    def virtual(base: _Version, ours: _Version, theirs: _Version, result: rules.Result) -> _Version:
        """The merge of two common versions, unwritten: a base for a merge."""
        versions: dict[rules.Side, _Version] = {"base": base, "ours": ours, "theirs": theirs}
        files: dict[str, bytes] = {}
        for path, take in result.files.items():
            if take.content is not None:
                files[path] = b"text:" + hashlib.sha256(take.content).digest()
            else:
                assert take.side is not None and take.source is not None
                oid = versions[take.side].files[take.source]
                files[path] = oid if take.source == path else b"from:" + take.source.encode() + b"\0" + oid

        def plain(path: str) -> bytes:
            take = result.files[path]
            if take.content is not None:
                return take.content
            assert take.side is not None and take.source is not None
            return versions[take.side].plain(take.source)

        return _Version(files, plain, [*ours.commits, *theirs.commits], max(ours.newest, theirs.newest))


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
    ``ours`` (both tips of ``main``), against what both last shared: their
    merge base, or the merge of their merge bases when there are several."""
    reading = _Reading(repo, read, keyring, trees)
    sides = {"ours": reading.at(ours, common=False), "theirs": reading.at(theirs, common=False)}
    base = reading.common([ours], [theirs])
    for side in sides.values():
        # A version erased here that a side holds as a change of its own (a
        # clone restored it before the erasure reached it): nobody can read it,
        # so that side holds the file no more, as the erasure left it here.
        for path, oid in list(side.files.items()):
            if base.files.get(path) != oid and keyring.erasure_of(read(oid)) is not None:
                del side.files[path]
    result = reading.merge(base, sides["ours"], sides["theirs"])
    ours_snap = sides["ours"].snapshot
    assert ours_snap is not None

    def plain(side: rules.Side, path: str) -> bytes:
        return sides[side].plain(path)

    names = keyring.names
    editor = TreeEditor(read, trees, ours_snap.memories_id, layouts, names)
    if names is not None and not ours_snap.sealed and ours_snap.memories_id is not None:
        relay(ours_snap, editor)
    ours_files = sides["ours"].files
    changed: set[str] = set()
    for path in sorted(set(ours_files) - set(result.files)):
        editor.delete(parse(path))
        changed.add(path)
    for path, take in result.files.items():
        target = parse(path)
        if take.side is not None and take.source == path:
            oid = sides[take.side].files[path]
            if ours_files.get(path) == oid:
                continue
            editor.set(target, (objects.MODE_BLOB, oid))  # that side's blob as it is
        else:
            content = take.content if take.content is not None else plain(take.side or "ours", take.source or path)
            editor.write_blob(target, keyring.seal(path, content, now))
        changed.add(path)
    memories = editor.write()
    root, made = root_tree(memories, sealed=names is not None, marker_known=ours_snap.sealed)
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


def check_one_key_change(
    repo: pygit2.Repository, ours: Keyring, theirs: Keyring, local: pygit2.Oid, remote_ring: pygit2.Oid, remote: str
) -> None:
    """A pull that takes the other clone's new key (``theirs`` is wrapped
    under another key than ``ours``) merges only if this clone still has the
    key both last shared: a keyring they share (a merge base of ``local`` and
    ``remote_ring``) wrapped under this clone's key.  A key change on both
    hosts cannot be merged (ConflictError)."""
    if hmac.compare_digest(theirs.user_key.mac_key, ours.user_key.mac_key):
        return
    shared = [Keyring.parse(keyring_blob(repo, base)) for base in merge_bases(repo, [local], [remote_ring])]
    if not shared or any(_wrapped_under(doc, ours) for doc in shared):
        return  # no keyring in common (an erasure made a new one): nothing tells which side changed the key
    raise ConflictError(
        f"Error: the key was changed both here and on the remote {remote!r} since they last synced, and two key "
        "changes cannot be merged. Nothing was changed. To keep the remote's key, change this vault's key to it "
        "(`vaultmem key change`), then pull again."
    )


def _wrapped_under(doc: dict[str, Any], ring: Keyring) -> bool:
    """Whether the keyring document ``doc`` is sealed under ``ring``'s user key."""
    mac = doc.get("mac")
    return isinstance(mac, str) and hmac.compare_digest(mac, document_mac(doc, ring.user_key))


def merge_keyrings(ours: Keyring, theirs: Keyring, new_key_given: bool, now: int) -> Keyring:
    """Both keyrings' data keys in one, wrapped under this vault's user key,
    or under the new key given for the pull (a key change on the other clone)."""
    target = theirs if new_key_given else ours
    return Keyring.union([ours, theirs], target.user_key, dict(target.protector), now)


_CLASHED = object()  # a field the merge bases of a criss-cross set differently: equal to no side's value


def policy_base(
    repo: pygit2.Repository,
    ones: Sequence[pygit2.Oid],
    others: Sequence[pygit2.Oid],
    read: Callable[[pygit2.Oid], Policy],
) -> dict[str, Any]:
    """The policy fields ``ones`` and ``others`` (policy branch commits) last
    shared: their merge base's, or when they have several (a criss-cross)
    the bases merged field by field against their own common policy, as
    git's recursive merge makes a virtual base.  A field the bases set
    differently equals neither side's value, so a later change to it on
    both sides still clashes."""
    found = merge_bases(repo, ones, others)
    if not found:
        return Policy().to_dict()
    base = read(found[0]).to_dict()
    merged = [found[0]]
    for other in found[1:]:
        below = policy_base(repo, merged, [other], read)
        right = read(other).to_dict()
        base = {name: _field(below[name], base[name], right[name]) for name in base}
        merged.append(other)
    return base


def _field(base: object, ours: object, theirs: object) -> object:
    if ours == theirs or theirs == base:
        return ours
    if ours == base:
        return theirs
    return _CLASHED


def merge_policies(
    base: Policy | dict[str, Any], ours: Policy, theirs: Policy, prefer: str | None
) -> tuple[Policy, list[str]]:
    """Field by field: a field one side changed takes that side; one both
    sides set differently is refused (ConflictError naming it) unless
    ``prefer`` ("ours" or "theirs") says which side wins.  ``base`` is the
    common policy, or :func:`policy_base`'s fields.  Returns the policy and
    the fields it changes in this vault."""
    b = base.to_dict() if isinstance(base, Policy) else base
    o, t = ours.to_dict(), theirs.to_dict()
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
