"""The merge rules on their own (vaultmem.core.merge): three listings in, what
lands at each path out.  Blob ids here are the content itself, so two files
with one id hold the same bytes, as in a vault at one path."""

from __future__ import annotations

from collections.abc import Mapping

from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from vaultmem.core.merge import Result, Side, Tip, conflict_name, merge, text_merge
from vaultmem.core.paths import MAX_PATH_BYTES, MAX_SEGMENT_BYTES, parse


def run(
    base: Mapping[str, str],
    ours: Mapping[str, str],
    theirs: Mapping[str, str],
    *,
    ours_renames: Mapping[str, str] | None = None,
    theirs_renames: Mapping[str, str] | None = None,
    prefer: str = "ours",
) -> tuple[dict[str, str], Result]:
    listings = {"base": base, "ours": ours, "theirs": theirs}

    def ids(files: Mapping[str, str]) -> dict[str, bytes]:
        return {path: text.encode() for path, text in files.items()}

    def read(side: Side, path: str) -> bytes:
        return listings[side][path].encode()

    result = merge(
        ids(base),
        Tip(ids(ours), ours_renames or {}, "0000aaaa"),
        Tip(ids(theirs), theirs_renames or {}, "1111bbbb"),
        read,
        "ours" if prefer == "ours" else "theirs",
    )
    files = {}
    for path, take in result.files.items():
        if take.content is not None:
            files[path] = take.content.decode()
        else:
            assert take.side is not None and take.source is not None
            files[path] = listings[take.side][take.source]
    return files, result


M = "/memories/"


def test_a_file_changed_on_one_side_takes_that_side() -> None:
    files, result = run(
        {M + "a": "1\n", M + "b": "2\n"}, {M + "a": "1\n", M + "b": "2\n"}, {M + "a": "X\n", M + "b": "2\n"}
    )
    assert files == {M + "a": "X\n", M + "b": "2\n"}
    assert (result.merged, result.conflicts, result.kept) == ([], [], [])


def test_edits_on_different_lines_merge_as_text() -> None:
    base = {M + "n.md": "one\ntwo\nthree\nfour\n"}
    files, result = run(base, {M + "n.md": "ONE\ntwo\nthree\nfour\n"}, {M + "n.md": "one\ntwo\nthree\nFOUR\n"})
    assert files == {M + "n.md": "ONE\ntwo\nthree\nFOUR\n"}
    assert result.merged == [M + "n.md"]


def test_edits_of_the_same_line_keep_both_versions_the_preferred_at_the_path() -> None:
    base = {M + "dir/n.md": "line\n"}
    ours, theirs = {M + "dir/n.md": "ours\n"}, {M + "dir/n.md": "theirs\n"}
    files, result = run(base, ours, theirs, prefer="theirs")
    assert files == {M + "dir/n.md": "theirs\n", M + "dir/n.conflict-0000aaaa.md": "ours\n"}
    assert result.conflicts == [(M + "dir/n.md", M + "dir/n.conflict-0000aaaa.md")]
    files, result = run(base, ours, theirs, prefer="ours")
    assert files == {M + "dir/n.md": "ours\n", M + "dir/n.conflict-1111bbbb.md": "theirs\n"}


def test_delete_against_modify_keeps_the_modified_file() -> None:
    base = {M + "a": "1\n", M + "b": "2\n"}
    files, result = run(base, {M + "b": "2\n"}, {M + "a": "changed\n"})  # ours deleted a, theirs deleted b
    assert files == {M + "a": "changed\n"}  # b: deleted on one side, untouched on the other
    assert result.kept == [M + "a"]


def test_a_rename_is_followed_by_the_other_sides_edits() -> None:
    base = {M + "old/x.md": "a\nb\nc\n"}
    files, result = run(
        base,
        {M + "new/x.md": "a\nb\nc\n"},
        {M + "old/x.md": "a\nb\nC\n"},
        ours_renames={M + "old/x.md": M + "new/x.md"},
    )
    assert files == {M + "new/x.md": "a\nb\nC\n"}
    assert result.renamed == [(M + "old/x.md", M + "new/x.md")]


def test_a_rename_on_one_side_and_an_edit_on_both() -> None:
    base = {M + "x.md": "a\nb\nc\nd\n"}
    files, result = run(
        base,
        {M + "x.md": "A\nb\nc\nd\n"},
        {M + "y.md": "a\nb\nc\nD\n"},
        theirs_renames={M + "x.md": M + "y.md"},
    )
    assert files == {M + "y.md": "A\nb\nc\nD\n"}
    assert result.merged == [M + "y.md"]


