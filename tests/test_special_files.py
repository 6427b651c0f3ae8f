"""A vault whose git files were replaced by something that is not a file
(a FIFO, a device) is refused with a clear error, never waited on forever.

Reading a FIFO blocks until something writes to it: a FIFO put at
``refs/heads/main``, the keyring's ref or git's ``config`` made every open,
read and tool call of the vault hang.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vaultmem import Vault, VaultMemoryTool, generate_key

READ = """
import sys
from vaultmem import Vault, VaultError, VaultMemoryTool
try:
    vault = Vault.open(sys.argv[1], key=sys.argv[2])
    print(VaultMemoryTool(vault, actor="a").call({"command": "view", "path": "/memories/a.txt"}))
except VaultError as err:
    print(err)
    sys.exit(3)
"""


@pytest.mark.parametrize(
    "where", ["refs/heads/main", "refs/heads/vaultmem-keyring", "refs/heads/vaultmem-policy", "config", "packed-refs"]
)
def test_a_fifo_in_place_of_a_git_file_is_refused_at_once(tmp_path: Path, where: str) -> None:
    key = generate_key()
    path = tmp_path / "v"
    with Vault.init(path, key=key) as vault:
        VaultMemoryTool(vault, actor="a").call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    target = path / where
    if target.exists():
        target.unlink()
    os.mkfifo(target)
    done = subprocess.run([sys.executable, "-c", READ, str(path), key], capture_output=True, text=True, timeout=20)
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"{where} is not a file" in done.stdout
    assert "Traceback" not in done.stderr


SWAP = """
import os, sys
from anthropic.lib.tools import ToolError
from vaultmem import Vault, VaultMemoryTool
vault = Vault.open(sys.argv[1], key=sys.argv[2])
tool = VaultMemoryTool(vault, actor="a")
os.unlink(os.path.join(sys.argv[1], "refs/heads/main"))
os.mkfifo(os.path.join(sys.argv[1], "refs/heads/main"))
try:
    print(tool.call({"command": "create", "path": "/memories/b.txt", "file_text": "b"}))
except ToolError as err:
    print(err.content)
    sys.exit(3)
"""


def test_a_fifo_put_in_place_of_main_while_the_vault_is_open_is_an_error_not_a_wait(tmp_path: Path) -> None:
    key = generate_key()
    path = tmp_path / "v"
    with Vault.init(path, key=key) as vault:
        VaultMemoryTool(vault, actor="a").call({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    done = subprocess.run([sys.executable, "-c", SWAP, str(path), key], capture_output=True, text=True, timeout=20)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 3, done.stdout + done.stderr
    assert "refs/heads/main is not a file (it is a FIFO)" in done.stdout
