"""Moving memory between a vault and a plain folder.

The folder layout is the one ``BetaLocalFilesystemMemoryTool(base_path=F)``
uses: the files Claude sees as ``/memories/...`` live under ``F/memories/``,
so a team leaving the SDK's filesystem backend imports ``./memory`` and a vault
exported to ``F`` can be read by that tool again.  Both directions take ``F``
or ``F/memories``: a folder named ``memories`` is the memory root itself.

Both directions apply the memory path rules to every name (they are one more
way for a path to enter or leave the store):

* :func:`import_folder` reads the whole folder first, refuses it as a whole if
  any name or file breaks a rule (a symlink, a special file, an entry it
  cannot read, a name that is not a valid memory path, content that is not
  UTF-8 text or is over the file size limit), always as a ``VaultError``
  naming the entry, and then records it as one ``import`` commit.
* :func:`export_folder` writes the memory of one version into a fresh folder
  that appears under ``F/memories`` only once it is complete; every file is
  created below the target by name, relative to a directory descriptor, never
  following a symlink, so nothing is ever written outside it.  A failed export
  leaves nothing behind; what an export killed before it could clean up left
  (its private staging folder) is removed by the next export to that folder.
  Exported files are plaintext: they are created mode 0600 in folders of mode
  0700.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
import tempfile
import time
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from vaultmem.core import paths
from vaultmem.core.paths import MemoryPath
from vaultmem.core.policy import DEFAULT_MAX_FILE_BYTES
from vaultmem.core.values import check_flag, file_name
from vaultmem.errors import (
    AlreadyExistsError,
    ConflictError,
    ErasedError,
    IntegrityError,
    InvalidPathError,
    LimitError,
    StorageError,
    VaultError,
)
from vaultmem.git import durable, objects
from vaultmem.ops.guard import POLICY_ATTEMPTS, Guard, PolicyChanged, counted
from vaultmem.repo.store import Change, Store

if TYPE_CHECKING:
    from vaultmem.core.policy import Policy
    from vaultmem.core.versions import Version
    from vaultmem.git.snapshot import Snapshot

MEMORIES = "memories"
FILES_TRAILER = "Vaultmem-Files"

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_STAGING_PREFIX = ".vaultmem-export-"
_ABANDONED_AFTER = 60  # seconds a staging folder is left alone, even unlocked
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True)
class ImportResult:
    """What :func:`import_folder` did: the new version (None if the folder
    held no files and nothing changed), the files and bytes it recorded, the
    empty folders it left out (git records files, not empty folders), and,
    under a ``redact`` policy, what was redacted from which file."""

    version: Version | None
    files: int
    bytes: int
    empty_folders: tuple[str, ...]
    redacted: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_folder` wrote: the version exported (None for a vault
    with no versions yet), where, and how many files and bytes."""

    version: str | None
    folder: Path
    files: int
    bytes: int


# -- import ----------------------------------------------------------------------


def _shown(parts: tuple[str, ...]) -> str:
    """A name from the folder, quoted so control and bidi characters are visible."""
    return repr("/".join(parts))


def _refuse(parts: tuple[str, ...], why: str) -> VaultError:
    return VaultError(
        f"Error: cannot import {_shown(parts) if parts else 'the memories folder'}: {why}. Nothing was imported."
    )


_SYMLINK = "it is a symbolic link (only regular files and folders are imported)"


def _unreadable(err: OSError) -> str:
    """Why an entry of the folder could not be read, in a few words."""
    if err.errno == errno.ELOOP:  # swapped for a symlink after it was listed: O_NOFOLLOW refuses it
        return _SYMLINK
    if err.errno in (errno.ENOENT, errno.ENOTDIR):
        return "it was removed or replaced while the folder was read"
    return f"it cannot be read ({(err.strerror or str(err)).lower()})"


def _check_depth(parts: tuple[str, ...]) -> None:
    """Refuse a folder whose path is already longer than any memory path:
    every file below it would be refused, and a folder nested thousands
    deep is never walked (a RecursionError, or every descriptor in use)."""
    text = unicodedata.normalize("NFC", "/memories/" + "/".join(parts))
    if len(text.encode("utf-8")) > paths.MAX_PATH_BYTES:
        raise _refuse(parts, f"it is not a valid memory path (the path is longer than {paths.MAX_PATH_BYTES:,} bytes)")


