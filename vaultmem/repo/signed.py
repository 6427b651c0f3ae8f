"""Signed commits, the signers branch and checkpoints, as stored.

``refs/heads/vaultmem-signers`` holds the vault's allowed signers
(:mod:`vaultmem.core.signers`): each change is one commit of
``signers.json``, ``allowed_signers`` and ``revoked_keys``, sealed like
every vaultmem commit and signed by an operator's key.  Its first commit is
an operator adding their own key, signed by that key.

A checkpoint is a short signed text naming ``main``'s head and how many
commits it reaches, at a time, by a signer (docs/signing.md).  Kept outside
the vault (a file the operator keeps, or the server's
``vaultmem-checkpoints`` branch), it shows when ``main`` was later moved
back behind it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pygit2

from vaultmem.core.crypto import Keyring
from vaultmem.core.lru import LRU
from vaultmem.core.signers import BAD, UNKNOWN, UNSIGNED, Signers, show_time
from vaultmem.core.signing import (
    CHECKPOINT_NAMESPACE,
    GPGSIG,
    ForeignKeyError,
    PublicKey,
    SignatureError,
    SigningKey,
    parse_signature,
    split_signature,
)
from vaultmem.core.versions import parse_trailers, split_seal
from vaultmem.errors import IntegrityError, VaultError
from vaultmem.git import objects
from vaultmem.git.commits import CommitPath, Damaged, Draft, Headers, Sign, ident, read_ref
from vaultmem.repo import small
from vaultmem.repo.history import descends
from vaultmem.repo.small import file_of

SIGNERS_REF = "refs/heads/vaultmem-signers"
CHECKPOINTS_REF = "refs/heads/vaultmem-checkpoints"
SIGNERS_FILE = "signers.json"
CHECKPOINTS_FILE = "checkpoints"
CHECKPOINT_HEADER = "vaultmem checkpoint 1"


# -- reading a signed commit ---------------------------------------------------


@dataclass(frozen=True)
class CommitFacts:
    """What a signature check needs of one commit object."""

    payload: bytes  # the bytes the signature covers
    signature: bytes | None
    actor: str | None  # the Vaultmem-Actor trailer
    author: str | None  # the author's name
    when: int  # the committer time, which git gives ssh-keygen
    authors: int = 1  # how many author lines the commit has (git reads the first, and fsck refuses more)
    committers: int = 1  # how many committer lines (git gives ssh-keygen the first one's time)


def commit_facts(raw: bytes) -> CommitFacts:
    payload, signature = split_signature(raw)
    head, _, message = payload.partition(b"\n\n")
    author: str | None = None
    when = 0
    authors = committers = 0
    for line in head.split(b"\n"):
        if line.startswith(b"author "):
            authors += 1
            if authors == 1:  # the first, as git reads it
                author = line[7:].rsplit(b" <", 1)[0].decode("utf-8", "replace")
        elif line.startswith(b"committer "):
            committers += 1
            if committers == 1:
                try:
                    when = int(line.rsplit(b" ", 2)[1])
                except (IndexError, ValueError):
                    when = 0
    actors = parse_trailers(message.decode("utf-8", "replace")).get("Vaultmem-Actor")
    return CommitFacts(payload, signature, actors[0] if actors else None, author, when, authors, committers)


def judge(facts: CommitFacts, signers: Signers) -> tuple[str, str] | None:
    """Why this commit's signature does not count, as (kind, detail), or None.
    An unsigned commit is the caller's to judge (whether signatures were required)."""
    if facts.signature is None:
        return (UNSIGNED, "the commit carries no signature")
    try:
        sig = parse_signature(facts.signature)
        sig.check(facts.payload)
    except ForeignKeyError as err:
        return (UNKNOWN, _foreign(err))
    except SignatureError as err:
        return (BAD, f"the signature does not verify: {str(err).removeprefix('Error: ')}")
    if facts.committers != 1:  # which time it was signed at is ambiguous: git and vaultmem could judge two
        return (BAD, f"the commit has {facts.committers} committer lines, so when it was signed is ambiguous")
    if facts.authors != 1:
        return ("wrong actor", f"the commit names {facts.authors} authors; one commit has one author")
    actor = facts.actor or facts.author or ""
    if facts.author is not None and facts.actor is not None and facts.author != facts.actor:
        return ("wrong actor", f"the author {facts.author!r} is not the actor {facts.actor!r} of its trailers")
    kind = signers.judge(sig.key, actor, facts.when)
    if kind is None:
        return None
    owners = sorted({s.principal for s in signers.by_key(sig.key)})
    details = {
        "unknown signer": f"signed by key {sig.key.fingerprint}, which is no signer of this vault",
        "wrong actor": (
            f"signed by {', '.join(owners)}'s key {sig.key.fingerprint} but recorded as written by {actor!r}"
        ),
        "revoked": f"signed by {actor}'s key {sig.key.fingerprint}, {_revoked(signers, sig.key, actor, facts.when)}",
        "expired": f"signed by {actor}'s key {sig.key.fingerprint} outside its validity (at {show_time(facts.when)})",
    }
    return (kind, details[kind])


