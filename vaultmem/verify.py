"""``vault.verify()``: prove that nothing in a vault was altered.

Walks every commit of ``main`` and every object it reaches, and checks:

- each commit's seal (an HMAC under a data key over the whole commit object):
  a commit made or rewritten without the key fails it;
- each message parses and names a known command, its paths and its actor;
- each tree is well formed and canonical (git's order, only vaultmem's two
  modes, names a memory path may have);
- each blob authenticates under the keyring *at the path it is stored at*, so
  a blob moved or copied to another path is caught;
- the keyring document, re-read from disk: its MAC, its entries, its active key.

Read-only: it writes nothing, not even caches on disk.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import pygit2

from . import objects
from .crypto import Keyring, UserKey, keyring_problems
from .errors import VaultError
from .history import COMMANDS, parse_trailers, split_seal
from .paths import MemoryPath, parse

Progress = Callable[[int, int], None]
Kind = Literal["object", "seal", "message", "tree", "blob", "keyring", "policy"]


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
        self._decoded: dict[bytes, Entries] = {}  # recent well-formed trees, by id (bounded)
        self._bad_trees: set[bytes] = set()  # reported once each
        self._blob_ids: set[bytes] = set()
        self._tree_ids: set[bytes] = set()
        self._roots: dict[bytes, bytes] = {}  # commit id -> root tree id, for recent commits (bounded)
        self._commit = ""
        self.missing_keys: set[str] = set()

    def find(self, kind: Kind, path: str | None, detail: str) -> None:
        self.report.findings.append(Finding(kind, self._commit or None, path, detail))

    def read(self, oid: bytes, path: str | None) -> tuple[int, bytes] | None:
        try:
            kind, data = self.repo.odb.read(pygit2.Oid(raw=oid))
        except (KeyError, ValueError, pygit2.GitError) as err:
            self.find("object", path, f"object {oid.hex()} is missing or does not match its id ({err})")
            return None
        return int(kind), bytes(data)

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
        head, _, message = raw.partition(b"\n\n")
        self._check_message(head, message)
        lines = head.split(b"\n")
        tree_line = lines[0]
        if not tree_line.startswith(b"tree ") or len(tree_line) != 45:
            self.find("object", None, "the commit names no tree")
            return
        root = bytes.fromhex(tree_line[5:].decode("ascii"))
        base = _NO_TREE  # without a parent checked earlier, every entry is checked
        if len(lines) > 1 and lines[1].startswith(b"parent "):
            with contextlib.suppress(ValueError):  # a damaged parent line: compare with nothing
                base = self._roots.get(bytes.fromhex(lines[1][7:].decode("ascii")), _NO_TREE)
        if len(self._roots) >= _DECODED_LIMIT:  # a parent older than this is compared with nothing
            self._roots.pop(next(iter(self._roots)))
        self._roots[oid.raw] = root
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
                parse(value)
            except VaultError:
                self.find("message", None, f"Vaultmem-Path {value!r} is not a memory path")

    def _root(self, tree_id: bytes, base: bytes) -> None:
        if tree_id == base:
            return
        entries = self._tree(tree_id, "/", may_be_empty=True)  # the memory after its last file is deleted
        if entries is None:
            return
        extra = set(entries) - {b"memories"}
        if extra:
            self.find("tree", "/", f"the root tree holds more than memories/ ({sorted(extra)!r})")
        memories = entries.get(b"memories")
        if memories is None:
            return
        if memories[0] != objects.MODE_TREE:
            self.find("tree", "/memories", "memories is not a folder")
            return
        before = self._known(base).get(b"memories")
        self._walk(MemoryPath(()), memories[1], before[1] if before and before[0] == objects.MODE_TREE else _NO_TREE)

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
        entries = self._tree(tree_id, path.text)
        if entries is None:
            return
        before = self._known(base)
        for name, (mode, oid) in entries.items():
            old = before.get(name)
            if old == (mode, oid):
                continue
            try:
                child = path.child(name.decode("utf-8"))
                parse(child.text)
            except (UnicodeDecodeError, VaultError):
                self.find("tree", path.text, f"entry {name!r} is not a name a memory path may have")
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
        if len(self._decoded) >= _DECODED_LIMIT:
            self._decoded.pop(next(iter(self._decoded)))
        self._decoded[tree_id] = entries
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
            self.keyring.open(path.text, found[1])
        except VaultError:
            self.find("blob", path.text, "does not authenticate at this path (edited, or moved from another path)")


_DECODED_LIMIT = 4096


def verify(
    repo: pygit2.Repository,
    head: pygit2.Oid | None,
    keyring_doc: dict[str, Any] | None,
    keyring: Keyring,
    user_key: UserKey,
    progress: Progress | None = None,
) -> VerifyReport:
    """Check ``main`` from ``head`` with the keyring as it is on disk now."""
    report = VerifyReport()
    checker = Verifier(repo, keyring, report)
    if keyring_doc is None:
        checker.find("keyring", None, "the keyring branch is missing or unreadable")
    else:
        for problem in keyring_problems(keyring_doc, user_key):
            checker.find("keyring", None, problem)
        try:
            checker.keyring = Keyring.unlock(dict(keyring_doc), user_key)
        except VaultError as err:
            checker.find("keyring", None, f"the keyring on disk does not open: {err}")
    if keyring_doc is not None:
        on_disk = {e.get("id") for e in keyring_doc.get("data_keys", []) if isinstance(e, dict)}
        for key_id in sorted(set(keyring.keys) - on_disk):
            checker.find(
                "keyring", None, f"data key {key_id} is gone from the keyring on disk (removed or rolled back)"
            )
    if head is not None:
        _walk(repo, head, checker, progress)
    for key_id in sorted(checker.missing_keys - set(keyring.keys)):
        checker._commit = ""
        checker.find(
            "keyring", None, f"the history uses data key {key_id}, which the keyring lacks (removed or rolled back)"
        )
    return report


def _walk(repo: pygit2.Repository, head: pygit2.Oid, checker: Verifier, progress: Progress | None) -> None:
    order = [c.id for c in repo.walk(head, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)]
    for done, oid in enumerate(order, 1):
        checker.commit(oid)
        if progress is not None:
            progress(done, len(order))
