"""Reading and editing the memory tree of one commit.

:class:`Snapshot` is a consistent, read-only view of the memory at one commit:
readers never wait for writers because a commit never changes.
:class:`TreeEditor` stages changes on top of a snapshot and writes only the
trees that changed, so untouched files and folders keep their object ids.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from vaultmem.core.crypto import Keyring, plaintext_size
from vaultmem.core.lru import LRU
from vaultmem.core.names import MARKER, MARKER_CONTENT, Names
from vaultmem.core.paths import MemoryPath, parse_stored
from vaultmem.errors import ConflictError, IntegrityError, NotFoundError, VaultError
from vaultmem.git import objects

Kind = Literal["file", "dir"]


ReadRaw = Callable[[bytes], bytes]
Entries = dict[bytes, tuple[int, bytes]]


class SizeCache:
    """Plaintext sizes by object id: blobs from their header, trees by summing.

    Object ids never change meaning, so the cache never needs invalidating; it
    is shared by every snapshot of a vault and safe to share between threads.
    """

    def __init__(self) -> None:
        self._sizes: dict[bytes, int] = {}
        self._counts: dict[bytes, int] = {}

    def blob(self, read: ReadRaw, oid: bytes) -> int:
        size = self._sizes.get(oid)
        if size is None:
            size = plaintext_size(read(oid))
            self._sizes[oid] = size
        return size

    def tree(self, read: ReadRaw, trees: TreeCache, oid: bytes, depth: int = 0) -> int:
        size = self._sizes.get(oid)
        if size is None:
            check_depth(oid, depth)
            size = 0
            for mode, child in trees.get(read, oid).values():
                size += (
                    self.tree(read, trees, child, depth + 1) if mode == objects.MODE_TREE else self.blob(read, child)
                )
            self._sizes[oid] = size
        return size

    def files(self, read: ReadRaw, trees: TreeCache, oid: bytes, depth: int = 0) -> int:
        """How many files a tree holds, at any depth."""
        count = self._counts.get(oid)
        if count is None:
            check_depth(oid, depth)
            count = 0
            for mode, child in trees.get(read, oid).values():
                count += self.files(read, trees, child, depth + 1) if mode == objects.MODE_TREE else 1
            self._counts[oid] = count
        return count


def check_depth(oid: bytes, depth: int) -> None:
    """Refuse a tree nested deeper than any memory path reaches (a vault
    written by something else), before reading it runs out of stack."""
    if depth > objects.MAX_DEPTH:
        raise IntegrityError(
            f"Error: tree {oid.hex()} nests folders deeper than any memory path can ({objects.MAX_DEPTH} levels); "
            "run `vaultmem verify`."
        )


@dataclass(frozen=True)
class Listed:
    """One entry of a directory listing."""

    path: MemoryPath
    kind: Kind
    size: int
    depth: int


def _is_hidden(name: str) -> bool:
    return name.startswith(".") or name == "node_modules"


class Snapshot:
    """The memory as it is in one commit (or the empty memory of a new vault).

    Reads go through raw objects and decoded trees (shared caches), so a
    snapshot of a commit this process just wrote needs no object lookup.
    """

    def __init__(
        self,
        read: ReadRaw,
        keyring: Keyring,
        sizes: SizeCache,
        trees: TreeCache,
        commit_id: bytes | None,
        root: tuple[bytes | None, bool] | None = None,
    ) -> None:
        """``root``, when the caller knows it from an earlier snapshot of the
        same commit: its ``memories`` tree id and whether it seals names
        (:attr:`root` gives it), so the commit and its root are not read again."""
        self.read_raw = read
        self.keyring = keyring
        self.sizes = sizes
        self.trees = trees
        self.commit_id = commit_id
        self.memories_id: bytes | None = None
        # A commit whose names are sealed (see vaultmem.core.names) is read
        # through tokens; real paths go in and come out all the same.
        self.names: Names | None = None
        self._last: tuple[tuple[str, ...], tuple[int, bytes] | None] | None = None
        marked = False
        if root is not None:
            self.memories_id, marked = root
        elif commit_id is not None:
            try:
                tree_id = objects.commit_tree(read(commit_id))
            except ValueError as err:  # main (or the version asked for) moved to a blob, a tree or a tag
                raise IntegrityError(
                    f"Error: version {commit_id.hex()} is {err}: main, or the version asked for, points at "
                    "another kind of object; run `vaultmem verify`."
                ) from err
            entries = trees.get(read, tree_id)
            found = entries.get(b"memories")
            if found is not None and found[0] == objects.MODE_TREE:
                self.memories_id = found[1]
            marked = MARKER in entries
        if marked and commit_id is not None:
            if keyring.names is None:
                raise IntegrityError(
                    f"Error: version {commit_id.hex()} seals its names, but the keyring holds no name key; "
                    "run `vaultmem verify`."
                )
            self.names = keyring.names

    @property
    def root(self) -> tuple[bytes | None, bool]:
        """What a later snapshot of the same commit may be given as ``root``."""
        return self.memories_id, self.names is not None

    @property
    def sealed(self) -> bool:
        """Whether this commit stores sealed names."""
        return self.names is not None

    def stored(self, path: MemoryPath) -> MemoryPath:
        """``path`` as this commit's trees name it."""
        return self.names.seal(path) if self.names is not None else path

    def child_path(self, parent: MemoryPath, name: bytes, entry: tuple[int, bytes]) -> MemoryPath:
        """The real path of the entry ``name`` of the folder ``parent`` (a real
        path).  A sealed name whose every version below was erased stays a token."""
        try:
            text = objects.entry_name(name)
        except ValueError as err:  # a tree vaultmem did not write
            raise IntegrityError(f"Error: the folder {parent} holds an entry {err}; run `vaultmem verify`.") from err
        if self.names is None:
            return parent.child(text)
        sealed = self.names.seal(parent).child(text)
        known = self.names.known(sealed)
        if known is not None:
            return known
        found = self._unseal(sealed, entry)
        if found is None:  # erased: the token stands for the name, and seals back to itself
            found = parent.child(text)
            self.names.alias(found, sealed)
        return found

    def unseal(self, stored: MemoryPath) -> MemoryPath | None:
        """The real path of ``stored`` (a path as this commit's trees name
        it), None if nothing is there or every version that named it was erased."""
        if self.names is None or stored.is_root:
            return stored if self.entry_stored(stored) is not None or stored.is_root else None
        known = self.names.known(stored)
        if known is not None:
            return known
        entry = self.entry_stored(stored)
        return self._unseal(stored, entry) if entry is not None else None

    def _unseal(self, sealed: MemoryPath, entry: tuple[int, bytes]) -> MemoryPath | None:
        """Read the name of ``sealed`` from a file version at or below it."""
        assert self.names is not None
        for oid in self._blobs_below(entry):
            try:
                bound, _ = self.keyring.open_any(self.read_raw(oid))
                real = MemoryPath(parse_stored(bound).parts[: len(sealed.parts)])
            except VaultError:
                continue  # erased, or not a version of a name: try another
            if self.names.seal(real) == sealed:
                return real
        return None

    def _blobs_below(self, entry: tuple[int, bytes], depth: int = 0) -> Iterator[bytes]:
        mode, oid = entry
        if mode != objects.MODE_TREE:
            yield oid
            return
        check_depth(oid, depth)
        for child in self.trees.get(self.read_raw, oid).values():
            yield from self._blobs_below(child, depth + 1)

    @property
    def id(self) -> str | None:
        return self.commit_id.hex() if self.commit_id is not None else None

    def entry(self, path: MemoryPath) -> tuple[int, bytes] | None:
        """``(mode, id)`` of the file or folder at ``path``, as a tree holds it.
        The last answer is kept: a command asks for one path's kind, then reads it."""
        last = self._last
        if last is not None and last[0] == path.parts:
            return last[1]
        found = self.entry_stored(self.stored(path))
        self._last = (path.parts, found)  # one tuple: a thread reading it sees a whole answer
        return found

    def entry_stored(self, path: MemoryPath) -> tuple[int, bytes] | None:
        """:meth:`entry` of a path as this commit's trees name it."""
        if self.memories_id is None:
            return None
        current = (objects.MODE_TREE, self.memories_id)
        for part in path.parts:
            if current[0] != objects.MODE_TREE:
                return None
            found = self.trees.get(self.read_raw, current[1]).get(part.encode("utf-8"))
            if found is None:
                return None
            current = found
        return current

    def kind(self, path: MemoryPath) -> Kind | None:
        """``"file"``, ``"dir"`` or None.  ``/memories`` is always a directory."""
        if path.is_root:
            return "dir"
        found = self.entry(path)
        if found is None:
            return None
        return "dir" if found[0] == objects.MODE_TREE else "file"

    def file_above(self, path: MemoryPath) -> MemoryPath | None:
        """The file standing where one of ``path``'s parent folders must be, if any."""
        for depth in range(1, len(path.parts)):
            ancestor = MemoryPath(path.parts[:depth])
            kind = self.kind(ancestor)
            if kind == "file":
                return ancestor
            if kind is None:
                return None
        return None

    def read_bytes(self, path: MemoryPath) -> bytes:
        found = self.entry(path)
        if found is None or found[0] == objects.MODE_TREE:
            raise NotFoundError(f"Error: {path} does not exist or is not a file.")
        if self.names is not None:  # bound to the real path, asked for by it or by its tokens
            return self.keyring.open_stored(self.stored(path).text, self.read_raw(found[1]), path.text)
        return self.keyring.open(path.text, self.read_raw(found[1]))

    def read_text(self, path: MemoryPath) -> str:
        return self.read_bytes(path).decode("utf-8")

    def size(self, path: MemoryPath) -> int:
        found = self.entry(path)
        if found is None:
            return 0
        if found[0] == objects.MODE_TREE:
            return self.sizes.tree(self.read_raw, self.trees, found[1])
        return self.sizes.blob(self.read_raw, found[1])

    def count_files(self) -> int:
        """How many files the memory holds."""
        if self.memories_id is None:
            return 0
        return self.sizes.files(self.read_raw, self.trees, self.memories_id)

    def files(self, path: MemoryPath) -> Iterator[tuple[MemoryPath, bytes]]:
        """Every file at or below ``path`` with its blob id, depth first."""
        found = self.entry(path)
        if found is None:
            return
        yield from self._files_below(path, found)

    def _files_below(self, path: MemoryPath, entry: tuple[int, bytes]) -> Iterator[tuple[MemoryPath, bytes]]:
        mode, oid = entry
        if mode != objects.MODE_TREE:
            yield path, oid
            return
        check_depth(oid, len(path.parts))
        for name, child in self.trees.get(self.read_raw, oid).items():
            yield from self._files_below(self.child_path(path, name, child), child)

    def listing(self, path: MemoryPath, depth: int = 2, hidden: bool = False) -> list[Listed]:
        """Entries up to ``depth`` levels below a directory, sorted by name, a
        folder's contents right after it.  Hidden names (``.x``) and
        ``node_modules`` are left out with their contents unless ``hidden``."""
        found = self.entry(path)
        out: list[Listed] = []
        if found is not None and found[0] == objects.MODE_TREE:
            self._list(found[1], path, 1, depth, hidden, out)
        return out

    def _list(self, tree: bytes, path: MemoryPath, level: int, depth: int, hidden: bool, out: list[Listed]) -> None:
        items = sorted(
            (
                (self.child_path(path, name, entry), entry)
                for name, entry in self.trees.get(self.read_raw, tree).items()
            ),
            key=lambda item: item[0].name,
        )
        for child, (mode, oid) in items:
            if not hidden and _is_hidden(child.name):
                continue
            if mode == objects.MODE_TREE:
                out.append(Listed(child, "dir", self.sizes.tree(self.read_raw, self.trees, oid), level))
                if level < depth:
                    self._list(oid, child, level + 1, depth, hidden, out)
            else:
                out.append(Listed(child, "file", self.sizes.blob(self.read_raw, oid), level))