def memory_root(folder: str | os.PathLike[str]) -> Path:
    """The folder whose files are ``/memories/...``: ``folder/memories`` for an
    SDK base path such as ``./memory``, or ``folder`` itself when it is named
    ``memories`` (``./memory/memories``)."""
    base = Path(folder)
    root = base if base.name == MEMORIES else base / MEMORIES
    if not root.is_dir() or root.is_symlink():
        missing = not base.exists() and not base.is_symlink()  # a mistyped folder: named as typed
        wrong = f"{str(base)!r} does not exist" if missing else f"{str(root)!r} is not a folder"
        raise VaultError(
            f"Error: {wrong}. Give the folder the SDK's BetaLocalFilesystemMemoryTool "
            f"used as base_path (default ./memory), or its {MEMORIES}/ folder."
        )
    return root


def read_folder(
    folder: str | os.PathLike[str], max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
) -> tuple[list[tuple[MemoryPath, bytes]], list[str]]:
    """Every file under ``folder/memories`` as ``(memory path, content)``, in
    name order, and the empty folders; raises VaultError naming the first
    entry that cannot be imported.  Reads through directory descriptors with
    ``O_NOFOLLOW``, so a symlink swapped in while reading is refused too."""
    root = memory_root(folder)
    files: list[tuple[MemoryPath, bytes]] = []
    empty: list[str] = []
    seen: dict[MemoryPath, tuple[str, ...]] = {}
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError as err:
        raise VaultError(f"Error: cannot import from {str(root)!r}: {_unreadable(err)}. Nothing was imported.") from err
    try:
        for parts, data in _walk(fd, (), max_file_bytes, empty):
            try:
                path = paths.parse("/memories/" + "/".join(parts))
            except InvalidPathError as err:
                raise _refuse(parts, f"it is not a valid memory path ({err.rule})") from err
            if path in seen:
                raise _refuse(parts, f"it names the same memory path as {_shown(seen[path])} (paths are compared NFC)")
            seen[path] = parts
            files.append((path, data))
    finally:
        os.close(fd)
    return files, empty


def _walk(
    dir_fd: int, parts: tuple[str, ...], max_file_bytes: int, empty: list[str]
) -> Iterator[tuple[tuple[str, ...], bytes]]:
    try:
        with os.scandir(dir_fd) as listing:
            names = sorted(entry.name for entry in listing)
    except OSError as err:
        raise _refuse(parts, _unreadable(err)) from err
    if not names and parts:
        empty.append("/memories/" + "/".join(parts))
    for name in names:
        here = (*parts, name)
        try:
            name.encode("utf-8")
        except UnicodeEncodeError as err:
            raise _refuse(here, "its name is not valid UTF-8") from err
        try:
            info = os.lstat(name, dir_fd=dir_fd)
        except OSError as err:
            raise _refuse(here, _unreadable(err)) from err
        if stat.S_ISLNK(info.st_mode):
            raise _refuse(here, _SYMLINK)
        if stat.S_ISDIR(info.st_mode):
            _check_depth(here)
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError as err:
                raise _refuse(here, _unreadable(err)) from err
            try:
                yield from _walk(child, here, max_file_bytes, empty)
            finally:
                os.close(child)
        elif stat.S_ISREG(info.st_mode):
            yield here, _read_file(dir_fd, name, here, max_file_bytes)
        else:
            raise _refuse(here, "it is not a regular file or folder")


def _read_file(dir_fd: int, name: str, here: tuple[str, ...], max_file_bytes: int) -> bytes:
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError as err:
        raise _refuse(here, _unreadable(err)) from err
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refuse(here, "it is not a regular file")
        chunks = []
        size = 0
        while chunk := os.read(fd, 1 << 16):
            size += len(chunk)
            if size > max_file_bytes:
                raise LimitError(
                    f"Error: cannot import {_shown(here)}: it is larger than the file size limit of "
                    f"{counted(max_file_bytes, 'byte')}. Split or shorten it first. Nothing was imported."
                )
            chunks.append(chunk)
    except OSError as err:
        raise _refuse(here, _unreadable(err)) from err
    finally:
        os.close(fd)
    data = b"".join(chunks)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _refuse(here, f"it is not UTF-8 text (byte {err.start})") from err
    return data