def test_files_created_on_both_sides() -> None:
    files, _ = run({}, {M + "same": "s\n", M + "new": "o\n"}, {M + "same": "s\n", M + "new": "t\n"})
    assert files == {M + "same": "s\n", M + "new": "o\n", M + "new.conflict-1111bbbb": "t\n"}


def test_a_file_where_the_other_side_made_a_folder_moves_beside_it() -> None:
    files, result = run({}, {M + "x": "file\n"}, {M + "x/inside": "in\n"})
    assert files == {M + "x.conflict-0000aaaa": "file\n", M + "x/inside": "in\n"}
    assert result.conflicts == [(M + "x", M + "x.conflict-0000aaaa")]


def test_a_rename_onto_a_name_the_other_side_created_keeps_both() -> None:
    base = {M + "a": "from a\n"}
    files, result = run(
        base, {M + "b": "from a\n"}, {M + "a": "from a\n", M + "b": "new b\n"}, ours_renames={M + "a": M + "b"}
    )
    assert sorted(files.values()) == ["from a\n", "new b\n"]
    assert len(result.conflicts) == 1 and result.conflicts[0][0] == M + "b"


def test_conflict_names() -> None:
    assert conflict_name("/memories/a/notes.md", "abc", set()) == "/memories/a/notes.conflict-abc.md"
    assert conflict_name("/memories/notes", "abc", set()) == "/memories/notes.conflict-abc"
    assert conflict_name("/memories/.profile", "abc", set()) == "/memories/.profile.conflict-abc"
    assert conflict_name("/memories/a.tar.gz", "abc", set()) == "/memories/a.tar.conflict-abc.gz"
    long = "/memories/" + "é" * 120 + ".md"  # 243 bytes of name: the copy's name is shortened to 255
    beside = conflict_name(long, "abcdefgh", set())
    assert beside.endswith(".conflict-abcdefgh.md") and len(beside.rpartition("/")[2].encode()) <= 255
    parse(beside)
    taken = {"/memories/n.conflict-abc.md"}
    assert conflict_name("/memories/n.md", "abc", taken) == "/memories/n.conflict-abc-2.md"


def _deep(total: int, name: str, last: int = 40) -> str:
    """A path of exactly ``total`` bytes ending in ``name``: folders of 200
    bytes, then one that makes up the rest (at least ``last`` bytes)."""
    folders, size = [], len("/memories") + 1 + len(name.encode())
    while total - size - 201 >= last + 1:
        folders.append("d" * 200)
        size += 201
    folders.append("e" * (total - size - 1))
    path = "/memories/" + "/".join(folders) + "/" + name
    assert len(path.encode()) == total
    return path


def _within_the_rules(copy: str, path: str) -> None:
    assert copy != path and len(copy.encode()) <= MAX_PATH_BYTES
    assert all(len(part.encode()) <= MAX_SEGMENT_BYTES for part in copy.split("/"))
    assert parse(copy).text == copy  # a valid path, in its canonical form


def test_a_conflict_copy_at_the_path_limit_goes_to_the_nearest_folder_with_room() -> None:
    path = _deep(MAX_PATH_BYTES, "report.md")
    folder, _, _ = path.rpartition("/")
    assert conflict_name(path, "abcdefgh", set()) == folder.rpartition("/")[0] + "/report.conflict-abcdefgh.md"
    taken = {folder.rpartition("/")[0] + "/report.conflict-abcdefgh.md"}
    assert conflict_name(path, "abcdefgh", taken) == folder.rpartition("/")[0] + "/report.conflict-abcdefgh-2.md"
    # Room beside the file for part of its name: the name is cut there, on a character's edge.
    path = _deep(MAX_PATH_BYTES - 4, "日本語のメモ.md")  # the copy needs 18 more bytes: 4 of the stem's 18 stay
    assert conflict_name(path, "abcdefgh", set()) == path.rpartition("/")[0] + "/日.conflict-abcdefgh.md"
    path = _deep(MAX_PATH_BYTES - 2, "日本語のメモ.md")  # 2 bytes: not even 日 fits beside it
    copy = conflict_name(path, "abcdefgh", set())
    assert copy.endswith("/日本語のメモ.conflict-abcdefgh.md") and copy.count("/") == path.count("/") - 1


