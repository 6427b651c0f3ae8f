"""Power cuts during the writes test_power_loss.py does not make.

The same harness (tests/powerloss.py: a real ext4 on a loop device, imaged at
one instant while a writer works) images a vault while a writer makes every
other kind of write: a folder rename, ``set_policy``, ``add_signer``,
``change_key``, deletes, with pauses that let the upkeep merge packs and
checkpoint while the device is imaged; on ext4 with its journal, without one,
and with ``data=writeback``, and on xfs and btrfs.  Every other image is
taken just after the file system's page cache was written out, as the
kernel's flusher does every few seconds: the disk then also holds what the
writer never syncs (the writer lock held, with its intent; a ref lock; a pack
being written).  Another test runs several writer processes at once.

Each image is booted as after a power cut (``e2fsck -fy``, mount), and the
FIRST open is a read-only one: ``Vault.open`` and reads (which must already see
every acknowledged write, and must not change a file of the vault), and stock
``git log``.  Then one write, and: every acknowledged call is there exactly
once (the vault is the state after some prefix of the calls, at least every
acknowledged one, at most every begun one), ``git fsck --strict`` and
``verify()`` are clean.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import powerloss
import pytest

from vaultmem import Vault, generate_key

IMAGES = 6
IMAGING_SECONDS = 6.0
MAX_GAP = 0.15
OPERATOR = "op"


# -- the calls, and the state each prefix of them leaves ----------------------------


def call(i: int, lane: str = "") -> tuple[str, dict[str, Any]]:
    """The i-th call (from 1) of a writer: (kind, arguments).  A lane writer
    (several processes at once) only makes memory calls, in its own folder."""
    c = (i - 1) % 8 if not lane else (0, 1, 2, 6)[(i - 1) % 4]
    top = f"/memories/{lane or 'w'}"
    if c == 0:
        return "memory", {"command": "create", "path": f"{top}/f/n{i}.txt", "file_text": f"note {i}\n"}
    if c == 1:
        return "memory", {
            "command": "str_replace",
            "path": f"{top}/f/n{i - 1}.txt",
            "old_str": "note",
            "new_str": "edited",
        }
    if c == 2:
        return "folder", {"command": "rename", "old_path": f"{top}/f", "new_path": f"{top}/g"}
    if c == 3:
        return "policy", {"max_files": 1000 + i}
    if c == 4:
        return "signer", {"principal": f"p{i}"}
    if c == 5:
        return "key", {}
    if c == 6:  # back to f, and drop the note made at c == 0
        return "folder", {"command": "rename", "old_path": f"{top}/g", "new_path": f"{top}/f"}
    return "memory", {"command": "delete", "path": f"{top}/f/n{i - 7}.txt"}


def state_after(k: int, lane: str = "") -> dict[str, Any]:
    """What a user finds after the first k calls of a writer."""
    files: dict[str, str] = {}
    max_files = None
    signers = [OPERATOR]
    key = 0
    for i in range(1, k + 1):
        kind, args = call(i, lane)
        if kind == "memory" and args["command"] == "create":
            files[args["path"]] = args["file_text"]
        elif kind == "memory" and args["command"] == "str_replace":
            files[args["path"]] = files[args["path"]].replace(args["old_str"], args["new_str"], 1)
        elif kind == "memory":
            files.pop(args["path"], None)
        elif kind == "folder":
            old, new = args["old_path"] + "/", args["new_path"] + "/"
            files = {(new + p[len(old) :] if p.startswith(old) else p): t for p, t in files.items()}
        elif kind == "policy":
            max_files = args["max_files"]
        elif kind == "signer":
            signers.append(args["principal"])
        else:
            key = 1 - key
    return {"files": files, "max_files": max_files, "signers": signers, "key": key}


# -- the writer process ------------------------------------------------------------


def writer(vault_path: str, keys: list[str], lane: str, operator_key: str) -> None:
    from vaultmem import SigningKey, VaultMemoryTool

    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    vault = Vault.open(vault_path, key=keys[0])
    vault.sign_as(OPERATOR, SigningKey.from_text(operator_key))
    tool = VaultMemoryTool(vault, actor="power-writer", session=lane or "mixed")
    key = 0
    i = 1
    while not stop.is_set() and i < 5000:
        kind, args = call(i, lane)
        os.write(1, b"start %d %.9f\n" % (i, time.monotonic()))
        if kind in ("memory", "folder"):
            answer = tool.call(args)
            assert not answer.startswith("Error"), answer
        elif kind == "policy":
            vault.set_policy(actor=OPERATOR, **args)
        elif kind == "signer":
            vault.add_signer(args["principal"], SigningKey.generate().public, actor=OPERATOR)
        else:
            key = 1 - key
            vault.change_key(key=keys[key])
        os.write(1, b"ack %d %.9f\n" % (i, time.monotonic()))
        if i % 8 == 0:
            time.sleep(0.07)  # long enough for the upkeep to merge and checkpoint (50 ms without writes)
        i += 1
    vault.close()
    os.write(1, b"done\n")


# -- looking at an image -------------------------------------------------------------


def files_of(vault: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for root, _, names in os.walk(vault):
        for name in names:
            p = os.path.join(root, name)
            st = os.lstat(p)
            out[os.path.relpath(p, vault)] = (st.st_size, st.st_mtime_ns)
    return out


def found_state(path: Path, keys: list[str], write: bool) -> dict[str, Any]:
    """Open the vault (with whichever key opens it), read everything; with
    ``write``, make one more call, then verify."""
    from vaultmem import BadKeyError, VaultMemoryTool, WrongKeyError

    for index, key in enumerate(keys):
        try:
            vault = Vault.open(path, key=key)
        except (BadKeyError, WrongKeyError):
            continue
        with vault:
            listed = powerloss.memory(vault)
            state = {
                "files": listed,
                "max_files": vault.policy.max_files,
                "signers": [s.principal for s in vault.signers.entries],
                "key": index,
            }
            report: dict[str, Any] = {"state": state}
            if write:
                VaultMemoryTool(vault, actor="after-reboot").call(
                    {"command": "create", "path": powerloss.AFTER, "file_text": "power back\n"}
                )
                report["after_ok"] = powerloss.memory(vault) == {**listed, powerloss.AFTER: "power back\n"}
                report["verify"] = [str(f) for f in vault.verify().findings]
            return report
    raise AssertionError("no key opens the vault")


def serve() -> None:
    """Answer one json request a line (a process of its own, kept across images)."""
    for line in sys.stdin:
        request = json.loads(line)
        try:
            report = found_state(Path(request["path"]), request["keys"], request["write"])
        except Exception as err:
            report = {"error": f"{type(err).__name__}: {err}"[:400]}
        import gc

        gc.collect()
        print(json.dumps(report), flush=True)


class Helper:
    def __init__(self) -> None:
        home = str(Path(__file__).resolve().parent.parent)
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "serve", home],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def ask(self, path: Path, keys: list[str], write: bool) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"path": str(path), "keys": keys, "write": write}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            return {"error": f"the helper died ({self.proc.wait(timeout=30)})"}
        result: dict[str, Any] = json.loads(line)
        return result

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class Lane:
    """One writer process and when it began and answered each call."""

    def __init__(self, vault: Path, keys: list[str], lane: str, operator_key: str, log: Path) -> None:
        home = str(Path(__file__).resolve().parent.parent)
        with log.open("wb") as errors:
            self.proc = subprocess.Popen(
                [sys.executable, __file__, "writer", home, str(vault), json.dumps(keys), lane, operator_key],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
            )
        self.lane, self.log = lane, log
        self.starts: list[float] = [0.0]
        self.acks: list[float] = [0.0]
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            word, *rest = line.decode().split()
            if word == "start":
                self.starts.append(float(rest[1]))
            elif word == "ack":
                self.acks.append(float(rest[1]))

    def stop(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def bounds(self, instant: float) -> tuple[int, int]:
        """(acknowledged before ``instant``, begun before it)."""
        import bisect

        return bisect.bisect_left(self.acks, instant) - 1, bisect.bisect_left(self.starts, instant) - 1


OTHER_FS = ("xfs", "btrfs")  # mounting one replays its log: there is no e2fsck to run


@contextlib.contextmanager
def vault_rig(base: Path, mode: str) -> Iterator[powerloss.Rig]:
    fs = mode if mode in OTHER_FS else "ext4"
    with powerloss.rig(base, journal=mode != "no-journal", fs=fs) as rig:
        if mode == "writeback":  # the same device again, with data=writeback (a remount cannot change it)
            device = powerloss.sh("findmnt", "-n", "-o", "SOURCE", str(rig.inner)).stdout.strip()
            powerloss.sh("umount", str(rig.inner))
            powerloss.sh("mount", "-t", "ext4", "-o", "data=writeback", device, str(rig.inner))
        yield rig


def match(found: dict[str, Any], lanes: list[Lane], calls: list[int], bounds: list[tuple[int, int]]) -> list[str]:
    """What is wrong with ``found`` (a state) for writers that made ``calls``."""
    problems = []
    if len(lanes) == 1 and not lanes[0].lane:
        candidates = [k for k in range(calls[0] + 1) if state_after(k) == found]
        low, high = bounds[0]
        if not candidates:
            problems.append(f"the vault is the state after no prefix of the calls: {found}"[:600])
        elif not any(low <= k <= high for k in candidates):  # a folder renamed and back: a state may recur
            problems.append(f"the vault holds {candidates} calls; acknowledged {low}, begun {high}")
        return problems
    for lane, made, (low, high) in zip(lanes, calls, bounds, strict=True):
        mine = {p: t for p, t in found["files"].items() if p.startswith(f"/memories/{lane.lane}/")}
        candidates = [k for k in range(made + 1) if state_after(k, lane.lane)["files"] == mine]
        if not candidates:
            problems.append(f"{lane.lane}: the files are the state after no prefix of its calls: {mine}"[:600])
        elif not any(low <= k <= high for k in candidates):
            problems.append(f"{lane.lane}: {candidates} calls found; acknowledged {low}, begun {high}")
    return problems


def power_cuts(base: Path, mode: str, lanes_named: list[str]) -> None:
    from vaultmem import SigningKey

    keys = [generate_key(), generate_key()]
    operator = SigningKey.generate()
    operator_text = operator.to_text()
    images = base / "images"
    images.mkdir()
    (base / "keys.json").write_text(json.dumps(keys))  # for a post-mortem of the images kept
    frozen: list[float] = []
    rng = random.Random()
    with vault_rig(base / "rig", mode) as rig:
        with Vault.init(rig.vault, key=keys[0]) as vault:
            vault.sign_as(OPERATOR, operator)
            vault.add_signer(OPERATOR, operator.public, actor=OPERATOR, operator=True)
        lanes = [
            Lane(rig.vault, keys, name, operator_text, base / f"writer{n}.log") for n, name in enumerate(lanes_named)
        ]
        try:
            deadline = time.monotonic() + 60  # a busy machine starts three writers slowly
            while any(len(lane.acks) < 9 for lane in lanes):
                assert time.monotonic() < deadline and all(lane.proc.poll() is None for lane in lanes), [
                    lane.log.read_text()[-1500:] for lane in lanes
                ]
                time.sleep(0.01)
            deadline = time.monotonic() + IMAGING_SECONDS
            while len(frozen) < IMAGES and time.monotonic() < deadline:
                time.sleep(rng.uniform(0, MAX_GAP))
                if len(frozen) % 2:  # as the kernel's flusher does now and then: the page cache written out
                    rig.flush()
                frozen.append(rig.image(images / f"{len(frozen)}.img"))
        finally:
            for lane in lanes:
                lane.stop()
        for lane in lanes:
            assert lane.proc.returncode == 0, lane.log.read_text()[-2000:]
    calls = [len(lane.starts) - 1 for lane in lanes]
    options = ("-t", "ext4", "-o", "data=writeback") if mode == "writeback" else ()
    if mode in OTHER_FS:
        options = ("-t", mode)
    helper = Helper()
    problems: list[str] = []
    try:
        for number, instant in enumerate(frozen):
            image = images / f"{number}.img"
            bounds = [lane.bounds(instant) for lane in lanes]
            said = [f"image {number} (acknowledged, begun: {bounds})"]
            rc = 0
            for _ in range(3 if mode not in OTHER_FS else 0):
                rc = powerloss.sh("e2fsck", "-fy", str(image), check=False).returncode
                if rc < 4:
                    break
            if rc >= 4:
                assert mode == "no-journal", f"e2fsck could not repair image {number}"
                continue
            with powerloss.attached(image) as device, powerloss.mounted(device, base / "boot", *options) as root:
                path = root / powerloss.VAULT
                before = files_of(path)
                read = helper.ask(path, keys, write=False)
                if "error" in read:
                    said.append(f"the first (read-only) open: {read['error']}")
                else:
                    said += [f"read-only: {p}" for p in match(read["state"], lanes, calls, bounds)]
                log = powerloss.sh("git", "-C", str(path), "log", "--format=%H", "main", check=False)
                if log.returncode != 0:
                    said.append(f"git log before any write: {log.stderr.strip()[:300]}")
                changed = sorted(p for p, v in files_of(path).items() if before.get(p) != v)
                changed += sorted(p for p in before if p not in files_of(path))
                if changed:
                    said.append(f"reading the vault changed its files: {changed[:8]}")
                wrote = helper.ask(path, keys, write=True)
                if "error" in wrote:
                    said.append(f"the first write: {wrote['error']}")
                else:
                    said += [f"after a write: {p}" for p in match(wrote["state"], lanes, calls, bounds)]
                    if "error" not in read and wrote["state"] != read["state"]:
                        said.append("the write found another state than the read before it")
                    if not wrote["after_ok"]:
                        said.append("the write after the reboot did not leave the memory it should")
                    said += [f"verify: {f}" for f in wrote["verify"]]
                fsck = powerloss.git_fsck(path)
                if fsck[0] != 0:
                    said.append(f"git fsck --strict after a write: {fsck[1][:300]}")
            if len(said) > 1:
                problems.append("\n    ".join(said))
            else:
                image.unlink()
    finally:
        helper.close()
    print(f"\n{mode}, {len(lanes)} writer(s): calls {calls}, {len(frozen)} images, {len(problems)} with problems")
    assert len(frozen) == IMAGES
    assert not problems, "\n".join(problems)
    shutil.rmtree(images)


@pytest.mark.parametrize("mode", ["ext4", "no-journal", "writeback", "xfs", "btrfs"])
def test_every_kind_of_write_survives_a_power_cut(devices: None, tmp_path: Path, mode: str) -> None:
    powerloss.need(mode if mode in OTHER_FS else "ext4")
    power_cuts(tmp_path, mode, [""])


def test_several_writer_processes_survive_a_power_cut(devices: None, tmp_path: Path) -> None:
    power_cuts(tmp_path, "ext4", ["a", "b", "c"])


@pytest.mark.parametrize("flushed", [False, True], ids=["cached", "flushed"])
@pytest.mark.parametrize("what", ["key", "policy"])
@pytest.mark.parametrize("mode", ["ext4", "no-journal"])
def test_a_change_cut_once_its_record_is_durable_is_read_before_any_write(
    devices: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, what: str, flushed: bool
) -> None:
    """The power goes the moment a key change's (or a policy change's)
    record is durable, before its ref moved: the first write's recovery
    finishes the change, so the first open, a read, must already see it too
    (the new key opens, the old one does not; the new policy is the one
    read), and closing that read must change no file of the vault.  The
    upkeep's pause is stretched from 50 ms so that it does not make git's
    files of the calls before durable first.

    ``flushed``: the kernel had written the page cache out just before the
    cut (its flusher does so every few seconds), so the disk also holds the
    writer lock's state as the writer left it: held, with its intent naming
    the change.  The first write then finds the lock of a writer that died,
    and must still finish the change the journal holds, not take it back as
    it does for a writer killed before anybody was told of its key."""
    from vaultmem import VaultMemoryTool, WrongKeyError
    from vaultmem.git import commits, upkeep

    monkeypatch.setattr(upkeep, "IDLE", 60.0)
    monkeypatch.setattr(upkeep, "EVERY", 1000)
    old, new = generate_key(), generate_key()
    image = tmp_path / "cut.img"
    with vault_rig(tmp_path / "rig", mode) as rig:
        Vault.init(rig.vault, key=old).close()
        vault = Vault.open(rig.vault, key=old)
        tool = VaultMemoryTool(vault, actor="w")
        for n in range(3):
            tool.call({"command": "create", "path": f"/memories/a{n}.txt", "file_text": f"a{n}\n"})

        def cut(step: str) -> None:
            if step == "durable":
                commits.on_step = None
                if flushed:
                    os.sync()
                rig.image(image)

        monkeypatch.setattr(commits, "on_step", cut)
        if what == "key":
            vault.change_key(key=new)
        else:
            vault.set_policy(actor="op", max_files=77)
        assert image.exists()
        vault.close()
    assert powerloss.sh("e2fsck", "-fy", str(image), check=False).returncode < 4
    if what == "policy":
        new = old
    with powerloss.attached(image) as device, powerloss.mounted(device, tmp_path / "boot") as root:
        path = root / powerloss.VAULT
        before = files_of(path)
        if what == "key":
            with pytest.raises(WrongKeyError):
                Vault.open(path, key=old).close()
        with Vault.open(path, key=new) as vault:
            assert vault.read("/memories/a2.txt") == "a2\n"
            assert vault.policy.max_files == (77 if what == "policy" else None)
        assert files_of(path) == before, "reading the vault changed its files"
        with Vault.open(path, key=new) as vault:
            tool = VaultMemoryTool(vault, actor="w")
            tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "b\n"})
            assert vault.policy.max_files == (77 if what == "policy" else None)
            assert [f.detail for f in vault.verify().findings] == []
        assert powerloss.git_fsck(path)[0] == 0
        if what == "key":
            with pytest.raises(WrongKeyError):
                Vault.open(path, key=old).close()
        import gc

        gc.collect()


def test_a_read_only_session_leaves_the_trash_of_a_killed_writer_alone(tmp_path: Path) -> None:
    """A writer that ends without closing its vault (killed, or the power
    went) leaves old ref files in the trash.  Opening the vault, reading and
    closing it changes no file: the first open after a power cut is often a
    read (an auditor's, git's textconv driver), and only a write may tidy."""
    key = generate_key()
    Vault.init(tmp_path / "v", key=key).close()
    script = (
        "import os, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})\n"
        "from vaultmem import Vault, VaultMemoryTool\n"
        f"tool = VaultMemoryTool(Vault.open({str(tmp_path / 'v')!r}, key={key!r}), actor='w')\n"
        "for n in range(4):\n"
        "    tool.call({'command': 'create', 'path': f'/memories/a{n}.txt', 'file_text': 'a'})\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    before = files_of(tmp_path / "v")
    assert any(name.startswith("vaultmem/trash/") for name in before)
    with Vault.open(tmp_path / "v", key=key) as vault:
        assert vault.read("/memories/a3.txt") == "a"
        vault.verify()
    assert files_of(tmp_path / "v") == before


if __name__ == "__main__" and sys.argv[1:2] == ["serve"]:
    sys.path.insert(0, sys.argv[2])
    serve()

if __name__ == "__main__" and sys.argv[1:2] == ["writer"]:
    sys.path.insert(0, sys.argv[2])
    writer(sys.argv[3], json.loads(sys.argv[4]), sys.argv[5], sys.argv[6])
