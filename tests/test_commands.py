"""The memory tool contract, command by command: every exact string and edge case of SPEC.md."""

from __future__ import annotations

import re
import unicodedata

import pytest
from anthropic.lib.tools import ToolError
from anthropic.types.beta import BetaMemoryTool20250818CreateCommand, BetaMemoryTool20250818ViewCommand
from conftest import commit_count, examples, git
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vaultmem import Change, VaultMemoryTool
from vaultmem.core.paths import parse

DIR_HEADER = "Here're the files and directories up to 2 levels deep in {}, excluding hidden items and node_modules:"
FILE_HEADER = "Here's the content of {} with line numbers:"
EDITED = "The memory file has been edited. Here is the snippet showing the change (with line numbers):\n"
HINT = re.compile(r"view_range \[(\d+), (-?\d+)\]")


# -- helpers ---------------------------------------------------------------------


def stored_files(vault, vault_path) -> dict[str, str]:
    """Every memory file on main and its text, read back through the vault."""
    out = git(vault_path, "ls-tree", "-r", "-z", "--name-only", "refs/heads/main", check=False)
    return {"/" + name: vault.read("/" + name) for name in out.split("\0") if name}


def state(vault, vault_path) -> tuple:
    head = git(vault_path, "rev-parse", "--verify", "-q", "refs/heads/main", check=False).strip()
    return commit_count(vault_path), head, stored_files(vault, vault_path)


def refuse(tool, vault_path, params) -> str:
    """Run a call that must fail: a ToolError, and nothing changed (no commit, same files)."""
    before = state(tool.vault, vault_path)
    with pytest.raises(ToolError) as info:
        tool.call(params)
    assert state(tool.vault, vault_path) == before
    content = info.value.content
    assert isinstance(content, str)
    return content


def succeed(tool, vault_path, params) -> str:
    """Run a mutation that must succeed with exactly one new commit."""
    before = commit_count(vault_path)
    result = tool.call(params)
    assert commit_count(vault_path) == before + 1
    return result


@pytest.fixture
def refused(tool, vault_path):
    return lambda **params: refuse(tool, vault_path, params)


@pytest.fixture
def done(tool, vault_path):
    return lambda **params: succeed(tool, vault_path, params)


@pytest.fixture
def put(tool, vault_path):
    """Create files quickly: ``put({"/memories/a.txt": "text", ...})``."""

    def _put(files: dict[str, str]) -> None:
        for path, content in files.items():
            succeed(tool, vault_path, {"command": "create", "path": path, "file_text": content})

    return _put


def with_limits(vault, **limits) -> VaultMemoryTool:
    return VaultMemoryTool(vault, actor="support-bot", session="sess-42", **limits)


# -- view: directories -------------------------------------------------------------


def test_view_of_an_empty_vault_lists_memories_alone(call):
    assert call(command="view", path="/memories") == DIR_HEADER.format("/memories") + "\n0B\t/memories"


def test_view_root_with_trailing_slash_in_an_empty_vault(call):
    assert call(command="view", path="/memories/") == DIR_HEADER.format("/memories/") + "\n0B\t/memories/"


@pytest.fixture
def tree(put):
    put(
        {
            "/memories/b.txt": "hello",
            "/memories/a/x.txt": "x" * 1536,
            "/memories/a/w.txt": "w" * 512,
            "/memories/a/sub/deep.txt": "d" * 100,
            "/memories/a/sub/deeper/z.txt": "z" * 10,
            "/memories/c/y.txt": "y" * 4096,
            "/memories/a.txt": "",
        }
    )


def test_view_lists_two_levels_depth_first_by_name_with_sizes(call, tree):
    assert call(command="view", path="/memories") == "\n".join(
        [
            DIR_HEADER.format("/memories"),
            "6.1K\t/memories",
            "2.1K\t/memories/a/",
            "110B\t/memories/a/sub/",
            "512B\t/memories/a/w.txt",
            "1.5K\t/memories/a/x.txt",
            "0B\t/memories/a.txt",
            "5B\t/memories/b.txt",
            "4.0K\t/memories/c/",
            "4.0K\t/memories/c/y.txt",
        ]
    )


def test_view_of_a_subdirectory_lists_two_levels_below_it(call, tree):
    assert call(command="view", path="/memories/a") == "\n".join(
        [
            DIR_HEADER.format("/memories/a"),
            "2.1K\t/memories/a",
            "110B\t/memories/a/sub/",
            "100B\t/memories/a/sub/deep.txt",
            "10B\t/memories/a/sub/deeper/",
            "512B\t/memories/a/w.txt",
            "1.5K\t/memories/a/x.txt",
        ]
    )


def test_view_of_a_directory_with_trailing_slash_prints_entries_without_it(call, tree):
    assert call(command="view", path="/memories/a/") == "\n".join(
        [
            DIR_HEADER.format("/memories/a/"),
            "2.1K\t/memories/a/",
            "110B\t/memories/a/sub/",
            "100B\t/memories/a/sub/deep.txt",
            "10B\t/memories/a/sub/deeper/",
            "512B\t/memories/a/w.txt",
            "1.5K\t/memories/a/x.txt",
        ]
    )
    listing = call(command="view", path="/memories/")
    assert "\t/memories//" not in listing
    assert "2.1K\t/memories/a/\n" in listing


def test_view_listing_separates_size_and_path_with_one_tab(call, tree):
    for line in call(command="view", path="/memories").split("\n")[1:]:
        size, path = line.split("\t")
        assert re.fullmatch(r"\d+B|\d+\.\dK", size)
        assert path.startswith("/memories")


