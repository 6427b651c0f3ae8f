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
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pygit2

from vaultmem.core.crypto import Keyring
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
        return file_of(repo, oid, KEYRING_FILE)[1]
    except OversizedObject as err:
        raise NotAVaultError(f"Error: the vault's keyring ref is damaged ({err}); restore it from a clone.") from err
    except (KeyError, ValueError, pygit2.GitError) as err:
        raise NotAVaultError("Error: the vault's keyring ref is damaged; restore it from a clone.") from err


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
