"""A vault's allowed signers as a value: who may sign, with which key, when.

The document lives on the ``vaultmem-signers`` branch (:mod:`vaultmem.repo.signers`)
as ``signers.json``, beside the two files git reads: ``allowed_signers``
(``gpg.ssh.allowedSignersFile``) and ``revoked_keys``
(``gpg.ssh.revocationFile``).  Entries are never removed: a rotated key
keeps its window and a revoked one its revocation, so every commit ever
signed can still be judged by the key that was valid when it was made.

Times are whole seconds since the epoch, UTC.  A key is valid at ``t`` when
``valid_after <= t <= valid_before`` (both ends included, as ``ssh-keygen``
checks them), and not after its revocation; a key revoked as compromised is
valid at no time at all.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from vaultmem.core.signing import PublicKey
from vaultmem.core.values import check_flag, is_int
from vaultmem.errors import BadKeyError, VaultError

FORMAT = 1
PRINCIPAL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,99}")
# what verify reports, by kind (docs/signing.md)
UNSIGNED = "unsigned"
UNKNOWN = "unknown signer"
WRONG_ACTOR = "wrong actor"
REVOKED = "revoked"
EXPIRED = "expired"
BAD = "bad signature"
KINDS = (UNSIGNED, UNKNOWN, WRONG_ACTOR, REVOKED, EXPIRED, BAD)


def check_principal(name: object) -> str:
    if not isinstance(name, str) or not PRINCIPAL.fullmatch(name):
        shown = (
            repr(name[:40]) + f" (and {len(name) - 40} more characters)"
            if isinstance(name, str) and len(name) > 40
            else repr(name)
        )
        raise VaultError(
            f"Error: {shown} cannot name a signer: a signer's name is its actor name, 1-100 ASCII letters, "
            "digits, '.', '_', '@', '+' or '-', starting with a letter or digit (git's allowed-signers file lists it)."
        )
    return name


def check_reason(reason: object) -> str:
    """A revocation's reason: one line of plain text, at most 500 characters.
    It becomes a commit trailer and a field of ``signer list``, so nothing in
    it may end a line, move a terminal's cursor or reorder text (categories
    Cc, Cf, Zl, Zp), nor be a byte that is not UTF-8 (a lone surrogate)."""
    if not isinstance(reason, str) or len(reason) > 500:
        raise VaultError("Error: the reason must be one line of at most 500 characters; nothing was changed.")
    for ch in reason:
        if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            raise VaultError(
                f"Error: the reason holds {ch!a}, which is not plain text (a control, format or line "
                "separator character, or a byte that is not UTF-8); give one line of plain text. Nothing was changed."
            )
    return reason


# The times an allowed-signers file can hold: ssh-keygen reads 14 digits and
# refuses a time before 1970-01-01T00:00:01Z (and then every line after it).
FIRST_TIME = 1  # 1970-01-01T00:00:01Z
LAST_TIME = 253402300799  # 9999-12-31T23:59:59Z


def ssh_time(when: int) -> str:
    """A time as ``ssh-keygen`` reads it in an allowed-signers file (UTC)."""
    return _utc(when).strftime("%Y%m%d%H%M%SZ")


def show_time(when: int) -> str:
    """A time as vaultmem's output gives every time: UTC, ``2026-11-04T12:00:00Z``."""
    return _utc(when).strftime("%Y-%m-%dT%H:%M:%SZ")


def _utc(when: int) -> datetime:
    return datetime.fromtimestamp(min(max(when, FIRST_TIME), LAST_TIME), tz=timezone.utc)


