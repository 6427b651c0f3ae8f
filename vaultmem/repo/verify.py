"""``vault.verify()``: prove that nothing in a vault was altered.

Walks every commit of ``main`` and every object it reaches, and checks:

- each commit's seal (an HMAC under a data key over the whole commit object):
  a commit made or rewritten without the key fails it;
- each message parses and names a known command, its paths and its actor;
- each tree is well formed and canonical (git's order, only vaultmem's two
  modes, names a memory path may have);
- each blob authenticates under the keyring *at the path it is stored at*, so
  a blob moved or copied to another path is caught;
- the keyring document, re-read from disk: its MAC, its entries, its active key;
- that nothing makes git show another history than the commits record: a
  ``shallow`` or ``info/grafts`` file, or a replace ref;
- that no copy of a keyring an erasure or a migration replaced is still on
  the disk, as far as vaultmem's records of them tell (one cut short, or
  brought back by a fetch), and no ref names a keyring lacking erasures the
  vault's keyring records (another clone's, copied in with git);
- that every commit of the keyring branch was made by vaultmem and holds no
  older keyring than its parent's (an old copy put back on top);
- each commit's dates, each pack index (its checksum, the pack it names),
  and an ``objects/info/alternates`` file;
- that no object declares more bytes than vaultmem ever writes: a zlib bomb
  is refused from its header, before anything is inflated.

The history walked is the one the commit objects record, read from their
bytes: git's shallow and grafts files are not honoured.  Nothing raises: a
commit, tree or blob that is missing or damaged (a flipped byte in a pack, a
pack cut short or gone) is a finding, and the versions before an unreadable
commit are reported as out of reach.

Read-only: it writes nothing, not even caches on disk.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pygit2

from vaultmem.core.crypto import Keyring, UserKey, keyring_problems
from vaultmem.core.lru import LRU
from vaultmem.core.names import MARKER, MARKER_CONTENT, is_token
from vaultmem.core.paths import MemoryPath, parse_stored
from vaultmem.core.versions import COMMANDS, parse_trailers, split_seal
from vaultmem.errors import VaultError
from vaultmem.git import commits as commit_path
from vaultmem.git import journal, midx, objects, prune
from vaultmem.git.journal import DAMAGED_JOURNAL
from vaultmem.repo import keys
from vaultmem.repo.history import OversizedObject, RawCommit, UnreadableVersion, hiding_files, read_commit, read_object

Progress = Callable[[int, int], None]
Kind = Literal[
    "object",
    "seal",
    "message",
    "tree",
    "blob",
    "keyring",
    "policy",
    "shallow",
    "grafts",
    "replace",
    "remote",
    "erasure",
    "unsigned",
    "unknown signer",
    "wrong actor",
    "revoked",
    "expired",
    "bad signature",
    "checkpoint",
]
# raw commit -> (signed, problem); signed None: neither counted as signed nor as unsigned
SignatureCheck = Callable[[bytes], "tuple[bool | None, tuple[str, str] | None]"]


@dataclass(frozen=True)
class Finding:
    kind: Kind
    version: str | None
    path: str | None
    detail: str

    def __str__(self) -> str:
        where = " ".join(part for part in (self.version[:12] if self.version else None, self.path) if part)
        return f"{self.kind}: {where + ': ' if where else ''}{self.detail}"


@dataclass
class VerifyReport:
    commits: int = 0
    blobs: int = 0
    trees: int = 0
    erased: int = 0  # file versions erased on purpose (their keys destroyed): not findings
    signed: int = 0  # commits of main whose signature was checked and counts
    unsigned: int = 0  # commits of main without a signature (a finding only where signatures were required)
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def problems(self) -> list[str]:
        return [str(f) for f in self.findings]


Entries = dict[bytes, tuple[int, bytes]]
_NO_TREE = b""  # stands for "no tree here before" when comparing with a parent


class Verifier:
    """Checks commits oldest first.  Each commit is compared with its first
    parent: an entry with the same id at the same path was checked when it
    first appeared, so only what a commit changed is read and decrypted.  The
    work per commit is the size of its change, and memory stays the size of
    one tree, however long the history."""

    def __init__(self, repo: pygit2.Repository, keyring: Keyring, report: VerifyReport) -> None:
        self.repo = repo
        self.keyring = keyring
        self.report = report
        self._decoded: LRU[bytes, Entries] = LRU(_DECODED_LIMIT)  # recent well-formed trees, by id
        self._bad_trees: set[bytes] = set()  # reported once each
        self._blob_ids: set[bytes] = set()
        self._tree_ids: set[bytes] = set()
        self._roots: LRU[bytes, bytes] = LRU(_DECODED_LIMIT)  # commit id -> root tree id, recent commits
        self._commit = ""
        self.missing_keys: set[str] = set()
        self.erased: dict[bytes, str] = {}  # erased blob -> the erasure commit its record names
        self.listed: dict[bytes, str] = {}  # blob -> the forget commit that lists it
        self._sealed = False  # whether the commit being checked seals its names
        self.signatures: SignatureCheck | None = None  # set when the vault has signers or requires signatures

    def find(self, kind: Kind, path: str | None, detail: str) -> None:
        self.report.findings.append(Finding(kind, self._commit or None, path, detail))

    def read(self, oid: bytes, path: str | None) -> tuple[int, bytes] | None:
        try:
            return read_object(self.repo, pygit2.Oid(raw=oid))
        except OversizedObject as err:
            self.find("object", path, str(err))
        except (KeyError, ValueError, pygit2.GitError, MemoryError) as err:
            self.find("object", path, f"object {oid.hex()} is missing or does not match its id ({err})")
        return None

    def commit(self, oid: pygit2.Oid) -> None:
        self._commit = str(oid)
        self.report.commits += 1
        found = self.read(oid.raw, None)
        if found is None:
            return
        kind, raw = found
        if kind != pygit2.enums.ObjectType.COMMIT:
            self.find("object", None, "main points at something that is not a commit")
            return
        self._check_seal(raw)
        if self.signatures is not None:
            signed, problem = self.signatures(raw)
            if signed and problem is None:
                self.report.signed += 1
            elif signed is False:
                self.report.unsigned += 1
            if problem is not None:
                self.find(problem[0], None, problem[1])  # type: ignore[arg-type]
        head, _, message = raw.partition(b"\n\n")
        self._check_message(head, message)
        self._check_dates(head)
        for line in message.split(b"\n"):
            if line.startswith(b"Vaultmem-Erased: "):
                with contextlib.suppress(ValueError, IndexError):
                    self.listed[bytes.fromhex(line.split(b" ")[2].decode("ascii"))] = self._commit
        lines = head.split(b"\n")
        tree_line = lines[0]
        if not tree_line.startswith(b"tree ") or len(tree_line) != 45:
            self.find("object", None, "the commit names no tree")
            return
        root = bytes.fromhex(tree_line[5:].decode("ascii"))
        base = _NO_TREE  # without a parent checked earlier, every entry is checked
        if len(lines) > 1 and lines[1].startswith(b"parent "):
            with contextlib.suppress(ValueError):  # a damaged parent line: compare with nothing
                known = self._roots.get(bytes.fromhex(lines[1][7:].decode("ascii")))
                if known is not None:  # else a parent no longer held: compare with nothing
                    base = known
        self._roots.put(oid.raw, root)
        self._root(root, base)

    def _check_seal(self, raw: bytes) -> None:
        body, seal = split_seal(raw)
        if seal is None:
            self.find("seal", None, "the commit carries no vaultmem-seal: it was not written by vaultmem with the key")
            return
        problem = self.keyring.check_commit_seal(seal, body)
        key_id = seal.split(b" ", 1)[0].decode("ascii", "replace")
        if key_id not in self.keyring.keys:
            self.missing_keys.add(key_id)
        if problem is not None:
            self.find("seal", None, problem)

    def _check_dates(self, head: bytes) -> None:
        """One author and one committer line, each with a date that can be:
        whole seconds since 1970 up to the end of year 9999, and a time zone
        of ``+HHMM`` (git and libgit2 show anything else as some other date)."""
        lines = head.split(b"\n")
        for name in (b"author", b"committer"):
            found = [line for line in lines if line.startswith(name + b" ")]
            if len(found) != 1:
                self.find("message", None, f"the commit has {len(found)} {name.decode()} lines, not one")
                continue
            fields = found[0][found[0].rfind(b">") + 1 :].split()
            seconds = fields[0] if len(fields) == 2 else b""
            if (
                not (0 < len(seconds) <= len(str(_LATEST)) and seconds.isdigit() and int(seconds) <= _LATEST)
                or _ZONE.fullmatch(fields[1]) is None
            ):
                shown = b" ".join(fields).decode("ascii", "replace")[:48]
                self.find(
                    "message",
                    None,
                    f"the {name.decode()} date {shown!r} is no possible date (git shows it as another one): "
                    "vaultmem never writes it",
                )

    def _check_message(self, head: bytes, message: bytes) -> None:
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            self.find("message", None, "the message is not UTF-8")
            return
        trailers = parse_trailers(text)
        command = trailers.get("Vaultmem-Command", [None])[0]
        if command not in COMMANDS:
            self.find("message", None, f"unknown or missing Vaultmem-Command ({command!r})")
        if not text.startswith("memory: "):
            self.find("message", None, "the subject does not start with 'memory: '")
        actors = trailers.get("Vaultmem-Actor", [])
        if len(actors) != 1:
            self.find("message", None, "the message must name exactly one Vaultmem-Actor")
        elif not any(line.startswith(b"author " + actors[0].encode() + b" <") for line in head.split(b"\n")):
            self.find("message", None, "the commit's author is not its Vaultmem-Actor")
        if command is not None and not trailers.get("Vaultmem-Path"):
            self.find("message", None, "the message names no Vaultmem-Path")
        for value in trailers.get("Vaultmem-Path", []):
            try:
                parse_stored(value)
            except VaultError:
                self.find("message", None, f"Vaultmem-Path {value!r} is not a memory path")

    def _root(self, tree_id: bytes, base: bytes) -> None:
        if tree_id == base:
            return
        entries = self._tree(tree_id, "/", may_be_empty=True)  # the memory after its last file is deleted
        if entries is None:
            return
        extra = set(entries) - {b"memories", MARKER}
        if extra:
            self.find("tree", "/", f"the root tree holds more than memories/ ({sorted(extra)!r})")
        self._sealed = MARKER in entries
        if self._sealed:
            self._check_marker(entries[MARKER])
        memories = entries.get(b"memories")
        if memories is None:
            return
        if memories[0] != objects.MODE_TREE:
            self.find("tree", "/memories", "memories is not a folder")
            return
        before = self._known(base).get(b"memories")
        self._walk(MemoryPath(()), memories[1], before[1] if before and before[0] == objects.MODE_TREE else _NO_TREE)

    def _check_marker(self, entry: tuple[int, bytes]) -> None:
        found = self.read(entry[1], "/") if entry[0] == objects.MODE_BLOB else None
        if found is None or found[1] != MARKER_CONTENT:
            self.find("tree", "/", "the sealed-names marker is not the blob vaultmem writes")
        if self.keyring.names is None:
            self.find("keyring", None, "this version seals its names, but the keyring holds no name key")

    def _known(self, tree_id: bytes) -> Entries:
        """A tree checked earlier (in a parent); empty if it was not well formed."""
        if tree_id == _NO_TREE or tree_id in self._bad_trees:
            return {}
        entries = self._decoded.get(tree_id)
        if entries is None:
            found = self.read(tree_id, None)
            entries = objects.decode_tree(found[1]) if found is not None else {}
        return entries

    def _walk(self, path: MemoryPath, tree_id: bytes, base: bytes) -> None:
        """Check the tree at ``path`` against ``base``, the tree that was there
        in the parent: only entries that differ from it are looked at."""
        if tree_id == base:
            return  # the same tree at the same place: checked when it appeared
        if len(path.parts) >= objects.MAX_DEPTH:
            self.find("tree", path.text, f"folders nest deeper than any memory path can ({objects.MAX_DEPTH} levels)")
            return
        entries = self._tree(tree_id, path.text)
        if entries is None:
            return
        before = self._known(base)
        for name, (mode, oid) in entries.items():
            old = before.get(name)
            if old == (mode, oid):
                continue
            try:
                child = path.child(objects.entry_name(name))
                parse_stored(child.text)
            except (ValueError, VaultError):
                self.find("tree", path.text, f"entry {name!r} is not a name a memory path may have")
                continue
            if self._sealed and not is_token(child.name):
                self.find("tree", path.text, f"entry {name!r} is a plain name in a version that seals its names")
                continue
            if mode == objects.MODE_TREE:
                self._walk(child, oid, old[1] if old is not None and old[0] == objects.MODE_TREE else _NO_TREE)
            elif mode == objects.MODE_BLOB:
                self._blob(child, oid)

    def _tree(self, tree_id: bytes, where: str, may_be_empty: bool = False) -> Entries | None:
        if tree_id in self._bad_trees:
            return None
        cached = self._decoded.get(tree_id)
        if cached is not None:
            return cached
        found = self.read(tree_id, where)
        entries: Entries | None = None
        if found is not None:
            kind, data = found
            entries = objects.decode_tree(data) if kind == pygit2.enums.ObjectType.TREE else None
            self._tree_ids.add(tree_id)
            self.report.trees = len(self._tree_ids)
            if entries is None:
                self.find("tree", where, "a tree entry points at something that is not a tree")
            elif objects.encode_tree(entries) != data:
                self.find("tree", where, "the tree is malformed or not in git's canonical order")
                entries = None
            elif not entries and not may_be_empty:
                self.find("tree", where, "an empty tree (vaultmem never writes one)")
            else:
                for name, (mode, _) in entries.items():
                    if mode not in (objects.MODE_TREE, objects.MODE_BLOB):
                        self.find("tree", where, f"entry {name.decode('utf-8', 'replace')!r} has mode {mode:o}")
                        entries = None
                        break
        if entries is None:
            self._bad_trees.add(tree_id)
            return None
        self._decoded.put(tree_id, entries)
        return entries

    def _blob(self, path: MemoryPath, oid: bytes) -> None:
        self._blob_ids.add(oid)
        self.report.blobs = len(self._blob_ids)
        found = self.read(oid, path.text)
        if found is None:
            return
        try:
            key_id = self.keyring.key_id_of(found[1])
            if key_id not in self.keyring.keys:
                self.missing_keys.add(key_id)
                self.find("blob", path.text, f"encrypted with data key {key_id!r}, which is not in the keyring")
                return
            erasure = self.keyring.erasure_of(found[1])
            if erasure is not None:
                self.erased[oid] = erasure.commit
                self.report.erased = len(self.erased)
                return
            if self._sealed:
                self.keyring.open_stored(path.text, found[1])
            else:
                self.keyring.open(path.text, found[1])
        except VaultError:
            self.find("blob", path.text, "does not authenticate at this path (edited, or moved from another path)")


_DECODED_LIMIT = 4096
_LATEST = 253_402_300_799  # 9999-12-31T23:59:59Z, the last second a date can name
_ZONE = re.compile(rb"[+-][0-9]{4}")


def verify(
    repo: pygit2.Repository,
    head: pygit2.Oid | None,
    keyring_doc: dict[str, Any] | None,
    keyring: Keyring,
    user_key: UserKey,
    progress: Progress | None = None,
    signatures: SignatureCheck | None = None,
) -> VerifyReport:
    """Check ``main`` from ``head`` with the keyring as it is on disk now
    (and each commit's signature with ``signatures``)."""
    report = VerifyReport()
    checker = Verifier(repo, keyring, report)
    checker.signatures = signatures
    if keyring_doc is None:
        checker.find("keyring", None, "the keyring branch is missing or unreadable")
    else:
        for problem in keyring_problems(keyring_doc, user_key):
            checker.find("keyring", None, problem)
        try:
            checker.keyring = Keyring.unlock(dict(keyring_doc), user_key)
            checker.keyring.shadows = keyring.shadows  # a migrated vault's format 1 versions
        except VaultError as err:
            checker.find("keyring", None, f"the keyring on disk does not open: {err}")
    if keyring_doc is not None:
        on_disk = {
            e.get("id")
            for e in [*keyring_doc.get("data_keys", []), *(keyring_doc.get("epochs") or [])]
            if isinstance(e, dict)
        }
        for key_id in sorted(set(keyring.keys) - on_disk):
            checker.find(
                "keyring", None, f"data key {key_id} is gone from the keyring on disk (removed or rolled back)"
            )
    real = _walk(repo, head, checker, progress) if head is not None else set()
    checker._commit = ""
    _hiding_files(repo, head, real, checker)
    _replace_refs(repo, real, checker)
    _multi_pack_index(repo, checker)
    _pack_indexes(repo, checker)
    _alternates(repo, checker)
    if journal.header_damaged(Path(repo.path)):
        checker.find("object", None, DAMAGED_JOURNAL)
    _erasures(repo, checker, real)
    _replaced_keyrings(repo, checker)
    _keyring_history(repo, checker)
    _shadows(repo, checker)
    missing = sorted(checker.missing_keys - set(keyring.keys))
    held = _ever_held(repo) if missing else set()
    for key_id in missing:
        checker._commit = ""
        if key_id in held:
            checker.find(
                "keyring",
                None,
                f"the history uses data key {key_id}, which the keyring lacks: an earlier keyring of this vault "
                "held it (removed or rolled back)",
            )
        else:
            checker.find(
                "keyring",
                None,
                f"the history names data key {key_id!r}, which no keyring of this vault holds or held: the "
                "versions naming it were made without the vault's key (forged), unless the keyring was rolled "
                "back to before the key was made",
            )
    return report


def _keyring_doc(repo: pygit2.Repository, commit: Any) -> dict[str, Any] | None:
    """The keyring document a keyring commit holds (None: none readable)."""
    try:
        kind, tree = read_object(repo, commit.tree_id)
        entry = objects.decode_tree(tree).get(keys.KEYRING_FILE.encode()) if kind == objects.TREE else None
        doc = json.loads(read_object(repo, pygit2.Oid(raw=entry[1]))[1]) if entry is not None else None
    except (KeyError, ValueError, pygit2.GitError, MemoryError):
        return None
    return doc if isinstance(doc, dict) else None


def _key_entries(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for listed in (doc.get("data_keys"), doc.get("epochs")):
        for key in listed if isinstance(listed, list) else ():
            if isinstance(key, dict) and isinstance(key.get("id"), str):
                out[key["id"]] = key
    return out


def _went_back(doc: dict[str, Any], before: dict[str, Any]) -> str | None:
    """How a keyring document undoes what the one before it held (None: it
    does not): vaultmem only adds data keys, destroys them, and adds erasure
    records, except in a keyring it starts anew (a commit with no parent)."""
    mine, theirs = _key_entries(doc), _key_entries(before)
    dropped = sorted(set(theirs) - set(mine))
    if dropped:
        return f"it drops data key {dropped[0]}{' and more' if len(dropped) > 1 else ''}"
    revived = sorted(k for k, e in theirs.items() if "wrapped" not in e and "wrapped" in mine[k])
    if revived:
        return f"it brings back destroyed data key {revived[0]}{' and more' if len(revived) > 1 else ''}"
    old, new = before.get("erased"), doc.get("erased")
    if isinstance(old, dict) and old and not (isinstance(new, dict) and set(old) <= set(new)):
        return "it drops records of erasures"
    if "names" in before and "names" not in doc:
        return "it drops the name key"
    return None


def _keyring_history(repo: pygit2.Repository, checker: Verifier) -> None:
    """Each commit of the keyring branch made by vaultmem, and none holding
    an older keyring than the one before it (an old copy replayed on top
    would bring back keys an erasure destroyed): the document's MAC cannot
    tell, since an old copy carries a good one."""
    ref = repo.references.get(keys.KEYRING_REF)
    target = ref.target if ref is not None else None
    if not isinstance(target, pygit2.Oid):
        return
    checker._commit = ""
    for oid, commit in _keyring_commits(repo, [target]):  # one unreadable is skipped: the keyring has its own MAC
        committer = commit.committer_line
        if not committer.startswith(commit_path.COMMITTER + b" "):
            checker.find(
                "keyring",
                None,
                f"the keyring branch's commit {str(oid)[:10]} was not made by vaultmem (its committer is "
                f"{committer[:60].decode('utf-8', 'replace')!r})",
            )
        doc = _keyring_doc(repo, commit) if commit.parent_ids else None
        for parent in commit.parent_ids:
            try:
                before = _keyring_doc(repo, read_commit(repo, parent))
            except UnreadableVersion:
                continue
            problem = _went_back(doc, before) if doc is not None and before is not None else None
            if problem is not None:
                checker.find(
                    "keyring",
                    None,
                    f"the keyring branch's commit {str(oid)[:10]} holds an older keyring than its parent "
                    f"{str(parent)[:10]}: {problem} (a copy of an old keyring put back); restore the keyring "
                    "branch from a clone",
                )
                break


_KEYRING_COMMITS = 100_000  # keyring commits checked at most (a keyring starts anew at each erasure)


def _keyring_commits(repo: pygit2.Repository, tips: list[pygit2.Oid]) -> Iterator[tuple[pygit2.Oid, RawCommit]]:
    """Each readable commit of the keyring histories from ``tips``, once, up
    to ``_KEYRING_COMMITS`` of them (an unreadable one is skipped)."""
    seen: set[bytes] = set()
    stack = list(tips)
    while stack and len(seen) < _KEYRING_COMMITS:
        oid = stack.pop()
        if oid.raw in seen:
            continue
        seen.add(oid.raw)
        try:
            commit = read_commit(repo, oid)
        except UnreadableVersion:
            continue
        stack.extend(commit.parent_ids)
        yield oid, commit


def _ever_held(repo: pygit2.Repository) -> set[str]:
    """The ids of the data keys any keyring of the keyring histories lists
    (read from the documents' plain fields: no key needed)."""
    held: set[str] = set()
    for _, commit in _keyring_commits(repo, keys.keyring_tips(repo)):
        doc = _keyring_doc(repo, commit)
        held |= set(_key_entries(doc)) if doc is not None else set()
    return held


SHADOWS_REF = "refs/heads/vaultmem-shadows"


def _shadows(repo: pygit2.Repository, checker: Verifier) -> None:
    """A migrated vault (data keys kept for their seals only) reads its
    format 1 versions through the shadow branch: it must be there, sealed."""
    if all(key.fernet is not None for key in checker.keyring.keys.values() if key.id not in checker.keyring.covers):
        return
    checker._commit = ""
    ref = repo.references.get(SHADOWS_REF)
    if ref is None:
        checker.find("keyring", None, "the vault was migrated, but its vaultmem-shadows branch is missing")
        return
    found = checker.read(bytes.fromhex(str(ref.target)), None)
    if found is None:
        return
    body, seal = split_seal(found[1])
    problem = "it carries no seal" if seal is None else checker.keyring.check_commit_seal(seal, body)
    if problem is not None:
        checker.find("keyring", None, f"the vaultmem-shadows branch's commit {ref.target}: {problem}")


def _fetched(repo: pygit2.Repository, commit: str) -> bool:
    """Whether ``commit`` is a commit of a remote's main this vault fetched."""
    try:
        oid = pygit2.Oid(hex=commit)
        for ref in repo.references:
            if ref.startswith("refs/remotes/") and ref.endswith("/main"):
                tip = repo.references[ref].target
                if isinstance(tip, pygit2.Oid) and (tip == oid or repo.descendant_of(tip, oid)):
                    return True
    except (ValueError, KeyError, pygit2.GitError):
        return False
    return False


def _erasures(repo: pygit2.Repository, checker: Verifier, real: set[bytes]) -> None:
    """Every erased version is listed by a forget commit of the history, and
    every version a forget commit lists is erased."""
    for oid, commit in sorted(checker.erased.items()):
        checker._commit = commit
        if oid not in checker.listed or not commit or bytes.fromhex(commit) not in real:
            problem = (
                f"blob {oid.hex()} cannot be read (its key is destroyed) and no forget commit of the history lists it"
            )
            if commit and _fetched(repo, commit):  # a pull took the remote's keyring, then stopped before main
                problem += f": forget commit {commit[:10]} was pulled but is not in main yet; run `vaultmem pull` again"
            checker.find("erasure", None, problem)
    for oid, commit in sorted(checker.listed.items()):
        if oid in checker.erased:
            continue
        checker._commit = commit
        found = checker.read(oid, None)
        if found is None:
            continue
        with contextlib.suppress(VaultError):
            if checker.keyring.erasure_of(found[1]) is None:
                checker.find(
                    "erasure",
                    None,
                    f"blob {oid.hex()} is listed as erased but its key still exists: the erasure "
                    "was cut short, or the keyring was put back from before it; vaultmem reads it as erased, "
                    "and the next write (or the same erasure run again) destroys the key",
                )
    checker._commit = ""


def _replaced_keyrings(repo: pygit2.Repository, checker: Verifier) -> None:
    """Objects of keyrings an erasure or a migration replaced (as its records
    in the state folder name them) that are still on the disk: they hold the
    keys it destroyed.  An erasure or migration cut short, a pack another
    program kept, or a fetch that brought one back; the same erasure run
    again, or the next write, push or pull, removes them."""
    ref = repo.references.get(keys.KEYRING_REF)
    target = ref.target if ref is not None else None
    if not isinstance(target, pygit2.Oid):
        return
    gitdir = Path(repo.path)
    keep = keys.keyring_objects(repo, [target])
    doomed = keys.due(gitdir)
    for tip in keys.replaced(gitdir) - keep:
        doomed |= keys.keyring_objects(repo, [pygit2.Oid(raw=tip)])
    left = sorted(oid.hex() for oid in doomed - keep if repo.odb.exists(oid.hex()))
    if left:
        checker._commit = ""
        checker.find(
            "erasure",
            None,
            f"{_plural(len(left), 'object')} of a keyring replaced by an erasure or a migration "
            f"({left[0][:12]}{', ...' if len(left) > 1 else ''}) {'is' if len(left) == 1 else 'are'} still on the "
            "disk, with keys it destroyed: run the same erasure (or `vaultmem migrate`) again to remove them",
        )
    elif copies := sorted(keys.lagging_copies(repo), key=lambda copy: (copy[0] == "FETCH_HEAD", copy[0])):
        checker._commit = ""
        checker.find(
            "erasure",
            None,
            f"{copies[0][0]}{' and more' if len(copies) > 1 else ''} names a keyring ({str(copies[0][1])[:10]}) "
            "that lacks erasures this vault made, so it may still hold the keys they destroyed (a clone's keyring "
            "copied in with git): run the same erasure again, or any write, to remove it",
        )
    elif unnamed := sorted(oid.hex() for oid in keys.unnamed_lagging(repo)):
        checker._commit = ""
        checker.find(
            "erasure",
            None,
            f"{_plural(len(unnamed), 'object')} of a keyring no ref names ({unnamed[0][:12]}"
            f"{', ...' if len(unnamed) > 1 else ''}: fetched in with git, or made by hand) "
            f"{'is' if len(unnamed) == 1 else 'are'} on the disk, and that keyring lacks erasures this vault made, "
            "so it may still hold the keys they destroyed: run the same erasure again to remove it",
        )
    elif keys.due(gitdir) - keep and (held := prune.git_leftovers(gitdir)):
        checker._commit = ""
        checker.find(
            "erasure",
            None,
            f"an erasure's removal of the keyring it replaced is unfinished: {held[0]}"
            f"{' and more' if len(held) > 1 else ''} (a file git was writing) may hold a copy, with keys it "
            "destroyed: run the same erasure again (such a file is removed once an hour old)",
        )
    if checker.keyring.erased and (bundles := keys.keyring_bundles(repo)):
        checker._commit = ""
        checker.find(
            "erasure",
            None,
            f"the git bundle {bundles[0]}{' and more' if len(bundles) > 1 else ''} in the vault folder holds a "
            "keyring from before an erasure (or another clone's), which may hold the keys it destroyed: move it "
            "out of the vault folder, or delete it",
        )


def _walk(repo: pygit2.Repository, head: pygit2.Oid, checker: Verifier, progress: Progress | None) -> set[bytes]:
    """Check every commit oldest first; the ids of those that could be read."""
    order = _oldest_first(repo, head, checker)
    for done, oid in enumerate(order, 1):
        checker.commit(oid)
        if progress is not None:
            progress(done, len(order))
    return {oid.raw for oid in order}


def _oldest_first(repo: pygit2.Repository, head: pygit2.Oid, checker: Verifier) -> list[pygit2.Oid]:
    """The commits reachable from ``head`` through the parents their objects
    record (not the ones a shallow or grafts file gives them), each after its
    parents.  A commit that cannot be read is a finding, and what lies behind
    it is out of reach."""
    order: list[pygit2.Oid] = []
    expanded: set[bytes] = set()
    stack: list[tuple[pygit2.Oid, bool]] = [(head, False)]
    while stack:
        oid, parents_done = stack.pop()
        if parents_done:
            order.append(oid)
            continue
        if oid.raw in expanded:
            continue
        expanded.add(oid.raw)
        try:
            commit = read_commit(repo, oid)
        except UnreadableVersion as err:
            checker._commit = str(oid)
            checker.find(
                "object",
                None,
                f"this version {err.detail}: it and the versions before it cannot be read or checked "
                "(git fsck names the damaged pack; restore the vault from a backup or a clone)",
            )
            continue
        stack.append((oid, True))
        stack.extend((parent, False) for parent in reversed(commit.parent_ids) if parent.raw not in expanded)
    return order


# -- what makes stock git show another history ------------------------------------


def _graft_table(path: str) -> dict[bytes, tuple[pygit2.Oid, ...]]:
    """A shallow or grafts file: commit -> the parents git shows for it (the
    ids after it on its line; none in a shallow file).  Lines that are not
    ids (comments, damage) are skipped, as git skips them."""
    try:
        with open(path, "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except OSError:
        return {}
    table: dict[bytes, tuple[pygit2.Oid, ...]] = {}
    for line in text.split("\n"):
        words = line.split()
        try:
            ids = [pygit2.Oid(hex=word) for word in words if len(word) == 40] if words else []
        except ValueError:
            continue
        if ids and len(ids) == len(words):
            table.setdefault(ids[0].raw, tuple(ids[1:]))
    return table


def _shown_by_git(
    repo: pygit2.Repository,
    head: pygit2.Oid,
    shallow: dict[bytes, tuple[pygit2.Oid, ...]],
    grafts: dict[bytes, tuple[pygit2.Oid, ...]],
) -> set[bytes]:
    """The ids git walks from ``head`` with these files in place (a shallow
    entry wins over a graft, as in git)."""
    shown: set[bytes] = set()
    stack = [head]
    while stack:
        oid = stack.pop()
        if oid.raw in shown:
            continue
        shown.add(oid.raw)
        if oid.raw in shallow:
            parents: tuple[pygit2.Oid, ...] = ()
        elif oid.raw in grafts:
            parents = grafts[oid.raw]
        else:
            try:
                parents = read_commit(repo, oid).parent_ids
            except UnreadableVersion:
                parents = ()  # reported by the walk
        stack.extend(p for p in parents if p.raw not in shown)
    return shown


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _hiding_files(repo: pygit2.Repository, head: pygit2.Oid | None, real: set[bytes], checker: Verifier) -> None:
    """A ``shallow`` or ``info/grafts`` file is a finding (vaultmem writes
    neither): it says what git shows of ``main`` because of it."""
    names = hiding_files(repo)
    if not names:
        return
    tables = {name: _graft_table(os.path.join(repo.path, name)) for name in names}
    if head is None:
        effect = "main has no versions yet"
    else:
        shown = _shown_by_git(repo, head, tables.get("shallow", {}), tables.get("info/grafts", {}))
        hidden, added = len(real - shown), len(shown - real)
        effect = f"git log and other git commands hide {hidden} of the {len(real)} versions of main"
        if added:
            effect += f" and show {_plural(added, 'version')} that {'is' if added == 1 else 'are'} not in its history"
    for name in names:
        table = tables[name]
        named = ", ".join(str(pygit2.Oid(raw=oid))[:10] for oid in list(table)[:3])
        more = f" and {len(table) - 3} more" if len(table) > 3 else ""
        listed = f" naming {_plural(len(table), 'version')} ({named}{more})" if table else ""
        if name == "shallow":
            advice = (
                "git shows the versions it names as having no parents; if the vault is a shallow copy, "
                "restore it from a full one, otherwise remove the shallow file (vaultmem never writes it)"
            )
            checker.find(
                "shallow", None, f"the vault holds a shallow file{listed}: {effect}; verify read past it; {advice}"
            )
        else:
            advice = "remove info/grafts (vaultmem never writes it)"
            checker.find(
                "grafts", None, f"the vault holds info/grafts{listed}: {effect}; verify read past it; {advice}"
            )


def _replace_refs(repo: pygit2.Repository, real: set[bytes], checker: Verifier) -> None:
    """A replace ref makes git show another object in place of the one it
    names (libgit2 and vaultmem do not); vaultmem writes none."""
    try:
        replaced = [name for name in repo.references if name.startswith("refs/replace/")]
    except (KeyError, ValueError, pygit2.GitError) as err:
        checker.find("replace", None, f"the vault's refs cannot be listed ({err})")
        return
    for name in replaced:
        oid = name[len("refs/replace/") :]
        try:
            what = "version" if pygit2.Oid(hex=oid).raw in real else "object"
        except ValueError:
            what = "object"
        checker.find(
            "replace",
            None,
            f"the vault holds {name}: git log and git show show another object in place of {what} {oid[:10]}; "
            f"verify read the real one; remove it with git replace -d {oid} (vaultmem never writes replace refs)",
        )


def _multi_pack_index(repo: pygit2.Repository, checker: Verifier) -> None:
    """Git's multi-pack-index naming a pack that is not in objects/pack:
    stock git then fails to read the objects it attributes to that pack
    (``git fsck``, ``git log``), although vaultmem may read them from another
    copy.  vaultmem never takes a pack an index lists away (see
    :mod:`vaultmem.git.midx`); something else did."""
    gone = midx.missing(Path(repo.path) / "objects" / "pack")
    if gone:
        checker.find(
            "object",
            None,
            f"git's multi-pack-index names {_plural(len(gone), 'pack')} missing from objects/pack "
            f"({gone[0]}{', ...' if len(gone) > 1 else ''}): stock git cannot read the objects it places there; "
            "remove objects/pack/multi-pack-index (and objects/pack/multi-pack-index.d) and run "
            "`git multi-pack-index write` to index the packs that are there",
        )


def _pack_indexes(repo: pygit2.Repository, checker: Verifier) -> None:
    """Each pack index whole (its checksum, its size for its count) and
    naming its pack's checksum: libgit2 reads through a damaged one, stock
    git refuses it (``git fsck``: the index file is corrupt)."""
    folder = Path(repo.path) / "objects" / "pack"
    try:
        names = sorted(name for name in os.listdir(folder) if name.startswith("pack-") and name.endswith(".idx"))
    except OSError:
        return
    checker._commit = ""
    for name in names:
        pack = folder / (name[: -len(".idx")] + ".pack")
        try:
            idx = (folder / name).read_bytes()
            with open(pack, "rb") as fh:
                fh.seek(-20, os.SEEK_END)
                pack_sum = fh.read(20)
        except FileNotFoundError:
            continue  # retired meanwhile, or a pack gone: its objects are reported missing
        except OSError as err:
            checker.find("object", None, f"pack {pack.name} or its index cannot be read ({err.strerror})")
            continue
        if not objects.valid_index(idx):
            problem = "is damaged (its checksum or its size does not match its contents)"
        elif idx[-40:-20] != pack_sum:
            problem = "names another pack than the one beside it (the pack was changed or cut short)"
        else:
            continue
        checker.find(
            "object",
            None,
            f"the pack index {name} {problem}: stock git refuses it; if `git fsck` finds the pack whole, "
            f"remove the index and run `git index-pack objects/pack/{pack.name}` in the vault to rebuild it",
        )


def _alternates(repo: pygit2.Repository, checker: Verifier) -> None:
    """``objects/info/alternates`` makes git and vaultmem read objects from
    other folders (``git clone --shared`` or ``--reference`` writes it;
    vaultmem never does): the vault folder alone, or a copy of it, may then
    lack objects of its history, and whoever can write there adds objects."""
    path = Path(repo.path) / "objects" / "info" / "alternates"
    try:
        text = path.read_bytes()[:4096].decode("utf-8", "replace")
    except FileNotFoundError:
        return
    except OSError as err:
        text = f"<unreadable: {err.strerror}>"
    named = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    if not named:
        return
    checker._commit = ""
    checker.find(
        "object",
        None,
        f"the vault reads objects from {_plural(len(named), 'other folder')} (objects/info/alternates names "
        f"{named[0]!r}{' and more' if len(named) > 1 else ''}): a copy of the vault folder alone may lack "
        "versions of its history; run `git repack -a -d` in the vault, then remove objects/info/alternates",
    )
