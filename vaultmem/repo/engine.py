"""The engine of the git-backed vault: open it, read a snapshot, apply a change
as one commit, history, verify, policy and keys.  Knows git; knows nothing
about Claude's strings.  The parts that grew on it live beside it, each a
class on top of :class:`Engine`: destroying keys (:mod:`.shredding`),
migrating (:mod:`.migration`) and sharing through a server (:mod:`.syncing`);
:class:`vaultmem.repo.store.Store` puts them together.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hmac
import logging
import os
import re
import shutil
import stat
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Self

import pygit2

from vaultmem.core import paths
from vaultmem.core.crypto import (
    FORMAT_VERSION,
    FORMATS,
    Keyring,
    UserKey,
    check_new_passphrase,
    key_from_environment,
    new_kdf_params,
    read_key_file,
)
from vaultmem.core.names import TOKEN_LENGTH
from vaultmem.core.paths import MemoryPath
from vaultmem.core.policy import HARD_MAX_FILE_BYTES, Policy, backtracking_pattern
from vaultmem.core.signers import PRINCIPAL, Signers
from vaultmem.core.signing import SigningKey
from vaultmem.core.values import check_flag, file_name, is_int
from vaultmem.core.versions import (
    RESTORED_FROM,
    SEAL_HEADER,
    Filters,
    Version,
    format_message,
    parse_trailers,
    parse_when,
    parse_words,
    utc_text,
)
from vaultmem.errors import (
    BadKeyError,
    ConflictError,
    IntegrityError,
    InvalidPathError,
    NotAVaultError,
    NotFoundError,
    SigningError,
    StorageError,
    VaultError,
)
from vaultmem.git import commits as commit_path
from vaultmem.git import durable, objects
from vaultmem.git.commits import (
    DAMAGED,
    CommitPath,
    Draft,
    RefMoved,
    Sign,
    ident,
    read_ref_or_damaged,
    replay,
)
from vaultmem.git.journal import Journal, same_epoch
from vaultmem.git.snapshot import Layouts, RecentObjects, SizeCache, Snapshot, TreeCache, TreeEditor, relay, root_tree
from vaultmem.git.upkeep import Upkeep
from vaultmem.repo import keys
from vaultmem.repo import policy as policy_mod
from vaultmem.repo import remotes as sharing
from vaultmem.repo.history import (
    CommitLike,
    OversizedObject,
    SealedNames,
    first_parents,
    hiding_files,
    read_commit,
    read_object,
    readable,
    version_by_prefix,
    walk,
)
from vaultmem.repo.keys import KEYRING_REF, SHADOWS_REF, KeyInfo, keyring_blob, write_keyring
from vaultmem.repo.reads import ReadLog
from vaultmem.repo.signed import SIGNERS_REF, Checkpoint, CommitSignatures, read_signers, signers_problems
from vaultmem.repo.signed import policy_signatures as policy_changes
from vaultmem.repo.verify import Finding, Progress, VerifyReport, verify

MAIN = "refs/heads/main"
ATTEMPTS = 3  # builds of one change when another program keeps moving main
# Seconds verify waits for a writer whose erasure is under way before it checks again.
WRITER_WAIT = 60.0
Clock = Callable[[], float]

_log = logging.getLogger("vaultmem")
GONE = (
    "Error: the vault's folder is gone (moved, deleted, or its disk unmounted) since it was opened, "
    "so nothing was read or changed. Open it where it is now."
)
MAIN_DAMAGED = (
    "refs/heads/main does not hold a commit id (its file, or its line in packed-refs, is damaged: a power cut "
    "or a failing disk?), so no version of the history could be read from it. After a power cut the next write "
    "repairs it from vaultmem's journal; otherwise restore it with `git update-ref refs/heads/main ID` "
    "(`git fsck --lost-found` lists the commits) or restore the vault from a clone"
)
MAIN_FOLDER = (
    "the vault's refs/heads/main is a folder, not a ref: git made a branch under that name (`git for-each-ref "
    "refs/heads/main/` lists it), so no version can be read or written. Rename that branch out of the way "
    "(`git branch -m main/NAME NAME`), then try again"
)
_SIGNATURE_BAD = set("<>\n\r\0")
_TIME_LIKE = re.compile(r"\d{4,}-(?:\d{2}-\d{2}|W\d{2}(?:-\d)?)([T ]|$)")
_SEALED_PATH = re.compile(rf"/memories(?:/n[a-z2-7]{{{TOKEN_LENGTH}}}(?![^/\s,]))+")


def _check_label(kind: str, value: str | None, optional: bool = False) -> None:
    """Actor and session names end up in commit headers and trailers."""
    if value is None and optional:
        return
    if not isinstance(value, str) or not value.strip() or len(value) > 200:
        raise VaultError(f"Error: the {kind} must be a non-empty string of at most 200 characters.")
    if value != value.strip():  # git trims an author's name: the trailers and git would disagree
        raise VaultError(
            f"Error: the {kind} {value!r} begins or ends with white space, which git does not record as given; "
            "give it without."
        )
    if any(ch in _SIGNATURE_BAD or ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise VaultError(
            f"Error: the {kind} {value!r} contains a character git cannot record (<, >, or a control character)."
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: bytes that are not UTF-8, from a command line or the environment
        raise VaultError(
            f"Error: the {kind} {value!r} is not valid Unicode text (it holds bytes that are not UTF-8)."
        ) from None


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


_FULL_ID = re.compile(r"[0-9a-fA-F]{40}")


class Engine:
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
        self._commits = CommitPath(path, self._lock, never_finished={KEYRING_REF})
        self._upkeep = Upkeep(path, self._lock, self._commits)
        remember = weakref.WeakMethod(self._remember_erasures)  # the upkeep thread must not keep the vault alive

        def after_round() -> None:
            method = remember()
            if method is not None:
                method()

        self._upkeep.after_round = after_round
        # After a power cut, until a writer repairs git's files: main as the
        # journal says it is, if main on disk is still what it was (see _power_cut_view).
        self._overlay: tuple[bytes | None, bytes] | None = None
        self._policy_overlay: tuple[bytes | None, bytes] | None = None  # the same for the policy branch
        self._signers_overlay: tuple[bytes | None, bytes] | None = None  # and for the signers branch
        self._alternate: str | None = None  # the journal's packs, in that case (outside the vault)
        self._policy: tuple[str | None, Policy] | None = None
        # (policy tip, signers tip) -> a change without a valid signature that turned require_signatures off
        self._policy_switched_off: tuple[tuple[str | None, str | None], str | None] | None = None
        self._chain: tuple[bytes | None, set[bytes]] = (None, set())  # main's commit ids, see _on_main
        self._chain_lock = threading.Lock()
        self.reads = ReadLog(path, self._stored_text)
        self._keyring_stamp: list[tuple[int, int, int] | None] | None = None
        self._keyring_changed()
        self._erasure_checked = False
        self._last_root: tuple[bytes, tuple[bytes | None, bool]] | None = None  # see snapshot()
        self._replaced_keyrings: set[bytes] = set()  # keyrings an erasure replaced: removed again if fetched
        self._signing_keys: dict[str, SigningKey] = {}  # actor -> the key its commits are signed with
        self._signers: tuple[str | None, Signers] | None = None  # the signers list, by its commit id
        self._count: tuple[bytes, int] | None = None  # main's tip and how many commits it reaches
        self._last_checkpoint: tuple[bytes | None, Checkpoint | None] | None = None  # by the checkpoints tip

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

    def writer_busy(self) -> bool:
        """Whether a write would wait now for another one (of this process or
        another) to end; nothing is held after it."""
        return self._lock.busy()

    def close(self) -> None:
        """Finish pending upkeep and release the vault's file descriptors
        (reopened if the vault is used again)."""
        self._upkeep.stop()
        self._lock.close(then=self._commits.close)
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
        if not is_int(storage_format) or storage_format not in FORMATS:
            raise VaultError(f"Error: storage format {storage_format!r} is not one this vaultmem writes (1 or 2).")
        if not isinstance(sealed_names, bool):
            raise VaultError("Error: sealed_names must be True or False.")
        if sealed_names and storage_format < 2:
            raise VaultError("Error: sealed names need storage format 2.")
        folder = Path(file_name(path, "path"))
        if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
            raise VaultError("Error: " + taken_folder(folder))
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
            # Made first, so a folder that cannot be written (or a full disk)
            # is an OSError with its plain reason, not git's message.
            (folder / durable.STATE_DIR).mkdir(mode=0o700)
            repo = pygit2.init_repository(str(folder), bare=True, initial_head="main")
            repo.config["core.logAllRefUpdates"] = "false"
            repo.config["gc.auto"] = "0"
            repo.config["vaultmem.format"] = str(storage_format)
            repo.config["receive.denyNonFastForwards"] = "true"  # plain git cannot force a push into it
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
        folder = Path(file_name(path, "path"))
        if folder.exists() and not folder.is_dir():
            named = _gitdir_file(folder)  # `.git` as a file: "gitdir: PATH", which git follows
            if named is None:
                raise NotAVaultError(f"Error: {folder} is not a vault: it is a file, not a folder.")
            folder = named
        if not folder.is_dir():
            raise NotAVaultError(f"Error: {folder} is not a vault: no such folder.", step="create")
        _refuse_special_files(folder)
        try:
            repo = pygit2.Repository(str(folder), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
        except pygit2.GitError as err:
            if _denied(folder):
                raise StorageError(
                    f"Error: cannot open the vault {folder}: permission denied (this user may not read it). Run "
                    "the command as the user the vault belongs to, or give this user read access."
                ) from err
            kind = _unusable_git_kind(folder)
            if kind is not None:
                raise NotAVaultError(
                    f"Error: {folder} is not a vault: it is a git repository with {kind}, which vaultmem does not "
                    "use (a vault has SHA-1 objects and refs in files, as `vaultmem init` makes it)."
                ) from err
            if "config file" in str(err) and (folder / "config").is_file() and (folder / "objects").is_dir():
                raise NotAVaultError(
                    f"Error: the git config of {folder} cannot be read ({_one_line(str(err))}), so the vault cannot "
                    "be opened; fix the line it names (`git config --list` names it too), then try again."
                ) from err
            raise NotAVaultError(f"Error: {folder} is not a vault (not a git repository).") from err
        try:
            ref = repo.references.get(KEYRING_REF)
        except pygit2.GitError as err:  # its line in packed-refs holds no id
            raise NotAVaultError(
                "Error: the vault's keyring ref is damaged (git's packed-refs file, which holds it, cannot be "
                f"read: {err}); restore it from a clone."
            ) from err
        if not repo.is_bare and ref is None and any(r.endswith("/vaultmem-keyring") for r in repo.references):
            raise NotAVaultError(
                f"Error: {folder} is a git working copy of a vault, not a vault: a vault is a bare repository. "
                f"Clone it with `vaultmem clone URL FOLDER` (or `git clone --bare`)."
            )
        if repo.is_bare and ref is None and _was_a_vault(repo):
            raise NotAVaultError(
                f"Error: {folder} is a vault whose keyring branch {KEYRING_REF} is gone (deleted with `git branch "
                "-D` or `git update-ref -d`?), so it cannot be opened. Its last commit is still there until a `git "
                "gc` prunes it: find it with `git fsck` (a dangling commit whose tree holds keyring.json) and "
                f"restore the branch with `git update-ref {KEYRING_REF} ID`, or restore it from "
                "a clone."
            )
        if repo.is_bare and ref is None and _sealed_main(repo):
            raise NotAVaultError(
                f"Error: {folder} holds a vault's versions but not its keyring branch {KEYRING_REF.rsplit('/')[-1]} "
                "(a `git clone` with --depth or --single-branch takes main only), so nothing in it can be "
                "read. Clone the vault with `vaultmem clone URL FOLDER`, or with `git clone --bare URL FOLDER`."
            )
        if not repo.is_bare or ref is None:
            raise NotAVaultError(f"Error: {folder} is not a vault (a git repository without a vaultmem keyring).")
        folder = _git_dir(folder, repo)
        alternate, views = _power_cut_view(folder)
        ring = views[KEYRING_REF][1] if KEYRING_REF in views else None
        try:
            if alternate is not None:
                repo.odb.add_disk_alternate(alternate)
            # the keyring as replayed: after a power cut that lost an acknowledged
            # key change's ref, the new key opens the vault and the old one does not
            doc = Keyring.parse(keyring_blob(repo, pygit2.Oid(raw=ring) if ring is not None else ref.target))
            user_key = cls._user_key(key, key_file, passphrase, doc.get("protector"))
            vault = cls(folder, Keyring.unlock(doc, user_key), clock)
        except BaseException:
            if alternate is not None:
                shutil.rmtree(alternate, ignore_errors=True)
            raise
        if alternate is not None:
            weakref.finalize(vault, shutil.rmtree, alternate, True)
        vault._alternate, vault._overlay = alternate, views.get(MAIN)
        vault._policy_overlay = views.get(policy_mod.POLICY_REF)
        vault._signers_overlay = views.get(SIGNERS_REF)
        vault._note_recorded()
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
            _refuse_special_files(self.path)  # a FIFO there: libgit2 would wait for a writer for ever
            if os.path.isdir(os.path.join(self.path, MAIN)):
                raise IntegrityError(f"Error: {MAIN_FOLDER}.")
            try:
                ref = self.repo.references.get(MAIN)  # a symbolic ref, or damage: libgit2 decides
                if ref is None:
                    raise KeyError(MAIN)  # what vaultmem read is no id, and libgit2 sees no ref: damage
                return ref.resolve().target  # type: ignore[return-value]
            except (pygit2.GitError, KeyError, ValueError) as err:
                raise IntegrityError(
                    "Error: the vault's refs/heads/main does not hold a commit id (a power cut?). The next "
                    "write repairs it from vaultmem's journal if it can; otherwise run `vaultmem verify`."
                ) from err
        if raw is None and self._gone():
            raise VaultError(GONE)
        return pygit2.Oid(raw=raw) if raw is not None else None

    def _gone(self) -> bool:
        """Whether the vault's folder is gone (moved, deleted or unmounted)
        since it was opened: then a missing ref is no empty memory."""
        return not os.path.isdir(os.path.join(self.path, "objects"))

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
            self._erasure_checked = False  # the next write checks it against main's erasures
            ring = Keyring.unlock(doc, self.keyring.user_key)
            if ring.intact and ring.supersedes(self.keyring):
                self.keyring = ring
                self._note_recorded()
            # Otherwise it was edited without the key, or rolled back (a key
            # lost, an erased key back): verify() reports it; never adopted.
        except (VaultError, pygit2.GitError, KeyError, ValueError):
            self._keyring_stamp = None  # read again next time: it may be mid-write, or another key now opens it

    def _remember_erasures(self) -> None:
        """After an upkeep round (only a writer has one): bring the state
        folder's record of main's erasures up to main, so that an open
        reads only the commits made after it.  A handle of its own, freed
        at once: libgit2 shares open packs between a process's handles, and
        one kept by this thread would keep a removed pack readable and its
        descriptor open after the vault is closed."""
        repo = self._handle()
        try:
            keys.recorded_erasures(repo, self.path, self._head(), remember=True)
        finally:
            repo.free()

    def _note_recorded(self) -> None:
        """The versions the forget commits of main erased that the keyring
        still holds keys of (a keyring put back from before an erasure, or
        one cut short) read as erased all the same; the next write destroys
        those keys again (see :func:`keys.recorded_erasures`)."""
        try:
            recorded = keys.recorded_erasures(self.repo, self.path, self._head())
        except (VaultError, pygit2.GitError, KeyError, ValueError, OSError):
            return
        self.keyring.recorded = keys.lacking_erasures(self.keyring.doc, recorded)

    def snapshot(self, at: str | datetime | None = None) -> Snapshot:
        """A consistent read-only view of the memory, now or at a version."""
        self.refresh_keyring()
        if at is not None:
            commit_id: bytes | None = self._resolve(at).id.raw
        else:
            head = self._head()
            commit_id = head.raw if head is not None else None
        memo = self._last_root  # the root of the last snapshot of main: calls in a row read the same commit
        known = memo[1] if memo is not None and memo[0] == commit_id else None
        snap = Snapshot(self._read_raw, self.keyring, self._sizes, self._trees, commit_id, known)
        if at is None and commit_id is not None:
            self._last_root = (commit_id, snap.root)  # one tuple: threads see a whole one
        return snap

    def snapshot_of(self, commit: CommitLike | None) -> Snapshot:
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
                data = read_object(self.repo, pygit2.Oid(raw=oid))[1]
            except OversizedObject as err:  # a zlib bomb: refused before it is inflated
                raise IntegrityError(f"Error: {err}; run `vaultmem verify`.") from err
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
            return self._at_time(parse_when(at, now=self.clock()), head)
        if not isinstance(at, str) or not at.strip():
            raise NotFoundError("Error: a version must be an id, a revision such as main~2, or a time.")
        try:
            commit = self._revparse(at.strip())
        except (KeyError, ValueError, pygit2.GitError, pygit2.InvalidSpecError) as err:
            if head is not None and isinstance(err, pygit2.AmbiguousError):
                short = version_by_prefix(self.repo, head, at.strip())
                if short is not None:
                    return short  # a short id other objects share: the version it starts
            words = parse_words(at, self.clock())  # "2 days ago": after ids and revisions, never before
            if words is not None:
                return self._at_time(words, head)
            if not isinstance(err, (KeyError, pygit2.InvalidSpecError, pygit2.AmbiguousError)):  # damage, not absence
                raise IntegrityError(
                    f"Error: git cannot read {at!r} in this vault ({err}); run `vaultmem verify`."
                ) from err
            if head is None:
                raise NotFoundError(f"Error: no version {at!r}: the vault has no versions yet.") from err
            if re.fullmatch(r"[0-9a-fA-F]{1,3}", at.strip()):  # git names no object by fewer digits
                raise NotFoundError(
                    f"Error: {at.strip()!r} is too short to name a version: give at least 4 of its hex digits, "
                    "as `vaultmem log` shows them."
                ) from err
            with contextlib.suppress(KeyError, ValueError, pygit2.GitError):  # an object, but no commit
                kind = self.repo.revparse_single(at.strip()).type_str
                raise NotFoundError(
                    f"Error: {at!r} is not a version of this vault's memory history: it names a git {kind}, "
                    "not a commit.",
                    step="versions",
                ) from err
            first = self._walked_past_first(at.strip(), head)
            if first is not None:  # `<first>^`, `main~N` one step too far: the empty memory, not a typo
                raise NotFoundError(
                    f"Error: no version {at!r}: {str(first)[:10]} is the first version of this vault's memory; "
                    "before it the memory was empty (undo as many versions as the history holds to empty it)."
                ) from err
            raise NotFoundError(f"Error: no version {at!r} in this vault.", step="versions") from err
        if head is None or not self._on_main(commit.id, head):
            raise NotFoundError(f"Error: {at!r} is not a version of this vault's memory history.", step="versions")
        return commit

    def _walked_past_first(self, text: str, head: pygit2.Oid) -> pygit2.Oid | None:
        """The first version, when ``text`` is a version of main's history
        followed by ``^`` and ``~N`` steps that walk back past it; else None."""
        steps = re.fullmatch(r"(.+?)((?:\^[0-9]*|~[0-9]*)+)", text)
        if steps is None:
            return None
        try:
            commit = self._revparse(steps.group(1))
        except (KeyError, ValueError, pygit2.GitError, pygit2.InvalidSpecError):
            return None
        if not self._on_main(commit.id, head):
            return None
        for op, count in re.findall(r"([\^~])([0-9]*)", steps.group(2)):
            n = int(count) if count else 1
            if op == "^" and n > 1:
                return None  # a merge's other parent: not a walk back along the first parents
            for _ in range(n if op == "~" else min(n, 1)):
                parents = commit.parent_ids
                if not parents:
                    return commit.id
                commit = self.repo[parents[0]].peel(pygit2.Commit)
        return None

    def _revparse(self, text: str) -> pygit2.Commit:
        """``text`` as git reads it, peeled to a commit.  Anything but a full
        id is read through a fresh handle: this thread's own knows the packs
        there were when it first read one, and looks for more only when an
        object is missing, so a short id could find only another object
        starting with the same digits (a file version) and take it for the
        one meant."""
        repo = self.repo
        if _FULL_ID.fullmatch(text):
            return repo.revparse_single(text).peel(pygit2.Commit)
        fresh = self._handle()
        try:
            found = fresh.revparse_single(text).peel(pygit2.Commit).id
        finally:
            fresh.free()
        return repo[found].peel(pygit2.Commit)

    def _at_time(self, when: datetime, head: pygit2.Oid | None) -> pygit2.Commit:
        """The newest version at or before ``when`` along main's first
        parents: the memory as this vault's main held it then (a merge's
        first parent is the side that made it)."""
        if head is not None:
            for commit in first_parents(self.repo, head):
                if commit.author.time <= when.timestamp():
                    return self.repo[commit.id].peel(pygit2.Commit)
        moment = utc_text(when)
        if head is None:
            raise NotFoundError(f"Error: no version at or before {moment}: the vault has no versions yet.")
        raise NotFoundError(f"Error: no version at or before {moment}; the history starts later.")

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

    # -- signatures (vaultmem.repo.signing manages signers) ------------------------

    def sign_as(self, actor: str, key: SigningKey | None) -> None:
        """Sign every commit made as ``actor`` from now on with ``key`` (None:
        stop).  The key must be a valid signer of ``actor`` when a commit is
        made (docs/signing.md); otherwise that write is refused."""
        _check_label("actor", actor)
        if key is None:
            self._signing_keys.pop(actor, None)
        elif not isinstance(key, SigningKey):
            raise VaultError("Error: a signing key must be a vaultmem SigningKey (SigningKey.load(path)).")
        else:
            self._signing_keys[actor] = key

    def signing_key(self, actor: str) -> SigningKey | None:
        return self._signing_keys.get(actor)

    @property
    def signers(self) -> Signers:
        """The vault's allowed signers (empty until an operator adds the first).
        Raises IntegrityError when any change of the list was not signed by
        an operator: nothing is signed, and no write needing a signature
        goes ahead, against such a list."""
        raw = read_ref_or_damaged(self.path, SIGNERS_REF)
        overlay = self._signers_overlay
        if overlay is not None and overlay[0] != raw:
            overlay = self._signers_overlay = None  # a writer has repaired the branch: the disk is right again
        tip = pygit2.Oid(raw=overlay[1]) if overlay is not None else None  # after a power cut, as replayed
        target = str(tip) if tip is not None else raw.hex() if raw is not None else None
        cached = self._signers
        if cached is None or cached[0] != target:
            signers, _ = read_signers(self.repo, self.keyring, tip)
            problems = signers_problems(self.repo, self.keyring, tip)
            if problems:
                commit, kind, detail = problems[0]
                raise IntegrityError(
                    f"Error: the vault's signers list cannot be trusted: commit {commit[:12]} ({kind}): {detail}. "
                    "Run `vaultmem verify`; an operator moves vaultmem-signers back to its last good commit."
                )
            cached = self._signers = (target, signers)
        return cached[1]

    def _policy_switched_off_by(self) -> str | None:
        """The policy change that turned ``require_signatures`` off without a
        signature that counts (which verify reports and does not take), or
        None.  Checked once per policy tip (as :attr:`policy` last read it);
        the signers are read only for a vault whose policy ever required
        signatures."""
        policy_tip = self._policy[0] if self._policy is not None else None
        cached = self._policy_switched_off
        if cached is not None and cached[0][0] == policy_tip and cached[0][1] is None:
            return cached[1]  # the policy never required signatures: the signers do not matter
        versions = [
            (v.id, int(v.time.timestamp()), v.policy.require_signatures)
            for v in reversed(policy_mod.history(self.repo, self.keyring))
        ]
        if not any(flag for _, _, flag in versions):
            self._policy_switched_off = ((policy_tip, None), None)
            return None
        signers = self.signers
        signers_tip = self._signers[0] if self._signers is not None else None
        if cached is not None and cached[0] == (policy_tip, signers_tip or ""):
            return cached[1]
        required, problems = policy_changes(self.repo, versions, signers)
        turned_off = {commit for commit, _, flag in versions if not flag}
        still = bool(required) and required[-1][1]
        found = next((commit for commit, _, _ in reversed(problems) if commit in turned_off), None) if still else None
        self._policy_switched_off = ((policy_tip, signers_tip or ""), found)
        return found

    def _signature(self, actor: str, now: int) -> Sign | None:
        """How a commit made as ``actor`` at ``now`` is signed (None: it is
        not); raises SigningError, before anything is written, when the
        actor's key is not a valid signer now or the policy requires a
        signature the actor cannot give."""
        key = self._signing_keys.get(actor)
        if key is None:
            try:
                required = self.policy.require_signatures
                switched_off = None if required else self._policy_switched_off_by()
            except IntegrityError:  # a damaged policy: the operator replacing it is not held to it
                required, switched_off = False, None
            if switched_off is not None:
                raise SigningError(
                    f"Error: this vault requires signed commits: the policy change that turned require_signatures "
                    f"off (commit {switched_off[:12]}) carries no valid signature, so it does not count. Sign this "
                    "write with --signing-key or VAULTMEM_SIGNING_KEY (signing_key= in Python), and run `vaultmem "
                    "verify`; an operator turns it off with a signed `vaultmem policy set require_signatures=false`. "
                    "Nothing was changed."
                )
            if required and not PRINCIPAL.fullmatch(actor):
                raise SigningError(
                    f"Error: this vault requires signed commits (policy require_signatures), and {actor!r} cannot "
                    "be a signer: a signer's name is its actor name, 1-100 ASCII letters, digits, '.', '_', '@', '+' "
                    "or '-'. Write as an actor that is a signer. Nothing was changed."
                )
            if required:
                raise SigningError(
                    f"Error: this vault requires signed commits (policy require_signatures) and {actor!r} has no "
                    "signing key; give one with --signing-key or VAULTMEM_SIGNING_KEY (signing_key= in Python). "
                    "Nothing was changed."
                )
            return None
        if not PRINCIPAL.fullmatch(actor):
            raise SigningError(
                f"Error: {actor!r} cannot sign: a signer's name is its actor name, 1-100 ASCII letters, digits, "
                "'.', '_', '@', '+' or '-', so no operator can add it. Write as an actor that is a signer. "
                "Nothing was changed."
            )
        problem = self.signers.judge(key.public, actor, now)
        if problem is not None:
            said = {
                "unknown signer": "is not a signer of this vault",
                "wrong actor": "belongs to another signer",
                "revoked": "was revoked",
                "expired": "is outside its validity now",
            }[problem]
            raise SigningError(
                f"Error: the signing key {key.public.fingerprint} {said} for {actor!r}; an operator adds or "
                "rotates it with `vaultmem signer add` or `vaultmem signer rotate`. Nothing was changed."
            )
        return key.sign

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
        try:
            return self._mutate(build, actor=actor, session=session, skip_if_unchanged=skip_if_unchanged, after=after)
        except StorageError as err:
            if self._gone():  # not a full disk: the files it wrote to are gone with their folder
                raise VaultError(GONE) from err
            raise
        finally:
            self._local.refs = None  # the refs read in the last attempt: the next call reads them again

    def _mutate(
        self,
        build: Callable[[Snapshot], Change],
        *,
        actor: str,
        session: str | None,
        skip_if_unchanged: bool,
        after: Callable[[Version], None] | None,
    ) -> Version | None:
        with self._lock.hold():
            self._commits.recover()
            if not self._erasure_checked:
                with contextlib.suppress(VaultError):  # an unfinished erasure never fails another write
                    self._finish_erasure()
            self._upkeep.remove_redundant()
            for attempt in range(ATTEMPTS):
                # Side branches' refs (the policy's) read at most once an
                # attempt, in this thread only (see policy); read again in
                # the next attempt, after another program moved main.
                self._local.refs = {}
                snap = self.snapshot()
                change = build(snap)
                _check_paths(change)
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
                    commit = self._commits.commit(
                        MAIN, snap.commit_id, [*editor.new, *made], draft, self._seal, sign=self._signature(actor, now)
                    )
                except RefMoved:
                    if attempt + 1 == ATTEMPTS:
                        raise ConflictError(
                            "Error: another program keeps moving the vault's main branch; nothing was changed. "
                            "Try again when it has finished."
                        ) from None
                    continue
                break
            self._recent.add([*editor.new, *made, commit])
            try:
                self._committed(actor, commit.id, now)
            except (VaultError, OSError) as err:  # the write stands; the next one tries again
                _log.warning("vaultmem: the automatic checkpoint failed: %s", err)
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
                reason=next((v for k, v in change.trailers if k == "Vaultmem-Reason"), None),
                erased=tuple(v for k, v in change.trailers if k == "Vaultmem-Erased"),
            )
            if after is not None:
                after(version)
        self._upkeep.poke()
        return version

    def _committed(self, actor: str, commit: bytes, now: int) -> None:
        """After each memory commit, under the writer lock (automatic
        checkpoints: :mod:`vaultmem.repo.signing`)."""

    def _signers_changed(self) -> None:
        """After a pull moved the signers branch (git's allowed-signers file:
        :mod:`vaultmem.repo.signing`)."""

    def _adopt_keyring(self) -> None:
        """Before a key change (under the writer lock): the keyring as
        another opener left it (a rotation, an erasure), if it is a later
        state of this one, so that the change builds on it rather than
        being refused; any other keyring is left for check_unchanged."""
        self._keyring_stamp = None
        self.refresh_keyring()

    def _settle_keyring(self) -> None:
        """Before a key change (under the writer lock): finish any erasure
        first, so the change never builds on a keyring that still holds keys
        an erasure destroyed (one put back with git from before it)."""
        with contextlib.suppress(VaultError):  # what is left, check_unchanged and verify report
            self._finish_erasure()

    def _finish_erasure(self) -> None:
        """Finish an erasure a killed process left (under the writer lock);
        :class:`~vaultmem.repo.shredding.Shredding` does the work."""
        self._erasure_checked = True

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
            if len(content) > HARD_MAX_FILE_BYTES:  # whatever max_file_bytes says: no read would accept its blob
                raise VaultError(
                    f"Error: {path} would be {len(content):,} bytes; a vault stores files of at most "
                    f"{HARD_MAX_FILE_BYTES:,} bytes ({HARD_MAX_FILE_BYTES / 2**20:g} MiB), so nothing was changed."
                )
            editor.write_blob(path, self.keyring.seal(path.text, content, now))

    # -- reading and auditing ----------------------------------------------

    def resolve(self, at: str | datetime) -> Version:
        """The version ``at`` names: an id (or an unambiguous prefix), a git
        revision such as ``main~2``, or a point in time (the newest version at
        or before it; see :func:`history.parse_when`)."""
        return self.present(Version.from_commit(readable(self.repo, self._resolve(at))))

    def sealed_history(self) -> SealedNames | None:
        """What the history needs to follow paths through sealed names, or None."""
        names = self.keyring.names
        if names is None:
            return None

        return SealedNames(names, self._unseal_at)

    def _unseal_at(self, commit: bytes, stored: MemoryPath) -> MemoryPath | None:
        """The real path ``commit``'s trees hold under ``stored``; None if
        erased, missing, or the commit cannot be read."""
        try:
            return Snapshot(self._read_raw, self.keyring, self._sizes, self._trees, commit).unseal(stored)
        except (VaultError, KeyError, ValueError, pygit2.GitError):
            return None

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
                found = self._unseal_at(commit, stored)
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
        target = paths.parse(path, existing=True)
        snap = self.snapshot(at)
        kind = snap.kind(target)
        if kind == "file" and target.dir_hint:
            raise file_named_as_folder(path, target, at)
        if kind != "file":
            where = f" at version {at}" if at is not None else ""
            raise NotFoundError(f"Error: no file {target}{where}.")
        try:
            return snap.read_text(target)
        except UnicodeDecodeError as err:  # bytes an application stored through Change
            raise VaultError(
                f"Error: {target} holds bytes that are not UTF-8 text, so it cannot be read as text; "
                "`vaultmem export` (export_folder() in Python) writes its bytes as they are."
            ) from err

    def listing(
        self, path: str = "/memories", at: str | datetime | None = None, depth: int | None = None
    ) -> list[Entry]:
        """Every file and folder below ``path`` (hidden ones included), sorted
        by path, with plaintext sizes; ``depth=1`` lists direct children only."""
        target = paths.parse(path, existing=True)
        if depth is not None and (not is_int(depth) or depth < 1):
            raise VaultError("Error: depth must be a positive integer.")
        snap = self.snapshot(at)
        kind = snap.kind(target)
        if kind is None:
            where = f" at version {at}" if at is not None else ""
            raise NotFoundError(f"Error: no file or folder {target}{where}.")
        if kind == "file":
            if target.dir_hint:
                raise file_named_as_folder(path, target, at)
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
            path=paths.parse(path, existing=True) if path is not None else None,
            since=parse_when(since, "since time", now=self.clock()) if since is not None else None,
            until=parse_when(until, "until time", end_of_day=True, now=self.clock()) if until is not None else None,
            actor=actor,
            session=session,
            command=command,
        )
        self.refresh_keyring()  # names another process erased since are shown no more
        head = self._head()
        if filters.path is not None and filters.path.dir_hint and self.snapshot().kind(filters.path) == "file":
            raise file_named_as_folder(filters.path.text + "/", filters.path, None)
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

    def verify(self, progress: Progress | None = None, checkpoints: Sequence[str] = ()) -> VerifyReport:
        """Check every commit and object of the history, and the keyring as it
        is on disk now; see :mod:`vaultmem.verify`.  Signatures are checked
        once the vault has signers (docs/signing.md); ``checkpoints`` are
        the texts of checkpoint files kept outside the vault, each checked
        against ``main`` with those on the vault's checkpoints branch.

        An erasure under way in another process or thread looks, between its
        steps, like one cut short: when the check finds an erasure unfinished,
        it waits for the writer that holds the vault (up to ``WRITER_WAIT``
        seconds) and checks again, so only an erasure that really stopped is
        reported."""
        if isinstance(checkpoints, (str, bytes)) or not isinstance(checkpoints, Iterable):
            raise VaultError(
                f"Error: checkpoints must be a list of checkpoint files' texts, not {type(checkpoints).__name__}."
            )
        checkpoints = tuple(checkpoints)
        if not all(isinstance(text, str) for text in checkpoints):
            raise VaultError("Error: checkpoints must be a list of checkpoint files' texts (str), one per file.")
        report = self._verify_once(progress, checkpoints)
        if any(finding.kind == "erasure" for finding in report.findings):
            durable.wait_for_writer(self.path, WRITER_WAIT)
            self.refresh_keyring()  # the keyring as that writer left it
            report = self._verify_once(progress, checkpoints)
        return report

    def _verify_once(self, progress: Progress | None, checkpoints: Sequence[str]) -> VerifyReport:
        ref = self.repo.references.get(KEYRING_REF)
        doc: dict[str, Any] | None = None
        if ref is not None:
            try:
                doc = Keyring.parse(keyring_blob(self.repo, ref.target))
            except VaultError:
                doc = None
        # Its own repository handle: libgit2 caches the trees and commits it
        # reads (up to 256 MB), and this one is dropped when verify returns.
        findings: list[Finding] = []
        signatures = self._signature_check(findings)
        repo = self._handle()
        try:
            try:
                head = self._head()
            except IntegrityError:  # verify reports damage; it never stops at it
                head = None
                folder = os.path.isdir(os.path.join(self.path, MAIN))
                findings.append(Finding("object", None, None, MAIN_FOLDER if folder else MAIN_DAMAGED))
            report = verify(repo, head, doc, self.keyring, self.keyring.user_key, progress, signatures)
            report.findings.extend(findings)
            if signatures is not None:
                report.findings.extend(self._checkpoint_findings(repo, head, report.commits, checkpoints))
            elif checkpoints:
                report.findings.append(
                    Finding(
                        "checkpoint", None, None, "checkpoints were given, but the vault has no signers to check them"
                    )
                )
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

    def _signature_check(self, findings: list[Finding]) -> CommitSignatures | None:
        """How verify judges each commit's signature (None: not at all);
        :mod:`vaultmem.repo.signing` fills it in."""
        return None

    def _checkpoint_findings(
        self, repo: pygit2.Repository, head: pygit2.Oid | None, count: int, given: Sequence[str]
    ) -> list[Finding]:
        """Checkpoints ``main`` no longer contains (:mod:`vaultmem.repo.signing`)."""
        return []

    # -- expiry (vaultmem.expiry does the work) ----------------------------------

    def note_read(self, path: str) -> None:
        """Record that a file was read now (for expiry; kept outside the history)."""
        self.reads.note([paths.parse(path, existing=True).text], self.clock())

    # -- policy (vaultmem.policy does the work) ----------------------------------

    @property
    def policy(self) -> Policy:
        """The vault's stored policy (the defaults until an operator sets one).
        Raises IntegrityError if the stored policy fails its seal.

        Its ref is read every time, but once in an attempt of a write
        (:meth:`_mutate`): under the writer lock no other vaultmem writer
        moves the policy, and a move by stock git during the attempt counts
        as made just after it.  That read comes after the lock is taken, so
        a change made while a command waited for the lock is seen."""
        memo: dict[str, bytes | None] | None = getattr(self._local, "refs", None)
        if memo is not None and policy_mod.POLICY_REF in memo:
            raw = memo[policy_mod.POLICY_REF]
        else:
            raw = read_ref_or_damaged(self.path, policy_mod.POLICY_REF)
            if memo is not None:
                memo[policy_mod.POLICY_REF] = raw
        overlay = self._policy_overlay
        if overlay is not None and overlay[0] != raw:
            overlay = self._policy_overlay = None  # a writer has repaired the branch: the disk is right again
        replayed = overlay[1] if overlay is not None else None
        target = (replayed or raw or b"").hex() or None
        cached = self._policy
        if cached is None or cached[0] != target:
            if replayed is not None:  # after a power cut, as the journal says (see _power_cut_view)
                policy = policy_mod.policy_at(self.repo, self.keyring, pygit2.Oid(raw=replayed))
            else:
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
        check_flag("reset", reset)
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
            if (
                current is not None
                and not current.require_signatures
                and not self.policy.require_signatures  # read as writes read it, for the check below
                and self._policy_switched_off_by()
            ):
                # turned off by a change that does not count: it is still on, and changing it takes a signature
                current = dataclasses.replace(current, require_signatures=True)
            base = Policy() if reset or current is None else current
            new = policy if policy is not None else base.with_changes(changes)
            changed = new.changed_fields(current) if current is not None else list(new.to_dict())
            _check_new_patterns(new, current)
            if changed:
                now = int(self.clock())
                self._commits.recover()
                sign = self._signature(actor, now)
                if sign is None and new.require_signatures:
                    raise SigningError(
                        "Error: requiring signatures takes a signed policy change: give the operator's signing key "
                        "(--signing-key or VAULTMEM_SIGNING_KEY). Nothing was changed."
                    )
                policy_mod.write_policy(self._commits, self._seal, new, changed, actor, session, now, sign=sign)
            return new

    def policy_history(self, limit: int | None = None) -> list[policy_mod.PolicyVersion]:
        """Every change of the policy, newest first: who, when, which fields."""
        if limit is not None and (not is_int(limit) or limit < 0):
            raise VaultError("Error: limit must be a non-negative integer.")
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
            self._adopt_keyring()
            self._settle_keyring()
            keys.check_unchanged(self.repo, self.keyring)
            if protector["kind"] == self.keyring.protector.get("kind") and hmac.compare_digest(
                new_key.mac_key, self.keyring.user_key.mac_key
            ):
                raise VaultError("Error: the vault already opens with that key; nothing was changed.")
            if (
                passphrase is not None
                and self.keyring.protector.get("kind") == "passphrase"
                and hmac.compare_digest(
                    UserKey.from_passphrase(passphrase, self.keyring.protector).mac_key, self.keyring.user_key.mac_key
                )
            ):  # the same passphrase under a new salt would still open the vault
                raise VaultError("Error: the vault already opens with that passphrase; nothing was changed.")
            now = int(self.clock())
            self.keyring.rewrap(new_key, protector, now)
            write_keyring(self._commits, self.keyring, "vaultmem: change the user key", now)

    def rotate_key(
        self, *, reencrypt: bool = False, actor: str = "vaultmem", progress: Progress | None = None
    ) -> KeyInfo:
        """Start a new data key: new writes use it, older keys stay to read the
        history.  With ``reencrypt``, one more commit ("rekey") re-encrypts every
        current file under the new key."""
        check_flag("reencrypt", reencrypt)
        _check_label("actor", actor)
        with self._lock.hold():
            self._commits.recover()
            self._adopt_keyring()
            self._settle_keyring()
            keys.check_unchanged(self.repo, self.keyring)
            now = int(self.clock())
            # --reencrypt's rekey commit: refused before the keyring changes if it cannot be signed
            if reencrypt and next(iter(self.snapshot().files(MemoryPath(()))), None) is not None:
                self._signature(actor, now)
            new = self.keyring.add_data_key(now)
            write_keyring(self._commits, self.keyring, "vaultmem: start a new data key", now)
        if reencrypt:
            try:
                self.mutate(lambda snap: self._reencrypt(snap, progress), actor=actor, skip_if_unchanged=True)
            except VaultError as err:
                raise half_done(
                    err,
                    f"the new data key {new.id} is stored and new writes use it, but the current files were not "
                    "re-encrypted under it",
                    "They stay readable under their older keys; once this is fixed, `vaultmem key rotate "
                    "--reencrypt` re-encrypts them (under one more new key).",
                ) from err
        return next(info for info in self.keys() if info.id == new.id)

    def _reencrypt(self, snap: Snapshot, progress: Progress | None) -> Change:
        files = list(snap.files(MemoryPath(())))
        change = Change("rekey", (MemoryPath(()),))
        for done, (file_path, oid) in enumerate(files, 1):
            change.write(file_path, self.keyring.open(file_path.text, self._read_raw(oid)))
            if progress is not None:
                progress(done, len(files))
        return change

    def read_blob(self, oid: bytes) -> bytes:
        """The raw (encrypted) bytes of the object ``oid``."""
        return self._read_raw(oid)

    def decrypt_blob(self, data: bytes) -> tuple[str, str]:
        """``(path, text)`` of a raw vaultmem blob (for git's textconv driver)."""
        path, content = self.keyring.open_any(data)
        return path, content.decode("utf-8")

    def configure_textconv(self, command: str) -> None:
        """Let stock git show decrypted text (``git log -p``, ``git diff``) to
        whoever runs it with the key.  The textconv cache stays off: it would
        store plaintext in git notes.  A vault that cannot be written (a
        read-only mount) is a StorageError; running it again is safe."""
        try:
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
        except (pygit2.GitError, OSError) as err:
            raise setup_error(err) from err


@dataclass(frozen=True)
class Entry:
    """One file or folder of a listing."""

    path: str
    kind: str
    size: int


def _check_paths(change: Change) -> None:
    """Every path of ``change`` as :func:`paths.parse` gives it: one an
    application built by hand (``MemoryPath(("..",))``, a name holding ``/``,
    NUL or a line break, a name not in NFC) is refused before anything is
    written, as at every other entry point.  New names (what is written, a
    move's destination) are held to the 1,024-byte path limit; names that
    may be stored already (deleted, moved away, restored), to what a stored
    path may hold."""
    named = [*change.paths, *change.deletes, *(old for old, _ in change.moves), *(t for t, _ in change.restores)]
    made = [*(path for path, _ in change.writes), *(new for _, new in change.moves)]
    for path, limit in [*((p, paths.MAX_STORED_BYTES) for p in named), *((p, paths.MAX_PATH_BYTES) for p in made)]:
        if not (
            isinstance(path, MemoryPath)
            and isinstance(path.parts, tuple)
            and all(isinstance(part, str) for part in path.parts)
        ):
            raise InvalidPathError("Error: Invalid path: a change names its paths as MemoryPath objects of text.")
        if not _canonical(path.parts, limit):
            raise InvalidPathError(
                "Error: Invalid path: a name of the change holds '/', is empty or is not in NFC; build its "
                "paths with vaultmem.core.paths.parse()."
            )


def _canonical(parts: tuple[str, ...], limit: int) -> bool:
    """Whether ``parts`` are what :func:`paths.parse` makes of their text
    under ``limit``.  ``parse`` is a pure function, so the answer for parts
    of plain ``str`` is remembered (a change names the paths the tool has
    just parsed, and the same ones again and again)."""
    if all(type(part) is str for part in parts):
        return _canonical_str(parts, limit)
    return _parses_to(parts, limit)  # a str subclass may compare or hash as it likes: never remembered


def _parses_to(parts: tuple[str, ...], limit: int) -> bool:
    path = MemoryPath(parts)
    return paths.parse(path.text, limit, existing=True).parts == parts


_canonical_str = functools.lru_cache(maxsize=1024)(_parses_to)


def file_named_as_folder(path: str, target: MemoryPath, at: object) -> NotFoundError:
    """A file asked for as ``path`` with a trailing ``/``, which names a
    folder (SPEC.md), as the memory tool's ``view`` takes it: refused by
    every read and every scope (history, diff, restore) alike."""
    where = f" at version {at}" if at is not None else ""
    return NotFoundError(f"Error: no folder {path}{where}: {target} is a file; give its path without the trailing '/'.")


def setup_error(err: Exception) -> StorageError:
    """git's settings for a vault (``vaultmem git-setup``) could not be written."""
    if isinstance(err, OSError):
        reason = commit_path.storage_reason(err)
    elif "read-only" in str(err).lower():
        reason = "the vault is on a read-only file system"
    else:
        reason = "git could not write the vault's config"
    return StorageError(
        f"Error: {reason}, so git's settings for this vault were not all written; "
        "run it again once the vault is writable."
    )


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _unusable_git_kind(folder: Path) -> str | None:
    """The repository extension that keeps libgit2 (and so vaultmem) from
    opening ``folder``, as a few words, if its config names one."""
    try:
        text = (folder / "config").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    settings = {
        name.strip().lower(): value.strip().lower()
        for name, sep, value in (line.partition("=") for line in text.splitlines())
        if sep
    }
    if settings.get("objectformat", "sha1") != "sha1":
        return f"{settings['objectformat']} object ids (extensions.objectFormat)"
    if settings.get("refstorage", "files") != "files":
        return f"{settings['refstorage']} ref storage (extensions.refStorage)"
    return None


def _gitdir_file(file: Path) -> Path | None:
    """The folder a ``gitdir: PATH`` file names (relative to the file's own
    folder, as git reads it); None for any other file."""
    try:
        with open(file, "rb") as fh:
            data = fh.read(4097)
    except OSError:
        return None
    if not data.startswith(b"gitdir: ") or len(data) > 4096:
        return None
    try:
        named = data[len(b"gitdir: ") :].decode("utf-8").strip("\r\n")
    except UnicodeDecodeError:
        return None
    return file.parent / named if named else None


# The files git and vaultmem read to open a vault and answer a call: one of
# them replaced by a FIFO would make every open wait for a writer, for ever.
_READ_AT_ONCE = ("config", "HEAD", "packed-refs", "commondir", "objects/info/alternates", *sharing.BRANCHES)


def _denied(folder: Path) -> bool:
    """Whether this user may not read ``folder`` or the files git opens a
    repository by (another user's vault, mode 0700): what git calls
    ``Permission denied``, not a folder that is no repository."""
    try:
        names = os.listdir(folder)
    except PermissionError:
        return True
    except OSError:
        return False
    for name in ("HEAD", "config"):
        if name in names:
            try:
                with open(folder / name, "rb"):
                    pass
            except PermissionError:
                return True
            except OSError:
                continue
    return False


def _refuse_special_files(folder: Path) -> None:
    """Refuse a vault one of whose git files is a FIFO, a device or a socket:
    reading it would block in libgit2 (or here), far from the cause."""
    for base in (folder, folder / ".git"):
        for name in _READ_AT_ONCE:
            try:
                mode = os.stat(base / name).st_mode
            except OSError:
                continue  # missing (or a dangling link): git's own rules apply
            if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):  # a folder: git's and vaultmem's own errors
                kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device or a socket"
                raise IntegrityError(
                    f"Error: the vault's {name} is not a file (it is {kind}), so the vault cannot be read; "
                    f"put back the file git keeps there (from a clone or a backup of {folder})."
                )


