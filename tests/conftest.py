"""Shared fixtures: real vaults in temporary folders, real keys, real git."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from anthropic.lib.tools import ToolError
from hypothesis import settings

from vaultmem import Vault, VaultMemoryTool, generate_key

# Tests' temporary folders go to a memory file system (/dev/shm) when the
# machine has one with room: the suite makes thousands of small vaults, and
# on a disk each one's syncs, and freeing its files, cost more than the test.
# What a disk does is tested on file systems of their own: the power-cut
# tests build ext4 on loop devices, the full-disk tests mount small ones.
# What a passed test left in its folder is removed as it ends (the tmp_path
# fixture below), so a run holds little memory at a time.
# PYTEST_DEBUG_TEMPROOT, or --basetemp, chooses the place instead.
MEMORY_ROOT = Path("/dev/shm")
MEMORY_ROOM = 4 << 30  # bytes of memory free, and of room on the file system, to use it


def _memory_temp_root() -> Path | None:
    """/dev/shm when it is a tmpfs this user can write, with room to spare."""
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as fh:
            mounted = any(f[1:3] == [str(MEMORY_ROOT), "tmpfs"] for f in (line.split() for line in fh))
        with open("/proc/meminfo", encoding="ascii", errors="replace") as fh:
            free_kb = next((int(line.split()[1]) for line in fh if line.startswith("MemAvailable:")), 0)
        room = os.statvfs(MEMORY_ROOT)
    except (OSError, ValueError, IndexError):
        return None
    if not mounted or not os.access(MEMORY_ROOT, os.W_OK | os.X_OK):
        return None
    if free_kb * 1024 < MEMORY_ROOM or room.f_bavail * room.f_frsize < MEMORY_ROOM:
        return None
    return MEMORY_ROOT


if "PYTEST_DEBUG_TEMPROOT" not in os.environ:
    _root = _memory_temp_root()
    if _root is not None:
        os.environ["PYTEST_DEBUG_TEMPROOT"] = str(_root)

# The README's test command runs every test at a smaller budget, so it stays
# fast: a quarter of each property test's examples, shorter runs beside stock
# git, fewer power-cut images.  `python -m pytest --full` (or
# VAULTMEM_FULL_TESTS=1) runs every test at its full budget.  Each test states
# both through `budget(full, default)` or `examples(full)`.
settings.register_profile("default", max_examples=25)
settings.register_profile("full", max_examples=100)
FULL = False


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--full",
        action="store_true",
        help="run every test at its full budget: all property examples, longer concurrent runs, more power cuts",
    )
    parser.addoption(
        "--sealed-names",
        action="store_true",
        help="make every new format 2 vault with sealed names (VAULTMEM_TEST_SEALED_NAMES=1): the suite again "
        "through tokens; tests that read names with stock git then fail by design",
    )


def pytest_configure(config: pytest.Config) -> None:
    global FULL
    FULL = bool(config.getoption("--full")) or os.environ.get("VAULTMEM_FULL_TESTS") == "1"
    if FULL:
        settings.load_profile("full")
    if config.getoption("--sealed-names") or os.environ.get("VAULTMEM_TEST_SEALED_NAMES") == "1":
        _seal_every_new_vault()


def _seal_every_new_vault() -> None:
    from vaultmem.repo.store import Store

    init = Store.init.__func__  # type: ignore[attr-defined]

    def sealed_init(cls: type[Store], path: Any, **kwargs: Any) -> Store:
        if kwargs.get("storage_format", 2) == 2:
            kwargs.setdefault("sealed_names", True)
        return init(cls, path, **kwargs)  # type: ignore[no-any-return]

    Store.init = classmethod(sealed_init)  # type: ignore[assignment,method-assign]


def budget(full: float, default: float) -> float:
    """``full`` under ``--full``, else ``default``."""
    return full if FULL else default


def examples(full: int) -> int:
    """A property test's example budget: ``full`` under ``--full`` (or the
    hypothesis profile ``full``), a quarter of it (at least 10) by default."""
    return max(10, full * settings.default.max_examples // 100)


class FakeClock:
    """An injectable clock: tests never sleep or patch time."""

    def __init__(self, start: float = 1_790_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def devices(tmp_path: Path) -> None:
    """Skips a power-cut test where loop devices and mount cannot be used
    (tests/powerloss.py)."""
    import powerloss

    reason = powerloss.unavailable(tmp_path)
    if reason is not None:
        pytest.skip(f"this power-cut test needs loop devices and mount: {reason}")


_OUTCOMES = pytest.StashKey[dict[str, bool]]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    item.stash.setdefault(_OUTCOMES, {})[report.when] = report.passed  # type: ignore[attr-defined]
    return report


@pytest.fixture
def tmp_path(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """pytest's tmp_path, emptied when its test passed.  The folder itself
    stays, empty: pytest numbers a test's folders from the highest one there
    (``test_x0``, ``test_x1``), so a name is never given to a second test
    while a thread of the first (a vault's upkeep) may still write in it."""
    name = re.sub(r"[\W]", "_", request.node.name)[:30]
    path = tmp_path_factory.mktemp(name, numbered=True)
    yield path
    outcomes = request.node.stash.get(_OUTCOMES, {})
    if outcomes.get("setup", False) and outcomes.get("call", False):
        for child in list(path.iterdir()):
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    child.unlink()


@pytest.fixture
def key() -> str:
    return generate_key()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def vault_path(tmp_path: Path) -> Path:
    return tmp_path / "agent.vault"


@pytest.fixture
def vault(vault_path: Path, key: str, clock: FakeClock) -> Vault:
    return Vault.init(vault_path, key=key, clock=clock)


@pytest.fixture
def tool(vault: Vault) -> VaultMemoryTool:
    return VaultMemoryTool(vault, actor="support-bot", session="sess-42")


@pytest.fixture
def call(tool: VaultMemoryTool) -> Callable[..., str]:
    """``call(command="view", path="/memories")`` -> the result string."""

    def _call(**params: Any) -> str:
        return tool.call(params)

    return _call


@pytest.fixture
def fail(tool: VaultMemoryTool) -> Callable[..., str]:
    """``fail(command=..., ...)`` -> the ToolError message; fails the test if the call succeeds."""

    def _fail(**params: Any) -> str:
        with pytest.raises(ToolError) as info:
            tool.call(params)
        content = info.value.content
        assert isinstance(content, str)
        return content

    return _fail


def git(vault_path: Path, *args: str, check: bool = True) -> str:
    """Run stock git against the vault, as an auditor would."""
    result = subprocess.run(["git", "-C", str(vault_path), *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed ({result.returncode}): {result.stderr}")
    return result.stdout


def commit_count(vault_path: Path) -> int:
    out = git(vault_path, "rev-list", "--count", "refs/heads/main", check=False)
    return int(out.strip()) if out.strip() else 0


@contextlib.contextmanager
def local_http(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` served on 127.0.0.1 in a thread: its base URL, stopped after."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        serving.join()
