"""The backends the benchmark compares, and the memories they start from.

Both backends are durable.  vaultmem acknowledges a mutation only once it is
on disk (docs/format.md).  The SDK's ``BetaLocalFilesystemMemoryTool`` fsyncs
the file it writes, but a created, renamed or deleted *name* lives in its
folder, and POSIX makes that durable only when the folder itself is fsynced.
:class:`DurableSDK` adds those fsyncs, so both backends do the same job.

Memories are laid out as ``/memories/d{i % 20}/f{i}.txt``, each file
:data:`BODY`.  A vault gets them as one ``import`` commit of a pristine copy,
then ``str_replace`` edits up to the history length asked for.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

import pygit2
from anthropic.tools import BetaLocalFilesystemMemoryTool
from anthropic.types.beta import (
    BetaMemoryTool20250818CreateCommand,
    BetaMemoryTool20250818DeleteCommand,
    BetaMemoryTool20250818InsertCommand,
    BetaMemoryTool20250818RenameCommand,
    BetaMemoryTool20250818StrReplaceCommand,
)

from vaultmem import Vault, VaultMemoryTool, generate_key

BODY = "".join(f"note {i}: the customer prefers e-mail follow-ups\n" for i in range(30))
FOLDERS = 20
EDITED = "The memory file has been edited."
Log = Callable[[str], None]
C = TypeVar("C")
HERE = Path(__file__).resolve().parent


class BenchError(RuntimeError):
    """A call or a check failed: the benchmark stops rather than time errors."""


def memory_path(i: int) -> str:
    """The memory path of file ``i``."""
    return f"/memories/d{i % FOLDERS}/f{i}.txt"


def folder_count(files: int) -> int:
    """How many folders a memory of ``files`` files has (one file each below 20)."""
    return min(FOLDERS, files)


def folder_path(i: int, files: int) -> str:
    """The ``i``-th folder of a memory of ``files`` files, cycling through them all."""
    return f"/memories/d{i % folder_count(files)}"


# -- the SDK, made durable ----------------------------------------------------


def fsync_folder(folder: Path) -> None:
    """Make the names in ``folder`` durable (POSIX: fsync the directory)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def missing_folders(folder: Path) -> list[Path]:
    """``folder`` and its ancestors that do not exist yet, deepest first."""
    missing: list[Path] = []
    while not folder.exists() and folder.parent != folder:
        missing.append(folder)
        folder = folder.parent
    return missing


class DurableSDK(BetaLocalFilesystemMemoryTool):
    """``BetaLocalFilesystemMemoryTool`` that also fsyncs every folder whose
    entries a successful mutation changed: the parent of each path it touched
    (both for a rename) and the parent of each folder it had to create.

    The paths are the SDK's own: its ``_validate_path`` maps each memory path
    to the disk path, and this class records what it returned during the call
    instead of validating a second time (which would slow the SDK down and
    flatter vaultmem).  A call that fails raises before any fsync."""

    def __init__(self, base_path: str) -> None:
        super().__init__(base_path=base_path)
        self._touched: list[tuple[Path, list[Path]]] | None = None
        self._new_folders = False

    def _validate_path(self, path: str) -> Path:
        full = super()._validate_path(path)
        if self._touched is not None:
            self._touched.append((full, missing_folders(full.parent) if self._new_folders else []))
        return full

    def _durably(self, run: Callable[[C], str], command: C, new_folders: bool = False) -> str:
        self._touched, self._new_folders = [], new_folders
        try:
            result = run(command)
        finally:
            touched, self._touched, self._new_folders = self._touched, None, False
        folders: dict[Path, None] = {}
        for full, created in touched:
            folders[full.parent] = None
            for folder in created:
                folders[folder.parent] = None
        for folder in folders:
            fsync_folder(folder)
        return result

    def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        return self._durably(super().create, command, new_folders=True)

    def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        return self._durably(super().str_replace, command)

    def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        return self._durably(super().insert, command)

    def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        return self._durably(super().delete, command)

    def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        return self._durably(super().rename, command, new_folders=True)