def _foreign(err: ForeignKeyError) -> str:
    """A signature by a key of another type than ed25519, as verify reports it."""
    return (
        f"signed by the {err.key_type} key {err.fingerprint}, which is no signer of this vault "
        "(signers' keys are ed25519)"
    )


def _revoked(signers: Signers, key: PublicKey, actor: str, when: int) -> str:
    """How a key that does not count for a commit made at ``when`` was revoked:
    as compromised (for every time, its revocation often later than the
    commit), or before the commit."""
    if any(s.compromised for s in signers.by_key(key) if s.principal == actor):
        return f"revoked as compromised: no signature it ever made counts (this commit is of {show_time(when)})"
    return f"revoked before {show_time(when)}"


class CommitSignatures:
    """Judges each commit of ``main``, oldest first (verify's walk order):
    an unsigned commit is a finding only where the policy then required
    signatures.  Which policy applied is read from the latest commit time
    seen so far, so a commit dated back cannot step out of the policy."""

    def __init__(self, signers: Signers, required: Sequence[tuple[int, bool]]) -> None:
        self.signers = signers
        self.required = sorted(required)
        self.latest = 0

    def _required_at(self, when: int) -> bool:
        value = False
        for since, required in self.required:
            if since >= when:  # a write in the policy's own second may have come first: not held to it
                break
            value = required
        return value

    def __call__(self, raw: bytes) -> tuple[bool | None, tuple[str, str] | None]:
        facts = commit_facts(raw)
        self.latest = max(self.latest, facts.when)
        if facts.signature is None:
            if self._required_at(self.latest):
                return False, (UNSIGNED, "the commit carries no signature, and the policy required signatures")
            return False, None
        return True, judge(facts, self.signers)


def policy_signatures(
    repo: pygit2.Repository, versions: Sequence[tuple[str, int, bool]], signers: Signers
) -> tuple[list[tuple[int, bool]], list[tuple[str, str, str]]]:
    """The policy branch's changes, oldest first, each as (commit, time,
    whether it requires signatures), judged as commits of ``main`` are: one
    made while the policy before it required signatures must carry a
    signature that counts, and any signed one is judged by the signers.
    Returns when signatures were required, as :class:`CommitSignatures`
    takes it, and (commit, kind, detail) for each change that does not
    count.  A change that does not count does not end the requirement: who
    holds the vault key alone cannot switch it off."""
    required: list[tuple[int, bool]] = []
    problems: list[tuple[str, str, str]] = []
    in_force = False
    for commit, when, requires in versions:
        try:
            facts = commit_facts(small.read(repo, pygit2.Oid(hex=commit)))
        except (KeyError, ValueError, pygit2.GitError):
            continue  # a missing or damaged change: the policy's own read reports it
        problem = None
        if facts.signature is not None and signers:
            problem = judge(facts, signers)
        elif facts.signature is None and in_force:
            problem = (UNSIGNED, "the policy change carries no signature, and the policy before it required signatures")
        if problem is not None:
            problems.append((commit, problem[0], f"policy branch: {problem[1]}"))
            if in_force:
                continue
        in_force = requires
        required.append((when, requires))
    return required, problems


