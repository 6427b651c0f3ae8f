"""History, restore and moving memories in and out, as operators meet them
beside stock git: folders an import cannot read (a file or folder without
read permission, a folder nested thousands deep), exports to folders that
cannot be written, that loop back on themselves or that need more folders
than a process may hold open, an export of erased content, `show` and `diff`
of changes difflib alone takes minutes over, times given by ISO week or as
the last month there is, and find patterns that match empty text."""

from __future__ import annotations

import difflib
import itertools
import json
import os
import shutil
import string
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest
from conftest import FakeClock, commit_count

from vaultmem import Vault, VaultError
from vaultmem.cli.app import main
from vaultmem.errors import ConflictError, ErasedError, StorageError
from vaultmem.ops.diff import FileChange, unified

NOTHING_IMPORTED = "Nothing was imported."


@pytest.fixture
def cli_run(
    vault_path: Path, key: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str, str]]:
    """``cli_run("log")`` runs ``vaultmem --vault VAULT log`` in-process: (exit code, stdout, stderr)."""
    for name in list(os.environ):
        if name.startswith("VAULTMEM_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("VAULTMEM_KEY", key)

    def run(*args: str) -> tuple[int, str, str]:
        code = main(["--vault", str(vault_path), *args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


# Runs one import or export in a real process that the file permissions
# apply to: as root, with the capabilities that bypass them dropped.
_CHILD = """
import json, sys
from vaultmem import Vault, VaultError
vault = Vault.open(sys.argv[1], key=sys.argv[2])
try:
    if sys.argv[3] == "import":
        vault.import_folder(sys.argv[4])
    else:
        vault.export_folder(sys.argv[4])
    print(json.dumps({"ok": True}))
except VaultError as err:
    print(json.dumps({"ok": False, "type": type(err).__name__, "message": str(err)}))
"""


def _as_a_user(vault_path: Path, key: str, *args: str) -> dict[str, object]:
    """The outcome of ``vault.import_folder``/``export_folder`` run where
    permissions bind: (the type and message of a VaultError, or ok).  Any
    other exception is a traceback and a failed run."""
    command = [sys.executable, "-c", _CHILD, str(vault_path), key, *args]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: permissions do not bind")
        caps = "-dac_override,-dac_read_search"
        command = [setpriv, f"--bounding-set={caps}", f"--inh-caps={caps}", *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def _owned_by_nobody(path: Path) -> None:
    """As root, a file of another user: dropping the capabilities makes its mode bind."""
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# -- import: what the folder does not let it read --------------------------------


@pytest.mark.parametrize("unreadable", ["file", "folder"])
def test_an_unreadable_entry_is_refused_as_a_vault_error_naming_it(
    vault: Vault, vault_path: Path, key: str, tmp_path: Path, unreadable: str
) -> None:
    root = tmp_path / "memory" / "memories"
    _write(root / "good.txt", "fine\n")
    if unreadable == "file":
        locked = _write(root / "secret.txt", "cannot read this\n")
    else:
        locked = root / "private"
        _write(locked / "inner.txt", "cannot list this\n")
    _owned_by_nobody(locked)
    locked.chmod(0)
    try:
        result = _as_a_user(vault_path, key, "import", str(root.parent))
    finally:
        locked.chmod(0o700)
    assert result["ok"] is False
    assert result["type"] == "VaultError"
    assert result["message"] == (
        f"Error: cannot import {locked.name!r}: it cannot be read (permission denied). {NOTHING_IMPORTED}"
    )
    assert commit_count(vault_path) == 0


def test_an_unreadable_memories_folder_is_refused_naming_it(
    vault: Vault, vault_path: Path, key: str, tmp_path: Path
) -> None:
    root = tmp_path / "memory" / "memories"
    _write(root / "good.txt", "fine\n")
    _owned_by_nobody(root)
    root.chmod(0)
    try:
        result = _as_a_user(vault_path, key, "import", str(root.parent))
    finally:
        root.chmod(0o700)
    assert result == {
        "ok": False,
        "type": "VaultError",
        "message": f"Error: cannot import from {str(root)!r}: it cannot be read (permission denied). "
        + NOTHING_IMPORTED,
    }
    assert commit_count(vault_path) == 0


def _chain(root: Path, depth: int) -> None:
    """``root/a/a/.../a``, ``depth`` folders deep, made through descriptors
    (the path is longer than a system call takes)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("a", dir_fd=fd)
            deeper = os.open("a", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = deeper
    finally:
        os.close(fd)


def _remove_chain(root: Path, depth: int) -> None:
    """Remove what :func:`_chain` made, deepest first (``shutil.rmtree``
    recurses once per level, and would stop at Python's recursion limit)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for level in range(depth, 0, -1):
            above = os.open("/".join(["a"] * (level - 1)) or ".", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            try:
                os.rmdir("a", dir_fd=above)
            finally:
                os.close(above)
    finally:
        os.close(fd)


def test_a_folder_nested_deeper_than_any_memory_path_is_refused_not_a_recursion_error(
    vault: Vault, vault_path: Path, tmp_path: Path
) -> None:
    root = tmp_path / "memory" / "memories"
    _write(root / "good.txt", "fine\n")
    depth = 1200  # "/memories/a/a/...": 2,410 bytes, over the 1,024 a memory path may take
    _chain(root, depth)
    try:
        with pytest.raises(VaultError) as info:
            vault.import_folder(root.parent)
    finally:
        _remove_chain(root, depth)
    deepest = "/".join(["a"] * 508)  # the first folder whose path is over the limit
    assert str(info.value) == (
        f"Error: cannot import {deepest!r}: it is not a valid memory path (the path is longer than 1,024 bytes). "
        + NOTHING_IMPORTED
    )
    assert type(info.value) is VaultError
    assert commit_count(vault_path) == 0


def test_the_deepest_folder_a_memory_path_can_name_is_imported(vault: Vault, tmp_path: Path) -> None:
    root = tmp_path / "memory" / "memories"
    root.mkdir(parents=True)
    depth = 506  # "/memories/" + "a/" * 506 + "f": 1,023 bytes
    _chain(root, depth)
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            below = os.open("/".join(["a"] * depth), os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        finally:
            os.close(fd)
        try:
            out = os.open("f", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=below)
            os.write(out, b"deep\n")
            os.close(out)
            result = vault.import_folder(root.parent)
            os.unlink("f", dir_fd=below)
        finally:
            os.close(below)
    finally:
        _remove_chain(root, depth)
    assert result.files == 1
    assert vault.read("/memories/" + "a/" * depth + "f") == "deep\n"


# -- export: folders it cannot write ------------------------------------------------


@pytest.mark.parametrize("target", ["inside", "below"])
def test_an_export_to_a_read_only_folder_is_a_storage_error_naming_the_folder_asked_for(
    vault: Vault, vault_path: Path, key: str, call: Callable[..., str], tmp_path: Path, target: str
) -> None:
    call(command="create", path="/memories/notes.txt", file_text="plaintext once exported\n")
    locked = tmp_path / "locked"
    locked.mkdir()
    _owned_by_nobody(locked)
    locked.chmod(0o555)
    folder = locked if target == "inside" else locked / "new"
    try:
        result = _as_a_user(vault_path, key, "export", str(folder))
    finally:
        locked.chmod(0o700)
    assert result["ok"] is False
    assert result["type"] == "StorageError"
    named = folder / "memories" if target == "inside" else folder
    verb = "export to" if target == "inside" else "create"
    assert result["message"] == (
        f"Error: cannot {verb} {str(named)!r}: its folder is not writable (permission denied); nothing was written."
    )
    assert os.listdir(locked) == []
    assert issubclass(StorageError, VaultError)


def test_an_export_through_a_symlink_loop_is_refused_in_the_cli_words(
    vault: Vault,
    vault_path: Path,
    key: str,
    call: Callable[..., str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    call(command="create", path="/memories/notes.txt", file_text="x\n")
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(ConflictError) as info:
        vault.export_folder(loop / "out")
    assert str(info.value) == (
        f"Error: cannot export to {str(loop / 'out' / 'memories')!r}: a symbolic link on the way points back to itself."
    )
    monkeypatch.setenv("VAULTMEM_KEY", key)
    assert main(["--vault", str(vault_path), "export", str(loop)]) == 2
    err = capsys.readouterr().err
    assert "points back to itself" in err
    assert "unexpected" not in err and "verify" not in err


# -- show and diff: a change difflib alone compares line by line with every other --------


def _interleaved() -> tuple[str, str]:
    """Two 100 KB texts of short unique lines, the second keeping every other
    line of the first and putting a new one between: difflib's worst case
    (each match is one line long), a minute for one file."""
    names = ["".join(p) + "\n" for p in itertools.product(string.ascii_letters + string.digits, repeat=3)]
    count = 12_800
    old = "".join(names[: 2 * count])[:102_400]
    new = "".join(line for pair in zip(names[:count], names[2 * count : 3 * count], strict=True) for line in pair)[
        :102_400
    ]
    return old, new


def _patched(old: list[str], diff: list[str]) -> list[str]:
    """What applying a one-file unified diff to ``old`` gives (every context
    and removed line checked against ``old``)."""
    out: list[str] = []
    at = 0
    for line in diff[2:]:
        if line.startswith("@@"):
            start, _, length = line.split()[1][1:].partition(",")
            begin = int(start) - (1 if length != "0" else 0)
            out += old[at:begin]
            at = begin
        elif line[0] in " -":
            assert old[at] == line[1:]
            if line[0] == " ":
                out.append(line[1:])
            at += 1
        else:
            assert line[0] == "+"
            out.append(line[1:])
    return out + old[at:]


def test_show_and_diff_of_a_large_interleaving_change_take_a_second_not_a_minute(
    vault: Vault, vault_path: Path, key: str, call: Callable[..., str]
) -> None:
    old, new = _interleaved()
    call(command="create", path="/memories/list.txt", file_text=old)
    call(command="str_replace", path="/memories/list.txt", old_str=old, new_str=new)
    env = {**os.environ, "VAULTMEM_KEY": key, "NO_COLOR": "1"}
    for args in (["show", "main"], ["diff", "main~1", "main"]):
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "vaultmem", "--vault", str(vault_path), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        )
        took = time.monotonic() - started
        assert done.returncode == 0, done.stderr
        assert took < 15, f"{args[0]} took {took:.1f} s"
        diff = done.stdout[done.stdout.index("--- a/memories/list.txt") :].splitlines(keepends=True)
        assert diff[1] == "+++ b/memories/list.txt\n"
        assert "".join(_patched(old.splitlines(keepends=True), diff)) == new


def test_a_large_diff_is_a_correct_diff_and_a_small_one_is_difflibs(vault: Vault, call: Callable[..., str]) -> None:
    old, new = _interleaved()
    call(command="create", path="/memories/list.txt", file_text=old)
    call(command="str_replace", path="/memories/list.txt", old_str=old, new_str=new)
    started = time.monotonic()
    text = vault.diff("main~1", "main")
    assert time.monotonic() - started < 10
    lines = text.splitlines(keepends=True)
    assert "".join(_patched(old.splitlines(keepends=True), lines)) == new
    kept = sum(1 for line in lines if line.startswith(" "))
    removed = sum(1 for line in lines if line.startswith("-") and not line.startswith("---"))
    assert removed == len(old.splitlines()) - 12_800 and kept > 0  # every kept line matched, none re-added

    before = "".join(f"line {n}\n" for n in range(40))
    after = before.replace("line 7\n", "line seven\n").replace("line 30\n", "")
    expected = "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True), "a/memories/x", "b/memories/x"
        )
    )
    assert unified([FileChange("/memories/x", "modified", before, after)]) == expected


# -- times an auditor types -----------------------------------------------------------


def _day_of_versions(vault: Vault, call: Callable[..., str], clock: FakeClock) -> list[str]:
    """Versions on Friday 2026-11-27 (ISO week 48, day 5) at 00:00, 12:00 and
    23:59:59 UTC, and one the next morning; their ids, oldest first."""
    ids = []
    for n, moment in enumerate(
        ("2026-11-27T00:00:00", "2026-11-27T12:00:00", "2026-11-27T23:59:59", "2026-11-28T08:00")
    ):
        clock.now = datetime.fromisoformat(moment).replace(tzinfo=timezone.utc).timestamp()
        call(command="create", path=f"/memories/v{n}.txt", file_text="x\n")
        ids.append(vault.history(limit=1)[0].id)
    return ids


def test_until_an_iso_week_date_keeps_that_whole_day_and_a_week_that_whole_week(
    vault: Vault, call: Callable[..., str], clock: FakeClock
) -> None:
    ids = _day_of_versions(vault, call, clock)
    on_friday = ids[2::-1]
    assert [v.id for v in vault.history(until="2026-11-27")] == on_friday
    assert [v.id for v in vault.history(until="2026-W48-5")] == on_friday  # the same day, by week
    assert [v.id for v in vault.history(until="2026W485")] == on_friday
    assert [v.id for v in vault.history(since="2026-W48-5", until="2026-W48-5")] == on_friday
    assert [v.id for v in vault.history(until="2026-W48")] == ids[::-1]  # Monday 23 to Sunday 29
    assert [v.id for v in vault.history(until="2026-W47")] == []
    assert [v.id for v in vault.history(until="2026-11-27T12:00")] == ids[1::-1]  # a time is that moment


def test_until_the_last_month_there_is_reads_as_its_end_not_an_overflow(
    vault: Vault, call: Callable[..., str], clock: FakeClock, cli_run: Callable[..., tuple[int, str, str]]
) -> None:
    ids = _day_of_versions(vault, call, clock)
    assert [v.id for v in vault.history(until="December 9999")] == ids[::-1]
    assert [v.id for v in vault.history(until="9999-W52")] == ids[::-1]
    assert [v.id for v in vault.history(since="December 9999")] == []
    code, out, err = cli_run("log", "--until", "December 9999")
    assert (code, err) == (0, "")
    assert len(out.splitlines()) == 4


# -- export: a memory of many folders -------------------------------------------------


def test_an_export_of_more_folders_than_open_files_allowed_writes_them_all(
    vault: Vault, vault_path: Path, key: str, tmp_path: Path
) -> None:
    source = tmp_path / "memory" / "memories"
    for n in range(400):
        _write(source / "customers" / f"c{n:03d}" / "notes.md", f"customer {n}\n")
    _write(source / "readme.md", "top\n")
    assert vault.import_folder(source.parent).files == 401
    out = tmp_path / "out"
    # The process may hold 256 files open (a default of 1,024 is as easily reached with a larger memory).
    limited = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))\n"
        "from vaultmem.cli.app import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", limited, "--vault", str(vault_path), "export", str(out), "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "VAULTMEM_KEY": key},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["files"] == 401
    written = sorted(p.relative_to(out / "memories").as_posix() for p in (out / "memories").rglob("*") if p.is_file())
    assert len(written) == 401
    assert (out / "memories" / "customers" / "c399" / "notes.md").read_text() == "customer 399\n"
    assert (out / "memories" / "readme.md").read_text() == "top\n"


def test_cli_import_of_a_memories_folder_names_that_folder(
    vault: Vault, tmp_path: Path, cli_run: Callable[..., tuple[int, str, str]]
) -> None:
    root = tmp_path / "memory" / "memories"
    _write(root / "notes.md", "kept\n")
    code, out, err = cli_run("import", str(root))
    assert (code, err) == (0, "")
    assert out.startswith(f"Imported 1 file (5 bytes) from {root} as version "), out
    (tmp_path / "empty" / "memories").mkdir(parents=True)
    code, out, err = cli_run("import", str(tmp_path / "empty" / "memories"))
    assert (code, out, err) == (0, f"Nothing to import: {tmp_path / 'empty' / 'memories'} holds no files.\n", "")


# -- find: a regular expression that matches no text --------------------------------------


@pytest.mark.parametrize("pattern", ["ada|", "(ada)?", r"\s*", "x*"])
def test_a_regular_expression_matching_empty_text_is_refused_and_erases_nothing(
    vault: Vault, vault_path: Path, call: Callable[..., str], pattern: str
) -> None:
    call(command="create", path="/memories/customers/ada.md", file_text="Ada Lovelace, prefers e-mail.\n")
    call(command="create", path="/memories/policies/refunds.md", file_text="Refund at once.\n")
    commits = commit_count(vault_path)
    with pytest.raises(VaultError) as found:
        vault.find(pattern, regex=True)
    assert str(found.value) == (
        f"Error: the regular expression {pattern!r} matches empty text, so it would match every file "
        "(and an erasure by it would erase them all). Give one that needs at least one character."
    )
    with pytest.raises(VaultError):
        vault.forget_matching(pattern, regex=True, reason="typo")
    assert commit_count(vault_path) == commits
    assert vault.read("/memories/policies/refunds.md") == "Refund at once.\n"
    assert [m.path for m in vault.find("ada", regex=True, ignore_case=True)] == ["/memories/customers/ada.md"]


def test_a_match_of_no_characters_is_no_finding(vault: Vault, call: Callable[..., str]) -> None:
    call(command="create", path="/memories/customers/ada.md", file_text="Ada Lovelace\n")
    call(command="create", path="/memories/notes.md", file_text="refunds\n")
    assert vault.find(r"\b", regex=True) == []  # word boundaries are everywhere, yet hold no text
    assert vault.find("(?=Ada)", regex=True) == []
    (only,) = vault.find(r"\bAda\b", regex=True)
    assert (only.path, only.count, only.in_name) == ("/memories/customers/ada.md", 1, False)


def test_an_export_of_a_version_holding_erased_content_says_so_and_writes_nothing(
    vault: Vault, call: Callable[..., str], tmp_path: Path
) -> None:
    call(command="create", path="/memories/customers/ada.md", file_text="Ada Lovelace\n")
    call(command="create", path="/memories/readme.md", file_text="kept\n")
    before = vault.history(limit=1)[0].id
    vault.forget("/memories/customers/ada.md", reason="GDPR request 4411", actor="ops")
    out = tmp_path / "out"
    with pytest.raises(ErasedError) as info:
        vault.export_folder(out, at=before)
    message = str(info.value)
    assert message.startswith("Error: cannot export: this version of /memories/customers/ada.md was erased on "), (
        message
    )
    assert message.endswith(
        "(GDPR request 4411); its content is gone. Nothing was written; export a version from after the erasure."
    )
    assert info.value.commit == vault.history(limit=1)[0].id
    assert not out.exists()
    assert vault.export_folder(out).files == 1  # now: the erased file is gone from the memory