def _in_the_way(snap: Snapshot, path: MemoryPath) -> MemoryPath | None:
    """What an import to ``path`` would overwrite: the path itself, or a file above it."""
    return path if snap.kind(path) is not None else snap.file_above(path)


def import_folder(
    vault: Store,
    folder: str | os.PathLike[str],
    *,
    replace: bool = False,
    actor: str = "vaultmem",
    session: str | None = None,
    max_file_bytes: int | None = None,
) -> ImportResult:
    """Record every file under ``folder/memories`` as one ``import`` commit.

    By default the files are added to the memory and an import that would
    overwrite anything (a file at the same path, or a file where a folder
    must go) is refused whole.  With ``replace``, the memory becomes exactly
    the folder (files not in it are removed); the old state stays in history.
    The vault's policy applies as to Claude's writes: its per-file limit
    (unless ``max_file_bytes`` is given), its secrets filter (a path or file
    holding a secret is refused, or redacted under ``redact``) and its quotas.
    """

    folder = file_name(folder, "folder")
    check_flag("replace", replace)
    guard = Guard(vault, max_file_bytes=max_file_bytes)
    for attempt in range(POLICY_ATTEMPTS):
        try:
            return _import_once(vault, guard, folder, replace=replace, actor=actor, session=session)
        except PolicyChanged:  # checked against a policy no longer in force: again, under the new one
            if attempt + 1 == POLICY_ATTEMPTS:
                raise VaultError(
                    "Error: the vault's policy kept changing while the import waited; nothing was imported. Try again."
                ) from None
    raise AssertionError("unreachable")


def _import_once(
    vault: Store, guard: Guard, folder: str | os.PathLike[str], *, replace: bool, actor: str, session: str | None
) -> ImportResult:
    """One attempt at an import, checked against the policy read now; raises
    :class:`PolicyChanged` (nothing written) when another policy is in force
    by the time it holds the writer lock."""
    policy = guard.policy()
    files, empty = read_folder(folder, policy.max_file_bytes)
    if not files and not replace:
        return ImportResult(None, 0, 0, tuple(empty))
    redacted: dict[str, tuple[str, ...]] = {}
    cleaned: list[tuple[MemoryPath, bytes]] = []
    for path, data in files:
        try:
            guard.check_path(policy, path)
            text, found = guard.filter_text(policy, data.decode("utf-8"))
        except VaultError as err:
            raise VaultError(f"Error: cannot import {path.text!r}: {_reason(err)} Nothing was imported.") from err
        if found:
            redacted[path.text] = tuple(sorted({m.kind for m in found}))
            data = text.encode("utf-8")
            if len(data) > policy.max_file_bytes:
                raise LimitError(
                    f"Error: cannot import {path.text!r}: redacted, it is larger than the file size limit of "
                    f"{counted(policy.max_file_bytes, 'byte')}. Split or shorten it first. Nothing was imported."
                )
        cleaned.append((path, data))
    files = cleaned
    root = MemoryPath(())

    def build(snap: Snapshot) -> Change:
        guard.confirm(policy)  # under the writer lock: an operator's acknowledged change applies
        change = Change("import", (root,), trailers=[(FILES_TRAILER, str(len(files)))])
        if replace:
            change.restores.append((root, None))
        else:
            clashes = sorted({str(p) for p in (_in_the_way(snap, path) for path, _ in files) if p is not None})
            if clashes:
                shown = ", ".join(clashes[:5]) + (" ..." if len(clashes) > 5 else "")
                # the next step names replace=True (--replace on the command line)
                raise AlreadyExistsError(
                    f"Error: cannot import: {len(clashes)} "
                    f"{'path already exists' if len(clashes) == 1 else 'paths already exist'} in the vault ({shown}).",
                    step="import-replace",
                )
        _check_quotas(policy, snap, files, replace)
        for path, data in files:
            entry = snap.entry(path)
            if replace and entry is not None and entry[0] != objects.MODE_TREE and snap.read_bytes(path) == data:
                change.restores.append((path, entry))  # unchanged: keep its blob, so an identical import is no change
            else:
                change.write(path, data)
        return change

    version = vault.mutate(build, actor=actor, session=session, skip_if_unchanged=replace)
    return ImportResult(version, len(files), sum(len(d) for _, d in files), tuple(empty), redacted)