class SignedCommitsWithoutSigners(CommitSignatures):
    """Judges each commit of ``main`` in a vault with no signers (nor a
    policy requiring signatures): an unsigned commit is neither counted nor a
    finding; a signed one is a finding, since no signer list says whose key
    it is (the vault's signers branch was deleted, or a key that never was a
    signer signed it)."""

    def __init__(self) -> None:
        super().__init__(Signers(), [])

    def __call__(self, raw: bytes) -> tuple[bool | None, tuple[str, str] | None]:
        if b"\n" + GPGSIG + b" " not in raw.partition(b"\n\n")[0]:
            return None, None  # not counted: a vault without signers counts no unsigned commits
        facts = commit_facts(raw)
        if facts.signature is None:
            return None, None
        try:
            key = parse_signature(facts.signature).key.fingerprint
        except ForeignKeyError as err:
            return True, (UNKNOWN, _foreign(err))
        except SignatureError as err:
            return True, (BAD, f"the signature does not verify: {str(err).removeprefix('Error: ')}")
        return True, (UNKNOWN, f"signed by key {key}, and the vault has no signers list to check it by")


# -- the signers branch --------------------------------------------------------


def _target(repo: pygit2.Repository, ref: str) -> pygit2.Oid | None:
    try:
        found = repo.references.get(ref)
    except pygit2.GitError as err:  # a damaged packed-refs file
        raise IntegrityError(
            f"Error: the vault's {ref.removeprefix('refs/heads/')} branch cannot be read ({err})."
        ) from err
    if found is None:
        return None
    target = found.target
    if not isinstance(target, pygit2.Oid):
        raise IntegrityError(f"Error: the vault's {ref.removeprefix('refs/heads/')} branch is not a plain ref.")
    return target


def _sealed_raw(repo: pygit2.Repository, keyring: Keyring, oid: pygit2.Oid, what: str) -> bytes:
    try:
        raw = small.read(repo, oid)
    except (KeyError, ValueError, pygit2.GitError) as err:
        raise IntegrityError(f"Error: the vault's {what} (commit {oid}) is missing or damaged.") from err
    body, seal = split_seal(raw)
    problem = "it carries no seal" if seal is None else keyring.check_commit_seal(seal, body)
    if problem is not None:
        raise IntegrityError(f"Error: the vault's {what} (commit {oid}) failed its seal: {problem}.")
    return raw


def _blob_at(repo: pygit2.Repository, oid: pygit2.Oid, name: str) -> bytes:
    try:
        return file_of(repo, oid, name)[1]
    except (KeyError, ValueError, pygit2.GitError) as err:
        raise IntegrityError(f"Error: commit {oid} lacks its {name}.") from err


def read_signers(
    repo: pygit2.Repository, keyring: Keyring, tip: pygit2.Oid | None = None
) -> tuple[Signers, str | None]:
    """The vault's signers and the commit that set them (None: no signers yet),
    as the branch holds them or, given ``tip``, as that commit does (the
    branch as a power cut's journal replays it).  Its seal is checked; its
    signature is :func:`signers_problems`' to check."""
    target = tip if tip is not None else _target(repo, SIGNERS_REF)
    if target is None:
        return Signers(), None
    _sealed_raw(repo, keyring, target, "signers list")
    return _signers_at(repo, target), str(target)


def _signers_at(repo: pygit2.Repository, oid: pygit2.Oid) -> Signers:
    """The list a sealed commit of the signers branch sets.  One that cannot be
    read (someone with the vault key alone wrote it, or it was damaged) is an
    IntegrityError, which verify reports rather than stopping at."""
    data = _blob_at(repo, oid, SIGNERS_FILE)
    try:
        return Signers.from_bytes(data)
    except VaultError as err:
        said = str(err).removeprefix("Error: ").rstrip(".")
        raise IntegrityError(
            f"Error: {said} (commit {str(oid)[:12]} of vaultmem-signers); run `vaultmem verify`, and an operator "
            "moves vaultmem-signers back to its last good commit."
        ) from err


# Commits of a signers branch whose whole history this process has checked
# and found sound, with the list each sets: (git folder, commit) -> Signers.
# A commit is its content, so what held for it holds while it exists; the
# next change is checked from the newest one known here, not from the first.
_CHECKED: LRU[tuple[str, bytes], Signers] = LRU(64)


