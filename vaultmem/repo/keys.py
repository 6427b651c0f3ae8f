"""Key administration on disk: the keyring branch, listing data keys,
rewrapping and rotating them, re-encrypting the current memory.

The keyring lives on its own branch (``refs/heads/vaultmem-keyring``) so it
travels with a clone.  Each keyring commit follows the one before it, so the
branch grows as a fast-forward, except after an erasure (format 2): the
punctured keyring is then a new root commit, and every copy of the keyrings
before it is removed from the disk (:func:`replace_keyring`).
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from struct import error as struct_error
from typing import Any

import pygit2

from vaultmem.core.crypto import Erasure, Keyring
from vaultmem.core.versions import Version
from vaultmem.errors import ConflictError, NotAVaultError
from vaultmem.git import durable, objects
from vaultmem.git.commits import COMMITTER, CommitPath, Damaged, Draft, read_ref
from vaultmem.repo.history import OversizedObject
from vaultmem.repo.small import file_of

KEYRING_REF = "refs/heads/vaultmem-keyring"
SHADOWS_REF = "refs/heads/vaultmem-shadows"  # a migrated vault's format 1 versions, re-encrypted
KEYRING_FILE = "keyring.json"


@dataclass(frozen=True)
class KeyInfo:
    """A data key as an operator sees it (never the key itself)."""

    id: str
    created: datetime
    active: bool


def list_keys(keyring: Keyring) -> list[KeyInfo]:
    """Data keys (format 1) and epochs (format 2), oldest first."""
    active = keyring.doc.get("active")
    entries = [*keyring.doc["data_keys"], *(keyring.doc.get("epochs") or [])]
    return [
        KeyInfo(entry["id"], datetime.fromtimestamp(entry["created"], tz=timezone.utc), entry["id"] == active)
        for entry in sorted(entries, key=lambda e: (e["created"], e["id"]))
    ]


def keyring_blob(repo: pygit2.Repository, target: Any) -> bytes:
    try:
        oid = target if isinstance(target, pygit2.Oid) else pygit2.Oid(hex=str(target))
    except (ValueError, TypeError) as err:
        raise NotAVaultError("Error: the vault's keyring ref is damaged; restore it from a clone.") from err
    try:
        return file_of(repo, oid, KEYRING_FILE)[1]
    except OversizedObject as err:
        raise NotAVaultError(f"Error: the vault's keyring ref is damaged ({err}); restore it from a clone.") from err
    except (KeyError, ValueError, pygit2.GitError) as err:
        raise NotAVaultError(_unreadable_keyring(Path(repo.path), str(oid))) from err


def _unreadable_keyring(gitdir: Path, commit: str) -> str:
    """Why the keyring commit the ref names cannot be read, and the repair:
    the ref is whole; the objects under it are missing or damaged."""
    what = f"the vault's keyring (commit {commit[:10]} of {KEYRING_REF.rsplit('/')[-1]})"
    damaged = objects.damaged_indexes(gitdir)
    indexes = [name for name, cut in damaged if not cut]
    if indexes:
        names = " and ".join(f"objects/pack/{name}" for name in indexes)
        commands = "; ".join(f"`git index-pack objects/pack/{name[: -len('.idx')]}.pack`" for name in indexes)
        return (
            f"Error: {what} cannot be read: the pack index {names} is damaged. If `git fsck` finds the pack "
            f"whole, remove the index and run {commands} in the vault to rebuild it; otherwise restore the vault "
            "from a clone."
        )
    packs = " and ".join(f"objects/pack/{name[: -len('.idx')]}.pack" for name, _ in damaged)
    where = (
        f"the pack {packs} does not match its index: it was cut short or changed"
        if damaged
        else "it is missing or damaged in the vault's objects"
    )
    return (
        f"Error: {what} cannot be read: {where} (`git fsck` names the damage), so nothing in the vault can be "
        "decrypted; restore the vault from a clone or a backup."
    )


def write_keyring(
    commits: CommitPath,
    keyring: Keyring,
    message: str,
    now: int,
    merged_from: bytes | None = None,
    *,
    root: bool = False,
) -> None:
    """Replace the keyring through the commit path, synced before returning
    (the data keys are the only copy there is).  The caller holds the writer lock."""
    blob = objects.packed(objects.BLOB, keyring.to_bytes())
    tree = objects.packed(objects.TREE, objects.encode_tree({KEYRING_FILE.encode(): (objects.MODE_BLOB, blob.id)}))
    try:
        current = read_ref(commits.gitdir, KEYRING_REF)
    except Damaged as err:
        raise NotAVaultError("Error: the vault's keyring ref is damaged; restore it from a clone.") from err
    # Each keyring commit follows the one before it, so the branch only grows:
    # a clone pulls and pushes it as a fast-forward, like main.
    parents = [current] if current is not None and not root else []
    if merged_from is not None and not root:  # a merge of two clones' keyrings: both are its parents
        parents.append(merged_from)
    draft = Draft(tree.id, parents, COMMITTER, now, message + "\n")
    # Format 2 keyrings hold key covers an erasure must be able to destroy:
    # their packs stay apart from everything else (hold).
    try:
        commits.commit(KEYRING_REF, current, [blob, tree], draft, checkpoint=True, hold=keyring.format >= 2)
    except BaseException:
        back_to_stored(commits.gitdir, keyring)
        raise
    keyring.previous_user_key = None


def back_to_stored(gitdir: Path, keyring: Keyring) -> None:
    """A keyring write was refused or never made (a full disk, a quota, a
    signal): the caller changed ``keyring`` in place before writing it, so it
    becomes the keyring as stored again, as a vault opened now would read it.  Otherwise
    the open vault would go on with keys that are not on the disk: encrypting
    new versions under a data key never stored (unreadable once the vault is
    reopened), or refusing the same key change run again."""
    with contextlib.suppress(Exception):  # the refusal is what the caller reports
        stored = read_ref(gitdir, KEYRING_REF)
        if stored is None:
            return  # a new vault: its folder is taken back whole
        doc = Keyring.parse(keyring_blob(pygit2.Repository(str(gitdir)), pygit2.Oid(raw=stored)))
        if doc == keyring.doc:
            return
        for user_key in (keyring.user_key, keyring.previous_user_key):
            if user_key is None:
                continue
            with contextlib.suppress(Exception):
                keyring.take(Keyring.unlock(doc, user_key))
                return


def keyring_objects(repo: pygit2.Repository, tips: list[pygit2.Oid]) -> set[bytes]:
    """Every object of the keyring histories ending at ``tips`` (raw ids)."""
    out: set[bytes] = set()
    stack = list(tips)
    while stack:
        oid = stack.pop()
        if oid.raw in out:
            continue
        try:
            commit = repo[oid].peel(pygit2.Commit)
        except (KeyError, ValueError, pygit2.GitError):
            continue
        out.add(commit.id.raw)
        out.add(commit.tree_id.raw)
        with contextlib.suppress(KeyError, ValueError, pygit2.GitError):  # a removal cut short took the tree
            for entry in commit.tree:
                out.add(entry.id.raw)
        stack.extend(commit.parent_ids)
    return out


def keyring_tips(repo: pygit2.Repository, *, copies: bool = True) -> list[pygit2.Oid]:
    """The keyring branch and every other ref naming a keyring (a remote's,
    an incoming push's, and with ``copies`` one an operator copied in with
    git under a name of their own, or a fetch named in ``FETCH_HEAD`` alone:
    a commit whose tree holds the keyring file alone, which goes with the
    keyrings an erasure replaces)."""
    tips: list[pygit2.Oid] = []
    for name in repo.references:
        if name == KEYRING_REF or name.endswith("/vaultmem-keyring"):
            with contextlib.suppress(KeyError, ValueError, pygit2.GitError):
                target = repo.references[name].resolve().target
                if isinstance(target, pygit2.Oid):
                    tips.append(target)
    if copies:
        tips += [commit.id for _, commit in _keyring_copies(repo)]
    return tips


def _keyring_copies(repo: pygit2.Repository) -> list[tuple[str, pygit2.Commit]]:
    """The keyring commits refs other than the keyring branch name (through
    tags), and those ``FETCH_HEAD`` names, each with the name naming it."""
    named: list[tuple[str, pygit2.Oid]] = []
    for name in repo.references:
        if name != KEYRING_REF:
            with contextlib.suppress(KeyError, ValueError, pygit2.GitError):
                target = repo.references[name].resolve().target
                if isinstance(target, pygit2.Oid):
                    named.append((name, target))
    with contextlib.suppress(OSError, UnicodeDecodeError):
        for line in (Path(repo.path) / "FETCH_HEAD").read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError):
                named.append(("FETCH_HEAD", pygit2.Oid(hex=line[:40])))
    out: list[tuple[str, pygit2.Commit]] = []
    for name, oid in named:
        with contextlib.suppress(KeyError, ValueError, pygit2.GitError):
            commit = repo[oid].peel(pygit2.Commit)
            if _is_keyring(commit):
                out.append((name, commit))
    return out


def lagging_copies(repo: pygit2.Repository) -> list[tuple[str, pygit2.Oid]]:
    """The refs (or ``FETCH_HEAD``), with the keyring each names, naming a
    keyring that lacks some erasure the vault's keyring records: it may
    still hold the keys those erasures destroyed (a clone's keyring fetched
    in with git before the erasure reached that clone).  Such a copy goes
    like a replaced one."""
    current = repo.references.get(KEYRING_REF)
    try:
        target = current.resolve().target if current is not None else None
        erased = set(Keyring.parse(keyring_blob(repo, target)).get("erased") or {}) if target is not None else set()
    except (NotAVaultError, KeyError, ValueError, pygit2.GitError):
        return []
    if not erased:
        return []
    out: list[tuple[str, pygit2.Oid]] = []
    for name, commit in _keyring_copies(repo):
        with contextlib.suppress(NotAVaultError, KeyError, ValueError, pygit2.GitError):
            if commit.id != target and not erased <= set(
                Keyring.parse(keyring_blob(repo, commit.id)).get("erased") or {}
            ):
                out.append((name, commit.id))
    return out


def keyring_worktrees(repo: pygit2.Repository) -> list[str]:
    """The folders of git worktrees (``git worktree add``) with a keyring
    checked out: their files hold a copy of its keys, and their index names
    its objects, so an erasure removing them would leave git unable to
    ``gc`` the vault."""
    base = Path(repo.path) / "worktrees"
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    out: list[str] = []
    for name in names:
        admin = base / name
        with contextlib.suppress(OSError, UnicodeDecodeError, KeyError, ValueError, pygit2.GitError):
            head = (admin / "HEAD").read_text(encoding="utf-8").strip()
            if head.startswith("ref:"):
                ref = repo.references.get(head[len("ref:") :].strip())
                if ref is None:
                    continue
                commit = ref.resolve().peel(pygit2.Commit)
            else:
                commit = repo[pygit2.Oid(hex=head)].peel(pygit2.Commit)
            if _is_keyring(commit):
                where = (admin / "gitdir").read_text(encoding="utf-8").strip()
                out.append(str(Path(where).parent) if where else name)
    return out


def _is_keyring(commit: pygit2.Commit) -> bool:
    """Whether ``commit`` is a keyring commit: its tree holds the keyring file alone."""
    tree = commit.tree
    return len(tree) == 1 and tree[0].name == KEYRING_FILE


def check_unchanged(repo: pygit2.Repository, keyring: Keyring) -> None:
    """Key changes start from the keyring on disk: another process may have
    changed it since this vault was opened."""
    ref = repo.references.get(KEYRING_REF)
    if ref is None or Keyring.parse(keyring_blob(repo, ref.target)) != keyring.doc:
        raise ConflictError(
            "Error: the keyring changed since this vault was opened (another process changed a key); "
            "open the vault again and retry."
        )
    if not keyring.intact:
        keyring.active  # raises, naming what is wrong  # noqa: B018


# -- keyrings replaced by a new root: every copy must leave the disk -------------------
# Records in the vault's state folder, each written under a temporary name,
# synced and renamed into place:
#
# - ``replacing``: written before the keyring ref moves to a new root (an
#   erasure, a migration, a merge of keyrings after one): the keyring it moves
#   from, the tips of the keyrings it replaces and every object of theirs.
#   Once the ref names another keyring, those objects are due for removal,
#   whichever process moved it and whenever it died; while the ref still
#   names that keyring, the move never happened and the record counts for nothing.
# - ``doomed``: objects of replaced keyrings a removal still has to remove
#   (written before it starts; after it, what it had to leave, in a pack
#   another program keeps).
# - ``replaced``: the commit ids of every keyring replaced so far, kept: a
#   fetch that brings one back (a server or a copy that still holds it) is
#   found and removed again.

REPLACING = "replacing"
DOOMED = "doomed"
REPLACED = "replaced"


def _state(gitdir: Path) -> Path:
    return Path(gitdir) / durable.STATE_DIR


def _ids(text: str, prefix: str = "") -> set[bytes]:
    out: set[bytes] = set()
    for line in text.splitlines():
        if line.startswith(prefix) and len(line) == len(prefix) + 40:
            with contextlib.suppress(ValueError):
                out.add(bytes.fromhex(line[len(prefix) :]))
    return out


def _read(gitdir: Path, name: str) -> str:
    try:
        return (_state(gitdir) / name).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return ""


def _write(gitdir: Path, name: str, lines: list[str]) -> None:
    """``name`` in the state folder holding ``lines``, synced, as one rename."""
    path = _state(gitdir) / name
    tmp = path.with_name(f"tmp-{os.getpid()}.{name}")
    try:
        with open(tmp, "w", encoding="ascii") as fh:
            fh.write("".join(f"{line}\n" for line in lines))
            fh.flush()
            os.fsync(fh.fileno())
        os.rename(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    durable.sync_dir(path.parent)


def _remove(gitdir: Path, name: str) -> None:
    path = _state(gitdir) / name
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    durable.sync_dir(path.parent)


def record_replacing(gitdir: Path, current: bytes, tips: list[pygit2.Oid], doomed: set[bytes]) -> None:
    """Before the keyring ref moves from ``current`` to a new root, under the
    writer lock: record (synced) the keyrings ``tips`` it replaces and their
    objects ``doomed``, so that whatever happens next, any later run finds
    and removes every copy of them (see :func:`due`)."""
    lines = [f"from {current.hex()}", *(f"tip {tip}" for tip in sorted({str(t) for t in tips}))]
    _write(gitdir, REPLACING, lines + sorted(oid.hex() for oid in doomed))


def _moved_from(gitdir: Path, text: str) -> bool:
    """Whether the keyring ref has left the keyring a ``replacing`` record names."""
    start = _ids(text, "from ")
    if not start:
        return False
    try:
        current = read_ref(Path(gitdir), KEYRING_REF)
    except Damaged:
        return False  # unreadable now: judged once it is repaired
    return current is not None and current not in start


def due(gitdir: Path) -> set[bytes]:
    """Objects of replaced keyrings still to be removed (they may be gone
    already, or be in use again: the caller subtracts what it keeps)."""
    out = _ids(_read(gitdir, DOOMED))
    replacing = _read(gitdir, REPLACING)
    if replacing and _moved_from(gitdir, replacing):
        out |= _ids(replacing)
    return out


def replaced(gitdir: Path) -> set[bytes]:
    """Commit ids of every keyring replaced so far (raw)."""
    out = _ids(_read(gitdir, REPLACED))
    replacing = _read(gitdir, REPLACING)
    if replacing and _moved_from(gitdir, replacing):
        out |= _ids(replacing, "tip ")
    return out


def pending(gitdir: Path) -> bool:
    """Whether a removal was recorded and not finished (two stats)."""
    state = _state(gitdir)
    return (state / DOOMED).exists() or (state / REPLACING).exists()


def set_due(gitdir: Path, doomed: set[bytes], tips: set[bytes]) -> None:
    """Under the writer lock, with every object :func:`due` gave accounted for
    in ``doomed``: record ``tips`` among the replaced keyrings for good, then
    ``doomed`` as what is still to be removed (nothing: the record goes), then
    drop the ``replacing`` record it supersedes."""
    known = _ids(_read(gitdir, REPLACED))
    if not tips <= known:
        _write(gitdir, REPLACED, sorted(oid.hex() for oid in known | tips))
    if doomed:
        _write(gitdir, DOOMED, sorted(oid.hex() for oid in doomed))
    else:
        _remove(gitdir, DOOMED)
    _remove(gitdir, REPLACING)


# -- the erasures main records ---------------------------------------------------------
# The forget commits of ``main`` say which file versions were erased, whatever
# keyring the ref names: one put back from before an erasure (`git update-ref`
# from a saved id, a backup bundle, a clone made before it) still holds their
# keys, and is judged against them.  What a walk of main found is remembered in
# the state folder (``erasures``: the tip walked to and what it found), so the
# next look walks only the versions written since.

ERASURES = "erasures"


def recorded_erasures(
    repo: pygit2.Repository, gitdir: Path, head: pygit2.Oid | None, *, remember: bool = False
) -> dict[str, Erasure]:
    """The file versions the forget commits of the history ending at ``head``
    erased, by blob id, with who erased each, when and why.  The state
    folder's ``erasures`` file remembers them up to a commit, so only the
    commits after it are read; only a writer (``remember``: under the writer
    lock, or the upkeep after writes) brings that file up to date, so
    reading a vault never changes its files."""
    if head is None:
        return {}
    tip: pygit2.Oid | None = None
    found: dict[str, Erasure] = {}
    with contextlib.suppress(ValueError, KeyError, TypeError, IndexError):
        doc = json.loads(_read(gitdir, ERASURES) or "null")
        tip = pygit2.Oid(hex=doc["main"])
        found = {str(k): Erasure(str(v[0]), str(v[1]), int(v[2]), str(v[3])) for k, v in doc["erased"].items()}
    if tip == head:
        return found
    try:
        walker = repo.walk(head, pygit2.enums.SortMode.NONE)
    except Exception:  # a damaged or hostile head (verify reports it): nothing more to learn from it
        return found
    try:
        if tip is None or not repo.descendant_of(head, tip):
            raise KeyError(tip)  # main went elsewhere (or nothing is remembered): walk it all
        walker.hide(tip)
    except (KeyError, ValueError, pygit2.GitError):
        found = {}
    walked, whole = 0, True
    try:
        for commit in walker:
            walked += 1
            if b"\nVaultmem-Erased: " not in commit.raw_message:
                continue
            with contextlib.suppress(ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError):
                version = Version.from_commit(commit)
                if version.command != "forget":
                    continue
                erasure = Erasure(version.id, version.actor, int(version.time.timestamp()), version.reason or "")
                for line in version.erased:
                    found.setdefault(line.split(" ")[-1], erasure)
    except Exception:  # a damaged history (a zlib bomb: MemoryError) never stops an open
        whole = False  # what could be read counts (verify reports the rest), never remembered
    if remember and whole and (walked > 64 or found):  # best effort: a vault not written here is walked again
        doc = {"main": str(head), "erased": {k: [e.commit, e.actor, e.time, e.reason] for k, e in found.items()}}
        path = _state(gitdir) / ERASURES
        tmp = path.with_name(f"tmp-{os.getpid()}-{threading.get_ident()}.{ERASURES}")
        try:
            tmp.write_text(json.dumps(doc, sort_keys=True), encoding="ascii")
            os.rename(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return found


def lacking_erasures(doc: dict[str, Any], recorded: dict[str, Erasure]) -> dict[str, Erasure]:
    """The erasures of ``recorded`` that the keyring document ``doc`` does
    not record: it was put back from before them, or an erasure was cut short."""
    if not recorded:
        return {}
    erased = doc.get("erased") or {}
    return {oid: erasure for oid, erasure in recorded.items() if oid not in erased}


# -- keyrings no ref names ---------------------------------------------------------------
# A keyring's objects in the object store that no ref reaches: a clone's keyring a
# fetch brought and the next fetch stopped naming (``FETCH_HEAD`` overwritten), a
# bundle unpacked by hand, a keyring commit made with `git commit-tree`.  One that
# lacks an erasure the vault's keyring records may hold the keys it destroyed.

_KEYRING_TREE_SIZE = len(f"100644 {KEYRING_FILE}\0") + 20  # a tree of the keyring file alone
_LOOSE_BLOB_READ = 1 << 20  # a loose blob up to this size is read to see whether it is a keyring


def _headers(repo: pygit2.Repository) -> Iterator[tuple[bytes, int, int, bool]]:
    """``(id, kind, size, loose)`` of every object in the vault folder: a
    packed one's read from its entry in the pack (libgit2 resolves a delta's),
    a loose one's from libgit2."""
    objects_dir = Path(repo.path) / "objects"
    seen: set[bytes] = set()
    with contextlib.suppress(OSError):
        for fan in os.listdir(objects_dir):
            if len(fan) != 2:
                continue
            with contextlib.suppress(OSError, ValueError):
                for name in os.listdir(objects_dir / fan):
                    if len(name) == 38:
                        seen.add(bytes.fromhex(fan + name))
    for raw in sorted(seen):
        with contextlib.suppress(KeyError, ValueError, pygit2.GitError):
            found, size = repo.odb.read_header(pygit2.Oid(raw=raw))
            yield raw, int(found), size, True
    pack_dir = objects_dir / "pack"
    try:
        names = sorted(os.listdir(pack_dir))
    except OSError:
        return
    for name in names:
        if not (name.startswith("pack-") and name.endswith(".idx")):
            continue
        try:
            entries = objects.read_index((pack_dir / name).read_bytes())
        except (OSError, ValueError, struct_error):
            continue
        try:
            with (
                open(pack_dir / f"{name[: -len('.idx')]}.pack", "rb") as fh,
                mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as pack,
            ):
                for raw, _, at in entries:
                    if raw in seen:
                        continue
                    seen.add(raw)
                    kind, size, _ = objects.entry_header(pack, at)
                    if kind in (objects.COMMIT, objects.TREE, objects.BLOB, 4):
                        yield raw, kind, size, False
                        continue
                    with contextlib.suppress(KeyError, ValueError, pygit2.GitError):  # a delta: its object's header
                        found, size = repo.odb.read_header(pygit2.Oid(raw=raw))
                        yield raw, int(found), size, False
        except (OSError, ValueError, IndexError):
            continue  # a pack cut short or gone meanwhile: git cannot read it either


