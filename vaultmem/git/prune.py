"""Removing objects for good: what an erasure does to the superseded keyring.

Crypto-shredding destroys keys, and a key destroyed in the keyring document
is destroyed only once no copy of an older keyring is left on the disk:
not as a loose object, not inside a pack, not in a pack retired to the
trash, not in the journal (:meth:`CommitPath.scrub`).  :func:`drop` removes
the given objects from the loose objects and every pack: a pack holding only
them is removed whole (format 2 keyring packs are *held*: vaultmem's upkeep
never merges them with other objects, see :meth:`CommitPath.held`); any other
pack (one ``git gc`` made, say) holding one of them is rewritten without it (its other objects
copied whole into a new pack, synced and renamed into place before the old
pack goes).  A pack another program keeps (``.keep``) is left alone and
reported.  Called under the writer lock; a pack merge of vaultmem's upkeep
running at the same moment is dropped (:attr:`CommitPath.pruned`).
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import os
import shutil
import socket
import struct
import time
import zlib
from collections.abc import Collection
from pathlib import Path

import pygit2

from vaultmem.git import commits, durable, midx, objects

_IDX_MAGIC = b"\377tOc\x00\x00\x00\x02"


def _ids(idx: bytes) -> list[bytes]:
    if idx[:8] != _IDX_MAGIC:
        raise ValueError("not a version 2 pack index")
    count = struct.unpack(">I", idx[8 + 255 * 4 : 8 + 256 * 4])[0]
    base = 8 + 256 * 4
    return [idx[base + 20 * i : base + 20 * i + 20] for i in range(count)]


def _contains(ids: list[bytes], oid: bytes) -> bool:
    at = bisect.bisect_left(ids, oid)
    return at < len(ids) and ids[at] == oid


def drop(gitdir: Path, doomed: Collection[bytes], repo: pygit2.Repository) -> list[str]:
    """Remove ``doomed`` (object ids, raw) from the loose objects and the
    packs; the packs it had to leave holding one: a pack another program
    protects with a ``.keep`` (git's receive-pack while a push lands) is
    never touched, and a pack whose index cannot be read is not rewritten."""
    if not doomed:
        return []
    objects_dir = gitdir / "objects"
    # git's indexes over the objects go first: killed after any removal below,
    # none names an object that is gone (git fsck fails on such a one).
    _drop_indexes_naming(objects_dir, set(doomed))
    _drop_reflog_entries(gitdir, set(doomed))
    for oid in doomed:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(objects_dir / oid.hex()[:2] / oid.hex()[2:])
    pack_dir = objects_dir / "pack"
    try:
        names = sorted(os.listdir(pack_dir))
    except FileNotFoundError:
        return []
    doomed_set = set(doomed)
    _drop_own_leftovers(pack_dir, time.time())
    left: list[str] = []
    for name in names:
        if not name.endswith(".idx"):
            continue
        stem = pack_dir / name[: -len(".idx")]
        try:
            ids = _ids((pack_dir / name).read_bytes())
        except FileNotFoundError:
            continue  # removed meanwhile
        except (OSError, ValueError):
            left.append(str(stem.with_suffix(".pack")))
            continue
        if not any(_contains(ids, oid) for oid in doomed_set):
            continue
        if stem.with_suffix(".keep").exists():
            left.append(str(stem.with_suffix(".pack")))  # another program's: waited for, never removed
            continue
        rest = [oid for oid in ids if oid not in doomed_set]
        if rest:
            _rewrite(stem, rest, repo)
            commits.step("prune-rewritten")
        if midx.lists(pack_dir, stem):
            midx.clear(pack_dir)  # as git's repack -d does before it deletes a pack the index lists
        _remove_pack(stem)
        commits.step("prune-removed")
    left += _drop_git_leftovers(objects_dir, doomed_set, time.time())
    _drop_indexes_naming(objects_dir, doomed_set)  # again: git may have written one meanwhile
    durable.sync_dir(pack_dir)
    return left


STALE = 3600
"""A temporary file of git's (a pack, a loose object, a push's quarantine)
untouched for this many seconds is a leftover of a git command that was
killed: no program will finish it (git's own ``prune`` removes such files
after two weeks, by then long after an erasure)."""


def git_leftovers(gitdir: Path) -> list[Path]:
    """What git commands killed while writing objects left (``git
    count-objects -v`` calls it garbage), or are writing now: a half-written
    pack (``tmp_pack_*``, ``.tmp-*`` with no index), a loose object not yet
    in place (``tmp_obj_*``), a push's quarantine folder (``tmp_objdir-*``),
    and the pack a libgit2 fetch (a pull) was receiving (``pack_git2_*``).
    They are not objects git can find, but their bytes may hold a keyring an
    erasure replaced."""
    objects_dir = gitdir / "objects"
    found: list[Path] = []
    pack_dir = objects_dir / "pack"
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for name in sorted(os.listdir(pack_dir)):
            path = pack_dir / name
            if name.startswith(".tmp-") and name.endswith(".pack"):
                if not path.with_suffix(".idx").exists():  # with its index, drop() judges it by that
                    found.append(path)
            elif name.startswith(("tmp_pack_", "pack_git2_")):  # git's, and libgit2's (a fetch killed)
                found.append(path)
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for name in sorted(os.listdir(objects_dir)):
            path = objects_dir / name
            if name.startswith("tmp_objdir-") and path.is_dir() and not path.is_symlink():
                found.append(path)
            elif len(name) == 2 and path.is_dir():
                with contextlib.suppress(OSError):
                    found += [path / loose for loose in sorted(os.listdir(path)) if loose.startswith("tmp_obj_")]
    return found


def _drop_git_leftovers(objects_dir: Path, doomed: set[bytes], now: float) -> list[str]:
    """Remove the :func:`git_leftovers` not written to for :data:`STALE`
    seconds; a younger one may be a git command still at work: left, and
    returned when it may hold one of ``doomed`` (a half-written pack cannot
    be told apart: it may)."""
    left: list[str] = []

    def stale(path: Path) -> bool:
        try:
            return now - path.lstat().st_mtime > STALE
        except FileNotFoundError:
            return False

    for path in git_leftovers(objects_dir.parent):
        if path.name.startswith("tmp_obj_"):
            left += _drop_loose_leftover(path, doomed, stale(path))
        elif path.name.startswith("tmp_objdir-"):
            if all(stale(p) for p in [path, *path.rglob("*")]):
                shutil.rmtree(path, ignore_errors=True)
            elif path.exists():
                left.append(str(path))
        elif stale(path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        elif path.exists():
            left.append(str(path))
    return left


def _drop_loose_leftover(path: Path, doomed: set[bytes], stale: bool) -> list[str]:
    """A loose object git was writing: removed if stale; else left, and
    returned if it is (or may be, unreadable) one of ``doomed``."""
    if stale:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return []
    inflate = zlib.decompressobj()
    try:
        data = inflate.decompress(path.read_bytes())
    except FileNotFoundError:
        return []
    except (OSError, zlib.error):
        return [str(path)]
    if not inflate.eof or hashlib.sha1(data, usedforsecurity=False).digest() in doomed:
        return [str(path)]
    return []


def _drop_reflog_entries(gitdir: Path, doomed: set[bytes]) -> None:
    """Remove the entries naming a removed object from git's reflogs
    (``logs/``, written by git commands that moved a ref with
    ``core.logAllRefUpdates`` on, such as a push received): ``git fsck``
    fails on an entry naming an object that is gone ("invalid reflog entry")."""
    logs = gitdir / "logs"
    if not logs.is_dir():
        return
    for path in sorted(p for p in logs.rglob("*") if p.is_file() and not p.is_symlink()):
        try:
            lines = path.read_bytes().splitlines(keepends=True)
        except OSError:
            continue
        kept = [line for line in lines if not _names(line, doomed)]
        if len(kept) == len(lines):
            continue
        tmp = path.with_name(f"{path.name}.vaultmem-{os.getpid()}")
        try:
            with open(tmp, "wb") as fh:
                fh.write(b"".join(kept))
                fh.flush()
                os.fsync(fh.fileno())
            os.rename(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


def _names(line: bytes, doomed: set[bytes]) -> bool:
    """Whether a reflog line ("OLD NEW who when\tmessage") names one of ``doomed``."""
    for field in line.split(b" ", 2)[:2]:
        with contextlib.suppress(ValueError):
            if len(field) == 40 and bytes.fromhex(field.decode("ascii")) in doomed:
                return True
    return False


def _drop_indexes_naming(objects_dir: Path, doomed: set[bytes]) -> None:
    """git's optional indexes over the objects (the commit-graph, a
    multi-pack index, single or a chain) name objects and packs by id: one
    that names a removed object would make ``git fsck`` fail, so it goes (git
    writes it again at its next ``gc``; nothing is lost)."""
    info = objects_dir / "info"
    graphs = [info / "commit-graph"]
    with contextlib.suppress(FileNotFoundError):
        graphs += [info / "commit-graphs" / name for name in os.listdir(info / "commit-graphs")]
    for graph in graphs:
        try:
            data = graph.read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            continue
        if any(oid in data for oid in doomed):
            for stale in graphs:
                with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                    os.unlink(stale)
            break
    midx.clear(objects_dir / "pack")  # it lists packs by name, and a pack was rewritten or removed


def _rewrite(stem: Path, rest: list[bytes], repo: pygit2.Repository) -> None:
    """Put a pack holding ``rest`` (read through libgit2, whole) in place,
    synced, before the pack ``stem`` goes."""
    kept: list[objects.PackedObject] = []
    for oid in rest:
        kind, data = repo.odb.read(pygit2.Oid(raw=oid))
        kept.append(objects.packed(int(kind), bytes(data)))
    pack = objects.build_pack(kept)
    target = stem.with_name(f"pack-{pack.name}")
    if target == stem:
        return
    # Both written whole before either is renamed; refused midway (a full
    # disk), neither is left behind to hold the space the next run needs.
    written: list[tuple[Path, str]] = []
    try:
        for suffix, data in ((".pack", pack.data), (".idx", pack.idx)):
            tmp = stem.with_name(f"{_OWN_TEMP}{os.getpid()}{suffix}")
            written.append((tmp, suffix))
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o444)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
    except BaseException:
        for tmp, _ in written:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise
    commits.step("prune-copied")
    for tmp, suffix in written:
        os.rename(tmp, target.with_suffix(suffix))
    durable.sync_dir(stem.parent)


_OWN_TEMP = "tmp-vaultmem-prune-"  # then the writing process's id
# Not git's "tmp_": `git prune` (and `git gc --prune=now`) removes every
# "tmp_*" file in objects/pack older than its expiry, a copy being written included.
_OLD_TEMP = "tmp_vaultmem_prune_"  # the name earlier releases gave them: removed the same way


def _drop_own_leftovers(pack_dir: Path, now: float) -> None:
    """Remove the copies a rewrite killed midway left (its process gone, or
    not written to for :data:`STALE` seconds): they hold no removed object,
    but the space they take is what the next rewrite needs."""
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for name in os.listdir(pack_dir):
            prefix = next((p for p in (_OWN_TEMP, _OLD_TEMP) if name.startswith(p)), None)
            if prefix is None:
                continue
            path = pack_dir / name
            pid = name[len(prefix) :].split(".")[0]
            with contextlib.suppress(OSError):
                if now - path.lstat().st_mtime > STALE or (pid.isdigit() and not _alive(int(pid))):
                    os.unlink(path)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True  # another user's
    return True


def _remove_pack(stem: Path) -> None:
    """The index first (git then no longer lists the pack), the keep last."""
    for suffix in (".idx", ".pack", ".rev", ".bitmap", ".mtimes", ".promisor", ".keep"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stem.with_suffix(suffix))


GC_STALE = 12 * 3600
"""git's own rule: a ``gc.pid`` older than this is left by a gc that died."""


