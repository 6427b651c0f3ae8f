"""The fast paths that keep long histories cheap give the same answers as the
slow, obvious ones: history(path) against a tree-by-tree comparison of every
commit, the in-memory list of main's commits against libgit2's ancestry check,
verify's compare-with-parent walk against tampering anywhere in the history,
and pack merging from memory against merging from disk."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pygit2
import pytest

from tests.conftest import FakeClock
from vaultmem import NotFoundError, Vault, VaultMemoryTool
from vaultmem.core.paths import parse
from vaultmem.git import objects, snapshot, upkeep
from vaultmem.repo.history import _may_touch
from vaultmem.repo.verify import Verifier, VerifyReport

FILES = ["/memories/a.txt", "/memories/notes/b.txt", "/memories/notes/deep/c.txt", "/memories/other/d.txt"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def entry_at(commit: pygit2.Commit, git_path: str) -> pygit2.Oid | None:
    try:
        return commit.tree[git_path].id
    except KeyError:
        return None


def brute_force_history(repo: pygit2.Repository, head: pygit2.Oid, path: str) -> list[str]:
    """Every commit whose tree differs from its parent's at ``path`` (no renames)."""
    git_path = parse(path).git_path()
    out = []
    for commit in repo.walk(head, pygit2.enums.SortMode.TOPOLOGICAL):
        mine = entry_at(commit, git_path)
        parents = [entry_at(p, git_path) for p in commit.parents] or [None]
        if any(mine != theirs for theirs in parents):
            out.append(str(commit.id))
    return out


def random_session(vault: Vault, clock: FakeClock, seed: int, steps: int = 60) -> None:
    """Every kind of commit vaultmem writes, on a few paths, with no renames
    (renames are followed, which the brute force does not do)."""
    rng = random.Random(seed)
    tool = VaultMemoryTool(vault, actor="bot")
    for step in range(steps):
        clock.advance(60)
        path = rng.choice(FILES)
        roll = rng.random()
        if roll < 0.45:
            if vault.snapshot().kind(parse(path)) == "file":
                tool.call({"command": "str_replace", "path": path, "old_str": "version", "new_str": "version"})
            else:
                tool.call({"command": "create", "path": path, "file_text": f"version {step}\n"})
        elif roll < 0.6:
            folder = rng.choice(["/memories/notes", "/memories/other", "/memories/notes/deep"])
            if vault.snapshot().kind(parse(folder)) is not None:
                tool.call({"command": "delete", "path": folder})
        elif roll < 0.75 and vault.history(limit=3):
            older = vault.history()[rng.randrange(len(vault.history()))].id
            vault.restore(older, path=rng.choice([path, "/memories", "/memories/notes"]), actor="operator")
        elif roll < 0.85 and vault.history(limit=1):
            vault.undo(actor="operator")
        elif roll < 0.95 and vault.history(limit=1):
            vault.expire("30m", actor="sweeper", now=clock.now)
        else:
            vault.rotate_key(reencrypt=True, actor="admin")


@pytest.mark.parametrize("seed", range(6))
def test_history_of_a_path_equals_a_tree_comparison_of_every_commit(vault: Vault, clock: FakeClock, seed: int) -> None:
    random_session(vault, clock, seed)
    head = vault.repo.references["refs/heads/main"].target
    for path in [*FILES, "/memories/notes", "/memories/notes/deep", "/memories/other", "/memories", "/memories/x"]:
        assert [v.id for v in vault.history(path)] == brute_force_history(vault.repo, head, path), path