def test_conflict_copies_keep_within_the_path_rules_at_every_length() -> None:
    names = ["r", "report.md", "é" * 126 + ".md", "日本語" * 28 + ".md", "a." + "x" * 250, "😀" * 63 + ".txt"]
    names.append(".profile")
    for name in names:
        for total in range(len("/memories/e/") + len(name.encode()) + 1, MAX_PATH_BYTES + 1, 7):
            path = _deep(total, name, last=1)
            copy = conflict_name(path, "abcdefgh", set())
            _within_the_rules(copy, path)
            assert ".conflict-abcdefgh" in copy.rpartition("/")[2]
            again = conflict_name(path, "abcdefgh", {copy})
            _within_the_rules(again, path)
            assert again != copy
        copy = conflict_name(_deep(MAX_PATH_BYTES, name, last=1), "abcdefgh", set())
        _within_the_rules(copy, name)
    assert conflict_name("/memories/a." + "x" * 250, "abcdefgh", set()).endswith("xx.conflict-abcdefgh")


def test_text_merge_refuses_overlapping_and_adjacent_edits() -> None:
    assert text_merge(b"a\nb\n", b"A\nb\n", b"a\nB\n") is None  # lines next to each other: git refuses too
    assert text_merge(b"a\n\nb\n", b"A\n\nb\n", b"a\n\nB\n") == b"A\n\nB\n"
    assert text_merge(b"a\n", b"a\nx\n", b"a\nx\n") == b"a\nx\n"


# -- properties ----------------------------------------------------------------------------

NAMES = st.sampled_from([M + "a", M + "b", M + "c", M + "d/e", M + "d/f"])
TEXTS = st.lists(st.sampled_from(["x\n", "y\n", "z\n", "\n"]), min_size=0, max_size=4).map("".join)
LISTING = st.dictionaries(NAMES, TEXTS, max_size=4)


@settings(max_examples=examples(400), deadline=None)
@given(LISTING, LISTING, LISTING)
def test_nothing_either_side_wrote_is_lost(base: dict[str, str], ours: dict[str, str], theirs: dict[str, str]) -> None:
    files, result = run(base, ours, theirs)
    kept = set(files.values())
    for mine in (ours, theirs):
        for path, text in mine.items():
            if base.get(path) == text:
                continue  # not written on this side since the ancestor: the other side's change wins
            if path in result.merged:
                continue  # both sides' edits, merged as text
            assert text in kept, (path, text, files)
    for path in files:  # every result path is a file, never both a file and a folder
        assert not any(other.startswith(path + "/") for other in files)


@settings(max_examples=examples(400), deadline=None)
@given(LISTING, LISTING, LISTING)
def test_both_hosts_make_the_same_merge(base: dict[str, str], ours: dict[str, str], theirs: dict[str, str]) -> None:
    """Host 1 merges theirs into ours, host 2 ours into theirs; the newer side
    is the same for both: the contents land at the same paths."""
    mine, _ = run(base, ours, theirs, prefer="theirs")
    listings = {"base": base, "ours": theirs, "theirs": ours}

    def read(side: Side, path: str) -> bytes:
        return listings[side][path].encode()

    def ids(files: Mapping[str, str]) -> dict[str, bytes]:
        return {p: t.encode() for p, t in files.items()}

    swapped = merge(ids(base), Tip(ids(theirs), {}, "1111bbbb"), Tip(ids(ours), {}, "0000aaaa"), read, "ours")
    theirs_view = {
        path: (take.content or read(take.side or "ours", take.source or path)).decode()
        for path, take in swapped.files.items()
    }
    assert mine == theirs_view


@settings(max_examples=examples(400), deadline=None)
@given(LISTING, LISTING, LISTING, st.sets(NAMES, max_size=3), st.booleans())
def test_renames_on_either_side_lose_nothing(
    base: dict[str, str], ours: dict[str, str], theirs: dict[str, str], moved: set[str], on_ours: bool
) -> None:
    """One side renamed some files of the ancestor (into /memories/moved/...):
    every version either side holds is still somewhere, merged or whole."""
    renames = {p: M + "moved/" + p.removeprefix(M).replace("/", "-") for p in moved if p in base}
    mover = ours if on_ours else theirs
    for old, new in renames.items():
        if old in mover:
            mover[new] = mover.pop(old)
    kwargs = {"ours_renames": renames} if on_ours else {"theirs_renames": renames}
    files, result = run(base, ours, theirs, **kwargs)  # type: ignore[arg-type]
    kept = set(files.values())
    back = {new: old for old, new in renames.items()}
    for mine in (ours, theirs):
        for path, text in mine.items():
            if base.get(back.get(path, path)) == text:
                continue  # unchanged since the ancestor: the other side's change wins
            if any(merged in (path, renames.get(path)) for merged in result.merged):
                continue
            assert text in kept, (path, text, files)
    for path in files:
        assert not any(other.startswith(path + "/") for other in files)
