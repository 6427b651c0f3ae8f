"""Git's multi-pack-index beside vaultmem's pack upkeep (docs/format.md,
"Upkeep after the call"; :mod:`vaultmem.git.midx`).

``git multi-pack-index write`` and ``git maintenance run
--task=incremental-repack`` index the vault's packs; git then reads the
objects it indexed only from the packs the index names.  vaultmem never
merges away, retires or deletes a pack an index lists, so stock git keeps
reading every version however many writes and upkeep rounds follow.  A pack
with a version 1 index (``pack.indexVersion=1``) is git's own and never merged.

The upkeep runs here at chosen moments (its thread never wakes on its own),
so each test merges and retires exactly where it says.
"""

from __future__ import annotations

import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from stockgit_helpers import fsck_strict, git_out, run_git

from vaultmem import Vault, VaultMemoryTool
from vaultmem.git import commits, midx, objects, upkeep

ROUND = 4  # writes between two upkeep rounds


@pytest.fixture
def quiet_upkeep(vault: Vault, monkeypatch: pytest.MonkeyPatch) -> Vault:
    """The vault with an upkeep that runs only when a test runs it."""
    vault._upkeep.stop()
    monkeypatch.setattr(upkeep, "IDLE", 3600.0)
    monkeypatch.setattr(upkeep, "EVERY", 10_000)
    return vault


def _write(vault: Vault, tool: VaultMemoryTool, first: int, count: int) -> None:
    """``count`` writes, an upkeep round (merge, checkpoint, trash) after every
    ``ROUND`` of them; the next write retires what a round's merge replaced."""
    for n in range(first, first + count):
        tool.call({"command": "create", "path": f"/memories/f{n}.txt", "file_text": f"version {n}\n"})
        if n % ROUND == ROUND - 1:
            vault._upkeep.run_once()


def _pack_dir(vault_path: Path) -> Path:
    return vault_path / "objects" / "pack"


def _packs(vault_path: Path) -> set[str]:
    return {p.stem for p in _pack_dir(vault_path).glob("pack-*.pack")}


def _not_the_keyrings(vault_path: Path) -> str:
    """A pack holding no object of the keyring branch (one of a memory write)."""
    keyring = {
        bytes.fromhex(line.split()[0])
        for line in git_out(vault_path, "rev-list", "--objects", "refs/heads/vaultmem-keyring").splitlines()
    }
    for stem in sorted(_packs(vault_path)):
        ids = objects.index_ids((_pack_dir(vault_path) / f"{stem}.idx").read_bytes())
        if not keyring & set(ids):
            return stem
    raise AssertionError("every pack holds a keyring object")


def _assert_git_reads_everything(vault_path: Path, key: str, writes: int) -> None:
    fsck_strict(vault_path)
    log = run_git(vault_path, "log", "--format=%s", "main")
    assert log.returncode == 0, log.describe()
    subjects = log.stdout.splitlines()
    assert sorted(subjects) == sorted(f"memory: create /memories/f{n}.txt" for n in range(writes))
    verify = run_git(vault_path, "multi-pack-index", "verify")
    assert verify.returncode == 0, verify.describe()
    reopened = Vault.open(vault_path, key=key)
    report = reopened.verify()
    assert report.ok, report.findings
    assert reopened.read(f"/memories/f{writes - 1}.txt") == f"version {writes - 1}\n"


