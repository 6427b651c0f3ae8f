"""The path rules of SPEC.md ('Paths'), on the pure parser: no disk involved."""

from __future__ import annotations

import re
import unicodedata

import pytest

from vaultmem import InvalidPathError, VaultError
from vaultmem.core.paths import MemoryPath, parse, parse_stored

NFC = "/memories/caf\u00e9/r\u00e9sum\u00e9.txt"
NFD = unicodedata.normalize("NFD", NFC)


# -- what is accepted -----------------------------------------------------------


def test_root_is_the_empty_path():
    root = parse("/memories")
    assert root.is_root
    assert root.parts == ()
    assert root.text == "/memories"


def test_root_with_one_trailing_slash_is_the_root_as_a_directory():
    root = parse("/memories/")
    assert root.is_root
    assert root.dir_hint
    assert root.text == "/memories"


def test_a_file_path_keeps_its_segments():
    path = parse("/memories/projects/alpha/notes.md")
    assert path.parts == ("projects", "alpha", "notes.md")
    assert path.text == "/memories/projects/alpha/notes.md"
    assert str(path) == path.text
    assert not path.dir_hint


def test_one_trailing_slash_asserts_a_directory_and_is_dropped_from_the_text():
    path = parse("/memories/projects/")
    assert path.dir_hint
    assert path.parts == ("projects",)
    assert path.text == "/memories/projects"


def test_nfc_and_nfd_spellings_give_the_same_memory_path():
    assert NFC != NFD
    assert parse(NFC) == parse(NFD)
    assert parse(NFD).text == NFC
    assert all(unicodedata.is_normalized("NFC", part) for part in parse(NFD).parts)


def test_paths_are_case_sensitive():
    assert parse("/memories/Notes.txt") != parse("/memories/notes.txt")
    assert parse("/memories/Notes.txt").text == "/memories/Notes.txt"


def test_ordinary_names_are_accepted():
    for name in (
        "notes.txt",
        "a b c.md",
        "日本語のメモ.txt",
        "ünïcödé",
        "emoji-😀.md",
        "-dash",
        "x" * 255,
        "é" * 127,
        "100%",
        "50%off",
        "a%20b",
        ".hidden",
        "..three",
        "...",
        "a..b",
        "~tilde",
        "semi;colon",
        "nbsp\u00a0name",
    ):
        assert parse(f"/memories/{name}").parts == (name,)


def test_a_segment_of_exactly_255_bytes_is_accepted():
    assert parse("/memories/" + "a" * 255).parts == ("a" * 255,)


def test_a_path_of_exactly_1024_bytes_is_accepted():
    path = "/memories/" + "/".join(["a" * 200] * 5)
    path += "/" + "b" * (1024 - len(path.encode()) - 1)
    assert len(path.encode()) == 1024
    assert parse(path).text == path


def test_byte_limits_apply_after_nfc_normalisation():
    # 127 decomposed "é" are 381 bytes in NFD but 254 bytes in NFC.
    segment = unicodedata.normalize("NFD", "é" * 127)
    assert len(segment.encode()) > 255
    assert parse("/memories/" + segment).parts == ("é" * 127,)


def test_memory_path_helpers_follow_the_tree():
    path = parse("/memories/a/b/c.txt")
    assert path.name == "c.txt"
    assert path.parent == parse("/memories/a/b")
    assert parse("/memories/a").child("x") == parse("/memories/a/x")
    assert path.is_within(parse("/memories/a"))
    assert path.is_within(parse("/memories"))
    assert not parse("/memories/ab").is_within(parse("/memories/a"))
    assert path.git_path() == "memories/a/b/c.txt"


# -- what is refused, each rule named -------------------------------------------