def test_a_commit_without_path_trailers_is_compared_tree_by_tree(vault: Vault, vault_path: Path, call) -> None:
    """A commit made outside vaultmem names no paths; history must still list
    it when it changed the path (verify reports it as unsealed)."""
    call(command="create", path="/memories/a.txt", file_text="one\n")
    repo = vault.repo
    parent = repo[repo.references["refs/heads/main"].target]
    other = repo.create_blob(b"not vaultmem's\n")
    builder = repo.TreeBuilder(parent.tree["memories"])
    builder.insert("a.txt", other, pygit2.enums.FileMode.BLOB)
    root = repo.TreeBuilder(parent.tree)
    root.insert("memories", builder.write(), pygit2.enums.FileMode.TREE)
    sig = pygit2.Signature("intruder", "intruder@example.com")
    forged = repo.create_commit(None, sig, sig, "plain git commit\n", root.write(), [parent.id])
    git(vault_path, "update-ref", "refs/heads/main", str(forged))
    assert [v.id for v in vault.history("/memories/a.txt")] == [str(forged), str(parent.id)]
    assert not vault.verify().ok


@pytest.mark.parametrize(
    ("named", "target", "expected"),
    [
        (["/memories/a.txt"], "/memories/a.txt", True),
        (["/memories/notes"], "/memories/notes/b.txt", True),  # a folder above the target
        (["/memories/notes/b.txt"], "/memories/notes", True),  # something below the target
        (["/memories"], "/memories/notes/b.txt", True),  # the whole memory
        (["/memories/a.txt", "/memories/b.txt"], "/memories/b.txt", True),  # a rename's second path
        (["/memories/notes2/b.txt"], "/memories/notes", False),  # a sibling sharing a prefix
        (["/memories/note"], "/memories/notes/b.txt", False),
        (["/memories/a.txt"], "/memories/a.txt.bak", False),
        ([], "/memories/a.txt", True),  # no trailers: look at the trees
    ],
)
def test_path_trailers_decide_which_commits_need_their_trees_read(
    named: list[str], target: str, expected: bool
) -> None:
    message = "memory: x\n\nVaultmem-Command: create\n" + "".join(f"Vaultmem-Path: {p}\n" for p in named)
    message += "Vaultmem-Actor: bot\n"
    assert _may_touch(message, target) is expected


def test_versions_stay_resolvable_as_history_grows(vault: Vault, call) -> None:
    ids = []
    for i in range(5):
        call(command="create", path=f"/memories/f{i}.txt", file_text="x\n")
        ids.append(vault.history(limit=1)[0].id)
        for earlier in ids:  # each call walks only the commits made since the last
            assert vault.resolve(earlier).id == earlier
    assert vault.read("/memories/f0.txt", at=ids[0]) == "x\n"


def test_a_version_dropped_from_main_is_refused_after_main_moves_back(vault: Vault, vault_path: Path, call) -> None:
    for i in range(4):
        call(command="create", path=f"/memories/f{i}.txt", file_text="x\n")
    versions = [v.id for v in vault.history()]
    assert vault.resolve(versions[0]).id == versions[0]  # the newest, remembered as on main
    git(vault_path, "update-ref", "refs/heads/main", versions[2])
    for dropped in versions[:2]:
        with pytest.raises(NotFoundError, match="not a version"):
            vault.resolve(dropped)
    assert vault.resolve(versions[3]).id == versions[3]


def test_a_rewritten_main_is_walked_again(vault: Vault, vault_path: Path, call, key: str) -> None:
    """Main replaced by another line of commits that shares an older part."""
    for i in range(3):
        call(command="create", path=f"/memories/f{i}.txt", file_text="x\n")
    first, second, third = reversed([v.id for v in vault.history()])
    assert vault.resolve(third).id == third
    git(vault_path, "update-ref", "refs/heads/main", first)
    call(command="create", path="/memories/g.txt", file_text="y\n")  # a new line from the first commit
    assert vault.resolve(first).id == first
    for gone in (second, third):
        with pytest.raises(NotFoundError, match="not a version"):
            vault.resolve(gone)


