"""A vault's policy applied to Claude's tool calls: the secrets filter, size
quotas and automatic expiry (see :mod:`vaultmem.policy` for the fields).

The tool asks a :class:`Guard` before it stores anything; a refusal is a
:class:`~vaultmem.errors.VaultError` whose message is what Claude sees, says
what to do instead, and is raised before anything is written.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from vaultmem.core import detectors as secrets
from vaultmem.core.paths import MemoryPath
from vaultmem.core.policy import Policy, backtracking_pattern
from vaultmem.errors import LimitError, SigningError, VaultError
from vaultmem.ops import erase, expiry

if TYPE_CHECKING:
    from vaultmem.core.detectors import Detector, Match
    from vaultmem.git.snapshot import Snapshot
    from vaultmem.repo.store import Store

_log = logging.getLogger("vaultmem")


def counted(n: int, unit: str) -> str:
    """``n`` with thousands separators and ``unit``, plural unless ``n`` is 1:
    ``1 byte``, ``1,024 bytes``."""
    return f"{n:,} {unit}{'' if n == 1 else 's'}"


def _housekeeping_failed(what: str, err: Exception) -> None:
    """Automatic expiry or retention failed: the next run tries again.  A
    vault that requires signatures needs a key for its housekeeping actor
    (docs/signing.md), which is said loudly; other failures quietly."""
    level = logging.WARNING if isinstance(err, SigningError) else logging.DEBUG
    _log.log(level, "vaultmem: automatic %s did not run: %s", what, err)


POLICY_ATTEMPTS = 3  # times a write is checked again when the policy changes while it waits
EXPIRY_CHECK_EVERY = 3600  # seconds between automatic expiry runs of one tool
EXPIRY_ACTOR = "vaultmem-expiry"
RETENTION_ACTOR = "vaultmem-retention"


class SecretsError(VaultError):
    """The text or path holds what looks like a secret, and the policy refuses it."""


class PolicyChanged(VaultError):
    """The vault's policy changed between a command reading it and the
    command reaching the writer lock: the command runs again."""


class Guard:
    """The effective policy of one tool: the vault's, with the application's overrides."""

    def __init__(
        self,
        vault: Store,
        override: Policy | Mapping[str, Any] | None = None,
        detectors: Iterable[Detector] = (),
        max_file_bytes: int | None = None,
    ) -> None:
        self.vault = vault
        changes: dict[str, Any] = {}
        if isinstance(override, Mapping):
            changes.update(override)
        elif override is not None and not isinstance(override, Policy):
            raise VaultError("Error: policy= takes a vaultmem.Policy or a dict of fields to override.")
        if max_file_bytes is not None:
            changes["max_file_bytes"] = max_file_bytes
        given = (override if isinstance(override, Policy) else Policy()).with_changes(changes)  # bad fields: now
        refused = backtracking_pattern(given.patterns)  # as set_policy refuses it: before Claude's first write
        if refused is not None:
            raise VaultError(refused)
        self._fixed = override if isinstance(override, Policy) else None
        self._changes = changes
        if not isinstance(detectors, Iterable) or isinstance(detectors, (str, bytes)):
            raise VaultError(
                f"Error: detectors must be a list of detectors (each with a kind and a find(text) method), "
                f"not {type(detectors).__name__}."
            )
        self._extra = tuple(detectors)
        secrets.detectors(extra=self._extra)  # a bad one is refused now, not at Claude's first write
        for detector in self._extra:  # the application's own regex detectors run under the writer lock too
            if isinstance(detector, secrets.RegexDetector):
                refused = backtracking_pattern({detector.kind: detector.pattern})
                if refused is not None:
                    raise VaultError(refused)
        self._compiled: dict[tuple[bool, tuple[tuple[str, str], ...]], tuple[Detector, ...]] = {}
        self._expiry_checked = -math.inf
        self._expiry_lock = threading.Lock()
        self.retention: threading.Thread | None = None  # the policy's retention, running in the background

    def policy(self) -> Policy:
        stored = self.vault.policy  # read even when overridden: a damaged policy stops every write
        base = self._fixed if self._fixed is not None else stored
        return base.with_changes(self._changes) if self._changes else base

    def confirm(self, policy: Policy) -> None:
        """Under the writer lock: raise :class:`PolicyChanged` unless
        ``policy``, which a command checked its text against, is still the
        one in force (an operator's change, once acknowledged, applies to
        every write committed after it)."""
        if self.policy() != policy:
            raise PolicyChanged("Error: the vault's policy changed while the command waited; nothing was written.")

    # -- secrets -----------------------------------------------------------------

    def _detectors(self, policy: Policy) -> tuple[Detector, ...]:

        key = (policy.personal_data, tuple(policy.patterns.items()))
        found = self._compiled.get(key)
        if found is None:
            found = self._compiled[key] = secrets.detectors(
                personal_data=policy.personal_data, patterns=policy.patterns, extra=self._extra
            )
        return found

    def _scan(self, policy: Policy, text: str) -> list[Match]:

        return secrets.scan(text, self._detectors(policy))

    def filter_text(self, policy: Policy, text: str) -> tuple[str, list[Match]]:
        """The text to store and what was redacted from it; raises under ``refuse``."""
        if policy.secrets == "off":
            return text, []
        found = self._scan(policy, text)
        if not found:
            return text, []

        if policy.secrets == "refuse":
            raise SecretsError(
                f"Error: Nothing was written: the text contains {secrets.describe(found)}. This memory is kept "
                "and audited, so it must not hold secrets or personal data. Leave the value out (describe it "
                "instead, such as 'the card on file') and try again."
            )
        return secrets.redact(text, found), found

    def filter_edit(self, policy: Policy, before: str, after: str) -> tuple[str, list[Match]]:
        """The edited file to store, and what was redacted from it: what the
        edit made appear in the file that it did not hold before (a key
        written in two pieces, a card joined by deleting what stood between
        its halves, a label put before a value) is refused or redacted like
        new text; what the file held already is left as it was."""
        if policy.secrets == "off":
            return after, []
        found = self._scan(policy, after)
        if not found:
            return after, []
        held = Counter((m.kind, before[m.start : m.end]) for m in self._scan(policy, before))
        new: list[Match] = []
        for match in found:
            value = (match.kind, after[match.start : match.end])
            if held[value] > 0:
                held[value] -= 1
            else:
                new.append(match)
        if not new:
            return after, []
        if policy.secrets == "refuse":
            raise SecretsError(
                f"Error: Nothing was written: with this edit the file would contain {secrets.describe(new)}. This "
                "memory is kept and audited, so it must not hold secrets or personal data. Leave the value out "
                "(describe it instead, such as 'the card on file') and try again."
            )
        return secrets.redact(after, new), new

    def check_path(self, policy: Policy, path: MemoryPath) -> None:
        """Paths are visible in the audit log without the key: none may hold a
        secret.  The message does not repeat the path, which holds the value."""
        if policy.secrets == "off":
            return
        found = self._scan(policy, path.text)
        if found:
            raise SecretsError(
                f"Error: Nothing was written: the path contains {secrets.describe(found)}, and paths are "
                "visible in the audit log. Choose a name without it."
            )

    @staticmethod
    def redaction_note(found: list[Match]) -> str:
        if not found:
            return ""

        marks = ", ".join(sorted({f"[REDACTED:{m.kind}]" for m in found}))
        return (
            f"\nNote: vaultmem replaced {secrets.describe(found)} with {marks} before storing. "
            "Do not write secrets or personal data to memory."
        )

    # -- quotas --------------------------------------------------------------------

    @staticmethod
    def check_quota(policy: Policy, snap: Snapshot, old_size: int, new_size: int, new_file: bool) -> None:
        """Refuse a change that would take the memory over its file count or size."""
        if new_file and policy.max_files is not None:
            count = snap.count_files()
            if count + 1 > policy.max_files:
                raise LimitError(
                    f"Error: Nothing was written: the memory already holds {counted(count, 'file')}, the most this "
                    f"vault allows ({policy.max_files:,}). Delete files that are no longer needed, or consolidate "
                    "related notes into fewer files, then try again."
                )
        if policy.max_vault_bytes is not None and new_size > old_size:
            total = snap.size(MemoryPath(()))
            after = total - old_size + new_size
            if after > policy.max_vault_bytes:
                raise LimitError(
                    f"Error: Nothing was written: this would bring the memory to {counted(after, 'byte')}, over "
                    f"this vault's limit of {counted(policy.max_vault_bytes, 'byte')} (it holds "
                    f"{total:,} now). Delete or shorten files that are no longer needed, or "
                    "consolidate them, then try again."
                )

    # -- expiry --------------------------------------------------------------------

    def maybe_expire(self, session: str | None) -> None:
        """Run the policy's automatic expiry at most once an hour (by the
        vault's clock), and start its content retention in the background as
        often.  Housekeeping: a failure is left for the next run."""
        now = self.vault.clock()
        with self._expiry_lock:
            if now - self._expiry_checked < EXPIRY_CHECK_EVERY:
                return
            self._expiry_checked = now
        try:
            after = self.policy().expire_after
            if after is not None:
                expiry.expire(self.vault, after, actor=EXPIRY_ACTOR, session=session, now=now)
        except (VaultError, OSError) as err:
            _housekeeping_failed("expiry", err)
        with contextlib.suppress(VaultError, OSError):
            keep_for = self.policy().content_retention
            if keep_for is not None and (self.retention is None or not self.retention.is_alive()):
                # Retention reads the whole history: off the call's path, like the upkeep.
                # Killed with the process, a started erasure is finished by the next writer.
                self.retention = threading.Thread(
                    target=self._retain, args=(keep_for, now, session), name="vaultmem-retention", daemon=True
                )
                self.retention.start()

    def _retain(self, keep_for: int, now: float, session: str | None) -> None:
        try:
            erase.apply_retention(self.vault, keep_for, now=now, actor=RETENTION_ACTOR, session=session)
        except (VaultError, OSError) as err:
            _housekeeping_failed("retention", err)
