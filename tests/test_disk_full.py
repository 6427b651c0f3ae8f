"""Invariants 2 and 4 when the disk says no: a vault on a full disk, or with a
folder vaultmem may not write.  A refused call is a clean error, leaves
nothing behind and never appears later (not after space returns, not after
another write, not after reopening); opening the vault meanwhile gives a
clear vaultmem error or a working vault, never a raw OSError.

The full disk is a small tmpfs mounted for the test (the suite runs as root
here; without permission to mount, these tests are skipped, saying so).  A
folder is made unwritable with ``chattr +i``: permission bits do not stop
root, the immutable flag does (no entry may be created, removed or renamed in
the folder, for every user), and it is cleared again whatever the test does.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from anthropic.lib.tools import ToolError
from stockgit_helpers import commit_count, fsck_strict, git_out, leftovers, memory_names, pack_files, rev

from vaultmem import Vault, VaultMemoryTool, generate_key
from vaultmem.errors import NotFoundError, VaultError

DISK_SIZE = "32m"  # room for a vault and whatever vaultmem preallocates; then filled up


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=False)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command here to make a small tmpfs disk")
    mounted = _run("mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE},mode=0700", "tmpfs", str(mount_point))
    if mounted.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        _run("chattr", "-R", "-i", str(mount_point))
        if _run("umount", str(mount_point)).returncode != 0:
            _run("umount", "-l", str(mount_point))


def free_bytes(folder: Path) -> int:
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize


def fill(disk: Path, leave: int) -> None:
    """Fill the disk with one file, leaving ``leave`` bytes free."""
    with open(disk / "filler", "ab") as filler:
        chunk = b"\0" * (1 << 20)
        remaining = free_bytes(disk) - leave
        while remaining > 0:
            remaining -= filler.write(chunk[: min(remaining, len(chunk))])
    assert free_bytes(disk) <= leave


@contextlib.contextmanager
def immutable(folder: Path) -> Iterator[None]:
    """No entry of ``folder`` may be created, removed or renamed, even by root."""
    made = _run("chattr", "+i", str(folder))
    if made.returncode != 0:
        pytest.skip(f"chattr +i is not supported on this filesystem: {made.stderr.strip()}")
    try:
        probe = folder / "probe"
        with pytest.raises(PermissionError):
            probe.touch()
        yield
    finally:
        _run("chattr", "-i", str(folder))


def text_of(size: int, n: int) -> str:
    line = f"note {n}: the customer prefers email over phone calls.\n"
    return (line * (size // len(line) + 1))[:size]


def open_or_clear_error(path: Path, key: str, expected: dict[str, str]) -> None:
    """Vault.open gives a working vault (its files read back) or a vaultmem error."""
    try:
        vault = Vault.open(path, key=key)
    except VaultError as err:
        assert str(err).startswith("Error:"), str(err)
        return
    except OSError as err:
        pytest.fail(f"Vault.open raised a raw {type(err).__name__}: {err}")
    for file_path, text in expected.items():
        assert vault.read(file_path) == text
    VaultMemoryTool(vault, actor="reader").call({"command": "view", "path": "/memories"})
    vault.close()


def library_refusal(write: Callable[[], Any]) -> VaultError:
    """The library refuses with its own error family, never a raw OSError."""
    try:
        write()
    except VaultError as err:
        return err
    except OSError as err:
        pytest.fail(f"the library raised a raw {type(err).__name__}: {err}")
    pytest.fail("the write was not refused")


def assert_refused_change_never_appears(
    path: Path, key: str, tool: VaultMemoryTool, written: dict[str, str], refused: str
) -> None:
    """Space or permission is back: the refused path is absent now, after another write and after reopening."""
    assert refused not in memory_names(path)
    reopened = Vault.open(path, key=key)
    with pytest.raises(NotFoundError):
        reopened.read(refused)
    assert memory_names(path) == sorted(written)
    tool.call({"command": "create", "path": "/memories/after.txt", "file_text": "after\n"})
    written = {**written, "/memories/after.txt": "after\n"}
    assert memory_names(path) == sorted(written)
    reopened = Vault.open(path, key=key)
    for file_path, text in written.items():
        assert reopened.read(file_path) == text
    with pytest.raises(NotFoundError):
        reopened.read(refused)
    assert commit_count(path) == len(written)
    fsck_strict(path)
    report = reopened.verify()
    assert report.ok, report.findings


# -- a full disk ----------------------------------------------------------------------


@pytest.mark.parametrize("operator_gc", [False, True], ids=["plain", "after-git-gc"])
@pytest.mark.parametrize("size", [40, 3000])
@pytest.mark.parametrize("pages", [1, 2, 3])
def test_a_write_refused_on_a_full_disk_never_comes_back(
    small_disk: Path, pages: int, size: int, operator_gc: bool
) -> None:
    key = generate_key()
    path = small_disk / "agent.vault"
    vault = Vault.init(path, key=key)
    tool = VaultMemoryTool(vault, actor="agent", session="full-disk")
    written: dict[str, str] = {}
    for n in range(3):
        written[f"/memories/early/{n}.txt"] = text_of(size, n)
        tool.call(
            {"command": "create", "path": f"/memories/early/{n}.txt", "file_text": written[f"/memories/early/{n}.txt"]}
        )
    if operator_gc:  # an operator ran git gc: main is in packed-refs, the objects in one pack
        git_out(path, "gc", "--quiet")
    vault.close()  # the upkeep after the writes is done: nothing frees space while the disk fills
    fill(small_disk, pages * os.statvfs(small_disk).f_frsize)

    refused = message = None
    for n in range(100):
        file_path, text = f"/memories/full/{n}.txt", text_of(size, 100 + n)
        vault.close()  # lets upkeep after the last write finish, so what changes now is this call's
        packs, head = pack_files(path), rev(path, "refs/heads/main")
        try:
            tool.call({"command": "create", "path": file_path, "file_text": text})
        except ToolError as err:
            refused, message = file_path, str(err.content)
            break
        written[file_path] = text
    vault.close()
    assert refused is not None and message is not None, "the disk never filled up"
    assert message.startswith("Error:"), message
    assert rev(path, "refs/heads/main") == head
    assert refused not in memory_names(path)
    left_behind = leftovers(path) + sorted(pack_files(path) - packs)  # reported last, after the worse defects

    open_or_clear_error(path, key, written)  # while the disk is still full
    (small_disk / "filler").unlink()
    assert_refused_change_never_appears(path, key, tool, written, refused)
    assert left_behind == [], "the refused call left files behind"


def test_a_library_write_refused_on_a_full_disk_raises_a_vault_error(small_disk: Path, tmp_path: Path) -> None:
    key = generate_key()
    path = small_disk / "agent.vault"
    vault = Vault.init(path, key=key)
    tool = VaultMemoryTool(vault, actor="agent")
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    source = tmp_path / "sdk-memory"
    (source / "memories").mkdir(parents=True)
    (source / "memories" / "big.txt").write_text(text_of(60_000, 1))
    vault.close()  # lets upkeep after the last write finish: nothing frees space while the disk fills
    fill(small_disk, os.statvfs(small_disk).f_frsize)
    packs, head = pack_files(path), rev(path, "refs/heads/main")

    err = library_refusal(lambda: vault.import_folder(source, actor="importer"))
    vault.close()
    assert str(err).startswith("Error:"), str(err)
    assert rev(path, "refs/heads/main") == head
    left_behind = leftovers(path) + sorted(pack_files(path) - packs)
    open_or_clear_error(path, key, {"/memories/a.txt": "a\n"})
    (small_disk / "filler").unlink()
    assert_refused_change_never_appears(path, key, tool, {"/memories/a.txt": "a\n"}, "/memories/big.txt")
    assert left_behind == [], "the refused call left files behind"


# -- folders vaultmem may not write --------------------------------------------------------


@pytest.mark.parametrize("folder", ["refs/heads", "objects/pack"])
def test_a_write_refused_in_an_unwritable_folder_never_comes_back(
    folder: str, vault: Vault, vault_path: Path, key: str, tool: VaultMemoryTool
) -> None:
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    written = {"/memories/a.txt": "a\n"}
    vault.close()  # lets upkeep after the write finish, so what changes now is the refused calls'
    packs, head = pack_files(vault_path), rev(vault_path, "refs/heads/main")
    with immutable(vault_path / folder):
        with pytest.raises(ToolError) as refused:
            tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "b\n"})
        assert str(refused.value.content).startswith("Error:"), refused.value.content
        open_or_clear_error(vault_path, key, written)
        err = library_refusal(lambda: vault.undo(actor="operator"))
        assert str(err).startswith("Error:"), str(err)
        assert rev(vault_path, "refs/heads/main") == head
        vault.close()
    left_behind = leftovers(vault_path) + sorted(pack_files(vault_path) - packs)
    assert_refused_change_never_appears(vault_path, key, tool, written, "/memories/b.txt")
    assert left_behind == [], "the refused calls left files behind"


# -- creating a vault -----------------------------------------------------------------------


@pytest.mark.parametrize("made", [False, True], ids=["new-folder", "empty-folder"])
def test_an_init_refused_on_a_full_disk_leaves_the_folder_as_it_was(small_disk: Path, made: bool) -> None:
    """Refused at any point (the folder, git's files, the journal, the
    keyring), init takes back what it made and says why."""
    path = small_disk / "agent.vault"
    if made:
        path.mkdir()
    refused = 0
    for leave in (0, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20):
        fill(small_disk, leave)
        try:
            vault = Vault.init(path, key=generate_key())
        except VaultError as err:
            refused += 1
            assert str(err).startswith("Error: ") and "no vault was created" in str(err).lower(), str(err)
            assert "Traceback" not in str(err)
            assert (sorted(path.iterdir()) == []) if made else not path.exists()
        else:  # room enough: a working vault
            VaultMemoryTool(vault).call({"command": "create", "path": "/memories/a.txt", "file_text": "a"})
            vault.close()
            shutil.rmtree(path)
            if made:
                path.mkdir()
        (small_disk / "filler").unlink()
    assert refused >= 3  # the small leaves must have been refused


@pytest.mark.parametrize("leave", [0, 64 << 10, 96 << 10, 128 << 10, 160 << 10, 192 << 10, 256 << 10])
def test_a_merging_pull_on_a_full_disk_changes_nothing_or_lands_whole(
    small_disk: Path, tmp_path: Path, leave: int
) -> None:
    """Issue 16: a pull that must merge, on a disk that fills up along the way
    (the fetch, the merge's pack, the journal): a vaultmem error and `main`
    as it was, or the whole merge; once space is back, the pull completes."""
    key = generate_key()
    server = tmp_path / "server.git"
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(server)], check=True)
    with Vault.init(tmp_path / "a.vault", key=key) as a:
        tool = VaultMemoryTool(a, actor="a")
        tool.call({"command": "create", "path": "/memories/shared.md", "file_text": "one\n\ntwo\n"})
        a.add_remote("origin", str(server))
        a.push()
        b = Vault.clone(str(server), small_disk / "b.vault", key=key)
        for n in range(40):
            tool.call({"command": "create", "path": f"/memories/a/{n}.md", "file_text": text_of(2000, n)})
        tool.call({"command": "str_replace", "path": "/memories/shared.md", "old_str": "one", "new_str": "ONE"})
        a.push()
    b_tool = VaultMemoryTool(b, actor="b")
    b_tool.call({"command": "str_replace", "path": "/memories/shared.md", "old_str": "two", "new_str": "TWO"})
    before = rev(b.path, "refs/heads/main")
    b.close()  # its upkeep done: nothing frees space behind fill's back
    fill(small_disk, leave)
    try:
        b.pull(actor="b")
        landed = True
    except VaultError as err:
        assert str(err).startswith("Error:") and "cannot reach" not in str(err), str(err)
        landed = False
    except OSError as err:
        pytest.fail(f"the pull raised a raw {type(err).__name__}: {err}")
    if not landed:
        assert rev(b.path, "refs/heads/main") == before
    (small_disk / "filler").unlink()
    b.close()
    with Vault.open(small_disk / "b.vault", key=key) as reopened:
        reopened.pull(actor="b")
        assert reopened.read("/memories/shared.md") == "ONE\n\nTWO\n"
        assert len(reopened.listing("/memories/a")) == 40
        assert reopened.verify().ok
    fsck_strict(small_disk / "b.vault")


def test_a_push_that_landed_is_reported_as_landed_even_if_this_disk_fills_after_it(
    small_disk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server took the push; then the fetch that updates this vault's
    tracking refs finds the disk full.  The push is reported as done (it is),
    not as "nothing was changed"."""
    from vaultmem.repo import remotes

    key = generate_key()
    server = tmp_path / "server.git"
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(server)], check=True)
    vault = Vault.init(small_disk / "v.vault", key=key)
    VaultMemoryTool(vault, actor="a").call({"command": "create", "path": "/memories/a.md", "file_text": "a\n"})
    vault.add_remote("origin", str(server))
    real_send = remotes._push_local

    def send_then_fill(*args: Any, **kwargs: Any) -> None:
        real_send(*args, **kwargs)
        fill(small_disk, 0)

    monkeypatch.setattr(remotes, "_push_local", send_then_fill)
    moved = vault.push()
    assert moved.moved["main"][1] == str(vault.head()) == rev(server, "refs/heads/main")
    (small_disk / "filler").unlink()
    monkeypatch.undo()
    assert vault.push().moved == {}
    vault.close()