def unnamed_keyrings(repo: pygit2.Repository, keep: set[bytes]) -> dict[bytes, set[bytes]]:
    """Keyrings in the object store outside ``keep`` (the objects the refs
    reach that count), by the id of their keyring file: that file, the trees
    holding it alone and the commits of those trees (raw ids).  Reads the
    header of every object, and the commits only when such a tree is found."""
    trees: dict[bytes, bytes] = {}
    commits: list[bytes] = []
    out: dict[bytes, set[bytes]] = {}
    for raw, kind, size, loose in _headers(repo):
        if raw in keep:
            continue
        with contextlib.suppress(KeyError, ValueError, pygit2.GitError):
            if kind == objects.TREE and size == _KEYRING_TREE_SIZE:
                entries = objects.decode_tree(repo.odb.read(pygit2.Oid(raw=raw))[1])
                entry = entries.get(KEYRING_FILE.encode())
                if entry is not None and len(entries) == 1:
                    trees[raw] = entry[1]
            elif kind == objects.COMMIT:
                commits.append(raw)
            elif kind == objects.BLOB and loose and size < _LOOSE_BLOB_READ:
                data = repo.odb.read(pygit2.Oid(raw=raw))[1]
                if data[:1] == b"{" and b'"vaultmem_format"' in data:
                    out[raw] = {raw}
    for tree, blob in trees.items():
        out.setdefault(blob, {blob}).add(tree)
    if trees:
        for raw in commits:
            with contextlib.suppress(KeyError, ValueError, pygit2.GitError):
                named = objects.commit_tree(repo.odb.read(pygit2.Oid(raw=raw))[1])
                if named in trees:
                    out[trees[named]].add(raw)
    return {blob: found - keep for blob, found in out.items()}


