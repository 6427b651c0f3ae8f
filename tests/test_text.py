"""The pure text rules of the memory tool: sizes, lines, numbering, caps, insert, matches."""

from __future__ import annotations

import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from vaultmem.core import text

# -- format_size -------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "shown"),
    [
        (0, "0B"),
        (1, "1B"),
        (512, "512B"),
        (1023, "1023B"),
        (1024, "1.0K"),
        (1536, "1.5K"),
        (4096, "4.0K"),
        (10 * 1024 + 512, "10.5K"),
        (1024 * 1024, "1.0M"),
        (int(1.2 * 1024 * 1024), "1.2M"),
        (1024**3, "1.0G"),
        (int(2.5 * 1024**3), "2.5G"),
    ],
)
def test_format_size_is_human_readable_and_1024_based(n, shown):
    assert text.format_size(n) == shown


def test_format_size_keeps_gigabytes_for_huge_sizes():
    assert text.format_size(5 * 1024**4) == "5120.0G"


def test_format_size_below_1024_is_whole_bytes_without_decimal():
    for n in range(1024):
        assert text.format_size(n) == f"{n}B"


def test_format_size_from_1024_always_has_one_decimal_and_a_unit():
    for n in (1024, 1025, 2047, 65_536, 999_999, 10**7, 10**9, 10**10):
        shown = text.format_size(n)
        number, unit = shown[:-1], shown[-1]
        assert unit in "KMG"
        whole, _, decimal = number.partition(".")
        assert whole.isdigit() and len(decimal) == 1 and decimal.isdigit(), shown


# -- split_lines / count_lines ------------------------------------------------


@pytest.mark.parametrize(
    ("content", "lines"),
    [
        ("", []),
        ("\n", [""]),
        ("\n\n", ["", ""]),
        ("a", ["a"]),
        ("a\n", ["a"]),
        ("a\nb", ["a", "b"]),
        ("a\nb\n", ["a", "b"]),
        ("a\n\n", ["a", ""]),
        ("a\n\nb", ["a", "", "b"]),
        ("a\r\nb\r\n", ["a\r", "b\r"]),
        ("a\rb", ["a\rb"]),
        (" \t \n", [" \t "]),
    ],
)
def test_split_lines_splits_on_newline_without_an_extra_line_for_a_final_newline(content, lines):
    assert text.split_lines(content) == lines
    assert text.count_lines(content) == len(lines)


def test_empty_file_has_no_lines():
    assert text.split_lines("") == []
    assert text.count_lines("") == 0


def test_a_lone_newline_is_one_empty_line():
    assert text.split_lines("\n") == [""]
    assert text.count_lines("\n") == 1


def test_split_lines_keeps_carriage_returns():
    assert text.split_lines("one\r\ntwo\r\n") == ["one\r", "two\r"]
    assert text.count_lines("one\r\ntwo\r\n") == 2


def test_split_lines_does_not_split_on_other_line_breaks():
    content = "a\u2028b\x0bc\x0cd\x1ce\x85f"
    assert text.split_lines(content) == [content]
    assert text.count_lines(content) == 1


@settings(max_examples=examples(200), deadline=None)
@given(st.text(alphabet=st.sampled_from("ab\n\r é")))
def test_count_lines_matches_split_lines_and_joining_restores_the_text(content):
    lines = text.split_lines(content)
    assert text.count_lines(content) == len(lines)
    joined = "\n".join(lines)
    assert joined == content or joined + "\n" == content


# -- numbered / capped_lines ---------------------------------------------------


def test_numbered_right_aligns_in_six_characters_then_a_tab():
    assert text.numbered(1, "x") == "     1\tx"
    assert text.numbered(42, "") == "    42\t"
    assert text.numbered(999_999, "end") == "999999\tend"


def test_capped_lines_stops_at_a_whole_line_within_the_cap():
    lines = [f"line {i}" for i in range(1, 21)]
    rendered, covered = text.capped_lines(lines, 1, 50)
    assert 0 < covered < len(lines)
    assert rendered == [text.numbered(i + 1, lines[i]) for i in range(covered)]
    assert len("\n".join(rendered)) <= 50
    # One more whole line would have passed the cap.
    assert len("\n".join([*rendered, text.numbered(covered + 1, lines[covered])])) > 50