def test_view_leaves_out_hidden_items_and_node_modules_with_their_contents(call, put):
    put(
        {
            "/memories/.hidden/x": "h" * 100,
            "/memories/node_modules/y": "n" * 100,
            "/memories/a/.secret": "s" * 100,
            "/memories/a/node_modules/z/deep": "n" * 100,
            "/memories/a/ok.txt": "o" * 10,
            "/memories/b/node_modules": "f" * 100,
            "/memories/b/keep.txt": "k",
        }
    )
    # Directory sizes still count every file below them, hidden ones too.
    assert call(command="view", path="/memories") == "\n".join(
        [
            DIR_HEADER.format("/memories"),
            "511B\t/memories",
            "210B\t/memories/a/",
            "10B\t/memories/a/ok.txt",
            "101B\t/memories/b/",
            "1B\t/memories/b/keep.txt",
        ]
    )


def test_view_reads_a_hidden_file_asked_for_by_name(call, put):
    put({"/memories/.notes": "private\n"})
    assert call(command="view", path="/memories/.notes") == FILE_HEADER.format("/memories/.notes") + "\n     1\tprivate"


def test_view_sorts_by_name_not_by_git_tree_order(call, put):
    # git orders a folder "a" as "a/", after "a.txt" and "a-b"; by name "a" comes first.
    put({"/memories/a.txt": "1", "/memories/a-b": "22", "/memories/a/in.txt": "333", "/memories/B": "4444"})
    assert call(command="view", path="/memories").split("\n")[2:] == [
        "4B\t/memories/B",
        "3B\t/memories/a/",
        "3B\t/memories/a/in.txt",
        "2B\t/memories/a-b",
        "1B\t/memories/a.txt",
    ]


def test_view_sizes_count_utf8_bytes_of_the_plaintext(call, put):
    put({"/memories/d/e.txt": "é" * 10, "/memories/d/k.txt": "k" * 2048})
    lines = call(command="view", path="/memories/d").split("\n")
    assert lines[1:] == ["2.0K\t/memories/d", "20B\t/memories/d/e.txt", "2.0K\t/memories/d/k.txt"]


def test_view_of_memories_after_everything_is_deleted_is_empty_again(call, done, put):
    put({"/memories/a/b.txt": "x"})
    done(command="delete", path="/memories/a")
    assert call(command="view", path="/memories") == DIR_HEADER.format("/memories") + "\n0B\t/memories"


def test_view_listing_past_the_cap_stops_and_suggests_a_subdirectory(vault, vault_path, put):
    put({f"/memories/dir{i:02}/file{j}.txt": "x" * (i + j) for i in range(12) for j in range(3)})
    full = with_limits(vault).call({"command": "view", "path": "/memories"}).split("\n")
    capped = with_limits(vault, view_cap=200).call({"command": "view", "path": "/memories"}).split("\n")
    entries, hint = capped[1:-1], capped[-1]
    assert capped[0] == full[0]
    assert len(capped) < len(full)
    assert entries == full[1 : 1 + len(entries)]
    assert len("\n".join(entries)) <= 200
    assert "\t" not in hint
    suggested = [p.rstrip(".,;:)]'`/") for p in re.findall(r"/memories/\S+", hint)]
    assert suggested
    assert all(vault.snapshot().kind(parse(p)) == "dir" for p in suggested)


def test_a_listing_cut_inside_a_subdirectory_suggests_that_subdirectory(vault, put):
    put({**{f"/memories/a/f{j:02}.txt": "x" for j in range(20)}, "/memories/b/g.txt": "y"})
    last = with_limits(vault, view_cap=200).call({"command": "view", "path": "/memories"}).split("\n")[-1]
    assert last.endswith("view a subdirectory such as /memories/a to see the rest.]"), last


def test_a_flat_folder_past_the_cap_never_suggests_viewing_itself_again(vault, put):
    put({f"/memories/notes/f{j:03}.txt": "x" for j in range(40)})
    tool = with_limits(vault, view_cap=300)
    lines = tool.call({"command": "view", "path": "/memories/notes/"}).split("\n")
    shown = [line.split("\t")[1] for line in lines[2:-1]]
    assert shown == [f"/memories/notes/f{j:03}.txt" for j in range(len(shown))]
    assert lines[-1] == (
        f"[Listing cut at 300 characters after {len(shown)} of 40 entries; the other {40 - len(shown)} are files "
        f"directly in /memories/notes, from /memories/notes/f{len(shown):03}.txt on, and no view of a subdirectory "
        "lists them.]"
    )
    assert "view a subdirectory" not in lines[-1]


def test_view_of_a_directory_with_view_range_is_an_error(refused, put):
    put({"/memories/d/x.txt": "x\n"})
    assert refused(command="view", path="/memories/d", view_range=[1, 1]).startswith("Error: ")
    assert refused(command="view", path="/memories", view_range=[1, -1]).startswith("Error: ")


# -- view: files -------------------------------------------------------------------


def test_view_of_a_file_numbers_lines_in_six_characters_then_a_tab(call, put):
    put({"/memories/f.txt": "first\nsecond\n"})
    assert call(command="view", path="/memories/f.txt") == "\n".join(
        [FILE_HEADER.format("/memories/f.txt"), "     1\tfirst", "     2\tsecond"]
    )


def test_view_numbers_past_nine_stay_right_aligned(call, put):
    put({"/memories/f.txt": "".join(f"l{i}\n" for i in range(1, 13))})
    lines = call(command="view", path="/memories/f.txt").split("\n")
    assert lines[9] == "     9\tl9"
    assert lines[10] == "    10\tl10"
    assert lines[12] == "    12\tl12"


def test_view_of_a_file_without_final_newline_shows_the_same_lines(call, put):
    put({"/memories/f.txt": "first\nsecond"})
    assert call(command="view", path="/memories/f.txt") == "\n".join(
        [FILE_HEADER.format("/memories/f.txt"), "     1\tfirst", "     2\tsecond"]
    )


def test_view_shows_a_trailing_empty_line_when_the_file_ends_with_two_newlines(call, put):
    put({"/memories/f.txt": "a\n\n"})
    assert (
        call(command="view", path="/memories/f.txt") == FILE_HEADER.format("/memories/f.txt") + "\n     1\ta\n     2\t"
    )


