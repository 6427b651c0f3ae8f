"""No acknowledged call waits for housekeeping (docs/format.md, "Upkeep after
the call"): merging packs, syncing the file system and removing files happen
in the background thread, and none of them holds the writer
lock, so a call that arrives meanwhile is not held up by them.  A call only
retires the packs a merge replaced (renames, which free nothing), so that no
git command started after a call returns loses a pack it has listed."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import git

from vaultmem import Vault
from vaultmem.git import commits, durable, objects, upkeep


def test_merges_syncs_and_removals_run_in_the_background_without_the_writer_lock(
    vault: Vault, vault_path: Path, call: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, str, bool]] = []
    holder: list[threading.Thread | None] = [None]
    real_hold = vault._lock.hold

    @contextlib.contextmanager
    def hold() -> Iterator[None]:
        with real_hold():
            holder[0] = threading.current_thread()
            try:
                yield
            finally:
                holder[0] = None

    monkeypatch.setattr(vault._lock, "hold", hold)

    def watch(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            seen.append((name, threading.current_thread().name, holder[0] is threading.current_thread()))
            return real(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(objects, "merge", watch("merge", objects.merge))
    monkeypatch.setattr(commits.CommitPath, "empty_trash", watch("empty", commits.CommitPath.empty_trash))
    monkeypatch.setattr(commits.CommitPath, "retire", watch("retire", commits.CommitPath.retire))
    monkeypatch.setattr(durable, "sync_filesystem", watch("sync", durable.sync_filesystem))
    monkeypatch.setattr(upkeep, "IDLE", 60.0)  # only the every-EVERY-writes rounds, during the burst
    for i in range(3 * upkeep.EVERY):
        call(command="create", path=f"/memories/f{i}.txt", file_text=f"{i}\n")
    calls_done = len(seen)
    vault.close()  # may wait for upkeep and empty the trash itself: no call is waiting then
    during = seen[:calls_done]
    background = [entry for entry in during if entry[0] != "retire"]
    assert {name for name, _, _ in background} == {"merge", "sync", "empty"}, seen
    assert all(thread == "vaultmem-upkeep" and not held for _, thread, held in background), seen
    retired = [entry for entry in during if entry[0] == "retire"]
    assert retired and all(thread == "MainThread" and held for _, thread, held in retired), seen
    packs = list((vault_path / "objects" / "pack").glob("*.pack"))
    assert len(packs) < 2 * upkeep.EVERY  # 96 writes; the last merge's packs go with the next write
    assert list((vault_path / "vaultmem" / commits.TRASH).iterdir()) == []  # emptied at close
    git(vault_path, "fsck", "--strict")


def test_no_pack_leaves_git_sight_after_the_last_call_returns(
    vault: Vault, vault_path: Path, call: Callable[..., str]
) -> None:
    """An auditor's `git fsck` or `git log` started once the agents are done
    never loses a pack it has listed: the upkeep after the last call adds
    files to objects/pack but takes none away."""
    for i in range(3 * upkeep.EVERY):
        call(command="create", path=f"/memories/f{i}.txt", file_text=f"{i}\n")
    listed = {p.name for p in (vault_path / "objects" / "pack").iterdir()}
    vault.close()  # every upkeep round after the last call is done
    after = {p.name for p in (vault_path / "objects" / "pack").iterdir()}
    assert listed <= after


@pytest.mark.parametrize("when", ["before-install", "after-install"])
def test_a_pack_merge_spanning_an_erasure_is_dropped(
    vault: Vault, vault_path: Path, call: Callable[..., str], monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """An erasure (in this or another process) removes objects while a merge
    copies them: the merged pack could bring a removed key back, so it goes,
    and the packs it would have replaced stay."""
    vault._upkeep.stop()
    monkeypatch.setattr(upkeep, "IDLE", 3600.0)  # no merge but the one below
    monkeypatch.setattr(upkeep, "EVERY", 10_000)
    for n in range(upkeep.MERGE_AT + 2):
        call(command="create", path=f"/memories/f{n}.txt", file_text=f"{n}\n")
    before = {p.name for p in (vault_path / "objects" / "pack").iterdir()}
    real_merge, real_install = objects.merge, vault._commits.install

    def merge_then_erase(packs: Any) -> Any:
        merged = real_merge(packs)
        if when == "before-install":
            vault._commits.mark_pruning()
        return merged

    def install_then_erase(pack: objects.Pack) -> None:
        real_install(pack)
        if when == "after-install":
            vault._commits.mark_pruning()

    monkeypatch.setattr(objects, "merge", merge_then_erase)
    monkeypatch.setattr(vault._commits, "install", install_then_erase)
    assert vault._upkeep._merge() == []
    assert {p.name for p in (vault_path / "objects" / "pack").iterdir()} == before
    monkeypatch.setattr(objects, "merge", real_merge)
    monkeypatch.setattr(vault._commits, "install", real_install)
    assert vault._upkeep._merge()  # and the next merge, with no erasure beside it, runs


def test_one_upkeep_thread_serves_a_session_and_a_write_does_not_wake_it(
    vault: Vault, call: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Waking the upkeep thread or starting a new one hands it the GIL in
    the middle of a call: a write only counts, the thread looks at the count
    when its wait ends, and it stays for LINGER seconds after its last round."""
    monkeypatch.setattr(upkeep, "IDLE", 0.02)
    monkeypatch.setattr(upkeep, "LINGER", 30.0)
    keeper = vault._upkeep
    wakes: list[int] = []
    real_notify = keeper._wake.notify

    def notify(n: int = 1) -> None:
        wakes.append(n)
        real_notify(n)

    monkeypatch.setattr(keeper._wake, "notify", notify)
    call(command="create", path="/memories/a.txt", file_text="a\n")
    first = keeper._thread
    assert first is not None and first.is_alive()
    deadline = time.monotonic() + 10
    while keeper._since_run and time.monotonic() < deadline:  # its round ran
        time.sleep(0.01)
    time.sleep(0.1)
    # A burst: on a busy machine two writes can be more than 20 ms apart, and
    # a pause that long would end it (the thread would run a round between).
    monkeypatch.setattr(upkeep, "IDLE", 30.0)
    for i in range(upkeep.EVERY - 1):
        call(command="create", path=f"/memories/b{i}.txt", file_text="b\n")
    assert keeper._thread is first and first.is_alive()  # no new thread for the next writes
    assert wakes == []  # and none of them woke it
    call(command="create", path="/memories/c.txt", file_text="c\n")
    assert wakes == [1]  # the EVERY-th write of a burst does