@pytest.mark.parametrize("leave", [0, 4 << 10, 16 << 10, 64 << 10, 256 << 10])
def test_an_erasure_on_a_full_disk_is_refused_whole_or_finishes_when_space_is_back(
    small_disk: Path, leave: int
) -> None:
    """Issue 17: forget on a disk that fills up along the way (its commit, the
    new keyring, the journal wiped): a vaultmem error and nothing erased, or
    the commit recorded and the erasure finished by the next write once space
    is back; never a raw OSError, never a half-destroyed keyring."""
    key = generate_key()
    path = small_disk / "agent.vault"
    vault = Vault.init(path, key=key)
    tool = VaultMemoryTool(vault, actor="a")
    tool.call({"command": "create", "path": "/memories/ada.md", "file_text": "ada@example.com\n"})
    tool.call({"command": "create", "path": "/memories/other.md", "file_text": "other\n"})
    vault.close()
    fill(small_disk, leave)
    vault = Vault.open(path, key=key)
    try:
        vault.forget("/memories/ada.md", reason="GDPR request 4411")
        done = True
    except VaultError as err:
        assert str(err).startswith("Error:") and "Traceback" not in str(err), str(err)
        done = False
    (small_disk / "filler").unlink()
    after = Vault.open(path, key=key)
    VaultMemoryTool(after, actor="a").call({"command": "create", "path": "/memories/next.md", "file_text": "n\n"})
    recorded = any(v.command == "forget" for v in after.history())
    assert done <= recorded  # acknowledged: recorded
    report = Vault.open(path, key=key).verify()
    assert report.ok, report.problems
    assert report.erased == (1 if recorded else 0)
    assert Vault.open(path, key=key).read("/memories/other.md") == "other\n"
    subprocess.run(["git", "-C", str(path), "fsck", "--strict"], check=True, capture_output=True)


