"""Stock git and the file system around a vault, as operators set them up:
a vault reached through a folder whose ``.git`` names it, a folder of it on
another disk, a read-only mount, a symbolic or deleted branch, an operator's
rollback, processes killed while they work on the vault, a merge on a full
disk, and stock git commands beside three writers.  Afterwards every
acknowledged call is there once, ``git fsck --strict`` and ``verify()`` are
clean, a refused call never appears, and nothing is left behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from anthropic.lib.tools import ToolError
from stockgit_helpers import (
    GIT_ENV,
    SHARED,
    GitRun,
    WriterLog,
    Zygote,
    commit_count,
    fsck_strict,
    git_out,
    leftovers,
    listing,
    listing_diff,
    memory_names,
    rev,
    run_git,
)
from test_stock_git import Outcome, assert_every_acknowledged_call_is_there_once, assert_git_ran_cleanly, figures

from vaultmem import Vault, VaultMemoryTool
from vaultmem.errors import NotAVaultError, StorageError
from vaultmem.git import commits, objects
from vaultmem.git.journal import Journal

# -- a vault reached through a folder's .git ---------------------------------------------


def _point_at(folder: Path, vault_path: Path, how: str) -> Path:
    """``folder/.git`` naming the vault; returns what is opened: the folder, or
    the ``gitdir:`` file itself (``git --git-dir=folder/.git`` follows it too)."""
    folder.mkdir()
    if how == "symlink":
        os.symlink(vault_path, folder / ".git")
        return folder
    relative = os.path.relpath(vault_path, folder)
    (folder / ".git").write_text(f"gitdir: {relative}\n", encoding="utf-8")
    return folder / ".git" if how == "the-gitdir-file-itself" else folder


@pytest.mark.parametrize("how", ["gitdir-file", "symlink", "the-gitdir-file-itself"])
def test_a_vault_reached_through_a_folders_dot_git_reads_and_writes_the_vault(
    vault: Vault, vault_path: Path, key: str, call: Callable[..., str], tmp_path: Path, how: str
) -> None:
    call(command="create", path="/memories/before.txt", file_text="before\n")
    vault.close()
    project = tmp_path / "project"
    opened = _point_at(project, vault_path, how)
    assert git_out(project, "rev-parse", "refs/heads/main") == git_out(vault_path, "rev-parse", "refs/heads/main")

    through = Vault.open(opened, key=key)
    tool = VaultMemoryTool(through, actor="agent", session="dot-git")
    assert through.read("/memories/before.txt") == "before\n"  # not an empty memory
    assert "/memories/before.txt" in tool.call({"command": "view", "path": "/memories"})
    for i in range(3):
        tool.call({"command": "create", "path": f"/memories/through-{i}.txt", "file_text": f"{i}\n"})
    tool.call({"command": "str_replace", "path": "/memories/before.txt", "old_str": "before", "new_str": "after"})
    report = through.verify()
    assert report.ok, report.findings
    through.close()

    assert memory_names(vault_path) == [
        "/memories/before.txt",
        "/memories/through-0.txt",
        "/memories/through-1.txt",
        "/memories/through-2.txt",
    ]
    assert commit_count(vault_path) == 5
    direct = Vault.open(vault_path, key=key)
    assert direct.read("/memories/before.txt") == "after\n"
    assert direct.verify().ok
    direct.close()
    fsck_strict(vault_path)
    assert leftovers(vault_path) == []
    assert sorted(os.listdir(project)) == [".git"]  # nothing written beside the pointer


def test_a_write_through_a_folders_dot_git_is_not_reported_as_a_storage_failure(
    vault: Vault, vault_path: Path, key: str, tmp_path: Path
) -> None:
    vault.close()
    project = tmp_path / "project"
    _point_at(project, vault_path, "gitdir-file")
    tool = VaultMemoryTool(Vault.open(project, key=key), actor="agent")
    try:
        tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    except ToolError as err:  # before: "the storage failed (No such file or directory)"
        pytest.fail(f"the write was refused: {err.content}")
    assert memory_names(vault_path) == ["/memories/a.txt"]


# -- a writer lock holder killed before it records what it will write --------------------

CHILD = """
import os, signal, sys
from vaultmem import Vault
from vaultmem.ops.memory import MemoryCommands
vault = Vault.open(sys.argv[1])
if sys.argv[2] == "write-and-end":
    MemoryCommands(vault, actor="agent-b", session="b").create({"path": "/memories/wrong.txt", "file_text": "wrong\\n"})
    os._exit(0)  # the agent ends without Vault.close(): no checkpoint covers its write