@dataclass(frozen=True)
class Signer:
    """One key of one principal, with the window it signs in."""

    principal: str
    key: PublicKey
    operator: bool
    valid_after: int
    valid_before: int | None = None
    revoked: int | None = None  # when it was revoked
    compromised: bool = False  # revoked for every time, before the revocation too
    added_by: str = ""
    reason: str = ""

    @property
    def until(self) -> int | None:
        """The last second this key may sign at (None: no end)."""
        ends = [t for t in (self.valid_before, self.revoked) if t is not None]
        return min(ends) if ends else None

    def problem_at(self, when: int) -> str | None:
        """Why a signature made at ``when`` by this key does not count, or None."""
        if self.compromised:
            return REVOKED
        if self.revoked is not None and when > self.revoked:
            return REVOKED
        if when < self.valid_after or (self.valid_before is not None and when > self.valid_before):
            return EXPIRED
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "principal": self.principal,
            "key": self.key.line,
            "fingerprint": self.key.fingerprint,
            "operator": self.operator,
            "valid_after": self.valid_after,
            "valid_before": self.valid_before,
            "revoked": self.revoked,
            "compromised": self.compromised,
            "added_by": self.added_by,
            "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Signer:
        try:
            signer = cls(
                principal=check_principal(data["principal"]),
                key=PublicKey.from_line(str(data["key"])),
                operator=bool(data["operator"]),
                valid_after=int(data["valid_after"]),
                valid_before=None if data.get("valid_before") is None else int(data["valid_before"]),
                revoked=None if data.get("revoked") is None else int(data["revoked"]),
                compromised=bool(data.get("compromised", False)),
                added_by=str(data.get("added_by", "")),
                reason=str(data.get("reason", "")),
            )
        except (KeyError, TypeError, ValueError, OverflowError, BadKeyError) as err:
            raise VaultError(f"Error: the vault's signers list holds an entry it cannot read ({err}).") from err
        return signer

    def allowed_line(self) -> str | None:
        """This key's line in git's allowed-signers file (None: never valid)."""
        until = self.until
        if self.compromised or (until is not None and until < self.valid_after):
            return None
        options = ['namespaces="git"', f'valid-after="{ssh_time(self.valid_after)}"']
        if until is not None:
            # ssh-keygen refuses a window of one second (valid-before equal to
            # valid-after): git then accepts one second more than vaultmem does
            options.append(f'valid-before="{ssh_time(max(until, self.valid_after + 1))}"')
        return f"{self.principal} {','.join(options)} {self.key.line}"