# -- a full btrfs ---------------------------------------------------------------------


@pytest.fixture
def full_btrfs(tmp_path: Path, devices: None) -> Iterator[Path]:
    """A btrfs of 128 MB on a loop device, mounted (then filled by the test).
    Overwriting a few bytes of a file in place needs free space on btrfs
    (copy on write; a small file's data lives in its metadata), so there
    even the writer lock's one-byte writes can fail with ENOSPC."""
    import powerloss

    powerloss.need("btrfs")
    image = tmp_path / "btrfs.img"
    with open(image, "wb") as f:
        f.truncate(powerloss.FS_SIZE_MB["btrfs"] << 20)
    powerloss.mkfs(image, journal=True, fs="btrfs")
    with powerloss.attached(image) as device, powerloss.mounted(device, tmp_path / "disk", "-t", "btrfs") as root:
        yield root


def fill_to_the_brim(disk: Path, leave: int) -> None:
    """Write until the disk says no, then give back ``leave`` bytes (btrfs's
    free-space figures are estimates, so ``fill`` cannot aim by them)."""
    written = 0
    with open(disk / "filler", "wb") as filler, contextlib.suppress(OSError):
        while True:
            filler.write(b"\0" * 65536)
            filler.flush()
            written += 65536
    os.truncate(disk / "filler", max(0, written - leave))
    os.sync()


