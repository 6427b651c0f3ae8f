"""vaultmem's own git object and pack writers, checked against libgit2 and stock git."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pygit2
import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from vaultmem.core.paths import is_git_reserved
from vaultmem.git import durable, objects
from vaultmem.git.commits import CommitPath

names = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="/\0"), min_size=1, max_size=12
).filter(lambda n: n not in (".", "..") and not is_git_reserved(n))  # libgit2 refuses .git, GIT~1, ...


@pytest.fixture
def repo(tmp_path: Path) -> pygit2.Repository:
    return pygit2.init_repository(str(tmp_path / "r.git"), bare=True)


@settings(max_examples=examples(60), deadline=None)
@given(entries=st.dictionaries(names, st.booleans(), min_size=1, max_size=12))
def test_encode_tree_matches_libgit2_tree_ids(
    tmp_path_factory: pytest.TempPathFactory, entries: dict[str, bool]
) -> None:
    repo = pygit2.init_repository(str(tmp_path_factory.mktemp("t") / "r.git"), bare=True)
    blob = repo.create_blob(b"content")
    empty_sub = repo.TreeBuilder()
    empty_sub.insert("x", blob, pygit2.enums.FileMode.BLOB)
    sub = empty_sub.write()
    builder = repo.TreeBuilder()
    ours: dict[bytes, tuple[int, bytes]] = {}
    for name, is_dir in entries.items():
        oid, mode = (sub, pygit2.enums.FileMode.TREE) if is_dir else (blob, pygit2.enums.FileMode.BLOB)
        builder.insert(name, oid, mode)
        ours[name.encode()] = (objects.MODE_TREE if is_dir else objects.MODE_BLOB, oid.raw)
    expected = builder.write()
    data = objects.encode_tree(ours)
    assert objects.object_id(objects.TREE, data) == expected.raw
    assert objects.decode_tree(data) == ours


def test_encode_commit_is_read_back_by_libgit2(repo: pygit2.Repository) -> None:
    tree = objects.packed(objects.TREE, objects.encode_tree({}))
    commit = objects.packed(
        objects.COMMIT, objects.encode_commit(tree.id, [], b"bot <bot>", b"vaultmem <v@l>", 1_790_000_000, "m\n")
    )
    write_pack(Path(repo.path) / "objects", [tree, commit])
    read = repo[pygit2.Oid(raw=commit.id)]
    assert isinstance(read, pygit2.Commit)
    assert read.author.name == "bot" and read.commit_time == 1_790_000_000 and read.message == "m\n"


def write_pack(objects_dir: Path, blobs: list[objects.PackedObject]) -> Path:
    """A pack as the commit path installs it (state folder, then renamed in)."""
    gitdir = objects_dir.parent
    (gitdir / durable.STATE_DIR).mkdir(exist_ok=True)
    pack = objects.build_pack(blobs)
    CommitPath(gitdir, durable.WriterLock(gitdir))._install(pack)
    objects.remember(pack)
    return objects_dir / "pack" / f"pack-{pack.name}.pack"


def merge_packs(objects_dir: Path, infos: list[objects.PackInfo]) -> list[objects.PackInfo]:
    merged = objects.merge(infos)
    if merged is None:
        return []
    gitdir = objects_dir.parent
    CommitPath(gitdir, durable.WriterLock(gitdir)).install(merged[0])
    return merged[1]


def _verify_pack(pack: Path) -> str:
    result = subprocess.run(["git", "verify-pack", "-v", str(pack.with_suffix(".idx"))], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_written_and_merged_packs_pass_git_verify_pack(repo: pygit2.Repository) -> None:
    objects_dir = Path(repo.path) / "objects"
    blobs = [[objects.packed(objects.BLOB, b"blob %d-%d" % (i, j)) for j in range(3)] for i in range(5)]
    packs = [write_pack(objects_dir, group) for group in blobs]
    for pack in packs:
        _verify_pack(pack)
    infos = objects.list_packs(objects_dir)
    assert sorted(i.count for i in infos) == [3] * 5
    assert merge_packs(objects_dir, infos) == infos
    gitdir = objects_dir.parent
    for info in infos:
        CommitPath(gitdir, durable.WriterLock(gitdir)).retire(info.pack)
    [merged] = objects.list_packs(objects_dir)
    assert merged.count == 15
    assert _verify_pack(merged.pack).count(" blob ") == 15
    for group in blobs:
        for blob in group:
            assert repo[pygit2.Oid(raw=blob.id)].read_raw() == blob.data


def test_writing_the_same_objects_again_keeps_the_stored_pack(repo: pygit2.Repository) -> None:
    objects_dir = Path(repo.path) / "objects"
    blobs = [objects.packed(objects.BLOB, b"same %d" % i) for i in range(3)]
    first = write_pack(objects_dir, blobs)
    before = first.stat()
    assert write_pack(objects_dir, blobs) == first
    after = first.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # not rewritten
    stored = sorted(p.name for p in (objects_dir / "pack").iterdir())
    assert stored == sorted([first.name, first.with_suffix(".idx").name])


def test_a_pack_left_without_its_index_is_written_again(repo: pygit2.Repository) -> None:
    """An earlier attempt wrote the pack and died before its index: git never
    read that pack, so the same objects replace it whole."""
    objects_dir = Path(repo.path) / "objects"
    blobs = [objects.packed(objects.BLOB, b"retry %d" % i) for i in range(3)]
    pack = write_pack(objects_dir, blobs)
    whole = pack.read_bytes()
    pack.with_suffix(".idx").unlink()
    pack.chmod(0o644)
    pack.write_bytes(whole[: len(whole) // 2])  # torn
    assert write_pack(objects_dir, blobs) == pack
    assert pack.read_bytes() == whole
    _verify_pack(pack)
    for blob in blobs:
        assert repo[pygit2.Oid(raw=blob.id)].read_raw() == blob.data


def test_list_packs_leaves_out_packs_with_keep_files(repo: pygit2.Repository) -> None:
    objects_dir = Path(repo.path) / "objects"
    kept = write_pack(objects_dir, [objects.packed(objects.BLOB, b"a")])
    write_pack(objects_dir, [objects.packed(objects.BLOB, b"b")])
    kept.with_suffix(".keep").write_text("")
    assert [p.pack for p in objects.list_packs(objects_dir)] != [] and kept not in [
        p.pack for p in objects.list_packs(objects_dir)
    ]


@pytest.mark.parametrize(
    "extra",
    [".keep", ".bitmap", ".rev", ".mtimes", ".promisor", ".pack.tmp", ".idx.old"],
)
def test_list_packs_takes_only_packs_made_of_a_pack_and_an_index(repo: pygit2.Repository, extra: str) -> None:
    """A pack with any other file of its name (git's keep, bitmap, reverse
    index, cruft times, a partial clone's promisor, a leftover) is git's to
    manage: it is not listed for merging."""
    objects_dir = Path(repo.path) / "objects"
    plain = write_pack(objects_dir, [objects.packed(objects.BLOB, b"plain")])
    other = write_pack(objects_dir, [objects.packed(objects.BLOB, b"other")])
    lone = write_pack(objects_dir, [objects.packed(objects.BLOB, b"lone")])
    lone.with_suffix(".idx").unlink()
    (other.parent / (other.stem + extra)).write_bytes(b"")
    (other.parent / "pack-not-a-pack").write_bytes(b"")
    assert [(p.pack, p.count) for p in objects.list_packs(objects_dir)] == [(plain, 1)]


@given(st.lists(st.integers(min_value=1, max_value=10_000), max_size=30))
def test_geometric_rollup_merges_the_smallest_until_the_rest_grows_geometrically(counts: list[int]) -> None:
    packs = sorted((objects.PackInfo(Path(f"p{i}"), c) for i, c in enumerate(counts)), key=lambda p: p.count)
    victims = objects.geometric_rollup(packs)
    assert len(victims) != 1
    assert victims == packs[: len(victims)]
    for i in range(len(victims), len(packs)):
        if i:
            assert packs[i].count >= 2 * sum(p.count for p in packs[:i])


def test_many_commits_keep_the_pack_count_small(tmp_path: Path) -> None:
    from vaultmem import Vault, VaultMemoryTool, generate_key

    vault = Vault.init(tmp_path / "v", key=generate_key())
    tool = VaultMemoryTool(vault, actor="a")
    for i in range(200):
        tool.call({"command": "create", "path": f"/memories/f{i}.txt", "file_text": f"{i}\n"})
    vault.close()  # waits for the upkeep after the last write
    tool.call({"command": "view", "path": "/memories"})
    # Upkeep merges every EVERY (32) writes or at a pause; on a loaded machine
    # a round may still be merging while the next 32 writes land, so up to two
    # rounds' writes can be left unmerged, plus the merged packs.  Without
    # merging there would be 200.
    assert len(objects.list_packs(tmp_path / "v" / "objects")) <= 80
    assert vault.verify().ok
    assert len(vault.history()) == 200
    fsck = subprocess.run(["git", "-C", str(tmp_path / "v"), "fsck", "--strict"], capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr


def test_merge_leaves_alone_a_pack_of_git_s_own_that_holds_deltas(tmp_path: Path) -> None:
    work = tmp_path / "w"
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    text = "".join(f"line {i} of a long enough file to be worth a delta\n" for i in range(200))
    for i in range(3):
        (work / "f.txt").write_text(text + f"change {i}\n")
        subprocess.run(["git", "-C", str(work), "add", "f.txt"], check=True)
        subprocess.run(
            ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", f"c{i}"], check=True
        )
    subprocess.run(["git", "-C", str(work), "repack", "-adfq"], check=True)
    objects_dir = work / ".git" / "objects"
    [git_pack] = objects.list_packs(objects_dir)
    assert "delta" in _verify_pack(git_pack.pack) or "chain length" in _verify_pack(git_pack.pack)
    write_pack(objects_dir, [objects.packed(objects.BLOB, b"a")])
    write_pack(objects_dir, [objects.packed(objects.BLOB, b"b")])
    ours = [p for p in objects.list_packs(objects_dir) if p.pack != git_pack.pack]
    assert merge_packs(objects_dir, [git_pack, *ours]) == ours
    fsck = subprocess.run(["git", "-C", str(work), "fsck", "--strict"], capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr


def test_a_pack_retired_while_the_folder_is_listed_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The upkeep lists packs without the writer lock, so a write may retire
    one between the listing and the read of its index: the merge skips it
    instead of failing its round (which would leave the trash unemptied)."""
    objects_dir = tmp_path / "objects"
    (objects_dir / "pack").mkdir(parents=True)
    real = write_pack(objects_dir, [objects.packed(objects.BLOB, b"kept")])
    gone = "pack-" + "ab" * 20
    listdir = os.listdir
    monkeypatch.setattr(objects.os, "listdir", lambda path: [*listdir(path), gone + ".pack", gone + ".idx"])
    assert [info.pack for info in objects.list_packs(objects_dir)] == [real]
