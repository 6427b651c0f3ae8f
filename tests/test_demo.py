"""`vaultmem demo`: an offline agent session against a real vault, Claude's turns replayed.

The demo runs the real SDK client and tool runner against a local
:class:`~vaultmem.replay.ReplayServer`; these tests check what it prints, what
it leaves behind (the kept vault, its key, its history, nothing in plaintext)
and what it refuses.  Most run ``vaultmem.cli.app`` in-process; one runs
``python -m vaultmem demo`` as a real process with no keys in its environment.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import stat
import subprocess
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import commit_count, git

from vaultmem import Vault
from vaultmem.cli import demo
from vaultmem.cli.app import main

FINAL_CUSTOMER = "<customer>\n<name>Ada Lovelace</name>\n<contact>e-mail only, mornings</contact>\n</customer>\n"
SECRET_NEEDLES = [
    "Always address customers by their first name",
    "Use empathetic language",
    "Record each customer's contact preferences",
    "Approved refunds reach the customer within 5 business days",
    "Ada Lovelace",
    demo.DRAFT_TEXT,
    "we are sorry your refund is late",
]
HEADER = re.compile(r"vaultmem-blob 2 [0-9a-f]{16} [0-9a-f]{16} \d+")
LOG_ROW = re.compile(r"([0-9a-f]{10})  (\S+Z)  (\S+)\s+(\S+)\s+(\S+)\s+(.+)")

# The kept vault's history, newest first: (command, paths, actor, session).
HISTORY = [
    ("restore", (demo.DRAFT,), demo.OPERATOR, "review"),
    ("delete", (demo.DRAFT,), demo.ACTOR, demo.SESSION),
    ("str_replace", (demo.CUSTOMER,), demo.ACTOR, demo.SESSION),
    ("str_replace", (demo.CUSTOMER,), demo.ACTOR, demo.SESSION),
    ("create", (demo.CUSTOMER,), demo.ACTOR, demo.SESSION),
    ("create", (demo.DRAFT,), demo.ACTOR, "ticket-4411-draft"),
    ("create", (demo.GUIDELINES,), demo.OPERATOR, "onboarding"),
]


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture(autouse=True)
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo needs no key of any kind: none is in the environment."""
    for name in list(os.environ):
        if name.startswith("VAULTMEM_") or name.startswith("ANTHROPIC_"):
            monkeypatch.delenv(name)


def _demo(capsys: pytest.CaptureFixture[str], *args: str) -> Result:
    code = main(["demo", *args])
    out, err = capsys.readouterr()
    return Result(code, out, err)


@pytest.fixture(scope="module")
def kept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Result]:
    """``vaultmem demo TMP/demo.vault`` run once for the tests that only read
    what it printed and left: (the folder, what it printed)."""
    folder = tmp_path_factory.mktemp("kept") / "demo.vault"
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as env:
        for name in list(os.environ):
            if name.startswith(("VAULTMEM_", "ANTHROPIC_")):
                env.delenv(name)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["demo", str(folder)])
    result = Result(code, out.getvalue(), err.getvalue())
    assert result.code == 0, result.err
    return folder, result


def _section(out: str, title: str) -> list[str]:
    """The lines under ``== title ==`` up to the next heading."""
    lines = out.split("\n")
    start = lines.index(f"== {title} ==")
    body = []
    for line in lines[start + 1 :]:
        if line.startswith("== ") and line.endswith(" =="):
            break
        body.append(line)
    return body


def _section_starting(out: str, prefix: str) -> list[str]:
    headings = [line for line in out.split("\n") if line.startswith(f"== {prefix}") and line.endswith(" ==")]
    assert len(headings) == 1, headings
    return _section(out, headings[0][3:-3])


# -- what it prints --------------------------------------------------------------------


def test_demo_says_claudes_turns_are_a_local_replay(kept: tuple[Path, Result]) -> None:
    _, result = kept
    head = result.out.split("== ", 1)[0]
    assert "REPLAY" in head
    assert "127.0.0.1" in head
    assert "no API key or network is needed" in " ".join(head.split())
    assert result.err == ""