def signers_problems(
    repo: pygit2.Repository, keyring: Keyring, tip: pygit2.Oid | None = None, *, again: bool = False
) -> list[tuple[str, str, str]]:
    """Each commit of the signers branch (or of the history ending at
    ``tip``, a pull's), oldest first, must be sealed and signed by an
    operator of the list before it (the first: by an operator it adds
    itself).  Returns (commit, kind, detail) for each that is not.  The
    part of the history checked sound before in this process is taken as
    checked, unless ``again`` (verify checks every commit every time)."""
    target = tip if tip is not None else _target(repo, SIGNERS_REF)
    if target is None:
        return []
    chain: list[pygit2.Oid] = []
    oid: pygit2.Oid | None = target
    before = Signers()
    while oid is not None:
        known = None if again else _CHECKED.get((repo.path, oid.raw))
        if known is not None:
            before = known
            break
        chain.append(oid)
        try:
            parents = repo[oid].peel(pygit2.Commit).parent_ids
        except (KeyError, ValueError, pygit2.GitError):
            return [(str(oid), "object", "a commit of the signers branch is missing or damaged")]
        oid = parents[0] if parents else None
    out: list[tuple[str, str, str]] = []
    for oid in reversed(chain):
        try:
            raw = _sealed_raw(repo, keyring, oid, "signers list")
        except VaultError as err:
            out.append((str(oid), "seal", str(err).removeprefix("Error: ")))
            continue
        try:
            after = Signers.from_bytes(_blob_at(repo, oid, SIGNERS_FILE))
        except VaultError as err:  # sealed, but no list that can be read
            out.append((str(oid), "object", f"signers branch: {str(err).removeprefix('Error: ')}"))
            continue
        facts = commit_facts(raw)
        authority = before if before else after  # the first commit: an operator adding their own key
        problem = judge(facts, authority)
        if problem is None and facts.signature is not None:
            key = parse_signature(facts.signature).key
            if not authority.is_operator(key, facts.actor or "", facts.when):
                problem = ("wrong actor", f"{facts.actor!r} is not an operator, and only operators change the signers")
        if problem is not None:
            out.append((str(oid), problem[0], f"signers branch: {problem[1]}"))
        before = after
        if not out:  # sound from the first commit to this one
            _CHECKED.put((repo.path, oid.raw), after)
    return out


def write_signers(
    commits: CommitPath,
    seal: Headers,
    sign: Sign,
    signers: Signers,
    subject: str,
    trailers: Sequence[tuple[str, str]],
    actor: str,
    session: str | None,
    now: int,
) -> str:
    """One sealed, signed commit of the signers list.  The caller holds the writer lock."""
    try:
        previous = read_ref(commits.gitdir, SIGNERS_REF)
    except Damaged as err:
        raise IntegrityError("Error: the vault's signers branch is not a plain ref; run `vaultmem verify`.") from err
    files = signers.files()
    made = [objects.packed(objects.BLOB, data) for _, data in files]
    entries = {name.encode(): (objects.MODE_BLOB, blob.id) for (name, _), blob in zip(files, made, strict=True)}
    tree = objects.packed(objects.TREE, objects.encode_tree(entries))
    lines = [f"{name}: {value}" for name, value in trailers] + [f"Vaultmem-Actor: {actor}"]
    if session is not None:
        lines.append(f"Vaultmem-Session: {session}")
    message = f"{subject}"[:200] + "\n\n" + "\n".join(lines) + "\n"
    draft = Draft(tree.id, [previous] if previous is not None else [], ident(actor, actor), now, message)
    commit = commits.commit(SIGNERS_REF, previous, [*made, tree], draft, seal, sign=sign, checkpoint=True)
    return commit.id.hex()


# -- checkpoints -----------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    """``main`` at ``head`` reached ``commits`` commits at ``time``, signed by ``signer``."""

    head: str
    commits: int
    time: int
    signer: str
    text: str  # the whole signed text, as kept

    @property
    def body(self) -> bytes:
        return self.text.split("-----BEGIN SSH SIGNATURE-----", 1)[0].encode("utf-8")


