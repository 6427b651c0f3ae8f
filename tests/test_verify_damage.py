"""A vault damaged the way a disk damages files: one byte flipped inside a
pack entry (a commit's, a tree's, a blob's), a pack cut short, a pack gone.

``verify()`` never raises on such a vault: every problem is a finding on one
line, naming the version that cannot be read.  ``history()`` raises
vaultmem's own ``IntegrityError`` telling the user to run ``vaultmem verify``,
never a pygit2, zlib or ``ValueError``.  Stock git (``git fsck``) confirms
each damage is real.

The offsets come from the pack index, as ``git verify-pack -v`` reports them.
vaultmem writes pack entries as zlib streams of stored (uncompressed) blocks,
so an entry is: its type-and-size header, the two zlib header bytes, a
five-byte block header, the object's bytes as they are, and an adler32.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2
import pytest
from conftest import FakeClock, git

from vaultmem import IntegrityError, Vault

KINDS = {"blob", "tree", "message", "seal", "keyring", "object", "policy", "grafts", "shallow", "replace"}


@dataclass(frozen=True)
class Entry:
    """Where one object sits in a pack (from the pack index)."""

    pack: Path
    kind: str
    size: int
    packed: int  # bytes of the entry in the pack
    offset: int

    def header_length(self) -> int:
        with open(self.pack, "rb") as fh:
            fh.seek(self.offset)
            header = fh.read(10)
        return next(i + 1 for i, byte in enumerate(header) if not byte & 0x80)

    @property
    def end(self) -> int:
        return self.offset + self.packed

    def zlib_start(self) -> int:
        return self.offset + self.header_length()

    def data_start(self) -> int:
        return self.zlib_start() + 2 + 5  # zlib header, one stored block's header


def pack_entries(vault_path: Path) -> dict[str, Entry]:
    """Every object in the vault's packs by id, as ``git verify-pack -v`` lists them."""
    found: dict[str, Entry] = {}
    for idx in sorted((vault_path / "objects" / "pack").glob("*.idx")):
        listing = subprocess.run(["git", "verify-pack", "-v", str(idx)], capture_output=True, text=True, check=True)
        for line in listing.stdout.splitlines():
            fields = line.split()
            if len(fields) == 5 and fields[1] in ("commit", "tree", "blob"):
                oid, kind, size, packed, offset = fields
                found[oid] = Entry(idx.with_suffix(".pack"), kind, int(size), int(packed), int(offset))
    return found


def flip(pack: Path, at: int, mask: int = 0x01) -> None:
    """One byte of a pack changed in place, as a failing disk would."""
    os.chmod(pack, 0o644)  # vaultmem writes packs read-only, like git
    with open(pack, "r+b") as fh:
        fh.seek(at)
        old = fh.read(1)[0]
        fh.seek(at)
        fh.write(bytes([old ^ mask]))


def rewrite_entry(entry: Entry, at_in_data: int) -> None:
    """A byte of an entry's object changed, with the adler32 fixed up so the
    zlib stream stays valid: only the object's id no longer matches."""
    start = entry.data_start()
    os.chmod(entry.pack, 0o644)
    with open(entry.pack, "r+b") as fh:
        fh.seek(start)
        data = bytearray(fh.read(entry.size))
        data[at_in_data] ^= 0x01
        fh.seek(start)
        fh.write(bytes(data))
        fh.write(zlib.adler32(bytes(data)).to_bytes(4, "big"))


def fsck_fails(vault_path: Path) -> bool:
    return subprocess.run(["git", "-C", str(vault_path), "fsck", "--full"], capture_output=True).returncode != 0


@pytest.fixture
def versions(vault: Vault, vault_path: Path, call: Callable[..., str], clock: FakeClock) -> list[str]:
    """Five honest versions, oldest first; each writes one pack of its own."""
    steps: list[dict[str, Any]] = [
        dict(command="create", path="/memories/a.txt", file_text="alpha\n"),
        dict(command="create", path="/memories/b.txt", file_text="bravo\n"),
        dict(command="create", path="/memories/notes/c.md", file_text="charlie\n"),
        dict(command="str_replace", path="/memories/a.txt", old_str="alpha", new_str="alpha two"),
        dict(command="create", path="/memories/d.txt", file_text="delta\n"),
    ]
    made = []
    for params in steps:
        clock.advance(30)
        call(**params)
        made.append(git(vault_path, "rev-parse", "main").strip())
    assert not fsck_fails(vault_path)
    return made


def check_verify(vault_path: Path, key: str) -> list[Any]:
    """verify() on a fresh open: it returns, finds something, one line per finding."""
    report = Vault.open(vault_path, key=key).verify()
    assert not report.ok
    for finding in report.findings:
        line = str(finding)
        assert line and "\n" not in line, line
        assert finding.kind in KINDS, line
    return list(report.findings)


