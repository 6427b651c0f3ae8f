"""No acknowledged call waits for housekeeping (docs/format.md, "Upkeep after
the call"): merging packs, syncing the file system and removing files happen
in the background thread, and none of them holds the writer
lock, so a call that arrives meanwhile is not held up by them.  A call only
retires the packs a merge replaced (renames, which free nothing), so that no
git command started after a call returns loses a pack it has listed."""

from __future__ import annotations

import contextlib
import threading
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