def test_every_write_on_a_full_btrfs_is_made_or_refused_as_it_says(full_btrfs: Path) -> None:
    """Writes into a filled btrfs: each is acknowledged, or refused with the
    full disk's words and not made: never made while it said it was refused
    (the writer lock's release failing after the commit), never refused with
    a raw OSError's "storage error" words.  Once space is back, every
    acknowledged file reads back and no refused one ever appears."""
    key = generate_key()
    path = full_btrfs / "agent.vault"
    vault = Vault.init(path, key=key)
    tool = VaultMemoryTool(vault, actor="agent", session="full-btrfs")
    written = {f"/memories/early/{n}.txt": text_of(3000, n) for n in range(3)}
    for file_path, text in written.items():
        tool.call({"command": "create", "path": file_path, "file_text": text})
    vault.close()
    fill_to_the_brim(full_btrfs, 400_000)
    refused: dict[str, str] = {}
    for n in range(150):
        file_path, text = f"/memories/full/{n % 7}/{n}.txt", text_of(40 + 97 * n, n)
        try:
            tool.call({"command": "create", "path": file_path, "file_text": text})
        except ToolError as err:
            refused[file_path] = str(err.content)
            continue
        written[file_path] = text
    vault.close()
    assert refused, "the disk never filled up"
    said = {message for message in refused.values()}
    assert said == {"Error: the disk is full, so nothing was changed. Free space, then try again."}, said
    (full_btrfs / "filler").unlink()
    os.sync()
    reopened = Vault.open(path, key=key)
    came_back = [p for p in refused if p in memory_names(path)]
    assert came_back == [], f"{len(came_back)} refused writes are in the vault: {came_back[:5]}"
    for file_path, text in written.items():
        assert reopened.read(file_path) == text
    assert commit_count(path) == len(written)
    fsck_strict(path)
    report = reopened.verify()
    assert report.ok, report.findings
    reopened.close()


