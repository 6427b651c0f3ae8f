"""Hostile paths through every command and every path parameter: refused, nothing changed, nothing leaked."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import unicodedata
from itertools import product
from pathlib import Path

import pytest
from anthropic.lib.tools import ToolError
from conftest import FakeClock, commit_count, git

import vaultmem
from vaultmem import Vault, VaultMemoryTool, generate_key

SEGMENT_256 = "/memories/" + "a" * 256
PATH_1025 = "/memories/" + "/".join(["a" * 200] * 5) + "/" + "b" * 10
assert len(PATH_1025.encode()) == 1025

PAYLOADS: list[object] = [
    # traversal
    "../",
    "..\\",
    "../memories/notes.txt",
    "/memories/../x",
    "/memories/a/../../etc",
    "/memories/..",
    "/memories/../memories/notes.txt",
    "/memories/projects/../notes.txt",
    "/memories/projects/../../../../etc/passwd",
    # percent-encoded traversal: every case of %2e%2e%2f
    *[f"/memories/%2{a}%2{b}%2{c}etc" for a, b, c in product("eE", "eE", "fF")],
    "/memories/%2e%2e/x",
    "/memories/a%2fb",
    "/memories/%2e",
    # decoded twice
    "/memories/%252e%252e%252fetc",
    "/memories/%252E%252E%252F",
    "/memories/%25252e%252e%2f",
    # encoded backslash
    "/memories/..%5cx",
    "/memories/a%5Cb",
    "/memories/a%255cb",
    # control and invisible characters
    "/memories/a\x00b",
    "/memories/notes.txt\x00.md",
    "\x00/memories/a",
    "/memories/a\x01",
    "/memories/\x7f",
    "/memories/a\nb",
    "/memories/a\rb",
    "/memories/\x1b[31mred",
    "/memories/a\u200bb",
    "/memories/\u202etxt.exe",
    "/memories/\ufeffnotes.txt",
    "/memories/a\u2066",
    # characters that end a line: a path is one line in every log and trailer
    "/memories/a\u2028b",
    "/memories/notes.txt\u2029",
    "/memories/\u2028/notes.txt",
    "/memories/projects\u2029/alpha.md",
    "/memories/a%E2%80%A8b",
    "/memories/a\x85b",
    "/memories/\x85",
    # not under /memories
    "/memoriesX",
    "/memoriesX/a",
    "/memories2/a",
    "/memories.txt",
    "memories/a",
    "memories",
    "./memories/a",
    "/etc/passwd",
    "",
    "/",
    "//memories",
    "//memories/a",
    "/MEMORIES/a",
    "/Memories/notes.txt",
    "~/x",
    "~",
    " /memories/notes.txt",
    "C:\\memories",
    "C:\\memories\\notes.txt",
    "\\memories\\notes.txt",
    "\\\\server\\share\\x",
    "file:///memories/notes.txt",
    "file:///etc/passwd",
    # empty segments and dot segments
    "/memories//a",
    "/memories//",
    "/memories/a//",
    "/memories/./a",
    "/memories/a/.",
    "/memories/.",
    # backslash inside
    "/memories\\notes.txt",
    "/memories/projects\\alpha.md",
    # lengths
    SEGMENT_256,
    "/memories/" + "é" * 128,
    PATH_1025,
    # git's own names
    "/memories/.git/x",
    "/memories/.git",
    "/memories/.GIT/config",
    # not valid Unicode text
    "/memories/a\ud800",
    # not strings
    None,
    123,
    ["/memories"],
    {"path": "/memories"},
    b"/memories/notes.txt",
    True,
    1.5,
]

assert len(PAYLOADS) >= 45


def _id(value: object) -> str:
    shown = ascii(value)
    return shown if len(shown) <= 40 else shown[:30] + f"...({len(shown)})"


IDS = [_id(p) for p in PAYLOADS]
# For history() and restore(), path=None means "everything", so None is no hostile path there.
STRING_ISH = [p for p in PAYLOADS if p is not None]
STRING_ISH_IDS = [_id(p) for p in STRING_ISH]
SEED = {
    "/memories/notes.txt": "first line\nsecond line\n",
    "/memories/projects/alpha.md": "# Alpha\nstatus: open\n",
    "/memories/projects/deep/x.txt": "x\n",
    "/memories/.hidden/secret.txt": "hidden\n",
}


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    """One vault that already holds files; every hostile call must leave it as it is."""
    home = tmp_path_factory.mktemp("hostile")
    vault_path = home / "agent.vault"
    vault = Vault.init(vault_path, key=generate_key(), clock=FakeClock())
    tool = VaultMemoryTool(vault, actor="support-bot", session="sess-42")
    for path, content in SEED.items():
        tool.call({"command": "create", "path": path, "file_text": content})
    vault.close()  # the upkeep after the seeding is done: from here on only the hostile calls could change files
    return home, vault_path, vault, tool


def _disk(home) -> list[tuple[str, int]]:
    return sorted(
        (os.path.relpath(os.path.join(root, name), home), os.path.getsize(os.path.join(root, name)))
        for root, _, names in os.walk(home)
        for name in names
    )


def _state(vault_path, vault) -> tuple:
    head = git(vault_path, "rev-parse", "refs/heads/main").strip()
    names = [n for n in git(vault_path, "ls-tree", "-r", "-z", "--name-only", head).split("\0") if n]
    files = {"/" + n: vault.read("/" + n) for n in names}
    refs = git(vault_path, "for-each-ref", "--format=%(refname) %(objectname)")
    return commit_count(vault_path), head, refs, files


def _calls(payload: object) -> dict[str, dict[str, object]]:
    return {
        "view.path": {"command": "view", "path": payload},
        "create.path": {"command": "create", "path": payload, "file_text": "planted\n"},
        "str_replace.path": {"command": "str_replace", "path": payload, "old_str": "first", "new_str": "planted"},
        "insert.path": {"command": "insert", "path": payload, "insert_line": 0, "insert_text": "planted"},
        "delete.path": {"command": "delete", "path": payload},
        "rename.old_path": {"command": "rename", "old_path": payload, "new_path": "/memories/free.txt"},
        "rename.new_path": {"command": "rename", "old_path": "/memories/notes.txt", "new_path": payload},
    }


SLOTS = list(_calls("x"))


def _host_strings(home) -> list[str]:
    return [
        str(home),
        str(home.parent),
        os.path.realpath(home),
        tempfile.gettempdir().rstrip("/") + "/",
        os.path.expanduser("~").rstrip("/") + "/",
        os.getcwd(),
    ]


@pytest.mark.parametrize("slot", SLOTS)
@pytest.mark.parametrize("payload", PAYLOADS, ids=IDS)
def test_hostile_path_is_refused_and_changes_nothing(seeded, payload, slot):
    home, vault_path, vault, tool = seeded
    before_state, before_disk = _state(vault_path, vault), _disk(home)
    with pytest.raises(ToolError) as info:
        tool.call(_calls(payload)[slot])
    message = info.value.content
    assert isinstance(message, str)
    assert message.startswith("Error: "), message
    for host in _host_strings(home):
        assert host not in message
    assert not any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") for ch in message)
    assert _state(vault_path, vault) == before_state
    assert _disk(home) == before_disk


def test_seeded_vault_still_holds_exactly_its_files(seeded):
    _, vault_path, vault, _ = seeded
    assert commit_count(vault_path) == len(SEED)
    assert _state(vault_path, vault)[3] == SEED


@pytest.mark.parametrize("payload", PAYLOADS, ids=IDS)
def test_hostile_path_is_refused_by_vault_read(seeded, payload):
    _, _, vault, _ = seeded
    with pytest.raises(vaultmem.InvalidPathError):
        vault.read(payload)


@pytest.mark.parametrize("payload", STRING_ISH, ids=STRING_ISH_IDS)
def test_hostile_path_is_refused_by_vault_history(seeded, payload):
    _, _, vault, _ = seeded
    with pytest.raises(vaultmem.InvalidPathError):
        vault.history(path=payload)


@pytest.mark.parametrize("payload", STRING_ISH, ids=STRING_ISH_IDS)
def test_hostile_path_is_refused_by_vault_restore(seeded, payload):
    _, vault_path, vault, _ = seeded
    first = vault.history()[-1].id
    before = _state(vault_path, vault)
    with pytest.raises(vaultmem.InvalidPathError):
        vault.restore(first, path=payload)
    assert _state(vault_path, vault) == before


def test_refusals_through_the_tool_and_the_api_never_reveal_the_host(seeded):
    home, _, vault, _ = seeded
    for payload in PAYLOADS:
        with pytest.raises(vaultmem.InvalidPathError) as info:
            vault.read(payload)
        for host in _host_strings(home):
            assert host not in str(info.value)


# -- characters that end a line, on a vault of their own ------------------------

SEPARATORS_RULE = "line and paragraph separators (U+2028, U+2029) are not allowed"
LINE_BREAKERS = {
    "line-separator": ("/memories/a\u2028b.txt", SEPARATORS_RULE),
    "paragraph-separator": ("/memories/notes\u2029.txt", SEPARATORS_RULE),
    "separator-folder": ("/memories/\u2028/notes.txt", SEPARATORS_RULE),
    "encoded-separator": ("/memories/a%E2%80%A8b.txt", SEPARATORS_RULE),
    "next-line": ("/memories/a\x85b.txt", "control characters are not allowed"),
}


def _vault_state(vault_path: Path, vault: Vault) -> tuple:
    refs = git(vault_path, "for-each-ref", "--format=%(refname) %(objectname)")
    tree = git(vault_path, "ls-tree", "-r", "-z", "--name-only", "main")
    return git(vault_path, "rev-list", "--count", "main").strip(), refs, tree, vault.listing(), vault.history()


@pytest.mark.parametrize("case", list(LINE_BREAKERS))
def test_create_with_a_line_breaking_character_is_refused_and_commits_nothing(tmp_path, case):
    payload, rule = LINE_BREAKERS[case]
    vault_path = tmp_path / "agent.vault"
    vault = Vault.init(vault_path, key=generate_key(), clock=FakeClock())
    tool = VaultMemoryTool(vault, actor="support-bot", session="sess-42")
    tool.call({"command": "create", "path": "/memories/keep.txt", "file_text": "kept\n"})
    assert git(vault_path, "rev-list", "--count", "main").strip() == "1"
    before, disk = _vault_state(vault_path, vault), _disk(tmp_path)

    with pytest.raises(ToolError) as info:
        tool.call({"command": "create", "path": payload, "file_text": "planted\n"})

    assert info.value.content == f"Error: Invalid `path`: {rule}. Use a path such as /memories/notes.txt."
    assert git(vault_path, "rev-list", "--count", "main").strip() == "1"
    assert _vault_state(vault_path, vault) == before
    assert _disk(tmp_path) == disk
    assert [v.paths for v in vault.history()] == [("/memories/keep.txt",)]
    assert "planted" not in tool.call({"command": "view", "path": "/memories"})


@pytest.mark.parametrize("case", list(LINE_BREAKERS))
def test_rename_to_a_line_breaking_character_is_refused_and_commits_nothing(tmp_path, case):
    payload, rule = LINE_BREAKERS[case]
    vault_path = tmp_path / "agent.vault"
    vault = Vault.init(vault_path, key=generate_key(), clock=FakeClock())
    tool = VaultMemoryTool(vault, actor="support-bot", session="sess-42")
    tool.call({"command": "create", "path": "/memories/keep.txt", "file_text": "kept\n"})
    before = _vault_state(vault_path, vault)

    with pytest.raises(ToolError) as info:
        tool.call({"command": "rename", "old_path": "/memories/keep.txt", "new_path": payload})

    assert info.value.content == f"Error: Invalid `new_path`: {rule}. Use a path such as /memories/notes.txt."
    assert _vault_state(vault_path, vault) == before
    assert vault.read("/memories/keep.txt") == "kept\n"


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("a\u2028b.txt", SEPARATORS_RULE),
        ("a\u2029b.txt", SEPARATORS_RULE),
        ("a\x85b.txt", "control characters are not allowed"),
    ],
    ids=["line-separator", "paragraph-separator", "next-line"],
)
def test_cli_import_of_a_file_named_with_a_line_breaking_character_is_refused(tmp_path, name, rule):
    vault_path = tmp_path / "agent.vault"
    key = generate_key()
    vault = Vault.init(vault_path, key=key, clock=FakeClock())
    VaultMemoryTool(vault, actor="support-bot").call(
        {"command": "create", "path": "/memories/keep.txt", "file_text": "kept\n"}
    )
    vault.close()
    source = tmp_path / "memory" / "memories"
    source.mkdir(parents=True)
    (source / "good.txt").write_text("good\n")
    (source / name).write_text("planted\n")
    before = git(vault_path, "rev-list", "--count", "main").strip(), git(vault_path, "ls-tree", "-r", "main")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")},
        "VAULTMEM_KEY": key,
        "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
    }

    result = subprocess.run(
        [sys.executable, "-m", "vaultmem", "--vault", str(vault_path), "import", str(tmp_path / "memory")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )

    assert result.returncode == 2, result
    assert result.stdout == ""
    assert result.stderr == f"vaultmem: cannot import {name!r}: it is not a valid memory path ({rule}). " + (
        "Nothing was imported.\n"
    ), result.stderr
    after = git(vault_path, "rev-list", "--count", "main").strip(), git(vault_path, "ls-tree", "-r", "main")
    assert after == before
    assert before[0] == "1"
