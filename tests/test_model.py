"""Random command sequences against a real vault and against the SPEC.md model.

A hypothesis state machine drives all six commands (plus malformed inputs) with
paths from a small alphabet, so collisions, nested folders, renames into and over
things and missing paths happen often.  After every call the tool's answer must be
what ``tests/model.py`` expects (the exact string where SPEC.md gives one), and as
invariants: the vault holds exactly the model's files, ``view /memories`` lists what
the model lists, and ``main`` gained exactly one commit per successful mutation and
none for failures or views.  Each example runs on a fresh vault in its own temporary
folder.  Short fixed scripts (``EDGE_SCRIPTS``) pin the corners random runs reach only
by luck, through the same harness.
"""

from __future__ import annotations

import shutil
import tempfile
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from anthropic.lib.tools import ToolError
from conftest import FakeClock, commit_count, examples, git
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test
from model import DEFAULT_MAX_FILE_BYTES, MemoryModel, clip, split_lines

from vaultmem import Vault, VaultMemoryTool, generate_key

SMALL_CAP = 300  # a second tool on the same vault pages its views at this many characters

# Names chosen to collide and to probe ordering ("a" < "a-b" < "a.txt" by name, not by
# git's tree order), case, Unicode (NFC "é" is also sent as NFD), hidden names and node_modules.
SEGMENTS = ["a", "b", "A", "a.txt", "a-b", "é", "日記", ".h", "node_modules"]
INVALID_PATHS = [
    "",
    "memories/a",
    "/memoriesX",
    "/memoriesX/a",
    "/Memories/a",
    "/memories/../a",
    "/memories/./a",
    "/memories/a/..",
    "/memories//a",
    "/memories/a//",
    "/memories/a\\b",
    "/memories/a\x00b",
    "/memories/a\nb",
    "/memories/a\u200bb",
    "/memories/a\u202eb",
    "/memories/%2e%2e/a",
    "/memories/%2E%2e",
    "/memories/a%2fb",
    "/memories/a%5Cb",
    "/memories/%252e%252e/a",
    "/memories/" + "x" * 256,
    "/memories/" + "/".join(["y" * 200] * 6),
]
BOUNDARY_PATHS = ["/memories/" + "x" * 255, "/memories/" + "é" * 127]  # 255 and 254 bytes: allowed

# Runs ("aa", "\n\n") make overlapping and repeated matches common; any character may appear.
TEXT_CHUNKS = ["a", "b", "\n", "aa", "aaa", "\n\n", " ", "é", "e", "\u0301", "日", "\r", "`", "😀"]
TEXT = st.lists(st.one_of(st.sampled_from(TEXT_CHUNKS), st.characters()), max_size=15).map("".join)
MALFORMED: list[Any] = [
    {},
    {"command": "list", "path": "/memories"},
    {"command": "View", "path": "/memories"},
    {"command": None, "path": "/memories"},
    {"command": 3},
    {"path": "/memories"},
    {"command": "view"},
    {"command": "view", "path": 7},
    {"command": "view", "path": "/memories", "view_range": [1]},
    {"command": "view", "path": "/memories", "view_range": [1, 2, 3]},
    {"command": "view", "path": "/memories", "view_range": ["1", 2]},
    {"command": "view", "path": "/memories", "view_range": "1-2"},
    {"command": "view", "path": "/memories", "view_range": [True, 1]},
    {"command": "create", "path": "/memories/a"},
    {"command": "create", "path": "/memories/a", "file_text": 5},
    {"command": "create", "path": "/memories/a", "file_text": "x", "mode": "w"},
    {"command": "str_replace", "path": "/memories/a", "old_str": "x"},
    {"command": "str_replace", "path": "/memories/a", "old_str": 1, "new_str": "y"},
    {"command": "insert", "path": "/memories/a", "insert_line": "1", "insert_text": "x"},
    {"command": "insert", "path": "/memories/a", "insert_line": True, "insert_text": "x"},
    {"command": "insert", "path": "/memories/a", "insert_line": 1.5, "insert_text": "x"},
    {"command": "insert", "path": "/memories/a", "insert_text": "x"},
    {"command": "delete"},
    {"command": "delete", "path": ["/memories/a"]},
    {"command": "rename", "old_path": "/memories/a"},
    {"command": "rename", "path": "/memories/a", "new_path": "/memories/b"},
]