def test_a_write_is_made_when_retiring_merged_packs_before_it_fails(
    small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write first retires packs an earlier merge replaced (housekeeping:
    their objects are all in the merged pack too), renaming them into the
    trash.  On xfs such a rename can fail with ENOSPC on a full disk; here the
    trash is made immutable.  The write is made all the same, the packs wait
    for a later write, and none is left without its index."""
    from vaultmem.git import upkeep

    monkeypatch.setattr(upkeep, "IDLE", 60.0)  # no merge but the one made here
    monkeypatch.setattr(upkeep, "EVERY", 1000)
    key = generate_key()
    path = small_disk / "agent.vault"
    vault = Vault.init(path, key=key)
    tool = VaultMemoryTool(vault, actor="agent")
    written = {f"/memories/{n}.txt": f"note {n}\n" for n in range(upkeep.MERGE_AT + 4)}
    for file_path, text in written.items():
        tool.call({"command": "create", "path": file_path, "file_text": text})
    keeper = vault._upkeep
    replaced = keeper._merge()
    assert len(replaced) > 1
    with keeper._wake:
        keeper._redundant += replaced
    (path / "vaultmem" / "trash").mkdir(exist_ok=True)
    with immutable(path / "vaultmem" / "trash"):
        tool.call({"command": "create", "path": "/memories/during.txt", "file_text": "during\n"})
        written["/memories/during.txt"] = "during\n"
        assert vault.read("/memories/during.txt") == "during\n"
        stems = {p.stem for p in (path / "objects" / "pack").glob("pack-*.pack")}
        indexed = {p.stem for p in (path / "objects" / "pack").glob("pack-*.idx")}
        assert stems == indexed, "a pack was left without its index"
    for n in range(len(replaced) // upkeep.RETIRE_EACH + 1):  # each write retires a few
        tool.call({"command": "create", "path": f"/memories/after{n}.txt", "file_text": "after\n"})
        written[f"/memories/after{n}.txt"] = "after\n"
    left = {p.name for p in (path / "objects" / "pack").glob("pack-*.pack")}
    assert not left & {info.pack.name for info in replaced}, "the merged packs were never retired"
    vault.close()
    fsck_strict(path)
    reopened = Vault.open(path, key=key)
    for file_path, text in written.items():
        assert reopened.read(file_path) == text
    assert reopened.verify().ok
    reopened.close()