def test_demo_prints_the_conversation_with_tool_calls_and_the_failed_call(kept: tuple[Path, Result]) -> None:
    _, result = kept
    lines = _section_starting(result.out, "The conversation")
    assert f"user:   {demo.USER_TURNS[0]}" in lines
    assert f"user:   {demo.USER_TURNS[1]}" in lines
    assert lines.index(f"user:   {demo.USER_TURNS[0]}") < lines.index(f"user:   {demo.USER_TURNS[1]}")
    assert "claude: I'll check my memory for earlier context first." in lines
    assert "claude: There are support guidelines; let me read them." in lines  # the view result listed them
    assert "claude: Wrong name; let me look." in lines  # the tool result carried is_error
    assert lines.count("  -> memory view /memories") == 1
    assert f"  -> memory create {demo.CUSTOMER}" in lines
    assert lines.count(f"  -> memory str_replace {demo.CUSTOMER}") == 2
    assert f"  -> memory delete {demo.DRAFT}" in lines
    failed = lines.index("  -> memory delete /memories/drafts/ticket-4411.txt")
    assert lines[failed + 1 : failed + 3] == [
        "  <- error (is_error: true):",
        "     Error: The path /memories/drafts/ticket-4411.txt does not exist",
    ]
    assert lines.count("  <- error (is_error: true):") == 1
    assert f"     File created successfully at: {demo.CUSTOMER}" in lines
    assert f"     Successfully deleted {demo.DRAFT}" in lines
    assert any(line.startswith("claude: Done: ticket #4411 is closed") for line in lines)
    # A long result is cut after SHOWN_LINES lines.
    assert "     ... (2 more lines)" in lines


def test_demo_prints_the_audit_log_newest_first(kept: tuple[Path, Result]) -> None:
    folder, result = kept
    rows = [line for line in _section_starting(result.out, "The audit log") if line]
    parsed = [LOG_ROW.fullmatch(row) for row in rows]
    assert all(parsed), rows
    shown = [(m[5], (m[6],), m[3], m[4]) for m in parsed if m]
    assert shown == HISTORY[1:]  # the restore comes later in the demo
    with Vault.open(folder, key_file=demo.key_file_for(folder)) as vault:
        ids = [v.id[:10] for v in vault.history()]
    assert [m[1] for m in parsed if m] == ids[1:]


def test_demo_prints_the_sessions_changes_decrypted(kept: tuple[Path, Result]) -> None:
    _, result = kept
    diff = _section_starting(result.out, "What the session changed")
    assert "+++ b/memories/customers/ada_lovelace.xml" in diff
    assert "+<contact>e-mail only, mornings</contact>" in diff
    assert "+<name>Ada Lovelace</name>" in diff
    assert "--- a/memories/drafts/ticket-4411-reply.txt" in diff
    assert "-" + demo.DRAFT_TEXT.rstrip("\n") in diff
    assert not any("open_ticket" in line for line in diff)  # added and removed within the session
    assert not any("guidelines" in line for line in diff)  # filed before the session


def test_demo_shows_the_ciphertext_header_git_stores(kept: tuple[Path, Result]) -> None:
    folder, result = kept
    at_rest = [line for line in _section_starting(result.out, "At rest") if line]
    assert HEADER.fullmatch(at_rest[0]), at_rest
    stored = git(folder, "cat-file", "-p", "main:memories/customers/ada_lovelace.xml")
    assert stored.split("\n", 1)[0] == at_rest[0]
    assert at_rest[0].endswith(f" {len(FINAL_CUSTOMER.encode())}")
    assert at_rest[1].endswith("...") and stored.split("\n", 1)[1].startswith(at_rest[1][:-3])
    # no plaintext: the header, then the token's base64 (where "Ada" may come up by chance, 1 run in about 4,000)
    assert "Ada" not in at_rest[0] and re.fullmatch(r"[A-Za-z0-9_-]{64}\.\.\.", at_rest[1])
    assert not any(line in "\n".join(at_rest) for line in FINAL_CUSTOMER.splitlines() if len(line) > 8)


def test_demo_restores_the_deleted_draft_and_verifies(kept: tuple[Path, Result]) -> None:
    folder, result = kept
    with Vault.open(folder, key_file=demo.key_file_for(folder)) as vault:
        history = vault.history()
    restore = _section_starting(result.out, "The operator brings the deleted draft back")
    assert restore[0] == (f"Restored {demo.DRAFT} as it was at {history[5].id[:10]}: new version {history[0].id[:10]}.")
    assert f"  {demo.DRAFT_TEXT.rstrip()}" in restore
    rows = [LOG_ROW.fullmatch(line) for line in restore if LOG_ROW.fullmatch(line)]
    assert [(m[1], m[5]) for m in rows if m] == [(history[0].id[:10], "restore"), (history[1].id[:10], "delete")]
    verify = [line for line in _section(result.out, "vaultmem verify") if line]
    assert re.fullmatch(r"Checked 7 versions, \d+ file versions and \d+ trees: no problems found\.", verify[0])


