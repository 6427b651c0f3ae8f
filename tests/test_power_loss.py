"""Invariant 4 under power cuts: an acknowledged memory call survives losing power at any
instant, and whatever a power cut leaves is repaired into a clean, writable vault.

A writer process makes memory calls on a vault on a real ext4 filesystem (with its
journal, and without one) on a loop device.  While it writes, the device is imaged at
random moments, each image one instant of what the device held, often taken in the
middle of a sync (tests/powerloss.py explains how, and why that is a state the device
really held).  Each image is then booted as a user's machine would be after the power
came back: ``e2fsck -fy``, mount, ``Vault.open``, read every file, one more write.  Every
call acknowledged before the image must be in it, and ``git fsck`` and
``vault.verify()`` must be clean.  ``git fsck`` is also run on each image before
vaultmem opens it; that one is reported, not asserted (recovery may repair).

A harness that never sees a loss proves nothing, so a control writer acknowledges each
call one sync too early (vaultmem's syncs do nothing in it; it syncs the filesystem
itself right after answering), and the harness must find an image that lacks the last
acknowledged call.  No writeback tunable is changed: a control that never synced at all
left none of its calls on the device in these few seconds, with or without a journal (by
default the kernel writes dirty data back after 30 s), so writeback does not hide a
missing sync here.
"""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path

import powerloss
import pytest
from conftest import budget
from powerloss import Outcome, Writer

from vaultmem import Vault, generate_key

pytestmark = pytest.mark.slow

IMAGES = int(budget(25, 16))  # per run
MAX_GAP = 0.04  # seconds between images, at most (a freeze itself takes about as long)
IMAGING_SECONDS = 20  # bounds each loop: the images, the writer (twice that), its start
JOURNALS = [pytest.param(True, id="ext4"), pytest.param(False, id="ext4-no-journal")]


def power_cuts(base: Path, journal: bool, control: bool) -> list[Outcome]:
    """Image the vault's device IMAGES times while a writer works, then boot every image."""
    began = time.monotonic()
    key = generate_key()
    images = base / "images"
    images.mkdir()
    rng = random.Random()  # the moments are random anyway: the machine's timing decides them
    frozen: list[float] = []
    with powerloss.rig(base / "rig", journal) as rig:
        Vault.init(rig.vault, key=key).close()
        writer = Writer(
            rig.vault, key, base / "writer.log", control=control, max_seconds=2 * IMAGING_SECONDS, max_calls=50_000
        )
        try:
            writer.wait_for(10, timeout=IMAGING_SECONDS)
            writing = time.monotonic()
            deadline = writing + IMAGING_SECONDS
            while len(frozen) < IMAGES and time.monotonic() < deadline and writer.proc.poll() is None:
                time.sleep(rng.uniform(0, MAX_GAP))
                frozen.append(rig.image(images / f"{len(frozen)}.img"))
            imaged = time.monotonic()
        finally:
            writer.stop()
        assert writer.proc.returncode == 0, f"the writer failed: {writer.stderr()}"
        assert len(frozen) == IMAGES, f"{len(frozen)} images in {IMAGING_SECONDS} s"
        # the harness's model of the calls, checked once on the live filesystem
        assert powerloss.found_in(rig.vault, key, writer.started) == writer.acked == writer.started
    booting = time.monotonic()
    outcomes = []
    for number, instant in enumerate(frozen):
        outcome = Outcome(number, writer.acked_before(instant), writer.started_before(instant), writer.started)
        image = images / f"{number}.img"
        powerloss.check_image(image, base / "boot", key, outcome)
        outcomes.append(outcome)
        if not outcome.problems:
            image.unlink()  # the others stay for a post-mortem
    judged = [o for o in outcomes if not o.file_system_lost]
    last = sum(o.found is not None and o.found == o.acked_before - 1 for o in judged)
    print(
        f"\n{'control' if control else 'vaultmem'} on {'ext4' if journal else 'ext4 without a journal'}: "
        f"{writer.acked} calls, {len(outcomes)} images; {sum(o.lost for o in judged)} lack an acknowledged "
        f"call ({last} just the last one); {sum(o.fsck_before[0] != 0 for o in outcomes)} fail git fsck before "
        f"recovery, {sum(o.fsck_after[0] != 0 for o in outcomes)} after; "
        f"{sum(o.file_system_lost for o in outcomes)} that e2fsck could not repair; "
        f"{sum(bool(o.problems) for o in outcomes)} with problems. Seconds: start {writing - began:.1f}, "
        f"imaging {imaged - writing:.1f}, booting the images {time.monotonic() - booting:.1f}"
    )
    for outcome in outcomes:
        print(outcome.line())
    return outcomes


@pytest.mark.parametrize("journal", JOURNALS)
def test_every_acknowledged_call_survives_a_power_cut(devices: None, tmp_path: Path, journal: bool) -> None:
    outcomes = power_cuts(tmp_path, journal, control=False)
    gone = [outcome for outcome in outcomes if outcome.file_system_lost]
    # ext4 with its journal always comes back; without one, e2fsck may give up
    # on a few images, which then judge nothing (Outcome.file_system_lost).
    assert len(gone) <= (0 if journal else IMAGES // 4), "e2fsck could not repair:\n" + "\n".join(
        outcome.line() for outcome in gone
    )
    bad = [outcome for outcome in outcomes if outcome.problems]
    assert not bad, f"{len(bad)} of {len(outcomes)} images (kept in {tmp_path / 'images'}):\n" + "\n".join(
        outcome.line() for outcome in bad
    )
    shutil.rmtree(tmp_path / "images")


@pytest.mark.parametrize("journal", JOURNALS)
def test_the_harness_catches_an_acknowledgement_before_the_sync(devices: None, tmp_path: Path, journal: bool) -> None:
    outcomes = power_cuts(tmp_path, journal, control=True)
    caught = [o for o in outcomes if not o.file_system_lost and o.found is not None and o.found < o.acked_before]
    assert caught, "no image lacked an acknowledged call: this harness cannot see a lost write"
    shutil.rmtree(tmp_path / "images")
