"""The `vaultmem` command as a script and a new user meet it: output that
cannot be written, standard streams closed, bytes that are not UTF-8 in
arguments and paths, an empty key file option, narrow terminals.  Each runs
the real command as a subprocess (or on a real pseudo-terminal) against
real vaults."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import git

from vaultmem import Vault, VaultMemoryTool, generate_key
from vaultmem.cli.progress import ProgressBar, Spinner, render

NOT_UTF8 = "\udcff"  # what Python makes of the byte 0xFF on a command line or in a path


def clean_env(key: str | None = None, buffered: bool = True) -> dict[str, str]:
    """The environment of a user's shell: no vaultmem variables but the key,
    and (unless ``buffered`` is False) Python's output buffered, as it is
    by default."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
    if buffered:
        env.pop("PYTHONUNBUFFERED", None)
    else:
        env["PYTHONUNBUFFERED"] = "1"
    if key is not None:
        env["VAULTMEM_KEY"] = key
    return env


def vaultmem(*args: str) -> list[str]:
    return [sys.executable, "-m", "vaultmem", *args]


def run(
    *args: str, key: str | None = None, preexec: Callable[[], None] | None = None, stdin: int | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        vaultmem(*args),
        capture_output=True,
        text=True,
        errors="backslashreplace",
        env=clean_env(key),
        preexec_fn=preexec,
        stdin=stdin if stdin is not None else subprocess.DEVNULL,
        check=False,
        timeout=60,
    )


@pytest.fixture
def made(tmp_path: Path) -> tuple[Path, str]:
    """A vault with three versions, and its key."""
    key = generate_key()
    path = tmp_path / "agent.vault"
    with Vault.init(path, key=key) as vault:
        tool = VaultMemoryTool(vault, actor="support-bot", session="s-1")
        tool.call({"command": "create", "path": "/memories/notes.txt", "file_text": "Prefers e-mail.\n"})
        tool.call({"command": "create", "path": "/memories/other.txt", "file_text": "x\n"})
        tool.call({"command": "str_replace", "path": "/memories/notes.txt", "old_str": "e-mail", "new_str": "phone"})
    return path, key


# -- output that cannot be written -------------------------------------------------


