"""Per-vault policies: the secrets filter, size quotas and expiry.

A vault's policy is stored with it, on its own branch
(``refs/heads/vaultmem-policy``) so it travels with a clone.  Each change is
one commit of ``policy.json``, plain JSON so ``git log -p vaultmem-policy``
shows what changed, authored by the operator who made it and sealed under the
vault's key like every memory commit: a policy edited without the key fails
to load (the vault then refuses writes) and ``verify`` reports it.

An application can override any field for its own tool
(``VaultMemoryTool(vault, policy={"secrets": "refuse"})``); the stored policy
is what applies otherwise.

Fields (all optional; the defaults change nothing about the tool contract):

``secrets``         ``"off"`` | ``"redact"`` | ``"refuse"``: the write filter
``personal_data``   also look for e-mail addresses and phone numbers
``patterns``        custom detectors, ``{kind: regular expression}``
``max_file_bytes``  largest file, in bytes of UTF-8 (default 102,400)
``max_vault_bytes`` total plaintext of all files (default: no limit)
``max_files``       number of files (default: no limit)
``expire_after``    seconds a file may go unread before automatic expiry
                    deletes it (default: never; ``vaultmem expire`` works anyway)
``sync_remote``     the remote every memory tool on this vault keeps in step
                    with (automatic sync, docs/sync.md; default: none)
``sync_every``      seconds between the background pulls of that sync
``require_signatures`` refuse every write not signed by a valid signer
                    (docs/signing.md)
``checkpoint_every`` sign a checkpoint of ``main`` on the checkpoints branch
                    every this many commits made with a signing key
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

import pygit2

from vaultmem.core.crypto import Keyring
from vaultmem.core.policy import Policy, show_value
from vaultmem.core.versions import moment, parse_trailers, split_seal
from vaultmem.errors import IntegrityError
from vaultmem.git import objects
from vaultmem.git.commits import CommitPath, Damaged, Draft, Headers, Sign, ident, read_ref
from vaultmem.repo import small
from vaultmem.repo.history import OversizedObject
from vaultmem.repo.small import file_of

POLICY_REF = "refs/heads/vaultmem-policy"
POLICY_FILE = "policy.json"


@dataclass(frozen=True)
class PolicyVersion:
    """One change of a vault's policy."""

    id: str
    time: datetime
    actor: str
    session: str | None
    changed: tuple[str, ...]
    policy: Policy


_REFUSED = (
    "Writes are refused until an operator sets the policy again with the key (`vaultmem policy set --reset "
    "FIELD=VALUE...`); run `vaultmem verify`."
)
_BROKEN = "Writes are refused until an operator repairs the ref; run `vaultmem verify`."


def _target(repo: pygit2.Repository) -> pygit2.Oid | None:
    try:
        ref = repo.references.get(POLICY_REF)
    except (pygit2.GitError, ValueError) as err:  # the ref's file holds no id (stock git, a bad disk)
        raise IntegrityError(
            f"Error: the vault's policy branch is damaged (its ref holds no commit id). {_BROKEN}"
        ) from err
    if ref is None:
        return None
    target = ref.target
    if not isinstance(target, pygit2.Oid):
        raise IntegrityError(f"Error: the vault's policy branch is not a plain ref. {_BROKEN}")
    return target


def _load(repo: pygit2.Repository, keyring: Keyring, commit_id: pygit2.Oid) -> tuple[Policy, bytes | None]:
    """The policy of one policy commit and its parent id; refuses a commit whose seal fails."""
    try:
        raw = small.read(repo, commit_id)
        body, seal = split_seal(raw)
        problem = "it carries no seal" if seal is None else keyring.check_commit_seal(seal, body)
        if problem is not None:
            raise IntegrityError(
                f"Error: the vault's policy (commit {commit_id}) failed its seal: {problem}. Writes are refused "
                "until an operator sets the policy again with the key; run `vaultmem verify`."
            )
        commit, raw_policy = file_of(repo, commit_id, POLICY_FILE)
        data = json.loads(raw_policy)
        parent = commit.parent_ids[0].raw if commit.parent_ids else None
    except OversizedObject as err:
        raise IntegrityError(f"Error: the vault's policy (commit {commit_id}) is damaged ({err}). {_REFUSED}") from err
    except (KeyError, ValueError, pygit2.GitError) as err:
        raise IntegrityError(f"Error: the vault's policy (commit {commit_id}) is damaged. {_REFUSED}") from err
    return Policy.from_dict(data), parent