elif sys.argv[2] == "killed-holding-the-lock":  # before it records an intent (building its change)
    with vault._lock.hold():
        os.kill(os.getpid(), signal.SIGKILL)
else:  # killed at one step of a write
    import vaultmem.git.commits as commits

    def at(step):
        if step == sys.argv[2]:
            os.kill(os.getpid(), signal.SIGKILL)

    commits.on_step = at
    MemoryCommands(vault, actor="killed", session="k").create({"path": "/memories/late.txt", "file_text": "late\\n"})
"""


def _child(vault_path: Path, key: str, role: str) -> int:
    env = {**os.environ, **GIT_ENV, "VAULTMEM_KEY": key}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(vault_path), role], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode in (0, -9), done.stderr
    return done.returncode


def test_an_operators_rollback_stays_after_a_lock_holder_is_killed_before_recording_its_intent(
    vault: Vault, vault_path: Path, key: str, call: Callable[..., str]
) -> None:
    """docs/format.md: within one epoch a journaled move is never made again,
    so an operator's ``git update-ref refs/heads/main main~1`` stays.  A
    writer killed before it recorded its intent used to leave the intent of
    the last finished write in the lock file, and the next writer made that
    write's move again, bringing back what the operator had rolled back."""
    call(command="create", path="/memories/a.txt", file_text="a\n")
    vault.close()
    good = rev(vault_path, "refs/heads/main")
    assert _child(vault_path, key, "write-and-end") == 0
    wrong = rev(vault_path, "refs/heads/main")
    assert wrong != good
    assert any(m.new.hex() == wrong for m in Journal(vault_path).pending())  # no checkpoint covers it
    git_out(vault_path, "update-ref", "refs/heads/main", good, wrong)  # the operator rolls it back
    assert _child(vault_path, key, "killed-holding-the-lock") == -9

    tool = VaultMemoryTool(Vault.open(vault_path, key=key), actor="agent-c", session="c")
    tool.call({"command": "create", "path": "/memories/c.txt", "file_text": "c\n"})
    assert rev(vault_path, "refs/heads/main~1") == good
    assert memory_names(vault_path) == ["/memories/a.txt", "/memories/c.txt"]
    assert commit_count(vault_path) == 2
    tool.vault.close()
    reopened = Vault.open(vault_path, key=key)
    report = reopened.verify()
    assert report.ok, report.findings
    reopened.close()
    fsck_strict(vault_path)
    assert leftovers(vault_path) == []


# -- a folder inside the vault on another file system ------------------------------------


@pytest.fixture
def other_disk(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs: another file system than the vault's (skipped where mounting is not permitted)."""
    mount_point = tmp_path / "other-disk"
    mount_point.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command here to make another file system")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", str(mount_point)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, check=False)