@dataclass(frozen=True)
class Signers:
    """Every signer a vault ever had, oldest first."""

    entries: tuple[Signer, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.entries)

    # -- reading ---------------------------------------------------------------

    def by_key(self, key: PublicKey) -> list[Signer]:
        return [s for s in self.entries if s.key == key]

    def current(self, principal: str, now: int) -> list[Signer]:
        """The keys ``principal`` may sign with at ``now``."""
        return [s for s in self.entries if s.principal == principal and s.problem_at(now) is None]

    def judge(self, key: PublicKey, principal: str, when: int) -> str | None:
        """Why a signature by ``key`` on a commit of ``principal`` made at
        ``when`` does not count (one of KINDS), or None when it does."""
        mine = self.by_key(key)
        if not mine:
            return UNKNOWN
        theirs = [s for s in mine if s.principal == principal]
        if not theirs:
            return WRONG_ACTOR
        problems = [s.problem_at(when) for s in theirs]
        if None in problems:
            return None
        return REVOKED if REVOKED in problems else EXPIRED

    def is_operator(self, key: PublicKey, principal: str, when: int) -> bool:
        return any(s.operator and s.principal == principal and s.problem_at(when) is None for s in self.by_key(key))

    # -- changing (each returns a new value) -------------------------------------

    def add(
        self,
        principal: str,
        key: PublicKey,
        *,
        now: int,
        by: str,
        operator: bool = False,
        valid_after: int | None = None,
        valid_before: int | None = None,
    ) -> Signers:
        check_principal(principal)
        check_flag("operator", operator)
        for name, value in (("valid-after", valid_after), ("valid-before", valid_before)):
            if value is not None and not is_int(value):
                raise VaultError(
                    f"Error: {name} must be a time in seconds since the epoch (an integer), not {value!r:.40}; "
                    "nothing was changed."
                )
            if value is not None and value > LAST_TIME:
                raise VaultError(f"Error: {name} must be before the year 10000; nothing was changed.")
        # a key valid since before 1970 is valid since 1970: no commit is older, and ssh-keygen reads no earlier time
        start = now if valid_after is None else max(valid_after, FIRST_TIME)
        if valid_before is not None and valid_before <= start:
            raise VaultError("Error: valid-before must be later than valid-after; nothing was changed.")
        for other in self.by_key(key):
            if other.principal != principal:
                raise VaultError(
                    f"Error: key {key.fingerprint} already belongs to {other.principal!r}; one key signs for one "
                    "principal. Nothing was changed."
                )
            if other.problem_at(now) is None or other.revoked is not None:
                raise VaultError(
                    f"Error: key {key.fingerprint} is already a key of {principal!r}"
                    f"{' and was revoked' if other.revoked is not None else ''}; nothing was changed."
                )
        entry = Signer(principal, key, operator, start, valid_before, added_by=by)
        return Signers((*self.entries, entry))

    def rotate(self, principal: str, key: PublicKey, *, now: int, by: str) -> Signers:
        """``key`` becomes ``principal``'s key from ``now``; its keys valid
        now stop at ``now`` (commits they signed before stay valid)."""
        old = self.current(principal, now)
        if not old:
            raise VaultError(f"Error: {principal!r} has no valid key to rotate; add one instead. Nothing was changed.")
        operator = any(s.operator for s in old)
        ended = tuple(replace(s, valid_before=now) if s in old else s for s in self.entries)
        return Signers(ended).add(principal, key, now=now, by=by, operator=operator)

    def revoke(
        self,
        principal: str,
        *,
        now: int,
        by: str,
        key: PublicKey | None = None,
        compromised: bool = False,
        reason: str = "",
    ) -> Signers:
        """Revoke ``principal``'s keys (or one of them) from ``now``; with
        ``compromised``, for every time, so nothing they ever signed counts.
        A key revoked before (or rotated out) can still be revoked as
        compromised when it leaks later; it keeps the time it stopped."""
        if not any(s.principal == principal for s in self.entries):
            raise VaultError(
                f"Error: {principal!r} is no signer of this vault (`vaultmem signer list` shows them); "
                "nothing was changed."
            )
        mine = [s for s in self.entries if s.principal == principal and (key is None or s.key == key)]
        if not mine and key is not None:
            owners = sorted({s.principal for s in self.by_key(key)})
            raise VaultError(
                f"Error: key {key.fingerprint} is not a key of {principal!r}"
                f"{f' but of {owners[0]!r}' if owners else ''}; nothing was changed."
            )
        if key is not None and all(s.compromised or (s.revoked is not None and not compromised) for s in mine):
            raise VaultError(
                f"Error: key {key.fingerprint} of {principal!r} is already revoked"
                f"{' as compromised' if any(s.compromised for s in mine) else ''}; nothing was changed."
            )
        if compromised:
            targets = [s for s in mine if not s.compromised]
            if not targets:
                raise VaultError(
                    f"Error: {principal!r} has no key left to revoke as compromised (every one already is); "
                    "nothing was changed."
                )
        else:
            targets = [s for s in mine if s.revoked is None]
            if not targets:
                raise VaultError(f"Error: {principal!r} has no unrevoked key to revoke; nothing was changed.")
        changed = tuple(
            replace(
                s,
                revoked=now if s.revoked is None else s.revoked,
                compromised=compromised,
                reason=reason or s.reason if compromised else reason,
            )
            if s in targets
            else s
            for s in self.entries
        )
        if self.operators_left(now) and not Signers(changed).operators_left(now):
            raise VaultError(
                f"Error: {principal!r} holds the last operator key of this vault: revoking it would leave no one "
                "able to add, rotate or revoke signers, for good. Nothing was changed. Add another operator first "
                "(`vaultmem signer add NAME KEY.pub --operator`) and revoke it then; for a key that leaked, rotate "
                f"it first (`vaultmem signer rotate {principal} NEW.pub`), then revoke the old one with "
                "`--key OLD.pub --compromised`."
            )
        return Signers(changed)

    def operators_left(self, now: int) -> list[Signer]:
        """The operator keys that can still change the signers at ``now`` or
        later: neither revoked nor past their validity."""
        return [
            s
            for s in self.entries
            if s.operator
            and s.revoked is None
            and not s.compromised
            and (s.valid_before is None or s.valid_before >= now)
        ]

    # -- files -----------------------------------------------------------------

    def to_bytes(self) -> bytes:
        doc = {"format": FORMAT, "signers": [s.to_dict() for s in self.entries]}
        return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> Signers:
        try:
            doc = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as err:
            raise VaultError("Error: the vault's signers list is not readable JSON.") from err
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("signers"), list):
            raise VaultError("Error: the vault's signers list has a format this vaultmem does not read.")
        return cls(tuple(Signer.from_dict(entry) for entry in doc["signers"]))

    def allowed_signers(self) -> bytes:
        """git's ``gpg.ssh.allowedSignersFile``: one line per key that ever signs."""
        lines = ["# vaultmem allowed signers: written by `vaultmem git-setup` from the vaultmem-signers branch"]
        lines += [line for s in self.entries if (line := s.allowed_line()) is not None]
        return ("\n".join(lines) + "\n").encode("utf-8")

    def revoked_keys(self) -> bytes:
        """git's ``gpg.ssh.revocationFile``: the keys revoked as compromised."""
        lines = [s.key.line for s in self.entries if s.compromised]
        return ("\n".join(lines) + "\n").encode("utf-8") if lines else b""

    def files(self) -> Sequence[tuple[str, bytes]]:
        return (
            ("allowed_signers", self.allowed_signers()),
            ("revoked_keys", self.revoked_keys()),
            ("signers.json", self.to_bytes()),
        )
