"""Import of an SDK filesystem memory folder into a vault and export back out.

The folders are made by the real ``BetaLocalFilesystemMemoryTool`` (or by hand,
for what the tool would never write: symlinks, fifos, hostile names); the vault
is real, checked with stock git; tampered trees are written with pygit2 as an
attacker without the key would.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pygit2
import pytest
from anthropic.tools import BetaLocalFilesystemMemoryTool
from conftest import FakeClock, commit_count, git

from vaultmem import (
    AlreadyExistsError,
    ConflictError,
    Entry,
    IntegrityError,
    LimitError,
    NotFoundError,
    Vault,
    VaultError,
    VaultMemoryTool,
    generate_key,
)
from vaultmem.cli.app import main

NOTHING = "Nothing was imported."

# What the agent wrote through the SDK tool: nested folders, unicode names, an
# empty file, no final newline, CRLF.  Every non-empty text carries a marker
# that must never appear in plaintext inside the vault.
SDK_FILES: dict[str, str] = {
    "/memories/notes.txt": "Customer ACME-7731 prefers e-mail follow-ups.\n",
    "/memories/projects/vaultmem/plan.md": "# Plan PLAN-4482\n- encrypt every blob\n- keep the history\n",
    "/memories/日本語/メモ.md": "会議は火曜日です MEMO-9120\n",
    "/memories/café/ü.txt": "Ünïcödé UNICODE-5567 ✓ déjà vu\n",
    "/memories/empty.txt": "",
    "/memories/no-final-newline.txt": "NOEOL-3306 this line ends without a newline",
    "/memories/windows.txt": "CRLF-8841 line one\r\nline two\r\n",
}
MARKERS = ["ACME-7731", "PLAN-4482", "MEMO-9120", "UNICODE-5567", "NOEOL-3306", "CRLF-8841", "phone"]
AFTER_SDK_EDIT = {**SDK_FILES, "/memories/notes.txt": "Customer ACME-7731 prefers phone follow-ups.\n"}


# -- helpers ---------------------------------------------------------------------


def sdk_folder(base: Path) -> Path:
    """``base`` filled by the real SDK tool, as an agent using it would leave it."""
    tool = BetaLocalFilesystemMemoryTool(base_path=str(base))
    for path, text in SDK_FILES.items():
        tool.call({"command": "create", "path": path, "file_text": text})
    tool.call({"command": "str_replace", "path": "/memories/notes.txt", "old_str": "e-mail", "new_str": "phone"})
    assert disk_files(base) == {p: t.encode() for p, t in AFTER_SDK_EDIT.items()}
    return base


def disk_files(base: Path) -> dict[str, bytes]:
    """Every regular file under ``base/memories`` as ``{"/memories/rel": bytes}``."""
    root = base / "memories"
    found: dict[str, bytes] = {}
    for folder, _dirs, files in os.walk(root):
        for name in files:
            path = Path(folder) / name
            found["/memories/" + path.relative_to(root).as_posix()] = path.read_bytes()
    return found


def vault_files(vault: Vault, at: str | None = None) -> dict[str, bytes]:
    """Every file of the vault (now or at ``at``) as ``{path: bytes}``."""
    return {
        entry.path: vault.read(entry.path, at=at).encode("utf-8")
        for entry in vault.listing(at=at)
        if entry.kind == "file"
    }


def everything_under(folder: Path) -> set[str]:
    """Every file, folder and link below ``folder``, relative to it."""
    out: set[str] = set()
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            out.add(str((Path(root) / name).relative_to(folder)))
    return out


def stored_bytes(vault_path: Path) -> bytes:
    """Every byte the vault keeps: its files as they are on disk, and every git
    object decompressed by stock git (packs and loose objects are zlib data)."""
    raw = b"".join((Path(root) / name).read_bytes() for root, _dirs, files in os.walk(vault_path) for name in files)
    objects = subprocess.run(
        ["git", "-C", str(vault_path), "cat-file", "--batch-all-objects", "--batch"],
        capture_output=True,
        check=True,
    ).stdout
    return raw + objects


def memories(base: Path) -> Path:
    """``base/memories``, created empty."""
    root = base / "memories"
    root.mkdir(parents=True)
    return root


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


@dataclass
class Before:
    """What a vault holds before a refused call, to compare after it."""

    commits: int
    files: dict[str, bytes]
    listing: list[Entry]


def before(vault: Vault, vault_path: Path) -> Before:
    return Before(commit_count(vault_path), vault_files(vault), vault.listing())


def assert_unchanged(vault: Vault, vault_path: Path, was: Before) -> None:
    assert commit_count(vault_path) == was.commits
    assert vault_files(vault) == was.files
    assert vault.listing() == was.listing


@pytest.fixture
def seeded(vault: Vault, call: Callable[..., str]) -> Vault:
    """A vault holding one file, so a refused import has something to leave alone."""
    call(command="create", path="/memories/existing.txt", file_text="already here\n")
    return vault


# -- import: a real SDK folder ---------------------------------------------------


def test_import_of_an_sdk_folder_is_one_commit_holding_every_file_byte_for_byte(
    vault: Vault, vault_path: Path, tmp_path: Path
) -> None:
    source = sdk_folder(tmp_path / "memory")
    on_disk = disk_files(source)

    result = vault.import_folder(source, actor="migration", session="move-1")

    assert commit_count(vault_path) == 1
    assert result.version is not None
    assert result.files == len(on_disk) == 7
    assert result.bytes == sum(len(data) for data in on_disk.values())
    assert result.empty_folders == ()
    assert vault_files(vault) == on_disk
    for path, data in on_disk.items():
        assert vault.read(path).encode("utf-8") == data
    assert disk_files(source) == on_disk  # the source is left as it was


def test_import_commit_message_is_exactly_the_import_subject_and_trailers(
    vault: Vault, vault_path: Path, tmp_path: Path
) -> None:
    source = sdk_folder(tmp_path / "memory")
    result = vault.import_folder(source, actor="migration", session="move-1")

    trailers = (
        "Vaultmem-Command: import\nVaultmem-Path: /memories\nVaultmem-Actor: migration\n"
        "Vaultmem-Session: move-1\nVaultmem-Files: 7\n"
    )
    assert result.version is not None
    assert result.version.message == "memory: import /memories\n\n" + trailers
    assert git(vault_path, "log", "-1", "--format=%B") == "memory: import /memories\n\n" + trailers + "\n"
    assert git(vault_path, "log", "-1", "--format=%(trailers)") == trailers + "\n"
    assert git(vault_path, "rev-parse", "main").strip() == result.version.id


def test_import_without_a_session_has_no_session_trailer(vault: Vault, tmp_path: Path) -> None:
    source = tmp_path / "memory"
    write(memories(source) / "a.txt", "alpha\n")
    result = vault.import_folder(source)
    assert result.version is not None
    assert result.version.message == (
        "memory: import /memories\n\nVaultmem-Command: import\nVaultmem-Path: /memories\n"
        "Vaultmem-Actor: vaultmem\nVaultmem-Files: 1\n"
    )


def test_git_log_stat_lists_every_imported_file(vault: Vault, vault_path: Path, tmp_path: Path) -> None:
    source = sdk_folder(tmp_path / "memory")
    vault.import_folder(source)
    stat_out = git(vault_path, "-c", "core.quotepath=false", "log", "-1", "--stat=1000,900", "--format=")
    listed = {line.split("|")[0].strip() for line in stat_out.splitlines() if "|" in line}
    assert listed == {path.removeprefix("/") for path in SDK_FILES}
    assert f" {len(SDK_FILES)} files changed" in stat_out


def test_history_shows_the_import_with_its_actor_and_session(vault: Vault, tmp_path: Path, clock: FakeClock) -> None:
    source = sdk_folder(tmp_path / "memory")
    result = vault.import_folder(source, actor="migration", session="move-1")
    [version] = vault.history()
    assert version == result.version
    assert (version.command, version.actor, version.session, version.paths) == (
        "import",
        "migration",
        "move-1",
        ("/memories",),
    )
    assert version.time.timestamp() == int(clock())
    assert vault.history(command="import", actor="migration", session="move-1") == [version]
    assert vault.history(path="/memories/café/ü.txt") == [version]


def test_an_imported_vault_verifies_clean(vault: Vault, tmp_path: Path) -> None:
    vault.import_folder(sdk_folder(tmp_path / "memory"))
    report = vault.verify()
    assert report.ok, [str(f) for f in report.findings]
    assert report.commits == 1
    assert report.blobs == len(SDK_FILES)


def test_no_plaintext_of_an_imported_file_is_stored_in_the_vault(
    vault: Vault, vault_path: Path, tmp_path: Path
) -> None:
    source = sdk_folder(tmp_path / "memory")
    vault.import_folder(source)
    stored = stored_bytes(vault_path)
    assert len(stored) > 1000
    for path, data in disk_files(source).items():
        if data:
            assert data not in stored, path
            assert data.decode().replace("\r\n", "\n").encode() not in stored, path
    for marker in MARKERS:
        assert marker.encode() not in stored, marker


def test_an_nfd_name_is_imported_under_its_nfc_spelling(vault: Vault, tmp_path: Path) -> None:
    source = tmp_path / "memory"
    nfd = unicodedata.normalize("NFD", "café.txt")
    assert nfd != "café.txt"
    write(memories(source) / nfd, "decomposed\n")
    vault.import_folder(source)
    assert vault.read("/memories/café.txt") == "decomposed\n"
    assert [e.path for e in vault.listing()] == ["/memories/café.txt"]


def test_a_file_exactly_at_the_size_limit_is_imported(vault: Vault, vault_path: Path, tmp_path: Path) -> None:
    small = tmp_path / "small"
    write(memories(small) / "small.txt", "x" * 64)
    assert vault.import_folder(small, max_file_bytes=64).files == 1
    default = tmp_path / "default"
    write(memories(default) / "default.txt", "y" * 102_400)
    assert vault.import_folder(default).bytes == 102_400
    assert vault.read("/memories/small.txt") == "x" * 64
    assert vault.read("/memories/default.txt") == "y" * 102_400
    assert commit_count(vault_path) == 2


def test_a_segment_of_255_bytes_and_a_path_of_1024_bytes_are_imported(vault: Vault, tmp_path: Path) -> None:
    source = tmp_path / "memory"
    root = memories(source)
    long_dirs = ["d" * 200] * 4
    name = "f" * (1024 - len("/memories/") - 4 * 201)
    assert len(name) == 210
    path = "/memories/" + "/".join([*long_dirs, name])
    assert len(path.encode()) == 1024
    write(root.joinpath(*long_dirs, name), "deep\n")
    write(root / ("s" * 255), "long name\n")
    assert vault.import_folder(source).files == 2
    assert vault.read(path) == "deep\n"
    assert vault.read("/memories/" + "s" * 255) == "long name\n"


# -- import: refusals ------------------------------------------------------------


def _symlink_to_outside_file(root: Path) -> str:
    outside = write(root.parent.parent / "outside-secret.txt", "OUTSIDE-1337 host secret\n")
    (root / "link.txt").symlink_to(outside)
    return "link.txt"


def _symlink_to_dir(root: Path) -> str:
    outside = root.parent.parent / "elsewhere"
    write(outside / "inside.txt", "not memory\n")
    (root / "linked").symlink_to(outside, target_is_directory=True)
    return "linked"


def _dangling_symlink(root: Path) -> str:
    (root / "dangling.txt").symlink_to(root / "nowhere.txt")
    return "dangling.txt"


def _nested_symlink(root: Path) -> str:
    write(root / "sub" / "deeper" / "real.txt", "real\n")
    (root / "sub" / "deeper" / "zz-link").symlink_to(root / "sub" / "deeper" / "real.txt")
    return "sub/deeper/zz-link"


def _fifo(root: Path) -> str:
    os.mkfifo(root / "pipe")
    return "pipe"


def _non_utf8_name(root: Path) -> str:
    fd = os.open(os.fsencode(root) + b"/bad\xff.txt", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"fine content\n")
    os.close(fd)
    return os.fsdecode(b"bad\xff.txt")


def _named(name: str) -> Callable[[Path], str]:
    def make(root: Path) -> str:
        write(root / name, "hostile name\n")
        return name

    return make


def _segment_over_255_bytes(root: Path) -> str:
    # Linux refuses names over 255 bytes, but U+0958 grows under NFC (a
    # composition exclusion: 3 bytes become 6), so a 253-byte name on disk is a
    # 256-byte segment once normalised.
    name = "a" * 250 + "\u0958"
    assert len(name.encode()) == 253
    assert len(unicodedata.normalize("NFC", name).encode()) == 256
    write(root / name, "grows under NFC\n")
    return name


def _path_over_1024_bytes(root: Path) -> str:
    parts = ["d" * 200] * 4 + ["f" * 211]
    assert len(("/memories/" + "/".join(parts)).encode()) == 1025
    write(root.joinpath(*parts), "too deep\n")
    return "/".join(parts)


def _dot_git(name: str) -> Callable[[Path], str]:
    def make(root: Path) -> str:
        write(root / name / "config", "[core]\n\tbare = false\n")
        return f"{name}/config"

    return make


def _non_utf8_content(root: Path) -> str:
    write(root / "latin1.txt", "caf\xe9\n".encode("latin-1"))
    return "latin1.txt"


def _nfc_nfd_collision(root: Path) -> str:
    write(root / unicodedata.normalize("NFD", "café.txt"), "decomposed\n")
    write(root / unicodedata.normalize("NFC", "café.txt"), "composed\n")
    return unicodedata.normalize("NFC", "café.txt")  # NFD sorts first, so the NFC one is the second


REFUSALS: dict[str, tuple[Callable[[Path], str], str]] = {
    "symlink-to-outside-file": (_symlink_to_outside_file, "symbolic link"),
    "symlink-to-dir": (_symlink_to_dir, "symbolic link"),
    "dangling-symlink": (_dangling_symlink, "symbolic link"),
    "nested-symlink": (_nested_symlink, "symbolic link"),
    "fifo": (_fifo, "not a regular file"),
    "non-utf8-name": (_non_utf8_name, "not valid UTF-8"),
    "backslash": (_named("a\\b.txt"), "backslashes"),
    "control-char": (_named("bell\x07.txt"), "control characters"),
    "newline": (_named("two\nlines.txt"), "control characters"),
    "escape": (_named("\x1b[31mred.txt"), "control characters"),
    "rlo-u202e": (_named("invoice\u202etxt.exe"), "invisible formatting"),
    "zero-width": (_named("zero\u200bwidth.txt"), "invisible formatting"),
    "pct-2e2e": (_named("%2e%2e"), "percent-encoded"),
    "pct-2F": (_named("a%2Fb.txt"), "percent-encoded"),
    "pct-5c": (_named("a%5cb.txt"), "percent-encoded"),
    "pct-double": (_named("%252e%252e"), "percent-encoded"),
    "segment-256": (_segment_over_255_bytes, "longer than 255 bytes"),
    "path-1025": (_path_over_1024_bytes, "longer than 1,024 bytes"),
    "dot-git": (_dot_git(".git"), ".git is reserved"),
    "dot-GIT": (_dot_git(".GIT"), ".git is reserved"),
    "git~1": (_dot_git("git~1"), ".git is reserved"),
    "non-utf8-content": (_non_utf8_content, "not UTF-8 text"),
    "nfc-nfd-collision": (_nfc_nfd_collision, "same memory path"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_import_refuses_the_whole_folder_for_one_bad_entry(
    seeded: Vault, vault_path: Path, tmp_path: Path, case: str
) -> None:
    make, why = REFUSALS[case]
    source = tmp_path / "src" / "memory"
    root = memories(source)
    write(root / "good.txt", "a good file GOOD-6060\n")
    write(root / "zzz" / "also-good.md", "another good one\n")
    shown = make(root)
    was = before(seeded, vault_path)

    with pytest.raises(VaultError) as info:
        seeded.import_folder(source)

    message = str(info.value)
    assert message.startswith(f"Error: cannot import {shown!r}: "), message
    assert why in message, message
    assert message.endswith(NOTHING), message
    assert str(tmp_path) not in message
    assert_unchanged(seeded, vault_path, was)
    assert b"GOOD-6060" not in stored_bytes(vault_path)


def test_import_refuses_a_socket(
    seeded: Vault, vault_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "memory"
    root = memories(source)
    write(root / "good.txt", "good\n")
    monkeypatch.chdir(root)  # a socket's path is limited to ~107 bytes: bind by a short relative name
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind("sock")
        assert stat.S_ISSOCK(os.lstat(root / "sock").st_mode)
        was = before(seeded, vault_path)
        with pytest.raises(VaultError) as info:
            seeded.import_folder(source)
    finally:
        server.close()
    assert str(info.value).startswith("Error: cannot import 'sock': it is not a regular file")
    assert str(info.value).endswith(NOTHING)
    assert_unchanged(seeded, vault_path, was)


def test_import_refuses_a_file_over_the_size_limit_with_a_limit_error(
    seeded: Vault, vault_path: Path, tmp_path: Path
) -> None:
    source = tmp_path / "memory"
    write(memories(source) / "ok.txt", "x" * 100)
    write(source / "memories" / "big.txt", "y" * 101)
    was = before(seeded, vault_path)
    with pytest.raises(LimitError) as info:
        seeded.import_folder(source, max_file_bytes=100)
    message = str(info.value)
    assert message.startswith("Error: cannot import 'big.txt': it is larger than the file size limit of 100 bytes")
    assert message.endswith(NOTHING)
    assert_unchanged(seeded, vault_path, was)


def test_import_refuses_a_file_one_byte_over_the_default_limit(seeded: Vault, vault_path: Path, tmp_path: Path) -> None:
    source = tmp_path / "memory"
    write(memories(source) / "big.txt", "y" * 102_401)
    was = before(seeded, vault_path)
    with pytest.raises(LimitError, match="102,400 bytes"):
        seeded.import_folder(source)
    assert_unchanged(seeded, vault_path, was)


def test_import_of_a_folder_without_memories_names_base_path(seeded: Vault, vault_path: Path, tmp_path: Path) -> None:
    source = tmp_path / "memory"
    write(source / "notes.txt", "not in memories/\n")
    was = before(seeded, vault_path)
    with pytest.raises(VaultError) as info:
        seeded.import_folder(source)
    message = str(info.value)
    assert repr(str(source / "memories")) in message
    assert "is not a folder" in message and "base_path" in message
    assert_unchanged(seeded, vault_path, was)


def test_import_of_a_missing_folder_is_refused(seeded: Vault, vault_path: Path, tmp_path: Path) -> None:
    was = before(seeded, vault_path)
    with pytest.raises(VaultError, match="base_path"):
        seeded.import_folder(tmp_path / "no-such-folder")
    assert_unchanged(seeded, vault_path, was)


def test_import_of_the_memories_folder_itself_reads_the_same_files(vault_path: Path, key: str, tmp_path: Path) -> None:
    source = sdk_folder(tmp_path / "memory")
    with Vault.init(tmp_path / "by-base", key=key) as by_base:
        by_base.import_folder(source)
        expected = {e.path: by_base.read(e.path) for e in by_base.listing() if e.kind == "file"}
    with Vault.init(vault_path, key=key) as by_root:
        result = by_root.import_folder(source / "memories")
        assert result.files == len(expected)
        assert {e.path: by_root.read(e.path) for e in by_root.listing() if e.kind == "file"} == expected
    assert commit_count(vault_path) == 1


def test_import_refuses_a_memories_folder_that_is_a_symlink(seeded: Vault, vault_path: Path, tmp_path: Path) -> None:
    real = sdk_folder(tmp_path / "real")
    source = tmp_path / "memory"
    source.mkdir()
    (source / "memories").symlink_to(real / "memories", target_is_directory=True)
    was = before(seeded, vault_path)
    with pytest.raises(VaultError, match="is not a folder"):
        seeded.import_folder(source)
    assert_unchanged(seeded, vault_path, was)


def test_import_refuses_a_memories_entry_that_is_a_file(seeded: Vault, vault_path: Path, tmp_path: Path) -> None:
    source = tmp_path / "memory"
    write(source / "memories", "a file, not a folder\n")
    was = before(seeded, vault_path)
    with pytest.raises(VaultError, match="is not a folder"):
        seeded.import_folder(source)
    assert_unchanged(seeded, vault_path, was)


# -- import: clashes, replace, empty ---------------------------------------------


def test_import_refuses_a_path_that_already_exists_and_writes_nothing(
    seeded: Vault, vault_path: Path, tmp_path: Path
) -> None:
    source = tmp_path / "memory"
    write(memories(source) / "existing.txt", "from the folder\n")
    write(source / "memories" / "new.txt", "NEW-2024 would be added\n")
    was = before(seeded, vault_path)
    with pytest.raises(AlreadyExistsError) as info:
        seeded.import_folder(source)
    message = str(info.value)
    assert "1 path already exists" in message and "/memories/existing.txt" in message
    assert message.endswith(NOTHING)
    assert_unchanged(seeded, vault_path, was)
    assert seeded.read("/memories/existing.txt") == "already here\n"
    assert b"NEW-2024" not in stored_bytes(vault_path)


def test_import_refuses_a_file_where_a_folder_must_go(
    vault: Vault, vault_path: Path, tmp_path: Path, call: Callable[..., str]
) -> None:
    call(command="create", path="/memories/projects", file_text="a file named like a folder\n")
    source = tmp_path / "memory"
    write(memories(source) / "projects" / "plan.md", "plan\n")
    was = before(vault, vault_path)
    with pytest.raises(AlreadyExistsError, match="/memories/projects"):
        vault.import_folder(source)
    assert_unchanged(vault, vault_path, was)


def test_import_refuses_a_file_where_the_vault_has_a_folder(
    vault: Vault, vault_path: Path, tmp_path: Path, call: Callable[..., str]
) -> None:
    call(command="create", path="/memories/projects/a.md", file_text="a\n")
    source = tmp_path / "memory"
    write(memories(source) / "projects", "a file where the vault has a folder\n")
    was = before(vault, vault_path)
    with pytest.raises(AlreadyExistsError, match="/memories/projects"):
        vault.import_folder(source)
    assert_unchanged(vault, vault_path, was)


def test_import_adds_files_into_existing_folders(
    vault: Vault, vault_path: Path, tmp_path: Path, call: Callable[..., str]
) -> None:
    call(command="create", path="/memories/projects/a.md", file_text="a\n")
    source = tmp_path / "memory"
    write(memories(source) / "projects" / "b.md", "b\n")
    write(source / "memories" / "top.txt", "top\n")
    result = vault.import_folder(source)
    assert result.files == 2
    assert vault_files(vault) == {
        "/memories/projects/a.md": b"a\n",
        "/memories/projects/b.md": b"b\n",
        "/memories/top.txt": b"top\n",
    }
    assert commit_count(vault_path) == 2


def test_import_with_replace_makes_the_memory_exactly_the_folder(
    seeded: Vault, vault_path: Path, tmp_path: Path, call: Callable[..., str]
) -> None:
    call(command="create", path="/memories/notes.txt", file_text="old notes\n")
    old = seeded.history(limit=1)[0]
    source = sdk_folder(tmp_path / "memory")
    result = seeded.import_folder(source, replace=True, actor="migration")
    assert result.version is not None
    assert commit_count(vault_path) == 3
    assert vault_files(seeded) == disk_files(source)  # existing.txt removed, notes.txt overwritten
    assert seeded.read("/memories/existing.txt", at=old.id) == "already here\n"  # still in history
    assert seeded.read("/memories/notes.txt", at=old.id) == "old notes\n"
    assert seeded.verify().ok


def test_import_with_replace_of_identical_content_makes_no_commit(
    vault: Vault, vault_path: Path, tmp_path: Path
) -> None:
    source = sdk_folder(tmp_path / "memory")
    vault.import_folder(source)
    assert commit_count(vault_path) == 1
    result = vault.import_folder(source, replace=True)
    assert result.version is None
    assert commit_count(vault_path) == 1
    assert vault_files(vault) == disk_files(source)


def test_import_with_replace_of_an_empty_folder_empties_the_memory(
    seeded: Vault, vault_path: Path, tmp_path: Path
) -> None:
    source = tmp_path / "memory"
    memories(source)
    result = seeded.import_folder(source, replace=True)
    assert result.version is not None
    assert (result.files, result.bytes) == (0, 0)
    assert seeded.listing() == []
    assert commit_count(vault_path) == 2


def test_import_with_replace_into_an_empty_vault_of_an_empty_folder_makes_no_commit(
    vault: Vault, vault_path: Path, tmp_path: Path
) -> None:
    source = tmp_path / "memory"
    memories(source)
    assert vault.import_folder(source, replace=True).version is None
    assert commit_count(vault_path) == 0


def test_import_of_a_folder_without_files_makes_no_commit(seeded: Vault, vault_path: Path, tmp_path: Path) -> None:
    source = tmp_path / "memory"
    memories(source)
    was = before(seeded, vault_path)
    result = seeded.import_folder(source)
    assert result.version is None
    assert (result.files, result.bytes, result.empty_folders) == (0, 0, ())
    assert_unchanged(seeded, vault_path, was)


def test_empty_subfolders_are_reported_and_not_stored(vault: Vault, vault_path: Path, tmp_path: Path) -> None:
    source = tmp_path / "memory"
    root = memories(source)
    (root / "a" / "b").mkdir(parents=True)
    (root / "c").mkdir()
    write(root / "d" / "file.txt", "kept\n")
    result = vault.import_folder(source)
    assert result.empty_folders == ("/memories/a/b", "/memories/c")
    assert result.files == 1
    assert [e.path for e in vault.listing()] == ["/memories/d", "/memories/d/file.txt"]
    assert commit_count(vault_path) == 1


def test_only_empty_subfolders_make_no_commit_and_are_reported(vault: Vault, vault_path: Path, tmp_path: Path) -> None:
    source = tmp_path / "memory"
    (memories(source) / "empty").mkdir()
    result = vault.import_folder(source)
    assert (result.version, result.files, result.empty_folders) == (None, 0, ("/memories/empty",))
    assert commit_count(vault_path) == 0


# -- export ----------------------------------------------------------------------


def test_export_writes_every_file_byte_for_byte_with_private_modes(vault: Vault, tmp_path: Path) -> None:
    source = sdk_folder(tmp_path / "memory")
    imported = vault.import_folder(source)
    target = tmp_path / "out"

    result = vault.export_folder(target)

    assert imported.version is not None
    assert result.version == imported.version.id
    assert result.folder == target / "memories"
    assert (result.files, result.bytes) == (imported.files, imported.bytes)
    assert disk_files(target) == disk_files(source)
    assert everything_under(target) == {"memories", *("memories/" + p for p in everything_under(source / "memories"))}
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o700
    for root, dirs, files in os.walk(target):
        assert stat.S_IMODE(os.stat(root).st_mode) == 0o700, root
        for name in dirs:
            assert stat.S_IMODE(os.lstat(Path(root) / name).st_mode) == 0o700, name
        for name in files:
            info = os.lstat(Path(root) / name)
            assert stat.S_ISREG(info.st_mode)
            assert stat.S_IMODE(info.st_mode) == 0o600, name


def test_export_into_an_existing_folder_keeps_what_is_there(
    vault: Vault, tmp_path: Path, call: Callable[..., str]
) -> None:
    call(command="create", path="/memories/a.txt", file_text="alpha\n")
    target = tmp_path / "out"
    target.mkdir(mode=0o755)
    write(target / "unrelated.txt", "keep me\n")
    vault.export_folder(target)
    assert disk_files(target) == {"/memories/a.txt": b"alpha\n"}
    assert (target / "unrelated.txt").read_text() == "keep me\n"
    assert everything_under(target) == {"unrelated.txt", "memories", "memories/a.txt"}


def test_export_at_an_older_version_writes_that_version(
    vault: Vault, tmp_path: Path, call: Callable[..., str], clock: FakeClock
) -> None:
    versions = []
    call(command="create", path="/memories/notes.txt", file_text="v1\n")
    versions.append(vault.history(limit=1)[0])
    clock.advance(60)
    call(command="create", path="/memories/b/bee.txt", file_text="bee\n")
    call(command="str_replace", path="/memories/notes.txt", old_str="v1", new_str="v2")
    versions.append(vault.history(limit=1)[0])
    clock.advance(60)
    call(command="delete", path="/memories/b")
    call(command="create", path="/memories/c.txt", file_text="sea\n")
    versions.append(vault.history(limit=1)[0])

    first = vault.export_folder(tmp_path / "v1", at=versions[0].id)
    assert first.version == versions[0].id
    assert disk_files(tmp_path / "v1") == {"/memories/notes.txt": b"v1\n"}

    second = vault.export_folder(tmp_path / "v2", at=versions[1].id[:10])
    assert second.version == versions[1].id
    assert disk_files(tmp_path / "v2") == {"/memories/notes.txt": b"v2\n", "/memories/b/bee.txt": b"bee\n"}

    by_time = vault.export_folder(tmp_path / "t", at=versions[1].time + timedelta(seconds=30))
    assert by_time.version == versions[1].id
    assert disk_files(tmp_path / "t") == disk_files(tmp_path / "v2")

    by_revision = vault.export_folder(tmp_path / "r", at="main~2")
    assert by_revision.version == versions[1].id

    now = vault.export_folder(tmp_path / "now")
    assert now.version == versions[2].id
    assert disk_files(tmp_path / "now") == {"/memories/notes.txt": b"v2\n", "/memories/c.txt": b"sea\n"}


def test_export_of_an_unknown_version_writes_nothing(vault: Vault, tmp_path: Path, call: Callable[..., str]) -> None:
    call(command="create", path="/memories/a.txt", file_text="alpha\n")
    with pytest.raises(NotFoundError):
        vault.export_folder(tmp_path / "out", at="0" * 40)
    with pytest.raises(NotFoundError):
        vault.export_folder(tmp_path / "out", at=datetime(2000, 1, 1).astimezone())
    assert not (tmp_path / "out").exists()


def test_export_of_an_empty_vault_gives_an_empty_memories_folder(vault: Vault, tmp_path: Path) -> None:
    result = vault.export_folder(tmp_path / "out")
    assert result.version is None
    assert (result.files, result.bytes) == (0, 0)
    assert result.folder == tmp_path / "out" / "memories"
    assert everything_under(tmp_path / "out") == {"memories"}
    assert stat.S_IMODE(os.stat(result.folder).st_mode) == 0o700


def test_export_refuses_an_existing_memories_folder_and_changes_nothing(
    vault: Vault, tmp_path: Path, call: Callable[..., str]
) -> None:
    call(command="create", path="/memories/a.txt", file_text="from the vault\n")
    target = tmp_path / "out"
    write(target / "memories" / "a.txt", "user's own file\n")
    with pytest.raises(AlreadyExistsError, match="never overwrites"):
        vault.export_folder(target)
    assert everything_under(target) == {"memories", "memories/a.txt"}
    assert (target / "memories" / "a.txt").read_text() == "user's own file\n"


def test_export_refuses_a_memories_symlink_and_writes_nothing_through_it(
    vault: Vault, tmp_path: Path, call: Callable[..., str]
) -> None:
    call(command="create", path="/memories/a.txt", file_text="from the vault\n")
    target = tmp_path / "out"
    target.mkdir()
    elsewhere = tmp_path / "elsewhere"
    (target / "memories").symlink_to(elsewhere, target_is_directory=True)  # dangling
    with pytest.raises(AlreadyExistsError):
        vault.export_folder(target)
    assert not elsewhere.exists()
    assert everything_under(target) == {"memories"}


@pytest.mark.parametrize("where", ["vault", "inside", "objects", "symlink"])
def test_export_refuses_the_vault_folder_and_anything_inside_it(
    vault: Vault, vault_path: Path, tmp_path: Path, call: Callable[..., str], where: str
) -> None:
    call(command="create", path="/memories/a.txt", file_text="SECRET-PLAIN-4242\n")
    targets = {
        "vault": vault_path,
        "inside": vault_path / "exported",
        "objects": vault_path / "objects" / ".." / "refs" / "plain",
        "symlink": tmp_path / "innocent",
    }
    (tmp_path / "innocent").symlink_to(vault_path / "sub", target_is_directory=True)
    was = everything_under(vault_path)
    commits = commit_count(vault_path)
    with pytest.raises(ConflictError, match="plaintext"):
        vault.export_folder(targets[where])
    assert everything_under(vault_path) == was
    assert commit_count(vault_path) == commits
    assert b"SECRET-PLAIN-4242" not in stored_bytes(vault_path)


def test_export_refuses_a_file_as_target(vault: Vault, tmp_path: Path, call: Callable[..., str]) -> None:
    call(command="create", path="/memories/a.txt", file_text="alpha\n")
    target = write(tmp_path / "out", "a file\n")
    with pytest.raises(ConflictError, match="not a folder"):
        vault.export_folder(target)
    assert target.read_text() == "a file\n"
    assert not any(name.startswith(".vaultmem-export-") for name in os.listdir(tmp_path))


def test_export_with_a_missing_parent_is_refused_and_creates_nothing(
    vault: Vault, tmp_path: Path, call: Callable[..., str]
) -> None:
    call(command="create", path="/memories/a.txt", file_text="alpha\n")
    with pytest.raises((VaultError, OSError)):
        vault.export_folder(tmp_path / "missing" / "out")
    assert not (tmp_path / "missing").exists()


def test_no_export_temp_folder_is_left_after_any_refusal(
    vault: Vault, vault_path: Path, tmp_path: Path, call: Callable[..., str]
) -> None:
    call(command="create", path="/memories/a.txt", file_text="alpha\n")
    site = tmp_path / "site"
    write(site / "taken" / "memories" / "x.txt", "x\n")
    write(site / "file", "f\n")
    for target, error in [
        (site / "taken", AlreadyExistsError),
        (site / "file", ConflictError),
        (vault_path / "x", ConflictError),
    ]:
        with pytest.raises(error):
            vault.export_folder(target)
    leftovers = [p for p in everything_under(tmp_path) if ".vaultmem-export-" in p]
    assert leftovers == []


def test_the_sdk_tool_reads_an_export(vault: Vault, tmp_path: Path) -> None:
    source = sdk_folder(tmp_path / "memory")
    vault.import_folder(source)
    target = tmp_path / "out"
    vault.export_folder(target)
    original = BetaLocalFilesystemMemoryTool(base_path=str(source))
    exported = BetaLocalFilesystemMemoryTool(base_path=str(target))
    for path in SDK_FILES:
        view = exported.call({"command": "view", "path": path})
        assert view == original.call({"command": "view", "path": path}), path
    assert exported.call({"command": "view", "path": "/memories/notes.txt"}) == (
        "Here's the content of /memories/notes.txt with line numbers:\n"
        "     1\tCustomer ACME-7731 prefers phone follow-ups.\n     2\t"
    )

    def names(listing: object) -> list[str]:
        assert isinstance(listing, str)
        return [line.split("\t", 1)[1] for line in listing.splitlines()[1:]]

    root_view = exported.call({"command": "view", "path": "/memories"})
    assert names(root_view) == names(original.call({"command": "view", "path": "/memories"}))
    assert "/memories/café/ü.txt" in names(root_view)
    # and the SDK can go on working in it
    exported.call({"command": "str_replace", "path": "/memories/windows.txt", "old_str": "two", "new_str": "2"})
    assert (target / "memories" / "windows.txt").read_bytes() == b"CRLF-8841 line one\r\nline 2\r\n"


def test_export_then_import_into_a_new_vault_round_trips_exactly(vault: Vault, tmp_path: Path, key: str) -> None:
    vault.import_folder(sdk_folder(tmp_path / "memory"))
    vault.export_folder(tmp_path / "out")
    with Vault.init(tmp_path / "b.vault", key=generate_key()) as other:
        result = other.import_folder(tmp_path / "out")
        assert result.files == len(SDK_FILES)
        assert other.listing() == vault.listing()
        assert vault_files(other) == vault_files(vault)
        for entry in vault.listing():
            if entry.kind == "file":
                assert other.read(entry.path) == vault.read(entry.path)
        other.export_folder(tmp_path / "again")
    assert disk_files(tmp_path / "again") == disk_files(tmp_path / "memory")


# -- export of a tampered vault --------------------------------------------------

BLOB = b"100644"
TREE = b"40000"


def raw_tree(repo: pygit2.Repository, entries: list[tuple[bytes, bytes, bytes]]) -> pygit2.Oid:
    """A tree object written byte by byte, in the order given: git checks nothing."""
    data = b"".join(mode + b" " + name + b"\0" + oid for mode, name, oid in entries)
    return repo.odb.write(pygit2.enums.ObjectType.TREE, data)


def tamper(vault_path: Path, bad_name: bytes, as_folder: bool) -> str:
    """Main moved to a child of its head commit, a copy of the head (seal and
    all) whose ``memories`` tree holds a valid ``a.txt`` first, then ``bad_name`` pointing at an existing encrypted
    blob (or, ``as_folder``, at a folder holding ``escape.txt``)."""
    repo = pygit2.Repository(str(vault_path))
    head = repo.revparse_single("refs/heads/main").peel(pygit2.Commit)
    a_blob = repo.revparse_single("main:memories/a.txt").id.raw
    notes_blob = repo.revparse_single("main:memories/notes.txt").id.raw
    if as_folder:
        inner = raw_tree(repo, [(BLOB, b"escape.txt", notes_blob)])
        bad = (TREE, bad_name, inner.raw)
    else:
        bad = (BLOB, bad_name, notes_blob)
    memories_tree = raw_tree(repo, [(BLOB, b"a.txt", a_blob), bad])
    root = raw_tree(repo, [(TREE, b"memories", memories_tree.raw)])
    headers, _, body = bytes(repo.odb.read(head.id)[1]).partition(b"\n\n")
    lines = []
    for line in headers.split(b"\n"):
        if line.startswith(b"tree "):
            lines += [b"tree " + str(root).encode(), b"parent " + str(head.id).encode()]
        elif not line.startswith(b"parent "):
            lines.append(line)
    oid = repo.odb.write(pygit2.enums.ObjectType.COMMIT, b"\n".join(lines) + b"\n\n" + body)
    repo.references.create("refs/heads/main", oid, force=True)
    return str(oid)


TAMPERED_NAMES: dict[str, tuple[bytes, bool]] = {
    "backslash": (b"a\\b", False),
    "pct-2e2e": (b"%2e%2e", False),
    "dotdot-file": (b"..", False),
    "dotdot-folder": (b"..", True),
    "dot-folder": (b".", True),
    "slash": (b"x/y", False),
    "absolute": (b"/tmp/x", False),
    "dot-git": (b".git", True),
    "nfd": ("cafe\u0301".encode(), False),
    "non-utf8": (b"bad\xff", False),
    "control": (b"ctl\x01", False),
    "empty": (b"", False),
}


@pytest.mark.parametrize("case", list(TAMPERED_NAMES))
def test_export_of_a_tampered_tree_name_is_refused_and_writes_nothing(
    vault_path: Path, key: str, tmp_path: Path, case: str
) -> None:
    bad_name, as_folder = TAMPERED_NAMES[case]
    with Vault.init(vault_path, key=key) as honest:
        honest.import_folder(_two_files(tmp_path / "memory"))
        clean = honest.history(limit=1)[0].id
    tamper(vault_path, bad_name, as_folder)
    site = tmp_path / "site"
    target = site / "out"
    target.mkdir(parents=True)
    with Vault.open(vault_path, key=key) as vault:
        was = everything_under(tmp_path)
        with pytest.raises(IntegrityError) as info:
            vault.export_folder(target)
        assert "memory path" in str(info.value) or "malformed" in str(info.value)
        assert everything_under(tmp_path) == was
        assert list(target.iterdir()) == []
        # the untampered version before it still exports
        assert vault.export_folder(site / "clean", at=clean).files == 2
    assert disk_files(site / "clean") == {"/memories/a.txt": b"alpha\n", "/memories/notes.txt": b"notes\n"}


def _two_files(source: Path) -> Path:
    write(memories(source) / "a.txt", "alpha\n")
    write(source / "memories" / "notes.txt", "notes\n")
    return source


def test_a_failed_export_leaves_no_new_folder_behind(vault_path: Path, key: str, tmp_path: Path) -> None:
    with Vault.init(vault_path, key=key) as honest:
        honest.import_folder(_two_files(tmp_path / "memory"))
    tamper(vault_path, b"..", True)
    site = tmp_path / "site"
    site.mkdir()
    with Vault.open(vault_path, key=key) as vault, pytest.raises(IntegrityError):
        vault.export_folder(site / "out")
    assert everything_under(site) == set()


# -- the CLI ---------------------------------------------------------------------


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(
    vault: Vault, vault_path: Path, key: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., Result]:
    """``cli("import", F)`` runs ``vaultmem --vault VAULT import F`` in-process with VAULTMEM_KEY set."""
    for name in list(os.environ):
        if name.startswith("VAULTMEM_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("VAULTMEM_KEY", key)

    def run(*args: Any) -> Result:
        code = main(["--vault", str(vault_path), *(str(a) for a in args)])
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


def error_line(result: Result) -> str:
    assert result.code == 2, result
    assert result.out == ""
    assert result.err.startswith("vaultmem: ") and result.err.endswith("\n"), result.err
    assert result.err.count("\n") == 1 and "Traceback" not in result.err, result.err
    return result.err


def test_cli_import_prints_what_it_recorded(
    cli: Callable[..., Result], vault: Vault, vault_path: Path, tmp_path: Path
) -> None:
    source = sdk_folder(tmp_path / "memory")
    size = sum(len(d) for d in disk_files(source).values())
    result = cli("import", source)
    assert (result.code, result.err) == (0, "")
    head = git(vault_path, "rev-parse", "main").strip()
    assert result.out == f"Imported 7 files ({size:,} bytes) from {source}/memories as version {head[:10]}.\n"
    [version] = vault.history()
    assert (version.command, version.actor, version.session) == ("import", "cli", None)
    assert vault_files(vault) == disk_files(source)


def test_cli_import_records_actor_and_session_and_reports_empty_folders(
    cli: Callable[..., Result], vault: Vault, tmp_path: Path
) -> None:
    source = tmp_path / "memory"
    write(memories(source) / "one.txt", "1\n")
    (source / "memories" / "empty").mkdir()
    result = cli("import", source, "--actor", "migration", "--session", "move-7")
    assert result.code == 0
    lines = result.out.splitlines()
    assert lines[0].startswith(f"Imported 1 file (2 bytes) from {source}/memories as version ")
    assert lines[1:] == ["Left out 1 empty folder: git records files, not empty folders."]
    [version] = vault.history()
    assert (version.actor, version.session) == ("migration", "move-7")


def test_cli_import_of_a_folder_without_files(cli: Callable[..., Result], vault_path: Path, tmp_path: Path) -> None:
    source = tmp_path / "memory"
    memories(source)
    result = cli("import", source)
    assert (result.code, result.out, result.err) == (0, f"Nothing to import: {source}/memories holds no files.\n", "")
    assert commit_count(vault_path) == 0


def test_cli_import_refusal_exits_2_with_one_error_line(
    cli: Callable[..., Result], vault_path: Path, tmp_path: Path
) -> None:
    source = tmp_path / "memory"
    write(memories(source) / "good.txt", "good\n")
    (source / "memories" / "link").symlink_to("/etc/passwd")
    err = error_line(cli("import", source))
    assert err.startswith("vaultmem: cannot import 'link': it is a symbolic link")
    assert err.endswith(NOTHING + "\n")
    assert commit_count(vault_path) == 0


def test_cli_import_of_a_folder_without_memories_exits_2(
    cli: Callable[..., Result], vault_path: Path, tmp_path: Path
) -> None:
    err = error_line(cli("import", tmp_path / "nowhere"))
    assert "base_path" in err
    assert commit_count(vault_path) == 0


def test_cli_import_max_file_bytes(cli: Callable[..., Result], vault: Vault, tmp_path: Path) -> None:
    source = tmp_path / "memory"
    write(memories(source) / "ten.txt", "0123456789")
    err = error_line(cli("import", source, "--max-file-bytes", "9"))
    assert "larger than the file size limit of 9 bytes" in err
    assert cli("import", source, "--max-file-bytes", "10").code == 0
    assert vault.read("/memories/ten.txt") == "0123456789"


def test_cli_import_clash_is_refused_then_replace_replaces(
    cli: Callable[..., Result], vault: Vault, vault_path: Path, tmp_path: Path, call: Callable[..., str]
) -> None:
    call(command="create", path="/memories/notes.txt", file_text="old\n")
    call(command="create", path="/memories/extra.txt", file_text="extra\n")
    source = tmp_path / "memory"
    write(memories(source) / "notes.txt", "new\n")
    err = error_line(cli("import", source))
    assert "already exist" in err and "/memories/notes.txt" in err
    assert commit_count(vault_path) == 2
    result = cli("import", source, "--replace")
    assert result.code == 0
    assert result.out.startswith(f"Imported 1 file (4 bytes) from {source}/memories as version ")
    assert vault_files(vault) == {"/memories/notes.txt": b"new\n"}
    assert commit_count(vault_path) == 3


def test_cli_export_prints_what_it_wrote(
    cli: Callable[..., Result], vault: Vault, vault_path: Path, tmp_path: Path
) -> None:
    vault.import_folder(sdk_folder(tmp_path / "memory"))
    head = git(vault_path, "rev-parse", "main").strip()
    target = tmp_path / "out"
    size = sum(len(d) for d in disk_files(tmp_path / "memory").values())
    result = cli("export", target)
    assert (result.code, result.err) == (0, "")
    assert result.out == (
        f"Exported 7 files ({size:,} bytes) of version {head[:10]} to {target}/memories.\n"
        "These files are PLAINTEXT (mode 0600): delete them when you are done.\n"
    )
    assert disk_files(target) == disk_files(tmp_path / "memory")


def test_cli_export_at_an_older_version(
    cli: Callable[..., Result], vault: Vault, tmp_path: Path, call: Callable[..., str], clock: FakeClock
) -> None:
    call(command="create", path="/memories/notes.txt", file_text="first\n")
    first = vault.history(limit=1)[0].id
    clock.advance(60)
    call(command="str_replace", path="/memories/notes.txt", old_str="first", new_str="second")
    result = cli("export", tmp_path / "out", "--at", first[:10])
    assert result.code == 0
    assert result.out.startswith(f"Exported 1 file (6 bytes) of version {first[:10]} to ")
    assert disk_files(tmp_path / "out") == {"/memories/notes.txt": b"first\n"}
    error_line(cli("export", tmp_path / "bad", "--at", "f" * 40))
    assert not (tmp_path / "bad").exists()


def test_cli_export_refusals_exit_2_and_write_nothing(
    cli: Callable[..., Result], vault_path: Path, tmp_path: Path, call: Callable[..., str]
) -> None:
    call(command="create", path="/memories/notes.txt", file_text="notes\n")
    write(tmp_path / "taken" / "memories" / "mine.txt", "mine\n")
    assert "already exists" in error_line(cli("export", tmp_path / "taken"))
    assert everything_under(tmp_path / "taken") == {"memories", "memories/mine.txt"}
    vault_before = everything_under(vault_path)
    assert "plaintext" in error_line(cli("export", vault_path / "plain"))
    assert everything_under(vault_path) == vault_before
    write(tmp_path / "file", "f\n")
    assert "not a folder" in error_line(cli("export", tmp_path / "file"))
    missing = cli("export", tmp_path / "missing" / "out")
    assert missing.code == 2 and missing.out == ""
    assert missing.err.startswith("vaultmem: ") and missing.err.count("\n") == 1, missing.err
    assert not (tmp_path / "missing").exists()
    assert [p for p in everything_under(tmp_path) if ".vaultmem-export-" in p] == []


def test_export_to_a_folder_named_memories_writes_into_it(vault: Vault, tmp_path: Path) -> None:
    VaultMemoryTool(vault, actor="t").call({"command": "create", "path": "/memories/a/b.txt", "file_text": "b\n"})
    result = vault.export_folder(tmp_path / "memory" / "memories")
    assert result.folder == tmp_path / "memory" / "memories"
    assert disk_files(tmp_path / "memory") == {"/memories/a/b.txt": b"b\n"}
    with pytest.raises(AlreadyExistsError):
        vault.export_folder(tmp_path / "memory" / "memories")


def test_cli_import_follows_a_lowered_policy_limit_when_no_option_is_given(
    cli: Callable[..., Result], vault: Vault, vault_path: Path, tmp_path: Path
) -> None:
    """An option not given means the vault's policy, never a constant."""
    assert cli("policy", "set", "max_file_bytes=1000").code == 0
    source = tmp_path / "memory"
    write(memories(source) / "big.txt", "y" * 50_000)
    commits = commit_count(vault_path)
    line = error_line(cli("import", source))
    assert "larger than the file size limit of 1,000 bytes" in line
    assert commit_count(vault_path) == commits
    assert cli("import", source, "--max-file-bytes", "60000").code == 0  # given: the option decides