@pytest.mark.parametrize("folder", ["objects", "refs", "vaultmem"])
def test_a_folder_of_the_vault_linked_to_another_disk_is_refused_saying_so(
    vault: Vault, vault_path: Path, key: str, call: Callable[..., str], other_disk: Path, folder: str
) -> None:
    """Git reads and writes a repository whose ``objects`` folder is a link to
    another disk; vaultmem renames and links its new files between the vault's
    folders, which cannot cross file systems.  The write is refused saying
    why (it used to say "the storage failed (Invalid cross-device link)" and
    to free space or fix the permissions), leaves nothing, and reads go on."""
    call(command="create", path="/memories/a.txt", file_text="a\n")
    vault.close()
    moved = other_disk / folder
    shutil.copytree(vault_path / folder, moved, symlinks=True)
    shutil.rmtree(vault_path / folder)
    os.symlink(moved, vault_path / folder)
    head = rev(vault_path, "refs/heads/main")
    before = listing(vault_path)
    before_moved = listing(moved)

    reopened = Vault.open(vault_path, key=key)
    tool = VaultMemoryTool(reopened, actor="agent")
    for n in range(2):
        with pytest.raises(ToolError) as refused:
            tool.call({"command": "create", "path": f"/memories/b{n}.txt", "file_text": "b\n"})
        message = str(refused.value.content)
        assert message.startswith("Error: the vault's folders are on more than one file system"), message
        assert "nothing was changed" in message and "Free space" not in message, message
    assert reopened.read("/memories/a.txt") == "a\n"
    reopened.close()

    assert rev(vault_path, "refs/heads/main") == head
    assert memory_names(vault_path) == ["/memories/a.txt"]
    state = set(os.listdir(vault_path / "vaultmem"))
    assert not [name for name in state if name.startswith("tmp-")], state
    # The read log, the writer lock's flag, and the journal (a refused move is voided in it).
    ignore = ("vaultmem/reads", "vaultmem/lock", "vaultmem/journal")
    assert [d for d in listing_diff(before, listing(vault_path)) if not d.split()[1].startswith(ignore)] == []
    assert [
        d for d in listing_diff(before_moved, listing(moved)) if d.split()[1] not in ("reads", "lock", "journal")
    ] == []
    fsck_strict(vault_path)


def _packs_without_index(vault_path: Path) -> list[str]:
    names = set(os.listdir(vault_path / "objects" / "pack"))
    return sorted(n for n in names if n.endswith(".pack") and n[: -len(".pack")] + ".idx" not in names)


def test_a_pack_a_killed_writer_left_without_its_index_is_removed_by_the_next_writer(
    vault: Vault, vault_path: Path, key: str, call: Callable[..., str]
) -> None:
    """Killed between renaming its pack and its index into ``objects/pack``:
    git never reads that pack (it finds packs by their index), ``git
    count-objects -v`` counted it as garbage and warned about it on every run,
    and nothing but a ``git gc`` removed it."""
    call(command="create", path="/memories/a.txt", file_text="a\n")
    vault.close()
    assert _child(vault_path, key, "packed") == -9
    assert len(_packs_without_index(vault_path)) == 1  # what the kill left

    tool = VaultMemoryTool(Vault.open(vault_path, key=key), actor="next")
    tool.call({"command": "create", "path": "/memories/n.txt", "file_text": "n\n"})
    tool.vault.close()
    assert _packs_without_index(vault_path) == []
    counted = subprocess.run(
        ["git", "-C", str(vault_path), "count-objects", "-v"], capture_output=True, text=True, check=True
    )
    assert "garbage: 0" in counted.stdout and counted.stderr == "", counted.stdout + counted.stderr
    assert memory_names(vault_path) == ["/memories/a.txt", "/memories/n.txt"]
    assert leftovers(vault_path) == []
    fsck_strict(vault_path)