def unnamed_lagging(repo: pygit2.Repository) -> set[bytes]:
    """The objects of keyrings no ref names (:func:`unnamed_keyrings`) that
    lack an erasure the vault's keyring records: they may hold its keys."""
    current = repo.references.get(KEYRING_REF)
    try:
        target = current.resolve().target if current is not None else None
        erased = set(Keyring.parse(keyring_blob(repo, target)).get("erased") or {}) if target is not None else set()
    except (NotAVaultError, KeyError, ValueError, pygit2.GitError):
        return set()
    if not erased or not isinstance(target, pygit2.Oid):
        return set()
    out: set[bytes] = set()
    for blob, found in unnamed_keyrings(repo, keyring_objects(repo, keyring_tips(repo))).items():
        try:
            theirs = set(Keyring.parse(repo.odb.read(pygit2.Oid(raw=blob))[1]).get("erased") or {})
        except (NotAVaultError, KeyError, ValueError, pygit2.GitError):
            theirs = set()  # its file is gone or unreadable: what is left of it goes too
        if not erased <= theirs:
            out |= found
    return out


_BUNDLE_HEADS = (b"# v2 git bundle\n", b"# v3 git bundle\n")


def keyring_bundles(repo: pygit2.Repository) -> list[str]:
    """The git bundles kept inside the vault folder (``git bundle create``)
    that name a keyring commit outside the vault keyring's history: one from
    before an erasure (every erasure starts the keyring anew), which may hold
    the keys it destroyed.  Their paths in the folder; the objects are not read."""
    gitdir = Path(repo.path)
    ref = repo.references.get(KEYRING_REF)
    target = ref.target if ref is not None else None
    if not isinstance(target, pygit2.Oid):
        return []
    history: set[bytes] | None = None
    out: list[str] = []
    for where, dirs, files in os.walk(gitdir):
        if Path(where) == gitdir:
            dirs[:] = [d for d in dirs if d not in ("objects", "refs", "logs")]
        for name in files:
            path = Path(where) / name
            try:
                with open(path, "rb") as fh:
                    if fh.read(16) not in _BUNDLE_HEADS:
                        continue
                    head = fh.read(1 << 20).split(b"\n\n", 1)[0]
            except OSError:
                continue
            named = set()
            for line in head.split(b"\n"):
                if line.endswith(b"/vaultmem-keyring") and len(line) > 41 and line[40:41] == b" ":
                    with contextlib.suppress(ValueError):
                        named.add(bytes.fromhex(line[:40].decode("ascii")))
            if named:
                if history is None:
                    history = keyring_objects(repo, [target])
                if not named <= history:
                    out.append(str(path.relative_to(gitdir)))
    return sorted(out)
