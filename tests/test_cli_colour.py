"""Colour on a terminal, none on a pipe, none with NO_COLOR (issue 15).

Run as real processes: whether standard output is a terminal is the point.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from vaultmem import Vault, VaultMemoryTool, generate_key

ESC = "\x1b["


@pytest.fixture
def vault(tmp_path: Path) -> tuple[Path, str]:
    key = generate_key()
    path = tmp_path / "v.vault"
    with Vault.init(path, key=key) as opened:
        tool = VaultMemoryTool(opened, actor="a", session="s")
        tool.call({"command": "create", "path": "/memories/a.txt", "file_text": "alpha\n"})
        tool.call({"command": "str_replace", "path": "/memories/a.txt", "old_str": "alpha", "new_str": "beta"})
    return path, key


def on_terminal(args: list[str], env: dict[str, str]) -> str:
    """What the command writes to standard output when it is a terminal."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "vaultmem", *args], stdout=slave, stderr=subprocess.PIPE, env=env, start_new_session=True
    )
    os.close(slave)
    chunks = []
    try:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the process closed its end
                break
            if not chunk:
                break
            chunks.append(chunk)
        proc.wait(timeout=60)
    finally:
        os.close(master)
    return b"".join(chunks).decode()


def environment(key: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_") and k not in ("NO_COLOR", "TERM")}
    return {**env, "VAULTMEM_KEY": key, "TERM": "xterm-256color", **extra}


@pytest.mark.parametrize("command", [["log"], ["show", "main"], ["diff", "main~1"], ["verify"]])
def test_a_terminal_gets_colour_a_pipe_and_no_color_do_not(vault: tuple[Path, str], command: list[str]) -> None:
    path, key = vault
    args = ["--vault", str(path), *command]
    coloured = on_terminal(args, environment(key))
    assert ESC in coloured, coloured
    plain = on_terminal(args, environment(key, NO_COLOR="1"))
    assert ESC not in plain and plain.strip()
    piped = subprocess.run(
        [sys.executable, "-m", "vaultmem", *args], capture_output=True, text=True, env=environment(key), check=False
    )
    assert ESC not in piped.stdout and piped.stdout.strip()
    assert plain.replace("\r\n", "\n") == piped.stdout  # the same text, only the colour differs


def test_a_coloured_diff_marks_added_and_removed_lines(vault: tuple[Path, str]) -> None:
    path, key = vault
    shown = on_terminal(["--vault", str(path), "diff", "main~1"], environment(key))
    assert f"{ESC}31m-alpha{ESC}m" in shown and f"{ESC}32m+beta{ESC}m" in shown