class ToolProcess:
    """A backend in a process of its own (bench/worker.py, whose docstring
    gives the arguments), as an application runs it: ``timed(params)`` is
    (seconds, result), the seconds taken there around the call alone."""

    def __init__(
        self, name: str, args: Sequence[str], env: dict[str, str] | None = None, errlog: IO[str] | None = None
    ) -> None:
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "worker.py"), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errlog,
            env=env,
            text=True,
            encoding="utf-8",
        )

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps(request) + "\n")
        stdin.flush()
        line = stdout.readline()
        if not line:
            raise BenchError(f"{self.name}: its process ended (exit {self.process.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def timed(self, params: dict[str, Any]) -> tuple[float, str]:
        answer = self.ask({"call": params})
        if "error" in answer:
            raise BenchError(f"{self.name}: {params} failed: {answer['error']}")
        return float(answer["elapsed"]), str(answer["text"])

    def call(self, params: dict[str, Any]) -> str:
        return self.timed(params)[1]

    def versions(self) -> int:
        return int(self.ask({"versions": True})["versions"])

    def close(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        if self.process.wait(timeout=60) != 0:
            raise BenchError(f"{self.name}: its process exited with {self.process.returncode}")


def write_memory_folder(base: Path, files: int) -> None:
    """An SDK ``base_path`` holding ``files`` files, as the SDK's tool would
    create them (folders 0700, files 0600), written directly (no fsync: the
    caller syncs once when everything is built)."""
    root = base / "memories"
    root.mkdir(parents=True, mode=0o700)
    for k in range(folder_count(files)):
        (root / f"d{k}").mkdir(mode=0o700)
    data = BODY.encode("utf-8")
    for i in range(files):
        fd = os.open(root / f"d{i % FOLDERS}" / f"f{i}.txt", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)


# -- vaults ------------------------------------------------------------------


@dataclass(frozen=True)
class BuiltVault:
    """A vault ready to measure: ``commits`` commits of ``files`` files."""

    path: Path
    key: str
    files: int
    commits: int
    head: str
    seconds: float
    reused: bool = False


def padding_edit(j: int, files: int) -> dict[str, Any]:
    """The ``j``-th edit that lengthens a vault's history: each file in turn
    gets ``note 3:`` -> ``note 3 [0]:``, then ``[k]`` -> ``[k+1]`` (always valid)."""
    k = j // files
    old = "note 3:" if k == 0 else f"note 3 [{k - 1}]:"
    return {"command": "str_replace", "path": memory_path(j % files), "old_str": old, "new_str": f"note 3 [{k}]:"}


def build_vault(path: Path, source: Path, files: int, commits: int, log: Log) -> BuiltVault:
    """A new vault at ``path``: one import of ``source`` (a pristine SDK folder
    of ``files`` files), then ``commits - 1`` edits."""
    if commits < 1:
        raise BenchError("a vault's history holds at least its import commit")
    started = time.perf_counter()
    key = generate_key()
    vault = Vault.init(path, key=key)
    try:
        imported = vault.import_folder(source, actor="bench", session="build")
        if imported.files != files:
            raise BenchError(f"importing {source} recorded {imported.files} files, expected {files}")
        tool = VaultMemoryTool(vault, actor="bench", session="build")
        edits = commits - 1
        step = max(1, edits // 20)
        for j in range(edits):
            params = padding_edit(j, files)
            result = tool.call(params)
            if not isinstance(result, str) or not result.startswith(EDITED):
                raise BenchError(f"building {path.name}: {params} returned {result!r}")
            if (j + 1) % step == 0 and edits >= 1000:
                elapsed = time.perf_counter() - started
                left = elapsed / (j + 1) * (edits - j - 1)
                log(f"  {path.name}: {j + 2:,}/{commits:,} commits, {elapsed:.0f} s, about {left:.0f} s left")
        if commits <= 1000 and len(vault.history()) != commits:
            raise BenchError(f"{path.name} has {len(vault.history())} commits, expected {commits}")
        head = vault.history(limit=1)[0].id
    finally:
        vault.close()
    return BuiltVault(path, key, files, commits, head, time.perf_counter() - started)


def count_commits(vault: Vault) -> int:
    """The length of ``main`` (libgit2's walk: no decryption, no parsing)."""
    head = vault.repo.references["refs/heads/main"].target
    return sum(1 for _ in vault.repo.walk(head, pygit2.enums.SortMode.NONE))


class VaultStore:
    """Built vaults kept in a work folder between runs (``--keep``), each
    checked before it is reused: it opens with its key, its head is the one
    recorded when it was built, and it holds exactly the files and commits
    asked for.  Runs measure copies, so the kept vaults stay as built."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.manifest = folder / "manifest.json"
        folder.mkdir(parents=True, exist_ok=True)

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            loaded: dict[str, dict[str, Any]] = json.loads(self.manifest.read_text())
            return loaded
        except (OSError, ValueError):
            return {}

    def _save(self, entries: dict[str, dict[str, Any]]) -> None:
        tmp = self.manifest.with_suffix(".tmp")
        fd = os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)  # holds the vaults' keys
        with os.fdopen(fd, "w") as out:
            json.dump(entries, out, indent=1, sort_keys=True)
        os.replace(tmp, self.manifest)

    def reusable(self, path: Path, entry: dict[str, Any], files: int, commits: int) -> bool:
        """Whether the vault at ``path`` is the one ``entry`` recorded."""
        if entry.get("files") != files or entry.get("commits") != commits or not path.is_dir():
            return False
        try:
            vault = Vault.open(path, key=entry["key"])
        except Exception:
            return False
        try:
            latest = vault.history(limit=1)
            listed = sum(1 for item in vault.listing() if item.kind == "file")
            return (
                bool(latest) and latest[0].id == entry["head"] and listed == files and count_commits(vault) == commits
            )
        except Exception:
            return False
        finally:
            vault.close()

    def obtain(self, source: Path, files: int, commits: int, dest: Path, log: Log) -> BuiltVault:
        """A copy at ``dest`` of the kept vault of ``files``/``commits``, built first if needed."""
        name = f"f{files}-h{commits}"
        kept = self.folder / name
        entries = self._load()
        entry = entries.get(name)
        if entry is not None and self.reusable(kept, entry, files, commits):
            log(f"  reusing {kept} (checked: head, {files:,} files, {commits:,} commits)")
            built = BuiltVault(kept, entry["key"], files, commits, entry["head"], entry["seconds"], reused=True)
        else:
            if entry is not None:
                log(f"  {kept} is not the vault recorded when it was built: building it again")
            shutil.rmtree(kept, ignore_errors=True)
            built = build_vault(kept, source, files, commits, log)
            entries[name] = {k: v for k, v in asdict(built).items() if k not in ("path", "reused")}
            self._save(entries)
        shutil.copytree(kept, dest, symlinks=True)
        return BuiltVault(dest, built.key, files, commits, built.head, built.seconds, built.reused)