class RecentObjects:
    """The objects a vault wrote lately, by id, bounded by their total size
    (least recently used dropped first): reading what was just written (a
    view, an edit, a rename of a new file) needs no lookup in git's packs.
    An id always names the same bytes, so nothing here goes stale; shared by
    threads like the other caches."""

    def __init__(self, limit: int = 8 << 20) -> None:
        self._objects: LRU[bytes, bytes] = LRU(limit, weight=len)

    @property
    def limit(self) -> int:
        """The bound (bytes of objects); a new one applies from the next addition."""
        return self._objects.limit

    @limit.setter
    def limit(self, limit: int) -> None:
        self._objects.limit = limit

    def get(self, oid: bytes) -> bytes | None:
        return self._objects.get(oid)

    def add(self, written: list[objects.PackedObject]) -> None:
        for obj in written:
            self._objects.put(obj.id, obj.data)


class TreeCache:
    """Decoded tree entries by tree id, at most ``limit`` trees (least
    recently used dropped first); shared by the snapshots and the write path."""

    def __init__(self, limit: int = 4096) -> None:
        self._trees: LRU[bytes, Entries] = LRU(limit)

    @property
    def limit(self) -> int:
        """The bound (trees); a new one applies from the next addition."""
        return self._trees.limit

    @limit.setter
    def limit(self, limit: int) -> None:
        self._trees.limit = limit

    def get(self, read: ReadRaw, oid: bytes) -> Entries:
        entries = self._trees.get(oid)
        if entries is None:
            data = read(oid)
            entries = objects.decode_tree(data)
            if objects.encode_tree(entries) != data:  # an entry the decoder could not read would vanish
                raise IntegrityError(f"Error: tree {oid.hex()} is malformed; run `vaultmem verify`.")
            self.put(oid, entries)
        return entries

    def put(self, oid: bytes, entries: Entries) -> None:
        self._trees.put(oid, entries)


