"""Reading and editing the memory tree of one commit.

:class:`Snapshot` is a consistent, read-only view of the memory at one commit:
readers never wait for writers because a commit never changes.
:class:`TreeEditor` stages changes on top of a snapshot and writes only the
trees that changed, so untouched files and folders keep their object ids.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import pygit2

from . import objects
from .crypto import Keyring, plaintext_size
from .errors import ConflictError, NotFoundError
from .paths import MemoryPath

Kind = Literal["file", "dir"]
BLOB = pygit2.enums.FileMode.BLOB
TREE = pygit2.enums.FileMode.TREE


class SizeCache:
    """Plaintext sizes by object id: blobs from their header, trees by summing.

    Object ids never change meaning, so the cache never needs invalidating; it
    is shared by every snapshot of a vault and safe to share between threads.
    """

    def __init__(self) -> None:
        self._sizes: dict[pygit2.Oid, int] = {}

    def blob(self, repo: pygit2.Repository, oid: pygit2.Oid) -> int:
        size = self._sizes.get(oid)
        if size is None:
            size = plaintext_size(repo[oid].read_raw())
            self._sizes[oid] = size
        return size

    def tree(self, repo: pygit2.Repository, tree: pygit2.Tree) -> int:
        size = self._sizes.get(tree.id)
        if size is None:
            size = 0
            for item in tree:
                if item.filemode == TREE:
                    assert isinstance(item, pygit2.Tree)
                    size += self.tree(repo, item)
                else:
                    size += self.blob(repo, item.id)
            self._sizes[tree.id] = size
        return size


@dataclass(frozen=True)
class Listed:
    """One entry of a directory listing."""

    path: MemoryPath
    kind: Kind
    size: int
    depth: int


class Snapshot:
    """The memory as it is in one commit (or the empty memory of a new vault)."""

    def __init__(
        self,
        repo: pygit2.Repository,
        keyring: Keyring,
        sizes: SizeCache,
        commit: pygit2.Commit | None,
    ) -> None:
        self.repo = repo
        self.keyring = keyring
        self.sizes = sizes
        self.commit = commit
        self.memories: pygit2.Tree | None = None
        if commit is not None and "memories" in commit.tree:
            memories = commit.tree["memories"]
            assert isinstance(memories, pygit2.Tree)
            self.memories = memories

    @property
    def id(self) -> str | None:
        return str(self.commit.id) if self.commit is not None else None

    def _object(self, path: MemoryPath) -> pygit2.Object | None:
        if path.is_root:
            return self.memories
        if self.memories is None:
            return None
        try:
            return self.memories["/".join(path.parts)]
        except KeyError:
            return None

    def kind(self, path: MemoryPath) -> Kind | None:
        """``"file"``, ``"dir"`` or None.  ``/memories`` is always a directory."""
        if path.is_root:
            return "dir"
        obj = self._object(path)
        if obj is None:
            return None
        return "dir" if obj.filemode == TREE else "file"

    def entry(self, path: MemoryPath) -> tuple[int, bytes] | None:
        """``(mode, id)`` of the file or folder at ``path``, as a tree holds it."""
        obj = self._object(path)
        if obj is None:
            return None
        return (objects.MODE_TREE if isinstance(obj, pygit2.Tree) else objects.MODE_BLOB), obj.id.raw

    def read_bytes(self, path: MemoryPath) -> bytes:
        obj = self._object(path)
        if obj is None or obj.filemode == TREE:
            raise NotFoundError(f"Error: {path} does not exist or is not a file.")
        return self.keyring.open(path.text, obj.read_raw())

    def read_text(self, path: MemoryPath) -> str:
        return self.read_bytes(path).decode("utf-8")

    def size(self, path: MemoryPath) -> int:
        obj = self._object(path)
        if obj is None:
            return 0
        if isinstance(obj, pygit2.Tree):
            return self.sizes.tree(self.repo, obj)
        return self.sizes.blob(self.repo, obj.id)

    def files(self, path: MemoryPath) -> Iterator[tuple[MemoryPath, pygit2.Oid]]:
        """Every file at or below ``path``, depth first."""
        obj = self._object(path)
        if obj is None:
            return
        if not isinstance(obj, pygit2.Tree):
            yield path, obj.id
            return
        for item in obj:
            assert item.name is not None
            yield from self._files_below(path.child(item.name), item)

    def _files_below(self, path: MemoryPath, obj: pygit2.Object) -> Iterator[tuple[MemoryPath, pygit2.Oid]]:
        if isinstance(obj, pygit2.Tree):
            for item in obj:
                assert item.name is not None
                yield from self._files_below(path.child(item.name), item)
        else:
            yield path, obj.id

    def listing(self, path: MemoryPath, depth: int = 2, hidden: bool = False) -> list[Listed]:
        """Entries up to ``depth`` levels below a directory, sorted by name, a
        folder's contents right after it.  Hidden names (``.x``) and
        ``node_modules`` are left out with their contents unless ``hidden``."""
        obj = self._object(path)
        out: list[Listed] = []
        if isinstance(obj, pygit2.Tree):
            self._list(obj, path, 1, depth, hidden, out)
        return out

    def _list(
        self, tree: pygit2.Tree, path: MemoryPath, level: int, depth: int, hidden: bool, out: list[Listed]
    ) -> None:
        items = sorted(tree, key=lambda item: item.name or "")
        for item in items:
            name = item.name or ""
            if not hidden and (name.startswith(".") or name == "node_modules"):
                continue
            child = path.child(name)
            if isinstance(item, pygit2.Tree):
                out.append(Listed(child, "dir", self.sizes.tree(self.repo, item), level))
                if level < depth:
                    self._list(item, child, level + 1, depth, hidden, out)
            else:
                out.append(Listed(child, "file", self.sizes.blob(self.repo, item.id), level))


class TreeCache:
    """Decoded tree entries by tree id, for the write path (bounded, shared)."""

    def __init__(self, limit: int = 512) -> None:
        self.limit = limit
        self._trees: dict[bytes, dict[bytes, tuple[int, bytes]]] = {}

    def get(self, repo: pygit2.Repository, oid: bytes) -> dict[bytes, tuple[int, bytes]]:
        entries = self._trees.get(oid)
        if entries is None:
            entries = objects.decode_tree(repo[pygit2.Oid(raw=oid)].read_raw())
            self.put(oid, entries)
        return entries

    def put(self, oid: bytes, entries: dict[bytes, tuple[int, bytes]]) -> None:
        if len(self._trees) >= self.limit:
            self._trees.pop(next(iter(self._trees)))
        self._trees[oid] = entries


class _Dir:
    """A directory being edited: its entries in git (if any) plus staged changes."""

    __slots__ = ("base", "changes")

    def __init__(self, base: dict[bytes, tuple[int, bytes]] | None) -> None:
        self.base = base or {}
        self.changes: dict[bytes, tuple[int, bytes] | None] = {}

    def get(self, name: bytes) -> tuple[int, bytes] | None:
        if name in self.changes:
            return self.changes[name]
        return self.base.get(name)

    def merged(self) -> dict[bytes, tuple[int, bytes]]:
        out = dict(self.base)
        for name, entry in self.changes.items():
            if entry is None:
                out.pop(name, None)
            else:
                out[name] = entry
        return out


_NEW_DIR = (objects.MODE_TREE, b"")


class TreeEditor:
    """Stages file and folder changes below ``memories/`` and encodes the trees
    that changed; untouched files and folders keep their ids."""

    def __init__(self, repo: pygit2.Repository, trees: TreeCache, memories: bytes | None) -> None:
        self.repo = repo
        self.trees = trees
        self._dirs: dict[tuple[str, ...], _Dir] = {}
        self.replace_root(memories)
        self.new: list[objects.PackedObject] = []

    def replace_root(self, memories: bytes | None) -> None:
        """Start over from another ``memories`` tree (a whole-vault restore)."""
        self._root_id = memories
        self._dirs = {(): _Dir(self.trees.get(self.repo, memories) if memories else None)}

    def _dir(self, parts: tuple[str, ...], create: bool) -> _Dir | None:
        found = self._dirs.get(parts)
        if found is not None:
            return found
        parent = self._dir(parts[:-1], create)
        if parent is None:
            return None
        name = parts[-1].encode("utf-8")
        entry = parent.get(name)
        if entry is None:
            if not create:
                return None
            found = _Dir(None)
            parent.changes[name] = _NEW_DIR
        elif entry[0] != objects.MODE_TREE:
            raise ConflictError(f"Error: {MemoryPath(parts)} is a file, not a directory.")
        else:
            found = _Dir(self.trees.get(self.repo, entry[1]))
        self._dirs[parts] = found
        return found

    def get(self, path: MemoryPath) -> tuple[int, bytes] | None:
        """``(mode, id)`` of what is staged at ``path``, or None."""
        if path.is_root:
            return None
        parent = self._dir(path.parts[:-1], create=False)
        return parent.get(path.parts[-1].encode("utf-8")) if parent is not None else None

    def _drop_below(self, path: MemoryPath) -> None:
        n = len(path.parts)
        for key in [k for k in self._dirs if len(k) >= n and k[:n] == path.parts]:
            del self._dirs[key]

    def set(self, path: MemoryPath, entry: tuple[int, bytes]) -> None:
        """Put a blob or tree at ``path``, creating parent folders as needed."""
        parent = self._dir(path.parts[:-1], create=True)
        assert parent is not None
        self._drop_below(path)
        parent.changes[path.parts[-1].encode("utf-8")] = entry

    def write_blob(self, path: MemoryPath, data: bytes) -> None:
        blob = objects.packed(objects.BLOB, data)
        self.new.append(blob)
        self.set(path, (objects.MODE_BLOB, blob.id))

    def delete(self, path: MemoryPath) -> None:
        parent = self._dir(path.parts[:-1], create=False)
        name = path.parts[-1].encode("utf-8")
        if parent is None or parent.get(name) is None:
            raise NotFoundError(f"Error: {path} does not exist.")
        parent.changes[name] = None
        self._drop_below(path)

    def write(self) -> bytes | None:
        """Encode the changed trees bottom-up; returns the new ``memories`` tree
        id, or None when the memory is empty.  Empty folders disappear."""
        result = self._root_id
        for parts in sorted(self._dirs, key=len, reverse=True):
            staged = self._dirs[parts]
            if not staged.changes:
                continue  # read but not changed: the parent keeps its entry
            entries = staged.merged()
            oid = self._encode(entries) if entries else None
            if parts:
                self._dirs[parts[:-1]].changes[parts[-1].encode("utf-8")] = (
                    (objects.MODE_TREE, oid) if oid is not None else None
                )
            else:
                result = oid
        return result

    def _encode(self, entries: dict[bytes, tuple[int, bytes]]) -> bytes | None:
        if not entries:
            return None
        tree = objects.packed(objects.TREE, objects.encode_tree(entries))
        self.new.append(tree)
        self.trees.put(tree.id, entries)
        return tree.id