def running_gc(gitdir: Path) -> str | None:
    """The ``git gc`` running on the repository at ``gitdir`` now, described
    (``git gc, process 4242 on host``), or None.  git writes ``gc.pid``
    ("PID HOST") for as long as it runs and removes it when it ends; one
    left by a gc that died (its process gone, or 12 hours old) is not running."""
    pidfile = gitdir / "gc.pid"
    try:
        fields = pidfile.read_text(encoding="utf-8", errors="replace").split()
        age = time.time() - pidfile.stat().st_mtime
    except OSError:
        return None
    if len(fields) < 2 or not fields[0].isdigit() or age > GC_STALE:
        return None
    pid, host = int(fields[0]), fields[1]
    if host == socket.gethostname() and not _alive(pid):
        return None
    return f"git gc, process {pid} on {host}"


_PACKING = {b"repack", b"pack-objects", b"gc"}
"""git commands that read the objects, then write them into a new pack."""


def running_packer(gitdir: Path) -> str | None:
    """A git command packing the objects of the repository at ``gitdir``
    now (``git gc``, ``git repack``, ``git pack-objects``), described, or
    None.  ``git gc`` says so in its ``gc.pid``; ``git repack`` writes no
    such file, so the processes of this machine are looked at (Linux's
    ``/proc``: git running in ``gitdir``, or with ``GIT_DIR`` naming it)."""
    gc = running_gc(gitdir)
    if gc is not None:
        return gc
    try:
        here = os.stat(gitdir)
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return None
    me = str(os.getpid())
    for pid in pids:
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
            command = _git_command(argv)
            if command not in _PACKING:
                continue
            if _in(here, f"/proc/{pid}/cwd") or _in(here, _git_dir_of(pid)):
                return f"git {command.decode()}, process {pid}"
        except (OSError, ValueError):
            continue  # ended meanwhile, or another user's
    return None


