"""The git-backed vault: open it, read a snapshot, apply a change as one commit,
history, restore, verify.  Knows git; knows nothing about Claude's strings.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
import re
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Self

import pygit2

from vaultmem.core import paths
from vaultmem.core.crypto import (
    FORMAT_VERSION,
    FORMATS,
    Erasure,
    Keyring,
    UserKey,
    check_new_passphrase,
    key_from_environment,
    new_kdf_params,
    read_key_file,
)
from vaultmem.core.names import TOKEN_LENGTH
from vaultmem.core.paths import MemoryPath
from vaultmem.core.policy import Policy
from vaultmem.core.values import is_int
from vaultmem.core.versions import (
    RESTORED_FROM,
    SEAL_HEADER,
    Filters,
    Version,
    format_message,
    parse_trailers,
    parse_when,
    parse_words,
)
from vaultmem.errors import (
    BadKeyError,
    BusyError,
    ConflictError,
    IntegrityError,
    NotAVaultError,
    NotFoundError,
    StorageError,
    VaultError,
)
from vaultmem.git import commits as commit_path
from vaultmem.git import durable, objects, prune
from vaultmem.git.commits import (
    COMMITTER,
    DAMAGED,
    CommitPath,
    Draft,
    RefMoved,
    ident,
    read_ref_or_damaged,
    replay,
)
from vaultmem.git.journal import Journal
from vaultmem.git.snapshot import Layouts, RecentObjects, SizeCache, Snapshot, TreeCache, TreeEditor, relay, root_tree
from vaultmem.git.upkeep import Upkeep
from vaultmem.repo import keys
from vaultmem.repo import merge as merging
from vaultmem.repo import policy as policy_mod
from vaultmem.repo import remotes as sharing
from vaultmem.repo.history import SealedNames, first_parents, hiding_files, read_commit, walk
from vaultmem.repo.keys import KEYRING_REF, SHADOWS_REF, KeyInfo, keyring_blob, write_keyring
from vaultmem.repo.reads import ReadLog
from vaultmem.repo.verify import Finding, Progress, VerifyReport, verify

MAIN = "refs/heads/main"
ATTEMPTS = 3  # builds of one change when another program keeps moving main
Clock = Callable[[], float]

_SIGNATURE_BAD = set("<>\n\r\0")
_TIME_LIKE = re.compile(r"\d{4}-\d{2}-\d{2}([T ]|$)")
_SEALED_PATH = re.compile(rf"/memories(?:/n[a-z2-7]{{{TOKEN_LENGTH}}}(?![^/\s,]))+")


def _check_label(kind: str, value: str | None, optional: bool = False) -> None:
    """Actor and session names end up in commit headers and trailers."""
    if value is None and optional:
        return
    if not isinstance(value, str) or not value.strip() or len(value) > 200:
        raise VaultError(f"Error: the {kind} must be a non-empty string of at most 200 characters.")
    if any(ch in _SIGNATURE_BAD or ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise VaultError(
            f"Error: the {kind} {value!r} contains a character git cannot record (<, >, or a control character)."
        )


# -- changes ---------------------------------------------------------------


@dataclass
class Change:
    """What one mutation does, described in memory terms.

    Built by the caller (the tool) from a fresh snapshot taken under the writer
    lock; applied by the vault as exactly one commit.
    """

    command: str
    paths: tuple[MemoryPath, ...]
    writes: list[tuple[MemoryPath, bytes]] = field(default_factory=list)
    deletes: list[MemoryPath] = field(default_factory=list)
    moves: list[tuple[MemoryPath, MemoryPath]] = field(default_factory=list)
    restores: list[tuple[MemoryPath, tuple[int, bytes] | None]] = field(default_factory=list)
    trailers: list[tuple[str, str]] = field(default_factory=list)
    subject: str | None = None  # instead of the paths, after "memory: COMMAND "

    def write(self, path: MemoryPath, content: bytes) -> Change:
        self.writes.append((path, content))
        return self

    def delete(self, path: MemoryPath) -> Change:
        self.deletes.append(path)
        return self

    def move(self, old: MemoryPath, new: MemoryPath) -> Change:
        self.moves.append((old, new))
        return self


# -- the vault ---------------------------------------------------------------


class Store:
    """An encrypted, versioned memory store in a bare git repository."""

    def __init__(self, path: Path, keyring: Keyring, clock: Clock) -> None:
        self.path = path
        self._keyring = keyring
        keyring.shadows = self._shadow
        self.clock = clock
        self._local = threading.local()
        self._sizes = SizeCache()
        self._trees = TreeCache()
        self._layouts = Layouts()
        self._recent = RecentObjects()
        self._lock = durable.WriterLock(path)
        self._commits = CommitPath(path, self._lock)
        self._upkeep = Upkeep(path, self._lock, self._commits)
        # After a power cut, until a writer repairs git's files: main as the
        # journal says it is, if main on disk is still what it was (see _load_overlay).
        self._overlay: tuple[bytes | None, bytes] | None = None
        self._alternate: str | None = None  # the journal's packs, in that case (outside the vault)
        self._policy: tuple[str | None, Policy] | None = None
        self._chain: tuple[bytes | None, set[bytes]] = (None, set())  # main's commit ids, see _on_main
        self._chain_lock = threading.Lock()
        self.reads = ReadLog(path, self._stored_text)
        self._keyring_stamp: list[tuple[int, int, int] | None] | None = None
        self._keyring_changed()
        self._erasure_checked = False
        self._replaced_keyrings: set[bytes] = set()  # keyrings an erasure replaced: removed again if fetched

    @property
    def keyring(self) -> Keyring:
        """The keys this vault reads and writes with."""
        return self._keyring

    @keyring.setter
    def keyring(self, keyring: Keyring) -> None:
        keyring.shadows = self._shadow
        self._keyring = keyring

    def _shadow(self, oid: str) -> bytes | None:
        """The shadow of the format 1 blob ``oid`` in a migrated vault, or None."""
        try:
            ref = self.repo.references.get(SHADOWS_REF)
            if ref is None:
                return None
            tree = self.repo[ref.target].peel(pygit2.Commit).tree
            entry = tree[f"{oid[:2]}/{oid[2:]}"]
            return self._read_raw(entry.id.raw)
        except (KeyError, ValueError, pygit2.GitError, VaultError):
            return None

    def close(self) -> None:
        """Finish pending upkeep and release the vault's file descriptors
        (reopened if the vault is used again)."""
        self._upkeep.stop()
        self._lock.close()
        self._commits.close()
        self._free_handle()

    def _free_handle(self) -> None:
        """Release this thread's libgit2 handle and the packs it maps (a
        handle is freed only by the cycle collector otherwise)."""
        repo = getattr(self._local, "repo", None)
        self._local.repo = None
        if repo is not None:
            repo.free()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- opening -------------------------------------------------------------

    @staticmethod
    def _user_key(
        key: str | None,
        key_file: str | os.PathLike[str] | None,
        passphrase: str | None,
        protector: dict[str, Any] | None,
    ) -> UserKey:
        given = [
            name
            for name, value in (("key", key), ("key_file", key_file), ("passphrase", passphrase))
            if value is not None
        ]
        if len(given) > 1:
            raise BadKeyError(f"Error: give only one of a key, a key file and a passphrase (got {', '.join(given)}).")
        if key is not None:
            return UserKey.from_string(key)
        if key_file is not None:
            return read_key_file(key_file)
        if passphrase is not None:
            if protector is None:
                return UserKey.from_passphrase(passphrase, new_kdf_params())
            if protector.get("kind") != "passphrase":
                raise BadKeyError("Error: this vault is protected by a key, not a passphrase.", step="use-key")
            return UserKey.from_passphrase(passphrase, protector)
        env = key_from_environment()
        if env is not None:
            return env
        raise BadKeyError("Error: no key given.", step="give-key")

    @classmethod
    def init(
        cls,
        path: str | os.PathLike[str],
        *,
        key: str | None = None,
        key_file: str | os.PathLike[str] | None = None,
        passphrase: str | None = None,
        clock: Clock = time.time,
        storage_format: int = FORMAT_VERSION,
        sealed_names: bool = False,
    ) -> Self:
        """Create a new, empty vault in ``path`` (which must be missing or empty).
        ``sealed_names=True`` stores every name as an opaque token, the real
        name encrypted with each version (docs/erasure.md, "Sealed names").
        ``storage_format=1`` makes a vault of the format before erasure
        existed (for tests of the migration and of old vaults)."""
        if storage_format not in FORMATS:
            raise VaultError(f"Error: storage format {storage_format!r} is not one this vaultmem writes (1 or 2).")
        if not isinstance(sealed_names, bool):
            raise VaultError("Error: sealed_names must be True or False.")
        if sealed_names and storage_format < 2:
            raise VaultError("Error: sealed names need storage format 2.")
        folder = Path(path)
        if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
            raise VaultError(f"Error: {folder} exists and is not an empty folder; choose a new folder for the vault.")
        protector: dict[str, Any] = {"kind": "key"}
        if passphrase is not None and key is None and key_file is None:
            check_new_passphrase(passphrase)
            protector = {"kind": "passphrase", **new_kdf_params()}
            user_key = UserKey.from_passphrase(passphrase, protector)
        else:
            user_key = cls._user_key(key, key_file, passphrase, {"kind": "key"})
        now = int(clock())
        existed = folder.exists()
        vault: Self | None = None
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            repo = pygit2.init_repository(str(folder), bare=True, initial_head="main")
            repo.config["core.logAllRefUpdates"] = "false"
            repo.config["gc.auto"] = "0"
            repo.config["vaultmem.format"] = str(storage_format)
            repo.config["receive.denyNonFastForwards"] = "true"  # plain git cannot force a push into it
            (folder / durable.STATE_DIR).mkdir(mode=0o700)
            keyring = Keyring.create(user_key, protector, now, storage_format)
            if sealed_names:
                keyring.seal_names(now)
            vault = cls(folder, keyring, clock)
            durable.sync_filesystem(folder)
            with vault._lock.hold():
                write_keyring(vault._commits, keyring, "vaultmem: create keyring", now)
            vault._keyring_changed()  # the keyring it holds is the one just written
        except BaseException as err:
            # A full disk or a folder that is not writable: take back what
            # was made, so a refused init leaves the folder as it found it.
            if vault is not None:
                with contextlib.suppress(Exception):
                    vault.close()
            _remove_made(folder, existed)
            if isinstance(err, StorageError):
                raise StorageError(f"{err} No vault was created in {folder}.") from err
            if isinstance(err, OSError):
                reason = commit_path.storage_reason(err)
            elif isinstance(err, pygit2.GitError):
                reason = f"the storage failed ({err})"
            else:
                raise
            raise StorageError(
                f"Error: {reason}, so no vault was created in {folder}. Free space or fix the permissions, "
                "then try again."
            ) from err
        return vault

    @staticmethod
    def protection(path: str | os.PathLike[str]) -> str | None:
        """How the vault at ``path`` is protected, read without a key: ``"key"``
        or ``"passphrase"``; None when it is not a vault or its keyring cannot
        be read (opening it then says why)."""
        try:
            repo = pygit2.Repository(str(path), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
            ref = repo.references.get(KEYRING_REF)
            if ref is None:
                return None
            protector = Keyring.parse(keyring_blob(repo, ref.target)).get("protector")
        except (pygit2.GitError, VaultError, OSError, KeyError, ValueError):
            return None
        kind = protector.get("kind") if isinstance(protector, dict) else None
        return kind if kind in ("key", "passphrase") else None

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        key: str | None = None,
        key_file: str | os.PathLike[str] | None = None,
        passphrase: str | None = None,
        clock: Clock = time.time,
    ) -> Self:
        """Open an existing vault; a wrong key or a folder that is not a vault is
        one clear error here, before any other work."""
        folder = Path(path)
        if folder.exists() and not folder.is_dir():
            raise NotAVaultError(f"Error: {folder} is not a vault: it is a file, not a folder.")
        if not folder.is_dir():
            raise NotAVaultError(f"Error: {folder} is not a vault: no such folder.", step="create")
        try:
            repo = pygit2.Repository(str(folder), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
        except pygit2.GitError as err:
            raise NotAVaultError(f"Error: {folder} is not a vault (not a git repository).") from err
        ref = repo.references.get(KEYRING_REF)
        if not repo.is_bare or ref is None:
            raise NotAVaultError(f"Error: {folder} is not a vault (a git repository without a vaultmem keyring).")
        alternate, overlay = _power_cut_view(folder)
        try:
            if alternate is not None:
                repo.odb.add_disk_alternate(alternate)
            doc = Keyring.parse(keyring_blob(repo, ref.target))
            user_key = cls._user_key(key, key_file, passphrase, doc.get("protector"))
            vault = cls(folder, Keyring.unlock(doc, user_key), clock)
        except BaseException:
            if alternate is not None:
                shutil.rmtree(alternate, ignore_errors=True)
            raise
        if alternate is not None:
            weakref.finalize(vault, shutil.rmtree, alternate, True)
        vault._alternate, vault._overlay = alternate, overlay
        return vault

    # -- plumbing ------------------------------------------------------------

    @property
    def repo(self) -> pygit2.Repository:
        """This thread's repository handle (libgit2 handles are not shared)."""
        repo: pygit2.Repository | None = getattr(self._local, "repo", None)
        if repo is None:
            repo = self._local.repo = self._handle()
        return repo

    def _head(self) -> pygit2.Oid | None:
        raw = read_ref_or_damaged(self.path, MAIN)  # the loose ref file, read directly: microseconds
        overlay = self._overlay
        if overlay is not None:
            if overlay[0] == raw:
                return pygit2.Oid(raw=overlay[1])
            self._overlay = None  # a writer has repaired main (or moved it): the disk is right again
        if raw == DAMAGED:
            try:
                ref = self.repo.references.get(MAIN)  # a symbolic ref, or damage: libgit2 decides
                return ref.resolve().target if ref is not None else None  # type: ignore[return-value]
            except (pygit2.GitError, KeyError, ValueError) as err:
                raise IntegrityError(
                    "Error: the vault's refs/heads/main does not hold a commit id (a power cut?). The next "
                    "write repairs it from vaultmem's journal if it can; otherwise run `vaultmem verify`."
                ) from err
        return pygit2.Oid(raw=raw) if raw is not None else None

    def _handle(self) -> pygit2.Repository:
        repo = pygit2.Repository(str(self.path), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
        if self._alternate is not None:
            repo.odb.add_disk_alternate(self._alternate)
        return repo

    def _keyring_changed(self) -> bool:
        """Whether the keyring ref may have moved since the keyring was read
        (two stats: its loose file and packed-refs)."""
        stamp: list[tuple[int, int, int] | None] = []
        for name in (KEYRING_REF, "packed-refs"):
            try:
                st = os.stat(os.path.join(self.path, name))
                stamp.append((st.st_ino, st.st_mtime_ns, st.st_size))
            except OSError:
                stamp.append(None)
        if stamp == self._keyring_stamp:
            return False
        self._keyring_stamp = stamp
        return True

    def refresh_keyring(self) -> None:
        """Read the keyring again if another process changed it (an erasure
        destroyed keys, a rotation added one): this instance then stops
        reading what was erased, and never writes back a keyring it has
        superseded."""
        if not self._keyring_changed():
            return
        try:
            ref = self.repo.references.get(KEYRING_REF)
            if ref is None:
                return
            doc = Keyring.parse(keyring_blob(self.repo, ref.target))
            if doc == self.keyring.doc:
                return
            ring = Keyring.unlock(doc, self.keyring.user_key)
            if ring.intact and ring.supersedes(self.keyring):
                self.keyring = ring
            # Otherwise it was edited without the key, or rolled back (a key
            # lost, an erased key back): verify() reports it; never adopted.
        except (VaultError, pygit2.GitError, KeyError, ValueError):
            self._keyring_stamp = None  # read again next time: it may be mid-write, or another key now opens it

    def snapshot(self, at: str | datetime | None = None) -> Snapshot:
        """A consistent read-only view of the memory, now or at a version."""
        self.refresh_keyring()
        if at is not None:
            commit_id: bytes | None = self._resolve(at).id.raw
        else:
            head = self._head()
            commit_id = head.raw if head is not None else None
        return Snapshot(self._read_raw, self.keyring, self._sizes, self._trees, commit_id)

    def snapshot_of(self, commit: pygit2.Commit | None) -> Snapshot:
        """A read-only view of the memory as ``commit`` left it (None: the
        empty memory before the first version)."""
        return Snapshot(self._read_raw, self.keyring, self._sizes, self._trees, commit.id.raw if commit else None)

    def commit_at(self, at: str | datetime) -> pygit2.Commit:
        """The commit of ``main``'s history that ``at`` names: an id, a git
        revision or a point in time (NotFoundError otherwise)."""
        return self._resolve(at)

    def head(self) -> pygit2.Oid | None:
        """The commit ``main`` points to (None for a vault with no version yet)."""
        return self._head()

    def _read_raw(self, oid: bytes) -> bytes:
        """An object's data: from what this vault wrote lately, else git."""
        data = self._recent.get(oid)
        if data is None:
            try:
                data = bytes(self.repo.odb.read(pygit2.Oid(raw=oid))[1])
            except (KeyError, pygit2.GitError) as err:
                raise IntegrityError(
                    f"Error: object {oid.hex()} is missing from the vault; run `vaultmem verify`."
                ) from err
        return data

    def _resolve(self, at: str | datetime) -> pygit2.Commit:
        """A commit of ``main``'s history: by id, git revision or point in time.
        Commits outside that history (the keyring branch, dangling objects) are
        not versions of the memory and are refused."""
        head = self._head()
        if isinstance(at, datetime) or (isinstance(at, str) and _looks_like_time(at)):
            return self._at_time(parse_when(at), head)
        if not isinstance(at, str) or not at.strip():
            raise NotFoundError("Error: a version must be an id, a revision such as main~2, or a time.")
        try:
            commit = self.repo.revparse_single(at.strip()).peel(pygit2.Commit)
        except (KeyError, ValueError, pygit2.GitError, pygit2.InvalidSpecError) as err:
            words = parse_words(at, self.clock())  # "2 days ago": after ids and revisions, never before
            if words is not None:
                return self._at_time(words, head)
            raise NotFoundError(f"Error: no version {at!r} in this vault.", step="versions") from err
        if head is None or not self._on_main(commit.id, head):
            raise NotFoundError(f"Error: {at!r} is not a version of this vault's memory history.")
        return commit

    def _at_time(self, when: datetime, head: pygit2.Oid | None) -> pygit2.Commit:
        """The newest version at or before ``when`` along main's first
        parents: the memory as this vault's main held it then (a merge's
        first parent is the side that made it)."""
        if head is not None:
            for commit in first_parents(self.repo, head):
                if commit.author.time <= when.timestamp():
                    return self.repo[commit.id].peel(pygit2.Commit)
        raise NotFoundError(f"Error: no version at or before {when.isoformat()}; the history starts later.")

    def _on_main(self, oid: pygit2.Oid, head: pygit2.Oid) -> bool:
        """Whether ``oid`` is ``head`` or one of its ancestors (through every
        parent: a merge brings the other side's versions into main's history).

        The ids of main's history are walked once and kept in memory; later
        calls walk only the commits made since, and start over if main no
        longer descends from where the last walk began (moved back or rewritten).
        """
        if oid == head:
            return True
        with self._chain_lock:
            tip, known = self._chain
            if tip != head.raw:
                fresh, reached = self._walk_since(head, tip, known)
                if not reached:  # main does not continue from the walked tip: walk all of it
                    fresh, _ = self._walk_since(head, None, set())
                    known = set()
                known.update(fresh)
                self._chain = (head.raw, known)
            return oid.raw in known

    def _walk_since(self, head: pygit2.Oid, tip: bytes | None, known: set[bytes]) -> tuple[set[bytes], bool]:
        """The commits ``head`` reaches through the parents they record,
        stopping at ``tip`` and the ids in ``known``; and whether ``tip`` was reached."""
        repo = self.repo
        if not hiding_files(repo):  # libgit2's walk: the recorded parents, at C speed
            try:
                reached = tip is None or repo.descendant_of(head, pygit2.Oid(raw=tip))
            except (KeyError, ValueError, pygit2.GitError):
                reached = False  # the walked tip is gone: walk all of it
            try:
                walker = repo.walk(head, pygit2.enums.SortMode.NONE)
                if reached and tip is not None:
                    walker.hide(pygit2.Oid(raw=tip))
                return {commit.id.raw for commit in walker}, reached
            except (KeyError, ValueError, pygit2.GitError):
                pass  # a damaged commit: the raw walk below names it (IntegrityError)
        fresh: set[bytes] = set()
        reached = tip is None
        stack = [head]
        while stack:
            oid = stack.pop()
            if oid.raw == tip:
                reached = True
                continue
            if oid.raw in known or oid.raw in fresh:
                continue
            fresh.add(oid.raw)
            stack.extend(read_commit(self.repo, oid).parent_ids)
        return fresh, reached

    # -- writing -------------------------------------------------------------

    def _seal(self, plain: bytes) -> list[tuple[bytes, bytes]]:
        return [(SEAL_HEADER, self.keyring.seal_commit(plain))]

    def mutate(
        self,
        build: Callable[[Snapshot], Change],
        *,
        actor: str,
        session: str | None = None,
        skip_if_unchanged: bool = False,
        after: Callable[[Version], None] | None = None,
    ) -> Version | None:
        """Apply one change as exactly one durable commit.

        ``build`` runs under the writer lock on a snapshot of the current head,
        so it sees every earlier write; if it raises, nothing is written.  With
        ``skip_if_unchanged``, a change that would leave the memory as it is
        makes no commit and returns None (restore); otherwise every successful
        mutation is recorded, even one that replaced text with itself.
        ``after`` runs with the new version, still under the writer lock
        (an erasure destroys its keys there).
        """
        _check_label("actor", actor)
        _check_label("session", session, optional=True)
        with self._lock.hold():
            self._commits.recover()
            if not self._erasure_checked:
                with contextlib.suppress(VaultError):  # an unfinished erasure never fails another write
                    self._finish_erasure()
            self._upkeep.remove_redundant()
            for attempt in range(ATTEMPTS):
                snap = self.snapshot()
                change = build(snap)
                now = int(self.clock())
                old_root = snap.memories_id
                names = self.keyring.names
                editor = TreeEditor(self._read_raw, self._trees, old_root, self._layouts, names)
                if names is not None and not snap.sealed and old_root is not None:
                    relay(snap, editor)  # the first commit with sealed names: every file under its token path
                self._stage(snap, editor, change, now)
                memories = editor.write()
                resealed = old_root is not None and snap.sealed != (names is not None)
                if skip_if_unchanged and memories == old_root and not resealed:
                    return None
                root, made = root_tree(memories, sealed=names is not None, marker_known=snap.sealed)
                message = format_message(
                    change.command,
                    tuple(names.seal(p) for p in change.paths) if names is not None else change.paths,
                    actor,
                    session,
                    change.trailers,
                    subject=change.subject,
                )
                parents = [snap.commit_id] if snap.commit_id is not None else []
                draft = Draft(root.id, parents, ident(actor, actor), now, message)
                try:
                    commit = self._commits.commit(MAIN, snap.commit_id, [*editor.new, *made], draft, self._seal)
                except RefMoved:
                    if attempt + 1 == ATTEMPTS:
                        raise ConflictError(
                            "Error: another program keeps moving the vault's main branch; nothing was changed. "
                            "Try again when it has finished."
                        ) from None
                    continue
                break
            self._recent.add([*editor.new, *made, commit])
            self.reads.note(_written(change), now, always=True)
            version = Version(
                id=commit.id.hex(),
                time=datetime.fromtimestamp(now, tz=timezone.utc),
                actor=actor,
                session=session,
                command=change.command,
                paths=tuple(p.text for p in change.paths),
                message=message,
                restored_from=next((v for k, v in change.trailers if k == RESTORED_FROM), None),
            )
            if after is not None:
                after(version)
        self._upkeep.poke()
        return version

    def _stored_text(self, text: str) -> str:
        """A path's text as this vault records it (sealed, if it seals names)."""
        names = self._keyring.names
        return names.seal_text(text) if names is not None else text

    @property
    def sealed_names(self) -> bool:
        """Whether this vault seals its names (see :mod:`vaultmem.core.names`)."""
        return self.keyring.names is not None

    def _stage(self, snap: Snapshot, editor: TreeEditor, change: Change, now: int) -> None:
        for target, entry in change.restores:
            if target.is_root:
                editor.replace_root(entry[1] if entry is not None else None)
            elif entry is None:
                if editor.get(target) is not None:
                    editor.delete(target)
            else:
                editor.set(target, entry)
        for path in change.deletes:
            editor.delete(path)
        for old, new in change.moves:
            moved = [(p, oid) for p, oid in snap.files(old)]
            if editor.get(new) is not None:
                raise ConflictError(f"Error: {new} already exists.")
            for file_path, oid in moved:
                plain = self.keyring.open(file_path.text, self._read_raw(oid))
                target = MemoryPath(new.parts + file_path.parts[len(old.parts) :])
                editor.write_blob(target, self.keyring.seal(target.text, plain, now))
            editor.delete(old)
        for path, content in change.writes:
            editor.write_blob(path, self.keyring.seal(path.text, content, now))

    # -- reading and auditing ----------------------------------------------

    def resolve(self, at: str | datetime) -> Version:
        """The version ``at`` names: an id (or an unambiguous prefix), a git
        revision such as ``main~2``, or a point in time (the newest version at
        or before it; see :func:`history.parse_when`)."""
        return self.present(Version.from_commit(self._resolve(at)))

    def sealed_history(self) -> SealedNames | None:
        """What the history needs to follow paths through sealed names, or None."""
        names = self.keyring.names
        if names is None:
            return None

        def unseal(commit: bytes, stored: MemoryPath) -> MemoryPath | None:
            try:
                return self._snapshot_at(commit).unseal(stored)
            except (VaultError, KeyError, ValueError, pygit2.GitError):
                return None

        return SealedNames(names, unseal)

    def _snapshot_at(self, commit: bytes) -> Snapshot:
        return Snapshot(self._read_raw, self.keyring, self._sizes, self._trees, commit)

    def unseal_text(self, text: str, commits: list[bytes]) -> str:
        """Every sealed path in ``text`` (a message, a trailer) spelled with
        its real name, read from the trees of ``commits`` (a version and its
        parents); one whose every version was erased stays sealed."""
        names = self.keyring.names
        if names is None or "/memories/n" not in text:
            return text

        def real(match: re.Match[str]) -> str:
            stored = paths.parse_stored(match.group(0))
            found = names.known(stored)
            for commit in commits:
                if found is not None:
                    break
                with contextlib.suppress(VaultError, KeyError, ValueError, pygit2.GitError):
                    found = self._snapshot_at(commit).unseal(stored)
            return found.text if found is not None else match.group(0)

        return _SEALED_PATH.sub(real, text)

    def present(self, version: Version) -> Version:
        """``version`` with real names where its commit records sealed ones."""
        if self.keyring.names is None or "/memories/n" not in version.message:
            return version
        try:
            commit = read_commit(self.repo, pygit2.Oid(hex=version.id))
        except VaultError:
            return version
        where = [commit.id.raw, *(p.raw for p in commit.parent_ids)]
        message = self.unseal_text(version.message, where)
        trailers = parse_trailers(message)
        return dataclasses.replace(
            version,
            message=message,
            paths=tuple(trailers.get("Vaultmem-Path", [])),
            conflicts=tuple(trailers.get("Vaultmem-Conflict", [])),
        )

    def read(self, path: str, at: str | datetime | None = None) -> str:
        """A file's text now, or at an earlier version."""
        target = paths.parse(path)
        snap = self.snapshot(at)
        if snap.kind(target) != "file":
            where = f" at version {at}" if at is not None else ""
            raise NotFoundError(f"Error: no file {target}{where}.")
        return snap.read_text(target)

    def listing(
        self, path: str = "/memories", at: str | datetime | None = None, depth: int | None = None
    ) -> list[Entry]:
        """Every file and folder below ``path`` (hidden ones included), sorted
        by path, with plaintext sizes; ``depth=1`` lists direct children only."""
        target = paths.parse(path)
        if depth is not None and (not is_int(depth) or depth < 1):
            raise VaultError("Error: depth must be a positive integer.")
        snap = self.snapshot(at)
        kind = snap.kind(target)
        if kind is None:
            where = f" at version {at}" if at is not None else ""
            raise NotFoundError(f"Error: no file or folder {target}{where}.")
        if kind == "file":
            return [Entry(target.text, "file", snap.size(target))]
        listed = snap.listing(target, depth=depth or 1_000_000, hidden=True)
        ordered = sorted(listed, key=lambda item: item.path.parts)  # a folder's contents right after it
        return [Entry(item.path.text, item.kind, item.size) for item in ordered]

    def history(
        self,
        path: str | None = None,
        limit: int | None = None,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        actor: str | None = None,
        session: str | None = None,
        command: str | None = None,
    ) -> list[Version]:
        """Versions newest first, filtered (all filters must hold).  With
        ``path``, the versions that changed it, followed back across renames."""
        if limit is not None and (not is_int(limit) or limit < 0):
            raise VaultError("Error: limit must be a non-negative integer.")
        for name, value in (("actor", actor), ("session", session), ("command", command)):
            if value is not None and not isinstance(value, str):
                raise VaultError(f"Error: {name} must be a string.")
        filters = Filters(
            path=paths.parse(path) if path is not None else None,
            since=parse_when(since, "since time", now=self.clock()) if since is not None else None,
            until=parse_when(until, "until time", end_of_day=True, now=self.clock()) if until is not None else None,
            actor=actor,
            session=session,
            command=command,
        )
        head = self._head()
        out: list[Version] = []
        if head is None or limit == 0:
            return out
        for version in walk(self.repo, head, filters, self.sealed_history()):
            out.append(self.present(version))
            if limit is not None and len(out) >= limit:
                break
        return out

    def _empty_snapshot(self) -> Snapshot:
        return Snapshot(self._read_raw, self.keyring, self._sizes, self._trees, None)

    def verify(self, progress: Progress | None = None) -> VerifyReport:
        """Check every commit and object of the history, and the keyring as it
        is on disk now; see :mod:`vaultmem.verify`."""
        ref = self.repo.references.get(KEYRING_REF)
        doc: dict[str, Any] | None = None
        if ref is not None:
            try:
                doc = Keyring.parse(keyring_blob(self.repo, ref.target))
            except VaultError:
                doc = None
        # Its own repository handle: libgit2 caches the trees and commits it
        # reads (up to 256 MB), and this one is dropped when verify returns.
        repo = self._handle()
        try:
            report = verify(repo, self._head(), doc, self.keyring, self.keyring.user_key, progress)
        finally:
            repo.free()
        try:
            policy_mod.read_policy(self.repo, self.keyring)  # the policy in force: sealed and well formed
        except VaultError as err:
            report.findings.append(Finding("policy", None, None, str(err)))
        for remote in sharing.list_remotes(self.repo):  # as last fetched: verify reads no network
            problem = sharing.witness_problem(self.repo, remote.name)
            if problem is not None:
                report.findings.append(Finding("remote", None, None, problem))
        return report

    # -- expiry (vaultmem.expiry does the work) ----------------------------------

    def note_read(self, path: str) -> None:
        """Record that a file was read now (for expiry; kept outside the history)."""
        self.reads.note([paths.parse(path).text], self.clock())

    # -- policy (vaultmem.policy does the work) ----------------------------------

    @property
    def policy(self) -> Policy:
        """The vault's stored policy (the defaults until an operator sets one).
        Raises IntegrityError if the stored policy fails its seal."""
        raw = read_ref_or_damaged(self.path, policy_mod.POLICY_REF)
        target = raw.hex() if raw is not None else None
        cached = self._policy
        if cached is None or cached[0] != target:
            policy, _ = policy_mod.read_policy(self.repo, self.keyring)
            cached = self._policy = (target, policy)
        return cached[1]

    def set_policy(
        self,
        policy: Policy | None = None,
        *,
        actor: str,
        session: str | None = None,
        reset: bool = False,
        **changes: Any,
    ) -> Policy:
        """Change the vault's policy: a whole new ``policy``, or some fields
        (``secrets="refuse"``, ``max_files=500``, ``expire_after="30d"``) on top
        of the current one (of the defaults with ``reset``).  One sealed commit
        on the policy branch records the actor; a change that changes nothing
        makes none.  A whole policy or ``reset`` also replaces a stored policy
        that fails its seal, which is how an operator with the key repairs it."""
        _check_label("actor", actor)
        _check_label("session", session, optional=True)
        if policy is not None and (changes or reset):
            raise VaultError("Error: give either a whole policy or fields to change, not both.")
        if policy is not None and not isinstance(policy, Policy):
            raise VaultError("Error: policy must be a vaultmem.Policy.")
        with self._lock.hold():
            try:
                current: Policy | None = policy_mod.read_policy(self.repo, self.keyring)[0]
            except IntegrityError:
                if policy is None and not reset:
                    raise
                current = None  # damaged: replaced whole
            base = Policy() if reset or current is None else current
            new = policy if policy is not None else base.with_changes(changes)
            changed = new.changed_fields(current) if current is not None else list(new.to_dict())
            if changed:
                now = int(self.clock())
                self._commits.recover()
                policy_mod.write_policy(self._commits, self._seal, new, changed, actor, session, now)
            return new

    def policy_history(self, limit: int | None = None) -> list[policy_mod.PolicyVersion]:
        """Every change of the policy, newest first: who, when, which fields."""
        return policy_mod.history(self.repo, self.keyring, limit)

    # -- keys (vaultmem.keys does the work) --------------------------------------

    def keys(self) -> list[KeyInfo]:
        """The data keys, oldest first; new writes use the active one."""
        return keys.list_keys(self.keyring)

    def change_key(
        self,
        *,
        key: str | None = None,
        key_file: str | os.PathLike[str] | None = None,
        passphrase: str | None = None,
    ) -> None:
        """Protect the vault with a new user key or passphrase.  Only the
        keyring is rewrapped: instant whatever the history's size."""
        given = [v for v in (key, key_file, passphrase) if v is not None]
        if len(given) != 1:
            raise BadKeyError("Error: give exactly one new key, key file or passphrase.")
        protector: dict[str, Any] = {"kind": "key"}
        if passphrase is not None:
            check_new_passphrase(passphrase)
            protector = {"kind": "passphrase", **new_kdf_params()}
            new_key = UserKey.from_passphrase(passphrase, protector)
        else:
            new_key = self._user_key(key, key_file, None, None)
        with self._lock.hold():
            self._commits.recover()
            keys.check_unchanged(self.repo, self.keyring)
            now = int(self.clock())
            self.keyring.rewrap(new_key, protector, now)
            write_keyring(self._commits, self.keyring, "vaultmem: change the user key", now)

    def rotate_key(
        self, *, reencrypt: bool = False, actor: str = "vaultmem", progress: Progress | None = None
    ) -> KeyInfo:
        """Start a new data key: new writes use it, older keys stay to read the
        history.  With ``reencrypt``, one more commit ("rekey") re-encrypts every
        current file under the new key."""
        with self._lock.hold():
            self._commits.recover()
            keys.check_unchanged(self.repo, self.keyring)
            now = int(self.clock())
            new = self.keyring.add_data_key(now)
            write_keyring(self._commits, self.keyring, "vaultmem: start a new data key", now)
        if reencrypt:
            self.mutate(lambda snap: self._reencrypt(snap, progress), actor=actor, skip_if_unchanged=True)
        return next(info for info in self.keys() if info.id == new.id)

    def _reencrypt(self, snap: Snapshot, progress: Progress | None) -> Change:
        files = list(snap.files(MemoryPath(())))
        change = Change("rekey", (MemoryPath(()),))
        for done, (file_path, oid) in enumerate(files, 1):
            change.write(file_path, self.keyring.open(file_path.text, self._read_raw(oid)))
            if progress is not None:
                progress(done, len(files))
        return change

    def migrate(self, progress: Progress | None = None, *, sealed_names: bool = False, actor: str = "vaultmem") -> bool:
        """Move a format 1 vault to format 2 (see :meth:`migrate_format`);
        with ``sealed_names``, then seal its names (see :meth:`seal_names`).
        False if there was nothing to do."""
        if not isinstance(sealed_names, bool):
            raise VaultError("Error: sealed_names must be True or False.")
        changed = self.migrate_format(progress)
        if sealed_names:
            changed = self.seal_names(actor=actor) or changed
        return changed

    def seal_names(self, *, actor: str = "vaultmem") -> bool:
        """From now on store every name as an opaque token (format 2): the
        keyring gains a name key, then one ``seal-names`` commit stores every
        current file under its token path (the versions themselves, which
        already hold their names encrypted, stay as they are).  Commits made
        before keep the names they were written with.  Crash-safe: a run
        again (or any later write) finishes it.  False if nothing was left to do."""
        with self._lock.hold():
            self._commits.recover()
            self._keyring_stamp = None
            self.refresh_keyring()
            if self.keyring.format < 2:
                raise VaultError(
                    "Error: sealed names need storage format 2; run `vaultmem migrate --sealed-names`, "
                    "which migrates first."
                )
            changed = False
            if self.keyring.names is None:
                keys.check_unchanged(self.repo, self.keyring)
                now = int(self.clock())
                ring = Keyring.unlock(copy.deepcopy(self.keyring.doc), self.keyring.user_key)
                ring.seal_names(now)
                try:
                    write_keyring(self._commits, ring, "vaultmem: seal names", now)
                except OSError as err:
                    raise StorageError(
                        f"Error: {commit_path.storage_reason(err)}, so names were not sealed. Free space or fix "
                        "the permissions, then try again."
                    ) from err
                self.keyring = ring
                self._keyring_stamp = None
                self._keyring_changed()
                changed = True
                commit_path.step("seal-names-keyring")
            if self.snapshot().sealed or self._head() is None:
                self.reads.restate()
                return changed
        version = self.mutate(lambda snap: Change("seal-names", (MemoryPath(()),)), actor=actor)
        self.reads.restate()  # the log of reads, too, names files by their tokens from now on
        return changed or version is not None

    def migrate_format(self, progress: Progress | None = None) -> bool:
        """Move a format 1 vault to format 2.  Every commit keeps its id and
        its seal.  Each format 1 file version of the history gets a shadow: a
        copy re-encrypted under a format 2 key of its own, bound to that
        version, on the ``vaultmem-shadows`` branch; then the format 1 data
        keys are destroyed (their seal keys stay) and the keyring becomes a
        new root commit, every older copy of it removed from the disk.  From
        then on every version, old or new, can be erased one by one.

        Crash-safe: the keyring ref moves once; before it, the vault is in
        format 1 as it was (a shadow branch of a migration cut short is
        replaced by the next one); after it, a run again finishes removing
        the old keyring.  False if the vault is in format 2 already."""
        with self._lock.hold():
            self._commits.recover()
            self._keyring_stamp = None
            self.refresh_keyring()
            if self.keyring.format >= 2:
                self._finish_removal("migration")
                return False
            keys.check_unchanged(self.repo, self.keyring)
            now = int(self.clock())
            old = self.keyring
            ring = Keyring.unlock(copy.deepcopy(old.doc), old.user_key)
            ring.migrate(now)
            tips = keys.keyring_tips(self.repo)
            try:
                self._write_shadows(old, ring, now, progress)
                commit_path.step("migrate-shadowed")
                ring.destroy_data_keys(now)
                write_keyring(self._commits, ring, "vaultmem: migrate to storage format 2", now, root=True)
            except OSError as err:
                raise StorageError(
                    f"Error: {commit_path.storage_reason(err)}, so the vault was not migrated (it is in storage "
                    "format 1 as before). Free space or fix the permissions, then run the migration again."
                ) from err
            self.keyring = ring
            commit_path.step("migrate-keyring")
            with contextlib.suppress(pygit2.GitError, OSError):
                self.repo.config["vaultmem.format"] = "2"
            try:
                left = self._drop_old_keyrings(tips)
            except OSError as err:
                raise StorageError(
                    "Error: the vault is migrated, but removing its old keys failed "
                    f"({commit_path.storage_reason(err)}). Run the migration again to finish it."
                ) from err
            if left:
                raise BusyError(
                    "Error: the vault is migrated, but another program holds a copy of the old keyring in "
                    f"{', '.join(sorted(left))} (a pack it protects with a `.keep` file). Run the migration "
                    "again once it has finished; if the `.keep` file is a leftover of a program that died, "
                    "remove it first."
                )
            self._keyring_stamp = None
            self._keyring_changed()
        return True

    def _write_shadows(self, old: Keyring, ring: Keyring, now: int, progress: Progress | None) -> None:
        """The shadow branch: for each format 1 blob of main's history, its
        content sealed under ``ring``'s new epoch, bound to the blob's id."""
        head = self._head()
        found: dict[bytes, str] = {}  # every blob of main's history, with its path
        seen: set[bytes] = set()  # trees walked already: a tree met again holds the same files

        def walk(tree: bytes, path: MemoryPath) -> None:
            if tree in seen:
                return
            seen.add(tree)
            for name, (mode, oid) in self._trees.get(self._read_raw, tree).items():
                child = path.child(name.decode("utf-8"))
                if mode == objects.MODE_TREE:
                    walk(oid, child)
                else:
                    found.setdefault(oid, child.text)

        if head is not None:
            for commit in self.repo.walk(head, pygit2.enums.SortMode.NONE):
                memories = Snapshot(self._read_raw, old, self._sizes, self._trees, commit.id.raw).memories_id
                if memories is not None:
                    walk(memories, MemoryPath(()))
        shadows: dict[bytes, dict[bytes, tuple[int, bytes]]] = {}
        made: list[objects.PackedObject] = []
        for done, (oid, path) in enumerate(sorted(found.items()), 1):
            blob = self._read_raw(oid)
            if old.nonce_of(blob) is not None:
                continue  # format 2 already
            content = old.open(path, blob)
            shadow = objects.packed(objects.BLOB, ring.seal_shadow(oid.hex(), path, content, now))
            made.append(shadow)
            shadows.setdefault(oid.hex()[:2].encode(), {})[oid.hex()[2:].encode()] = (objects.MODE_BLOB, shadow.id)
            if progress is not None:
                progress(done, len(found))
        root_entries: dict[bytes, tuple[int, bytes]] = {}
        for name, entries in shadows.items():
            tree = objects.packed(objects.TREE, objects.encode_tree(entries))
            made.append(tree)
            root_entries[name] = (objects.MODE_TREE, tree.id)
        root = objects.packed(objects.TREE, objects.encode_tree(root_entries))
        made.append(root)
        current = read_ref_or_damaged(self.path, SHADOWS_REF)
        message = f"vaultmem: shadows of {sum(len(e) for e in shadows.values())} format 1 file versions\n"
        draft = Draft(root.id, [], COMMITTER, now, message)

        def seal(plain: bytes) -> list[tuple[bytes, bytes]]:
            return [(SEAL_HEADER, ring.seal_commit(plain))]

        expected = current if isinstance(current, bytes) and current != DAMAGED else None
        self._commits.commit(SHADOWS_REF, expected, made, draft, seal, checkpoint=True)

    def read_blob(self, oid: bytes) -> bytes:
        """The raw (encrypted) bytes of the object ``oid``."""
        return self._read_raw(oid)

    def destroy_keys(self, blobs: dict[str, tuple[str, int]], erasure: Erasure) -> list[str]:
        """Destroy the keys of ``blobs`` (``{blob id: (epoch, nonce)}``);
        see :meth:`destroy_keys_locked`."""
        with self._lock.hold():
            self._commits.recover()
            return self.destroy_keys_locked(blobs, erasure)

    def destroy_keys_locked(self, blobs: dict[str, tuple[str, int]], erasure: Erasure) -> list[str]:
        """Destroy the keys of ``blobs`` and every copy on disk of a keyring
        that held them: the keyring becomes a new root commit, the old
        keyring commits and their objects are removed from the loose objects
        and the packs, other refs naming an old keyring (a remote's) are
        removed (the next sync fetches the remote's again), and the journal
        is wiped.  Run again, it removes whatever a crash left behind.  The
        caller holds the writer lock.  The blob ids destroyed now."""
        self._keyring_stamp = None
        self.refresh_keyring()
        keys.check_unchanged(self.repo, self.keyring)
        now = int(self.clock())
        tips = keys.keyring_tips(self.repo)
        done = self.keyring.destroy(blobs, erasure, now)
        if done and self.keyring.names is not None:
            self.keyring.names.forget()  # no name this process read stays known once erased
        try:
            if done:
                files = "file version" if len(done) == 1 else "file versions"
                message = f"vaultmem: erase the keys of {len(done)} {files} ({erasure.commit})"
                commit_path.step("erase-keys")
                write_keyring(self._commits, self.keyring, message, now, root=True)
            commit_path.step("erase-prune")
            left = self._drop_old_keyrings(tips)
            commit_path.step("erase-pruned")
        except OSError as err:
            raise StorageError(
                f"Error: the erasure is recorded in {erasure.commit[:10]}, but removing the old keys failed "
                f"({commit_path.storage_reason(err)}). Run the same erasure again to finish it."
            ) from err
        self._keyring_stamp = None
        self._keyring_changed()
        if left:
            raise BusyError(
                f"Error: the erasure is recorded in {erasure.commit[:10]} and the keys are destroyed, but another "
                f"program holds a copy of the old keyring in {', '.join(sorted(left))} (a pack it protects with a "
                "`.keep` file, or one vaultmem cannot read). Run the same erasure again once that program has "
                "finished; if the `.keep` file is a leftover of a program that died, remove it first."
            )
        return done

    # An erasure in progress: written (synced) before its forget commit,
    # removed once its keys are destroyed.  A writer that finds one left by a
    # killed process finishes that erasure, or drops it if its commit never landed.
    _ERASING = "erasing"

    def begin_erasure(self, blobs: dict[str, tuple[str, int]]) -> None:
        """Record an erasure about to be committed (under the writer lock)."""
        head = self._head()
        doc = {"head": str(head) if head is not None else None, "blobs": {k: list(v) for k, v in blobs.items()}}
        path = self.path / durable.STATE_DIR / self._ERASING
        tmp = path.with_name(f"tmp-{os.getpid()}.erasing")
        try:
            with open(tmp, "w", encoding="ascii") as fh:
                json.dump(doc, fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.rename(tmp, path)
            durable.sync_dir(path.parent)
        except OSError as err:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise StorageError(
                f"Error: {commit_path.storage_reason(err)}, so nothing was erased. Free space or fix the "
                "permissions, then run the erasure again."
            ) from err

    _DOOMED = "doomed"  # in the state folder: ids of destroyed keyrings' objects still on the disk

    def _pending_doomed(self) -> set[bytes]:
        """Objects an earlier removal had to leave (another program's kept pack)."""
        try:
            text = (self.path / durable.STATE_DIR / self._DOOMED).read_text(encoding="ascii")
            return {bytes.fromhex(line) for line in text.split() if len(line) == 40}
        except (OSError, ValueError):
            return set()

    def _set_pending_doomed(self, doomed: set[bytes]) -> None:
        path = self.path / durable.STATE_DIR / self._DOOMED
        if not doomed:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return
        tmp = path.with_name(f"tmp-{os.getpid()}.doomed")
        with open(tmp, "w", encoding="ascii") as fh:
            fh.write("".join(f"{oid.hex()}\n" for oid in sorted(doomed)))
            fh.flush()
            os.fsync(fh.fileno())
        os.rename(tmp, path)
        durable.sync_dir(path.parent)

    def end_erasure(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path / durable.STATE_DIR / self._ERASING)

    def _finish_erasure(self) -> None:
        """Finish (or drop) an erasure a killed process left; under the writer lock."""
        self._erasure_checked = True
        path = self.path / durable.STATE_DIR / self._ERASING
        try:
            doc = json.loads(path.read_text(encoding="ascii"))
            blobs = {str(k): (str(v[0]), int(v[1])) for k, v in doc["blobs"].items()}
            start = doc["head"]
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            self.end_erasure()  # unreadable: its commit, if any, is re-run by hand (verify says so)
            return
        head = self._head()
        found: Version | None = None
        if head is not None:
            for steps, commit in enumerate(first_parents(self.repo, head)):
                if str(commit.id) == start or steps > 10_000:
                    break
                version = Version.from_commit(commit)
                listed = {value.split(" ")[-1] for value in parse_trailers(commit.message).get("Vaultmem-Erased", [])}
                if version.command == "forget" and listed == set(blobs):
                    found = version
                    break
        if found is not None:
            reason = parse_trailers(found.message).get("Vaultmem-Reason", [""])[0]
            erasure = Erasure(found.id, found.actor, int(found.time.timestamp()), reason)
            self.destroy_keys_locked(blobs, erasure)
        self.end_erasure()

    def _finish_removal(self, what: str) -> None:
        """Remove what an earlier erasure or migration had to leave on the
        disk (under the writer lock); BusyError if some is still held."""
        current = self.repo.references.get(KEYRING_REF)
        keep = keys.keyring_objects(self.repo, [pygit2.Oid(hex=str(current.target))]) if current is not None else set()
        if not self._pending_doomed() and not self._stray_keyrings(keep):
            return
        left = self._drop_old_keyrings(keys.keyring_tips(self.repo))
        if left:
            raise BusyError(
                f"Error: another program still holds a copy of keys this vault destroyed, in "
                f"{', '.join(sorted(left))} (a pack it protects with a `.keep` file). Run the {what} again once "
                "it has finished; if the `.keep` file is a leftover of a program that died, remove it first."
            )

    def finish_removal(self, what: str = "erasure") -> None:
        """:meth:`_finish_removal`, taking the writer lock."""
        with self._lock.hold():
            self._commits.recover()
            self._finish_removal(what)

    def finish_erasure(self) -> None:
        """Finish an erasure a killed process left, if any (takes the writer lock)."""
        with self._lock.hold():
            self._commits.recover()
            self._finish_erasure()

    def _drop_old_keyrings(self, tips: list[pygit2.Oid]) -> list[str]:
        """Remove every keyring object the current keyring does not use (of
        ``tips``' histories, of held packs, and what an earlier removal had
        to leave); the pack files it had to leave holding one (see
        :func:`prune.drop`), remembered in the state folder for the next run."""
        repo = self.repo
        current = repo.references[KEYRING_REF].target
        assert isinstance(current, pygit2.Oid)
        keep = keys.keyring_objects(repo, [current])
        doomed = keys.keyring_objects(repo, [*tips, current]) - keep
        self._replaced_keyrings |= {tip.raw for tip in tips if tip.raw not in keep}
        if self.keyring.format >= 2:
            doomed |= self._stray_keyrings(keep)
        doomed |= self._pending_doomed() - keep
        # Written (synced) before any ref naming them goes: after a crash from
        # here on, the next run still knows what to remove.
        self._set_pending_doomed(doomed)
        for name in list(repo.references):
            if name != KEYRING_REF and name.endswith("/vaultmem-keyring"):
                with contextlib.suppress(KeyError, ValueError, pygit2.GitError):
                    repo.references.delete(name)
        self._commits.mark_pruning()
        left = prune.drop(self.path, doomed, repo)
        self._commits.mark_pruning()
        self._set_pending_doomed(doomed if left else set())
        self._commits.scrub()
        durable.sync_filesystem(self.path)
        self._free_handle()  # a fresh handle: libgit2 lists the packs again
        return left

    def _stray_keyrings(self, keep: set[bytes]) -> set[bytes]:
        """Objects of held keyring packs (see :mod:`vaultmem.git.prune`) that
        the current keyring no longer uses: left by an erasure cut short."""
        out: set[bytes] = set()
        pack_dir = self.path / "objects" / "pack"
        for name in self._commits.held():
            with contextlib.suppress(OSError, ValueError):
                ids = {oid for oid, _, _ in objects.read_index((pack_dir / f"pack-{name}.idx").read_bytes())}
                if not ids & keep:
                    out |= ids
        return out

    def decrypt_blob(self, data: bytes) -> tuple[str, str]:
        """``(path, text)`` of a raw vaultmem blob (for git's textconv driver)."""
        path, content = self.keyring.open_any(data)
        return path, content.decode("utf-8")

    # -- sharing through a git server (docs/sync.md) ------------------------------------

    @classmethod
    def clone(
        cls,
        url: str,
        path: str | os.PathLike[str],
        *,
        key: str | None = None,
        key_file: str | os.PathLike[str] | None = None,
        passphrase: str | None = None,
        clock: Clock = time.time,
        progress: Progress | None = None,
    ) -> Self:
        """Clone a shared vault from ``url`` (a path, ``file://``, ``git://``,
        ``ssh://`` or ``https://``) into ``path`` and open it with its key.
        A wrong key is one clear error, and nothing is left behind."""

        def opens(folder: Path) -> None:
            cls.open(folder, key=key, key_file=key_file, passphrase=passphrase, clock=clock).close()

        sharing.clone(url, Path(path), configure=opens, progress=progress)
        return cls.open(path, key=key, key_file=key_file, passphrase=passphrase, clock=clock)

    @property
    def remotes(self) -> list[sharing.Remote]:
        """The git servers this vault is shared through, as (name, url)."""
        return sharing.list_remotes(self.repo)

    def add_remote(self, name: str, url: str) -> sharing.Remote:
        return sharing.add_remote(self.repo, name, url)

    def remove_remote(self, name: str) -> None:
        sharing.remove_remote(self.repo, name)

    def push(self, remote: str = "origin", progress: Progress | None = None) -> sharing.Transfer:
        """Send this vault's new versions, keys and policy to ``remote``: only
        fast-forwards, never forced; ConflictError when the remote holds
        versions this vault lacks (pull first)."""
        repo = self._handle()  # its own handle: a push may run in another thread (AutoSync)
        try:
            result = sharing.push(repo, remote, progress)
            if self.keyring.format >= 2:
                self._drop_stray_keyrings(repo)
            return result
        finally:
            repo.free()

    def _drop_stray_keyrings(self, repo: pygit2.Repository) -> None:
        """After a push that replaced the remote's keyring, remove the older
        keyring its fetches brought back (named by no ref any more)."""
        with self._lock.hold():
            current = keys.keyring_objects(repo, keys.keyring_tips(repo))
            doomed = self._stray_keyrings(current) | self._fetched_keyrings(repo, current)
            if doomed:
                self._commits.mark_pruning()
                prune.drop(self.path, doomed, repo)
                self._commits.mark_pruning()
                self._free_handle()

    def _fetched_keyrings(self, repo: pygit2.Repository, current: set[bytes]) -> set[bytes]:
        """Keyring objects the pushes' and pulls' fetches left, that no ref names."""
        out: set[bytes] = set()
        for oid in self._replaced_keyrings:
            with contextlib.suppress(KeyError, ValueError, pygit2.GitError):
                out |= keys.keyring_objects(repo, [pygit2.Oid(raw=oid)])
        self._replaced_keyrings.clear()
        return out - current

    def pull(
        self,
        remote: str = "origin",
        progress: Progress | None = None,
        *,
        key: str | None = None,
        key_file: str | os.PathLike[str] | None = None,
        passphrase: str | None = None,
        actor: str = "vaultmem",
        policy_from: str | None = None,
    ) -> sharing.Transfer:
        """Bring ``remote``'s new versions, keys and policy here, after
        checking every incoming commit's seal and the keyring's MAC under this
        vault's key.  A branch this vault has not written since it last synced
        moves forward; one both sides wrote is merged (docs/sync.md, "When
        both sides wrote"): ``main`` file by file on decrypted content, as one
        sealed merge commit by ``actor``; the keyring as the union of both
        sides' data keys; the policy field by field, refusing a field both
        sides set differently unless ``policy_from`` ("ours" or "theirs") says
        which side wins.  Nothing changes when anything is refused.  After a
        key change on another clone, give the new ``key``, ``key_file`` or
        ``passphrase``: the pulled keyring is opened with it, and from then on
        this vault opens with the new key only."""
        _check_label("actor", actor)
        if policy_from not in (None, "ours", "theirs"):
            raise VaultError("Error: policy_from must be 'ours' or 'theirs'.")
        new_user_key = None
        if key is not None or key_file is not None or passphrase is not None:

            def new_user_key(protector: dict[str, Any] | None) -> UserKey:
                return self._user_key(key, key_file, passphrase, protector)

        repo = self._handle()  # its own handle: a pull may run in another thread (AutoSync)
        try:
            return self._pull(repo, remote, progress, new_user_key, actor, policy_from)
        finally:
            repo.free()

    def _pull(
        self,
        repo: pygit2.Repository,
        remote: str,
        progress: Progress | None,
        new_user_key: Callable[[dict[str, Any] | None], UserKey] | None,
        actor: str,
        policy_from: str | None,
    ) -> sharing.Transfer:
        sharing.fetch(repo, remote, progress)
        result = sharing.Transfer(remote)
        with self._lock.hold():
            self._commits.recover()
            now = int(self.clock())
            # Everything is checked and built first; only then does a branch move.
            local_ring, their_ring = sharing.incoming(repo, remote, keys.KEYRING_REF)
            ring_step = sharing.relation(repo, remote, keys.KEYRING_REF, local_ring, their_ring)
            keyring = self.keyring
            tips = keys.keyring_tips(repo)  # the remote's keyring too, as fetched
            adopt = replace = stale_remote_ring = False
            if ring_step != "none":
                assert their_ring is not None
                pulled = sharing.check_keyring(repo, their_ring, self.keyring, new_user_key)
                if pulled.format != self.keyring.format:
                    if pulled.format > self.keyring.format:
                        raise ConflictError(
                            f"Error: the vault on {remote!r} was migrated to storage format 2, and this clone is "
                            "still in format 1. Clone it again (`vaultmem clone`); nothing was changed."
                        )
                    if not set(pulled.keys) <= set(self.keyring.keys):
                        raise ConflictError(
                            f"Error: the remote {remote!r} holds a format 1 keyring with keys this migrated vault "
                            "lacks (a clone kept writing in format 1). Nothing was changed."
                        )
                    ring_step = "none"  # this vault migrated: its keyring stands, and the push replaces theirs
                    stale_remote_ring = True
                if ring_step == "merge":
                    keys.check_unchanged(repo, self.keyring)
                    merged = merging.merge_keyrings(self.keyring, pulled, new_user_key is not None, now)
                    # An erasure on either side (format 2): the merged keyring
                    # is a new root, and every older keyring leaves the disk.
                    replace = merged.format >= 2 and (
                        local_ring is None
                        or repo.merge_base(local_ring, their_ring) is None
                        or merged.erased.keys() != self.keyring.erased.keys()
                        or merged.erased.keys() != pulled.erased.keys()
                    )
                    is_root = not repo[their_ring].peel(pygit2.Commit).parent_ids
                    adopt = replace and is_root and merged.same_keys(pulled) and new_user_key is None
                    pulled = pulled if adopt else merged
                keyring = pulled
            steps = {}
            for ref in (MAIN, policy_mod.POLICY_REF, SHADOWS_REF):
                local, theirs = sharing.incoming(repo, remote, ref)
                step = sharing.relation(repo, remote, ref, local, theirs)
                if ref == SHADOWS_REF and step == "merge":
                    raise ConflictError(
                        f"Error: this vault and the remote {remote!r} were migrated to storage format 2 "
                        "separately; clone the remote again. Nothing was changed."
                    )
                if step != "none":
                    assert theirs is not None
                    sharing.check_commits(repo, local, theirs, keyring)
                    steps[ref] = (step, local, theirs)
            policy_merge = None
            if steps.get(policy_mod.POLICY_REF, ("",))[0] == "merge":
                _, local, theirs = steps[policy_mod.POLICY_REF]
                assert local is not None and theirs is not None
                policy_merge = self._merged_policy(repo, keyring, local, theirs, policy_from)
            main_merge = None
            if steps.get(MAIN, ("",))[0] == "merge":
                _, local, theirs = steps[MAIN]
                assert local is not None and theirs is not None
                main_merge = merging.build_main_merge(
                    repo, self._read_raw, self._trees, self._layouts, keyring, local, theirs, remote, actor, now
                )
            if main_merge is not None or policy_merge is not None or ring_step == "merge":
                # the fetched objects, before a merge commit names them (advance syncs for itself)
                durable.sync_filesystem(self.path)
            # The keyring first: the versions that follow may use its data keys.
            if ring_step == "advance" or adopt:  # adopt: the remote's keyring is the merge, that very commit
                assert their_ring is not None
                sharing.advance(self._commits, keys.KEYRING_REF, local_ring, their_ring)
            elif ring_step == "merge":
                assert their_ring is not None
                message = "vaultmem: merge the keyrings of two clones"
                write_keyring(self._commits, keyring, message, now, merged_from=their_ring.raw, root=replace)
            if ring_step != "none":
                assert their_ring is not None
                self.keyring = keyring
                if replace:
                    self._drop_old_keyrings(tips)
                new_ring = read_ref_or_damaged(self.path, keys.KEYRING_REF)
                shown = new_ring.hex() if new_ring not in (None, DAMAGED) else str(their_ring)
                result.moved["vaultmem-keyring"] = (str(local_ring) if local_ring else None, shown)
            if stale_remote_ring:  # its format 1 data keys must not stay on this disk
                self._drop_old_keyrings(tips)
            for ref, (step, local, theirs) in steps.items():
                if step == "advance":
                    sharing.advance(self._commits, ref, local, theirs)
                    tip = str(theirs)
                elif ref == MAIN:
                    assert main_merge is not None and local is not None
                    new_objects, root, message, report = main_merge
                    draft = Draft(root, [local.raw, theirs.raw], ident(actor, actor), now, message)
                    commit = self._commits.commit(MAIN, local.raw, new_objects, draft, self._seal)
                    self._recent.add([*new_objects, commit])
                    report.commit = tip = commit.id.hex()
                    result.merge = report
                else:
                    assert policy_merge is not None
                    merged_policy, changed = policy_merge
                    tip = policy_mod.write_policy(
                        self._commits, self._seal, merged_policy, changed, actor, None, now, merged_from=theirs.raw
                    )
                result.moved[sharing.short_name(ref)] = (str(local) if local else None, tip)
            sharing.remember(repo, remote)
        if result.merge is not None:
            self._upkeep.poke()
        return result

    def _merged_policy(
        self, repo: pygit2.Repository, keyring: Keyring, local: pygit2.Oid, theirs: pygit2.Oid, prefer: str | None
    ) -> tuple[Policy, list[str]]:
        base_id = repo.merge_base(local, theirs)
        base = policy_mod.policy_at(repo, keyring, base_id) if base_id is not None else Policy()
        ours, theirs_policy = policy_mod.policy_at(repo, keyring, local), policy_mod.policy_at(repo, keyring, theirs)
        return merging.merge_policies(base, ours, theirs_policy, prefer)

    def sync(
        self,
        remote: str = "origin",
        progress: Progress | None = None,
        *,
        actor: str = "vaultmem",
        policy_from: str | None = None,
    ) -> tuple[sharing.Transfer, sharing.Transfer]:
        """Pull (merging if both sides wrote), then push: (what the pull
        moved, what the push moved)."""
        pulled = self.pull(remote, progress, actor=actor, policy_from=policy_from)
        return pulled, self.push(remote, progress)

    def configure_textconv(self, command: str) -> None:
        """Let stock git show decrypted text (``git log -p``, ``git diff``) to
        whoever runs it with the key.  The textconv cache stays off: it would
        store plaintext in git notes."""
        config = self.repo.config
        config["diff.vaultmem.textconv"] = command
        config["diff.vaultmem.cachetextconv"] = "false"
        info = self.path / "info"
        info.mkdir(exist_ok=True)
        attributes = info / "attributes"
        line = "memories/** diff=vaultmem"
        existing = attributes.read_text(encoding="utf-8").splitlines() if attributes.exists() else []
        if line not in existing:
            attributes.write_text("\n".join([*existing, line]) + "\n", encoding="utf-8")


@dataclass(frozen=True)
class Entry:
    """One file or folder of a listing."""

    path: str
    kind: str
    size: int


def _power_cut_view(gitdir: Path) -> tuple[str | None, tuple[bytes | None, bytes] | None]:
    """After a power cut, the journal may hold acknowledged moves that did
    not reach git's files, and an index may have kept its name but lost its
    data.  Until the next write repairs them, a vault reads through a private
    folder outside the vault, added as a git alternate of its own handles
    only: the journal's packs, and rebuilt indexes (with their packs) for
    invalid ones; ``main`` is read as replayed.  Returns that folder and
    ``(main on disk, main as replayed)``, or Nones when there was no power
    cut.  Reads only: opening a vault never writes to it."""
    try:
        moves = [m for m in Journal(gitdir).pending() if m.epoch != commit_path.epoch(gitdir)]
    except OSError:
        return None, None
    if not moves:
        return None, None
    folder = tempfile.mkdtemp(prefix="vaultmem-journal-")
    pack_dir = os.path.join(folder, "pack")
    os.mkdir(pack_dir)
    packs = [move.pack for move in moves if move.pack]
    for idx in (gitdir / "objects" / "pack").glob("pack-*.idx"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            if not objects.valid_index(idx.read_bytes()):
                packs.append(idx.with_suffix(".pack").read_bytes())
    for data in packs:
        with contextlib.suppress(ValueError, IndexError):
            name = objects.pack_name(data)
            index = objects.index_of(data)
            with open(os.path.join(pack_dir, f"pack-{name}.pack"), "wb") as fh:
                fh.write(data)
            with open(os.path.join(pack_dir, f"pack-{name}.idx"), "wb") as fh:
                fh.write(index)
    target = replay(gitdir, moves).get(MAIN)
    if target is None:
        return folder, None
    return folder, (read_ref_or_damaged(gitdir, MAIN), target)


def _looks_like_time(text: str) -> bool:
    """``2026-11-01``, ``2026-11-01 09:00``, ...: a date, never a revision."""
    return bool(_TIME_LIKE.match(text.strip()))


def _written(change: Change) -> list[str]:
    """Paths a change wrote (files, or folders whose files it wrote), for expiry's record of use."""
    out = [p.text for p, _ in change.writes]
    out += [new.text for _, new in change.moves]
    out += [p.text for p, entry in change.restores if entry is not None]
    return out


def _remove_made(folder: Path, existed: bool) -> None:
    """Remove what a refused ``Vault.init`` made: the folder if it made it,
    else everything in it (it was empty)."""
    if not existed:
        shutil.rmtree(folder, ignore_errors=True)
        return
    with contextlib.suppress(OSError):
        for child in folder.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    child.unlink()
