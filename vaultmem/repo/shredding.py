"""Destroying keys: the part of the vault an erasure uses (vaultmem.ops.erase
decides what to erase).  The keyring becomes a new root commit without the
destroyed keys and every older copy of it is removed from the disk; an
erasure cut short is finished by the next writer."""

from __future__ import annotations

import contextlib
import json
import os

import pygit2

from vaultmem.core.crypto import (
    Erasure,
)
from vaultmem.core.versions import (
    Version,
    parse_trailers,
)
from vaultmem.errors import (
    BusyError,
    StorageError,
)
from vaultmem.git import commits as commit_path
from vaultmem.git import durable, objects, prune
from vaultmem.repo import keys
from vaultmem.repo.engine import Engine
from vaultmem.repo.history import first_parents
from vaultmem.repo.keys import KEYRING_REF, write_keyring


class Shredding(Engine):
    """The vault with key destruction: see the module."""

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