def half_done(err: VaultError, done: str, then: str) -> VaultError:
    """The error of a command whose first step was made and whose second was
    refused (``err``): it says what was made, why the rest was not, and what
    to do; never that nothing changed.  The same kind of error as ``err``."""
    reason = str(err).removeprefix("Error: ").replace(", so nothing was changed", "")
    reason = reason.replace("Nothing was changed. ", "").replace("nothing was changed", "nothing more was changed")
    made = type(err) if type(err).__init__ is VaultError.__init__ else VaultError
    return made(f"Error: {done}: {reason.rstrip('.')}. {then}")


def _sealed_main(repo: pygit2.Repository) -> bool:
    """Whether ``main``'s last commit carries a vaultmem seal: a vault's
    history, copied without its keyring branch."""
    try:
        ref = repo.references.get(MAIN)
        raw = repo.odb.read(ref.resolve().target)[1] if ref is not None else b""
    except (pygit2.GitError, KeyError, ValueError):
        return False
    head, _, _ = raw.partition(b"\n\n")
    return any(line.startswith(SEAL_HEADER + b" ") for line in head.split(b"\n"))


def taken_folder(folder: Path) -> str:
    """Why a new vault cannot be made in ``folder``, which exists and is not
    empty: saying so when it is a vault already."""
    if Engine.protection(folder) is not None:
        return (
            f"{folder} is a vault already (it exists and is not an empty folder); choose a new folder for a new vault."
        )
    return f"{folder} exists and is not an empty folder; choose a new folder for the vault."