# Below this many entries, encoding a tree afresh costs about what patching it does.
PATCH_MIN = 32


class Layouts:
    """Encoded trees of the write path, with where each entry's id sits, so a
    change that only gives existing entries new ids (an edited file, the
    folders above it) patches 20 bytes per entry instead of encoding and
    sorting a large folder again.  At most ``limit`` trees (least recently
    used dropped first); used under the writer lock."""

    def __init__(self, limit: int = 256) -> None:
        self._layouts: LRU[bytes, tuple[bytes, dict[bytes, int] | None]] = LRU(limit)

    @property
    def limit(self) -> int:
        """The bound (trees); a new one applies from the next addition."""
        return self._layouts.limit

    @limit.setter
    def limit(self, limit: int) -> None:
        self._layouts.limit = limit

    def put(self, oid: bytes, raw: bytes, id_at: dict[bytes, int] | None = None) -> None:
        self._layouts.put(oid, (raw, id_at))

    def get(self, read: ReadRaw, oid: bytes, names: Entries) -> tuple[bytes, dict[bytes, int]] | None:
        """The tree ``oid`` (whose decoded entries are ``names``) and its id offsets."""
        raw, id_at = self._layouts.get(oid) or (read(oid), None)
        if id_at is None:
            id_at = objects.tree_id_offsets(raw)
            if id_at.keys() != names.keys():
                return None  # not the tree its entries were decoded from: encode instead
            self.put(oid, raw, id_at)
        return raw, id_at


