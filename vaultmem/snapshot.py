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

from .crypto import Keyring, plaintext_size
from .errors import ConflictError, NotFoundError
from .paths import MemoryPath

Kind = Literal["file", "dir"]
BLOB = pygit2.enums.FileMode.BLOB
TREE = pygit2.enums.FileMode.TREE
Entry = tuple[pygit2.Oid, int]


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

    def entry(self, path: MemoryPath) -> Entry | None:
        obj = self._object(path)
        if obj is None:
            return None
        return obj.id, obj.filemode if obj.filemode is not None else TREE

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


class _Dir:
    """A directory being edited: its tree in git (if any) plus staged changes."""

    __slots__ = ("base", "changes")

    def __init__(self, base: pygit2.Tree | None) -> None:
        self.base = base
        self.changes: dict[str, Entry | None] = {}

    def get(self, name: str) -> Entry | None:
        if name in self.changes:
            return self.changes[name]
        if self.base is not None and name in self.base:
            item = self.base[name]
            return item.id, item.filemode if item.filemode is not None else TREE
        return None


class TreeEditor:
    """Stages file and folder changes below ``memories/`` and writes new trees."""

    def __init__(self, repo: pygit2.Repository, memories: pygit2.Tree | None) -> None:
        self.repo = repo
        self._dirs: dict[tuple[str, ...], _Dir] = {(): _Dir(memories)}
        self.written: list[pygit2.Oid] = []

    def _dir(self, parts: tuple[str, ...], create: bool) -> _Dir | None:
        found = self._dirs.get(parts)
        if found is not None:
            return found
        parent = self._dir(parts[:-1], create)
        if parent is None:
            return None
        entry = parent.get(parts[-1])
        if entry is None:
            if not create:
                return None
            found = _Dir(None)
            parent.changes[parts[-1]] = (pygit2.Oid(raw=b"\0" * 20), TREE)
        elif entry[1] != TREE:
            raise ConflictError(f"Error: {MemoryPath(parts[:-1]).child(parts[-1])} is a file, not a directory.")
        else:
            tree = self.repo[entry[0]]
            assert isinstance(tree, pygit2.Tree)
            found = _Dir(tree)
        self._dirs[parts] = found
        return found

    def replace_root(self, memories: pygit2.Tree | None) -> None:
        """Start over from another ``memories`` tree (a whole-vault restore)."""
        self._dirs = {(): _Dir(memories)}

    def get(self, path: MemoryPath) -> Entry | None:
        if path.is_root:
            return None
        parent = self._dir(path.parts[:-1], create=False)
        return parent.get(path.parts[-1]) if parent is not None else None

    def set(self, path: MemoryPath, entry: Entry) -> None:
        """Put a blob or tree at ``path``, creating parent folders as needed."""
        parent = self._dir(path.parts[:-1], create=True)
        assert parent is not None
        parent.changes[path.parts[-1]] = entry
        if entry[1] == TREE:
            # Any staged edits below the replaced folder are void now.
            for key in [k for k in self._dirs if len(k) > len(path.parts) and k[: len(path.parts)] == path.parts]:
                del self._dirs[key]
            self._dirs.pop(path.parts, None)

    def write_blob(self, path: MemoryPath, data: bytes) -> None:
        oid = self.repo.odb.write(pygit2.enums.ObjectType.BLOB, data)
        self.written.append(oid)
        self.set(path, (oid, BLOB))

    def delete(self, path: MemoryPath) -> None:
        parent = self._dir(path.parts[:-1], create=False)
        if parent is None or parent.get(path.parts[-1]) is None:
            raise NotFoundError(f"Error: {path} does not exist.")
        parent.changes[path.parts[-1]] = None
        for key in [k for k in self._dirs if k[: len(path.parts)] == path.parts]:
            del self._dirs[key]

    def write(self) -> pygit2.Oid | None:
        """Write the changed trees bottom-up; returns the new ``memories`` tree
        id, or None when the memory is empty.  Empty folders disappear."""
        root = self._dirs[()]
        result = root.base.id if root.base is not None and len(root.base) else None
        for parts in sorted(self._dirs, key=len, reverse=True):
            staged = self._dirs[parts]
            if not staged.changes:
                continue  # read but not changed: the parent keeps its entry
            builder = self.repo.TreeBuilder(staged.base) if staged.base is not None else self.repo.TreeBuilder()
            for name, entry in staged.changes.items():
                if entry is None:
                    if builder.get(name) is not None:
                        builder.remove(name)
                else:
                    builder.insert(name, entry[0], entry[1])
            oid = builder.write() if len(builder) else None
            if oid is not None:
                self.written.append(oid)
            if parts:
                self._dirs[parts[:-1]].changes[parts[-1]] = (oid, TREE) if oid is not None else None
            else:
                result = oid
        return result