def test_a_merge_file_a_killed_process_left_in_the_state_folder_is_removed_later(
    vault: Vault, vault_path: Path, key: str, call: Callable[..., str]
) -> None:
    """The upkeep merges packs after the calls, without the writer lock, into
    ``vaultmem/tmp-<pid>-<thread>-merge.pack``.  A process killed meanwhile
    (measured: 2-2.7 MB files after 20 writes of 100 kB) left them for good:
    no dirty lock told a later writer.  A later writer removes those of a
    process that is gone, once they are older than any merge takes; a live
    process's, or a young one, stays."""
    call(command="create", path="/memories/a.txt", file_text="a\n")
    vault.close()
    state = vault_path / "vaultmem"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(gone.stdout)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        old = commits.MERGE_LEFTOVER_AGE + 60
        files = {
            f"tmp-{dead}-140000388708032-merge.pack": (old, False),
            f"tmp-{dead}-140000388708032-merge.idx": (old, False),
            f"tmp-{dead}-140000388708099-merge.pack": (0, True),  # young: a merge may still be writing it
            f"tmp-{live.pid}-140000388708032-merge.pack": (old, True),  # its process still runs
        }
        for name, (age, _) in files.items():
            (state / name).write_bytes(b"PACK" + b"\0" * 4096)
            when = os.stat(state / name).st_mtime - age
            os.utime(state / name, (when, when))

        tool = VaultMemoryTool(Vault.open(vault_path, key=key), actor="next")
        tool.call({"command": "create", "path": "/memories/n.txt", "file_text": "n\n"})
        tool.vault.close()
        assert sorted(n for n in os.listdir(state) if n.startswith("tmp-")) == sorted(
            name for name, (_, stays) in files.items() if stays
        )
    finally:
        live.kill()
        live.wait()
    assert memory_names(vault_path) == ["/memories/a.txt", "/memories/n.txt"]
    fsck_strict(vault_path)


def test_a_symbolic_main_is_refused_saying_what_it_is_and_how_to_undo_it(
    vault: Vault, vault_path: Path, key: str, tool: VaultMemoryTool
) -> None:
    """``git symbolic-ref refs/heads/main refs/heads/other``: reads follow it
    and ``verify`` finds nothing wrong, yet a write used to say main "does
    not hold a commit id; run `vaultmem verify` and restore it"."""
    tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    git_out(vault_path, "update-ref", "refs/heads/other", "refs/heads/main")
    git_out(vault_path, "symbolic-ref", "refs/heads/main", "refs/heads/other")
    other = rev(vault_path, "refs/heads/other")
    with pytest.raises(ToolError) as refused:
        tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "b\n"})
    message = str(refused.value.content)
    assert message.startswith("Error: the vault's refs/heads/main is a symbolic ref (to refs/heads/other)"), message
    assert "nothing was changed" in message, message
    assert rev(vault_path, "refs/heads/other") == other
    assert leftovers(vault_path) == []
    advice = message.split("Make it a plain ref again: ")[1].split()
    assert advice[:2] == ["git", "update-ref"]
    git_out(vault_path, *advice[1:])
    tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "b\n"})
    assert memory_names(vault_path) == ["/memories/a.txt", "/memories/b.txt"]
    assert rev(vault_path, "refs/heads/main~1") == other
    assert vault.verify().ok
    fsck_strict(vault_path)


# -- a vault this process may read but not write --------------------------------------------


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=False)


@contextlib.contextmanager
def read_only_view(vault_path: Path, tmp_path: Path) -> Iterator[Path]:
    """The vault's folder bind-mounted read-only: what an auditor's read-only mount, or a
    container's read-only volume, gives a process (skipped where mounting is not permitted)."""
    view = tmp_path / "read-only"
    view.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command here")
    if _run("mount", "--bind", str(vault_path), str(view)).returncode != 0:
        pytest.skip("bind mounts are not permitted here")
    try:
        if _run("mount", "-o", "remount,bind,ro", str(view)).returncode != 0:
            pytest.skip("read-only bind mounts are not permitted here")
        yield view
    finally:
        if _run("umount", str(view)).returncode != 0:
            _run("umount", "-l", str(view))


