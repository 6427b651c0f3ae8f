"""``verify()`` and reads on a vault whose repository files someone changed
by hand (write access to the folder, not the key) or a bad disk damaged.

- a zlib bomb: a loose or packed object whose header declares 2 GiB (a few
  bytes on the disk), as a file version, a tree or a version: refused from
  its header before anything is inflated, a clear error for reads and a
  finding for ``verify()`` (it was ``unexpected MemoryError``);
- a commit seal naming a data key no keyring of the vault ever held: a
  forgery, not a key "removed or rolled back";
- a commit date of 20 digits (git shows it as 9999-12-31): a finding;
- a pack index whose checksum was damaged (libgit2 reads through it, stock
  git refuses it): a finding.

Each read of a damaged vault runs in its own process, bounded in memory
(2 GiB of address space) and time, as in ``test_hostile_vault_hunt``.
"""

from __future__ import annotations

import hashlib
import subprocess
import zlib
from pathlib import Path

import pytest
from test_hostile_vault_hunt import (
    cli,
    commit_memories,
    git,
    move_main,
    reads,
    tree_entries,
    write_object,
)

from vaultmem import IntegrityError, Vault, VaultError, VaultMemoryTool, generate_key
from vaultmem.git import objects
from vaultmem.repo.history import UnreadableVersion

BOMB = 2 << 30  # bytes a bomb's header declares


@pytest.fixture
def seeded(tmp_path: Path) -> tuple[Path, str, Path]:
    """A vault holding /memories/a.txt, /memories/d/b.txt and /memories/x/y, and its key file."""
    vault_path = tmp_path / "agent.vault"
    key = generate_key()
    key_file = tmp_path / "vault.key"
    key_file.write_text(key)
    key_file.chmod(0o600)
    tool = VaultMemoryTool(Vault.init(vault_path, key=key), actor="support-bot", session="s1")
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "hello\nworld\n"})
    tool.call({"command": "create", "path": "/memories/d/b.txt", "file_text": "bee\n"})
    tool.call({"command": "create", "path": "/memories/x/y", "file_text": "why\n"})
    return vault_path, key, key_file


def loose_bomb(vault_path: Path, kind: bytes) -> str:
    """A loose object whose header declares 2 GiB, stored in 100 bytes."""
    raw = kind + b" %d\0" % BOMB + b"x" * 100
    oid = hashlib.sha1(raw).hexdigest()
    folder = vault_path / "objects" / oid[:2]
    folder.mkdir(exist_ok=True)
    (folder / oid[2:]).write_bytes(zlib.compress(raw))
    return oid


def packed_bomb(vault_path: Path, kind: int) -> str:
    """A pack (with its index) holding one entry whose header declares 2 GiB."""
    oid = hashlib.sha1(b"a bomb of kind %d" % kind).digest()
    entry = objects._entry_header(kind, BOMB) + zlib.compress(b"x" * 100)
    pack = objects._assemble([(oid, zlib.crc32(entry), entry)])
    for suffix, data in ((".pack", pack.data), (".idx", pack.idx)):
        (vault_path / "objects" / "pack" / f"pack-{pack.name}{suffix}").write_bytes(data)
    return oid.hex()


def bomb(vault_path: Path, where: str, kind: str) -> str:
    if where == "loose":
        return loose_bomb(vault_path, kind.encode())
    return packed_bomb(vault_path, {"commit": objects.COMMIT, "tree": objects.TREE, "blob": objects.BLOB}[kind])


def refused(text: str, oid: str) -> bool:
    return oid in text and f"declares {BOMB:,} bytes" in text and "MemoryError" not in text


@pytest.mark.parametrize("where", ["loose", "packed"])
def test_a_zlib_bomb_file_version_is_refused_unread(seeded: tuple[Path, str, Path], where: str) -> None:
    vault_path, key, key_file = seeded
    oid = bomb(vault_path, where, "blob")
    commit_memories(vault_path, [("100644", b"a.txt", oid)])
    got = reads(vault_path, key, ("read", "/memories/a.txt"), ("view", "/memories/a.txt"), ("verify", ""))
    assert got[0][0] == "IntegrityError" and refused(got[0][1], oid), got[0]
    assert got[1][0] == "ToolError" and refused(got[1][1], oid), got[1]
    assert got[2][0] == "ok" and any(p.startswith("object: ") and refused(p, oid) for p in got[2][1]), got[2]
    done = cli(vault_path, key_file, "verify")
    assert done.returncode != 0 and oid in done.stdout + done.stderr