# (payload, a pattern the message must match to name the rule)
REFUSALS: list[tuple[object, str]] = [
    # not a path under /memories
    ("/memoriesX", r"/memories"),
    ("/memories2/a", r"/memories"),
    ("/memories.txt", r"/memories"),
    ("memories/a", r"/memories"),
    ("a.txt", r"/memories"),
    ("/etc/passwd", r"/memories"),
    ("/", r"/memories"),
    ("//memories", r"/memories"),
    ("/MEMORIES/a", r"/memories"),
    ("/Memories", r"/memories"),
    ("~/x", r"/memories"),
    ("file:///memories/a", r"/memories"),
    (" /memories/a", r"/memories"),
    # empty
    ("", r"empty"),
    # '.' and '..' segments, wherever they are
    ("/memories/..", r"'\.\.'|\.\."),
    ("/memories/../x", r"'\.\.'|\.\."),
    ("/memories/a/../../etc", r"'\.\.'|\.\."),
    ("/memories/a/../b", r"'\.\.'|\.\."),
    ("/memories/.", r"'\.'"),
    ("/memories/./a", r"'\.'"),
    ("/memories/a/.", r"'\.'"),
    ("/memories/a/./", r"'\.'"),
    # backslashes
    ("/memories/a\\b", r"backslash"),
    ("/memories\\a", r"backslash"),
    ("/memories/..\\x", r"backslash"),
    # control characters (Cc)
    ("/memories/a\x00b", r"control"),
    ("/memories/a\x01", r"control"),
    ("/memories/a\x1f", r"control"),
    ("/memories/\x7f", r"control"),
    ("/memories/a\nb", r"control"),
    ("/memories/a\tb", r"control"),
    ("/memories/a\rb", r"control"),
    ("/memories/a\x85b", r"control"),
    ("/memories/\x1b[31mred", r"control"),
    # invisible format characters (Cf)
    ("/memories/a\u200bb", r"invisible|format|zero-width|bidi"),
    ("/memories/a\u200db", r"invisible|format|zero-width|bidi"),
    ("/memories/\u202etxt.exe", r"invisible|format|zero-width|bidi"),
    ("/memories/\u2066a", r"invisible|format|zero-width|bidi"),
    ("/memories/\ufeffa", r"invisible|format|zero-width|bidi"),
    ("/memories/soft\u00adhyphen", r"invisible|format|zero-width|bidi"),
    # line and paragraph separators (Zl, Zp): a path is one line in every log and trailer
    ("/memories/a\u2028b", r"line and paragraph separators"),
    ("/memories/a\u2029b", r"line and paragraph separators"),
    ("/memories/\u2028", r"line and paragraph separators"),
    ("/memories/notes.txt\u2028", r"line and paragraph separators"),
    ("/memories/\u2029/notes.txt", r"line and paragraph separators"),
    ("/memories/a/b\u2028c/d.md", r"line and paragraph separators"),
    ("/memories\u2028/a", r"line and paragraph separators"),
    ("/memories/a%E2%80%A8b", r"line and paragraph separators"),
    ("/memories/a%e2%80%a9b", r"line and paragraph separators"),
    ("/memories/a%25E2%2580%25A8b", r"line and paragraph separators"),
    # percent-encoded traversal, any case, decoded once or twice
    ("/memories/%2e%2e%2fetc", r"percent|encoded"),
    ("/memories/%2E%2E%2Fetc", r"percent|encoded"),
    ("/memories/%2E%2e%2Fetc", r"percent|encoded"),
    ("/memories/%2e", r"percent|encoded"),
    ("/memories/a%2fb", r"percent|encoded"),
    ("/memories/a%2Fb", r"percent|encoded"),
    ("/memories/a%5cb", r"percent|encoded"),
    ("/memories/a%5Cb", r"percent|encoded"),
    ("/memories/%252e%252e%252fetc", r"percent|encoded"),
    ("/memories/%252E%252E%252F", r"percent|encoded"),
    ("/memories/a%255cb", r"percent|encoded"),
    # empty segments other than one trailing slash
    ("/memories//a", r"empty"),
    ("/memories/a//b", r"empty"),
    ("/memories/a//", r"empty"),
    ("/memories//", r"empty"),
    # lengths in UTF-8 bytes
    ("/memories/" + "a" * 256, r"255"),
    ("/memories/" + "é" * 128, r"255"),
    ("/memories/" + "/".join(["a" * 200] * 5) + "/" + "b" * 10, r"1,?024"),  # 1,025 bytes
    # not a string
    (None, r"string"),
    (123, r"string"),
    (["/memories"], r"string"),
    (b"/memories/a", r"string"),
]


def _id(value: object) -> str:
    return ascii(value)[:40]


@pytest.mark.parametrize(("payload", "rule"), REFUSALS, ids=[_id(p) for p, _ in REFUSALS])
def test_refusal_names_the_rule(payload, rule):
    with pytest.raises(InvalidPathError) as info:
        parse(payload)
    message = str(info.value)
    assert message.startswith("Error: ")
    assert re.search(rule, message, re.IGNORECASE), message


@pytest.mark.parametrize(("payload", "rule"), REFUSALS, ids=[_id(p) for p, _ in REFUSALS])
def test_refusal_is_a_vault_error(payload, rule):
    with pytest.raises(VaultError):
        parse(payload)


def test_the_1025_byte_path_is_refused_where_1024_is_not():
    path = "/memories/" + "/".join(["a" * 200] * 5)
    path += "/" + "b" * (1024 - len(path.encode()) - 1)
    assert parse(path)
    with pytest.raises(InvalidPathError, match=r"1,?024"):
        parse(path + "c")


def test_a_256_byte_segment_is_refused_where_255_is_not():
    assert parse("/memories/d/" + "a" * 255)
    with pytest.raises(InvalidPathError, match="255"):
        parse("/memories/d/" + "a" * 256 + "/x")


def test_a_lone_surrogate_is_refused():
    with pytest.raises(InvalidPathError):
        parse("/memories/a\ud800b")


