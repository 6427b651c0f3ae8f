"""The layout of docs/architecture.md holds: the layers it lists are the ones
the import contract checks, the contract is kept, imports inside functions
stay where they keep a command fast to start, and the 0.1 module names import
as the modules at their new homes."""

from __future__ import annotations

import ast
import importlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from vaultmem.core.detectors import iban_ok, luhn_ok

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "vaultmem"

# Where an import inside a function is allowed: the CLI (each command loads
# only what it needs) and the package surface (the SDK's tool classes load on
# first use), and libraries a command may never need.  Anywhere else it would hide an arrow the contract must see.
LAZY_IMPORTS_ALLOWED = {
    "vaultmem/__init__.py",
    "vaultmem/cli/__init__.py",  # the command's modules, so that Ctrl-C while they load exits 130
    "vaultmem/cli/app.py",
    "vaultmem/cli/chat.py",
    "vaultmem/cli/demo.py",
    "vaultmem/core/versions.py",  # dateparser, only for a time given in words
    "vaultmem/core/detectors.py",  # python-stdnum, only once text looks like a card number or an IBAN
}


def contract_layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    return next(c["layers"] for c in contracts if c["type"] == "layers")


def test_the_documented_layers_are_the_checked_ones() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    documented = re.findall(r"^\| `vaultmem\.([a-z_]+)` \|", doc, re.M)
    assert documented == contract_layers()
    for layer in documented:
        assert (PACKAGE / layer).is_dir() or (PACKAGE / f"{layer}.py").is_file(), layer


def test_the_import_contracts_are_kept() -> None:
    linter = shutil.which("lint-imports")
    if linter is None:
        pytest.fail("lint-imports is not installed: pip install -e '.[test]'")
    result = subprocess.run([linter], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "0 broken" in result.stdout


def test_imports_inside_functions_are_only_where_they_keep_startup_fast() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Import | ast.ImportFrom) and rel not in LAZY_IMPORTS_ALLOWED:
                        found.append(f"{rel}:{inner.lineno}")
    assert found == []


def test_starting_vaultmem_imports_no_checksum_or_date_library_it_may_not_need() -> None:
    """python-stdnum (with pydoc, ssl and socket, 25 ms) and dateparser wait
    until a command meets text they must check."""
    probe = "import sys, vaultmem.cli.app; print(sorted({m.split('.')[0] for m in sys.modules}))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    loaded = ast.literal_eval(done.stdout)
    assert "vaultmem" in loaded
    assert "stdnum" not in loaded
    assert "dateparser" not in loaded


def test_the_checksums_still_run_once_imported_at_first_use() -> None:
    assert luhn_ok("4111 1111 1111 1111") and not luhn_ok("4111 1111 1111 1112")
    assert iban_ok("GB82 WEST 1234 5698 7654 32") and not iban_ok("GB82 WEST 1234 5698 7654 33")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("vaultmem.commits", "vaultmem.git.commits"),
        ("vaultmem.secrets", "vaultmem.core.detectors"),
        ("vaultmem.replay", "vaultmem.testing.replay"),
        ("vaultmem.policy", "vaultmem.repo.policy"),
    ],
)
def test_the_old_module_names_import_as_the_modules_at_their_new_homes(old: str, new: str) -> None:
    assert importlib.import_module(old) is importlib.import_module(new)
    assert importlib.import_module(new).__spec__.name == new


def test_no_module_is_named_after_the_standard_library() -> None:
    stdlib = sys.stdlib_module_names
    clashes = [p.stem for p in PACKAGE.rglob("*.py") if p.stem in stdlib and p.stem != "__init__"]
    assert clashes == []