@pytest.mark.parametrize("where", ["loose", "packed"])
def test_a_zlib_bomb_tree_is_refused_unread(seeded: tuple[Path, str, Path], where: str) -> None:
    vault_path, key, _ = seeded
    oid = bomb(vault_path, where, "tree")
    commit_memories(vault_path, [("40000", b"d", oid)])
    got = reads(vault_path, key, ("read", "/memories/d/b.txt"), ("history", ""), ("verify", ""))
    assert got[0][0] == "IntegrityError" and refused(got[0][1], oid), got[0]
    assert got[1][0] == "ok", got[1]  # the history lists versions; it reads no file
    assert any(refused(p, oid) for p in got[2][1]), got[2]


@pytest.mark.parametrize("where", ["loose", "packed"])
def test_a_zlib_bomb_version_is_refused_unread(seeded: tuple[Path, str, Path], where: str) -> None:
    vault_path, key, _ = seeded
    oid = bomb(vault_path, where, "commit")
    # a version on top whose parent is the bomb: what is behind it is out of reach
    top = write_object(
        vault_path,
        "commit",
        b"tree "
        + git(vault_path, "rev-parse", "main^{tree}").encode()
        + b"\nparent "
        + oid.encode()
        + b"\nauthor bot <bot@x> 1790000000 +0000\ncommitter vaultmem <v@x> 1790000000 +0000\n\nmemory: x\n",
    )
    move_main(vault_path, top)
    got = reads(vault_path, key, ("history", ""), ("verify", ""))
    assert got[0][0] == "UnreadableVersion" and oid in got[0][1] and f"{BOMB:,} bytes" in got[0][1], got[0]
    assert issubclass(UnreadableVersion, IntegrityError)
    assert got[1][0] == "ok" and any(oid[:12] in p and f"{BOMB:,} bytes" in p for p in got[1][1]), got[1]


def test_an_object_just_over_the_bound_is_refused_and_one_at_it_is_read(seeded: tuple[Path, str, Path]) -> None:
    """The bound is the header's size: the largest object vaultmem writes is
    read as any other (here only its header is read: its data is garbage)."""
    vault_path, key, _ = seeded
    raw = b"blob %d\0" % (objects.MAX_OBJECT_BYTES + 1) + b"x" * 10
    over = hashlib.sha1(raw).hexdigest()
    (vault_path / "objects" / over[:2]).mkdir(exist_ok=True)
    (vault_path / "objects" / over[:2] / over[2:]).write_bytes(zlib.compress(raw))
    commit_memories(vault_path, [("100644", b"a.txt", over)])
    got = reads(vault_path, key, ("read", "/memories/a.txt"))
    assert got[0][0] == "IntegrityError" and f"{objects.MAX_OBJECT_BYTES + 1:,} bytes" in got[0][1], got[0]


# -- the keys a history names ----------------------------------------------------


def forge_seal(vault_path: Path, key_id: bytes) -> str:
    """main's head again, its seal naming ``key_id`` (a key nobody ever made)."""
    raw = subprocess.run(
        ["git", "-C", str(vault_path), "cat-file", "commit", "main"], capture_output=True, check=True
    ).stdout
    lines = raw.split(b"\n")
    at = next(i for i, line in enumerate(lines) if line.startswith(b"vaultmem-seal "))
    lines[at] = b"vaultmem-seal " + key_id + b" " + lines[at].split(b" ")[2]
    forged = write_object(vault_path, "commit", b"\n".join(lines))
    move_main(vault_path, forged)
    return forged


def test_a_seal_naming_a_key_no_keyring_held_is_called_forged(seeded: tuple[Path, str, Path]) -> None:
    vault_path, key, _ = seeded
    forge_seal(vault_path, b"00ff00ff00ff00ff")
    problems = Vault.open(vault_path, key=key).verify().problems
    named = [p for p in problems if p.startswith("keyring: ") and "00ff00ff00ff00ff" in p]
    assert len(named) == 1, problems
    assert "removed or rolled back" not in named[0]
    assert "no keyring of this vault holds or held" in named[0] and "forged" in named[0]
    assert any(p.startswith("seal: ") and "'00ff00ff00ff00ff'" in p for p in problems), problems