def _reason(err: VaultError) -> str:
    text = str(err)
    return text[len("Error: ") :] if text.startswith("Error: ") else text


def _check_quotas(policy: Policy, snap: Snapshot, files: list[tuple[MemoryPath, bytes]], replace: bool) -> None:
    count = len(files) + (0 if replace else snap.count_files())
    size = sum(len(d) for _, d in files) + (0 if replace else snap.size(MemoryPath(())))
    if policy.max_files is not None and count > policy.max_files:
        raise LimitError(
            f"Error: cannot import: the memory would hold {count:,} files, over this vault's limit of "
            f"{policy.max_files:,}. Raise the limit (vaultmem policy set max_files=N) or import fewer files. "
            "Nothing was imported."
        )
    if policy.max_vault_bytes is not None and size > policy.max_vault_bytes:
        raise LimitError(
            f"Error: cannot import: the memory would hold {size:,} bytes, over this vault's limit of "
            f"{policy.max_vault_bytes:,}. Raise the limit (vaultmem policy set max_vault_bytes=N) or import less. "
            "Nothing was imported."
        )


# -- export ----------------------------------------------------------------------


def export_folder(vault: Store, folder: str | os.PathLike[str], at: str | datetime | None = None) -> ExportResult:
    """Write the memory (now, or at version ``at``) to ``folder/memories`` (to
    ``folder`` itself if it is named ``memories``).

    ``folder`` is created if missing (its parent must exist); ``folder/memories``
    must not exist yet, and ``folder`` must not be inside the vault.  The files
    are written to a private temporary folder beside it, flushed to disk, and
    renamed into place, so ``folder/memories`` is either complete or absent.
    """
    given = Path(file_name(folder, "folder"))
    snap = vault.snapshot(at)
    destination = given if given.name == MEMORIES else given / MEMORIES
    base = destination.parent
    vault_dir = vault.path.resolve()
    try:
        target = destination.resolve()
    except (RuntimeError, OSError) as err:  # a symlink loop on the way (Python 3.11 raises RuntimeError)
        loop = not isinstance(err, OSError) or err.errno == errno.ELOOP
        why = _why(err) if isinstance(err, OSError) and not loop else "a symbolic link on the way points back to itself"
        raise ConflictError(f"Error: cannot export to {str(destination)!r}: {why}.") from err
    if target == vault_dir or vault_dir in target.parents:
        raise ConflictError(
            "Error: cannot export into the vault's own folder: exported files are plaintext. Choose another folder."
        )
    if os.path.lexists(destination):
        raise AlreadyExistsError(
            f"Error: {str(destination)!r} already exists; an export never overwrites. "
            "Choose a new folder or remove it first."
        )
    if os.path.lexists(base) and not base.is_dir():
        raise ConflictError(f"Error: cannot export to {str(base)!r}: it is not a folder.")
    created = False
    if not os.path.lexists(base):
        try:
            base.mkdir(mode=0o700)
        except FileNotFoundError as err:
            raise VaultError(f"Error: cannot export to {str(base)!r}: its parent folder does not exist.") from err
        except OSError as err:
            raise StorageError(f"Error: cannot create {str(base)!r}: {_why(err)}; nothing was written.") from err
        created = True
    done = False
    try:
        _remove_abandoned(base)
        try:  # the staging folder's own name means nothing to the user: the folder asked for is named
            staging = Path(tempfile.mkdtemp(prefix=_STAGING_PREFIX, dir=base))
        except OSError as err:
            raise StorageError(
                f"Error: cannot export to {str(destination)!r}: {_why(err)}; nothing was written."
            ) from err
        try:
            holder = os.open(staging, _DIR_FLAGS)
        except OSError as err:
            shutil.rmtree(staging, ignore_errors=True)
            raise StorageError(
                f"Error: cannot export to {str(destination)!r}: {_why(err)}; nothing was written."
            ) from err
        try:
            fcntl.flock(holder, fcntl.LOCK_EX)  # held until this export ends: the folder is in use
            try:
                count, size = _write_tree(snap, staging)
            except ErasedError as err:  # the files written so far are removed below
                raise ErasedError(
                    f"Error: cannot export: {err.fact.removeprefix('Error: ').rstrip('.')}. Nothing was written; "
                    "export a version from after the erasure.",
                    err.commit,
                ) from err
            durable.sync_filesystem(staging)
            if os.path.lexists(destination):
                raise AlreadyExistsError(
                    f"Error: {str(destination)!r} appeared during the export; nothing was written."
                )
            os.rename(staging, destination)
            done = True
            durable.sync_dir(base)
        except OSError as err:
            if done:
                raise
            raise StorageError(
                f"Error: cannot export to {str(destination)!r}: {_why(err)}; nothing was written."
            ) from err
        finally:
            if not done:
                shutil.rmtree(staging, ignore_errors=True)
            os.close(holder)
    finally:
        if not done and created:
            with contextlib.suppress(OSError):
                base.rmdir()
    return ExportResult(snap.id, destination, count, size)