def test_dot_git_is_reserved_in_any_spelling():
    for payload in ("/memories/.git", "/memories/.git/x", "/memories/a/.GIT/config", "/memories/.Git./x"):
        with pytest.raises(InvalidPathError, match=r"\.git"):
            parse(payload)


def test_dot_git_with_an_ntfs_stream_is_reserved_as_git_fsck_reads_it():
    for payload in (
        "/memories/.git:x",
        "/memories/a/git~1::$INDEX_ALLOCATION",
        "/memories/.GIT .:s",
        "/memories/.git:",
    ):
        with pytest.raises(InvalidPathError, match=r"\.git is reserved"):
            parse(payload)
    for name in ("a:b", ".gitx:y", "git~2:x", ".git~1:x", ":.git"):
        assert parse(f"/memories/{name}").parts == (name,)


def test_a_stream_name_an_older_vault_stored_still_reads_back():
    assert parse_stored("/memories/.git:x").parts == (".git:x",)
    with pytest.raises(InvalidPathError):
        parse_stored("/memories/.git")


def test_the_different_rules_give_different_messages():
    messages = set()
    for payload in (
        "/memoriesX",
        "/memories/../x",
        "/memories/a\\b",
        "/memories/a\x00",
        "/memories/a\u200b",
        "/memories/a\u2028",
        "/memories/%2e%2e",
        "/memories//a",
        "/memories/" + "a" * 256,
        "/memories/" + "/".join(["a" * 250] * 5),
        None,
    ):
        with pytest.raises(InvalidPathError) as info:
            parse(payload)
        messages.add(str(info.value))
    assert len(messages) == 11


MARKED = [
    "/memoriesSECRETNAME/a",
    "SECRETNAME/memories/a",
    "/memories/SECRETNAME/../x",
    "/memories/SECRETNAME/./x",
    "/memories/SECRETNAME\\x",
    "/memories/SECRETNAME\x00",
    "/memories/SECRETNAME\u202e",
    "/memories/SECRETNAME\u2028",
    "/memories/SECRETNAME\u2029x",
    "/memories/SECRETNAME%2e%2e%2f",
    "/memories/SECRETNAME%252e",
    "/memories/SECRETNAME//x",
    "/memories/SECRETNAME" + "a" * 300,
    "/memories/" + "/".join(["SECRETNAME" + "a" * 200] * 5),
    "/memories/.git/SECRETNAME",
]


@pytest.mark.parametrize("payload", MARKED, ids=[_id(p) for p in MARKED])
def test_refusal_never_echoes_the_offending_path(payload):
    with pytest.raises(InvalidPathError) as info:
        parse(payload)
    message = str(info.value)
    assert "SECRETNAME" not in message
    assert payload not in message
    assert not any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in message)


def test_every_character_that_ends_a_line_is_refused():
    """A path is one line in every log and trailer: no character that Python's
    str.splitlines splits on (NEL, VT, FF, FS, GS, RS, LF, CR, U+2028, U+2029)
    may appear in one, wherever it stands."""
    breaks = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and len(f"a{chr(c)}b".splitlines()) > 1]
    assert {"\n", "\r", "\x85", "\u2028", "\u2029"} <= set(breaks)
    for ch in breaks:
        for payload in (f"/memories/a{ch}b", f"/memories/{ch}/x.txt", f"/memories/x.txt{ch}"):
            with pytest.raises(InvalidPathError) as info:
                parse(payload)
            assert re.search(r"control|line and paragraph separators", str(info.value)), ascii(payload)


def test_line_and_paragraph_separators_are_refused_with_their_own_rule():
    with pytest.raises(InvalidPathError) as line:
        parse("/memories/a\u2028b")
    with pytest.raises(InvalidPathError) as paragraph:
        parse("/memories/a\u2029b")
    assert str(line.value) == str(paragraph.value)
    assert str(line.value) == (
        "Error: Invalid path: line and paragraph separators (U+2028, U+2029) are not allowed. "
        "Use a path such as /memories/notes.txt."
    )
    assert line.value.rule == "line and paragraph separators (U+2028, U+2029) are not allowed"


def test_next_line_u0085_is_a_control_character():
    assert unicodedata.category("\x85") == "Cc"
    for payload in ("/memories/a\x85b", "/memories/\x85/x.txt", "/memories/x.txt\x85", "/memories/a%C2%85b"):
        with pytest.raises(InvalidPathError, match="control characters are not allowed"):
            parse(payload)


def test_refusal_is_the_same_whatever_the_offending_name():
    with pytest.raises(InvalidPathError) as one:
        parse("/memories/alpha/../x")
    with pytest.raises(InvalidPathError) as two:
        parse("/memories/beta-longer-name/../y")
    assert str(one.value) == str(two.value)


def test_parse_returns_a_memory_path():
    assert isinstance(parse("/memories/a"), MemoryPath)