def test_view_of_an_empty_file_shows_the_header_alone(call, put):
    put({"/memories/empty.txt": ""})
    assert call(command="view", path="/memories/empty.txt") == FILE_HEADER.format("/memories/empty.txt")


def test_view_of_a_lone_newline_shows_one_empty_line(call, put):
    put({"/memories/nl.txt": "\n"})
    assert call(command="view", path="/memories/nl.txt") == FILE_HEADER.format("/memories/nl.txt") + "\n     1\t"


def test_view_of_a_missing_path_names_it(refused, put):
    put({"/memories/f.txt": "x"})
    assert (
        refused(command="view", path="/memories/nope.txt")
        == "The path /memories/nope.txt does not exist. Please provide a valid path."
    )
    assert (
        refused(command="view", path="/memories/f.txt/x")
        == "The path /memories/f.txt/x does not exist. Please provide a valid path."
    )


def test_view_of_a_file_with_trailing_slash_does_not_exist(refused, put):
    put({"/memories/f.txt": "x"})
    assert (
        refused(command="view", path="/memories/f.txt/")
        == "The path /memories/f.txt/ does not exist. Please provide a valid path."
    )


@pytest.fixture
def five(put):
    put({"/memories/five.txt": "one\ntwo\nthree\nfour\nfive\n"})


@pytest.mark.parametrize(
    ("view_range", "numbers"),
    [
        ([1, 5], [1, 2, 3, 4, 5]),
        ([2, 3], [2, 3]),
        ([3, 3], [3]),
        ([2, -1], [2, 3, 4, 5]),
        ([5, -1], [5]),
        ([1, -1], [1, 2, 3, 4, 5]),
        ([5, 5], [5]),
    ],
)
def test_view_range_shows_lines_start_to_end_inclusive(call, five, view_range, numbers):
    words = ["one", "two", "three", "four", "five"]
    assert call(command="view", path="/memories/five.txt", view_range=view_range) == "\n".join(
        [FILE_HEADER.format("/memories/five.txt")] + [f"{n:>6}\t{words[n - 1]}" for n in numbers]
    )


@pytest.mark.parametrize(
    "view_range", [[0, 2], [0, -1], [2, 1], [1, 6], [6, -1], [6, 6], [-1, -1], [-3, 2], [2, -2], [3, 0]]
)
def test_view_range_outside_the_file_is_an_error_naming_the_valid_range(refused, five, view_range):
    message = refused(command="view", path="/memories/five.txt", view_range=view_range)
    assert message.startswith("Error: ")
    assert "[1, 5]" in message


def test_view_range_on_an_empty_file_is_an_error(refused, put):
    put({"/memories/empty.txt": ""})
    assert refused(command="view", path="/memories/empty.txt", view_range=[1, 1]).startswith("Error: ")


@pytest.mark.parametrize("view_range", [[1], [1, 2, 3], ["1", "2"], [None, 2], [True, 2], "1,2", {"start": 1}, 3])
def test_mistyped_view_range_is_an_error(refused, five, view_range):
    assert refused(command="view", path="/memories/five.txt", view_range=view_range).startswith("Error: ")


def test_view_past_the_cap_stops_at_a_whole_line_and_pages_with_view_range(vault, put):
    lines = [f"line number {i}" for i in range(1, 61)]
    put({"/memories/long.txt": "\n".join(lines) + "\n"})
    tool = with_limits(vault, view_cap=120)
    seen: list[str] = []
    params: dict = {"command": "view", "path": "/memories/long.txt"}
    for _ in range(60):
        out = tool.call(params).split("\n")
        assert out[0] == FILE_HEADER.format("/memories/long.txt")
        body = out[1:]
        match = HINT.search(body[-1])
        numbered = body[:-1] if match else body
        assert len("\n".join(numbered)) <= 120
        for row in numbered:
            number, _, line = row.partition("\t")
            assert int(number) == len(seen) + 1
            assert line == lines[len(seen)]  # whole lines only
            seen.append(line)
        if not match:
            break
        assert not re.match(r"^\s*\d+\t", body[-1])
        assert int(match.group(1)) == len(seen) + 1
        params = {**params, "view_range": [int(match.group(1)), int(match.group(2))]}
    assert seen == lines


def test_view_cap_with_a_range_points_to_the_rest_of_that_range(vault, put):
    put({"/memories/long.txt": "".join(f"line number {i}\n" for i in range(1, 61))})
    out = with_limits(vault, view_cap=120).call(
        {"command": "view", "path": "/memories/long.txt", "view_range": [10, 40]}
    )
    rows = out.split("\n")
    assert rows[1] == "    10\tline number 10"
    match = HINT.search(rows[-1])
    assert match
    last_shown = int(rows[-2].split("\t")[0])
    assert (int(match.group(1)), int(match.group(2))) == (last_shown + 1, 40)


def test_view_default_cap_is_16000_characters_of_content(call, put):
    put({"/memories/big.txt": "".join(f"{i:05} " + "x" * 30 + "\n" for i in range(2500))})
    out = call(command="view", path="/memories/big.txt").split("\n")
    numbered = out[1:-1]
    assert HINT.search(out[-1])
    assert 15_000 < len("\n".join(numbered)) <= 16_000


def test_file_over_999999_lines_cannot_be_viewed(vault):
    big = parse("/memories/big.txt")
    vault.mutate(lambda snap: Change("create", (big,)).write(big, b"\n" * 1_000_000), actor="operator")
    tool = with_limits(vault, max_file_bytes=3_000_000)
    with pytest.raises(ToolError) as info:
        tool.call({"command": "view", "path": "/memories/big.txt"})
    assert info.value.content == "File /memories/big.txt exceeds maximum line limit of 999,999 lines."