def make_checkpoint(head: str, count: int, now: int, signer: str, key: SigningKey) -> Checkpoint:
    body = f"{CHECKPOINT_HEADER}\nhead {head}\ncommits {count}\ntime {now}\nsigner {signer}\n"
    text = body + key.sign(body.encode("utf-8"), CHECKPOINT_NAMESPACE).decode("ascii")
    return Checkpoint(head, count, now, signer, text)


def parse_checkpoints(text: str, source: str = "the file") -> list[Checkpoint]:
    """Every checkpoint in a file (they are appended one after another);
    ``source`` names where the text is from in what is raised."""
    try:
        out = [_parse_checkpoint(whole) for whole in _checkpoint_texts(text)]
    except VaultError as err:
        raise VaultError(str(err).replace("the file", source, 1)) from err
    if not out:
        raise VaultError(f"Error: {source} holds no vaultmem checkpoint.")
    return out


def _readable_checkpoints(text: str) -> list[Checkpoint]:
    """The checkpoints of ``text`` that can be read, the rest left out (a merge
    of two clones' lists keeps what it can; verify reports the rest)."""
    out: list[Checkpoint] = []
    for whole in _checkpoint_texts(text):
        try:
            out.append(_parse_checkpoint(whole))
        except VaultError:
            continue
    return out


def _checkpoint_texts(text: str) -> list[str]:
    return [CHECKPOINT_HEADER + "\n" + chunk for chunk in text.split(CHECKPOINT_HEADER + "\n")[1:]]


def _parse_checkpoint(whole: str) -> Checkpoint:
    fields: dict[str, str] = {}
    for line in whole.split("\n")[1:]:
        if line.startswith("-----BEGIN"):
            break
        name, _, value = line.partition(" ")
        fields[name] = value
    try:
        return Checkpoint(fields["head"], int(fields["commits"]), int(fields["time"]), fields["signer"], whole)
    except (KeyError, ValueError) as err:
        raise VaultError("Error: a checkpoint in the file is damaged: it lacks head, commits, time or signer.") from err


def _signature_problem(checkpoint: Checkpoint, signers: Signers) -> tuple[str, str] | None:
    """Why a checkpoint's signature does not count (as verify reports it), or None."""
    text = checkpoint.text
    start = text.find("-----BEGIN SSH SIGNATURE-----")
    if start < 0:
        return ("bad signature", f"the checkpoint of {show_time(checkpoint.time)} is not signed")
    try:
        sig = parse_signature(text[start:].encode("ascii"))
        sig.check(checkpoint.body, CHECKPOINT_NAMESPACE)
    except (SignatureError, UnicodeEncodeError) as err:
        return (
            "bad signature",
            f"the checkpoint of {show_time(checkpoint.time)} does not verify: {str(err).removeprefix('Error: ')}",
        )
    kind = signers.judge(sig.key, checkpoint.signer, checkpoint.time)
    if kind is not None:
        return (
            kind,
            f"the checkpoint of {show_time(checkpoint.time)} is not signed by a valid key of {checkpoint.signer!r}",
        )
    return None


def checkpoint_problem(
    repo: pygit2.Repository, head: pygit2.Oid | None, checkpoint: Checkpoint, signers: Signers, count: int
) -> tuple[str, str] | None:
    """Why ``main`` (at ``head``, reaching ``count`` commits) does not stand
    where the checkpoint proves it stood, or None when it contains it."""
    problem = _signature_problem(checkpoint, signers)
    if problem is not None:
        return problem
    where = (
        f"the checkpoint of {show_time(checkpoint.time)} by {checkpoint.signer} saw main at "
        f"{checkpoint.head[:12]} with {checkpoint.commits} commit{'' if checkpoint.commits == 1 else 's'}"
    )
    if head is None:
        return ("checkpoint", f"{where}; main is gone now")
    try:
        target = pygit2.Oid(hex=checkpoint.head)
        contained = target == head or descends(repo, head, target)
    except (KeyError, ValueError, pygit2.GitError, IntegrityError):
        contained = False
    if not contained:
        return (
            "checkpoint",
            f"{where}; main ({str(head)[:12]}, {count} commit{'' if count == 1 else 's'}) does not contain it: "
            "main was moved back "
            "or replaced since",
        )
    return None


