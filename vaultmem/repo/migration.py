"""Migrations of a vault in place: storage format 1 to 2, and sealing names.
Every commit keeps its id and seal; each step is crash-safe and can be run
again."""

from __future__ import annotations

import contextlib
import copy

import pygit2

from vaultmem.core.crypto import (
    Keyring,
)
from vaultmem.core.paths import MemoryPath
from vaultmem.core.versions import (
    SEAL_HEADER,
)
from vaultmem.errors import (
    BusyError,
    StorageError,
    VaultError,
)
from vaultmem.git import commits as commit_path
from vaultmem.git import objects
from vaultmem.git.commits import (
    COMMITTER,
    DAMAGED,
    Draft,
    read_ref_or_damaged,
)
from vaultmem.git.snapshot import Snapshot
from vaultmem.repo import keys
from vaultmem.repo.engine import Change, _check_label, half_done
from vaultmem.repo.history import commits
from vaultmem.repo.keys import SHADOWS_REF, write_keyring
from vaultmem.repo.shredding import Shredding
from vaultmem.repo.verify import Progress


class Migration(Shredding):
    """The vault with its migrations: see the module."""

    def migrate(self, progress: Progress | None = None, *, sealed_names: bool = False, actor: str = "vaultmem") -> bool:
        """Move a format 1 vault to format 2 (see :meth:`migrate_format`);
        with ``sealed_names``, then seal its names (see :meth:`seal_names`).
        False if there was nothing to do."""
        if not isinstance(sealed_names, bool):
            raise VaultError("Error: sealed_names must be True or False.")
        if sealed_names:
            self._check_seal_signable(actor)  # before the migration too: nothing changes on a refusal
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
            self._check_seal_signable(actor)
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
        try:
            version = self.mutate(lambda snap: Change("seal-names", (MemoryPath(()),)), actor=actor)
        except VaultError as err:
            if not changed:
                raise
            raise half_done(
                err,
                "the vault's name key is stored, but the current files were not moved to their sealed names",
                "Run the same command again once this is fixed: it finishes the sealing (so does any later write).",
            ) from err
        self.reads.restate()  # the log of reads, too, names files by their tokens from now on
        return changed or version is not None

    def _check_seal_signable(self, actor: str) -> None:
        """Sealing names ends with a ``seal-names`` commit on ``main`` made as
        ``actor``: refused (SigningError) before anything changes when the
        policy requires it signed and it cannot be."""
        _check_label("actor", actor)
        if self._head() is not None and not self.snapshot().sealed:
            self._signature(actor, int(self.clock()))

    def migrate_format(self, progress: Progress | None = None) -> bool:
        """Move a format 1 vault to format 2.  Every commit keeps its id and
        its seal.  Each format 1 file version of the history gets a shadow: a
        copy re-encrypted under a format 2 key of its own, bound to that
        version, on the ``vaultmem-shadows`` branch; then the format 1 data
        keys are destroyed (their seal keys stay) and the keyring becomes a
        new root commit, every older copy of it removed from the disk.  From
        then on every version, old or new, can be erased one by one.

        Crash-safe: the keyring ref moves once, after the old keyring is
        recorded (synced) for removal; before it, the vault is in format 1 as
        it was (a shadow branch of a migration cut short is replaced by the
        next one); after it, the next write, a run again, or a push or pull
        finishes removing every copy of the old keyring.  False if the vault
        is in format 2 already."""
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
                self._record_replacing(tips)  # synced before the keyring ref leaves the format 1 keyring
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
            for commit in commits(self.repo, head):  # the parents commits record: a grafts file hides none
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