@pytest.mark.parametrize("args", [("log",), ("log", "--json"), ("cat", "/memories/notes.txt"), ("ls",)])
def test_a_reader_that_stops_before_reading_gets_no_traceback(made: tuple[Path, str], args: tuple[str, ...]) -> None:
    """`vaultmem log | true`: Python's buffered output used to be flushed at
    exit, outside every handler, printing "Exception ignored ...
    BrokenPipeError" and exiting 120."""
    path, key = made
    child = subprocess.Popen(
        vaultmem("--vault", str(path), *args),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=clean_env(key),
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()  # the reader is gone before anything is written
    err = child.stderr.read().decode()
    assert child.wait(timeout=60) == 0, err
    assert err == ""


@pytest.mark.parametrize("buffered", [True, False])
def test_output_to_a_full_disk_is_one_line_that_names_standard_output(made: tuple[Path, str], buffered: bool) -> None:
    """Standard output on a full disk (/dev/full) used to exit 120 with
    Python's "Exception ignored" lines, or say `[Errno 28] No space left on
    device` as if the vault's disk were full."""
    path, key = made
    with open("/dev/full", "w") as full:
        for args in (("keygen",), ("ls", "--json"), ("cat", "/memories/notes.txt")):
            result = subprocess.run(
                vaultmem("--vault", str(path), *args),
                stdout=full,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                text=True,
                env=clean_env(key, buffered=buffered),
                check=False,
                timeout=60,
            )
            assert result.returncode == 2, (args, result.stderr)
            assert result.stderr == "vaultmem: cannot write to standard output: No space left on device.\n", args
        # A write whose report cannot be printed still happened; the message says what failed.
        create = json.dumps({"command": "create", "path": "/memories/full.txt", "file_text": "kept\n"})
        result = subprocess.run(
            vaultmem("--vault", str(path), "call", create),
            stdout=full,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=clean_env(key, buffered=buffered),
            check=False,
            timeout=60,
        )
    assert result.stderr == "vaultmem: cannot write to standard output: No space left on device.\n"
    with Vault.open(path, key=key) as vault:
        assert vault.read("/memories/full.txt") == "kept\n"


@pytest.mark.parametrize("args", [("ls",), ("lgo",), ()])
def test_an_error_on_a_closed_pipe_still_exits_2(made: tuple[Path, str], args: tuple[str, ...]) -> None:
    """`vaultmem ... 2>&1 | head -0`: the error line could not be written,
    and the exit code used to be Python's 120 instead of 2."""
    path, key = made
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        child = subprocess.Popen(
            vaultmem("--vault", str(path.parent / "missing.vault"), *args),
            stdin=subprocess.DEVNULL,
            stdout=write_end,
            stderr=write_end,
            env=clean_env(key),
        )
    finally:
        os.close(write_end)
    assert child.wait(timeout=60) == 2


def test_a_closed_standard_output_or_input_is_dev_null_as_in_git(made: tuple[Path, str]) -> None:
    """`vaultmem ls --json >&-` used to stop with `unexpected AttributeError`,
    and `--passphrase` with standard input closed too."""
    path, key = made
    for args in (("ls", "--json"), ("cat", "/memories/notes.txt"), ("show", "main", "--json")):
        closed_out = run("--vault", str(path), *args, key=key, preexec=lambda: os.close(1))
        assert (closed_out.returncode, closed_out.stderr) == (0, ""), (args, closed_out.stderr)
    protected = path.parent / "pass.vault"
    Vault.init(protected, passphrase="correct horse battery staple").close()
    before = git(protected, "for-each-ref")
    closed_in = run("--vault", str(protected), "--passphrase", "ls", preexec=lambda: os.close(0))
    assert closed_in.returncode == 2
    assert closed_in.stderr == "vaultmem: no passphrase on standard input: its first line is read as the passphrase.\n"
    assert git(protected, "for-each-ref") == before


# -- bytes that are not UTF-8 ------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("show", NOT_UTF8), "the version '\\udcff' is not valid Unicode text"),
        (("diff", "main~1", NOT_UTF8), "the version '\\udcff' is not valid Unicode text"),
        (("restore", f"main{NOT_UTF8}"), "the version 'main\\udcff' is not valid Unicode text"),
        (("redact", NOT_UTF8, "/memories/notes.txt", "--reason", "r"), "the version '\\udcff'"),
        (("ls", "--at", NOT_UTF8), "the version '\\udcff' is not valid Unicode text"),
        (("cat", "/memories/notes.txt", "--at", NOT_UTF8), "the version '\\udcff' is not valid Unicode text"),
        (("log", "--actor", f"bot{NOT_UTF8}"), "the actor 'bot\\udcff' is not valid Unicode text"),
        (("log", "--session", NOT_UTF8), "the session '\\udcff' is not valid Unicode text"),
        (("find", f"Prefers{NOT_UTF8}"), "the text to find 'Prefers\\udcff' is not valid Unicode text"),
        (("forget", "--matching", NOT_UTF8, "--reason", "r"), "--matching '\\udcff' is not valid Unicode text"),
        (("policy", "set", f'patterns={{"k": "a{NOT_UTF8}"}}'), "FIELD=VALUE 'patterns="),
        (("remote", "add", "origin", f"/srv/{NOT_UTF8}"), "the URL '/srv/\\udcff' is not valid Unicode text"),
        (("push", NOT_UTF8), "the remote '\\udcff' is not valid Unicode text"),
    ],
)
def test_an_argument_that_is_not_utf8_is_refused_naming_it_and_changes_nothing(
    made: tuple[Path, str], args: tuple[str, ...], says: str
) -> None:
    """A version given in bytes that are not UTF-8 used to read `git cannot
    read '\\udcff' in this vault (...surrogates not allowed); run `vaultmem
    verify``, as if the vault were damaged; `log --actor` and `find` answered
    "nothing" with exit code 0; `policy set` stopped with `unexpected
    UnicodeEncodeError`; `remote add` blamed the remote's name and left an
    empty `[remote "origin"]` section in the vault's config."""
    path, key = made
    refs, config = git(path, "for-each-ref"), (path / "config").read_bytes()
    result = run("--vault", str(path), *args, key=key)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.startswith("vaultmem: ") and result.stderr.count("\n") == 1, result.stderr
    assert says in result.stderr, result.stderr
    assert "(it holds bytes that are not UTF-8)" in result.stderr
    assert result.stdout == ""
    assert git(path, "for-each-ref") == refs
    assert (path / "config").read_bytes() == config


def test_git_setup_in_a_folder_whose_name_is_not_utf8_is_refused_and_sets_nothing(tmp_path: Path) -> None:
    """It used to record the diff driver, then stop with `unexpected
    UnicodeEncodeError` on the signers' files: half set up."""
    key = generate_key()
    path = tmp_path / f"agent{NOT_UTF8}.vault"
    Vault.init(path, key=key).close()
    config = (path / "config").read_bytes()
    result = run("--vault", str(path), "git-setup", key=key)
    assert result.returncode == 2, result.stderr
    assert "unexpected" not in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert "holds bytes that are not UTF-8, which git's config cannot record" in result.stderr
    assert "Nothing was set up." in result.stderr
    assert (path / "config").read_bytes() == config


