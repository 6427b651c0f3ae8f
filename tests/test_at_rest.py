"""Invariant 1, no plaintext at rest, and the blob format that backs it."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
import time
import uuid
import zlib
from pathlib import Path

import pytest
from anthropic.lib.tools import ToolError
from anthropic.types.beta import BetaMemoryTool20250818CreateCommand
from conftest import git

from vaultmem import IntegrityError, Vault, VaultMemoryTool
from vaultmem.core.crypto import Keyring
from vaultmem.repo.store import KEYRING_REF


def _marker(label: str) -> str:
    # Mixed case, so a lower-cased copy is a different byte string.
    return f"Canary{label}-{uuid.uuid4().hex.upper()}-Plain"


def git_objects(vault_path: Path) -> dict[str, tuple[str, bytes]]:
    """Every object in the repository (loose and packed), as stock git reads it."""
    out = subprocess.run(
        ["git", "-C", str(vault_path), "cat-file", "--batch-all-objects", "--batch"],
        capture_output=True,
        check=True,
    ).stdout
    objects: dict[str, tuple[str, bytes]] = {}
    pos = 0
    while pos < len(out):
        end = out.index(b"\n", pos)
        oid, kind, size = out[pos:end].decode("ascii").split(" ")
        start = end + 1
        objects[oid] = (kind, out[start : start + int(size)])
        pos = start + int(size) + 1
    return objects


def pack_entries(pack: Path) -> dict[str, bytes]:
    """Every object stored in a pack file, inflated as it lies there (deltas included)."""
    data = pack.read_bytes()
    listing = subprocess.run(
        ["git", "verify-pack", "-v", str(pack.with_suffix(".idx"))], capture_output=True, text=True, check=True
    ).stdout
    entries: dict[str, bytes] = {}
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) < 5 or not re.fullmatch(r"[0-9a-f]{40}", fields[0]):
            continue
        in_pack, offset = int(fields[3]), int(fields[4])
        kind = data[offset] >> 4 & 7
        pos = offset
        while data[pos] & 0x80:  # the type-and-size header
            pos += 1
        pos += 1
        if kind == 6:  # ofs-delta: a varint offset to the base
            while data[pos] & 0x80:
                pos += 1
            pos += 1
        elif kind == 7:  # ref-delta: the base's 20-byte id
            pos += 20
        entries[fields[0]] = zlib.decompressobj().decompress(data[pos : offset + in_pack])
    return entries


def disk_contents(folder: Path) -> dict[object, bytes]:
    """Every regular file under ``folder``, raw; loose objects and pack entries also inflated."""
    found: dict[object, bytes] = {}
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = Path(root) / name
            data = path.read_bytes()
            found[path] = data
            with contextlib.suppress(zlib.error):
                found[(path, "inflated")] = zlib.decompress(data)
            if name.endswith(".pack") and path.with_suffix(".idx").exists():
                for oid, inflated in pack_entries(path).items():
                    found[(path, oid)] = inflated
    return found


def assert_nowhere(marker: str, blobs: dict[object, bytes], where: str) -> None:
    for needle in {marker, marker.lower()}:
        hits = [name for name, data in blobs.items() if needle.encode("utf-8") in data]
        assert not hits, f"plaintext {needle!r} found in {where}: {hits}"


@pytest.fixture
def session(vault: Vault, call, clock) -> dict[str, str]:
    """A session that pushes distinct markers through every command."""
    markers = {name: _marker(name) for name in ("Create", "OldNew", "Insert", "Nested", "Deep")}
    call(command="create", path="/memories/secret.txt", file_text=f"alpha\n{markers['Create']}\nomega\n")
    clock.advance(1)
    call(command="str_replace", path="/memories/secret.txt", old_str=markers["Create"], new_str=markers["OldNew"])
    clock.advance(1)
    call(command="insert", path="/memories/secret.txt", insert_line=1, insert_text=markers["Insert"] + "\n")
    clock.advance(1)
    call(command="create", path="/memories/dir/nested.txt", file_text=markers["Nested"])
    call(command="create", path="/memories/dir/sub/deep.txt", file_text=markers["Deep"])
    call(command="rename", old_path="/memories/secret.txt", new_path="/memories/moved.txt")
    call(command="rename", old_path="/memories/dir", new_path="/memories/folder")
    assert markers["OldNew"] in call(command="view", path="/memories/moved.txt")
    assert markers["Insert"] in call(command="view", path="/memories/moved.txt")
    call(command="delete", path="/memories/folder/nested.txt")
    # The content is really stored and readable through the key (the scan below is not vacuous).
    assert vault.read("/memories/moved.txt") == f"alpha\n{markers['Insert']}\n{markers['OldNew']}\nomega\n"
    assert vault.read("/memories/folder/sub/deep.txt") == markers["Deep"]
    assert markers["Nested"] == vault.read("/memories/dir/nested.txt", at=vault.history()[3].id)
    vault.close()  # the upkeep after the calls is done: the folder holds still while the tests read it
    return markers


def test_no_git_object_contains_memory_content(vault_path: Path, session: dict[str, str]) -> None:
    objects = git_objects(vault_path)
    kinds = {kind for kind, _ in objects.values()}
    assert {"blob", "tree", "commit"} <= kinds
    for marker in session.values():
        assert_nowhere(marker, {oid: data for oid, (_, data) in objects.items()}, "a git object")


def test_no_file_under_the_vault_contains_memory_content(vault_path: Path, session: dict[str, str]) -> None:
    files = disk_contents(vault_path)
    inflated = [name for name in files if isinstance(name, tuple)]
    assert len(inflated) >= len(git_objects(vault_path)), "every object should be found and inflated on disk"
    for marker in session.values():
        assert_nowhere(marker, files, "a file under the vault")


def test_packed_objects_hold_no_plaintext_either(vault_path: Path, session: dict[str, str]) -> None:
    git(vault_path, "repack", "-a", "-d", "-q")
    packs = list((vault_path / "objects" / "pack").glob("*.pack"))
    assert packs
    listed = git(vault_path, "verify-pack", "-v", str(packs[0]))
    assert re.search(r"^[0-9a-f]{40} blob ", listed, re.M)
    objects = git_objects(vault_path)
    for marker in session.values():
        assert_nowhere(marker, {oid: data for oid, (_, data) in objects.items()}, "a packed object")
        assert_nowhere(marker, disk_contents(vault_path), "a file under the repacked vault")


def test_commit_messages_carry_command_and_path_never_content(
    vault: Vault, vault_path: Path, session: dict[str, str]
) -> None:
    log = git(vault_path, "log", "--all", "--format=%B%n%an%n%cn")
    assert "memory: str_replace /memories/secret.txt" in log
    assert "memory: rename /memories/dir -> /memories/folder" in log
    for marker in session.values():
        assert marker not in log and marker.lower() not in log
        assert all(marker not in v.message for v in vault.history())


def test_no_temp_file_anywhere_holds_memory_content(tmp_path: Path, vault: Vault, call) -> None:
    started = time.time() - 1
    marker = _marker("Temp")
    call(command="create", path="/memories/t.txt", file_text=marker)
    call(command="str_replace", path="/memories/t.txt", old_str=marker, new_str=marker + "\n" + marker)
    assert vault.read("/memories/t.txt").count(marker) == 2
    fresh: dict[object, bytes] = {}
    # The system's temp folder, and the test's own, which the suite may keep elsewhere (/dev/shm).
    places = {os.path.realpath(tempfile.gettempdir()), os.path.realpath(tmp_path)}
    walked = ((root, files) for place in sorted(places) for root, _dirs, files in os.walk(place))
    for root, files in walked:
        for name in files:
            path = Path(root) / name
            try:
                if path.is_file() and path.stat().st_mtime >= started and path.stat().st_size < 50_000_000:
                    fresh[path] = path.read_bytes()
            except OSError:
                continue
    assert fresh, "the vault's own files should be among the fresh files"
    assert_nowhere(marker, fresh, "a fresh file in the temp folder")


def test_tree_shows_plain_file_names_under_memories(vault_path: Path, session: dict[str, str]) -> None:
    names = git(vault_path, "ls-tree", "-r", "--name-only", "main").split()
    assert names == ["memories/folder/sub/deep.txt", "memories/moved.txt"]


# -- the blob format -----------------------------------------------------------


def test_blob_header_names_format_key_id_nonce_and_plaintext_length(vault: Vault, vault_path: Path, call) -> None:
    text = "héllo wörld\n✓\n"  # multi-byte: the header counts UTF-8 bytes, not characters
    call(command="create", path="/memories/a.txt", file_text=text)
    raw = subprocess.run(
        ["git", "-C", str(vault_path), "cat-file", "blob", "main:memories/a.txt"], capture_output=True, check=True
    ).stdout
    header, _, token = raw.partition(b"\n")
    match = re.fullmatch(rb"vaultmem-blob 2 (\S+) ([0-9a-f]{16}) (\d+)", header)
    assert match, header
    assert match.group(1).decode() == vault.keyring.active.id  # the epoch whose key tree holds this version's key
    assert int(match.group(3)) == len(text.encode("utf-8"))
    assert token.startswith(b"gAAAAA")  # a Fernet token, version byte 0x80
    assert text.encode("utf-8") not in raw


def _commit_with_entry_copied(vault_path: Path, source: str, target: str) -> str:
    """With stock git plumbing only: a commit on main that puts ``source``'s blob at ``target`` too."""
    blob = git(vault_path, "rev-parse", f"main:memories/{source}").strip()
    entries = git(vault_path, "ls-tree", "main:memories")
    entries += f"100644 blob {blob}\t{target}\n"
    memories = subprocess.run(
        ["git", "-C", str(vault_path), "mktree"], input=entries, capture_output=True, text=True, check=True
    ).stdout.strip()
    root = subprocess.run(
        ["git", "-C", str(vault_path), "mktree"],
        input=f"040000 tree {memories}\tmemories\n",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "mallory",
        "GIT_AUTHOR_EMAIL": "m@example.com",
        "GIT_COMMITTER_NAME": "mallory",
        "GIT_COMMITTER_EMAIL": "m@example.com",
    }
    message = (
        f"memory: create /memories/{target}\n\nVaultmem-Command: create\nVaultmem-Path: /memories/{target}\n"
        "Vaultmem-Actor: mallory\n"
    )
    commit = subprocess.run(
        ["git", "-C", str(vault_path), "commit-tree", root, "-p", "main", "-m", message],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout.strip()
    git(vault_path, "update-ref", "refs/heads/main", commit)
    return commit


def test_blob_copied_to_another_path_fails_to_open(vault: Vault, vault_path: Path, call, tool) -> None:
    call(command="create", path="/memories/a.txt", file_text="account number 12345\n")
    _commit_with_entry_copied(vault_path, "a.txt", "b.txt")
    assert git(vault_path, "rev-parse", "main:memories/a.txt") == git(vault_path, "rev-parse", "main:memories/b.txt")

    with pytest.raises(IntegrityError):
        vault.read("/memories/b.txt")
    assert vault.read("/memories/a.txt") == "account number 12345\n"
    with pytest.raises(ToolError) as info:
        tool.call({"command": "view", "path": "/memories/b.txt"})
    assert "account number" not in str(info.value.content)

    report = vault.verify()
    assert not report.ok
    assert any("/memories/b.txt" in problem for problem in report.problems)
    assert not any("/memories/a.txt" in problem for problem in report.problems)


def test_blob_with_edited_length_header_fails_to_open(vault: Vault, call) -> None:
    call(command="create", path="/memories/a.txt", file_text="twelve bytes")
    blob = vault.repo.revparse_single("main:memories/a.txt").read_raw()
    header, _, token = blob.partition(b"\n")
    tampered = header.replace(b" 12", b" 13") + b"\n" + token
    assert tampered != blob
    with pytest.raises(IntegrityError):
        vault.keyring.open("/memories/a.txt", tampered)
    assert vault.keyring.open("/memories/a.txt", blob) == b"twelve bytes"


def test_verify_is_clean_after_an_ordinary_session(vault: Vault, session: dict[str, str]) -> None:
    report = vault.verify()
    assert report.ok, report.problems
    assert report.commits == len(vault.history()) == 8
    assert report.blobs >= 5


def test_untouched_files_keep_their_blob_ids(vault_path: Path, call, clock) -> None:
    call(command="create", path="/memories/keep.txt", file_text="stay as you are\n")
    call(command="create", path="/memories/dir/keep2.txt", file_text="me too\n")
    keep = git(vault_path, "rev-parse", "main:memories/keep.txt")
    keep2 = git(vault_path, "rev-parse", "main:memories/dir/keep2.txt")
    steps = [
        dict(command="create", path="/memories/other.txt", file_text="one\n"),
        dict(command="str_replace", path="/memories/other.txt", old_str="one", new_str="two"),
        dict(command="insert", path="/memories/other.txt", insert_line=0, insert_text="zero"),
        dict(command="create", path="/memories/dir/sibling.txt", file_text="x"),
        dict(command="rename", old_path="/memories/other.txt", new_path="/memories/dir/renamed.txt"),
        dict(command="delete", path="/memories/dir/sibling.txt"),
    ]
    for params in steps:
        clock.advance(60)  # a later timestamp must not re-encrypt untouched files either
        call(**params)
        assert git(vault_path, "rev-parse", "main:memories/keep.txt") == keep
        assert git(vault_path, "rev-parse", "main:memories/dir/keep2.txt") == keep2


def test_rename_re_encrypts_what_it_moves(vault: Vault, vault_path: Path, call) -> None:
    call(command="create", path="/memories/a.txt", file_text="same content\n")
    call(command="create", path="/memories/d/x.txt", file_text="inside\n")
    before = git(vault_path, "rev-parse", "main:memories/a.txt").strip()
    before_x = git(vault_path, "rev-parse", "main:memories/d/x.txt").strip()
    call(command="rename", old_path="/memories/a.txt", new_path="/memories/b.txt")
    call(command="rename", old_path="/memories/d", new_path="/memories/e")
    after = git(vault_path, "rev-parse", "main:memories/b.txt").strip()
    after_x = git(vault_path, "rev-parse", "main:memories/e/x.txt").strip()
    assert after != before and after_x != before_x
    assert vault.read("/memories/b.txt") == "same content\n"
    assert vault.read("/memories/e/x.txt") == "inside\n"
    # The moved blob is bound to its new path, not the old one.
    with pytest.raises(IntegrityError):
        vault.keyring.open("/memories/a.txt", vault.repo[after].read_raw())
    assert vault.verify().ok


def test_keyring_blob_is_json_with_only_wrapped_keys(vault: Vault, vault_path: Path, key: str) -> None:
    listed = git(vault_path, "ls-tree", "-r", "--name-only", KEYRING_REF).split()
    assert listed == ["keyring.json"]
    doc = Keyring.parse(
        subprocess.run(
            ["git", "-C", str(vault_path), "cat-file", "blob", f"{KEYRING_REF}:keyring.json"],
            capture_output=True,
            check=True,
        ).stdout
    )
    assert doc["data_keys"] == []  # format 1's shared data keys: none in a new vault
    assert [set(entry) for entry in doc["epochs"]] == [{"id", "seal", "cover", "created"}]
    for entry in doc["epochs"]:  # the seal key and the key tree, each wrapped: a Fernet token
        assert entry["seal"].startswith("gAAAAA") and entry["cover"].startswith("gAAAAA")
    assert doc["erased"] == {}
    assert key not in str(doc)


def test_tool_made_by_sdk_class_also_leaves_no_plaintext(vault: Vault, vault_path: Path) -> None:
    tool = VaultMemoryTool(vault, actor="other-bot")
    marker = _marker("Sdk")
    # Through the SDK's own dispatch (BetaAbstractMemoryTool with typed commands).
    tool.create(BetaMemoryTool20250818CreateCommand(command="create", path="/memories/s.txt", file_text=marker))
    assert vault.read("/memories/s.txt") == marker
    assert_nowhere(marker, {oid: data for oid, (_, data) in git_objects(vault_path).items()}, "a git object")
    assert_nowhere(marker, disk_contents(vault_path), "a file under the vault")