def test_demo_with_a_folder_tells_how_to_explore_it(kept: tuple[Path, Result]) -> None:
    folder, result = kept
    key_file = demo.key_file_for(folder)
    assert f"The vault is kept in {folder}, its key in {key_file} (mode 0600)." in result.out
    assert f"  vaultmem --vault {folder} --key-file {key_file} log\n" in result.out
    assert f"Vault: {folder}\n" in result.out


# -- what it leaves behind ------------------------------------------------------------


def test_demo_writes_the_key_beside_the_vault_mode_0600(kept: tuple[Path, Result]) -> None:
    folder, _ = kept
    key_file = folder.parent / "demo.vault.key"
    assert demo.key_file_for(folder) == key_file
    info = key_file.lstat()
    assert stat.S_ISREG(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert key_file.read_text().count("\n") == 1
    assert not (folder / "demo.vault.key").exists()


def test_the_kept_vault_holds_the_sessions_history(kept: tuple[Path, Result]) -> None:
    folder, _ = kept
    with Vault.open(folder, key_file=demo.key_file_for(folder)) as vault:
        history = vault.history()
        assert [(v.command, v.paths, v.actor, v.session) for v in history] == HISTORY
        assert history[0].restored_from == history[5].id  # the draft as the earlier session left it
        assert vault.read(demo.DRAFT) == demo.DRAFT_TEXT
        assert vault.read(demo.CUSTOMER) == FINAL_CUSTOMER
        assert vault.read(demo.GUIDELINES) == demo.GUIDELINES_TEXT
        assert vault.read(demo.CUSTOMER, at=history[4].id) == demo.CUSTOMER_TEXT
        assert vault.verify().ok


def test_the_kept_vault_passes_stock_git_fsck(kept: tuple[Path, Result]) -> None:
    folder, _ = kept
    git(folder, "fsck", "--strict")
    assert len(git(folder, "log", "--format=%H").split()) == 7
    assert commit_count(folder) == 7


def _every_byte_under(folder: Path) -> list[tuple[str, bytes]]:
    """Each file's raw bytes, loose objects also inflated, plus every object's
    content as stock git reads it (packs included)."""
    found = []
    for root, _, files in os.walk(folder):
        for name in files:
            path = Path(root) / name
            data = path.read_bytes()
            found.append((str(path), data))
            with contextlib.suppress(zlib.error):
                found.append((f"{path} (inflated)", zlib.decompress(data)))
    objects = subprocess.run(
        ["git", "-C", str(folder), "cat-file", "--batch-all-objects", "--batch"],
        capture_output=True,
        check=True,
    ).stdout
    found.append(("git cat-file --batch-all-objects", objects))
    return found


def test_the_kept_vault_holds_no_plaintext(kept: tuple[Path, Result]) -> None:
    folder, _ = kept
    everything = _every_byte_under(folder)
    assert len(everything) > 10
    key = demo.key_file_for(folder).read_text().strip()
    for needle in [*SECRET_NEEDLES, key]:
        leaks = [where for where, data in everything if needle.encode() in data]
        assert leaks == [], f"{needle!r} in {leaks}"
    # The check itself would see a plaintext blob: the guidelines' path is in the trees.
    assert any(b"customer_service_guidelines.xml" in data for _, data in everything)


def test_demo_without_a_folder_removes_its_temporary_vault(capsys: pytest.CaptureFixture[str]) -> None:
    result = _demo(capsys)
    assert result.code == 0, result.err
    match = re.search(r"^Vault: (.+) \(temporary, removed at the end\)$", result.out, re.M)
    assert match, result.out
    path = Path(match[1])
    assert path.is_absolute()
    assert path.parent.name.startswith("vaultmem-demo-")
    assert not os.path.lexists(path)
    assert not os.path.lexists(path.parent)
    assert not os.path.lexists(demo.key_file_for(path))
    assert "no problems found." in result.out
    assert "vaultmem demo ./demo.vault" in result.out.rstrip("\n").split("\n")[-1]


# -- what it refuses ------------------------------------------------------------------


def test_demo_refuses_a_folder_whose_key_file_exists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "kept.vault"
    key_file = tmp_path / "kept.vault.key"
    key_file.write_text("my precious key\n")
    key_file.chmod(0o640)
    result = _demo(capsys, str(folder))
    assert result.code == 2
    assert str(key_file) in result.err
    assert result.err.startswith("vaultmem: ") and result.err.count("\n") == 1
    assert result.out == ""
    assert not os.path.lexists(folder)
    assert key_file.read_text() == "my precious key\n"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o640


def test_demo_refuses_a_key_file_that_is_a_dangling_symlink(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "kept.vault"
    target = tmp_path / "elsewhere" / "stolen.key"
    target.parent.mkdir()
    (tmp_path / "kept.vault.key").symlink_to(target)
    result = _demo(capsys, str(folder))
    assert result.code == 2
    assert "kept.vault.key" in result.err
    assert not os.path.lexists(target)
    assert not os.path.lexists(folder)


def test_demo_refuses_a_folder_that_is_not_empty(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "busy"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    result = _demo(capsys, str(folder))
    assert result.code == 2
    assert result.err.startswith("vaultmem: ")
    assert "Traceback" not in result.err
    assert not os.path.lexists(tmp_path / "busy.key")
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]
    assert (folder / "notes.txt").read_text() == "mine\n"


def test_demo_in_the_current_folder_keeps_its_key_outside_or_refuses_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    result = _demo(capsys, ".")
    assert "unexpected" not in result.err, result.err
    assert "Traceback" not in result.err
    if result.code == 0:
        key_file = tmp_path / "here.key"  # beside the vault, never inside it
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        assert not any(p.name.endswith(".key") for p in here.iterdir())
        with Vault.open(here, key_file=key_file) as vault:
            assert vault.read(demo.DRAFT) == demo.DRAFT_TEXT
    else:
        assert result.code == 2
        assert list(here.iterdir()) == []
        assert list(tmp_path.iterdir()) == [here]


def test_demo_runs_as_a_process_with_no_key_and_no_network(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VAULTMEM_", "ANTHROPIC_"))}
    env = {k: v for k, v in env.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")}
    # Anything but the local replay server would go to a proxy that is not there.
    env.update(HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9", ALL_PROXY="http://127.0.0.1:9")
    env["NO_PROXY"] = "127.0.0.1,localhost"
    folder = tmp_path / "proc.vault"
    result = subprocess.run(
        [sys.executable, "-m", "vaultmem", "demo", str(folder)],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "no problems found." in result.stdout
    assert commit_count(folder) == 7
    key = demo.key_file_for(folder).read_text().strip()
    with Vault.open(folder, key=key) as vault:
        assert vault.read(demo.CUSTOMER) == FINAL_CUSTOMER


# -- the example vault of docs/audit.md ----------------------------------------------


def test_demo_example_builds_the_audit_guides_vault_with_a_private_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--example", str(tmp_path / "here")]) == 0
    out = capsys.readouterr().out
    vault_path, key_path = tmp_path / "here" / "support.vault", tmp_path / "here" / "support.vault.key"
    assert f"export VAULTMEM_KEY=$(cat {key_path.name})" in out
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    with Vault.open(vault_path, key_file=key_path) as vault:
        versions = vault.history()
        assert len(versions) == 9
        assert {v.session for v in versions} == {f"sess-010{n}" for n in range(1, 6)}
        assert "mallory@example.net" in vault.read("/memories/notes/override.md")
    assert commit_count(vault_path) == 9


def test_demo_example_never_builds_over_anything(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--example", str(tmp_path)]) == 0
    key_before = (tmp_path / "support.vault.key").read_text()
    head_before = git(tmp_path / "support.vault", "rev-parse", "main")
    capsys.readouterr()
    assert main(["demo", "--example", str(tmp_path)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert (tmp_path / "support.vault.key").read_text() == key_before
    assert git(tmp_path / "support.vault", "rev-parse", "main") == head_before
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "support.vault.key").write_text("mine\n")
    assert main(["demo", "--example", str(tmp_path / "other")]) == 2
    assert (tmp_path / "other" / "support.vault.key").read_text() == "mine\n"
    assert not (tmp_path / "other" / "support.vault").exists()
