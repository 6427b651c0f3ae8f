"""Power cuts for vaultmem's power-loss test (tests/test_power_loss.py).

A vault lives on a real ext4 filesystem on a loop device while a writer process
makes memory calls and reports each one it got an answer for.  At random
moments the device is imaged; each image is then the disk of a machine whose
power was cut at that moment: ``e2fsck -fy`` as a reboot would run it, mount,
open the vault, read everything, write once, check.

What an image holds
-------------------
The vault's device (the inner loop device) is backed by a file on an outer ext4
filesystem of the harness's own: another loop device, over a file on a private
tmpfs.  The loop driver turns each write request into a write to the backing
file before completing it, and each flush into an ``fsync`` of that file, so the
backing file reads as exactly what the vault's filesystem has handed the device
and been told is written, never that filesystem's dirty page cache.  That is
what a disk without a volatile write cache keeps through a power cut.  (A disk
with one may also drop completed writes not yet flushed, in any order, and a
real disk may tear a request part-way; those states are not imaged here.)

The copy is one instant of the device.  Reading 64 MB takes milliseconds, and a
copy made while the device is written would be smeared in time: a block read
early could predate a flush that a block read later already follows, a state
no disk ever held.  So the outer filesystem is frozen (``FIFREEZE``) during the
copy: freezing lets the loop driver's writes in progress finish and holds new
ones back in the kernel (the writer stalls in whatever it was doing, often in
the middle of a sync), and reads still work.  tmpfs cannot be frozen, hence the
outer ext4; the tmpfs under it makes the outer filesystem's own syncs free and
keeps the machine's real disk out of it.

The loop devices use buffered I/O, not ``--direct-io``: a write the loop driver
has completed sits in the backing file's page cache, which the copy reads
coherently, so the copy holds every completed write.  Direct I/O would put the
same bytes in the copy, and only add a trip to the memory below per write.

What must be in an image
------------------------
The writer stamps ``start i`` before and ``ack i`` after each call with
``time.monotonic()`` (one clock for all processes); the harness stamps the
moment the freeze has taken hold.  A call acknowledged before that moment must
be in the image: an acknowledgement promises the data reached the device, and
nothing the device completed before the freeze is missing from the copy.  A
call begun after it cannot be there, since its writes wait until the thaw.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import fcntl
import gc
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

FIFREEZE = 0xC0045877  # _IOWR('X', 119, int)
FITHAW = 0xC0045878  # _IOWR('X', 120, int)
VAULT = "agent.vault"
AFTER = "/memories/after-power-cut.txt"
TOOLS = ("losetup", "mount", "umount", "mkfs.ext4", "e2fsck", "git")


# -- the writer's mutations and the states they lead to -----------------------


def mutation(i: int) -> dict[str, Any]:
    """The i-th call (from 1): a log file, then create, insert, str_replace,
    and rename or delete, over and over.  Every call changes what a user sees,
    and no two prefixes of the sequence leave the same memory, so the memory
    found on a disk names the one call it ends with."""
    if i == 1:
        return {"command": "create", "path": "/memories/log.txt", "file_text": "log\n"}
    j = i - 2
    base, step = j - j % 4, j % 4
    name = f"/memories/notes/f{base}.txt"
    if step == 0:
        filler = "".join(f"line {n} of note {base}\n" for n in range(base * 37 % 150))
        return {"command": "create", "path": name, "file_text": f"op {base}\n{filler}"}
    if step == 1:
        return {"command": "insert", "path": "/memories/log.txt", "insert_line": 1, "insert_text": f"call {i}"}
    if step == 2:
        return {"command": "str_replace", "path": name, "old_str": f"op {base}\n", "new_str": f"op {base} edited\n"}
    if j % 8 == 3:
        return {"command": "rename", "old_path": name, "new_path": f"/memories/notes/g{base}.txt"}
    return {"command": "delete", "path": name}


def apply(files: dict[str, str], params: dict[str, Any]) -> None:
    """What a mutation does to the memory (path -> text), as a user expects it."""
    command = params["command"]
    if command == "create":
        files[params["path"]] = params["file_text"]
    elif command == "insert":
        lines = files[params["path"]].splitlines(keepends=True)
        lines.insert(params["insert_line"], params["insert_text"] + "\n")
        files[params["path"]] = "".join(lines)
    elif command == "str_replace":
        files[params["path"]] = files[params["path"]].replace(params["old_str"], params["new_str"], 1)
    elif command == "rename":
        files[params["new_path"]] = files.pop(params["old_path"])
    else:
        del files[params["path"]]


def which_call(found: dict[str, str], calls: int) -> int | None:
    """The k in 0..calls whose state after k calls is ``found``, if any."""
    files: dict[str, str] = {}
    for k in range(calls + 1):
        if k:
            apply(files, mutation(k))
        if len(files) == len(found) and files == found:
            return k
    return None


# -- the writer process ----------------------------------------------------------


def writer(vault_path: str, control: bool, max_seconds: float, max_calls: int) -> None:
    """Make calls until stdin closes; report ``start i`` before and ``ack i``
    after each call returned.  The key comes from VAULTMEM_KEY.

    ``control`` makes a writer that acknowledges one sync too early: every
    sync vaultmem could use (``os.fsync``, ``os.fdatasync``, ``os.sync`` and
    vaultmem's own ``sync_filesystem``) does nothing in this process, and the
    writer syncs the vault's filesystem itself right after each acknowledgement.
    So each call is durable a millisecond or two after it was acknowledged: an
    image taken in that window lacks just the last acknowledged call, and the
    harness has to see it."""
    from vaultmem import Vault, VaultMemoryTool

    if control:

        def no_sync(*args: object, **kwargs: object) -> None:
            return None

        os.fsync = os.fdatasync = os.sync = no_sync
        for name, module in list(sys.modules.items()):
            if name.split(".")[0] == "vaultmem" and callable(getattr(module, "sync_filesystem", None)):
                module.sync_filesystem = no_sync  # type: ignore[attr-defined]
    stop = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    tool = VaultMemoryTool(Vault.open(vault_path), actor="power-writer", session="power-cut")
    folder = os.open(vault_path, os.O_RDONLY)
    deadline = time.monotonic() + max_seconds
    i = 1
    while i <= max_calls and not stop.is_set() and time.monotonic() < deadline:
        os.write(1, b"start %d %.9f\n" % (i, time.monotonic()))
        tool.call(mutation(i))
        os.write(1, b"ack %d %.9f\n" % (i, time.monotonic()))
        if control:
            syncfs(folder)  # too late: the call was acknowledged already
        i += 1
    os.write(1, b"done\n")


class Writer:
    """The writer process, and a thread that records when it began and answered each call."""

    def __init__(
        self, vault_path: Path, key: str, log: Path, control: bool, max_seconds: float, max_calls: int
    ) -> None:
        import vaultmem

        env = {**os.environ, "VAULTMEM_KEY": key}
        home = Path(vaultmem.__file__).resolve().parent.parent  # the writer runs the same vaultmem as the test
        args = [str(home), str(vault_path), "control" if control else "engine", str(max_seconds), str(max_calls)]
        with log.open("wb") as errors:
            self.proc = subprocess.Popen(
                [sys.executable, __file__, "writer", *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
                env=env,
            )
        self.log = log
        self.acked = 0
        self.started = 0
        self.acks: list[float] = [0.0]  # acks[i]: when call i had returned (CLOCK_MONOTONIC, as time.monotonic)
        self.starts: list[float] = [0.0]  # starts[i]: when call i was about to be made
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            word, *rest = line.decode().split()
            if word == "start":
                self.starts.append(float(rest[1]))
                self.started = int(rest[0])
            elif word == "ack":
                self.acks.append(float(rest[1]))
                self.acked = int(rest[0])

    def acked_before(self, instant: float) -> int:
        """The highest call that had returned before ``instant``."""
        return bisect.bisect_left(self.acks, instant) - 1

    def started_before(self, instant: float) -> int:
        """The highest call begun before ``instant``: no later call can have reached the disk by then."""
        return bisect.bisect_left(self.starts, instant) - 1

    def wait_for(self, acked: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.acked < acked:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the writer made {self.acked} calls, not {acked}: {self.stderr()}")
            time.sleep(0.005)

    def stop(self, timeout: float = 15) -> None:
        """Ask the writer to finish its call and leave; kill it if it does not."""
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")[-2000:]


# -- devices -------------------------------------------------------------------


def sh(*cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=timeout)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def unavailable(scratch: Path) -> str | None:
    """Why loop devices or mount cannot be used here, or None (tried in ``scratch``)."""
    if os.geteuid() != 0:
        return "loop devices and mount need root"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"missing tools: {', '.join(missing)}"
    if not Path("/dev/loop-control").exists():
        return "no /dev/loop-control (no loop driver)"
    probe = scratch / "probe.img"
    probe.write_bytes(bytes(1 << 20))
    try:
        with tmpfs(scratch / "probe", 1), attached(probe):
            pass
    except RuntimeError as err:
        return str(err)
    finally:
        probe.unlink()
    return None


@contextlib.contextmanager
def attached(image: Path) -> Iterator[str]:
    """``image`` as a loop device (buffered I/O), detached afterwards."""
    device = sh("losetup", "--find", "--show", "--direct-io=off", str(image)).stdout.strip()
    try:
        yield device
    finally:
        sh("losetup", "--detach", device, check=False)


@contextlib.contextmanager
def mounted(device: str, mountpoint: Path, *options: str) -> Iterator[Path]:
    """``device`` mounted on ``mountpoint``, unmounted afterwards (a busy
    unmount is retried, then detached lazily so nothing stays behind)."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    sh("mount", *(options or ("-t", "ext4")), device, str(mountpoint))
    try:
        yield mountpoint
    finally:
        for attempt in range(20):
            if sh("umount", str(mountpoint), check=False).returncode == 0:
                break
            gc.collect(2 if attempt else 1)  # a repository handle waiting to be collected holds files open
            time.sleep(0.05)
        else:  # a leak in this harness: detached now, gone when the last file is closed
            sh("umount", "--lazy", str(mountpoint), check=False)
            warnings.warn(f"{mountpoint} was busy; unmounted lazily", stacklevel=1)


def tmpfs(mountpoint: Path, size_mb: int) -> contextlib.AbstractContextManager[Path]:
    """A memory filesystem of our own: syncing a file on it costs nothing."""
    return mounted("vaultmem-power", mountpoint, "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0700")


def mkfs(target: str | Path, journal: bool, fs: str = "ext4") -> None:
    if fs == "xfs":
        sh("mkfs.xfs", "-q", "-f", str(target))  # 300 MB at least
        return
    if fs == "btrfs":
        sh("mkfs.btrfs", "-q", "-f", str(target))
        return
    features = [] if journal else ["-O", "^has_journal"]
    # 4 KB blocks as on any real disk (mke2fs would pick 1 KB for a small one)
    sh("mkfs.ext4", "-q", "-F", "-b", "4096", "-i", "8192", *features, str(target))


def need(fs: str) -> None:
    """Skip the test unless this machine has ``mkfs.<fs>`` and a kernel
    that mounts ``fs`` (ext4's tools are checked by the ``devices`` fixture)."""
    if fs == "ext4":
        return
    try:
        known = Path("/proc/filesystems").read_text()
    except OSError:
        known = ""
    if shutil.which(f"mkfs.{fs}") is None or not any(line.split()[-1:] == [fs] for line in known.splitlines()):
        pytest.skip(f"{fs}: no mkfs.{fs}, or the kernel does not mount it")


FS_SIZE_MB = {"ext4": 64, "xfs": 320, "btrfs": 160}  # the least each makes a usable file system of, or more


@dataclass
class Rig:
    """The vault's filesystem (``inner``, on a loop device) and the outer
    filesystem holding that device's backing file (``backing``)."""

    outer: Path
    backing: Path
    inner: Path

    @property
    def vault(self) -> Path:
        return self.inner / VAULT

    def image(self, dest: Path) -> float:
        """Copy what the inner device holds at one instant (see the module's
        docstring); returns when (``time.monotonic()``) the device was frozen."""
        outer_fd = os.open(self.outer, os.O_RDONLY)
        try:
            syncfs(outer_fd)  # leaves the freeze's own sync of the outer filesystem little to do
            with open(self.backing, "rb", buffering=0) as src:
                size = os.fstat(src.fileno()).st_size
                fcntl.ioctl(outer_fd, FIFREEZE, 0)
                try:
                    frozen = time.monotonic()
                    chunks = read_data(src.fileno(), size)
                finally:
                    fcntl.ioctl(outer_fd, FITHAW, 0)
        finally:
            os.close(outer_fd)
        with open(dest, "wb") as out:
            out.truncate(size)  # holes stay holes: a few MB written per image, not 64
            for offset, data in chunks:
                out.seek(offset)
                out.write(data)
        return frozen

    def flush(self) -> None:
        """Write the vault's file system's page cache out to its device, as
        the kernel's flusher does every few seconds: what the writer never
        syncs (its lock and intent, a ref lock, a pack in flight) reaches the
        disk too, so an image taken next holds it."""
        fd = os.open(self.inner, os.O_RDONLY)
        try:
            syncfs(fd)
        finally:
            os.close(fd)

    def thaw(self) -> None:
        """Thaw the outer filesystem if an image was interrupted (harmless otherwise)."""
        with contextlib.suppress(OSError):
            fd = os.open(self.outer, os.O_RDONLY)
            try:
                fcntl.ioctl(fd, FITHAW, 0)
            finally:
                os.close(fd)


_libc = ctypes.CDLL(None, use_errno=True)


def syncfs(fd: int) -> None:
    """Write back one filesystem (the outer one: never the vault's, whose
    unsynced data must stay where a power cut would lose it)."""
    if _libc.syncfs(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def read_data(fd: int, size: int) -> list[tuple[int, bytes]]:
    """The non-hole parts of a file, as (offset, bytes), all-zero blocks left out."""
    block = 1 << 20
    zero = bytes(block)
    chunks: list[tuple[int, bytes]] = []
    offset = 0
    while offset < size:
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError:  # ENXIO: only a hole is left
            break
        end = os.lseek(fd, start, os.SEEK_HOLE)
        while start < end:
            data = os.pread(fd, min(block, end - start), start)
            if data != zero[: len(data)]:
                chunks.append((start, data))
            start += len(data)
        offset = end
    return chunks


@contextlib.contextmanager
def rig(base: Path, journal: bool, size_mb: int = 0, fs: str = "ext4") -> Iterator[Rig]:
    """Both filesystems mounted; everything unmounted and detached
    afterwards.  ``fs``: the vault's file system (ext4, xfs, btrfs; the
    outer one is always ext4), mounted again as ``-t fs`` after a cut."""
    size_mb = size_mb or FS_SIZE_MB[fs]
    with tmpfs(base / "ram", size_mb + 32) as ram:
        outer_image = ram / "outer.img"
        with open(outer_image, "wb") as f:
            f.truncate((size_mb + 24) << 20)
        with attached(outer_image) as outer_dev:
            mkfs(outer_dev, journal=False)
            with mounted(outer_dev, base / "outer") as outer:
                backing = outer / "vault-disk.img"
                with open(backing, "wb") as f:
                    f.truncate(size_mb << 20)
                made = Rig(outer, backing, base / "inner")
                with attached(backing) as inner_dev:
                    mkfs(inner_dev, journal, fs)
                    with mounted(inner_dev, made.inner, "-t", fs):
                        try:
                            yield made
                        finally:
                            made.thaw()  # before anything is unmounted: a frozen outer would hang it


# -- what a user finds after the power came back ----------------------------------


def git_fsck(vault: Path) -> tuple[int, str]:
    result = sh("git", "-C", str(vault), "fsck", "--strict", "--no-progress", check=False)
    return result.returncode, (result.stderr + result.stdout).strip()


def memory(vault: Any) -> dict[str, str]:
    """Every file a user can list, with its text."""
    from vaultmem import NotFoundError

    try:
        listed = vault.listing("/memories")
    except NotFoundError:
        return {}
    return {entry.path: vault.read(entry.path) for entry in listed if entry.kind == "file"}


@dataclass
class Outcome:
    """What one image showed, judged as a user would judge it."""

    number: int
    acked_before: int  # the highest call acknowledged before the device was frozen: it must be there
    begun_before: int  # the highest call begun before it: no later one can be there
    calls: int  # every call the writer made
    e2fsck_rc: int = -1
    fsck_before: tuple[int, str] = (-1, "")  # git fsck on the image before vaultmem opened it
    found: int | None = None  # the memory is the state after this many calls
    after_write_ok: bool = False
    fsck_after: tuple[int, str] = (-1, "")  # git fsck after the open and one more write
    verify_findings: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def file_system_lost(self) -> bool:
        """``e2fsck -fy`` could not repair the file system (exit 4 or more).
        Without a file-system journal a power cut can leave ext4 so damaged
        that no application's data on it is safe; such an image says nothing
        about vaultmem and is counted apart (the test bounds how many)."""
        return self.e2fsck_rc >= 4

    @property
    def lost(self) -> bool:
        """An acknowledged call is missing: the memory is an earlier state, or none at all."""
        return self.found is None or self.found < self.acked_before

    @property
    def problems(self) -> list[str]:
        if self.file_system_lost:
            return []
        out = []
        if self.error:
            out.append(self.error)
        elif self.found is None:
            out.append("the memory is not the state after any number of the calls")
        elif self.found < self.acked_before:
            out.append(f"the memory ends with call {self.found}; call {self.acked_before} was acknowledged before")
        elif self.found > self.begun_before:
            out.append(f"the memory holds call {self.found}, begun after the image (a fault of this harness)")
        if not self.error and not self.after_write_ok:
            out.append("a write after the reboot did not leave the memory it should")
        if self.fsck_after[0] != 0:
            said = [line for line in self.fsck_after[1].splitlines() if not line.startswith("dangling ")]
            out.append(f"git fsck after recovery exits {self.fsck_after[0]}: {' | '.join(said[:2])[:300]}")
        out.extend(f"verify: {finding}" for finding in self.verify_findings)
        return out

    def line(self) -> str:
        return (
            f"image {self.number:2d}: acked {self.acked_before:5d} begun {self.begun_before:5d} "
            f"found {self.found!s:>5}  e2fsck {self.e2fsck_rc}  git fsck before {self.fsck_before[0]} "
            f"after {self.fsck_after[0]}  "
            + ("FILE SYSTEM LOST" if self.file_system_lost else "LOST" if self.lost else "ok")
            + "".join(f"\n    {problem}" for problem in self.problems)
        )


def check_image(image: Path, mountpoint: Path, key: str, outcome: Outcome) -> Outcome:
    """Reboot onto ``image``: repair the filesystem, mount, open the vault, read
    everything, write once (so recovery runs), then git fsck and verify."""
    for _ in range(3):  # e2fsck may need more than one pass, as a reboot's repeated checks would give it
        outcome.e2fsck_rc = sh("e2fsck", "-fy", str(image), check=False).returncode
        if outcome.e2fsck_rc < 4:
            break
    if outcome.file_system_lost:
        return outcome  # nothing on it can be judged: see Outcome.file_system_lost
    with attached(image) as device, mounted(device, mountpoint) as root:
        path = root / VAULT
        outcome.fsck_before = git_fsck(path)  # before any vaultmem code touches the disk
        use_vault_elsewhere(path, key, outcome)
        outcome.fsck_after = git_fsck(path)
    return outcome


def found_in(path: Path, key: str, calls: int) -> int | None:
    """The number of calls whose state the vault at ``path`` holds."""
    from vaultmem import Vault

    with Vault.open(path, key=key) as vault:
        return which_call(memory(vault), calls)


class _Opener:
    """A process of its own that opens each image's vault, as a user's next
    program would (started once, since importing vaultmem takes seconds):
    even a crash of that process (a library reading a damaged file) is a
    finding about the image, not the end of the test run."""

    proc: subprocess.Popen[str] | None = None

    @classmethod
    def use(cls, path: Path, key: str, outcome: Outcome) -> None:
        if cls.proc is None or cls.proc.poll() is not None:
            cls.proc = subprocess.Popen(
                [sys.executable, __file__, "use", str(Path(__file__).resolve().parent)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                bufsize=1,
            )
        assert cls.proc.stdin is not None and cls.proc.stdout is not None
        try:
            cls.proc.stdin.write(f"{path}\t{key}\t{outcome.calls}\n")
            cls.proc.stdin.flush()
            line = cls.proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            code = cls.proc.wait(timeout=30)
            cls.proc = None
            outcome.error = f"the process that opened the vault died (exit status {code})"
            return
        report = json.loads(line)
        outcome.found = report["found"]
        outcome.after_write_ok = report["after_write_ok"]
        outcome.verify_findings = report["verify_findings"]
        outcome.error = report["error"]


def use_vault_elsewhere(path: Path, key: str, outcome: Outcome) -> None:
    _Opener.use(path, key, outcome)


def use_vault(path: Path, key: str, outcome: Outcome) -> None:
    from vaultmem import Vault, VaultMemoryTool

    with Vault.open(path, key=key) as vault:
        found = memory(vault)
        outcome.found = which_call(found, outcome.calls)
        tool = VaultMemoryTool(vault, actor="after-reboot", session="power-back")
        tool.call({"command": "create", "path": AFTER, "file_text": "written after the power came back\n"})
        outcome.after_write_ok = memory(vault) == {**found, AFTER: "written after the power came back\n"}
        outcome.verify_findings = [str(finding) for finding in vault.verify().findings]


if __name__ == "__main__" and sys.argv[1:2] == ["use"]:
    sys.path.insert(0, sys.argv[2])
    for request in sys.stdin:
        where, secret, calls = request.rstrip("\n").split("\t")
        seen = Outcome(0, 0, 0, int(calls))
        try:
            use_vault(Path(where), secret, seen)
        except Exception as err:  # every way a user could find the vault broken is a finding
            seen.error = f"{type(err).__name__}: {err}"[:300]
        gc.collect()  # the vault's repository handles hold files open; the unmount needs them closed
        fields = ("found", "after_write_ok", "verify_findings", "error")
        print(json.dumps({name: getattr(seen, name) for name in fields}), flush=True)

if __name__ == "__main__" and sys.argv[1:2] == ["writer"]:
    sys.path.insert(0, sys.argv[2])
    writer(sys.argv[3], sys.argv[4] == "control", float(sys.argv[5]), int(sys.argv[6]))