def test_verify_finds_a_damaged_blob_that_later_commits_keep(vault: Vault, vault_path: Path, call) -> None:
    """A file written once and never changed is checked in the commit that
    wrote it; later commits carry the same id and are not re-read."""
    call(command="create", path="/memories/keep.txt", file_text="original\n")
    for i in range(5):
        call(command="create", path=f"/memories/n{i}.txt", file_text="x\n")
    assert vault.verify().ok
    repo = vault.repo
    head = repo[repo.references["refs/heads/main"].target]
    blob_id = head.tree["memories/keep.txt"].id
    moved = repo.create_blob(head.tree["memories/n0.txt"].data)
    builder = repo.TreeBuilder(head.tree["memories"])
    builder.insert("keep.txt", moved, pygit2.enums.FileMode.BLOB)  # another path's blob, moved here
    root = repo.TreeBuilder(head.tree)
    root.insert("memories", builder.write(), pygit2.enums.FileMode.TREE)
    sig = pygit2.Signature("x", "x@example.com")
    forged = repo.create_commit(None, sig, sig, "memory: create /memories/keep.txt\n", root.write(), [head.id])
    git(vault_path, "update-ref", "refs/heads/main", str(forged))
    report = vault.verify()
    assert any(f.kind == "blob" and f.path == "/memories/keep.txt" for f in report.findings)
    assert blob_id != moved


def test_verify_memory_does_not_hold_every_tree(vault: Vault, call) -> None:
    for i in range(40):
        call(command="create", path=f"/memories/d{i % 4}/f{i}.txt", file_text=f"{i}\n")
    report = vault.verify()
    assert report.ok and report.commits == 40 and report.blobs == 40
    assert report.trees >= 40 * 3  # root, memories and one folder are new in every commit


def test_merging_from_memory_writes_the_same_pack_as_merging_from_disk(tmp_path: Path) -> None:
    def build(where: Path, forget: bool) -> bytes:
        repo = pygit2.init_repository(str(where), bare=True)
        objects_dir = Path(repo.path) / "objects"
        for i in range(5):
            pack = objects.build_pack([objects.packed(objects.BLOB, b"blob %d\n" % i)])
            (objects_dir / "pack" / f"pack-{pack.name}.pack").write_bytes(pack.data)
            (objects_dir / "pack" / f"pack-{pack.name}.idx").write_bytes(pack.idx)
            objects.remember(pack)
            if forget:
                objects._RECENT_PACKS.clear()
        packs = objects.list_packs(objects_dir)
        merged = objects.merge(packs)
        assert merged is not None and len(merged[1]) == 5
        return merged[0].data

    assert build(tmp_path / "memory", forget=False) == build(tmp_path / "disk", forget=True)


def test_packs_over_the_merge_limit_are_left_as_they_are(
    vault: Vault, vault_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upkeep, "MERGE_LIMIT", 40)
    tool = VaultMemoryTool(vault, actor="bot")
    for i in range(200):
        tool.call({"command": "create", "path": f"/memories/f{i}.txt", "file_text": "x\n"})
    vault.close()  # waits for the upkeep after the last write
    counts = sorted(p.count for p in objects.list_packs(vault_path / "objects"))
    assert max(counts) > 40  # merges happened, some grew past the limit ...
    big = {p.pack for p in objects.list_packs(vault_path / "objects") if p.count > 40}
    for i in range(100):
        tool.call({"command": "create", "path": f"/memories/g{i}.txt", "file_text": "y\n"})
    vault.close()
    after = {p.pack for p in objects.list_packs(vault_path / "objects")}
    assert big <= after  # ... and those were never merged again
    assert git(vault_path, "fsck", "--strict") == ""
    assert len(vault.history()) == 300


def test_a_commit_with_a_damaged_parent_line_is_checked_against_nothing(vault: Vault, call) -> None:
    """A parent line that is not an id cannot stop verify: the commit's whole
    tree is checked, and its missing seal is reported."""
    call(command="create", path="/memories/a.txt", file_text="one\n")
    repo = vault.repo
    head = repo[repo.references["refs/heads/main"].target]
    raw = b"tree %s\nparent not-an-id\nauthor x <x@x> 0 +0000\ncommitter x <x@x> 0 +0000\n\nmemory: x\n" % (
        str(head.tree_id).encode()
    )
    oid = repo.odb.write(pygit2.enums.ObjectType.COMMIT, raw)
    report = VerifyReport()
    Verifier(repo, vault.keyring, report).commit(oid)
    assert report.commits == 1 and report.blobs == 1  # a.txt decrypted: nothing was skipped
    assert any(f.kind == "seal" for f in report.findings)