def test_file_of_999999_lines_can_be_viewed_to_its_last_line(vault, vault_path):
    tool = with_limits(vault, max_file_bytes=3_000_000)
    succeed(tool, vault_path, {"command": "create", "path": "/memories/big.txt", "file_text": "x\n" * 999_999})
    out = tool.call({"command": "view", "path": "/memories/big.txt", "view_range": [999_998, -1]})
    assert out == FILE_HEADER.format("/memories/big.txt") + "\n999998\tx\n999999\tx"


def test_create_over_999999_lines_is_refused_when_the_size_limit_allows_it(vault, vault_path):
    tool = with_limits(vault, max_file_bytes=3_000_000)
    message = refuse(
        tool, vault_path, {"command": "create", "path": "/memories/big.txt", "file_text": "\n" * 1_000_000}
    )
    assert message.startswith("Error: ")
    assert "999,999" in message


# -- create ---------------------------------------------------------------------------


def test_create_stores_the_file_and_reports_success(done, vault, call):
    assert done(command="create", path="/memories/notes.txt", file_text="hello\n") == (
        "File created successfully at: /memories/notes.txt"
    )
    assert vault.read("/memories/notes.txt") == "hello\n"
    assert (
        call(command="view", path="/memories/notes.txt")
        == FILE_HEADER.format("/memories/notes.txt") + "\n     1\thello"
    )


def test_create_implies_parent_folders(done, call, vault):
    done(command="create", path="/memories/a/b/c/note.md", file_text="x")
    assert vault.read("/memories/a/b/c/note.md") == "x"
    assert call(command="view", path="/memories/a").split("\n")[1:] == [
        "1B\t/memories/a",
        "1B\t/memories/a/b/",
        "1B\t/memories/a/b/c/",
    ]


def test_create_an_empty_file(done, call):
    done(command="create", path="/memories/empty.txt", file_text="")
    assert call(command="view", path="/memories/empty.txt") == FILE_HEADER.format("/memories/empty.txt")


def test_create_refuses_an_existing_file(refused, put, vault):
    put({"/memories/f.txt": "original"})
    assert (
        refused(command="create", path="/memories/f.txt", file_text="new")
        == "Error: File /memories/f.txt already exists"
    )
    assert vault.read("/memories/f.txt") == "original"


def test_create_refuses_an_existing_directory(refused, put):
    put({"/memories/d/f.txt": "x"})
    assert refused(command="create", path="/memories/d", file_text="new") == "Error: File /memories/d already exists"


@pytest.mark.parametrize("path", ["/memories/f.txt/x.txt", "/memories/f.txt/deeper/x.txt"])
def test_create_refuses_a_path_under_a_file(refused, put, path):
    put({"/memories/f.txt": "x"})
    assert refused(command="create", path=path, file_text="y").startswith("Error: ")


@pytest.mark.parametrize("path", ["/memories", "/memories/"])
def test_create_refuses_memories_itself(refused, path):
    assert refused(command="create", path=path, file_text="y").startswith("Error: ")


def test_create_refuses_a_path_ending_in_slash(refused):
    assert refused(command="create", path="/memories/new/", file_text="y").startswith("Error: ")


def test_create_accepts_a_file_of_exactly_the_default_limit(done, vault):
    done(command="create", path="/memories/max.txt", file_text="x" * 102_400)
    assert len(vault.read("/memories/max.txt")) == 102_400


@pytest.mark.parametrize(
    "file_text", ["x" * 102_401, "é" * 51_201, "😀" * 25_601], ids=["ascii", "two-byte", "four-byte"]
)
def test_create_over_the_default_limit_writes_nothing(refused, call, file_text):
    assert refused(command="create", path="/memories/big.txt", file_text=file_text).startswith("Error: ")
    with pytest.raises(ToolError):
        call(command="view", path="/memories/big.txt")


def test_create_respects_a_configured_size_limit(vault, vault_path):
    tool = with_limits(vault, max_file_bytes=10)
    succeed(tool, vault_path, {"command": "create", "path": "/memories/ten.txt", "file_text": "x" * 10})
    message = refuse(tool, vault_path, {"command": "create", "path": "/memories/eleven.txt", "file_text": "x" * 11})
    assert message.startswith("Error: ")
    refuse(tool, vault_path, {"command": "create", "path": "/memories/e.txt", "file_text": "é" * 6})


# -- str_replace -----------------------------------------------------------------------

SEVEN = "l1\nl2\nl3\nl4\nl5\nl6\nl7\n"


@pytest.fixture
def seven(put):
    put({"/memories/f.txt": SEVEN})


def test_str_replace_edits_and_shows_a_snippet_with_two_lines_of_context(done, vault, seven):
    result = done(command="str_replace", path="/memories/f.txt", old_str="l4", new_str="FOUR")
    assert result == EDITED + "     2\tl2\n     3\tl3\n     4\tFOUR\n     5\tl5\n     6\tl6"
    assert vault.read("/memories/f.txt") == SEVEN.replace("l4", "FOUR")


def test_str_replace_snippet_is_clipped_at_the_top_of_the_file(done, seven):
    result = done(command="str_replace", path="/memories/f.txt", old_str="l1", new_str="ONE")
    assert result == EDITED + "     1\tONE\n     2\tl2\n     3\tl3"


def test_str_replace_snippet_is_clipped_at_the_end_of_the_file(done, seven):
    result = done(command="str_replace", path="/memories/f.txt", old_str="l7", new_str="SEVEN")
    assert result == EDITED + "     5\tl5\n     6\tl6\n     7\tSEVEN"


def test_str_replace_snippet_covers_every_new_line(done, vault, seven):
    result = done(command="str_replace", path="/memories/f.txt", old_str="l4", new_str="A\nB\nC")
    assert result == EDITED + "     2\tl2\n     3\tl3\n     4\tA\n     5\tB\n     6\tC\n     7\tl5\n     8\tl6"
    assert vault.read("/memories/f.txt") == "l1\nl2\nl3\nA\nB\nC\nl5\nl6\nl7\n"