@pytest.mark.parametrize("how", ["read-only-mount", "immutable-lock-file"])
def test_a_write_to_a_vault_whose_lock_cannot_be_written_is_a_clear_vault_error(
    vault: Vault, vault_path: Path, key: str, call: Callable[..., str], tmp_path: Path, how: str
) -> None:
    """The writer lock is the first file a write opens for writing.  When it
    could not be (a read-only mount, a lock file this user may not write), the
    library raised a raw OSError, and the tool said only "a storage error on
    the host"; now both say why, as for any other write the disk refuses."""
    call(command="create", path="/memories/a.txt", file_text="a\n")
    vault.close()
    head = rev(vault_path, "refs/heads/main")
    lock = vault_path / "vaultmem" / "lock"
    with contextlib.ExitStack() as undo:
        if how == "read-only-mount":
            where = undo.enter_context(read_only_view(vault_path, tmp_path))
            expected = "Error: the vault is on a read-only file system, so nothing was changed."
        else:
            if _run("chattr", "+i", str(lock)).returncode != 0:
                pytest.skip("chattr +i is not supported here")
            undo.callback(_run, "chattr", "-i", str(lock))
            where = vault_path
            expected = "Error: a folder of the vault is not writable, so nothing was changed."
        opened = Vault.open(where, key=key)
        assert opened.read("/memories/a.txt") == "a\n"  # reads need no lock
        with pytest.raises(StorageError) as refused:
            opened.undo(actor="operator")
        assert str(refused.value).startswith(expected), str(refused.value)
        tool = VaultMemoryTool(opened, actor="agent")
        with pytest.raises(ToolError) as told:
            tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "b\n"})
        assert str(told.value.content).startswith(expected), told.value.content
        opened.close()
    assert rev(vault_path, "refs/heads/main") == head
    assert memory_names(vault_path) == ["/memories/a.txt"]
    assert leftovers(vault_path) == []
    fsck_strict(vault_path)


# -- an operator deletes the keyring branch -------------------------------------------------


def test_a_vault_whose_keyring_branch_was_deleted_says_so_and_how_to_restore_it(
    vault: Vault, vault_path: Path, key: str, call: Callable[..., str]
) -> None:
    """``git branch -D vaultmem-keyring`` (an operator tidying branches): the
    vault used to be reported as "not a vault (a git repository without a
    vaultmem keyring)", as if nothing of it were left.  The keyring's commit
    is still there until a ``git gc`` prunes it; the message says so and how
    to bring it back, and following it opens every version again."""
    call(command="create", path="/memories/a.txt", file_text="a\n")
    call(command="create", path="/memories/b.txt", file_text="b\n")
    vault.close()
    git_out(vault_path, "branch", "-D", "vaultmem-keyring")
    with pytest.raises(NotAVaultError) as refused:
        Vault.open(vault_path, key=key)
    message = str(refused.value)
    assert "is a vault whose keyring branch refs/heads/vaultmem-keyring is gone" in message, message
    assert "`git fsck`" in message and "`git update-ref refs/heads/vaultmem-keyring ID`" in message, message

    dangling = [
        line.split()[2]
        for line in git_out(vault_path, "fsck", "--no-progress").splitlines()
        if line.startswith("dangling commit ")
    ]
    keyrings = [c for c in dangling if "keyring.json" in git_out(vault_path, "ls-tree", "--name-only", c).split()]
    assert len(keyrings) == 1, dangling
    git_out(vault_path, "update-ref", "refs/heads/vaultmem-keyring", keyrings[0])
    reopened = Vault.open(vault_path, key=key)
    assert reopened.read("/memories/a.txt") == "a\n" and reopened.read("/memories/b.txt") == "b\n"
    assert reopened.verify().ok
    reopened.close()


def test_a_git_repository_that_never_was_a_vault_is_still_not_a_vault(tmp_path: Path, key: str) -> None:
    plain = tmp_path / "plain.git"
    git_out(tmp_path, "init", "--quiet", "--bare", str(plain))
    with pytest.raises(NotAVaultError, match="is not a vault \\(a git repository without a vaultmem keyring\\)"):
        Vault.open(plain, key=key)


# -- the upkeep's pack merge on a full disk ----------------------------------------------------


def _free_bytes(folder: Path) -> int:
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize


def test_a_merged_pack_that_does_not_fit_leaves_nothing_in_the_pack_folder(other_disk: Path, key: str) -> None:
    """The upkeep puts a merged pack in place without the writer lock.  It
    used to rename the pack into ``objects/pack`` before writing its index:
    with room for the pack but not the index, the pack stayed there, without
    an index, for good (a full disk, or a process killed meanwhile)."""
    path = other_disk / "v.git"
    vault = Vault.init(path, key=key)
    try:
        blob = objects.packed(objects.BLOB, os.urandom(300_000))
        pack = objects.build_pack([blob])
        assert len(pack.idx) > 0
        before = set(os.listdir(path / "objects" / "pack"))
        page = os.statvfs(other_disk).f_frsize
        room = -(-len(pack.data) // page) * page  # the pack's pages, none for its index
        with open(other_disk / "filler", "wb") as filler:
            filler.write(b"\0" * (_free_bytes(other_disk) - room))
        assert _free_bytes(other_disk) == room
        with pytest.raises(OSError):
            vault._commits.install(pack)
        assert set(os.listdir(path / "objects" / "pack")) == before
        assert not [n for n in os.listdir(path / "vaultmem") if n.startswith("tmp-")]
        (other_disk / "filler").unlink()
        vault._commits.install(pack)  # with room, both files, the index last
        assert {f"pack-{pack.name}.pack", f"pack-{pack.name}.idx"} <= set(os.listdir(path / "objects" / "pack"))
        fsck_strict(path)
    finally:
        vault.close()


# -- more of what operators run beside three writers -------------------------------------------

# Stock git commands test_stock_git.py does not run beside writers, in turn.
ROUND = (
    ("repack", "-d", "--geometric=2", "-q"),
    ("repack", "-adk", "-q"),
    ("prune-packed",),
    ("commit-graph", "write", "--reachable", "--split"),
    ("notes", "add", "-f", "-m", "audited", "refs/heads/main"),
    ("reflog", "expire", "--all", "--expire=now"),
    ("symbolic-ref", "refs/heads/latest", "refs/heads/main"),
    ("symbolic-ref", "--delete", "refs/heads/latest"),
    ("clone",),
)


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    z = Zygote()
    yield z
    z.close()


@pytest.mark.slow
def test_more_stock_git_beside_three_writers_loses_nothing(
    zygote: Zygote, vault: Vault, vault_path: Path, key: str, tmp_path: Path
) -> None:
    """Geometric and -k repacks, prune-packed, a split commit-graph, notes, a
    reflog expiry, a symbolic ref made and deleted, and a clone of the vault
    (whose own fsck must pass), in turn while three agents write."""
    VaultMemoryTool(vault, actor="setup").call({"command": "create", "path": SHARED, "file_text": "bottom\n"})
    go = tmp_path / "go"
    outs = {w: tmp_path / f"writer-{w}.jsonl" for w in range(3)}
    pids: dict[int, Path] = {}
    for w in range(3):
        args = (str(vault_path), str(w), "2.5", "300", str(outs[w]))
        pids[zygote.spawn(key, go, tmp_path / f"writer-{w}.err", "writer", *args)] = tmp_path / f"writer-{w}.err"
    go.touch()
    runs: list[GitRun] = []
    deadline = time.monotonic() + 2.5
    n = 0
    while time.monotonic() < deadline and n < 500:
        command = ROUND[n % len(ROUND)]
        if command == ("clone",):
            copy = tmp_path / f"clone-{n}.git"
            runs.append(run_git(tmp_path, "clone", "--bare", "--quiet", str(vault_path), str(copy)))
            if runs[-1].returncode == 0:
                checked = run_git(copy, "fsck", "--strict", "--no-dangling", "--no-progress")
                assert checked.returncode == 0, checked.describe() + checked.stdout
                shutil.rmtree(copy)
        else:
            runs.append(run_git(vault_path, *command))
        n += 1
    for pid, err in pids.items():
        assert zygote.wait(pid) == 0, f"a vaultmem writer crashed:\n{err.read_text() if err.exists() else ''}"
    outcome = Outcome({w: WriterLog.read(outs[w]) for w in range(3)}, git_runs=runs)
    print(figures("more stock git", vault_path, outcome))
    assert outcome.acked >= 30, figures("more stock git", vault_path, outcome)
    assert_git_ran_cleanly(outcome)
    assert_every_acknowledged_call_is_there_once(vault_path, key, outcome)