def canonical_trees(repo: pygit2.Repository, tree: pygit2.Tree) -> int:
    """Checks every tree below ``tree`` is byte for byte what encoding its
    entries afresh gives; returns how many trees it checked."""
    raw = repo.odb.read(tree.id)[1]
    assert objects.encode_tree(objects.decode_tree(raw)) == raw
    return 1 + sum(canonical_trees(repo, child) for child in tree if isinstance(child, pygit2.Tree))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_patched_trees_equal_trees_encoded_afresh(vault: Vault, vault_path: Path, clock: FakeClock, seed: int) -> None:
    """Large folders are written by patching new ids into the old tree; every
    tree must still be exactly the canonical encoding of its entries, and the
    memory exactly what the edits made it."""
    rng = random.Random(seed)
    tool = VaultMemoryTool(vault, actor="bot")
    names = [f"/memories/big/n{i:03d}.txt" for i in range(snapshot.PATCH_MIN + 8)]
    expected: dict[str, str] = {}
    for name in names:
        tool.call({"command": "create", "path": name, "file_text": "v0\n"})
        expected[name] = "v0\n"
    repo = pygit2.Repository(str(vault_path))
    for step in range(40):
        clock.advance(1)
        roll = rng.random()
        present = sorted(expected)
        if roll < 0.6:
            name = rng.choice(present)
            tool.call({"command": "str_replace", "path": name, "old_str": expected[name], "new_str": f"v{step}\n"})
            expected[name] = f"v{step}\n"
        elif roll < 0.75:
            name = rng.choice(present)
            tool.call({"command": "delete", "path": name})
            del expected[name]
        elif roll < 0.9:
            name = f"/memories/big/m{step:03d}.txt"
            tool.call({"command": "create", "path": name, "file_text": "new\n"})
            expected[name] = "new\n"
        else:
            old = rng.choice(present)
            new = f"/memories/big/r{step:03d}.txt"
            tool.call({"command": "rename", "old_path": old, "new_path": new})
            expected[new] = expected.pop(old)
        head = repo.revparse_single("refs/heads/main")
        assert canonical_trees(repo, head.tree) >= 3
        assert {e.path: vault.read(e.path) for e in vault.listing() if e.kind == "file"} == expected
    git(vault_path, "fsck", "--strict")


def test_a_patch_is_used_for_edits_of_existing_files(vault: Vault, call) -> None:
    """The patch path is taken (else the test above proves nothing about it)."""
    for i in range(snapshot.PATCH_MIN):
        call(command="create", path=f"/memories/big/f{i}.txt", file_text="a\n")
    before = vault._trees.get(vault._read_raw, vault.snapshot().entry(parse("/memories/big"))[1])  # type: ignore[index]
    patched: list[bytes] = []
    real = snapshot.TreeEditor._patched

    def spy(self: snapshot.TreeEditor, staged: snapshot._Dir) -> tuple[bytes, dict[bytes, int]] | None:
        out = real(self, staged)
        if out is not None:
            patched.append(out[0])
        return out

    snapshot.TreeEditor._patched = spy  # type: ignore[method-assign]
    try:
        call(command="str_replace", path="/memories/big/f3.txt", old_str="a", new_str="b")
    finally:
        snapshot.TreeEditor._patched = real  # type: ignore[method-assign]
    assert len(patched) == 1  # the big folder; the small root is encoded afresh
    after = objects.decode_tree(patched[0])
    assert after.keys() == before.keys()
    assert [n for n in after if after[n] != before[n]] == [b"f3.txt"]