def test_str_replace_with_empty_new_str_deletes_the_text(done, vault, seven):
    result = done(command="str_replace", path="/memories/f.txt", old_str="l4\n", new_str="")
    assert vault.read("/memories/f.txt") == "l1\nl2\nl3\nl5\nl6\nl7\n"
    assert result.startswith(EDITED)
    assert "     4\tl5" in result


def test_str_replace_across_lines(done, vault, seven):
    done(command="str_replace", path="/memories/f.txt", old_str="l2\nl3", new_str="two-three")
    assert vault.read("/memories/f.txt") == "l1\ntwo-three\nl4\nl5\nl6\nl7\n"


def test_str_replace_is_verbatim_not_a_pattern(done, vault, put):
    put({"/memories/p.txt": "a.*b and (x)\n"})
    done(command="str_replace", path="/memories/p.txt", old_str="a.*b", new_str=r"$1 \1 \g<0>")
    assert vault.read("/memories/p.txt") == r"$1 \1 \g<0> and (x)" + "\n"


def test_str_replace_with_identical_text_still_commits(done, vault, seven):
    done(command="str_replace", path="/memories/f.txt", old_str="l4", new_str="l4")
    assert vault.read("/memories/f.txt") == SEVEN


def test_str_replace_not_found(refused, seven):
    assert refused(command="str_replace", path="/memories/f.txt", old_str="L4", new_str="x") == (
        "No replacement was performed, old_str `L4` did not appear verbatim in /memories/f.txt."
    )


def test_str_replace_refuses_multiple_occurrences_listing_their_lines(refused, put):
    put({"/memories/fruit.txt": "apple\nbanana\napricot\n"})
    assert refused(command="str_replace", path="/memories/fruit.txt", old_str="ap", new_str="x") == (
        "No replacement was performed. Multiple occurrences of old_str `ap` in lines: 1, 3. Please ensure it is unique"
    )


def test_str_replace_counts_overlapping_occurrences_as_multiple(refused, put):
    put({"/memories/a.txt": "aaa\n"})
    assert refused(command="str_replace", path="/memories/a.txt", old_str="aa", new_str="b") == (
        "No replacement was performed. Multiple occurrences of old_str `aa` in lines: 1, 1. Please ensure it is unique"
    )


def test_str_replace_on_a_missing_path(refused):
    assert refused(command="str_replace", path="/memories/nope.txt", old_str="a", new_str="b") == (
        "Error: The path /memories/nope.txt does not exist. Please provide a valid path."
    )


def test_str_replace_on_a_directory(refused, put):
    put({"/memories/d/f.txt": "a"})
    assert refused(command="str_replace", path="/memories/d", old_str="a", new_str="b") == (
        "Error: The path /memories/d does not exist. Please provide a valid path."
    )
    assert refused(command="str_replace", path="/memories", old_str="a", new_str="b") == (
        "Error: The path /memories does not exist. Please provide a valid path."
    )


def test_str_replace_on_a_file_with_trailing_slash(refused, seven):
    assert refused(command="str_replace", path="/memories/f.txt/", old_str="l1", new_str="b") == (
        "Error: The path /memories/f.txt/ does not exist. Please provide a valid path."
    )


def test_str_replace_refuses_an_empty_old_str(refused, seven):
    assert refused(command="str_replace", path="/memories/f.txt", old_str="", new_str="x").startswith("Error: ")


def test_str_replace_refuses_a_result_over_the_size_limit(vault, vault_path):
    tool = with_limits(vault, max_file_bytes=100)
    succeed(tool, vault_path, {"command": "create", "path": "/memories/f.txt", "file_text": "x" * 90 + "\nEND\n"})
    params = {"command": "str_replace", "path": "/memories/f.txt", "old_str": "END", "new_str": "y" * 20}
    assert refuse(tool, vault_path, params).startswith("Error: ")
    assert vault.read("/memories/f.txt") == "x" * 90 + "\nEND\n"


# -- insert ------------------------------------------------------------------------------


@pytest.fixture
def two(put):
    put({"/memories/f.txt": "a\nb\n"})


@pytest.mark.parametrize(("line", "result"), [(0, "x\na\nb\n"), (1, "a\nx\nb\n"), (2, "a\nb\nx\n")])
def test_insert_puts_the_text_after_the_given_line(done, vault, two, line, result):
    assert done(command="insert", path="/memories/f.txt", insert_line=line, insert_text="x") == (
        "The file /memories/f.txt has been edited."
    )
    assert vault.read("/memories/f.txt") == result


@pytest.mark.parametrize("line", [3, -1, 100])
def test_insert_refuses_a_line_outside_the_file(refused, two, line):
    assert refused(command="insert", path="/memories/f.txt", insert_line=line, insert_text="x") == (
        f"Error: Invalid `insert_line` parameter: {line}. It should be within the range of lines of the file: [0, 2]"
    )


def test_insert_into_an_empty_file(done, refused, vault, put):
    put({"/memories/e.txt": ""})
    assert refused(command="insert", path="/memories/e.txt", insert_line=1, insert_text="x") == (
        "Error: Invalid `insert_line` parameter: 1. It should be within the range of lines of the file: [0, 0]"
    )
    done(command="insert", path="/memories/e.txt", insert_line=0, insert_text="x")
    assert vault.read("/memories/e.txt") == "x\n"


def test_insert_on_a_missing_path(refused):
    assert refused(command="insert", path="/memories/nope.txt", insert_line=0, insert_text="x") == (
        "Error: The path /memories/nope.txt does not exist"
    )