def last_checkpoint(repo: pygit2.Repository, signers: Signers) -> Checkpoint | None:
    """The newest checkpoint on the vault's checkpoints branch that counts:
    one whose signature is by a valid key of its signer (a damaged or forged
    one, such as a claim of a billion commits, would stop the automatic
    checkpoints for good)."""
    counted: list[Checkpoint] = []
    for whole in _checkpoint_texts(checkpoints_kept(repo)):
        try:
            made = _parse_checkpoint(whole)
        except VaultError:
            continue
        if _signature_problem(made, signers) is None:
            counted.append(made)
    return max(counted, key=lambda c: (c.commits, c.time), default=None)


def checkpoints_kept(repo: pygit2.Repository, ref: str = CHECKPOINTS_REF) -> str:
    """The checkpoints on the vault's own ``vaultmem-checkpoints`` branch, or
    on ``ref`` (a remote's copy, as last fetched); '' if none."""
    try:
        target = _target(repo, ref)
        if target is None:
            return ""
        return _blob_at(repo, target, CHECKPOINTS_FILE).decode("utf-8")
    except (IntegrityError, UnicodeDecodeError, pygit2.GitError, ValueError):
        return ""


def _checkpoint_commit(
    commits: CommitPath,
    seal: Headers,
    sign: Sign | None,
    text: bytes,
    parents: list[bytes],
    subject: str,
    actor: str,
    now: int,
) -> str:
    blob = objects.packed(objects.BLOB, text)
    tree = objects.packed(objects.TREE, objects.encode_tree({CHECKPOINTS_FILE.encode(): (objects.MODE_BLOB, blob.id)}))
    message = f"{subject}\n\nVaultmem-Command: checkpoint\nVaultmem-Actor: {actor}\n"
    draft = Draft(tree.id, parents, ident(actor, actor), now, message)
    expected = parents[0] if parents else None
    return commits.commit(CHECKPOINTS_REF, expected, [blob, tree], draft, seal, sign=sign).id.hex()


def _kept_at(repo: pygit2.Repository, oid: pygit2.Oid | bytes | None) -> bytes:
    if oid is None:
        return b""
    target = oid if isinstance(oid, pygit2.Oid) else pygit2.Oid(raw=oid)
    return _blob_at(repo, target, CHECKPOINTS_FILE)


def write_checkpoint(
    repo: pygit2.Repository,
    commits: CommitPath,
    seal: Headers,
    sign: Sign,
    checkpoint: Checkpoint,
    actor: str,
    now: int,
) -> str:
    """Append a checkpoint to the ``vaultmem-checkpoints`` branch (which sync
    pushes).  The caller holds the writer lock."""
    try:
        previous = read_ref(commits.gitdir, CHECKPOINTS_REF)
    except Damaged as err:
        raise IntegrityError("Error: the vault's checkpoints branch is not a plain ref.") from err
    before = _kept_at(repo, previous)
    commits_said = f"{checkpoint.commits} commit{'' if checkpoint.commits == 1 else 's'}"
    subject = f"checkpoint: main at {checkpoint.head[:12]}, {commits_said}"
    text = before + checkpoint.text.encode("utf-8")
    return _checkpoint_commit(commits, seal, sign, text, [previous] if previous else [], subject, actor, now)


def merge_checkpoints(
    repo: pygit2.Repository,
    commits: CommitPath,
    seal: Headers,
    sign: Sign | None,
    local: pygit2.Oid,
    theirs: pygit2.Oid,
    actor: str,
    now: int,
) -> str:
    """Both clones kept checkpoints since they last synced: one merge commit
    keeps all of them (ours, then theirs not already here)."""
    ours = _kept_at(repo, local).decode("utf-8", "replace")
    # a list that cannot be read whole (someone with the vault key alone wrote it) stops no pull:
    # what can be read of it is merged, and verify reports the rest
    mine = set(_readable_checkpoints(ours))
    theirs_text = _kept_at(repo, theirs).decode("utf-8", "replace")
    added = [c.text for c in _readable_checkpoints(theirs_text) if c not in mine]
    text = (ours + "".join(added)).encode("utf-8")
    return _checkpoint_commit(
        commits, seal, sign, text, [local.raw, theirs.raw], "checkpoint: merge two clones' checkpoints", actor, now
    )
