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

from pathlib import Path

import powerloss

from vaultmem.git.journal import epoch, same_epoch


def test_a_disk_attached_again_on_the_same_device_is_another_epoch(tmp_path: Path, devices: None) -> None:
    image = tmp_path / "disk.img"
    with open(image, "wb") as f:
        f.truncate(16 << 20)
    powerloss.mkfs(image, journal=True)
    mountpoint = tmp_path / "m"
    with powerloss.attached(image) as device, powerloss.mounted(device, mountpoint) as root:
        (root / "agent.vault").mkdir()
        before = epoch(root / "agent.vault")
    # the same disk on the same device, mounted at once on the same folder
    powerloss.sh("losetup", "--direct-io=off", device, str(image))
    try:
        with powerloss.mounted(device, mountpoint) as root:
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
    image = tmp_path / "disk.img"
    with open(image, "wb") as f:
        f.truncate(16 << 20)
    powerloss.mkfs(image, journal=True)
    with powerloss.attached(image) as device, powerloss.mounted(device, tmp_path / "m") as root:
        (root / "agent.vault").mkdir()
        now = epoch(root / "agent.vault")
        boot, dev, mount = now.decode("ascii").split("/")
        earlier = f"{boot}/{dev.partition('@')[0]}/{mount}".encode("ascii")
        assert same_epoch(earlier, now)