def test_insert_on_a_directory(refused, put):
    put({"/memories/d/f.txt": "a"})
    assert refused(command="insert", path="/memories/d", insert_line=0, insert_text="x") == (
        "Error: The path /memories/d does not exist"
    )
    assert refused(command="insert", path="/memories", insert_line=0, insert_text="x") == (
        "Error: The path /memories does not exist"
    )


@pytest.mark.parametrize(
    ("content", "line", "addition", "result"),
    [
        ("a\nb\n", 1, "x\n", "a\nx\nb\n"),
        ("a\nb\n", 1, "x\ny", "a\nx\ny\nb\n"),
        ("a\nb\n", 1, "x\ny\n", "a\nx\ny\nb\n"),
        ("a\nb\n", 1, "", "a\n\nb\n"),
        ("a\nb\n", 2, "", "a\nb\n\n"),
        ("a\nb", 1, "x", "a\nx\nb"),
        ("a\nb", 2, "x", "a\nb\nx"),
        ("a\nb", 2, "x\n", "a\nb\nx"),
        ("a\nb", 2, "x\ny\n", "a\nb\nx\ny"),
        ("a\r\nb\r\n", 1, "x", "a\r\nx\nb\r\n"),
        ("a\r\nb\r\n", 2, "x\r\n", "a\r\nb\r\nx\r\n"),
    ],
)
def test_insert_final_newline_rules(done, vault, put, content, line, addition, result):
    put({"/memories/f.txt": content})
    done(command="insert", path="/memories/f.txt", insert_line=line, insert_text=addition)
    assert vault.read("/memories/f.txt") == result


def test_insert_empty_text_after_a_last_line_without_newline_adds_one_empty_line(done, call, put):
    put({"/memories/f.txt": "a\nb"})
    done(command="insert", path="/memories/f.txt", insert_line=2, insert_text="")
    assert call(command="view", path="/memories/f.txt").split("\n")[1:] == ["     1\ta", "     2\tb", "     3\t"]


def test_insert_refuses_a_result_over_the_size_limit(vault, vault_path):
    tool = with_limits(vault, max_file_bytes=100)
    succeed(tool, vault_path, {"command": "create", "path": "/memories/f.txt", "file_text": "x" * 95 + "\n"})
    params = {"command": "insert", "path": "/memories/f.txt", "insert_line": 1, "insert_text": "y" * 10}
    assert refuse(tool, vault_path, params).startswith("Error: ")
    assert vault.read("/memories/f.txt") == "x" * 95 + "\n"


@pytest.mark.parametrize("line", ["1", 1.5, True, [1]])
def test_insert_refuses_a_mistyped_line(refused, two, line):
    assert refused(command="insert", path="/memories/f.txt", insert_line=line, insert_text="x").startswith("Error: ")


# -- delete ------------------------------------------------------------------------------


def test_delete_a_file(done, refused, put, vault):
    put({"/memories/f.txt": "x", "/memories/g.txt": "y"})
    assert done(command="delete", path="/memories/f.txt") == "Successfully deleted /memories/f.txt"
    assert refused(command="view", path="/memories/f.txt").startswith("The path /memories/f.txt does not exist")
    assert vault.read("/memories/g.txt") == "y"


def test_delete_a_directory_with_everything_below_it(done, call, put, vault, vault_path):
    put({"/memories/d/a.txt": "1", "/memories/d/sub/b.txt": "2", "/memories/d/.h": "3", "/memories/keep.txt": "4"})
    assert done(command="delete", path="/memories/d") == "Successfully deleted /memories/d"
    assert stored_files(vault, vault_path) == {"/memories/keep.txt": "4"}
    assert call(command="view", path="/memories").split("\n")[1:] == ["1B\t/memories", "1B\t/memories/keep.txt"]


def test_delete_a_directory_named_with_trailing_slash(done, put, vault, vault_path):
    put({"/memories/d/a.txt": "1", "/memories/e.txt": "2"})
    assert done(command="delete", path="/memories/d/") == "Successfully deleted /memories/d/"
    assert stored_files(vault, vault_path) == {"/memories/e.txt": "2"}


def test_deleting_the_last_file_of_a_folder_removes_the_folder(done, refused, put):
    put({"/memories/d/only.txt": "x", "/memories/e.txt": "y"})
    done(command="delete", path="/memories/d/only.txt")
    assert (
        refused(command="view", path="/memories/d")
        == "The path /memories/d does not exist. Please provide a valid path."
    )


def test_delete_a_missing_path(refused, put):
    put({"/memories/f.txt": "x"})
    assert refused(command="delete", path="/memories/nope") == "Error: The path /memories/nope does not exist"
    assert refused(command="delete", path="/memories/f.txt/") == "Error: The path /memories/f.txt/ does not exist"


@pytest.mark.parametrize("path", ["/memories", "/memories/"])
def test_delete_refuses_memories_itself(refused, put, path):
    put({"/memories/f.txt": "x"})
    assert refused(command="delete", path=path).startswith("Error: ")


# -- rename ------------------------------------------------------------------------------


def test_rename_a_file(done, put, vault, vault_path):
    put({"/memories/a.txt": "content\n"})
    assert done(command="rename", old_path="/memories/a.txt", new_path="/memories/b.txt") == (
        "Successfully renamed /memories/a.txt to /memories/b.txt"
    )
    assert stored_files(vault, vault_path) == {"/memories/b.txt": "content\n"}


def test_rename_a_directory_with_its_contents(done, put, vault, vault_path):
    put({"/memories/d/a.txt": "1", "/memories/d/sub/b.txt": "2", "/memories/d/.h": "3", "/memories/x.txt": "4"})
    assert done(command="rename", old_path="/memories/d", new_path="/memories/e") == (
        "Successfully renamed /memories/d to /memories/e"
    )
    assert stored_files(vault, vault_path) == {
        "/memories/e/a.txt": "1",
        "/memories/e/sub/b.txt": "2",
        "/memories/e/.h": "3",
        "/memories/x.txt": "4",
    }