# -- dates -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "date"),
    [
        ("author", b"99999999999999999999 +0000"),
        ("committer", b"253402300800 +0000"),  # 10000-01-01
        ("author", b"1790000000 +99999"),
        ("committer", b"-5 +0000"),
    ],
)
def test_an_impossible_commit_date_is_a_finding(seeded: tuple[Path, str, Path], field: str, date: bytes) -> None:
    vault_path, key, _ = seeded
    raw = subprocess.run(
        ["git", "-C", str(vault_path), "cat-file", "commit", "main"], capture_output=True, check=True
    ).stdout
    lines = raw.split(b"\n")
    at = next(i for i, line in enumerate(lines) if line.startswith(field.encode() + b" "))
    lines[at] = lines[at][: lines[at].rfind(b">") + 1] + b" " + date
    move_main(vault_path, write_object(vault_path, "commit", b"\n".join(lines)))
    problems = Vault.open(vault_path, key=key).verify().problems
    dated = [p for p in problems if p.startswith("message: ") and f"the {field} date" in p]
    assert len(dated) == 1 and "no possible date" in dated[0], problems


def test_the_dates_vaultmem_writes_are_no_finding(seeded: tuple[Path, str, Path]) -> None:
    vault_path, key, _ = seeded
    assert Vault.open(vault_path, key=key).verify().problems == []


# -- pack indexes --------------------------------------------------------------------


def test_a_damaged_pack_index_checksum_is_a_finding(seeded: tuple[Path, str, Path]) -> None:
    vault_path, key, _ = seeded
    idx = sorted((vault_path / "objects" / "pack").glob("pack-*.idx"))[0]
    idx.chmod(0o644)
    data = bytearray(idx.read_bytes())
    data[-1] ^= 0x01  # the index's own checksum
    idx.write_bytes(bytes(data))
    assert subprocess.run(["git", "-C", str(vault_path), "fsck"], capture_output=True).returncode != 0
    problems = Vault.open(vault_path, key=key).verify().problems
    named = [p for p in problems if idx.name in p]
    assert len(named) == 1 and named[0].startswith("object: ") and "is damaged" in named[0], problems
    assert "git index-pack" in named[0]


def test_a_pack_index_naming_another_pack_is_a_finding(seeded: tuple[Path, str, Path]) -> None:
    """An index whose own checksum holds, but that names another pack's
    checksum (the index of the newest version's pack, rewritten)."""
    vault_path, key, _ = seeded
    head = bytes.fromhex(git(vault_path, "rev-parse", "main"))
    idx = next(
        i for i in (vault_path / "objects" / "pack").glob("pack-*.idx") if head in objects.index_ids(i.read_bytes())
    )
    body = idx.read_bytes()[:-40] + hashlib.sha1(b"another pack").digest()
    idx.chmod(0o644)
    idx.write_bytes(body + hashlib.sha1(body).digest())
    problems = reads(vault_path, key, ("verify", ""))[0][1]
    assert any(idx.name in p and "names another pack" in p for p in problems), problems


def test_the_entries_of_a_real_vault_are_unchanged(seeded: tuple[Path, str, Path]) -> None:
    """The tree and its files read as before: the bound costs nothing to a real vault."""
    vault_path, key, _ = seeded
    assert {name for _, name, _ in tree_entries(vault_path, "main:memories")} == {b"a.txt", b"d", b"x"}
    got = reads(vault_path, key, ("read", "/memories/a.txt"), ("verify", ""))
    assert got == [("ok", "hello\nworld\n"), ("ok", [])]


# -- objects from elsewhere, the keyring branch ---------------------------------------


