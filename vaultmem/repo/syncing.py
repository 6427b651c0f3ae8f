"""Sharing a vault through a git server (docs/sync.md): clone, push, pull and
sync, over :mod:`vaultmem.repo.remotes` (the transport and the protocol)
and :mod:`vaultmem.repo.merge` (merging two histories)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Self

import pygit2

from vaultmem.core.crypto import (
    Keyring,
    UserKey,
)
from vaultmem.core.policy import Policy
from vaultmem.core.values import file_name
from vaultmem.errors import (
    BusyError,
    ConflictError,
    IntegrityError,
    VaultError,
)
from vaultmem.git import durable
from vaultmem.git.commits import (
    DAMAGED,
    Draft,
    ident,
    read_ref_or_damaged,
)
from vaultmem.repo import keys
from vaultmem.repo import merge as merging
from vaultmem.repo import policy as policy_mod
from vaultmem.repo import remotes as sharing
from vaultmem.repo.engine import MAIN, Clock, _check_label, taken_folder
from vaultmem.repo.history import merge_base
from vaultmem.repo.keys import SHADOWS_REF, write_keyring
from vaultmem.repo.shredding import Shredding
from vaultmem.repo.signed import CHECKPOINTS_REF, SIGNERS_REF, merge_checkpoints, signers_problems
from vaultmem.repo.verify import Progress

SYNC_WAIT = 60.0  # seconds a pull or push waits for another one of the same vault
SYNC_TRIES = 3  # pushes a sync tries, each after a pull, when other clones' pushes land first


@contextlib.contextmanager
def one_sync(gitdir: Path) -> Iterator[None]:
    """Hold the vault's sync lock: one pull or push of a vault at a time,
    across threads and processes.  Two of libgit2's fetches in one
    repository fail on each other's lock files (``refs/remotes/NAME/*.lock``,
    ``shallow.lock``), and a pull reads the tracking refs its fetch wrote.
    A lock of its own, not the writer lock: tool calls never wait for a
    network round trip.  A sync waits for another one at most
    :data:`SYNC_WAIT` seconds, then stops with a BusyError."""
    path = gitdir / durable.STATE_DIR / "sync-lock"
    deadline, pause = time.monotonic() + SYNC_WAIT, 0.002
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:  # the disposable state folder was removed
            path.parent.mkdir(mode=0o700, exist_ok=True)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() >= deadline:
                raise BusyError(
                    f"Error: another sync of this vault (a pull or a push) is still running after {SYNC_WAIT:g} "
                    "seconds; try again when it has finished. Nothing was changed."
                ) from None
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
            continue
        try:
            here, mine = os.stat(path), os.fstat(fd)
        except FileNotFoundError:
            here = None
        if here is not None and (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino):
            break
        os.close(fd)  # a lock on a file someone removed or replaced excludes nobody
    try:
        yield
    finally:
        os.close(fd)  # closing the only descriptor releases the lock


class Syncing(Shredding):
    """The vault with its remotes: see the module."""

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
        path = file_name(path, "path")

        def opens(folder: Path) -> None:
            try:
                opened = cls.open(folder, key=key, key_file=key_file, passphrase=passphrase, clock=clock)
            except VaultError as err:  # a wrong key, say: said as every refused clone says it
                fact = err.fact.removeprefix("Error: ").rstrip(".").replace("this vault", "the vault")
                told = f"Error: cannot clone {url}: {fact}. Nothing was made."
                try:
                    raise type(err)(told, step=err.step) from err
                except TypeError:
                    raise VaultError(told, step=err.step) from err
            try:
                sharing.check_clone(opened.repo, opened.keyring)  # every commit sealed, as a pull checks
            finally:
                opened.close()

        if cls.protection(path) is not None:  # said as `init` says it, not only that the folder is not empty
            raise VaultError("Error: " + taken_folder(Path(path)))
        sharing.clone(url, Path(path), configure=opens, progress=progress)
        return cls.open(path, key=key, key_file=key_file, passphrase=passphrase, clock=clock)

    @property
    def remotes(self) -> list[sharing.Remote]:
        """The git servers this vault is shared through, as (name, url)."""
        return sharing.list_remotes(self.repo)

    def add_remote(self, name: str, url: str) -> sharing.Remote:
        return sharing.add_remote(self.repo, name, url)

    def remove_remote(self, name: str) -> None:
        # after any pull or push running now: one that ends after the removal would write the
        # remote's tracking refs and witness back, a remote half there that a new one of that name inherits
        with one_sync(self.path):
            sharing.remove_remote(self.repo, name)

    def push(self, remote: str = "origin", progress: Progress | None = None) -> sharing.Transfer:
        """Send this vault's new versions, keys and policy to ``remote``: only
        fast-forwards, never forced; ConflictError when the remote holds
        versions this vault lacks (pull first)."""
        repo = self._handle()  # its own handle: a push may run in another thread (AutoSync)
        try:
            with one_sync(self.path), sharing.tracking_kept(repo, remote):
                result = sharing.push(repo, remote, progress, self.keyring)
            if self.keyring.format >= 2:
                self._drop_stray_keyrings(repo)
            return result
        finally:
            repo.free()

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
            with one_sync(self.path), sharing.tracking_kept(repo, remote):
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
        sharing.foreign_main(repo, remote, "Nothing was changed.")
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
                    assert local_ring is not None
                    merging.check_one_key_change(repo, self.keyring, pulled, local_ring, their_ring, remote)
                    merged = merging.merge_keyrings(self.keyring, pulled, new_user_key is not None, now)
                    if their_ring.raw in self._replaced_keyrings | keys.replaced(self.path) and merged.same_keys(
                        self.keyring
                    ):
                        # the server still holds the keyring this vault's erasure replaced, and brings
                        # nothing: this vault's keyring stands, and the next push replaces theirs
                        ring_step, pulled, stale_remote_ring = "none", self.keyring, True
                if ring_step == "merge":
                    # An erasure on either side (format 2): the merged keyring
                    # is a new root, and every older keyring leaves the disk.
                    replace = merged.format >= 2 and (
                        local_ring is None
                        or merge_base(repo, local_ring, their_ring) is None
                        or merged.erased.keys() != self.keyring.erased.keys()
                        or merged.erased.keys() != pulled.erased.keys()
                    )
                    is_root = not repo[their_ring].peel(pygit2.Commit).parent_ids
                    adopt = replace and is_root and merged.same_keys(pulled) and new_user_key is None
                    pulled = pulled if adopt else merged
                keyring = pulled
            steps = {}
            for ref in (MAIN, policy_mod.POLICY_REF, SHADOWS_REF, SIGNERS_REF, CHECKPOINTS_REF):
                local, theirs = sharing.incoming(repo, remote, ref)
                step = sharing.relation(repo, remote, ref, local, theirs)
                if ref == SHADOWS_REF and step == "merge":
                    raise ConflictError(
                        f"Error: this vault and the remote {remote!r} were migrated to storage format 2 "
                        "separately; clone the remote again. Nothing was changed."
                    )
                if ref == SIGNERS_REF and step == "merge":
                    raise ConflictError(
                        f"Error: the signers were changed both here and on {remote!r} since the last sync. To keep "
                        f"the server's: `git update-ref refs/heads/vaultmem-signers refs/remotes/{remote}/"
                        "vaultmem-signers` in the vault, then make this side's change again with `vaultmem signer`. "
                        "Nothing was changed."
                    )
                if step != "none":
                    assert theirs is not None
                    try:
                        sharing.check_commits(repo, local, theirs, keyring)
                    except IntegrityError as err:
                        if their_ring is None and "which is not in the keyring" in str(err):
                            raise IntegrityError(
                                f"Error: the remote {remote!r} has no vaultmem-keyring branch (deleted on the "
                                f"server?), and its {sharing.short_name(ref)} holds versions sealed with data keys "
                                "this vault lacks. A push from a clone that has them puts the keyring back; then "
                                "pull again. Nothing was changed."
                            ) from err
                        raise
                    steps[ref] = (step, local, theirs)
                if ref == SIGNERS_REF and step != "none":
                    assert theirs is not None
                    unsigned = signers_problems(repo, keyring, theirs)
                    if unsigned:
                        bad, kind, detail = unsigned[0]
                        raise ConflictError(
                            f"Error: the signers list on {remote!r} has a change no operator signed (commit "
                            f"{bad[:12]}, {kind}: {detail}); nothing was changed. Ask an operator of that server "
                            "to move its vaultmem-signers branch back to its last good commit."
                        )
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
            # A merge commit is signed as ``actor``: refused here, before any branch moves, if it cannot be.
            merges = main_merge is not None or policy_merge is not None
            merges = merges or steps.get(CHECKPOINTS_REF, ("",))[0] == "merge"
            sign = self._signature(actor, now) if merges else None
            if main_merge is not None or policy_merge is not None or ring_step == "merge":
                # the fetched objects, before a merge commit names them (advance syncs for itself)
                durable.sync_filesystem(self.path)
            if replace:  # recorded (synced) before the keyring ref leaves them
                self._record_replacing(tips, repo)
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
            if stale_remote_ring:  # its format 1 data keys, or the erased ones, must not stay on this disk
                self._drop_old_keyrings(tips)
            for ref, (step, local, theirs) in steps.items():
                if step == "advance":
                    sharing.advance(self._commits, ref, local, theirs)
                    tip = str(theirs)
                elif ref == MAIN:
                    assert main_merge is not None and local is not None
                    new_objects, root, message, report = main_merge
                    draft = Draft(root, [local.raw, theirs.raw], ident(actor, actor), now, message)
                    commit = self._commits.commit(MAIN, local.raw, new_objects, draft, self._seal, sign=sign)
                    self._recent.add([*new_objects, commit])
                    report.commit = tip = commit.id.hex()
                    result.merge = report
                elif ref == CHECKPOINTS_REF:
                    assert local is not None
                    tip = merge_checkpoints(repo, self._commits, self._seal, sign, local, theirs, actor, now)
                else:
                    assert policy_merge is not None
                    merged_policy, changed = policy_merge
                    tip = policy_mod.write_policy(
                        self._commits,
                        self._seal,
                        merged_policy,
                        changed,
                        actor,
                        None,
                        now,
                        merged_from=theirs.raw,
                        sign=sign,
                    )
                result.moved[sharing.short_name(ref)] = (str(local) if local else None, tip)
            sharing.remember(repo, remote)
            sharing.still_to_push(repo, result, replaced=stale_remote_ring)
            self._signers_changed()  # git's allowed-signers file, even when only the server's copy moved
        if self.keyring.format >= 2:
            self._drop_stray_keyrings(repo)
        if result.merge is not None:
            self._upkeep.poke()
        return result

    def _merged_policy(
        self, repo: pygit2.Repository, keyring: Keyring, local: pygit2.Oid, theirs: pygit2.Oid, prefer: str | None
    ) -> tuple[Policy, list[str]]:
        base = merging.policy_base(repo, [local], [theirs], lambda commit: policy_mod.policy_at(repo, keyring, commit))
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
        moved, what the push moved).  When another clone's push lands
        between the two (the push is refused: pull first), it pulls and
        pushes again, up to :data:`SYNC_TRIES` times in all."""
        pulled = self.pull(remote, progress, actor=actor, policy_from=policy_from)
        try:
            for tries_left in range(SYNC_TRIES - 1, -1, -1):
                try:
                    return pulled, self.push(remote, progress)
                except ConflictError:
                    if not tries_left:
                        raise
                again = self.pull(remote, progress, actor=actor, policy_from=policy_from)
                for branch, (_, to) in again.moved.items():  # from where the first pull found it, to where it is now
                    pulled.moved[branch] = (pulled.moved.get(branch, again.moved[branch])[0], to)
                pulled.merge = again.merge or pulled.merge
                pulled.absent, pulled.ahead = again.absent, again.ahead
        except VaultError as err:
            if not pulled.changed:
                raise
            raise _pull_kept(err, pulled) from err
        raise AssertionError("unreachable")


def _pull_kept(err: VaultError, pulled: sharing.Transfer) -> VaultError:
    """``err``, a sync's push (or later pull) failing, saying that the pull
    before it moved this vault's branches and stands: "Nothing was changed"
    would not be true of the sync."""
    moves = []
    for branch, (old, new) in pulled.moved.items():
        how = " (merged)" if branch == "main" and pulled.merge is not None else ""
        moves.append(f"{branch} {old[:10] if old else '(new)'}..{new[:10]}{how}")
    fact = err.fact.replace("This vault's branches were not changed; its", "Its")
    fact = fact.removesuffix(" Nothing was changed.").removesuffix(" Nothing was pushed.")
    told = f"{fact} Nothing was pushed; the pull before it stands: {', '.join(moves)}."
    try:
        return type(err)(told, step=err.step)
    except TypeError:
        return VaultError(told, step=err.step)