def test_rename_implies_parent_folders(done, put, vault, vault_path):
    put({"/memories/a.txt": "x"})
    done(command="rename", old_path="/memories/a.txt", new_path="/memories/p/q/a.txt")
    assert stored_files(vault, vault_path) == {"/memories/p/q/a.txt": "x"}


def test_rename_refuses_a_missing_source(refused):
    assert refused(command="rename", old_path="/memories/nope", new_path="/memories/b") == (
        "Error: The path /memories/nope does not exist"
    )


def test_rename_refuses_existing_destination(refused, put):
    put({"/memories/a.txt": "a", "/memories/b.txt": "b", "/memories/d/x": "x"})
    assert refused(command="rename", old_path="/memories/a.txt", new_path="/memories/b.txt") == (
        "Error: The destination /memories/b.txt already exists"
    )
    assert refused(command="rename", old_path="/memories/a.txt", new_path="/memories/d") == (
        "Error: The destination /memories/d already exists"
    )


def test_rename_checks_the_source_before_the_destination(refused, put):
    put({"/memories/b.txt": "b"})
    assert refused(command="rename", old_path="/memories/nope", new_path="/memories/b.txt") == (
        "Error: The path /memories/nope does not exist"
    )


def test_rename_checks_both_paths_are_valid_before_the_source_exists(refused):
    message = refused(command="rename", old_path="/memories/nope", new_path="/memories/../x")
    assert message.startswith("Error: ")
    assert "does not exist" not in message


def test_rename_checks_the_destination_is_free_before_the_rest(refused, put):
    put({"/memories/d/sub/x": "x", "/memories/f.txt": "f"})
    # into itself, but the destination exists: the destination error comes first
    assert refused(command="rename", old_path="/memories/d", new_path="/memories/d/sub") == (
        "Error: The destination /memories/d/sub already exists"
    )
    assert refused(command="rename", old_path="/memories/d", new_path="/memories/d") == (
        "Error: The destination /memories/d already exists"
    )
    # renaming /memories to an existing destination: the destination error comes first
    assert refused(command="rename", old_path="/memories", new_path="/memories/f.txt") == (
        "Error: The destination /memories/f.txt already exists"
    )


def test_rename_refuses_moving_a_directory_into_itself(refused, put):
    put({"/memories/d/x.txt": "x"})
    assert refused(command="rename", old_path="/memories/d", new_path="/memories/d/inner").startswith("Error: ")
    assert refused(command="rename", old_path="/memories/d", new_path="/memories/d/a/b").startswith("Error: ")


@pytest.mark.parametrize("old", ["/memories", "/memories/"])
def test_rename_refuses_memories_itself(refused, put, old):
    put({"/memories/x.txt": "x"})
    assert refused(command="rename", old_path=old, new_path="/memories/elsewhere").startswith("Error: ")


def test_rename_refuses_a_destination_under_a_file(refused, put):
    put({"/memories/f.txt": "f", "/memories/d/x.txt": "x", "/memories/g.txt": "g"})
    assert refused(command="rename", old_path="/memories/d", new_path="/memories/f.txt/d").startswith("Error: ")
    assert refused(command="rename", old_path="/memories/g.txt", new_path="/memories/f.txt/a/g").startswith("Error: ")


def test_rename_a_directory_named_with_trailing_slashes(done, put, vault, vault_path):
    put({"/memories/d/x.txt": "x"})
    assert done(command="rename", old_path="/memories/d/", new_path="/memories/e/") == (
        "Successfully renamed /memories/d/ to /memories/e/"
    )
    assert stored_files(vault, vault_path) == {"/memories/e/x.txt": "x"}


# -- every command: malformed input ------------------------------------------------------

VALID = {
    "view": {"command": "view", "path": "/memories/f.txt"},
    "create": {"command": "create", "path": "/memories/new.txt", "file_text": "x"},
    "str_replace": {"command": "str_replace", "path": "/memories/f.txt", "old_str": "a", "new_str": "b"},
    "insert": {"command": "insert", "path": "/memories/f.txt", "insert_line": 0, "insert_text": "x"},
    "delete": {"command": "delete", "path": "/memories/f.txt"},
    "rename": {"command": "rename", "old_path": "/memories/f.txt", "new_path": "/memories/g.txt"},
}
MISSING = [(cmd, name) for cmd, params in VALID.items() for name in params if name != "command"]
MISTYPED_VALUES = [123, None, ["x"], {"x": 1}, True, 1.5]


@pytest.fixture
def base(put):
    put({"/memories/f.txt": "a\n"})


@pytest.mark.parametrize(("command", "name"), MISSING)
def test_missing_parameter_is_an_error(refused, base, command, name):
    params = {k: v for k, v in VALID[command].items() if k != name}
    message = refused(**params)
    assert message.startswith("Error: ")
    assert name in message


MISTYPED = [(cmd, name, value) for cmd, name in MISSING for value in MISTYPED_VALUES]


@pytest.mark.parametrize(("command", "name", "value"), MISTYPED, ids=[f"{c}-{n}-{v!r}" for c, n, v in MISTYPED])
def test_mistyped_parameter_is_an_error(refused, base, command, name, value):
    params = {**VALID[command], name: value}
    assert refused(**params).startswith("Error: ")


@pytest.mark.parametrize("command", list(VALID))
def test_unexpected_parameter_is_an_error(refused, base, command):
    message = refused(**VALID[command], recursive=True)
    assert message.startswith("Error: ")
    assert "recursive" in message


@pytest.mark.parametrize("command", ["list", "read", "VIEW", "", "str-replace", 5, None, ["view"]])
def test_unknown_command_is_an_error(tool, vault_path, base, command):
    message = refuse(tool, vault_path, {"command": command, "path": "/memories/f.txt"})
    assert message.startswith("Error: ")


def test_missing_command_is_an_error(refused, base):
    assert refused(path="/memories/f.txt").startswith("Error: ")