def test_capped_lines_numbers_from_the_first_line_given():
    rendered, covered = text.capped_lines(["a", "b"], 7, 1000)
    assert rendered == ["     7\ta", "     8\tb"]
    assert covered == 2


def test_capped_lines_always_makes_progress_on_a_line_longer_than_the_cap():
    rendered, covered = text.capped_lines(["x" * 500, "y"], 3, 100)
    assert covered == 1
    assert len(rendered) == 1
    assert rendered[0].startswith("     3\t")


# -- insert_text --------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "after", "addition", "result"),
    [
        ("a\nb\n", 0, "x", "x\na\nb\n"),
        ("a\nb\n", 1, "x", "a\nx\nb\n"),
        ("a\nb\n", 2, "x", "a\nb\nx\n"),
        ("a\nb\n", 1, "x\n", "a\nx\nb\n"),
        ("a\nb\n", 1, "x\ny", "a\nx\ny\nb\n"),
        ("a\nb\n", 1, "x\ny\n", "a\nx\ny\nb\n"),
        ("a\nb\n", 1, "x\n\n", "a\nx\n\nb\n"),
        ("a\nb", 1, "x", "a\nx\nb"),
        ("a\nb", 0, "x", "x\na\nb"),
        ("a\nb", 2, "x", "a\nb\nx"),
        ("", 0, "x", "x\n"),
        ("", 0, "x\n", "x\n"),
    ],
)
def test_insert_text_adds_whole_lines_after_the_given_line(content, after, addition, result):
    assert text.insert_text(content, after, addition) == result


def test_insert_text_after_last_line_without_final_newline_keeps_none():
    # Decision: inserting after the last line of a file with no final newline
    # keeps the file without a final newline; a final newline in the text adds
    # no empty line.
    assert text.insert_text("a\nb", 2, "x") == "a\nb\nx"
    assert text.insert_text("a\nb", 2, "x\n") == "a\nb\nx"
    assert text.insert_text("a\nb", 2, "x\ny\n") == "a\nb\nx\ny"


def test_insert_empty_text_inserts_one_empty_line():
    assert text.insert_text("a\nb\n", 1, "") == "a\n\nb\n"
    assert text.insert_text("a\nb\n", 0, "") == "\na\nb\n"
    assert text.insert_text("a\nb\n", 2, "") == "a\nb\n\n"
    assert text.split_lines(text.insert_text("a\nb", 2, "")) == ["a", "b", ""]


def test_insert_text_keeps_the_rest_of_the_file_byte_for_byte():
    assert text.insert_text("a\r\nb\r\n", 1, "x") == "a\r\nx\nb\r\n"
    assert text.insert_text("a\r\nb\r\n", 2, "x") == "a\r\nb\r\nx\n"
    assert text.insert_text("  a  \n\tb\n", 1, "x") == "  a  \nx\n\tb\n"


@settings(max_examples=examples(150), deadline=None)
@given(
    st.lists(st.text(alphabet="ab \r", max_size=4), max_size=6),
    st.booleans(),
    st.lists(st.text(alphabet="xy \r", max_size=4), min_size=1, max_size=3),
    st.data(),
)
def test_insert_text_lines_land_after_the_given_line(lines, final_newline, new_lines, data):
    content = "\n".join(lines) + ("\n" if final_newline and lines else "")
    total = text.count_lines(content)
    after = data.draw(st.integers(min_value=0, max_value=total))
    addition = "\n".join(new_lines)
    result = text.insert_text(content, after, addition)
    old = text.split_lines(content)
    inserted = text.split_lines(addition) or [""]  # empty text is one empty line
    assert text.split_lines(result) == old[:after] + inserted + old[after:]


# -- match_lines ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "needle", "lines"),
    [
        ("apple\nbanana\napricot\n", "ap", [1, 3]),
        ("a\nb\na", "a", [1, 3]),
        ("x\ny\n", "z", []),
        ("one two one", "one", [1, 1]),
        ("aaa", "aa", [1, 1]),
        ("a\nb\nc", "b\nc", [2]),
        ("a\r\nb\r\n", "\r\nb", [1]),
        ("\n\nz", "z", [3]),
    ],
)
def test_match_lines_gives_the_starting_line_of_every_occurrence(content, needle, lines):
    assert text.match_lines(content, needle) == lines


def test_match_lines_counts_overlapping_occurrences():
    assert text.match_lines("l1\nxaaaax\n", "aa") == [2, 2, 2]