@pytest.mark.parametrize(
    "indexer",
    [("multi-pack-index", "write"), ("maintenance", "run", "--task=incremental-repack")],
    ids=["multi-pack-index-write", "incremental-repack"],
)
def test_packs_a_multi_pack_index_lists_stay_through_writes_and_upkeep(
    quiet_upkeep: Vault, vault_path: Path, key: str, tool: VaultMemoryTool, indexer: tuple[str, ...]
) -> None:
    vault = quiet_upkeep
    _write(vault, tool, 0, 24)
    git_out(vault_path, *indexer)
    listed = midx.listed(_pack_dir(vault_path))
    assert listed, "git wrote no multi-pack-index"
    merges = 0
    real_merge = objects.merge

    def counting(packs: list[objects.PackInfo]) -> tuple[objects.Pack, list[objects.PackInfo]] | None:
        nonlocal merges
        assert not {p.pack.stem for p in packs} & listed, "a listed pack was taken into a merge"
        merges += 1
        return real_merge(packs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(objects, "merge", counting)
        _write(vault, tool, 24, 48)
    vault.close()
    assert merges, "the upkeep never merged after the index was written"
    assert listed <= _packs(vault_path), "a pack the multi-pack-index lists left objects/pack"
    assert len(_packs(vault_path)) < len(listed) + 48, "the packs written after the index were not merged"
    _assert_git_reads_everything(vault_path, key, 72)


@pytest.mark.parametrize("bitmaps", ["true", "false"])
def test_a_pack_with_a_version_1_index_is_never_merged(
    quiet_upkeep: Vault, vault_path: Path, key: str, tool: VaultMemoryTool, bitmaps: str
) -> None:
    """``git gc`` in a bare repository writes a bitmap beside its pack unless
    told not to; with or without one, the pack stays as git wrote it."""
    vault = quiet_upkeep
    _write(vault, tool, 0, 20)
    git_out(vault_path, "-c", "pack.indexVersion=1", "-c", f"repack.writeBitmaps={bitmaps}", "gc", "--quiet")
    (gcd,) = _packs(vault_path)
    idx = (_pack_dir(vault_path) / f"{gcd}.idx").read_bytes()
    assert idx[:4] != b"\377tOc", "git wrote a version 2 index"
    before = {suffix: (_pack_dir(vault_path) / f"{gcd}{suffix}").read_bytes() for suffix in (".idx", ".pack")}
    # Read as version 2, this index's object count would be the offset of
    # its first entry; it is no merge candidate at all.
    assert gcd not in {p.pack.stem for p in objects.list_packs(vault_path / "objects")}
    _write(vault, tool, 20, 48)
    vault.close()
    after = {suffix: (_pack_dir(vault_path) / f"{gcd}{suffix}").read_bytes() for suffix in (".idx", ".pack")}
    assert after == before
    assert len(_packs(vault_path)) < 1 + 48, "the packs written after gc were not merged"
    fsck_strict(vault_path)
    assert len(git_out(vault_path, "log", "--format=%H", "main").split()) == 68
    report = Vault.open(vault_path, key=key).verify()
    assert report.ok, report.findings


def test_a_pack_listed_after_it_was_retired_goes_back_instead_of_away(
    vault: Vault, vault_path: Path, key: str, call: Callable[..., str]
) -> None:
    """A multi-pack-index written in the moment between the check and the
    retirement lists a pack that is in the trash: emptying the trash puts it
    back, and stock git reads it again."""
    for n in range(6):
        call(command="create", path=f"/memories/f{n}.txt", file_text=f"version {n}\n")
    vault.close()
    git_out(vault_path, "multi-pack-index", "write")
    victim = _not_the_keyrings(vault_path)
    trash = vault_path / "vaultmem" / commits.TRASH
    trash.mkdir(exist_ok=True)
    for suffix in (".idx", ".pack"):  # as a retirement that checked just before the index appeared
        (_pack_dir(vault_path) / f"{victim}{suffix}").rename(trash / f"{victim}{suffix}")
    assert run_git(vault_path, "fsck", "--strict", "--no-progress").returncode != 0
    writer = Vault.open(vault_path, key=key)
    assert any("multi-pack-index" in f.detail for f in writer.verify().findings)
    writer._commits.empty_trash()
    assert victim in _packs(vault_path)
    assert list(trash.iterdir()) == []
    fsck_strict(vault_path)
    assert writer.verify().ok


def test_a_pack_an_index_lists_is_never_retired_and_one_listed_meanwhile_goes_back(
    vault: Vault, vault_path: Path, call: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(4):
        call(command="create", path=f"/memories/f{n}.txt", file_text=f"version {n}\n")
    vault.close()
    git_out(vault_path, "multi-pack-index", "write")
    first, second, *_ = sorted(_packs(vault_path))
    vault._commits.retire(_pack_dir(vault_path) / f"{first}.pack")
    assert first in _packs(vault_path)
    # An index that appears while the files are being renamed: the check
    # before says unlisted, the check after says listed.
    answers = iter([False, True])
    monkeypatch.setattr(midx, "lists", lambda pack_dir, pack: next(answers))
    vault._commits.retire(_pack_dir(vault_path) / f"{second}.pack")
    assert second in _packs(vault_path)
    assert list((vault_path / "vaultmem" / commits.TRASH).glob("pack-*")) == []
    fsck_strict(vault_path)


# -- reading the index ----------------------------------------------------------------------


@pytest.fixture
def indexed(vault: Vault, vault_path: Path, call: Callable[..., str]) -> Path:
    """A vault with three packs and a multi-pack-index of them; its pack folder."""
    for n in range(3):
        call(command="create", path=f"/memories/f{n}.txt", file_text=f"version {n}\n")
    vault.close()
    git_out(vault_path, "multi-pack-index", "write")
    return _pack_dir(vault_path)


def test_the_reader_lists_the_packs_of_a_single_index_and_of_a_chain(indexed: Path) -> None:
    packs = {p.stem for p in indexed.glob("pack-*.pack")}
    assert midx.listed(indexed) == packs
    assert midx.missing(indexed) == []
    # The same file as the one layer of an incremental chain.
    data = (indexed / midx.MIDX).read_bytes()
    layer = data[-20:].hex()
    chain = indexed / midx.CHAIN_DIR
    chain.mkdir()
    (indexed / midx.MIDX).rename(chain / f"{midx.MIDX}-{layer}.midx")
    (chain / midx.CHAIN).write_text(layer + "\n")
    assert midx.listed(indexed) == packs
    assert midx.lists(indexed, indexed / f"{sorted(packs)[0]}.pack")
    # A chain naming a layer that is not there: every pack may be listed.
    (chain / midx.CHAIN).write_text(layer + "\n" + "0" * 40 + "\n")
    assert midx.listed(indexed) is None
    assert midx.lists(indexed, "pack-" + "1" * 40)
    midx.clear(indexed)
    assert midx.listed(indexed) == frozenset()
    assert list(chain.iterdir()) == []


@pytest.mark.parametrize("damage", ["version", "cut-short", "no-pack-names", "not-an-index"])
def test_an_index_that_cannot_be_read_means_every_pack_may_be_listed(indexed: Path, damage: str) -> None:
    path = indexed / midx.MIDX
    data = bytearray(path.read_bytes())
    if damage == "version":
        data[4] = 9
    elif damage == "cut-short":
        del data[len(data) // 3 :]
    elif damage == "no-pack-names":
        at = data.index(b"PNAM")
        data[at : at + 4] = b"XNAM"
    else:
        data[:4] = b"NOPE"
    path.chmod(0o644)
    path.write_bytes(bytes(data))
    assert midx.listed(indexed) is None
    assert objects.list_packs(indexed.parent) == []  # nothing to merge while it cannot be read


def test_the_pack_names_are_read_wherever_the_table_of_chunks_puts_them() -> None:
    """A version 2 index may order its chunks and name its packs (by index or
    pack file) as it likes; the reader follows the table of chunks."""
    names = b"pack-" + b"b" * 40 + b".pack\0pack-" + b"a" * 40 + b".idx\0\0\0"
    fanout = struct.pack(">256I", *([0] * 256))
    body_start = 12 + 3 * 12
    rows = [
        (b"OIDF", body_start),
        (b"PNAM", body_start + len(fanout)),
        (b"\0\0\0\0", body_start + len(fanout) + len(names)),
    ]
    data = b"MIDX" + bytes([2, 1, 2, 0]) + struct.pack(">I", 2)
    data += b"".join(name + struct.pack(">Q", at) for name, at in rows) + fanout + names + b"\0" * 20
    assert midx.pack_names(data) == ["pack-" + "b" * 40, "pack-" + "a" * 40]
    with pytest.raises(ValueError):
        midx.pack_names(data[:5] + bytes([7]) + data[6:])  # a hash it does not know
    with pytest.raises(ValueError):
        midx.pack_names(data[:8] + struct.pack(">I", 3) + data[12:])  # more packs than names


def test_verify_reports_an_index_naming_a_pack_that_is_gone(indexed: Path, vault_path: Path, key: str) -> None:
    copy = vault_path.parent / "copy.vault"
    shutil.copytree(vault_path, copy)
    pack_dir = copy / "objects" / "pack"
    gone = _not_the_keyrings(copy)
    for suffix in (".idx", ".pack"):
        (pack_dir / f"{gone}{suffix}").unlink()
    assert midx.missing(pack_dir) == [gone]
    report = Vault.open(copy, key=key).verify()
    found = [f for f in report.findings if "multi-pack-index" in f.detail]
    assert found and gone in found[0].detail and found[0].kind == "object", report.findings


@pytest.mark.parametrize("layout", ["single", "chain"])
def test_an_erasure_removes_the_multi_pack_index_as_gits_repack_does(
    vault: Vault, vault_path: Path, key: str, call: Callable[..., str], layout: str
) -> None:
    """An erasure removes packs holding a replaced keyring: the index that
    lists them goes first (single or a chain, never a lock of git's), and
    git writes it again at its next run."""
    call(command="create", path="/memories/secret.txt", file_text="erase me\n")
    call(command="create", path="/memories/other.txt", file_text="keep me\n")
    vault.close()
    git_out(vault_path, "multi-pack-index", "write")
    pack_dir = _pack_dir(vault_path)
    chain = pack_dir / midx.CHAIN_DIR
    if layout == "chain":
        layer = (pack_dir / midx.MIDX).read_bytes()[-20:].hex()
        chain.mkdir()
        (pack_dir / midx.MIDX).rename(chain / f"{midx.MIDX}-{layer}.midx")
        (chain / midx.CHAIN).write_text(layer + "\n")
        (chain / f"{midx.CHAIN}.lock").write_text("")  # a write of git's under way: its lock stays
    assert midx.listed(pack_dir)
    erasing = Vault.open(vault_path, key=key)
    erasing.forget("/memories/secret.txt", reason="request 7")
    assert midx.listed(pack_dir) == frozenset()
    if layout == "chain":
        assert sorted(p.name for p in chain.iterdir()) == [f"{midx.CHAIN}.lock"]
        (chain / f"{midx.CHAIN}.lock").unlink()
    fsck_strict(vault_path)
    git_out(vault_path, "multi-pack-index", "write")
    fsck_strict(vault_path)
    reopened = Vault.open(vault_path, key=key)
    assert reopened.read("/memories/other.txt") == "keep me\n"
    assert reopened.verify().ok, reopened.verify().findings