def read_policy(repo: pygit2.Repository, keyring: Keyring) -> tuple[Policy, str | None]:
    """The vault's policy and the id of the commit that set it (None: the defaults)."""
    target = _target(repo)
    if target is None:
        return Policy(), None
    return _load(repo, keyring, target)[0], str(target)


def policy_at(repo: pygit2.Repository, keyring: Keyring, commit_id: pygit2.Oid) -> Policy:
    """The policy one commit of the policy branch set (its seal checked)."""
    return _load(repo, keyring, commit_id)[0]


def history(repo: pygit2.Repository, keyring: Keyring, limit: int | None = None) -> list[PolicyVersion]:
    """Every policy change, newest first."""
    out: list[PolicyVersion] = []
    target = _target(repo)
    while target is not None and (limit is None or len(out) < limit):
        try:
            policy, parent = _load(repo, keyring, target)
        except IntegrityError:
            if not out:
                raise  # the policy in force is damaged
            break  # an older, damaged change an operator has since replaced

        commit = repo[target].peel(pygit2.Commit)
        trailers = parse_trailers(commit.message)
        changed = trailers.get("Vaultmem-Policy-Changed", [""])[0]
        out.append(
            PolicyVersion(
                id=str(target),
                time=moment(commit.author.time),
                actor=commit.author.name,
                session=trailers.get("Vaultmem-Session", [None])[0],
                changed=tuple(c.strip() for c in changed.split(",") if c.strip()),
                policy=policy,
            )
        )
        target = pygit2.Oid(raw=parent) if parent is not None else None
    return out


def write_policy(
    commits: CommitPath,
    seal: Headers,
    policy: Policy,
    changed: list[str],
    actor: str,
    session: str | None,
    now: int,
    merged_from: bytes | None = None,
    *,
    sign: Sign | None = None,
) -> str:
    """One commit of ``policy.json`` on the policy branch, sealed by ``seal``,
    through the commit path, synced before returning (with ``merged_from``, a
    merge: that commit is its second parent).  The caller holds the writer lock."""
    try:
        previous = read_ref(commits.gitdir, POLICY_REF)
    except Damaged as err:
        raise IntegrityError("Error: the vault's policy branch is not a plain ref; run `vaultmem verify`.") from err
    blob = objects.packed(objects.BLOB, policy.to_bytes())
    tree = objects.packed(objects.TREE, objects.encode_tree({POLICY_FILE.encode(): (objects.MODE_BLOB, blob.id)}))
    summary = ", ".join(f"{name}={show_value(policy.to_dict()[name])}" for name in changed)
    lines = [
        "Vaultmem-Command: policy",
        f"Vaultmem-Policy-Changed: {', '.join(changed)}",
        f"Vaultmem-Actor: {actor}",
    ]
    if session is not None:
        lines.append(f"Vaultmem-Session: {session}")
    if merged_from is not None:
        lines.append(f"Vaultmem-Merge: {merged_from.hex()}")
    message = f"policy: {summary}"[:200] + "\n\n" + "\n".join(lines) + "\n"
    parents = [previous] if previous is not None else []
    if merged_from is not None:
        parents.append(merged_from)
    draft = Draft(tree.id, parents, ident(actor, actor), now, message)
    commit = commits.commit(POLICY_REF, previous, [blob, tree], draft, seal, sign=sign, checkpoint=True)
    return commit.id.hex()
