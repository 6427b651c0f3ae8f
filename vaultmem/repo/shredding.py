"""Destroying keys: the part of the vault an erasure uses (vaultmem.ops.erase
decides what to erase).  The keyring becomes a new root commit without the
destroyed keys and every older copy of it is removed from the disk; an
erasure cut short is finished by the next writer.

Which keyrings a new root replaces is recorded, synced, before the keyring
ref moves (:func:`vaultmem.repo.keys.record_replacing`): whichever run comes
next (the same erasure again, the next write, a migration, a push or a pull)
finds every copy of them wherever it is, loose, in vaultmem's packs, in a
pack ``git gc`` made or a fetch brought, and removes it."""

from __future__ import annotations

import contextlib
import json
import os
import time

import pygit2

from vaultmem.core.crypto import (
    Erasure,
    Keyring,
)
from vaultmem.core.versions import (
    Version,
    parse_trailers,
)
from vaultmem.errors import (
    BusyError,
    StorageError,
    VaultError,
)
from vaultmem.git import commits as commit_path
from vaultmem.git import durable, objects, prune
from vaultmem.repo import keys
from vaultmem.repo.engine import Engine
from vaultmem.repo.history import first_parents
from vaultmem.repo.keys import KEYRING_REF, keyring_blob, write_keyring

GC_WAIT = 30
"""Seconds an erasure waits, holding the writer lock, for a ``git gc``
running beside it to end (what it writes may hold the old keyring)."""