def test_alternates_are_a_finding_and_its_advice_works(seeded: tuple[Path, str, Path], tmp_path: Path) -> None:
    """All the vault's packs moved to another repository named by
    objects/info/alternates: reads work, but the folder alone holds nothing."""
    vault_path, key, _ = seeded
    other = tmp_path / "other.git"
    subprocess.run(["git", "init", "-q", "--bare", str(other)], check=True)
    (other / "objects" / "pack").rmdir()
    (vault_path / "objects" / "pack").rename(other / "objects" / "pack")
    (vault_path / "objects" / "pack").mkdir()
    (vault_path / "objects" / "info" / "alternates").write_text(f"{other / 'objects'}\n")
    vault = Vault.open(vault_path, key=key)
    assert vault.read("/memories/a.txt") == "hello\nworld\n"
    problems = vault.verify().problems
    assert len(problems) == 1 and problems[0].startswith("object: ") and "alternates" in problems[0], problems
    git(vault_path, "repack", "-a", "-d", "-q")
    (vault_path / "objects" / "info" / "alternates").unlink()
    assert Vault.open(vault_path, key=key).verify().problems == []


def keyring_commit(vault_path: Path, document: bytes, committer: str = "vaultmem <vaultmem@localhost>") -> str:
    """A commit on top of the keyring branch holding ``document``, made with git."""
    blob = write_object(vault_path, "blob", document)
    tree = git(vault_path, "mktree", data=f"100644 blob {blob}\tkeyring.json\n".encode())
    parent = git(vault_path, "rev-parse", "vaultmem-keyring")
    raw = (
        f"tree {tree}\nparent {parent}\nauthor {committer} 1790000000 +0000\n"
        f"committer {committer} 1790000000 +0000\n\nvaultmem: keyring\n"
    ).encode()
    oid = write_object(vault_path, "commit", raw)
    git(vault_path, "update-ref", "refs/heads/vaultmem-keyring", oid)
    return oid


def test_a_foreign_commit_on_the_keyring_branch_is_a_finding(seeded: tuple[Path, str, Path]) -> None:
    vault_path, key, _ = seeded
    same = git(vault_path, "cat-file", "blob", "vaultmem-keyring:keyring.json").encode() + b"\n"
    oid = keyring_commit(vault_path, same, committer="mallory <m@x>")
    problems = Vault.open(vault_path, key=key).verify().problems
    assert any(oid[:10] in p and "not made by vaultmem" in p and "mallory" in p for p in problems), problems


def test_an_old_keyring_put_back_after_an_erasure_is_named(seeded: tuple[Path, str, Path]) -> None:
    """A copy of the keyring from before an erasure, committed on top of the
    keyring branch (its MAC is good): verify names the keyring commit that
    brought the old keys back."""
    vault_path, key, _ = seeded
    vault = Vault.open(vault_path, key=key)
    before = subprocess.run(
        ["git", "-C", str(vault_path), "cat-file", "blob", "vaultmem-keyring:keyring.json"],
        capture_output=True,
        check=True,
    ).stdout
    vault.forget("/memories/a.txt", actor="dpo", reason="request")
    assert Vault.open(vault_path, key=key).verify().problems == []
    oid = keyring_commit(vault_path, before)
    problems = Vault.open(vault_path, key=key).verify().problems
    named = [p for p in problems if oid[:10] in p]
    assert len(named) == 1 and "older keyring than its parent" in named[0], problems
    assert "drops records of erasures" in named[0]


def test_no_file_over_512_mib_is_stored_whatever_max_file_bytes_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read refuses an object over 768 MiB; a write of a file whose blob
    would pass it was taken when max_file_bytes allowed it, and could then
    never be read back.  Such a write is refused, and nothing changes (the
    ceiling is lowered here to keep the test small)."""
    from vaultmem import Change
    from vaultmem.core.paths import parse
    from vaultmem.core.policy import HARD_MAX_FILE_BYTES
    from vaultmem.git.objects import MAX_OBJECT_BYTES
    from vaultmem.repo import engine

    assert HARD_MAX_FILE_BYTES == 512 << 20
    assert HARD_MAX_FILE_BYTES * 4 // 3 + 4096 < MAX_OBJECT_BYTES  # its base64 blob is still readable
    monkeypatch.setattr(engine, "HARD_MAX_FILE_BYTES", 1000)
    vault = Vault.init(tmp_path / "big.vault", key=generate_key())
    target = parse("/memories/big.bin")
    with pytest.raises(VaultError, match="at most 1,000 bytes"):
        vault.mutate(lambda snap: Change("create", (target,)).write(target, b"x" * 1001), actor="importer")
    assert vault.head() is None
    vault.mutate(lambda snap: Change("create", (target,)).write(target, b"x" * 1000), actor="importer")
    assert vault.read("/memories/big.bin") == "x" * 1000
