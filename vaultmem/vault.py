"""The public vault: the repository (:class:`vaultmem.repo.store.Store`,
open, init, read, mutate, history, verify, keys, policy) with the verbs of
:mod:`vaultmem.ops` as methods.  The engine lives below; each method here is
a thin entry into one ``ops`` module."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import NoReturn, SupportsIndex

from vaultmem.core import paths
from vaultmem.core.paths import MemoryPath
from vaultmem.core.policy import parse_duration
from vaultmem.core.values import check_flag, compile_regex
from vaultmem.core.versions import Version
from vaultmem.errors import VaultError
from vaultmem.ops import erase as erasing
from vaultmem.ops import expiry, transfer
from vaultmem.ops import find as finding
from vaultmem.ops import restore as restoring
from vaultmem.ops.diff import FileChange, changes, unified
from vaultmem.repo.engine import file_named_as_folder
from vaultmem.repo.store import Change, Entry, Store

__all__ = ["Change", "Entry", "Vault"]


def _check_regex(pattern: object, regex: bool, ignore_case: bool) -> None:
    """Refuse, as a VaultError, a regular expression Python cannot read
    (groups nested too deeply for its parser included) before any search."""
    if not regex or not isinstance(pattern, str) or not 0 < len(pattern) <= finding.MAX_PATTERN:
        return  # find itself says what is wrong with those
    try:
        compile_regex(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as err:
        shown = pattern if len(pattern) <= 60 else pattern[:57] + "..."
        raise VaultError(f"Error: {shown!r} is not a regular expression ({err}).") from err


NOT_SENT = (
    "{what} cannot be sent to another process (pickled): it holds the vault's unlocked key, open files "
    "and locks. Send the vault's path instead and, in the other process, {how}."
)


class Vault(Store):
    """An encrypted, versioned memory in a git repository (README.md, "The library")."""

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        """Refuse pickling (multiprocessing's spawn, a process pool) with what
        to do instead, not Python's ``cannot pickle '_thread.lock' object``."""
        raise TypeError(
            NOT_SENT.format(what="This Vault", how="open it with Vault.open(path, key=...) or VAULTMEM_KEY")
        )

    def find(
        self, pattern: str, *, regex: bool = False, ignore_case: bool = False, path: str | None = None
    ) -> list[finding.Match]:
        """Every file version anywhere in the history (below ``path``) whose
        decrypted content holds ``pattern`` (a text, or with ``regex`` a
        regular expression), oldest first: path, the version that wrote it,
        when, by whom, how many matches, and whether it is the file's content
        now.  Never the content itself.  See :mod:`vaultmem.ops.find`."""
        check_flag("regex", regex)
        check_flag("ignore_case", ignore_case)
        _check_regex(pattern, regex, ignore_case)
        return finding.find(self, pattern, regex=regex, ignore_case=ignore_case, path=path)

    def forget(
        self,
        path: str,
        *,
        reason: str | None = None,
        dry_run: bool = False,
        actor: str = "vaultmem",
        session: str | None = None,
    ) -> erasing.ErasureResult:
        """Erase every version ever stored at ``path`` (a file or a folder,
        followed back across renames): their keys are destroyed, for key
        holders too, in one audited ``forget`` commit; a current file leaves
        the memory.  With ``dry_run``, only list them.  See docs/erasure.md."""
        targets = erasing.listing_versions_of(self, path)  # listed again under the writer lock if main moved
        return erasing.erase(self, targets, reason=reason, actor=actor, session=session, dry_run=dry_run, what="forget")

    def redact(
        self,
        version: str | datetime,
        path: str,
        *,
        reason: str | None = None,
        dry_run: bool = False,
        actor: str = "vaultmem",
        session: str | None = None,
    ) -> erasing.ErasureResult:
        """Erase one version of one file: the content ``path`` had at
        ``version``.  The versions before and after it stay readable."""
        target = erasing.version_at(self, version, path)
        return erasing.erase(
            self, [target], reason=reason, actor=actor, session=session, dry_run=dry_run, what="redact"
        )

    def forget_matching(
        self,
        pattern: str | Sequence[finding.Match],
        *,
        reason: str | None = None,
        regex: bool = False,
        ignore_case: bool = False,
        path: str | None = None,
        dry_run: bool = False,
        actor: str = "vaultmem",
        session: str | None = None,
    ) -> erasing.ErasureResult:
        """Erase every file version anywhere in the history whose content
        (or path) matches ``pattern`` (a text, or with ``regex`` a regular
        expression), as :meth:`find` lists them, or exactly the matches a
        :meth:`find` returned; run it with ``dry_run=True`` first to see the
        list.  ``reason`` is required unless ``dry_run``."""
        targets: erasing.Collect | list[erasing.FileVersion]
        check_flag("regex", regex)
        check_flag("ignore_case", ignore_case)
        check_flag("dry_run", dry_run)
        if not isinstance(pattern, (str, Sequence)) or isinstance(pattern, (bytes, bytearray)):
            raise VaultError("Error: forget_matching takes a text, or the list vault.find() returned.")
        if isinstance(pattern, str):  # listed again under the writer lock if main moved
            _check_regex(pattern, regex, ignore_case)
            targets = erasing.listing_matches(self, pattern, regex=regex, ignore_case=ignore_case, path=path)
        else:  # exactly these (judged again under the writer lock: erased meanwhile, current or not)
            targets = erasing.from_matches(self, pattern)
        return erasing.erase(self, targets, reason=reason, actor=actor, session=session, dry_run=dry_run, what="match")

    def apply_retention(
        self,
        keep_for: int | str | timedelta | None = None,
        *,
        now: float | None = None,
        dry_run: bool = False,
        actor: str = "vaultmem-retention",
        session: str | None = None,
    ) -> erasing.ErasureResult:
        """Forget every version written longer ago than the policy's
        ``content_retention`` (or ``keep_for``: ``"365d"``, seconds, a
        timedelta), other than each file's current content, as one audited
        ``forget`` commit.  Tools run it by themselves in the background, at
        most once an hour, when the policy sets ``content_retention``."""
        seconds = parse_duration(keep_for) if keep_for is not None else None
        return erasing.apply_retention(self, seconds, now=now, dry_run=dry_run, actor=actor, session=session)

    def changes(
        self, a: str | datetime | None, b: str | datetime | None = None, path: str | None = None
    ) -> list[FileChange]:
        """Files that differ from version ``a`` to ``b`` (default: now), decrypted.
        ``a=None`` is the empty memory before the first version."""
        target = paths.parse(path, existing=True) if path is not None else MemoryPath(())
        before = self.snapshot(a) if a is not None else self._empty_snapshot()
        after = self.snapshot(b)
        if target.dir_hint:  # `/memories/a.txt/` names a folder: not the file a.txt, in either version
            for snap, at in ((after, b), (before, a)):
                if snap.kind(target) == "file":
                    raise file_named_as_folder(path or "", target, at)
        return changes(before, after, target)

    def diff(self, a: str | datetime | None, b: str | datetime | None = None, path: str | None = None) -> str:
        """A unified diff of the decrypted text from version ``a`` to ``b``
        (``a=None``: from the empty memory)."""
        return unified(self.changes(a, b, path))

    def import_folder(
        self,
        folder: str | os.PathLike[str],
        *,
        replace: bool = False,
        actor: str = "vaultmem",
        session: str | None = None,
        max_file_bytes: int | None = None,
    ) -> transfer.ImportResult:
        """Record the files of an SDK filesystem memory (``folder/memories``) as
        one ``import`` commit; see :func:`vaultmem.ops.transfer.import_folder`."""
        return transfer.import_folder(
            self, folder, replace=replace, actor=actor, session=session, max_file_bytes=max_file_bytes
        )

    def export_folder(self, folder: str | os.PathLike[str], at: str | datetime | None = None) -> transfer.ExportResult:
        """Write the memory (now or at ``at``) as plaintext files to
        ``folder/memories``; see :func:`vaultmem.ops.transfer.export_folder`."""
        return transfer.export_folder(self, folder, at)

    def expire(
        self,
        unread_for: int | str | timedelta,
        *,
        dry_run: bool = False,
        actor: str = "vaultmem",
        session: str | None = None,
        now: float | None = None,
    ) -> expiry.ExpireResult:
        """Delete every file neither read nor written for ``unread_for``
        (``"30d"``, seconds, a timedelta) as one ``expire`` commit; with
        ``dry_run``, only list them.  See :mod:`vaultmem.ops.expiry`."""
        return expiry.expire(self, unread_for, dry_run=dry_run, actor=actor, session=session, now=now)

    def restore(
        self, at: str | datetime, path: str | None = None, *, actor: str = "vaultmem", session: str | None = None
    ) -> Version | None:
        """Make the whole memory (or one path) exactly as it was at ``at``, as a
        new commit; a path that did not exist then is removed.  Returns None when
        nothing would change.  See :mod:`vaultmem.ops.restore`."""
        return restoring.restore(self, at, path, actor=actor, session=session)

    def undo(self, n: int = 1, *, actor: str = "vaultmem", session: str | None = None) -> Version | None:
        """Make the memory as it was ``n`` versions ago, as a new commit (history
        is never rewritten; undoing an undo brings the change back)."""
        return restoring.undo(self, n, actor=actor, session=session)
