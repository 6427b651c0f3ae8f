"""Managing signers and checkpoints: the part of the vault that changes the
``vaultmem-signers`` and ``vaultmem-checkpoints`` branches (how a commit is
signed is the engine's; what is stored is :mod:`vaultmem.repo.signed`).

Only an operator changes the signers, with a commit signed by their own
key; the very first change is an operator adding themself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pygit2

from vaultmem.core.signers import Signers, check_principal, check_reason
from vaultmem.core.signing import ForeignKeyError, PublicKey, SigningKey, parse_signature
from vaultmem.errors import IntegrityError, SigningError, VaultError
from vaultmem.git.commits import read_ref_or_damaged
from vaultmem.git.durable import STATE_DIR
from vaultmem.repo import policy as policy_mod
from vaultmem.repo import remotes as sharing
from vaultmem.repo import signed
from vaultmem.repo.engine import Engine, _check_label, setup_error
from vaultmem.repo.history import commits, hiding_files
from vaultmem.repo.verify import Finding

_log = logging.getLogger("vaultmem")


def _public(key: PublicKey | SigningKey | str) -> PublicKey:
    if isinstance(key, PublicKey):
        return key
    if isinstance(key, SigningKey):
        return key.public
    if isinstance(key, str):
        return PublicKey.from_line(key)
    raise VaultError("Error: a signer's key is a public key line (ssh-ed25519 AAAA...) or a SigningKey.")


class Signing(Engine):
    """The vault with signer management and checkpoints: see the module."""

    _signer_files_for: str | None = ""  # the signers tip (hex) git's files were last made current for

    # -- signers -------------------------------------------------------------------

    def _change_signers(
        self, actor: str, session: str | None, subject: str, trailers: list[tuple[str, str]], change: object
    ) -> Signers:
        """Apply ``change`` (Signers -> Signers) as one commit signed by
        ``actor``'s key, which must be an operator's (or, for the first
        change, the operator key the change adds)."""
        _check_label("actor", actor)
        _check_label("session", session, optional=True)
        key = self.signing_key(actor)
        if key is None:
            raise SigningError(
                f"Error: changing the signers takes an operator's signing key, and {actor!r} has none; give it with "
                "--signing-key or VAULTMEM_SIGNING_KEY. Nothing was changed."
            )
        assert callable(change)
        with self._lock.hold():
            self._commits.recover()
            # a change killed after its commit, before git's files were rewritten: they are made current
            # first, so that even a retry refused below ("nothing was changed") leaves stock git agreeing
            self._refresh_signer_files()
            now = int(self.clock())
            current = self.signers
            # who may change the list is settled before what the change would do (the first
            # change, which has no list to judge it by yet, by what it makes)
            new: Signers = current if current else change(current, now)
            if not new.is_operator(key.public, actor, now):
                if not current and any(
                    e.principal == actor and e.key == key.public and e.operator for e in new.entries
                ):
                    problem = (
                        "the first operator's key signs this very change, so it must be valid now: give a "
                        "--valid-after/--valid-before window that holds now (or neither)"
                    )
                elif not current:
                    problem = (
                        "the first signer must be an operator adding their own key: "
                        f"`vaultmem signer add {actor} KEY.pub --operator --actor {actor}`, signed by that key"
                    )
                elif any(s.operator for s in current.current(actor, now)):
                    problem = (
                        f"the signing key {key.public.fingerprint} is not a valid operator key of {actor!r} "
                        "(`vaultmem signer list` shows its keys)"
                    )
                else:
                    problem = f"{actor!r} is not a valid operator of this vault's signers"
                raise SigningError(f"Error: {problem}; nothing was changed.")
            if current:
                new = change(current, now)
            signed.write_signers(self._commits, self._seal, key.sign, new, subject, trailers, actor, session, now)
            # under the writer lock, so that two changes never leave git's files at the older one
            self._refresh_signer_files()
        return new

    # -- the files stock git reads -------------------------------------------------------

    def allowed_signers_paths(self) -> tuple[Path, Path]:
        """Where ``git-setup`` keeps git's allowed-signers and revocation files."""
        state = self.path.resolve() / STATE_DIR
        return state / "allowed_signers", state / "revoked_keys"

    def configure_signers(self) -> tuple[Path, Path]:
        """Write git's allowed-signers and revocation files from the signers
        branch and point ``gpg.ssh.allowedSignersFile`` and
        ``gpg.ssh.revocationFile`` at them, so ``git verify-commit`` and
        ``git log --show-signature`` check signatures with no vaultmem."""
        try:
            with self._lock.hold():
                allowed, revoked = self._write_signer_files()
            config = self.repo.config
            config["gpg.format"] = "ssh"
            config["gpg.ssh.allowedSignersFile"] = str(allowed)
            config["gpg.ssh.revocationFile"] = str(revoked)
        except (pygit2.GitError, OSError) as err:
            raise setup_error(err) from err
        return allowed, revoked

    def refresh_allowed_signers(self) -> None:
        """Rewrite git's files after the signers changed, if ``git-setup`` set
        them up (the caller holds the writer lock).  Raises OSError when they
        cannot be written."""
        allowed, revoked = self.allowed_signers_paths()
        config = self.repo.config
        try:
            configured = config["gpg.ssh.allowedSignersFile"]
        except KeyError:
            return
        if configured == str(allowed):
            self._write_signer_files()
        elif configured and Path(configured).parts[-2:] == (STATE_DIR, allowed.name):
            # `git-setup` was run where the vault was before it was moved or copied (its git
            # config came along): git would read that other folder's file, judging this vault's
            # signatures by signers it no longer has, or find none; it reads this vault's from now on
            self._write_signer_files()
            config["gpg.ssh.allowedSignersFile"] = str(allowed)
            config["gpg.ssh.revocationFile"] = str(revoked)

    def _refresh_signer_files(self) -> None:
        """:meth:`refresh_allowed_signers` where a signer change already
        stands: a file that cannot be written is logged, not raised (the next
        write under the writer lock, or ``vaultmem git-setup``, writes it)."""
        try:
            self.refresh_allowed_signers()
        except (OSError, pygit2.GitError) as err:  # a full disk, or a git config being rewritten
            _log.warning(
                "vaultmem: git's allowed-signers file could not be rewritten (%s); stock git may judge signatures "
                "by the old signers until the next write or `vaultmem git-setup`",
                err.strerror if isinstance(err, OSError) and err.strerror else err,
            )
            self._signer_files_for = ""
            return
        tip = read_ref_or_damaged(self.path, signed.SIGNERS_REF)
        self._signer_files_for = tip.hex() if tip is not None else None

    def _signers_changed(self) -> None:
        self._refresh_signer_files()  # a pull's moves stand whether or not git's files can be written

    def _write_signer_files(self) -> tuple[Path, Path]:
        """Write both files whole (a new file renamed over the old one), each
        only when it differs from what is there."""
        allowed, revoked = self.allowed_signers_paths()
        signers = self.signers
        for path, data in ((allowed, signers.allowed_signers()), (revoked, signers.revoked_keys())):
            try:
                with open(path, "rb") as fh:
                    if fh.read(len(data) + 1) == data:
                        continue
            except OSError:
                pass  # not there yet, or unreadable: written below
            fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.chmod(temporary, 0o644)  # public keys, for git run by any user of the vault
                os.replace(temporary, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
                raise
        return allowed, revoked

    def add_signer(
        self,
        principal: str,
        key: PublicKey | SigningKey | str,
        *,
        actor: str,
        operator: bool = False,
        valid_after: int | None = None,
        valid_before: int | None = None,
        session: str | None = None,
    ) -> Signers:
        """Let ``principal`` (an actor name) sign with ``key``; with
        ``operator``, also manage signers.  One signed commit."""
        check_principal(principal)
        public = _public(key)
        return self._change_signers(
            actor,
            session,
            f"signers: add {principal}{' (operator)' if operator else ''} {public.fingerprint}",
            [("Vaultmem-Command", "signer-add"), ("Vaultmem-Signer", f"{principal} {public.fingerprint}")],
            lambda s, now: s.add(
                principal,
                public,
                now=now,
                by=actor,
                operator=operator,
                valid_after=valid_after,
                valid_before=valid_before,
            ),
        )

    def rotate_signer(
        self, principal: str, key: PublicKey | SigningKey | str, *, actor: str, session: str | None = None
    ) -> Signers:
        """``principal`` signs with ``key`` from now on; its old keys stop now."""
        check_principal(principal)
        public = _public(key)
        return self._change_signers(
            actor,
            session,
            f"signers: rotate {principal} to {public.fingerprint}",
            [("Vaultmem-Command", "signer-rotate"), ("Vaultmem-Signer", f"{principal} {public.fingerprint}")],
            lambda s, now: s.rotate(principal, public, now=now, by=actor),
        )

    def revoke_signer(
        self,
        principal: str,
        *,
        actor: str,
        key: PublicKey | SigningKey | str | None = None,
        compromised: bool = False,
        reason: str = "",
        session: str | None = None,
    ) -> Signers:
        """Revoke ``principal``'s keys (or ``key``) from now on; with
        ``compromised``, every signature they ever made stops counting."""
        check_principal(principal)
        public = _public(key) if key is not None else None
        check_reason(reason)
        trailers = [("Vaultmem-Command", "signer-revoke"), ("Vaultmem-Signer", principal)]
        if compromised:
            trailers.append(("Vaultmem-Compromised", "yes"))
        if reason:
            trailers.append(("Vaultmem-Reason", reason))
        return self._change_signers(
            actor,
            session,
            f"signers: revoke {principal}{' (compromised)' if compromised else ''}",
            trailers,
            lambda s, now: s.revoke(principal, now=now, by=actor, key=public, compromised=compromised, reason=reason),
        )

    def has_signers(self) -> bool:
        """Whether the vault has (or had) signers: its signers branch exists."""
        try:
            return self.repo.references.get(signed.SIGNERS_REF) is not None
        except pygit2.GitError as err:  # a damaged packed-refs file
            raise IntegrityError(f"Error: the vault's refs cannot be read ({err}); run `vaultmem verify`.") from err

    def signature_of(self, version: str) -> dict[str, object] | None:
        """Who signed one commit and whether it counts, as ``show`` prints it:
        ``{"signer", "key", "ok", "problem"}``; None when it is unsigned."""
        oid = pygit2.Oid(hex=self.resolve(version).id)
        facts = signed.commit_facts(bytes(self.repo.odb.read(oid)[1]))
        if facts.signature is None:
            return None
        try:
            key = parse_signature(facts.signature).key
        except ForeignKeyError as err:  # a good signature, maybe, but by no signer's key
            return {"signer": None, "key": err.fingerprint, "ok": False, "problem": "unknown signer"}
        except VaultError:
            return {"signer": None, "key": None, "ok": False, "problem": "bad signature"}
        try:
            signers = self.signers
        except IntegrityError:
            signers = Signers()
        owners = sorted({s.principal for s in signers.by_key(key)})
        problem = signed.judge(facts, signers)
        return {
            "signer": owners[0] if len(owners) == 1 else None,
            "key": key.fingerprint,
            "ok": problem is None,
            "problem": problem[0] if problem is not None else None,
        }

    # -- verify ------------------------------------------------------------------------

    def _signature_check(self, findings: list[Finding]) -> signed.CommitSignatures | None:
        """How verify judges each commit's signature (None: the vault never
        had signers nor required signatures), with the signers branch's own
        problems added to ``findings``."""
        try:
            signers = signed.read_signers(self.repo, self.keyring)[0]
            versions = [
                (v.id, int(v.time.timestamp()), v.policy.require_signatures)
                for v in reversed(policy_mod.history(self.repo, self.keyring))
            ]
        except IntegrityError:  # a damaged policy or signers list: reported on its own below
            signers, versions = Signers(), []
        required, policy_problems = signed.policy_signatures(self.repo, versions, signers)
        for commit, kind, detail in policy_problems:
            findings.append(Finding(kind, commit, None, detail))  # type: ignore[arg-type]
        try:
            problems = signed.signers_problems(self.repo, self.keyring, again=True)
        except IntegrityError as err:  # the branch is not a plain ref: a finding, as every problem is
            problems = [("", "object", str(err).removeprefix("Error: "))]
        for commit, kind, detail in problems:
            findings.append(Finding(kind, commit or None, None, detail))  # type: ignore[arg-type]
        if not signers and not any(flag for _, flag in required):
            # no signers to judge by: a signed commit is still a finding (its signers branch was
            # deleted, or it was signed by a key that never was a signer), so that verify does not
            # call a signed history whose signers are gone "no problems found"
            return signed.SignedCommitsWithoutSigners()
        return signed.CommitSignatures(signers, required)

    def _checkpoint_findings(
        self, repo: pygit2.Repository, head: pygit2.Oid | None, count: int, given: Sequence[str]
    ) -> list[Finding]:
        try:
            signers = signed.read_signers(self.repo, self.keyring)[0]
        except IntegrityError:  # reported by the signers branch's own check
            signers = Signers()
        if not signers:  # none, or none readable: a checkpoint's signature cannot be judged
            if any(given):
                return [
                    Finding(
                        "checkpoint", None, None, "checkpoints were given, but the vault has no signers to check them"
                    )
                ]
            return []
        texts = [*given, signed.checkpoints_kept(repo)]
        sources = ["a checkpoint file given"] * len(given) + ["the vault's vaultmem-checkpoints branch"]
        for remote in sharing.list_remotes(repo):  # each server's copy, as last fetched
            texts.append(signed.checkpoints_kept(repo, sharing.tracking(remote.name, signed.CHECKPOINTS_REF)))
            sources.append(f"{remote.name}'s vaultmem-checkpoints branch")
        out: list[Finding] = []
        seen: set[str] = set()
        for at, text in enumerate(texts):
            if not text.strip() and at < len(given):  # a file given to check by, emptied: it proves nothing
                out.append(
                    Finding("checkpoint", None, None, "a checkpoint file given is empty: it holds no checkpoint")
                )
                continue
            if not text:
                continue
            try:
                found = signed.parse_checkpoints(text, sources[at])
            except VaultError as err:
                out.append(Finding("checkpoint", None, None, str(err).removeprefix("Error: ")))
                continue
            for made in found:
                if made.text in seen:  # the same checkpoint kept in a file and on the branch
                    continue
                seen.add(made.text)
                problem = signed.checkpoint_problem(repo, head, made, signers, count)
                if problem is not None:
                    out.append(Finding(problem[0], made.head, None, problem[1]))  # type: ignore[arg-type]
        return out

    # -- checkpoints -------------------------------------------------------------------

    def _main_count(self, head: pygit2.Oid) -> int:
        """How many commits ``main`` at ``head`` reaches through the parents
        they record (counted once, then from the last count; read from the
        commits' bytes when a shallow or grafts file would make libgit2
        count fewer)."""
        if hiding_files(self.repo):
            count = sum(1 for _ in commits(self.repo, head))
            self._count = (head.raw, count)
            return count
        walker = self.repo.walk(head, pygit2.enums.SortMode.NONE)
        known = 0
        if self._count is not None:
            with_count = pygit2.Oid(raw=self._count[0])
            if with_count == head:
                return self._count[1]
            with contextlib.suppress(KeyError, ValueError, pygit2.GitError):  # gone: count from scratch
                if self.repo.descendant_of(head, with_count):
                    walker.hide(with_count)
                    known = self._count[1]
        count = known + sum(1 for _ in walker)
        self._count = (head.raw, count)
        return count

    def checkpoint(self, *, actor: str) -> signed.Checkpoint:
        """Sign where ``main`` stands now (head and commit count) with
        ``actor``'s key, keep it on the ``vaultmem-checkpoints`` branch, and
        return it (its ``text`` is what an operator keeps elsewhere)."""
        _check_label("actor", actor)
        with self._lock.hold():
            self._commits.recover()
            return self._checkpoint_locked(actor, int(self.clock()))

    def _checkpoint_locked(self, actor: str, now: int) -> signed.Checkpoint:
        key = self.signing_key(actor)
        sign = self._signature(actor, now) if key is not None else None
        if key is None or sign is None:
            raise SigningError(
                f"Error: a checkpoint is signed, and {actor!r} has no signing key; give it with --signing-key or "
                "VAULTMEM_SIGNING_KEY. Nothing was changed."
            )
        head = self._head()
        if head is None:
            raise VaultError("Error: the vault has no versions yet; there is nothing to checkpoint.")
        made = signed.make_checkpoint(str(head), self._main_count(head), now, actor, key)
        signed.write_checkpoint(self.repo, self._commits, self._seal, sign, made, actor, now)
        return made

    def _committed(self, actor: str, commit: bytes, now: int) -> None:
        """After each memory commit, under the writer lock: a checkpoint when
        the policy asks for one every N commits and the actor signs."""
        if self.signing_key(actor) is None:  # most writers: no read of the policy for this
            return
        known = self._signers  # read under this lock to check the signature just made
        if known is None or known[0] != self._signer_files_for:
            self._refresh_signer_files()  # once per signers change: one killed before it rewrote them
        every = self.policy.checkpoint_every
        if every is None:
            return
        count = self._main_count(pygit2.Oid(raw=commit))
        tip = read_ref_or_damaged(self.path, signed.CHECKPOINTS_REF)
        if self._last_checkpoint is None or self._last_checkpoint[0] != tip:  # read once per checkpoint made
            self._last_checkpoint = (tip, signed.last_checkpoint(self.repo, self.signers))
        last = self._last_checkpoint[1]
        if last is not None and count - last.commits < every:
            return
        self._checkpoint_locked(actor, now)