def vault_contents(vault: Vault, vault_path: Path) -> dict[str, str]:
    """Every file on ``main``, read back through the vault (names from stock git)."""
    if commit_count(vault_path) == 0:
        return {}
    names = git(vault_path, "ls-tree", "-r", "-z", "--name-only", "refs/heads/main").split("\0")
    out = {}
    for name in filter(None, names):
        assert name.startswith("memories/"), name
        out["/" + name] = vault.read("/" + name)
    return out


class Harness:
    """One real vault (two tools on it: default view cap and a small one) beside the model."""

    def __init__(self, workdir: str) -> None:
        self.workdir = workdir
        self.vault_path = Path(workdir) / "agent.vault"
        self.vault = Vault.init(self.vault_path, key=generate_key(), clock=FakeClock())
        self.tool = VaultMemoryTool(self.vault, actor="model-test", session="sess-model")
        self.small = VaultMemoryTool(self.vault, actor="model-test", session="sess-model", view_cap=SMALL_CAP)
        self.model = MemoryModel()
        self.commits = 0
        self.log: list[str] = []

    def story(self) -> str:
        return "\n    ".join(["calls so far (newest last):", *self.log[-12:]])

    def run(self, params: Any, small: bool = False) -> None:
        tool = self.small if small else self.tool
        cap = tool.commands.view_cap
        expected = self.model.call(params, view_cap=cap)
        try:
            ok, text = True, tool.call(params)
        except ToolError as err:
            assert isinstance(err.content, str), err.content
            ok, text = False, err.content
        self.log.append(f"{clip(params)}{f' [view_cap={cap}]' if small else ''} -> {'ok' if ok else 'error'}")
        problems = expected.problems(ok, text)
        if not ok and self.workdir in text:
            problems.append("the error reveals the vault's location on the host")
        assert not problems, "\n  ".join(["tool and model disagree:", *problems, self.story()])
        self.commits += expected.commits
        count = commit_count(self.vault_path)
        assert count == self.commits, f"expected {self.commits} commits on main, got {count}\n  {self.story()}"

    def check_contents(self) -> None:
        actual, expected = vault_contents(self.vault, self.vault_path), self.model.contents()
        if actual != expected:
            diff = [
                f"{path}: vault {clip(actual.get(path))}, model {clip(expected.get(path))}"
                for path in sorted(set(actual) | set(expected))
                if actual.get(path) != expected.get(path)
            ]
            raise AssertionError("\n  ".join(["the vault does not hold the model's files:", *diff, self.story()]))


class MemoryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.workdir = tempfile.mkdtemp(prefix="vaultmem-model-")
        self.h = Harness(self.workdir)
        self.model = self.h.model

    def teardown(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)

    def run(self, params: Any, small: bool = False) -> None:
        self.h.run(params, small)
        command = params.get("command") if isinstance(params, dict) else None
        event(f"{command}: {'ok' if self.h.log[-1].endswith('ok') else 'error'}")

    # -- drawing inputs ----------------------------------------------------

    # Weights come from repeating entries of sampled_from; hypothesis shrinks towards the first.
    def draw_path(self, data: st.DataObject, label: str = "path", prefer: str = "fresh") -> str:
        other = "existing" if prefer == "fresh" else "fresh"
        kind = data.draw(st.sampled_from([prefer] * 5 + [other] * 3 + ["root", "invalid"]), label=f"{label} kind")
        existing = self.model.paths()
        if kind == "existing" and existing:
            path = data.draw(st.sampled_from(existing), label=label)
        elif kind == "invalid":
            return data.draw(st.sampled_from(INVALID_PATHS + BOUNDARY_PATHS), label=label)
        elif kind == "root":
            path = "/memories"
        else:
            depth = data.draw(st.sampled_from([2, 1, 3]), label=f"{label} depth")
            segments = data.draw(st.lists(st.sampled_from(SEGMENTS), min_size=depth, max_size=depth), label=label)
            path = "/memories" + "".join("/" + s for s in segments)
        spelling = data.draw(st.sampled_from(["as is"] * 5 + ["slash", "NFD"]), label=f"{label} spelling")
        if spelling == "slash":
            path += "/"
        elif spelling == "NFD":
            path = unicodedata.normalize("NFD", path)
        return path

    def draw_file(self, data: st.DataObject) -> str:
        """Usually an existing file (so edits land), sometimes any path."""
        files = sorted(self.model.contents())
        if files and data.draw(st.sampled_from([True] * 4 + [False]), label="an existing file"):
            return data.draw(st.sampled_from(files), label="file")
        return self.draw_path(data, prefer="existing")

    def content_of(self, path: str) -> str | None:
        return self.model.contents().get(unicodedata.normalize("NFC", path))

    # -- rules -------------------------------------------------------------

    @initialize(data=st.data(), texts=st.lists(TEXT, min_size=1, max_size=4))
    def some_files(self, data: st.DataObject, texts: list[str]) -> None:
        for text in texts:
            self.run({"command": "create", "path": self.draw_path(data), "file_text": text})

    @rule(data=st.data(), text=TEXT)
    def create(self, data: st.DataObject, text: str) -> None:
        repeat = data.draw(st.sampled_from([1] * 5 + [80, 300]), label="repeat")  # kilobyte sizes in listings
        self.run({"command": "create", "path": self.draw_path(data), "file_text": text * repeat})

    @rule(data=st.data())
    def create_large(self, data: st.DataObject) -> None:
        size = data.draw(st.sampled_from(["skip"] * 3 + ["kilobytes", "paged", "at_limit", "over_limit"]), label="size")
        if size == "skip":  # large files make most edits ambiguous: keep them rare
            return
        if size == "kilobytes":  # sizes such as 1.5K in listings
            text = "k\n" * data.draw(st.integers(500, 1600), label="lines")
        elif size == "paged":  # over the default view cap of 16,000 characters: views page
            text = "".join(f"line {i} {'ü' * (i % 40)}\n" for i in range(700))
        else:
            text = "é" * (DEFAULT_MAX_FILE_BYTES // 2) + ("x" if size == "over_limit" else "")
        self.run({"command": "create", "path": self.draw_path(data), "file_text": text})

    @rule(data=st.data())
    def view(self, data: st.DataObject) -> None:
        path = self.draw_path(data, prefer="existing")
        params: dict[str, Any] = {"command": "view", "path": path}
        if data.draw(st.sampled_from([False, False, True]), label="with view_range"):
            content = self.content_of(path)
            n = len(split_lines(content)) if content is not None else 3
            bound = st.integers(-2, n + 2)
            params["view_range"] = [data.draw(bound, label="start"), data.draw(st.one_of(st.just(-1), bound))]
        self.run(params, small=data.draw(st.booleans(), label="small cap"))

    @rule(data=st.data(), new=TEXT)
    def str_replace(self, data: st.DataObject, new: str) -> None:
        path = self.draw_file(data)
        content = self.content_of(path) or ""
        how = data.draw(st.sampled_from(["substring"] * 3 + ["repeated", "absent", "empty"]), label="old_str")
        if how == "substring" and content:
            start = data.draw(st.integers(0, len(content) - 1), label="from")
            old = content[start : start + data.draw(st.sampled_from([6, 3, 12, 1, 2]), label="length")]
        elif how == "repeated":
            old = data.draw(st.sampled_from(["a", "aa", "b", "\n", "\n\n", "a\n", " "]), label="old_str")
        elif how == "empty":
            old = ""
        else:
            old = data.draw(TEXT.filter(bool), label="old_str")
        if data.draw(st.sampled_from([False] * 9 + [True]), label="old_str == new_str"):
            new = old  # a no-op edit still succeeds and still commits
        self.run({"command": "str_replace", "path": path, "old_str": old, "new_str": new})

    @rule(data=st.data(), text=TEXT)
    def insert(self, data: st.DataObject, text: str) -> None:
        path = self.draw_file(data)
        content = self.content_of(path)
        n = len(split_lines(content)) if content is not None else 2
        line = data.draw(st.sampled_from([n, 0, *range(-1, n + 2)]), label="insert_line")
        if data.draw(st.booleans(), label="edge-shaped text"):
            text = data.draw(st.sampled_from(["", "\n", "x\n", "x\ny\n", "x\n\n", "\nx", "x"]), label="insert_text")
        self.run({"command": "insert", "path": path, "insert_line": line, "insert_text": text})

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        self.run({"command": "delete", "path": self.draw_path(data, prefer="existing")})

    @rule(data=st.data())
    def rename(self, data: st.DataObject) -> None:
        old = self.draw_path(data, "old_path", prefer="existing")
        where = data.draw(st.sampled_from(["in a folder", "any", "into the source"]), label="new_path kind")
        if where == "in a folder":  # usually free: a new name in the root or an existing folder
            folders = [
                "/memories",
                *(p for p in self.model.paths() if self.model.kind(tuple(p.split("/")[2:])) == "dir"),
            ]
            folder = data.draw(st.sampled_from(folders), label="folder")
            names = data.draw(st.lists(st.sampled_from(["z", "new.md", *SEGMENTS]), min_size=1, max_size=2))
            new = folder + "".join("/" + n for n in names)
        elif where == "into the source":
            new = old.rstrip("/") + "/" + data.draw(st.sampled_from(SEGMENTS), label="new_path")
        else:
            new = self.draw_path(data, "new_path")
        self.run({"command": "rename", "old_path": old, "new_path": new})

    @rule(params=st.sampled_from(MALFORMED))
    def malformed(self, params: Any) -> None:
        self.run(dict(params))

    # -- invariants ----------------------------------------------------------

    @invariant()
    def vault_holds_exactly_the_model(self) -> None:
        self.h.check_contents()

    @invariant()
    def viewing_memories_lists_what_the_model_holds(self) -> None:
        self.h.run({"command": "view", "path": "/memories"})
        self.h.log.pop()  # keep the story to the steps themselves


# Shrinking a stateful run over a real vault can take many minutes, so failures are
# reported unshrunk: every assertion message carries the calls that led to it.
SETTINGS = settings(
    max_examples=examples(40),
    stateful_step_count=30,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def test_random_command_sequences_match_the_spec_model() -> None:
    run_state_machine_as_test(MemoryMachine, settings=SETTINGS)


def _c(path: str, text: str = "x") -> dict[str, Any]:
    return {"command": "create", "path": path, "file_text": text}


def _v(path: str, view_range: list[int] | None = None) -> dict[str, Any]:
    return {"command": "view", "path": path} | ({"view_range": view_range} if view_range is not None else {})


def _sr(path: str, old: str, new: str) -> dict[str, Any]:
    return {"command": "str_replace", "path": path, "old_str": old, "new_str": new}


def _ins(path: str, line: int, text: str) -> dict[str, Any]:
    return {"command": "insert", "path": path, "insert_line": line, "insert_text": text}


def _rm(path: str) -> dict[str, Any]:
    return {"command": "delete", "path": path}


def _mv(old: str, new: str) -> dict[str, Any]:
    return {"command": "rename", "old_path": old, "new_path": new}


SMALL = "small"  # marks a view run through the tool with the small view cap
PAGED = "".join(f"line {i} {'ü' * (i % 40)}\n" for i in range(700))
AT_LIMIT = "é" * (DEFAULT_MAX_FILE_BYTES // 2)

# Short scripts that pin the corners the random runs reach only by luck.
# fmt: off
EDGE_SCRIPTS: dict[str, list[Any]] = {
    "insert_after_a_last_line_without_newline_keeps_it_without": [
        _c("/memories/f", "a"), _ins("/memories/f", 1, "x"), _ins("/memories/f", 2, "y\n"), _v("/memories/f"),
        _c("/memories/g", "a"), _ins("/memories/g", 1, ""), _c("/memories/h", "a"), _ins("/memories/h", 1, "\n"),
    ],
    "insert_after_a_last_line_without_newline_keeps_an_inserted_empty_last_line": [
        _c("/memories/f", "a"), _ins("/memories/f", 1, "x\n\n"), _v("/memories/f"),
    ],
    "insert_keeps_the_bytes_around_it": [
        _c("/memories/f", "a\r\nb\n\n"), _ins("/memories/f", 0, ""), _ins("/memories/f", 4, "x\n\n"),
        _ins("/memories/f", 1, "\n"), _ins("/memories/f", 7, "z"), _ins("/memories/f", -1, "z"), _v("/memories/f"),
    ],
    "str_replace_counts_overlapping_occurrences": [
        _c("/memories/f", "aaa\nbab\n"), _sr("/memories/f", "aa", "b"), _sr("/memories/f", "a", "b"),
        _sr("/memories/f", "aaa", "c"), _sr("/memories/f", "c", "c"), _sr("/memories/f", "", "c"),
        _sr("/memories/f", "zz", "c"), _sr("/memories/f", "b", "\n"),
    ],
    "str_replace_snippet_shows_two_lines_of_context": [
        _c("/memories/f", "".join(f"{i}\n" for i in range(1, 11))), _sr("/memories/f", "5\n", "x\ny\n"),
        _sr("/memories/f", "1\n", ""), _sr("/memories/f", "10\n", "ten"), _sr("/memories/f", "ten", "\n\n"),
    ],
    "str_replace_that_empties_the_file": [_c("/memories/f", "abc"), _sr("/memories/f", "abc", ""), _v("/memories/f")],
    "listing_sorts_by_name_and_hides_dot_names_and_node_modules": [
        _c("/memories/a/x", "12"), _c("/memories/a-b"), _c("/memories/a.txt", "é"), _c("/memories/.h/s", "hidden"),
        _c("/memories/node_modules/m", "nm"), _c("/memories/a/b/c/d", "deep"), _c("/memories/A"),
        _c("/memories/a/.k", "k"), _c("/memories/b/1023", "x" * 1023), _c("/memories/b/1024", "x" * 1024),
        _c("/memories/b/1536", "é" * 768), _c("/memories/b/big", "x" * 100_000), _v("/memories/b"), _v("/memories"),
        _v("/memories/"), _v("/memories/a"), _v("/memories/a/b/"),
        _v("/memories/.h"), (SMALL, _v("/memories")),
    ],
    "nfc_and_nfd_spellings_name_one_file": [
        _c("/memories/é", "1"), _c("/memories/e\u0301", "2"), _v("/memories/e\u0301"),
        _mv("/memories/e\u0301", "/memories/é"), _mv("/memories/e\u0301", "/memories/E"), _v("/memories"),
    ],
    "a_trailing_slash_asserts_a_directory": [
        _c("/memories/f"), _v("/memories/f/"), _sr("/memories/f/", "x", "y"), _ins("/memories/f/", 0, "y"),
        _rm("/memories/f/"), _mv("/memories/f/", "/memories/g"), _c("/memories/d/x"), _v("/memories/d/"),
        _c("/memories/d/"), _c("/memories/n/"), _mv("/memories/d/", "/memories/e/"), _rm("/memories/e/"),
        _v("/memories/"),
    ],
    "rename_checks_in_order": [
        _c("/memories/d/x"), _c("/memories/f"), _mv("/memories/d", "/memories/d/y"),
        _mv("/memories/f", "/memories/f/y"),
        _mv("/memories/f", "/memories/d/x"), _mv("/memories/missing", "/memories/d"), _mv("/memories", "/memories/z"),
        _mv("/memories", "/memories/d"), _mv("/memories/f", "/memories"), _mv("/memories/f", "/memories/g/"),
        _mv("/memories/f", "/memories/d/x/y"), _mv("/memories/f", "/memories/f/"), _mv("/memories/d", "/memories/n/m"),
        _mv("/memories/f", "/memories/..") , _v("/memories"),
    ],
    "deleting_the_last_file_removes_its_folders": [
        _c("/memories/d/e/x"), _c("/memories/d/y"), _rm("/memories/d/e/x"), _v("/memories/d/e"), _v("/memories/d"),
        _rm("/memories/d/y"), _v("/memories/d"), _rm("/memories"), _rm("/memories/"), _v("/memories"),
    ],
    "size_limit_applies_to_every_write": [
        _c("/memories/big", AT_LIMIT), _c("/memories/over", AT_LIMIT + "x"), _ins("/memories/big", 0, ""),
        _sr("/memories/big", "éé", "é"), _sr("/memories/big", "é" * 10, "x" * 21), _c("/memories/empty", ""),
        _v("/memories"),
    ],
    "view_range_must_lie_inside_the_file": [
        _c("/memories/f", "a\nb\nc"), _v("/memories/f", [1, 3]), _v("/memories/f", [2, -1]), _v("/memories/f", [3, 3]),
        _v("/memories/f", [0, 1]), _v("/memories/f", [2, 1]), _v("/memories/f", [1, 4]), _v("/memories/f", [4, -1]),
        _v("/memories/f", [-1, -1]), _c("/memories/e", ""), _v("/memories/e"), _v("/memories/e", [1, 1]),
        _v("/memories", [1, 1]), _v("/memories/missing", [1, 1]),
    ],
    "views_page_at_the_cap": [
        _c("/memories/p", PAGED), _v("/memories/p"), _v("/memories/p", [600, -1]), _v("/memories/p", [2, 650]),
        (SMALL, _v("/memories/p", [5, 9])), (SMALL, _v("/memories/p", [600, 620])),
        *[_c(f"/memories/d{i}/x") for i in range(12)], (SMALL, _v("/memories")), (SMALL, _v("/memories/")),
    ],
    "paths_are_validated_before_anything_else": [
        *[_c(path) for path in INVALID_PATHS], *[_v(path) for path in INVALID_PATHS], *[_c(p) for p in BOUNDARY_PATHS],
        _mv("/memories/../x", "/memories/y"), _mv(BOUNDARY_PATHS[0], "/memories/%2e"), _v("/memories"),
    ],
    "malformed_inputs_are_clear_errors": list(MALFORMED),
    "a_lone_surrogate_in_any_text_is_refused_before_the_file_is_looked_at": [
        _c("/memories/a", "`x"), _sr("/memories/a", "`\u00d9", "\udf8a"), _sr("/memories/missing", "x", "\udf8a"),
        _sr("/memories/a", "\udf8a", "y"), _ins("/memories/missing", 9, "\udf8a"), _c("/memories/b", "\udf8a"),
        _v("/memories"),
    ],
}
# fmt: on


@pytest.mark.parametrize("name", list(EDGE_SCRIPTS))
def test_edge_scripts_match_the_spec_model(name: str, tmp_path: Path) -> None:
    harness = Harness(str(tmp_path))
    for step in EDGE_SCRIPTS[name]:
        small = isinstance(step, tuple)
        harness.run(step[1] if small else step, small=small)
        harness.check_contents()