@pytest.mark.parametrize("raw", [None, "view", ["view", "/memories"], 42, ("command", "view"), b"{}", object()])
def test_non_object_input_is_an_error(tool, vault_path, base, raw):
    assert refuse(tool, vault_path, raw).startswith("Error: ")


def test_sdk_command_objects_are_accepted(tool, vault):
    created = tool.create(BetaMemoryTool20250818CreateCommand(command="create", path="/memories/s.txt", file_text="s"))
    assert created == "File created successfully at: /memories/s.txt"
    shown = tool.view(BetaMemoryTool20250818ViewCommand(command="view", path="/memories/s.txt"))
    assert shown == FILE_HEADER.format("/memories/s.txt") + "\n     1\ts"


# -- Unicode, spelling and content round trips ------------------------------------------

NFC = "/memories/caf\u00e9.txt"
NFD = unicodedata.normalize("NFD", NFC)


def test_nfc_and_nfd_spellings_reach_the_same_file(done, refused, call, vault, vault_path):
    assert NFC != NFD
    assert done(command="create", path=NFC, file_text="one\n") == f"File created successfully at: {NFC}"
    assert call(command="view", path=NFD) == FILE_HEADER.format(NFD) + "\n     1\tone"
    assert refused(command="create", path=NFD, file_text="two") == f"Error: File {NFD} already exists"
    done(command="str_replace", path=NFD, old_str="one", new_str="uno")
    assert vault.read(NFC) == "uno\n"
    assert vault.read(NFD) == "uno\n"
    assert done(command="rename", old_path=NFD, new_path="/memories/renamed.txt") == (
        f"Successfully renamed {NFD} to /memories/renamed.txt"
    )
    assert stored_files(vault, vault_path) == {"/memories/renamed.txt": "uno\n"}


def test_messages_echo_the_path_exactly_as_sent(done, refused, call, put):
    put({"/memories/Dir/f.txt": "x\n"})
    assert call(command="view", path="/memories/Dir/").startswith(DIR_HEADER.format("/memories/Dir/"))
    assert refused(command="view", path=NFD + "x") == f"The path {NFD}x does not exist. Please provide a valid path."
    assert refused(command="delete", path=NFD) == f"Error: The path {NFD} does not exist"
    assert (
        refused(command="insert", path=NFD, insert_line=0, insert_text="x") == f"Error: The path {NFD} does not exist"
    )
    assert done(command="insert", path="/memories/Dir/f.txt", insert_line=0, insert_text="y") == (
        "The file /memories/Dir/f.txt has been edited."
    )


def test_paths_are_case_sensitive(done, refused, vault, vault_path):
    done(command="create", path="/memories/Notes.txt", file_text="upper")
    done(command="create", path="/memories/notes.txt", file_text="lower")
    assert stored_files(vault, vault_path) == {"/memories/Notes.txt": "upper", "/memories/notes.txt": "lower"}
    assert refused(command="view", path="/memories/NOTES.txt").startswith("The path /memories/NOTES.txt does not exist")


@pytest.mark.parametrize(
    "content",
    [
        "日本語のメモ\n😀 emoji\nمرحبا بالعالم\ne\u0301 stays decomposed\n",
        "a\x00b\n\x00\n",
        "a\r\nb\r\n",
        "mixed\r\nendings\nand\rcr",
        "\ufeffbom and \u200b zero width",
        "\t  indented\n\n\n",
    ],
    ids=["unicode", "nul", "crlf", "mixed", "format-chars", "whitespace"],
)
def test_content_round_trips_exactly(done, call, vault, content):
    done(command="create", path="/memories/c.txt", file_text=content)
    assert vault.read("/memories/c.txt") == content
    lines = content.split("\n")
    if lines[-1] == "":
        lines.pop()
    assert call(command="view", path="/memories/c.txt") == "\n".join(
        [FILE_HEADER.format("/memories/c.txt")] + [f"{i:>6}\t{line}" for i, line in enumerate(lines, 1)]
    )


def test_edits_keep_crlf_and_nul_bytes(done, vault, put):
    put({"/memories/c.txt": "a\r\nb\x00c\r\nd\r\n"})
    done(command="str_replace", path="/memories/c.txt", old_str="b\x00c", new_str="B\x00C")
    done(command="insert", path="/memories/c.txt", insert_line=3, insert_text="e\r\n")
    assert vault.read("/memories/c.txt") == "a\r\nB\x00C\r\nd\r\ne\r\n"


def test_text_that_is_not_valid_unicode_is_an_error(refused, put):
    put({"/memories/f.txt": "a\n"})
    assert refused(command="create", path="/memories/s.txt", file_text="bad \ud800").startswith("Error: ")
    assert refused(command="str_replace", path="/memories/f.txt", old_str="a", new_str="\udfff").startswith("Error: ")
    assert refused(command="insert", path="/memories/f.txt", insert_line=0, insert_text="\ud800").startswith("Error: ")


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.sampled_from(["/memories", "/memories/f.txt", "/memories/d/", "/memories/../x", "", "\ud800"]),
    st.lists(st.one_of(st.integers(-3, 10**12), st.text(max_size=3), st.none()), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
_KEYS = st.sampled_from(
    [
        "command",
        "path",
        "file_text",
        "old_str",
        "new_str",
        "insert_line",
        "insert_text",
        "old_path",
        "new_path",
        "view_range",
        "extra",
    ]
)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    command=st.one_of(st.sampled_from([*VALID, "bogus"]), _VALUES),
    params=st.dictionaries(_KEYS, _VALUES, max_size=5),
)
def test_any_input_gives_a_result_or_a_tool_error_never_another_exception(tool, base, command, params):
    try:
        result = tool.call({**params, "command": command})
    except ToolError as err:
        assert isinstance(err.content, str) and err.content
    else:
        assert isinstance(result, str)