@pytest.mark.parametrize("encoding", [None, "utf-8:strict"])
def test_a_folder_whose_name_is_not_utf8_comes_back_in_valid_json_and_as_given(
    made: tuple[Path, str], tmp_path: Path, encoding: str | None
) -> None:
    """`export` to (and `init` in) a folder whose name is not UTF-8 wrote
    the byte itself into `--json` output, which is then not UTF-8 and no
    JSON reader takes; on a strict UTF-8 output (PYTHONIOENCODING=utf-8, a
    UTF-8 locale such as en_US.UTF-8) the command did its work, then said
    `unexpected UnicodeEncodeError ...; run `vaultmem verify`` with exit 2."""
    path, key = made
    env = clean_env(key)
    if encoding is not None:
        env["PYTHONIOENCODING"] = encoding
    folder = tmp_path / f"plain{NOT_UTF8}"
    for args, field in [
        (("--vault", str(path), "export", str(folder), "--json"), "folder"),
        (("--vault", str(tmp_path / f"new{NOT_UTF8}.vault"), "init", "--json"), "vault"),
    ]:
        result = subprocess.run(vaultmem(*args), capture_output=True, env=env, check=False, timeout=60)
        assert (result.returncode, result.stderr) == (0, b""), result.stderr
        data = json.loads(result.stdout.decode("utf-8"))  # strict UTF-8: what any JSON reader wants
        assert os.path.exists(data[field]), data  # the escape reads back as the folder's real name
    again = tmp_path / f"again{NOT_UTF8}"
    result = subprocess.run(
        vaultmem("--vault", str(path), "export", str(again)), capture_output=True, env=env, check=False, timeout=60
    )
    assert (result.returncode, result.stderr) == (0, b""), result.stderr
    assert os.fsencode(str(again)) + b"/memories." in result.stdout  # the name as the shell gave it


# -- the key ---------------------------------------------------------------------------


def test_an_empty_key_file_option_is_refused_not_replaced_by_another_key(made: tuple[Path, str]) -> None:
    """`--key-file "$KEY_FILE"` with the variable unset used to be ignored:
    the command went on with VAULTMEM_KEY (or a prompt) instead, and a write
    given `--signing-key ""` was made unsigned."""
    path, key = made
    refs, config = git(path, "for-each-ref"), (path / "config").read_bytes()
    create = json.dumps({"command": "create", "path": "/memories/signed.txt", "file_text": "x\n"})
    for option in ("--key-file", "--passphrase-file", "--signing-key", "--signing-passphrase-file"):
        for args in ((option, "", "ls"), ("ls", option, ""), ("call", create, option, "")):
            result = run("--vault", str(path), *args, key=key)
            assert result.returncode == 2, (args, result.stdout)
            assert result.stderr == f"vaultmem: {option} was given an empty path; give the file's path.\n"
            assert result.stdout == ""
    setup = run("--vault", str(path), "git-setup", "--key-file", "", key=key)
    assert setup.returncode == 2 and "--key-file was given an empty path" in setup.stderr
    assert git(path, "for-each-ref") == refs
    assert (path / "config").read_bytes() == config


# A child on a terminal of its own (a pseudo-terminal, its controlling one, as a
# shell gives it): its output is printed back, and Ctrl-D answers a prompt.
AT_A_TERMINAL = r"""
import os, pty, select, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
out, answered, deadline = b"", False, time.monotonic() + 60
while time.monotonic() < deadline:
    if select.select([fd], [], [], 0.1)[0]:
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        out += data
        if b"assphrase" in out and not answered:
            os.write(fd, b"\x04")
            answered = True
_, status = os.waitpid(pid, 0)
sys.stdout.write(out.decode("utf-8", "replace"))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def at_a_terminal(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", AT_A_TERMINAL, *vaultmem(*args)],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
        timeout=90,
    )


def test_a_mistyped_vault_is_named_before_a_passphrase_is_asked_for(made: tuple[Path, str], tmp_path: Path) -> None:
    """At a terminal with no key given, `vaultmem --vault agnet.vault ls`
    used to ask `Passphrase for agnet.vault:` and say the folder is not a
    vault only after the passphrase was typed; `init` in a folder that is
    not empty asked for a new passphrase twice first."""
    path, _ = made
    git_repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(git_repo)], check=True)
    for args, says in [
        (("--vault", str(tmp_path / "agnet.vault"), "ls"), "agnet.vault is not a vault: no such folder"),
        (("--vault", str(git_repo), "ls"), "repo is not a vault (a git repository without a vaultmem keyring)"),
        (("--vault", str(tmp_path / "agnet.vault"), "--passphrase", "ls"), "agnet.vault is not a vault"),
        (("--vault", str(path), "--passphrase", "init"), "exists and is not an empty folder"),
        (("--vault", str(tmp_path), "init"), "exists and is not an empty folder"),
    ]:
        result = at_a_terminal(*args)
        assert result.returncode == 2, (args, result.stdout)
        assert "assphrase for" not in result.stdout, (args, result.stdout)
        assert says in result.stdout, (args, result.stdout)
    # A vault a passphrase opens is still asked for one; Ctrl-D leaves the message on a line of its own.
    protected = tmp_path / "pass.vault"
    Vault.init(protected, passphrase="correct horse battery staple").close()
    asked = at_a_terminal("--vault", str(protected), "ls")
    assert asked.returncode == 2
    assert re.search(r"Passphrase for \S*pass\.vault: \r?\nvaultmem: no passphrase given\.", asked.stdout), asked.stdout


# -- narrow terminals --------------------------------------------------------------------


def _terminal(columns: int) -> tuple[int, int]:
    """A pseudo-terminal ``columns`` wide: (controller, terminal) descriptors."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    return controller, terminal


