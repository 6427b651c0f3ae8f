"""The epoch of a journal record (docs/format.md, "A power cut") tells a
write made through the page cache still in use from one a power cut may
have lost.  Without a restart, the same disk can come back on the same
device number and be mounted with the same mount id: Linux gives a device
number and a mount id freed a moment ago to the next disk and mount.  A
disk image taken mid-write (a snapshot, a copy of a virtual disk) attached
where the live disk was is then not the same epoch, and its writes must be
repaired from the journal: the disk's sequence number, which Linux never
gives twice in one boot, tells them apart."""

from __future__ import annotations

import os
from pathlib import Path

import powerloss
import pytest

from vaultmem.git.journal import epoch, same_epoch


def disk(tmp_path: Path, fs: str = "ext4") -> Path:
    """An image of a new, empty file system."""
    powerloss.need(fs)
    image = tmp_path / "disk.img"
    with open(image, "wb") as f:
        f.truncate((16 if fs == "ext4" else powerloss.FS_SIZE_MB[fs]) << 20)
    powerloss.mkfs(image, journal=True, fs=fs)
    return image


@pytest.mark.parametrize("fs", ["ext4", "xfs", "btrfs"])
def test_a_disk_attached_again_on_the_same_device_is_another_epoch(tmp_path: Path, devices: None, fs: str) -> None:
    """On btrfs, whose subvolumes give their files a device number of their
    own that no mount shows in /proc/self/mountinfo, too: the epoch is the
    mount's that holds the vault, with the sequence number of the disk the
    mount names, never "unknown" (which equals "unknown", so a power cut
    would never be repaired)."""
    image = disk(tmp_path, fs)
    mountpoint = tmp_path / "m"
    with powerloss.attached(image) as device, powerloss.mounted(device, mountpoint, "-t", fs) as root:
        (root / "agent.vault").mkdir()
        before = epoch(root / "agent.vault")
        assert "@" in before.decode("ascii").split("/")[1], before  # not "unknown": the disk's sequence number
    # the same disk on the same device, mounted at once on the same folder
    powerloss.sh("losetup", "--direct-io=off", device, str(image))
    try:
        with powerloss.mounted(device, mountpoint, "-t", fs) as root:
            after = epoch(root / "agent.vault")
            assert not same_epoch(before, after), (before, after)
            assert same_epoch(after, epoch(root / "agent.vault"))  # and a live mount is one epoch
    finally:
        powerloss.sh("losetup", "--detach", device, check=False)


def test_a_record_of_an_earlier_vaultmem_keeps_its_epoch_on_the_live_mount(tmp_path: Path, devices: None) -> None:
    """Records written before the sequence number was part of the epoch
    (``boot/dev/mount``) are still of the epoch of the mount they were
    written through, while it stays mounted: an operator's move of a ref
    after them is never undone."""
    image = disk(tmp_path)
    with powerloss.attached(image) as device, powerloss.mounted(device, tmp_path / "m") as root:
        (root / "agent.vault").mkdir()
        now = epoch(root / "agent.vault")
        boot, dev, mount = now.decode("ascii").split("/")
        earlier = f"{boot}/{dev.partition('@')[0]}/{mount}".encode("ascii")
        assert same_epoch(earlier, now)


def test_a_vault_under_a_mount_point_with_a_space_has_its_disk_s_epoch(tmp_path: Path, devices: None) -> None:
    """/proc/self/mountinfo writes a space in a mount point as ``\\040``
    (a tab, a newline and a backslash too): the mount holding the vault is
    still found, and the epoch names its disk, not the mount above it."""
    image = disk(tmp_path)
    with powerloss.attached(image) as device, powerloss.mounted(device, tmp_path / "agent disk\tone") as root:
        (root / "agent.vault").mkdir()
        now = epoch(root / "agent.vault")
        st = os.stat(device)
        assert now.decode("ascii").split("/")[1].partition("@")[0] == f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
        assert "@" in now.decode("ascii").split("/")[1]
