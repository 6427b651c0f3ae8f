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
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import pygit2

from vaultmem.core.crypto import Keyring
from vaultmem.core.detectors import detectors
from vaultmem.core.values import is_int
from vaultmem.errors import IntegrityError, VaultError
from vaultmem.git import objects
from vaultmem.git.commits import CommitPath, Damaged, Draft, Headers, ident, read_ref
from vaultmem.repo.history import parse_trailers, split_seal

POLICY_REF = "refs/heads/vaultmem-policy"
POLICY_FILE = "policy.json"
SECRET_MODES = ("off", "redact", "refuse")
DEFAULT_MAX_FILE_BYTES = 102_400

_DURATION = re.compile(r"\s*(\d+)\s*(s|m|h|d|w)?\s*", re.IGNORECASE)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(value: object) -> int:
    """Seconds from ``30d``, ``12h``, ``90m``, ``45s``, ``2w``, a bare number of
    seconds, or a :class:`~datetime.timedelta`."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
        if seconds < 1:
            raise VaultError("Error: a duration must be at least one second.")
        return int(seconds)
    if is_int(value):
        if value < 1:
            raise VaultError("Error: a duration must be at least one second.")
        return value
    match = _DURATION.fullmatch(value) if isinstance(value, str) else None
    if match is None or int(match.group(1)) < 1:
        raise VaultError(
            f"Error: {value!r} is not a duration; write a whole number with s, m, h, d or w, such as 30d or 12h."
        )
    return int(match.group(1)) * _UNITS[(match.group(2) or "s").lower()]


def format_duration(seconds: int) -> str:
    for unit in ("w", "d", "h", "m"):
        if seconds % _UNITS[unit] == 0:
            return f"{seconds // _UNITS[unit]}{unit}"
    return f"{seconds}s"


def _limit(name: str, value: object, optional: bool) -> None:
    if value is None and optional:
        return
    if not is_int(value) or value < 1:
        raise VaultError(f"Error: {name} must be a whole number of at least 1{' or null' if optional else ''}.")


@dataclass(frozen=True)
class Policy:
    """What a vault allows; see the module docstring for each field."""

    secrets: str = "off"
    personal_data: bool = False
    patterns: Mapping[str, str] = dataclasses.field(default_factory=dict)
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    max_vault_bytes: int | None = None
    max_files: int | None = None
    expire_after: int | None = None

    def __post_init__(self) -> None:
        if self.secrets not in SECRET_MODES:
            raise VaultError(f"Error: secrets must be one of {', '.join(SECRET_MODES)}, not {self.secrets!r}.")
        if not isinstance(self.personal_data, bool):
            raise VaultError("Error: personal_data must be true or false.")
        if not isinstance(self.patterns, Mapping):
            raise VaultError("Error: patterns must map a kind name to a regular expression.")
        detectors(patterns=self.patterns)  # refuses a bad kind name or regular expression
        object.__setattr__(self, "patterns", dict(sorted(self.patterns.items())))
        _limit("max_file_bytes", self.max_file_bytes, optional=False)
        _limit("max_vault_bytes", self.max_vault_bytes, optional=True)
        _limit("max_files", self.max_files, optional=True)
        _limit("expire_after", self.expire_after, optional=True)

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_dict(), sort_keys=True))

    def to_dict(self) -> dict[str, Any]:
        return {
            "secrets": self.secrets,
            "personal_data": self.personal_data,
            "patterns": dict(self.patterns),
            "max_file_bytes": self.max_file_bytes,
            "max_vault_bytes": self.max_vault_bytes,
            "max_files": self.max_files,
            "expire_after": self.expire_after,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Policy:
        if not isinstance(data, Mapping):
            raise VaultError("Error: a policy is a JSON object of fields.")
        unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise VaultError(f"Error: unknown policy field(s): {', '.join(unknown)}.")
        return cls(**dict(data))

    def with_changes(self, changes: Mapping[str, Any]) -> Policy:
        """This policy with ``changes`` applied (``expire_after`` also takes ``"30d"``)."""
        merged = {**self.to_dict(), **dict(changes)}
        if isinstance(merged.get("expire_after"), (str, timedelta)):
            merged["expire_after"] = parse_duration(merged["expire_after"])
        return Policy.from_dict(merged)

    def changed_fields(self, other: Policy) -> list[str]:
        mine, theirs = self.to_dict(), other.to_dict()
        return [name for name in mine if mine[name] != theirs[name]]

    def to_bytes(self) -> bytes:
        return (json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n").encode("utf-8")


def show_value(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


@dataclass(frozen=True)
class PolicyVersion:
    """One change of a vault's policy."""

    id: str
    time: datetime
    actor: str
    session: str | None
    changed: tuple[str, ...]
    policy: Policy


def _target(repo: pygit2.Repository) -> pygit2.Oid | None:
    ref = repo.references.get(POLICY_REF)
    if ref is None:
        return None
    target = ref.target
    if not isinstance(target, pygit2.Oid):
        raise IntegrityError("Error: the vault's policy branch is not a plain ref; run `vaultmem verify`.")
    return target


def _load(repo: pygit2.Repository, keyring: Keyring, commit_id: pygit2.Oid) -> tuple[Policy, bytes | None]:
    """The policy of one policy commit and its parent id; refuses a commit whose seal fails."""
    try:
        raw = bytes(repo.odb.read(commit_id)[1])
        body, seal = split_seal(raw)
        problem = "it carries no seal" if seal is None else keyring.check_commit_seal(seal, body)
        if problem is not None:
            raise IntegrityError(
                f"Error: the vault's policy (commit {commit_id}) failed its seal: {problem}. Writes are refused "
                "until an operator sets the policy again with the key; run `vaultmem verify`."
            )
        commit = repo[commit_id].peel(pygit2.Commit)
        data = json.loads(bytes(commit.tree[POLICY_FILE].read_raw()))
        parent = commit.parent_ids[0].raw if commit.parent_ids else None
    except (KeyError, ValueError, pygit2.GitError) as err:
        raise IntegrityError(
            f"Error: the vault's policy (commit {commit_id}) is damaged; run `vaultmem verify`."
        ) from err
    return Policy.from_dict(data), parent


def read_policy(repo: pygit2.Repository, keyring: Keyring) -> tuple[Policy, str | None]:
    """The vault's policy and the id of the commit that set it (None: the defaults)."""
    target = _target(repo)
    if target is None:
        return Policy(), None
    return _load(repo, keyring, target)[0], str(target)


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
                time=datetime.fromtimestamp(commit.author.time, tz=timezone.utc),
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
) -> str:
    """One commit of ``policy.json`` on the policy branch, sealed by ``seal``,
    through the commit path, synced before returning.  The caller holds the writer lock."""
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
    message = f"policy: {summary}"[:200] + "\n\n" + "\n".join(lines) + "\n"
    draft = Draft(tree.id, [previous] if previous is not None else [], ident(actor, actor), now, message)
    commit = commits.commit(POLICY_REF, previous, [blob, tree], draft, seal, checkpoint=True)
    return commit.id.hex()
