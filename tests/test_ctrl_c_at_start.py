"""Ctrl-C while a command is still starting ends it quietly with 130.

The ``vaultmem`` console script runs ``from vaultmem.cli import main``, then
``main()``.  Importing vaultmem takes a few tenths of a second (pygit2,
cryptography, the command parsers), and a Ctrl-C in that time used to end
the process with a Python traceback and no exit code of vaultmem's own,
because no vaultmem code was running yet to catch it.  The package now
imports its parts when they are first used, and ``main`` catches an
interrupt of its own imports, as it catches one anywhere else.

The interrupt is made deterministic here: an import hook raises
``KeyboardInterrupt`` when a given module starts to load, which is where a
real Ctrl-C lands at start."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

DRIVER = textwrap.dedent(
    """
    import sys

    INTERRUPTED_AT = sys.argv[1]

    class Interrupt:
        def find_spec(self, name, path=None, target=None):
            if name == INTERRUPTED_AT:
                raise KeyboardInterrupt
            return None

    sys.meta_path.insert(0, Interrupt())
    {entry}
    """
)

# What the console script pip writes does, and `python -m vaultmem`.
CONSOLE_SCRIPT = "from vaultmem.cli import main\nsys.argv[1:] = sys.argv[2:]\nsys.exit(main())"
RUN_MODULE = "import runpy\nsys.argv[1:] = sys.argv[2:]\nrunpy.run_module('vaultmem', run_name='__main__')"


def _start(entry: str, interrupted_at: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
    return subprocess.run(
        [sys.executable, "-c", DRIVER.format(entry=entry), interrupted_at, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.mark.parametrize("module", ["pygit2", "cryptography.fernet", "argparse", "vaultmem.cli.app"])
@pytest.mark.parametrize("entry", [CONSOLE_SCRIPT, RUN_MODULE], ids=["console-script", "python-m"])
def test_ctrl_c_while_vaultmem_loads_exits_130_without_a_traceback(module: str, entry: str) -> None:
    done = _start(entry, module, "keygen")
    assert done.returncode == 130, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stdout == ""  # no key was made


def test_without_an_interrupt_the_command_runs() -> None:
    """The hook on a module nothing loads: the driver itself is sound."""
    done = _start(CONSOLE_SCRIPT, "no.such.module", "keygen")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.strip()) == 44


def test_importing_vaultmem_loads_neither_git_nor_the_sdk() -> None:
    """What makes the start interruptible: ``import vaultmem`` alone runs no
    part of vaultmem that loads pygit2, cryptography or the Anthropic SDK;
    the first use of a name does."""
    code = (
        "import sys, vaultmem\n"
        "loaded = [m for m in ('pygit2', 'cryptography', 'anthropic') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
        "from vaultmem import Vault, VaultError, generate_key\n"
        "assert 'pygit2' in sys.modules and Vault.__name__ == 'Vault' and issubclass(VaultError, Exception)\n"
        "assert len(generate_key()) == 44\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_every_public_name_and_subpackage_is_still_there() -> None:
    import importlib

    import vaultmem

    fresh = importlib.reload(vaultmem)
    for name in fresh.__all__:
        assert getattr(fresh, name) is not None, name
    for package in ("core", "git", "repo", "ops", "anthropic", "vault", "errors"):
        assert getattr(fresh, package).__name__ == f"vaultmem.{package}"
    assert set(fresh.__all__) <= set(dir(fresh))
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        fresh.nothing_here  # noqa: B018