def _remove_abandoned(base: Path) -> None:
    """Remove the staging folders of exports that were killed (SIGKILL, a
    power cut) before they could clean up: plaintext nobody will ever use.  A
    running export holds a lock on its staging folder, so its folder stays."""
    try:
        names = [name for name in os.listdir(base) if name.startswith(_STAGING_PREFIX)]
    except OSError:
        return
    for name in names:
        path = base / name
        try:
            fd = os.open(path, _DIR_FLAGS)
        except OSError:
            continue  # gone already, or not a folder vaultmem made
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # one just made may not be locked yet: leave those of the last minute
            fresh = os.fstat(fd).st_mtime > time.time() - _ABANDONED_AFTER
        except OSError:
            fresh = True  # an export still running
        if fresh:
            os.close(fd)
            continue
        try:
            shutil.rmtree(path, ignore_errors=True)
        finally:
            os.close(fd)


def _why(err: OSError) -> str:
    if err.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return "the disk is full (no space left for the files)"
    if err.errno in (errno.EACCES, errno.EPERM):
        return "its folder is not writable (permission denied)"
    if err.errno == errno.EROFS:
        return "its folder is on a read-only file system"
    return (err.strerror or str(err)).lower()


def _write_tree(snap: Snapshot, staging: Path) -> tuple[int, int]:
    count = size = 0
    root_fd = os.open(staging, _DIR_FLAGS)
    dirs: dict[tuple[str, ...], int] = {(): root_fd}  # open: the folders above the file being written
    made: set[tuple[str, ...]] = set()
    try:
        for path, _oid in _files(snap):
            parent_fd = _make_dirs(dirs, made, path.parts[:-1])
            data = snap.read_bytes(path)
            fd = os.open(path.parts[-1], _CREATE_FLAGS, 0o600, dir_fd=parent_fd)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            count += 1
            size += len(data)
    finally:
        for fd in dirs.values():
            os.close(fd)
    return count, size


def _files(snap: Snapshot) -> Iterator[tuple[MemoryPath, bytes]]:
    """Every file of the snapshot, each name checked against the path rules:
    a tampered tree cannot name a place outside the export."""
    try:
        for path, oid in snap.files(MemoryPath(())):
            if paths.parse(path.text, existing=True) != path:  # a name an older vaultmem stored, too
                raise IntegrityError(
                    f"Error: the vault names a file {path.text!r} that is not a canonical memory path."
                )
            yield path, oid
    except (InvalidPathError, UnicodeDecodeError) as err:
        raise IntegrityError(
            "Error: the vault's tree holds a name that is not a valid memory path; run `vaultmem verify`. "
            "Nothing was exported."
        ) from err


def _make_dirs(dirs: dict[tuple[str, ...], int], made: set[tuple[str, ...]], parts: tuple[str, ...]) -> int:
    """The descriptor of the folder ``parts`` of the export, made if it is
    new.  Only the folders above it stay open: a memory of thousands of
    folders would otherwise use up the process's descriptors (1,024 by
    default) and fail the export."""
    for key in [key for key in dirs if parts[: len(key)] != key]:
        os.close(dirs.pop(key))
    for depth in range(1, len(parts) + 1):
        key = parts[:depth]
        if key not in dirs:
            parent = dirs[parts[: depth - 1]]
            if key not in made:
                os.mkdir(parts[depth - 1], 0o700, dir_fd=parent)
                made.add(key)
            dirs[key] = os.open(parts[depth - 1], _DIR_FLAGS, dir_fd=parent)
    return dirs[parts]