class _Dir:
    """A directory being edited: its entries in git (if any), the id of the
    tree they came from, and staged changes."""

    __slots__ = ("base", "base_id", "changes")

    def __init__(self, base: dict[bytes, tuple[int, bytes]] | None, base_id: bytes | None = None) -> None:
        self.base = base or {}
        self.base_id = base_id if base else None
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

    def __init__(
        self,
        read: ReadRaw,
        trees: TreeCache,
        memories: bytes | None,
        layouts: Layouts | None = None,
        names: Names | None = None,
    ) -> None:
        self.read = read
        self.trees = trees
        self.layouts = layouts
        self.names = names  # sealed names: paths go in real and are stored sealed
        self._dirs: dict[tuple[str, ...], _Dir] = {}
        self.replace_root(memories)
        self.new: list[objects.PackedObject] = []

    def replace_root(self, memories: bytes | None) -> None:
        """Start over from another ``memories`` tree (a whole-vault restore)."""
        self._root_id = memories
        self._dirs = {(): _Dir(self.trees.get(self.read, memories) if memories else None, memories)}

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
            raise ConflictError(f"Error: {self._real(MemoryPath(parts))} is a file, not a directory.")
        else:
            found = _Dir(self.trees.get(self.read, entry[1]), entry[1])
        self._dirs[parts] = found
        return found

    def _stored(self, path: MemoryPath) -> MemoryPath:
        return self.names.seal(path) if self.names is not None else path

    def _real(self, stored: MemoryPath) -> MemoryPath:
        return (self.names.known(stored) or stored) if self.names is not None else stored

    def get(self, path: MemoryPath) -> tuple[int, bytes] | None:
        """``(mode, id)`` of what is staged at ``path``, or None."""
        if path.is_root:
            return None
        path = self._stored(path)
        parent = self._dir(path.parts[:-1], create=False)
        return parent.get(path.parts[-1].encode("utf-8")) if parent is not None else None

    def _drop_below(self, path: MemoryPath) -> None:
        n = len(path.parts)
        for key in [k for k in self._dirs if len(k) >= n and k[:n] == path.parts]:
            del self._dirs[key]

    def set(self, path: MemoryPath, entry: tuple[int, bytes]) -> None:
        """Put a blob or tree at ``path``, creating parent folders as needed."""
        path = self._stored(path)
        parent = self._dir(path.parts[:-1], create=True)
        assert parent is not None
        self._drop_below(path)
        parent.changes[path.parts[-1].encode("utf-8")] = entry

    def write_blob(self, path: MemoryPath, data: bytes) -> None:
        blob = objects.packed(objects.BLOB, data)
        self.new.append(blob)
        self.set(path, (objects.MODE_BLOB, blob.id))

    def delete(self, path: MemoryPath) -> None:
        stored = self._stored(path)
        parent = self._dir(stored.parts[:-1], create=False)
        name = stored.parts[-1].encode("utf-8")
        if parent is None or parent.get(name) is None:
            raise NotFoundError(f"Error: {path} does not exist.")
        parent.changes[name] = None
        self._drop_below(stored)

    def write(self) -> bytes | None:
        """Encode the changed trees bottom-up; returns the new ``memories`` tree
        id, or None when the memory is empty.  Empty folders disappear."""
        result = self._root_id
        for parts in sorted(self._dirs, key=len, reverse=True):
            staged = self._dirs[parts]
            if not staged.changes:
                continue  # read but not changed: the parent keeps its entry
            entries = staged.merged()
            oid = self._encode(entries, staged) if entries else None
            if parts:
                self._dirs[parts[:-1]].changes[parts[-1].encode("utf-8")] = (
                    (objects.MODE_TREE, oid) if oid is not None else None
                )
            else:
                result = oid
        return result

    def _encode(self, entries: dict[bytes, tuple[int, bytes]], staged: _Dir) -> bytes | None:
        if not entries:
            return None
        patched = self._patched(staged)
        if patched is None:
            # Cached in git's order: the next change to this folder merges into a
            # sorted list (an added name at its end), which sorts in linear time.
            entries = objects.in_tree_order(entries)
        raw, id_at = patched if patched is not None else (objects.encode_ordered(entries), None)
        tree = objects.packed(objects.TREE, raw)
        self.new.append(tree)
        self.trees.put(tree.id, entries)
        if self.layouts is not None and len(entries) >= PATCH_MIN:
            self.layouts.put(tree.id, raw, id_at)
        return tree.id

    def _patched(self, staged: _Dir) -> tuple[bytes, dict[bytes, int]] | None:
        """The new tree as the old one with new ids patched in, when every
        change gives an existing entry a new id of the same kind (names and
        modes, and so the order and every offset, stay as they are)."""
        if self.layouts is None or staged.base_id is None or len(staged.base) < PATCH_MIN:
            return None
        new_ids: list[tuple[bytes, bytes]] = []
        for name, entry in staged.changes.items():
            old = staged.base.get(name)
            if entry is None or old is None or entry[0] != old[0]:
                return None
            new_ids.append((name, entry[1]))
        layout = self.layouts.get(self.read, staged.base_id, staged.base)
        if layout is None:
            return None
        raw, id_at = layout
        patched = bytearray(raw)
        for name, oid in new_ids:
            patched[id_at[name] : id_at[name] + 20] = oid
        return bytes(patched), id_at


def root_tree(
    memories: bytes | None, *, sealed: bool, marker_known: bool
) -> tuple[objects.PackedObject, list[objects.PackedObject]]:
    """The root tree of a commit whose memory tree is ``memories`` and the
    objects to write with it: with sealed names, the root also holds the
    marker (written once, with the first commit that needs it)."""
    entries: dict[bytes, tuple[int, bytes]] = {}
    made: list[objects.PackedObject] = []
    if memories is not None:
        entries[b"memories"] = (objects.MODE_TREE, memories)
    if sealed:
        marker = objects.packed(objects.BLOB, MARKER_CONTENT)
        entries[MARKER] = (objects.MODE_BLOB, marker.id)
        if not marker_known:
            made.append(marker)
    root = objects.packed(objects.TREE, objects.encode_tree(entries))
    return root, [*made, root]


def relay(snap: Snapshot, editor: TreeEditor) -> None:
    """Stage every file of ``snap`` (real names) again under its sealed path."""
    editor.replace_root(None)
    for path, oid in snap.files(MemoryPath(())):
        editor.set(path, (objects.MODE_BLOB, oid))