_VALUED = {b"-C", b"-c", b"--git-dir", b"--work-tree", b"--namespace", b"--config-env", b"--super-prefix"}


def _git_command(argv: list[bytes]) -> bytes | None:
    """The git command a process runs (``repack`` of ``git -C x repack -a``,
    or of ``git-repack``), or None if it is not git."""
    program = os.path.basename(argv[0])
    if program.startswith(b"git-"):
        return program[len(b"git-") :]
    if program != b"git":
        return None
    args = iter(argv[1:])
    for arg in args:
        if arg in _VALUED:
            next(args, None)
        elif not arg.startswith(b"-"):
            return arg
    return None


def _in(here: os.stat_result, path: str | None) -> bool:
    if path is None:
        return False
    try:
        there = os.stat(path)
    except OSError:
        return False
    return (there.st_dev, there.st_ino) == (here.st_dev, here.st_ino)


def _git_dir_of(pid: str) -> str | None:
    """The ``GIT_DIR`` process ``pid`` runs with (relative to its working folder), or None."""
    with open(f"/proc/{pid}/environ", "rb") as fh:
        for item in fh.read().split(b"\0"):
            if item.startswith(b"GIT_DIR="):
                return os.path.join(f"/proc/{pid}/cwd", os.fsdecode(item[len(b"GIT_DIR=") :]))
    return None