def _was_a_vault(repo: pygit2.Repository) -> bool:
    """Whether a repository without a keyring branch is a vault that lost it:
    ``vaultmem init`` sets ``vaultmem.format`` in its config."""
    try:
        return "vaultmem.format" in repo.config
    except (pygit2.GitError, OSError):
        return False


def _git_dir(folder: Path, repo: pygit2.Repository) -> Path:
    """The folder git's files are in: ``folder`` itself for a vault, or the
    repository its ``.git`` names (a ``gitdir:`` file, or a symbolic link),
    which git and libgit2 follow.  vaultmem reads and writes git's files
    directly, so it must use that folder too: through ``folder`` it would
    find no refs (an empty memory) and no place for its packs."""
    gitdir = Path(repo.path)
    try:
        if os.path.samefile(gitdir, folder):
            return folder
    except OSError:
        return folder
    return gitdir


def _power_cut_view(gitdir: Path) -> tuple[str | None, dict[str, tuple[bytes | None, bytes]]]:
    """After a power cut, the journal may hold acknowledged moves that did
    not reach git's files, and an index may have kept its name but lost its
    data.  Until the next write repairs them, a vault reads through a private
    folder outside the vault, added as a git alternate of its own handles
    only: the journal's packs, and rebuilt indexes (with their packs) for
    invalid ones; ``main``, the keyring and the policy are read as replayed.
    Returns that folder and, for each ref the replay moves, ``(the ref on
    disk, the ref as replayed)``; None and nothing when there was no power
    cut.  Reads only: opening a vault never writes to it."""
    try:
        now = commit_path.epoch(gitdir)
        moves = [m for m in Journal(gitdir).pending() if not same_epoch(m.epoch, now)]
    except OSError:
        return None, {}
    if not moves:
        return None, {}
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
    return folder, {ref: (read_ref_or_damaged(gitdir, ref), target) for ref, target in replay(gitdir, moves).items()}


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


def _check_new_patterns(new: Policy, current: Policy | None) -> None:
    """Refuse a custom pattern being set that can backtrack without end
    (:func:`policy.backtracking_pattern`); patterns a stored policy already
    holds are not judged again."""
    refused = backtracking_pattern(new.patterns, current.patterns if current is not None else None)
    if refused is not None:
        raise VaultError(f"{refused} Nothing was changed.")