def test_a_layout_that_does_not_match_its_entries_is_not_patched() -> None:
    raw = objects.encode_tree({b"a": (objects.MODE_BLOB, b"\1" * 20), b"b": (objects.MODE_BLOB, b"\2" * 20)})
    layouts = snapshot.Layouts()
    assert layouts.get(lambda oid: raw, b"t" * 20, {b"a": (objects.MODE_BLOB, b"\1" * 20)}) is None
    found = layouts.get(lambda oid: raw, b"t" * 20, objects.decode_tree(raw))
    assert found is not None and found[0] == raw and found[1] == {b"a": 9, b"b": 38}  # "100644 a" and a NUL: 9 bytes


def test_a_file_restored_over_a_folder_of_the_same_name_is_not_patched(vault: Vault, vault_path: Path, call) -> None:
    """Same name, another kind: the mode and the order change, so the tree is encoded afresh."""
    for i in range(snapshot.PATCH_MIN):
        call(command="create", path=f"/memories/big/f{i}.txt", file_text="a\n")
    call(command="create", path="/memories/big/x", file_text="a file\n")
    as_file = vault.history(limit=1)[0].id
    call(command="delete", path="/memories/big/x")
    call(command="create", path="/memories/big/x/inside.txt", file_text="now a folder\n")
    call(command="create", path="/memories/big/x-", file_text="sorts between x and x/\n")
    vault.restore(as_file, path="/memories/big/x", actor="operator")
    assert vault.read("/memories/big/x") == "a file\n"
    assert vault.read("/memories/big/x-") == "sorts between x and x/\n"
    repo = pygit2.Repository(str(vault_path))
    canonical_trees(repo, repo.revparse_single("refs/heads/main").tree)
    git(vault_path, "fsck", "--strict")


def test_recent_objects_keep_the_newest_within_their_size_limit() -> None:
    recent = snapshot.RecentObjects(limit=10)
    first = [objects.packed(objects.BLOB, b"aaaa"), objects.packed(objects.BLOB, b"bbbb")]
    recent.add(first)
    assert recent.get(first[0].id) == b"aaaa" and recent.get(first[1].id) == b"bbbb"
    newer = objects.packed(objects.BLOB, b"cccc")
    recent.add([newer, first[1]])  # one new object, one already held
    assert recent.get(first[0].id) is None  # the oldest went: 12 bytes exceeded the limit of 10
    assert recent.get(first[1].id) == b"bbbb" and recent.get(newer.id) == b"cccc"


def test_a_file_renamed_long_after_it_was_written_is_read_from_git(vault: Vault, vault_path: Path, key: str) -> None:
    """Past the recent objects, reads go to the packs (checked by libgit2)."""
    tool = VaultMemoryTool(vault, actor="bot")
    tool.call({"command": "create", "path": "/memories/old.txt", "file_text": "kept\n"})
    vault._recent = snapshot.RecentObjects(limit=0)  # as if many writes came after it
    tool.call({"command": "rename", "old_path": "/memories/old.txt", "new_path": "/memories/new.txt"})
    assert Vault.open(vault_path, key=key).read("/memories/new.txt") == "kept\n"


def test_a_tree_the_write_path_encoded_is_cached_in_gits_order(vault: Vault, call) -> None:
    """The next write merges its change into that order, so encoding a large
    folder again sorts a nearly sorted list, whatever order names came in."""
    names = [f"{random.Random(7).getrandbits(64) ^ n:016x}.md" for n in range(40)]
    for name in names:
        call(command="create", path=f"/memories/f/{name}", file_text="x")
    snap = vault.snapshot()
    entry = snap.entry(parse("/memories/f"))
    assert entry is not None
    cached = list(vault._trees.get(vault._read_raw, entry[1]))
    assert cached == sorted(cached)
    assert objects.encode_tree(dict(vault._trees.get(vault._read_raw, entry[1]))) == vault._read_raw(entry[1])
