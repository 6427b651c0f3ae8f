"""Stock git after a power cut, before any vaultmem process runs: on ext4
with its journal, every name a write gives a file (its pack, its index, the
ref it moves) reaches the disk only after that file's data
(docs/format.md, "A write").

Since Linux 5.6, ext4 writes a buffered file's new blocks as *unwritten*
extents and marks them written only when the write completes, in a later
journal transaction than the one that allocated them.  Its ``data=ordered``
mode does not order such blocks before a rename.  So a ref renamed into place
right after its lock was written can reach the disk named, sized and full of
zeros, if the journal commits the rename before the lock's write completes:
`git log main` then says "ignoring broken ref".

The test makes that order happen every time.  Just before the rename, the
filesystem holding the vault's device is frozen, so the device completes no
write; a file created and synced right after the rename forces the journal to
commit it; the device is thawed while that commit waits.  The lock's write
then completes while the rename's transaction commits, and its extent is
marked written in the next transaction, which nothing commits before the
image is taken.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import powerloss
import pytest

from vaultmem import Vault, VaultMemoryTool, generate_key
from vaultmem.git import commits, upkeep

FIFREEZE = 0xC0045877
FITHAW = 0xC0045878


def test_stock_git_reads_main_after_a_power_cut_that_followed_a_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, devices: None
) -> None:
    key = generate_key()
    monkeypatch.setattr(upkeep.Upkeep, "poke", lambda self: None)  # no checkpoint syncs the write
    image = tmp_path / "cut.img"
    with powerloss.rig(tmp_path / "rig", journal=True) as rig:
        vault = Vault.init(rig.vault, key=key)
        tool = VaultMemoryTool(vault, actor="t")
        tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "first\n"})
        os.sync()  # everything so far is on the device
        outer = os.open(rig.outer, os.O_RDONLY)
        frozen = threading.Event()
        synced: list[BaseException | None] = []

        def force_commit() -> None:  # a new file synced: the journal commits the transaction holding the rename
            try:
                fd = os.open(rig.inner / "other-program", os.O_WRONLY | os.O_CREAT, 0o644)
                os.fsync(fd)
                os.close(fd)
                synced.append(None)
            except OSError as err:
                synced.append(err)

        def thaw() -> None:
            if frozen.is_set():
                frozen.clear()
                fcntl.ioctl(outer, FITHAW, 0)

        def at(step: str) -> None:
            if step == "ref-locked":
                fcntl.ioctl(outer, FIFREEZE, 0)
                frozen.set()
                threading.Timer(10, thaw).start()  # never left frozen, whatever happens
            elif step == "moved" and frozen.is_set():
                committer = threading.Thread(target=force_commit)
                committer.start()
                time.sleep(0.3)  # the journal's commit has begun and waits for the device
                thaw()
                committer.join(20)
                assert synced == [None]

        monkeypatch.setattr(commits, "on_step", at)
        try:
            tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "second\n"})
        finally:
            monkeypatch.setattr(commits, "on_step", None)
            thaw()
        live = powerloss.sh("git", "-C", str(rig.vault), "log", "--format=%H %s", "main").stdout
        rig.image(image)  # the power goes
        vault.close()
        os.close(outer)
    powerloss.sh("e2fsck", "-fy", str(image), check=False)
    with powerloss.attached(image) as device, powerloss.mounted(device, tmp_path / "boot") as root:
        path = root / powerloss.VAULT
        log = powerloss.sh("git", "-C", str(path), "log", "--format=%H %s", "main", check=False)
        assert log.returncode == 0, log.stderr
        assert log.stdout == live  # the synced rename holds the second create, whole
        assert len(live.splitlines()) == 2
        fsck = powerloss.git_fsck(path)
        assert fsck[0] == 0, fsck[1]