def check_history(vault_path: Path, key: str, path: str | None = None) -> IntegrityError:
    """history() on a fresh open raises vaultmem's IntegrityError and says what to run."""
    with pytest.raises(IntegrityError) as info:
        Vault.open(vault_path, key=key).history(path)
    assert "vaultmem verify" in str(info.value)
    assert "\n" not in str(info.value)
    return info.value


# -- a flipped byte in a commit ----------------------------------------------------


def commit_damages() -> dict[str, Callable[[Entry], int]]:
    """Where in a commit's pack entry to flip a byte."""
    return {
        "entry size": lambda e: e.offset,
        "zlib header": lambda e: e.zlib_start(),
        "zlib flags": lambda e: e.zlib_start() + 1,
        "stored block header": lambda e: e.zlib_start() + 2,
        "stored block length": lambda e: e.zlib_start() + 3,
        "tree id": lambda e: e.data_start() + len("tree ") + 3,
        "parent id": lambda e: e.data_start() + len("tree ") + 41 + len("parent ") + 3,
        "message": lambda e: e.end - 4 - 12,
        "adler32": lambda e: e.end - 1,
    }


@pytest.mark.parametrize("where", list(commit_damages()))
@pytest.mark.parametrize("which", [1, 3])  # an older version, and the one before the head
def test_a_flipped_byte_in_a_commit_is_a_finding_and_history_raises_integrity_error(
    vault_path: Path, key: str, versions: list[str], where: str, which: int
) -> None:
    oid = versions[which]
    entry = pack_entries(vault_path)[oid]
    assert entry.kind == "commit"
    flip(entry.pack, commit_damages()[where](entry))
    assert fsck_fails(vault_path)

    findings = check_verify(vault_path, key)
    assert any(f.version == oid and f.kind == "object" for f in findings), [str(f) for f in findings]
    error = check_history(vault_path, key)
    assert oid in str(error)
    check_history(vault_path, key, "/memories/a.txt")


@pytest.mark.parametrize("where", ["entry type", "zlib header", "tree id", "adler32"])
@pytest.mark.parametrize("which", ["head", "first"])
def test_a_flipped_byte_in_the_head_or_the_first_commit(
    vault_path: Path, key: str, versions: list[str], where: str, which: str
) -> None:
    oid = versions[-1] if which == "head" else versions[0]
    entry = pack_entries(vault_path)[oid]
    if where == "entry type":
        flip(entry.pack, entry.offset, mask=0x10)  # commit (1) becomes an invalid type (0)
    else:
        flip(entry.pack, commit_damages()[where](entry))
    assert fsck_fails(vault_path)

    findings = check_verify(vault_path, key)
    assert any(f.version == oid and f.kind == "object" for f in findings), [str(f) for f in findings]
    check_history(vault_path, key)


def test_a_commit_rewritten_inside_its_pack_with_a_valid_zlib_stream(
    vault_path: Path, key: str, versions: list[str]
) -> None:
    oid = versions[2]
    entry = pack_entries(vault_path)[oid]
    rewrite_entry(entry, len("tree ") + 41 + len("parent ") + 3)  # the parent id now names nothing
    assert fsck_fails(vault_path)

    findings = check_verify(vault_path, key)
    assert any(f.version == oid and f.kind == "object" for f in findings), [str(f) for f in findings]
    check_history(vault_path, key)


def test_verify_checks_every_version_it_can_still_reach(vault_path: Path, key: str, versions: list[str]) -> None:
    """A damaged version cuts the walk there; the versions after it are still
    checked, and nothing about them is reported."""
    entry = pack_entries(vault_path)[versions[1]]
    flip(entry.pack, entry.data_start() + 20)
    report = Vault.open(vault_path, key=key).verify()
    assert [f.version for f in report.findings] == [versions[1]]
    assert report.commits == 3  # versions 2, 3 and 4


# -- a flipped byte in a tree or a blob --------------------------------------------


def tree_and_blob(vault_path: Path, version: str) -> dict[str, str]:
    return {
        "root tree": git(vault_path, "rev-parse", f"{version}^{{tree}}").strip(),
        "memories tree": git(vault_path, "rev-parse", f"{version}:memories").strip(),
        "blob": git(vault_path, "rev-parse", f"{version}:memories/a.txt").strip(),
    }


@pytest.mark.parametrize("what", ["root tree", "memories tree", "blob"])
@pytest.mark.parametrize("where", ["zlib header", "data", "adler32"])
def test_a_flipped_byte_in_a_tree_or_a_blob_is_a_finding(
    vault_path: Path, key: str, versions: list[str], what: str, where: str
) -> None:
    version = versions[3]  # the str_replace of a.txt: it wrote a new blob and both trees
    oid = tree_and_blob(vault_path, version)[what]
    entry = pack_entries(vault_path)[oid]
    at = {"zlib header": entry.zlib_start(), "data": entry.data_start() + 10, "adler32": entry.end - 1}[where]
    flip(entry.pack, at)
    assert fsck_fails(vault_path)

    findings = check_verify(vault_path, key)
    assert any(oid in f.detail or f.path in ("/", "/memories", "/memories/a.txt") for f in findings), [
        str(f) for f in findings
    ]
    if what != "blob":  # history of a.txt compares the trees of the versions that name it
        check_history(vault_path, key, "/memories/a.txt")
    assert len(Vault.open(vault_path, key=key).history()) == 5  # the versions themselves are intact


