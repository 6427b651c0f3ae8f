"""A new user's first hour, and the command-line conventions they bring from
git, gh and pass: standard input given as ``-``, and the other habits a
script or a shell relies on."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vaultmem import Vault, VaultMemoryTool, generate_key

ROOT = Path(__file__).resolve().parent.parent


def vaultmem(
    *args: str, cwd: Path, key: str | None = None, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`vaultmem ARGS` as a user runs it, in ``cwd`` with standard input a pipe
    holding ``stdin`` (empty when None)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
    environ.update(PYTHONPATH=str(ROOT), **(env or {}))
    if key is not None:
        environ["VAULTMEM_KEY"] = key
    return subprocess.run(
        [sys.executable, "-m", "vaultmem", *args],
        input=stdin or "",
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=environ,
        cwd=cwd,
        timeout=120,
    )


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("vaultmem: ") and result.stderr.count("\n") == 1, result.stderr
    return result.stderr


@pytest.fixture
def made(tmp_path: Path) -> tuple[Path, str]:
    key = generate_key()
    Vault.init(tmp_path / "agent.vault", key=key).close()
    return tmp_path, key


# -- call - : the tool input from standard input -----------------------------------------------


def test_call_dash_reads_the_tool_input_from_standard_input(made: tuple[Path, str]) -> None:
    # A file near the size limit, escaped as JSON, is longer than one argument may be
    # (131,072 bytes on Linux): standard input is the only way to send it.
    folder, key = made
    text = '\t"Ada"\n' * 13000  # 91,000 bytes, under the limit; 143,000 characters once escaped
    request = json.dumps({"command": "create", "path": "/memories/long.txt", "file_text": text})
    assert len(request) > 131_072
    result = vaultmem("--vault", "agent.vault", "call", "-", cwd=folder, key=key, stdin=request)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    assert result.stdout == "File created successfully at: /memories/long.txt\n"
    with Vault.open(folder / "agent.vault", key=key) as vault:
        assert vault.read("/memories/long.txt") == text


def test_call_dash_with_json_output_and_a_refusal(made: tuple[Path, str]) -> None:
    folder, key = made
    request = '{"command": "view", "path": "/memories/missing.txt"}\n'
    result = vaultmem("--vault", "agent.vault", "call", "-", "--json", cwd=folder, key=key, stdin=request)
    assert result.returncode == 1, result.stderr
    answer = json.loads(result.stdout)
    assert answer["ok"] is False and answer["version"] is None
    assert "does not exist" in answer["result"]


def test_call_dash_after_the_passphrase_on_the_same_pipe(tmp_path: Path) -> None:
    # --passphrase reads the pipe's first line; the tool input is the rest.
    passphrase = "correct horse battery staple"
    Vault.init(tmp_path / "agent.vault", passphrase=passphrase).close()
    request = '{"command": "create", "path": "/memories/a.txt", "file_text": "hello\\n"}'
    result = vaultmem(
        "--vault", "agent.vault", "--passphrase", "call", "-", cwd=tmp_path, stdin=f"{passphrase}\n{request}\n"
    )
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    with Vault.open(tmp_path / "agent.vault", passphrase=passphrase) as vault:
        assert vault.read("/memories/a.txt") == "hello\n"


def test_call_dash_with_nothing_on_standard_input_is_a_usage_error(made: tuple[Path, str]) -> None:
    folder, key = made
    result = vaultmem("--vault", "agent.vault", "call", "-", cwd=folder, key=key, stdin="")
    assert result.returncode == 2
    assert "standard input" in one_error_line(result)
    with Vault.open(folder / "agent.vault", key=key) as vault:
        assert vault.head() is None


# -- completion: the install line of docs/cli.md, in each real shell from a new home -------------


@pytest.fixture
def path_with_vaultmem(tmp_path: Path) -> str:
    """A PATH whose `vaultmem` is this checkout's, as an installed one would be."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "vaultmem"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{ROOT}" exec "{sys.executable}" -m vaultmem "$@"\n')
    wrapper.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def installed(shell: str, home: Path, path: str) -> None:
    """Run the install line `vaultmem completion --help` gives for ``shell``
    (as docs/cli.md does), in that shell, in a new user's ``home``."""
    env = {**os.environ, "PATH": path, "HOME": str(home)}
    helped = subprocess.run(["vaultmem", "completion", "--help"], env=env, capture_output=True, text=True, check=True)
    lines = [line.strip() for line in helped.stdout.splitlines() if line.strip().startswith(f"{shell}:")]
    assert len(lines) == 1, helped.stdout
    line = lines[0].split(":", 1)[1].strip()
    assert f"`{line}`" in (ROOT / "docs" / "cli.md").read_text()  # the same line as the docs
    done = subprocess.run([shell, "-c", line], env=env, cwd=home, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def in_new_shell(shell: str, home: Path, path: str, script: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VAULTMEM_", "ZDOTDIR", "XDG_", "BASH_ENV"))}
    env.update(PATH=path, HOME=str(home), TERM="dumb")
    argv = {"bash": ["bash", "-i", "-c", script], "zsh": ["zsh", "-i", "-c", script], "fish": ["fish", "-c", script]}
    return subprocess.run(
        argv[shell], capture_output=True, text=True, env=env, cwd=home, stdin=subprocess.DEVNULL, timeout=60
    )


def test_zsh_completion_appended_to_a_new_users_zshrc_loads(tmp_path: Path, path_with_vaultmem: str) -> None:
    # zsh's default ~/.zshrc does not start its completion system, which defines `compdef`.
    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed")
    home = tmp_path / "home"
    home.mkdir()
    installed("zsh", home, path_with_vaultmem)
    result = in_new_shell("zsh", home, path_with_vaultmem, "print -r -- ${_comps[vaultmem]-none}")
    assert "command not found" not in result.stderr, result.stderr
    assert result.stdout.strip() == "_python_argcomplete"


def test_zsh_completion_still_loads_after_a_zshrc_that_starts_compinit(tmp_path: Path, path_with_vaultmem: str) -> None:
    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".zshrc").write_text("autoload -Uz compinit && compinit\n")
    installed("zsh", home, path_with_vaultmem)
    result = in_new_shell("zsh", home, path_with_vaultmem, "print -r -- ${_comps[vaultmem]-none}")
    assert (result.stderr, result.stdout.strip()) == ("", "_python_argcomplete")


def test_bash_completion_appended_to_bashrc_loads(tmp_path: Path, path_with_vaultmem: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    installed("bash", home, path_with_vaultmem)
    result = in_new_shell("bash", home, path_with_vaultmem, "complete -p vaultmem")
    assert "_python_argcomplete vaultmem" in result.stdout, result.stderr


def test_fish_completion_installed_in_a_new_users_home_completes(tmp_path: Path, path_with_vaultmem: str) -> None:
    # fish makes ~/.config/fish on its first start, never its completions/ folder.
    if shutil.which("fish") is None:
        pytest.skip("fish is not installed")
    home = tmp_path / "home"
    home.mkdir()
    installed("fish", home, path_with_vaultmem)
    result = in_new_shell("fish", home, path_with_vaultmem, "complete -C'vaultmem polic'")
    assert [line.split("\t")[0] for line in result.stdout.splitlines()] == ["policy"], result.stderr


# -- `vaultmem help` and `vaultmem version`, as git and gh take them ------------------------------


@pytest.mark.parametrize(("typed", "meant"), [("help", "`vaultmem --help`"), ("version", "`vaultmem --version`")])
def test_help_and_version_typed_as_commands_point_to_the_options(
    typed: str, meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from vaultmem.cli.app import main

    assert main([typed]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"Did you mean {meant}?" in err, err
    assert "`verify`" not in err


# -- Ctrl-C while libgit2 clones, pulls or pushes ------------------------------------------------

# `vaultmem ARGS`, and Ctrl-C (SIGINT) sent to it once its main thread is inside
# libgit2's fetch or push, in C between two of its callbacks into Python: where
# a long transfer spends its time, and where a user's Ctrl-C lands.
CTRL_C_IN_LIBGIT2 = """
import os, signal, sys, threading, time
from vaultmem.cli.app import main

main_thread = threading.get_ident()

def press_ctrl_c_inside_libgit2():
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(main_thread)
        if frame is not None and "pygit2" in frame.f_code.co_filename and frame.f_code.co_name in ("fetch", "push"):
            os.kill(os.getpid(), signal.SIGINT)
            return
        time.sleep(0.0005)

threading.Thread(target=press_ctrl_c_inside_libgit2, daemon=True).start()
sys.exit(main(sys.argv[1:]))
"""


def interrupted_in_libgit2(*args: str, cwd: Path, key: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
    environ.update(PYTHONPATH=str(ROOT), VAULTMEM_KEY=key)
    return subprocess.run(
        [sys.executable, "-c", CTRL_C_IN_LIBGIT2, *args],
        cwd=cwd,
        env=environ,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def shared(tmp_path: Path) -> tuple[Path, str]:
    """``mine.vault`` with a few versions, pushed to the bare repository ``server.git``."""
    key = generate_key()
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "server.git")], check=True)
    with Vault.init(tmp_path / "mine.vault", key=key) as vault:
        tool = VaultMemoryTool(vault, actor="support-bot", session="s1")
        for n in range(5):
            tool.call({"command": "create", "path": f"/memories/n{n}.md", "file_text": f"note {n}\n" * 50})
        vault.add_remote("origin", str(tmp_path / "server.git"))
        vault.push("origin")
    return tmp_path, key


def test_ctrl_c_during_a_clone_stops_it_with_130_and_leaves_nothing(shared: tuple[Path, str]) -> None:
    # Before: pygit2 dropped the KeyboardInterrupt ("Exception ignored from cffi
    # callback", a traceback), and the clone went on to the end, exit code 0.
    folder, key = shared
    result = interrupted_in_libgit2("clone", "server.git", "copy.vault", cwd=folder, key=key)
    assert (result.returncode, result.stdout, result.stderr) == (130, "", "")
    assert sorted(p.name for p in folder.iterdir()) == ["mine.vault", "server.git"]  # no copy, no work folder


def test_ctrl_c_during_a_pull_stops_it_with_130_and_changes_nothing(shared: tuple[Path, str]) -> None:
    folder, key = shared
    with Vault.clone(str(folder / "server.git"), folder / "copy.vault", key=key) as copy:
        before = copy.head()
    tracking_before = subprocess.run(
        ["git", "-C", str(folder / "copy.vault"), "for-each-ref", "refs/remotes"], capture_output=True, text=True
    ).stdout
    with Vault.open(folder / "mine.vault", key=key) as vault:
        VaultMemoryTool(vault, actor="support-bot").call(
            {"command": "create", "path": "/memories/later.md", "file_text": "later\n"}
        )
        vault.push("origin")
    result = interrupted_in_libgit2("--vault", "copy.vault", "pull", cwd=folder, key=key)
    assert (result.returncode, result.stdout, result.stderr) == (130, "", "")
    tracking_after = subprocess.run(
        ["git", "-C", str(folder / "copy.vault"), "for-each-ref", "refs/remotes"], capture_output=True, text=True
    ).stdout
    assert tracking_after == tracking_before
    with Vault.open(folder / "copy.vault", key=key) as copy:
        assert copy.head() == before
        assert copy.verify().ok
    assert vaultmem("--vault", "copy.vault", "pull", cwd=folder, key=key).returncode == 0  # the next pull completes
    with Vault.open(folder / "copy.vault", key=key) as copy:
        assert copy.read("/memories/later.md") == "later\n"


def test_ctrl_c_during_a_push_stops_it_with_130_and_the_next_push_completes(shared: tuple[Path, str]) -> None:
    folder, key = shared
    with Vault.open(folder / "mine.vault", key=key) as vault:
        VaultMemoryTool(vault, actor="support-bot").call(
            {"command": "create", "path": "/memories/later.md", "file_text": "later\n"}
        )
        head = vault.head()
    result = interrupted_in_libgit2("--vault", "mine.vault", "push", cwd=folder, key=key)
    assert (result.returncode, result.stderr) == (130, "")
    again = vaultmem("--vault", "mine.vault", "push", cwd=folder, key=key)
    assert again.returncode == 0, again.stderr
    server_main = subprocess.run(
        ["git", "-C", str(folder / "server.git"), "rev-parse", "main"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert server_main == str(head)


# -- a vault this user may not read -----------------------------------------------------------------


def test_a_vault_this_user_may_not_read_says_permission_denied_not_not_a_vault(made: tuple[Path, str]) -> None:
    # An operator running vaultmem as another user than the agent whose vault it is (mode 0700).
    from tests.test_first_hour_hunt3 import _run

    folder, key = made
    (folder / "agent.vault").chmod(0o000)
    try:
        result = _run("--vault", "agent.vault", "ls", cwd=folder, env={"VAULTMEM_KEY": key})
    finally:
        (folder / "agent.vault").chmod(0o700)
    assert result.returncode == 2
    line = one_error_line(result)
    assert "permission denied" in line and "not a vault" not in line, line


# -- --help on the commands that group others ---------------------------------------------------------


@pytest.mark.parametrize("group", ["key", "policy", "remote", "signer"])
def test_a_group_commands_help_says_what_it_is_for_with_an_example_that_parses(
    group: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # docs/cli.md: `-h` / `--help` after any command prints what it is for, ... and one example.
    from vaultmem.cli.app import build_parser, main

    with pytest.raises(SystemExit) as done:
        main([group, "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    purpose = text.split("\n\n")[1].strip()
    assert purpose.endswith(".") and "\n" not in purpose, text
    assert "\nexample:\n" in text, text
    argv = shlex.split(text.split("\nexample:\n", 1)[1].strip().splitlines()[0])
    assert argv[:2] == ["vaultmem", group]
    assert build_parser().parse_args(argv[1:]).command == group


def test_call_dash_reads_a_request_file_saved_with_a_bom(made: tuple[Path, str]) -> None:
    folder, key = made
    request = '\ufeff{"command": "create", "path": "/memories/a.txt", "file_text": "hi\\n"}\r\n'
    result = vaultmem("--vault", "agent.vault", "call", "-", cwd=folder, key=key, stdin=request)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr


# -- --key-file - : the key from a pipe, as a password manager gives it ------------------------------


def test_key_file_dash_reads_the_key_from_a_pipe(made: tuple[Path, str]) -> None:
    folder, key = made
    result = vaultmem("--vault", "agent.vault", "--key-file", "-", "ls", "--json", cwd=folder, stdin=key + "\n")
    assert (result.returncode, result.stderr, json.loads(result.stdout)) == (0, "", [])


def test_key_file_dash_then_call_dash_share_the_pipe(made: tuple[Path, str]) -> None:
    folder, key = made
    request = '{"command": "create", "path": "/memories/a.txt", "file_text": "hi\\n"}'
    result = vaultmem("--vault", "agent.vault", "--key-file", "-", "call", "-", cwd=folder, stdin=f"{key}\n{request}")
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    with Vault.open(folder / "agent.vault", key=key) as vault:
        assert vault.read("/memories/a.txt") == "hi\n"


def test_key_file_dash_with_a_wrong_or_no_key_on_the_pipe_is_refused(made: tuple[Path, str]) -> None:
    folder, _key = made
    wrong = vaultmem("--vault", "agent.vault", "--key-file", "-", "ls", cwd=folder, stdin=generate_key() + "\n")
    assert wrong.returncode == 2 and "does not open this vault" in one_error_line(wrong)
    empty = vaultmem("--vault", "agent.vault", "--key-file", "-", "ls", cwd=folder, stdin="")
    assert empty.returncode == 2 and "standard input" in one_error_line(empty)


# -- a key file open to others without being readable by them -------------------------------------


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o610], ids=lambda mode: f"{mode:04o}")
def test_a_key_file_others_may_write_is_not_called_readable_by_them(made: tuple[Path, str], mode: int) -> None:
    folder, key = made
    key_file = folder / "agent.vault.key"
    key_file.write_text(key + "\n")
    key_file.chmod(mode)
    result = vaultmem("--vault", "agent.vault", "--key-file", "agent.vault.key", "ls", cwd=folder)
    assert result.returncode == 2
    line = one_error_line(result)
    assert "readable by others" not in line and f"(mode {mode:04o})" in line and "chmod 600" in line, line


# -- another command's option ---------------------------------------------------------------------------


def test_another_commands_option_is_said_to_be_not_this_ones(capsys: pytest.CaptureFixture[str]) -> None:
    # docs/cli.md's erasure commands take --reason, but for retention, which records its own.
    from vaultmem.cli.app import main

    assert main(["retention", "--keep-for", "30d", "--reason", "GDPR"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "`vaultmem retention` takes no --reason." in err, err
    assert "Did you mean `--json`" not in err