def _read_all(controller: int, until: Callable[[], bool]) -> bytes:
    data = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([controller], [], [], 0.05)
        if ready:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal side closed
                break
            if not chunk:
                break
            data += chunk
        elif until():
            break
    return data


def _drawn_lines(data: bytes) -> list[str]:
    """Every line as the terminal draws it: each ``\\r`` starts one again."""
    return [part for part in re.split(r"[\r\n]", data.decode("utf-8", "replace")) if part]


@pytest.mark.parametrize("columns", [25, 12, 4])
def test_the_progress_bar_never_wraps_on_a_narrow_terminal(made: tuple[Path, str], columns: int) -> None:
    """On a terminal narrower than the bar (41 columns for `verify [...] 2/3`)
    each redraw used to wrap onto a new line, filling the screen with bars."""
    path, key = made
    controller, terminal = _terminal(columns)
    try:
        child = subprocess.Popen(
            vaultmem("--vault", str(path), "verify"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=terminal,
            env={**clean_env(key), "TERM": "xterm"},
        )
        os.close(terminal)
        drawn = _read_all(controller, lambda: child.poll() is not None)
        out, _ = child.communicate(timeout=60)
    finally:
        os.close(controller)
    assert child.returncode == 0, out
    lines = _drawn_lines(drawn)
    assert all(len(line) < columns for line in lines), lines
    if columns >= 12:
        assert any(re.fullmatch(r"verify (\[#* *\] )?\d/3", line) for line in lines), lines
    assert b"no problems found" in out


def test_the_bar_fits_the_columns_it_is_given() -> None:
    assert render("verify", 2, 4, columns=80) == "verify [" + "#" * 15 + " " * 15 + "] 2/4"
    assert render("verify", 2, 4, columns=25) == "verify [#####      ] 2/4"  # 24 characters
    assert render("verify", 2, 4, columns=16) == "verify 2/4"
    assert render("verify", 2, 4, columns=3) == "ve"
    assert render("verify", 2, 4) == render("verify", 2, 4, columns=None)  # no terminal width: as before


def test_the_spinner_never_wraps_on_a_narrow_terminal() -> None:
    controller, terminal = _terminal(10)
    try:
        with os.fdopen(terminal, "w", encoding="utf-8") as stream:
            with Spinner("waiting for Claude", stream=stream, interval=0.01) as spinner:
                deadline = time.monotonic() + 10
                while spinner.frames < 5 and time.monotonic() < deadline:
                    time.sleep(0.01)
            assert spinner.frames >= 5
            with ProgressBar("re-encrypt", stream=stream) as bar:
                for done in range(1, 4):
                    bar(done, 3)
        drawn = _read_all(controller, lambda: True)
    finally:
        os.close(controller)
    lines = _drawn_lines(drawn)
    assert lines and all(len(line) < 10 for line in lines), lines
    assert "| waiting" in lines


def test_retention_without_a_policy_names_its_own_option(made: tuple[Path, str]) -> None:
    """It used to end with the library's `or give keep_for.`: no option of the command."""
    path, key = made
    refs = git(path, "for-each-ref")
    for args in (("retention",), ("retention", "--dry-run")):
        result = run("--vault", str(path), *args, key=key)
        assert result.returncode == 2
        assert result.stderr.endswith("or give --keep-for AGE.\n"), result.stderr
        assert "keep_for" not in result.stderr
    assert git(path, "for-each-ref") == refs
