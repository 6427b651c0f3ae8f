"""Erasure under power cuts: an acknowledged erasure stays an erasure.

A process on a real ext4 filesystem on a loop device (tests/powerloss.py says
how the device is imaged at one instant, as a power cut would leave it) writes
a file and erases it, again and again.  Each image is booted as a machine would
be after the power came back (``e2fsck -fy``, mount), the vault opened and
written once (so recovery runs, and an erasure cut short is finished), and
then: ``git fsck`` and ``verify`` are clean, and for every erasure
acknowledged before the image, no keyring anywhere under the vault folder
opens the erased version.  Every other image is taken just after the file
system's page cache was written out (``Rig.flush``), so the disk also holds
what the writer never syncs.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import powerloss
import pytest
from conftest import budget
from test_erasure import assert_no_key_left

from vaultmem import Vault, VaultMemoryTool, generate_key

pytestmark = pytest.mark.slow

IMAGES = int(budget(16, 8))
SECONDS = 20

ERASER = r"""
import os, sys, time
sys.path.insert(0, sys.argv[1])
from vaultmem import Vault, VaultMemoryTool
vault = Vault.open(sys.argv[2])
tool = VaultMemoryTool(vault, actor="eraser")
deadline = time.monotonic() + float(sys.argv[3])
i = 0
while time.monotonic() < deadline and not os.path.exists(sys.argv[4]):
    i += 1
    path = f"/memories/customer-{i}.md"
    tool.call({"command": "create", "path": path, "file_text": f"customer {i}: ada{i}@example.com\n"})
    blob = vault.read_blob(bytes.fromhex(vault.forget(path, reason="r", dry_run=True).versions[0].blob))
    os.write(1, b"made %d %s\n" % (i, blob.hex().encode()))
    vault.forget(path, reason=f"GDPR request {i}", actor="ops")
    os.write(1, b"erased %d %.9f\n" % (i, time.monotonic()))
os.write(1, b"done\n")
"""


@pytest.mark.parametrize(
    ("journal", "fs"),
    [
        pytest.param(True, "ext4", id="ext4"),
        pytest.param(False, "ext4", id="ext4-no-journal"),
        pytest.param(True, "btrfs", id="btrfs"),
    ],
)
def test_an_acknowledged_erasure_survives_a_power_cut(devices: None, tmp_path: Path, journal: bool, fs: str) -> None:
    powerloss.need(fs)
    key = generate_key()
    blobs: dict[int, bytes] = {}
    erased: list[tuple[float, int]] = []  # (when it was acknowledged, which)
    frozen: list[float] = []
    rng = random.Random()
    images = tmp_path / "images"
    images.mkdir()
    with powerloss.rig(tmp_path / "rig", journal=journal, fs=fs) as rig:
        Vault.init(rig.vault, key=key).close()
        stop = tmp_path / "stop"
        home = str(Path(__file__).resolve().parent.parent)
        proc = subprocess.Popen(
            [sys.executable, "-c", ERASER, home, str(rig.vault), str(2 * SECONDS), str(stop)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "VAULTMEM_KEY": key},
        )

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                word, *rest = line.decode().split()
                if word == "made":
                    blobs[int(rest[0])] = bytes.fromhex(rest[1])
                elif word == "erased":
                    erased.append((float(rest[1]), int(rest[0])))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            deadline = time.monotonic() + SECONDS
            while len(erased) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            while len(frozen) < IMAGES and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(rng.uniform(0, 0.08))
                if len(frozen) % 2:  # every other image after the page cache was written out
                    rig.flush()
                frozen.append(rig.image(images / f"{len(frozen)}.img"))
        finally:
            stop.touch()
            proc.wait(timeout=120)
            reader.join(timeout=10)
        assert proc.returncode == 0, proc.stderr.read().decode() if proc.stderr else ""
    assert len(frozen) == IMAGES and len(erased) >= 2
    problems = []
    for number, instant in enumerate(frozen):
        image = images / f"{number}.img"
        repaired = fs != "ext4"  # mounting btrfs replays its log
        for _ in range(3 if fs == "ext4" else 0):
            repaired = powerloss.sh("e2fsck", "-fy", str(image), check=False).returncode < 4
            if repaired:
                break
        if not repaired:
            assert not journal, f"image {number}: e2fsck could not repair ext4 with its journal"
            continue  # without a journal e2fsck may give up: that image judges nothing (as in test_power_loss)
        with powerloss.attached(image) as device, powerloss.mounted(device, tmp_path / "boot", "-t", fs) as root:
            path = root / "agent.vault"
            acknowledged = [which for when, which in erased if when < instant]
            with Vault.open(path, key=key) as vault:
                VaultMemoryTool(vault, actor="after-reboot").call(
                    {"command": "create", "path": "/memories/after.md", "file_text": "power back\n"}
                )
            report = Vault.open(path, key=key).verify()
            fsck = powerloss.git_fsck(path)
            try:
                if acknowledged:
                    assert_no_key_left(path, key, [blobs[which] for which in acknowledged])
            except AssertionError as err:
                problems.append(f"image {number}: a key of an acknowledged erasure is left: {err}")
            if not report.ok or fsck[0] != 0:
                problems.append(f"image {number}: verify {report.problems}, git fsck {fsck}")
            if report.erased < len(acknowledged):
                problems.append(f"image {number}: {report.erased} erased, {len(acknowledged)} acknowledged")
        if not problems:
            image.unlink()
    print(f"\n{len(erased)} erasures acknowledged, {len(frozen)} images, {len(problems)} problems")
    assert not problems, "\n".join(problems)