class Shredding(Engine):
    """The vault with key destruction: see the module."""

    def destroy_keys(self, blobs: dict[str, tuple[str, int]], erasure: Erasure) -> list[str]:
        """Destroy the keys of ``blobs`` (``{blob id: (epoch, nonce)}``);
        see :meth:`destroy_keys_locked`."""
        with self._lock.hold():
            self._commits.recover()
            return self.destroy_keys_locked(blobs, erasure)

    def destroy_keys_locked(self, blobs: dict[str, tuple[str, int]], erasure: Erasure) -> list[str]:
        """:meth:`_destroy_keys_locked`; an erasure it cannot finish is left
        for this instance's next write to finish, as any other writer's."""
        try:
            return self._destroy_keys_locked(blobs, erasure)
        except BaseException:
            keys.back_to_stored(self.path, self.keyring)  # the keys it destroyed in memory only are back
            self._keyring_stamp = None
            self._erasure_checked = False
            raise

    def _destroy_keys_locked(self, blobs: dict[str, tuple[str, int]], erasure: Erasure) -> list[str]:
        """Destroy the keys of ``blobs`` and every copy on disk of a keyring
        that held them: the keyring becomes a new root commit, the old
        keyring commits and their objects are removed from the loose objects
        and the packs, other refs naming an old keyring (a remote's) are
        removed (the next sync fetches the remote's again), and the journal
        is wiped.  The old keyrings are recorded before the keyring ref
        moves, so a run cut short at any point is finished by any later one.
        Run again, it removes whatever a crash left behind.  The caller
        holds the writer lock.  The blob ids destroyed now."""
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
                self._record_replacing(tips)
                write_keyring(self._commits, self.keyring, message, now, root=True)
            commit_path.step("erase-prune")
            left = self._drop_old_keyrings(tips)
            commit_path.step("erase-pruned")
        except OSError as err:
            raise StorageError(
                f"Error: the erasure is recorded in {erasure.commit[:10]}, but removing the old keys failed "
                f"({commit_path.storage_reason(err)}). Run the same erasure again to finish it."
            ) from err
        except BusyError as err:  # a git lock on a ref the erasure moves: main already holds the erasure
            held = str(err).removeprefix("Error: ").partition(" exists")[0]
            lock = held if held.endswith(".lock") else "a lock file of git's"
            raise BusyError(
                f"Error: the erasure is recorded in {erasure.commit[:10]}, but its keys are not destroyed yet: "
                f"{lock} exists (another program, a git command?, is updating the vault). Run the same erasure "
                "again when it has finished; if no git command is running, that file was left by one that died: "
                "remove it from the vault's folder first."
            ) from err
        self._keyring_stamp = None
        self._keyring_changed()
        if left:
            raise BusyError(
                f"Error: the erasure is recorded in {erasure.commit[:10]} and the keys are destroyed, but another "
                f"program holds a copy of the old keyring in {', '.join(sorted(left))} (a pack it protects with a "
                "`.keep` file, one vaultmem cannot read, or a file git is writing). Run the same erasure again once "
                "that program has finished; if the `.keep` file is a leftover of a program that died, remove it "
                f"first (a file git was writing is removed once {prune.STALE // 60} minutes old)."
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

    def _record_replacing(self, tips: list[pygit2.Oid], repo: pygit2.Repository | None = None) -> None:
        """Before the keyring ref moves to a new root (under the writer lock):
        record, synced, the keyrings ``tips`` it replaces and every object of
        theirs, so that a run cut short anywhere after the move is finished
        by any later one (:func:`keys.due`)."""
        repo = repo if repo is not None else self.repo
        current = repo.references[KEYRING_REF].target
        assert isinstance(current, pygit2.Oid)
        keys.record_replacing(self.path, current.raw, tips, keys.keyring_objects(repo, [*tips, current]))

    def _pending_doomed(self) -> set[bytes]:
        """Objects of replaced keyrings an earlier run recorded and may have
        had to leave (a run cut short, another program's kept pack)."""
        return keys.due(self.path)

    def _fetched_keyrings(self, repo: pygit2.Repository, keep: set[bytes]) -> set[bytes]:
        """Objects of keyrings replaced before (here or in an earlier process)
        that are on the disk again, such as a fetch brings from a server that
        still holds one, and that ``keep`` does not name."""
        out: set[bytes] = set()
        for oid in keys.replaced(self.path) | self._replaced_keyrings:
            if oid not in keep:
                with contextlib.suppress(KeyError, ValueError, pygit2.GitError):
                    out |= keys.keyring_objects(repo, [pygit2.Oid(raw=oid)])
        return out - keep

    def end_erasure(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path / durable.STATE_DIR / self._ERASING)

    def _finish_erasure(self) -> None:
        """Finish (or drop) an erasure a killed process left, then the removal
        of old keyrings one left (an erasure's or a migration's) or a fetch
        brought back; under the writer lock."""
        self._erasure_checked = True
        self._finish_destroying()
        self._destroy_recorded()
        if (
            keys.pending(self.path)
            or any(self.repo.odb.exists(oid.hex()) for oid in keys.replaced(self.path))
            or keys.lagging_copies(self.repo)
        ):
            self._finish_removal("erasure")

    def _finish_destroying(self) -> None:
        """Destroy the keys of an erasure whose commit landed before its
        process was killed, or drop the record of one whose commit did not."""
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

    def _destroy_recorded(self) -> None:
        """Destroy again the keys of file versions the forget commits of main
        erased that the keyring on disk still holds: a keyring put back with
        git from before those erasures (a saved id, a backup bundle, a clone
        made before them).  Nothing builds on it: the keyring becomes a new
        root without those keys (holding any key the keyring this vault read
        has beside them), and the one put back leaves the disk with every
        other copy.  Under the writer lock."""
        recorded = keys.recorded_erasures(self.repo, self.path, self._head(), remember=True)
        ref = self.repo.references.get(KEYRING_REF) if recorded else None
        if ref is None:
            return
        try:
            doc = Keyring.parse(keyring_blob(self.repo, ref.target))
            lacking = keys.lacking_erasures(doc, recorded)
            if not lacking:
                return
            disk = Keyring.unlock(doc, self.keyring.user_key)
        except VaultError:
            return  # another key opens it now, or it is damaged: reads and verify judge it
        if not disk.intact:
            return  # a keyring altered without the key: writes refuse it, verify says why
        now = int(self.clock())
        base = disk
        if disk.doc != self.keyring.doc and self.keyring.intact:
            base = Keyring.union([disk, self.keyring], self.keyring.user_key, self.keyring.protector, now)
        groups: dict[str, tuple[Erasure, dict[str, tuple[str, int]]]] = {}
        for oid, erasure in sorted(lacking.items()):
            with contextlib.suppress(KeyError, ValueError, pygit2.GitError, VaultError):
                located = self.keyring.nonce_of(self.read_blob(bytes.fromhex(oid)))
                if located is not None:
                    groups.setdefault(erasure.commit, (erasure, {}))[1][oid] = located
        tips = keys.keyring_tips(self.repo)
        try:
            self.keyring.take(base)
            done = [oid for erasure, blobs in groups.values() for oid in self.keyring.destroy(blobs, erasure, now)]
            if not done and base.same_keys(disk):
                keys.back_to_stored(self.path, self.keyring)
                return
            if self.keyring.names is not None:
                self.keyring.names.forget()
            count = len(lacking)
            files = "file version" if count == 1 else "file versions"
            message = f"vaultmem: erase again the keys of {count} {files} main's history erased"
            self._record_replacing(tips)
            write_keyring(self._commits, self.keyring, message, now, root=True)
            self.keyring.recorded = {}  # destroyed now; until then they read as erased all the same
            self._drop_old_keyrings(tips)  # a copy another program keeps: verify reports it
        except BaseException as err:
            keys.back_to_stored(self.path, self.keyring)
            self._keyring_stamp = None
            self._erasure_checked = False
            if isinstance(err, OSError):
                raise StorageError(
                    f"Error: destroying again the keys of versions main's history erased failed "
                    f"({commit_path.storage_reason(err)}); they read as erased all the same. Run the erasure "
                    "again, or write again, to finish it."
                ) from err
            raise
        self._keyring_stamp = None
        self._keyring_changed()

    def _finish_removal(self, what: str, *, unnamed: bool = False) -> None:
        """Remove what an earlier erasure or migration had to leave on the
        disk, or a fetch brought back (under the writer lock), and with
        ``unnamed`` a keyring no ref names that lacks an erasure (a scan of
        every object's header); BusyError if some is still held."""
        current = self.repo.references.get(KEYRING_REF)
        keep = keys.keyring_objects(self.repo, [pygit2.Oid(hex=str(current.target))]) if current is not None else set()
        if (
            not self._pending_doomed() - keep
            and not self._stray_keyrings(keep)
            and not self._fetched_keyrings(self.repo, keep)
            and not keys.lagging_copies(self.repo)
            and not (unnamed and keys.unnamed_lagging(self.repo))
        ):
            if keys.pending(self.path):  # a record of nothing left: a move that never happened
                with contextlib.suppress(OSError):
                    keys.set_due(self.path, set(), set())
            return
        try:
            left = self._drop_old_keyrings(keys.keyring_tips(self.repo))
        except OSError as err:
            raise StorageError(
                f"Error: removing the copies of keys this vault destroyed failed ({commit_path.storage_reason(err)}). "
                f"Run the {what} again to finish it."
            ) from err
        if left:
            raise BusyError(
                f"Error: another program still holds a copy of keys this vault destroyed, in "
                f"{', '.join(sorted(left))} (a pack it protects with a `.keep` file, or a file git is writing). "
                f"Run the {what} again once it has finished; if the `.keep` file is a leftover of a program that "
                f"died, remove it first (a file git was writing is removed once {prune.STALE // 60} minutes old)."
            )

    def finish_removal(self, what: str = "erasure") -> None:
        """:meth:`_finish_removal`, taking the writer lock, keyrings no ref
        names included (an erasure run again that finds nothing left to erase)."""
        with self._lock.hold():
            self._commits.recover()
            self._finish_removal(what, unnamed=True)

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
        gone = {tip.raw for tip in tips} | keys.replaced(self.path)
        gone = {oid for oid in gone if oid not in keep}
        self._replaced_keyrings |= gone
        if self.keyring.format >= 2:
            doomed |= self._stray_keyrings(keep)
        doomed |= self._pending_doomed() - keep
        doomed |= self._fetched_keyrings(repo, keep)
        doomed |= keys.unnamed_lagging(repo) - keep  # no ref names them: git would keep them until it prunes
        naming, tags = _refs_naming(repo, doomed | gone)
        doomed |= tags
        # Written (synced) before any ref naming them goes: after a crash from
        # here on, the next run still knows what to remove.
        keys.set_due(self.path, doomed, gone)
        for name in list(repo.references):
            if name == KEYRING_REF or _names_current(repo, name, current):
                continue  # a tracking ref a pull has just moved to this keyring stays
            if name.endswith("/vaultmem-keyring") or name in naming:
                with contextlib.suppress(KeyError, ValueError, pygit2.GitError):
                    repo.references.delete(name)
        self._commits.mark_pruning()
        packing = prune.running_packer(self.path)
        left = prune.drop(self.path, doomed, repo)
        gc = prune.running_packer(self.path) or packing
        if gc is not None:
            # A git gc or git repack that read the refs before the keyring
            # moved writes its pack (the old keyring in it) after this
            # removal: wait for it to end, then remove again from whatever it wrote.
            deadline = time.monotonic() + GC_WAIT
            while gc is not None and time.monotonic() < deadline:
                time.sleep(0.05)
                gc = prune.running_packer(self.path)
            self._free_handle()  # a fresh handle: libgit2 lists the packs again
            repo = self.repo
            left = prune.drop(self.path, doomed, repo)
            if gc is not None:
                where = self.path / ("gc.pid" if gc.startswith("git gc,") else "objects")
                left.append(f"{where} ({gc}, still running after {GC_WAIT} seconds)")
        self._commits.mark_pruning()
        keys.set_due(self.path, doomed if left else set(), gone)
        self._commits.scrub()
        durable.sync_filesystem(self.path)
        self._free_handle()  # a fresh handle: libgit2 lists the packs again
        return left

    def _drop_stray_keyrings(self, repo: pygit2.Repository) -> None:
        """After a push or a pull: remove the keyrings replaced before that
        its fetches brought back (named by no ref any more), and finish a
        removal an earlier run recorded.  A copy another program keeps stays
        recorded for the next run (``verify`` reports it)."""
        with self._lock.hold():
            self._commits.recover()
            if keys.pending(self.path):
                with contextlib.suppress(BusyError):
                    self._finish_removal("erasure")
                return
            current = keys.keyring_objects(repo, keys.keyring_tips(repo, copies=False))
            doomed = self._stray_keyrings(current) | self._fetched_keyrings(repo, current)
            if doomed:
                naming, tags = _refs_naming(repo, doomed)
                doomed |= tags
                keys.set_due(self.path, doomed, set())  # synced before any goes
                for name in naming:
                    with contextlib.suppress(KeyError, ValueError, pygit2.GitError):
                        repo.references.delete(name)
                self._commits.mark_pruning()
                left = prune.drop(self.path, doomed, repo)
                self._commits.mark_pruning()
                keys.set_due(self.path, doomed if left else set(), set())
                self._free_handle()

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


def _names_current(repo: pygit2.Repository, name: str, current: pygit2.Oid) -> bool:
    """Whether ref ``name`` points straight at the current keyring commit."""
    try:
        ref = repo.references[name]
    except (KeyError, ValueError, pygit2.GitError):
        return False
    return ref.type == pygit2.enums.ReferenceType.DIRECT and ref.target == current


def _refs_naming(repo: pygit2.Repository, doomed: set[bytes]) -> tuple[set[str], set[bytes]]:
    """The refs other than the keyring's that name an object of ``doomed``,
    directly or through annotated tags (a branch or a tag an operator made of
    an old keyring with git, or fetched one back under): they go with it, or
    git would find them naming objects that are gone (``git fsck`` and
    ``git gc`` fail on such a ref).  And the tag objects on the way, which go too."""
    names: set[str] = set()
    tags: set[bytes] = set()
    for name in list(repo.references):
        if name == KEYRING_REF:
            continue
        with contextlib.suppress(KeyError, ValueError, pygit2.GitError):
            target = repo.references[name].target
            if not isinstance(target, pygit2.Oid):
                continue  # symbolic: the ref it names is judged for itself
            chain: set[bytes] = set()
            for _ in range(64):  # a tag of a tag of ...
                if target.raw in doomed:
                    names.add(name)
                    tags |= chain
                    break
                try:
                    obj = repo[target]
                except KeyError:
                    break
                if not isinstance(obj, pygit2.Tag):
                    break
                chain.add(target.raw)
                target = obj.target
    return names, tags
