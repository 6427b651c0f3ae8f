"""The machine a run measured on: CPU, kernel, the work folder's file system
and mount options, library versions, and the disk's I/O pressure."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mount_of(folder: Path, mounts: str) -> tuple[str, str, str, str] | None:
    """(device, mount point, filesystem, options) of the longest mount point
    holding ``folder``, from the text of /proc/mounts."""
    target = os.path.realpath(folder)
    best: tuple[str, str, str, str] | None = None
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        device, point, fstype, options = (_unescape(p) for p in parts[:4])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[1])):
            best = (device, point, fstype, options)
    return best


CPU_PRESSURE = Path("/proc/pressure/cpu")


def io_pressure(resource: str = "io") -> str | None:
    """``some avg10`` of /proc/pressure/io (the share of the last 10 s in
    which some task waited for I/O), or of /proc/pressure/cpu with
    ``resource="cpu"`` (waited for a CPU), if the kernel reports it."""
    try:
        with open(f"/proc/pressure/{resource}") as pressure:
            for line in pressure:
                if line.startswith("some "):
                    found = re.search(r"avg10=([0-9.]+)", line)
                    return found.group(1) if found else None
    except OSError:
        pass
    return None


def cpu_pressure() -> str | None:
    return io_pressure("cpu")


def io_stall(pressure: Path = Path("/proc/pressure/io")) -> float | None:
    """Seconds, since boot, in which some task waited for I/O (the ``some``
    line's ``total``, in microseconds), if the kernel reports it: the
    difference over an interval is how much of it the disk held someone up."""
    try:
        with open(pressure) as lines:
            for line in lines:
                if line.startswith("some "):
                    found = re.search(r"total=([0-9]+)", line)
                    return int(found.group(1)) / 1e6 if found else None
    except OSError:
        pass
    return None


def ext4_journal(device: str, fstype: str, jbd2: Path = Path("/proc/fs/jbd2")) -> str | None:
    """Whether an ext3/ext4 file system keeps a journal (the kernel lists each
    journal in /proc/fs/jbd2 as ``<device>-<inode>``); None for other file
    systems.  Without one, ext4 makes every new file skip the inodes freed in
    the last 30 seconds, so creating files costs more the more were deleted."""
    if fstype not in ("ext3", "ext4"):
        return None
    name = os.path.basename(device)
    try:
        found = any(entry.startswith(name + "-") for entry in os.listdir(jbd2))
    except OSError:
        return "unknown (no /proc/fs/jbd2)"
    return "yes" if found else "none"


def machine(work: Path) -> list[tuple[str, str]]:
    import anthropic
    import pygit2

    try:
        with open("/proc/mounts") as mounts:
            mount = mount_of(work, mounts.read())
    except OSError:
        mount = None
    disk = f"{mount[2]} on {mount[0]} at {mount[1]} ({mount[3]})" if mount else "unknown (no /proc/mounts)"
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    journal = ext4_journal(mount[0], mount[2]) if mount else None
    return [
        ("CPU", f"{_cpu_model()}, {usable} usable of {os.cpu_count()} CPUs"),
        ("kernel", f"{platform.system()} {platform.release()}"),
        ("work folder", disk),
        *([("ext4 journal", journal)] if journal is not None else []),
        ("Python", platform.python_version()),
        ("pygit2 / libgit2", f"{getattr(pygit2, '__version__', '?')} / {pygit2.LIBGIT2_VERSION}"),
        ("anthropic", anthropic.__version__),
    ]