def test_the_upkeep_thread_ends_when_it_has_nothing_to_do(
    vault: Vault, call: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upkeep, "IDLE", 0.02)
    monkeypatch.setattr(upkeep, "LINGER", 0.1)
    call(command="create", path="/memories/a.txt", file_text="a\n")
    thread = vault._upkeep._thread
    assert thread is not None
    thread.join(10)
    assert not thread.is_alive() and vault._upkeep._thread is None
    call(command="create", path="/memories/b.txt", file_text="b\n")  # the next write starts another
    assert vault._upkeep._thread is not None and vault._upkeep._thread is not thread


def test_a_write_retires_a_few_packs_of_a_merge_not_all(
    vault: Vault, vault_path: Path, key: str, call: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A merge replaces 30-odd packs; retiring them all in the next call made
    that call 10x slower than the others.  Each write retires RETIRE_EACH at
    most, and a merge never takes packs still waiting to be retired."""
    monkeypatch.setattr(upkeep, "IDLE", 60.0)  # only the every-EVERY-writes rounds
    per_call: list[int] = []
    real_retire = commits.CommitPath.retire

    def counting(self: commits.CommitPath, pack: Path) -> None:
        per_call[-1] += 1
        real_retire(self, pack)

    monkeypatch.setattr(commits.CommitPath, "retire", counting)
    keeper = vault._upkeep
    for i in range(4 * upkeep.EVERY):
        per_call.append(0)
        call(command="create", path=f"/memories/f{i}.txt", file_text=f"{i}\n")
        with keeper._wake:
            pending = {info.pack.name for info in keeper._redundant}
        if pending and i % 8 == 0:
            replaced = keeper._merge()  # a merge now: none of the pending packs in it
            assert not pending & {info.pack.name for info in replaced}
            with keeper._wake:
                keeper._redundant += replaced
    assert sum(per_call) > 2 * upkeep.RETIRE_EACH  # merges ran, and their packs were retired
    assert max(per_call) <= upkeep.RETIRE_EACH, per_call
    for i in range(upkeep.EVERY):  # writes go on: the pending packs all go
        per_call.append(0)
        call(command="create", path=f"/memories/g{i}.txt", file_text=f"{i}\n")
    vault.close()
    git(vault_path, "fsck", "--strict")
    reopened = Vault.open(vault_path, key=key)
    for i in range(4 * upkeep.EVERY):
        assert reopened.read(f"/memories/f{i}.txt") == f"{i}\n"
    reopened.close()


def test_a_burst_of_writes_never_merges_a_large_pack_and_a_pause_does(
    vault: Vault, vault_path: Path, call: Callable[..., str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A merge holds the interpreter lock for as long as it copies objects,
    and a call that needs the lock meanwhile waits: during a burst of writes
    only small packs are merged, and the large one (an import) waits for a
    pause, when no call is running."""
    folder = tmp_path / "memories"
    folder.mkdir()
    for n in range(60):
        (folder / f"imported{n}.txt").write_text(f"{n}\n")
    vault.import_folder(folder, actor="operator", session="import")
    pack_dir = vault_path / "objects" / "pack"
    large = {info.pack.name for info in objects.list_packs(vault_path / "objects") if info.count > 40}
    assert len(large) == 1
    merged: list[int] = []
    real_merge = objects.merge

    def counting(packs: Any) -> Any:
        merged.append(max(info.count for info in packs))
        return real_merge(packs)

    monkeypatch.setattr(objects, "merge", counting)
    monkeypatch.setattr(upkeep, "BURST_LIMIT", 40, raising=False)
    monkeypatch.setattr(upkeep, "IDLE", 60.0)  # only the every-EVERY-writes rounds, during the burst
    for i in range(3 * upkeep.EVERY):
        call(command="create", path=f"/memories/f{i}.txt", file_text=f"{i}\n")
    vault._upkeep.stop()
    assert merged, "the burst merged its small packs"
    assert max(merged) <= 40, merged
    assert large <= {p.name for p in pack_dir.glob("*.pack")}
    monkeypatch.setattr(upkeep, "MERGE_AT", 2)  # whatever the burst's merges left
    vault._upkeep.run_once()  # a pause: packs of up to MERGE_LIMIT objects
    assert max(merged) > 40, merged
    for i in range(2 * upkeep.EVERY // upkeep.RETIRE_EACH):  # the next writes retire what it replaced
        call(command="create", path=f"/memories/after{i}.txt", file_text="after\n")
    vault.close()
    assert not large & {p.name for p in pack_dir.glob("*.pack")}
    git(vault_path, "fsck", "--strict")