# -- a pack cut short or gone ------------------------------------------------------


@pytest.mark.parametrize("cut", ["inside the commit", "the checksum", "to nothing"])
def test_a_truncated_pack_is_a_finding(vault_path: Path, key: str, versions: list[str], cut: str) -> None:
    oid = versions[2]
    entry = pack_entries(vault_path)[oid]
    size = entry.pack.stat().st_size
    os.chmod(entry.pack, 0o644)
    os.truncate(entry.pack, {"inside the commit": entry.offset + 30, "the checksum": size - 1, "to nothing": 0}[cut])
    assert fsck_fails(vault_path)

    findings = check_verify(vault_path, key)
    assert any(f.version == oid and f.kind == "object" for f in findings), [str(f) for f in findings]
    check_history(vault_path, key)


@pytest.mark.parametrize("gone", ["pack", "pack and index"])
@pytest.mark.parametrize("which", [0, 2, 4])
def test_a_removed_pack_is_a_finding(vault_path: Path, key: str, versions: list[str], gone: str, which: int) -> None:
    oid = versions[which]
    pack = pack_entries(vault_path)[oid].pack
    pack.unlink()
    if gone == "pack and index":
        pack.with_suffix(".idx").unlink()
    assert fsck_fails(vault_path)

    findings = check_verify(vault_path, key)
    assert any(f.version == oid and f.kind == "object" for f in findings), [str(f) for f in findings]
    check_history(vault_path, key)


def test_the_cli_reports_a_damaged_commit_as_a_finding(vault_path: Path, key: str, versions: list[str]) -> None:
    entry = pack_entries(vault_path)[versions[2]]
    flip(entry.pack, entry.data_start() + 20)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
    env["VAULTMEM_KEY"] = key
    done = subprocess.run(
        [sys.executable, "-m", "vaultmem", "--vault", str(vault_path), "verify"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"object: {versions[2][:10]}" in done.stdout, done.stdout
    assert "unexpected" not in done.stdout + done.stderr and "Traceback" not in done.stderr
    assert "1 problem found." in done.stdout
    log = subprocess.run(
        [sys.executable, "-m", "vaultmem", "--vault", str(vault_path), "log"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert log.returncode != 0
    assert "vaultmem verify" in log.stderr and "unexpected" not in log.stderr, log.stderr


def test_a_parent_that_is_not_a_commit_is_a_finding(vault_path: Path, key: str, versions: list[str]) -> None:
    """A version whose parent line names a tree: git cannot walk past it."""
    repo = pygit2.Repository(str(vault_path))
    head = repo.revparse_single("refs/heads/main").peel(pygit2.Commit)
    raw = bytes(repo.odb.read(head.id)[1])
    forged = raw.replace(f"parent {head.parent_ids[0]}".encode(), f"parent {head.tree_id}".encode(), 1)
    oid = repo.odb.write(pygit2.enums.ObjectType.COMMIT, forged)
    repo.references.create("refs/heads/main", oid, force=True)

    findings = check_verify(vault_path, key)
    assert any(f.version == str(head.tree_id) and "is a tree, not a commit" in f.detail for f in findings), [
        str(f) for f in findings
    ]
    assert "is a tree, not a commit" in str(check_history(vault_path, key))


def test_a_version_naming_a_missing_tree(vault_path: Path, key: str, versions: list[str]) -> None:
    """A version on top whose root tree names a ``memories`` tree that is not there."""
    repo = pygit2.Repository(str(vault_path))
    head = repo.revparse_single("refs/heads/main").peel(pygit2.Commit)
    missing = "1" * 40
    root = repo.odb.write(pygit2.enums.ObjectType.TREE, b"40000 memories\0" + bytes.fromhex(missing))
    raw = bytes(repo.odb.read(head.id)[1])
    raw = raw.replace(f"tree {head.tree_id}".encode(), f"tree {root}".encode(), 1)
    raw = raw.replace(f"parent {head.parent_ids[0]}".encode(), f"parent {head.id}".encode(), 1)
    oid = repo.odb.write(pygit2.enums.ObjectType.COMMIT, raw)
    repo.references.create("refs/heads/main", oid, force=True)

    findings = check_verify(vault_path, key)
    assert any(f.kind == "object" and missing in f.detail for f in findings), [str(f) for f in findings]
    error = check_history(vault_path, key, "/memories/d.txt")  # the copied message names d.txt
    assert f"tree {missing} of version {oid} is missing" in str(error)
