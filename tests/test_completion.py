"""Shell completion (issue 15): ``vaultmem completion SHELL`` prints the code
that one command installs; real bash then completes commands, sub-commands
and options by asking vaultmem's own parser (argcomplete)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture
def path_with_vaultmem(tmp_path: Path) -> str:
    """A PATH whose `vaultmem` is this checkout's, as an installed one would be."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "vaultmem"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m vaultmem "$@"\n')
    wrapper.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def bash_completes(path: str, line: str) -> list[str]:
    """What bash offers after ``line`` (the cursor at its end), with the
    completion installed as docs/cli.md says."""
    words = line.split(" ")
    script = (
        "source <(vaultmem completion bash)\n"
        f"COMP_WORDS=({' '.join(repr(w) for w in words)})\n"
        f"COMP_CWORD={len(words) - 1}\n"
        f"COMP_LINE={line!r}\n"
        f"COMP_POINT={len(line)}\n"
        "_python_argcomplete vaultmem\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    env = {**os.environ, "PATH": path}
    result = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", script], capture_output=True, text=True, env=env, timeout=60, check=True
    )
    return [word.strip() for word in result.stdout.splitlines() if word.strip()]


def test_bash_completes_commands_sub_commands_and_options(path_with_vaultmem: str) -> None:
    assert bash_completes(path_with_vaultmem, "vaultmem lo") == ["log"]
    assert set(bash_completes(path_with_vaultmem, "vaultmem key ")) >= {"list", "change", "rotate"}
    assert bash_completes(path_with_vaultmem, "vaultmem log --sin") == ["--since"]
    assert "--json" in bash_completes(path_with_vaultmem, "vaultmem verify --")


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_each_shell_gets_code_that_runs_vaultmem(shell: str, capsys: pytest.CaptureFixture[str]) -> None:
    from vaultmem.cli.app import main

    assert main(["completion", shell]) == 0
    code = capsys.readouterr().out
    assert "vaultmem" in code and "_ARGCOMPLETE" in code


def test_fish_completes_through_the_same_protocol(path_with_vaultmem: str, tmp_path: Path) -> None:
    """What fish's function asks for, without fish (the fish itself loads
    it in test_hunt_first_hour_more.py): the completions come back one a
    line, with their help after a tab."""
    out = tmp_path / "completions"
    env = {
        **os.environ,
        "PATH": path_with_vaultmem,
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_SHELL": "fish",
        "_ARGCOMPLETE_SUPPRESS_SPACE": "1",
        "_ARGCOMPLETE_DFS": "\t",
        "_ARGCOMPLETE_IFS": "\n",
        "COMP_LINE": "vaultmem pol",
        "COMP_POINT": str(len("vaultmem pol")),
        "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
    }
    subprocess.run([shutil.which("vaultmem", path=path_with_vaultmem) or "vaultmem"], env=env, timeout=60, check=False)
    lines = out.read_text().splitlines()
    assert [line.split("\t")[0] for line in lines] == ["policy"]
    assert "policy" in lines[0].split("\t")[1]  # its one-line purpose, shown by fish


def test_a_shell_vaultmem_does_not_know_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from vaultmem.cli.app import main

    assert main(["completion", "powershell"]) == 2
    assert "completion" in capsys.readouterr().err
