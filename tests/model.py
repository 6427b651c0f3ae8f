"""A plain in-memory model of the memory tool contract, written from SPEC.md alone.

The model is a dict of canonical path -> text; directories are implied by the files
below them and ``/memories`` always exists.  ``MemoryModel.call(params)`` applies one
tool call to the dict (only when it succeeds) and returns an :class:`Expect`: what
the real tool must answer.

Where SPEC.md spells a string out, the expectation is that exact string.  Where SPEC.md
only asks for "a clear error", the expectation is loose: the message starts with
``Error: `` and names what SPEC.md says it must name (the valid range of a bad
``view_range``).  A capped view is expected line for line up to the cap, followed by
exactly one line that says how to read on.

Readings where SPEC.md leaves room (the project's recorded decisions where it has one):
a trailing ``/`` asserts a directory, so ``f.txt/`` on a file does not exist; overlapping
matches of ``old_str`` count (``aa`` in ``aaa`` is ambiguous, line listed per match); the
str_replace snippet covers the lines of ``new_str`` with two lines of context each side;
insert of empty text adds one empty line, and after a last line without a newline the
file keeps having none unless the inserted block ends with an empty line (which cannot
be written without one); every successful mutation commits, even a no-op edit; the
cap counts the characters of the output below its header line; checks of the input's
shape come first, then the path.  Left open: whether an edit that empties a file keeps
the snippet sentence, and which error renaming onto ``f/`` (f a file) reports.

This file deliberately imports nothing from vaultmem: it is a second, independent
statement of the contract, so a shared misreading cannot hide in both.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

ROOT = "/memories"
DEFAULT_MAX_FILE_BYTES = 100 * 1024
DEFAULT_VIEW_CAP = 16_000
MAX_LINES = 999_999
MAX_PATH_BYTES = 1024
MAX_SEGMENT_BYTES = 255
MUTATING = frozenset({"create", "str_replace", "insert", "delete", "rename"})

# The exact strings of SPEC.md.
VIEW_MISSING = "The path {path} does not exist. Please provide a valid path."
VIEW_DIR_HEADER = (
    "Here're the files and directories up to 2 levels deep in {path}, excluding hidden items and node_modules:"
)
VIEW_FILE_HEADER = "Here's the content of {path} with line numbers:"
TOO_MANY_LINES = "File {path} exceeds maximum line limit of 999,999 lines."
CREATE_OK = "File created successfully at: {path}"
CREATE_EXISTS = "Error: File {path} already exists"
EDIT_MISSING = "Error: The path {path} does not exist. Please provide a valid path."
EDIT_NOT_FOUND = "No replacement was performed, old_str `{old_str}` did not appear verbatim in {path}."
EDIT_AMBIGUOUS = (
    "No replacement was performed. Multiple occurrences of old_str `{old_str}` in lines: {line_numbers}. "
    "Please ensure it is unique"
)
EDIT_OK = "The memory file has been edited."


def echoed(text: str) -> str:
    """What an error repeats of the model's input (docs/memory-tool.md): whole up
    to 1,000 characters, else the first 1,000 and the length."""
    if len(text) <= 1000:
        return text
    return f"{text[:1000]}... [{len(text):,} characters in all; the first 1,000 shown]"


EDIT_SNIPPET = " Here is the snippet showing the change (with line numbers):\n"
INSERT_OK = "The file {path} has been edited."
INSERT_MISSING = "Error: The path {path} does not exist"
INSERT_BAD_LINE = (
    "Error: Invalid `insert_line` parameter: {insert_line}. "
    "It should be within the range of lines of the file: [0, {n_lines}]"
)
DELETE_OK = "Successfully deleted {path}"
DELETE_MISSING = "Error: The path {path} does not exist"
RENAME_OK = "Successfully renamed {old_path} to {new_path}"
RENAME_MISSING = "Error: The path {old_path} does not exist"
RENAME_EXISTS = "Error: The destination {new_path} already exists"

_PARAMS: dict[str, dict[str, tuple[str, bool]]] = {
    "view": {"path": ("str", True), "view_range": ("range", False)},
    "create": {"path": ("str", True), "file_text": ("str", True)},
    "str_replace": {"path": ("str", True), "old_str": ("str", True), "new_str": ("str", True)},
    "insert": {"path": ("str", True), "insert_line": ("int", True), "insert_text": ("str", True)},
    "delete": {"path": ("str", True)},
    "rename": {"old_path": ("str", True), "new_path": ("str", True)},
}
_ENCODED_TRAVERSAL = re.compile(r"%(2e|2f|5c)", re.IGNORECASE)

Parts = tuple[str, ...]


@dataclass(frozen=True)
class Expect:
    """What the tool must answer for one call.

    ``text``: the exact result.  Otherwise ``head`` (capped output: these lines,
    then exactly one more line containing every string of ``mention``) or
    ``prefix`` (the result starts with it and contains every string of ``mention``).
    ``commits``: how many commits the call must add to ``main``.
    """

    ok: bool
    text: str | None = None
    prefix: str | None = None
    head: tuple[str, ...] | None = None
    mention: tuple[str, ...] = ()
    commits: int = 0
    what: str = field(default="", compare=False)

    def problems(self, ok: bool, text: str) -> list[str]:
        """Why ``(ok, text)`` does not meet this expectation (empty when it does)."""
        out: list[str] = []
        if ok != self.ok:
            wanted = "success" if self.ok else "an error"
            out.append(f"expected {wanted} ({self.what}), got {'success' if ok else 'error'}: {clip(text)}")
        if "Traceback" in text:
            out.append("a traceback leaked into the result")
        if self.text is not None and text != self.text:
            out.append(f"expected exactly {clip(self.text)}, got {clip(text)}")
        if self.head is not None:
            lines = text.split("\n")
            if lines[: len(self.head)] != list(self.head):
                out.append(f"expected the lines {clip(list(self.head))} first, got {clip(lines[: len(self.head)])}")
            elif len(lines) != len(self.head) + 1:
                out.append(f"expected exactly one line after the cut, got {clip(lines[len(self.head) :])}")
            else:
                missing = [m for m in self.mention if m not in lines[-1]]
                out.extend(f"the last line {clip(lines[-1])} should mention {m!r}" for m in missing)
        elif self.prefix is not None:
            if not text.startswith(self.prefix):
                out.append(f"expected a result starting with {self.prefix!r} ({self.what}), got {clip(text)}")
            out.extend(f"{clip(text)} should mention {m!r}" for m in self.mention if m not in text)
        return out


def clip(value: object, limit: int = 300) -> str:
    """``repr`` cut to ``limit`` characters, for readable failure messages."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def success(text: str, commits: int = 0) -> Expect:
    return Expect(True, text=text, commits=commits)


def exact_error(text: str) -> Expect:
    return Expect(False, text=text, what=text)


def clear_error(what: str, *mention: str) -> Expect:
    """SPEC.md's "clear error" whose wording it leaves open."""
    return Expect(False, prefix="Error: ", mention=mention, what=what)


# -- pure rules ---------------------------------------------------------------


def parse_path(raw: object) -> tuple[Parts, bool] | None:
    """``(segments below /memories, ends with '/')``, or None when SPEC.md refuses the path."""
    if not isinstance(raw, str) or not raw:
        return None
    text = unicodedata.normalize("NFC", raw)
    if any(unicodedata.category(ch) in ("Cc", "Cf") for ch in text) or "\\" in text:
        return None
    if _ENCODED_TRAVERSAL.search(text) or _ENCODED_TRAVERSAL.search(unquote(text)):
        return None
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None
    if size > MAX_PATH_BYTES:
        return None
    if text != ROOT and not text.startswith(ROOT + "/"):
        return None
    rest = text[len(ROOT) :]
    trailing = rest.endswith("/")
    if trailing:
        rest = rest[:-1]
    if not rest:
        return (), trailing
    segments = tuple(rest[1:].split("/"))
    for segment in segments:
        if segment in ("", ".", "..") or len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
            return None
    return segments, trailing


def split_lines(text: str) -> list[str]:
    """Lines split on ``\\n``; a final ``\\n`` makes no extra empty line."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def format_size(n: int) -> str:
    if n < 1024:
        return f"{n}B"
    value, units = n / 1024, ["K", "M", "G"]
    while float(f"{value:.1f}") >= 1024 and len(units) > 1:
        value /= 1024
        units.pop(0)
    return f"{value:.1f}{units[0]}"


def number(n: int, line: str) -> str:
    return f"{n:>6}\t{line}"


def fit(lines: list[str], cap: int) -> int:
    """How many of ``lines`` fit in ``cap`` characters when joined with newlines."""
    used = -1
    for count, line in enumerate(lines):
        used += len(line) + 1
        if used > cap:
            return count
    return len(lines)


def insert_lines(content: str, after: int, addition: str) -> str:
    """SPEC.md's insert: ``addition``'s lines go after line ``after``; the rest keeps its bytes."""
    block = addition.split("\n")
    if addition.endswith("\n"):
        block.pop()
    joined = "\n".join(block)
    if after == 0:
        return joined + "\n" + content
    offset = 0
    for _ in range(after):
        nl = content.find("\n", offset)
        if nl == -1:
            # After a last line with no final newline: the file keeps having none,
            # unless the inserted block ends with an empty line (which needs one).
            return content + "\n" + joined + ("\n" if block[-1] == "" else "")
        offset = nl + 1
    return content[:offset] + joined + "\n" + content[offset:]


def occurrences(content: str, needle: str) -> list[int]:
    """Start offsets of every occurrence of ``needle``, overlapping ones included."""
    return [i for i in range(len(content) - len(needle) + 1) if content.startswith(needle, i)]


def show(parts: Parts) -> str:
    return ROOT + "".join("/" + p for p in parts)


# -- the model ------------------------------------------------------------------


class MemoryModel:
    """The memory as a dict; ``call`` mirrors one tool call."""

    def __init__(self, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> None:
        self.files: dict[Parts, str] = {}
        self.max_file_bytes = max_file_bytes

    # -- queries --

    def contents(self) -> dict[str, str]:
        return {show(parts): text for parts, text in self.files.items()}

    def kind(self, parts: Parts) -> str | None:
        if not parts:
            return "dir"
        if parts in self.files:
            return "file"
        if any(key[: len(parts)] == parts for key in self.files if len(key) > len(parts)):
            return "dir"
        return None

    def _kind(self, parts: Parts, trailing: bool) -> str | None:
        kind = self.kind(parts)
        return None if kind == "file" and trailing else kind  # "f/" asserts a directory

    def dirs(self) -> set[Parts]:
        return {key[:depth] for key in self.files for depth in range(1, len(key))}

    def paths(self) -> list[str]:
        """Every file and directory that exists, canonical spelling."""
        return sorted(show(p) for p in set(self.files) | self.dirs())

    def below(self, parts: Parts) -> dict[Parts, str]:
        return {key: text for key, text in self.files.items() if key[: len(parts)] == parts}

    def size(self, parts: Parts) -> int:
        return sum(len(text.encode("utf-8")) for text in self.below(parts).values())

    def _file_ancestor(self, parts: Parts) -> bool:
        return any(parts[:depth] in self.files for depth in range(1, len(parts)))

    def _unstorable(self, text: str) -> bool:
        """Over the size or line limit, or not storable as UTF-8 at all (a lone surrogate)."""
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            return True
        return size > self.max_file_bytes or len(split_lines(text)) > MAX_LINES

    # -- the call --

    def call(self, params: Any, view_cap: int = DEFAULT_VIEW_CAP) -> Expect:
        bad = _bad_params(params)
        if bad is not None:
            return clear_error(bad)
        command = params["command"]
        result: Expect = getattr(self, "_" + command)(params, view_cap)
        if result.ok and command in MUTATING:
            result = Expect(result.ok, result.text, result.prefix, result.head, result.mention, 1, result.what)
        return result

    def _view(self, params: dict[str, Any], cap: int) -> Expect:
        path: str = params["path"]
        parsed = parse_path(path)
        if parsed is None:
            return clear_error("invalid path")
        parts, trailing = parsed
        kind = self._kind(parts, trailing)
        if kind is None:
            return exact_error(VIEW_MISSING.format(path=path))
        if kind == "dir":
            if "view_range" in params:
                return clear_error("view_range on a directory")
            return self._view_dir(parts, path, cap)
        return self._view_file(parts, path, params.get("view_range"), cap)

    def _view_dir(self, parts: Parts, path: str, cap: int) -> Expect:
        base = path[:-1] if path.endswith("/") else path
        body = [f"{format_size(self.size(parts))}\t{path}"]

        def walk(prefix: Parts, depth: int) -> None:
            children: dict[str, bool] = {}
            for key in self.below(prefix):
                if len(key) > len(prefix):
                    children[key[len(prefix)]] = len(key) > len(prefix) + 1
            for name in sorted(children):
                if name.startswith(".") or name == "node_modules":
                    continue
                child = (*prefix, name)
                rel = "/".join(child[len(parts) :])
                if children[name]:
                    body.append(f"{format_size(self.size(child))}\t{base}/{rel}/")
                    if depth < 2:
                        walk(child, depth + 1)
                else:
                    body.append(f"{format_size(self.size(child))}\t{base}/{rel}")

        walk(parts, 1)
        header = VIEW_DIR_HEADER.format(path=path)
        kept = fit(body, cap)
        if kept == len(body):
            return success("\n".join([header, *body]))
        return Expect(True, head=(header, *body[:kept]), mention=(ROOT,), what="capped listing")

    def _view_file(self, parts: Parts, path: str, view_range: list[int] | None, cap: int) -> Expect:
        lines = split_lines(self.files[parts])
        total = len(lines)
        if total > MAX_LINES:
            return exact_error(TOO_MANY_LINES.format(path=path))
        start, end = 1, total
        if view_range is not None:
            start, end = view_range
            valid = 1 <= start <= total and (end == -1 or start <= end <= total)
            if not valid:
                return clear_error("view_range outside the file", *([f"[1, {total}]"] if total else []))
            if end == -1:
                end = total
        header = VIEW_FILE_HEADER.format(path=path)
        body = [number(n, lines[n - 1]) for n in range(start, end + 1)]
        kept = fit(body, cap)
        if kept == len(body):
            return success("\n".join([header, *body]))
        if kept == 0:
            return Expect(True, prefix=header, what="a single line longer than the cap")
        return Expect(True, head=(header, *body[:kept]), mention=("view_range", str(start + kept)), what="capped view")

    def _create(self, params: dict[str, Any], cap: int) -> Expect:
        path: str = params["path"]
        text: str = params["file_text"]
        parsed = parse_path(path)
        if parsed is None:
            return clear_error("invalid path")
        parts, trailing = parsed
        if not parts:
            return clear_error("create /memories itself")
        if trailing:
            return clear_error("a file path ending with '/'")
        if self._unstorable(text):
            return clear_error("file over the size limit or not valid Unicode")
        if self.kind(parts) is not None:
            return exact_error(CREATE_EXISTS.format(path=path))
        if self._file_ancestor(parts):
            return clear_error("parent is a file")
        self.files[parts] = text
        return success(CREATE_OK.format(path=path))

    def _str_replace(self, params: dict[str, Any], cap: int) -> Expect:
        path: str = params["path"]
        old: str = params["old_str"]
        new: str = params["new_str"]
        parsed = parse_path(path)
        if parsed is None:
            return clear_error("invalid path")
        if old == "":
            return clear_error("empty old_str")
        parts, trailing = parsed
        if self._kind(parts, trailing) != "file":
            return exact_error(EDIT_MISSING.format(path=path))
        content = self.files[parts]
        found = occurrences(content, old)
        if not found:
            return exact_error(EDIT_NOT_FOUND.format(old_str=echoed(old), path=path))
        if len(found) > 1:
            lines = [str(content.count("\n", 0, pos) + 1) for pos in found]
            numbers = ", ".join(lines[:100]) + (f", ... [{len(lines):,} in all]" if len(lines) > 100 else "")
            return exact_error(EDIT_AMBIGUOUS.format(old_str=echoed(old), line_numbers=numbers))
        pos = found[0]
        updated = content[:pos] + new + content[pos + len(old) :]
        if self._unstorable(updated):
            return clear_error("result over the size limit or not valid Unicode")
        self.files[parts] = updated
        lines = split_lines(updated)
        first = updated.count("\n", 0, pos) + 1
        last = updated.count("\n", 0, pos + len(new) - 1) + 1 if new else first
        lo, hi = max(1, first - 2), min(len(lines), last + 2)
        if lo > hi:
            # The file is now empty: no line to show.  SPEC.md does not say whether the
            # snippet sentence stays with nothing under it, so only the start is fixed.
            return Expect(True, prefix=EDIT_OK, what="edit that empties the file")
        snippet = [number(n, lines[n - 1]) for n in range(lo, hi + 1)]
        if fit(snippet, cap) < len(snippet):
            return Expect(True, prefix=EDIT_OK + EDIT_SNIPPET, what="snippet over the cap")
        return success(EDIT_OK + EDIT_SNIPPET + "\n".join(snippet))

    def _insert(self, params: dict[str, Any], cap: int) -> Expect:
        path: str = params["path"]
        line: int = params["insert_line"]
        parsed = parse_path(path)
        if parsed is None:
            return clear_error("invalid path")
        parts, trailing = parsed
        if self._kind(parts, trailing) != "file":
            return exact_error(INSERT_MISSING.format(path=path))
        content = self.files[parts]
        n_lines = len(split_lines(content))
        if not 0 <= line <= n_lines:
            return exact_error(INSERT_BAD_LINE.format(insert_line=line, n_lines=n_lines))
        updated = insert_lines(content, line, params["insert_text"])
        if self._unstorable(updated):
            return clear_error("result over the size limit or not valid Unicode")
        self.files[parts] = updated
        return success(INSERT_OK.format(path=path))

    def _delete(self, params: dict[str, Any], cap: int) -> Expect:
        path: str = params["path"]
        parsed = parse_path(path)
        if parsed is None:
            return clear_error("invalid path")
        parts, trailing = parsed
        if not parts:
            return clear_error("delete /memories itself")
        if self._kind(parts, trailing) is None:
            return exact_error(DELETE_MISSING.format(path=path))
        for key in self.below(parts):
            del self.files[key]
        return success(DELETE_OK.format(path=path))

    def _rename(self, params: dict[str, Any], cap: int) -> Expect:
        old_path: str = params["old_path"]
        new_path: str = params["new_path"]
        old_parsed, new_parsed = parse_path(old_path), parse_path(new_path)
        if old_parsed is None or new_parsed is None:
            return clear_error("invalid path")
        (old, old_trailing), (new, new_trailing) = old_parsed, new_parsed
        kind = self._kind(old, old_trailing)
        if kind is None:
            return exact_error(RENAME_MISSING.format(old_path=old_path))
        new_kind = self.kind(new)
        if new_kind == "file" and new_trailing:
            # "f/" names a directory and f is a file: refused, in words SPEC.md leaves open.
            return clear_error("destination names a file as a directory")
        if new_kind is not None:
            return exact_error(RENAME_EXISTS.format(new_path=new_path))
        if not old:
            return clear_error("rename /memories itself")
        if new[: len(old)] == old:
            return clear_error("move into itself")
        if kind == "file" and new_trailing:
            return clear_error("a file renamed to a path ending with '/'")
        if self._file_ancestor(new):
            return clear_error("destination under a file")
        for key, text in self.below(old).items():
            del self.files[key]
            self.files[new + key[len(old) :]] = text
        return success(RENAME_OK.format(old_path=old_path, new_path=new_path))


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _bad_params(params: Any) -> str | None:
    """Why a tool input is malformed (unknown command, missing, unexpected or mistyped parameter)."""
    if not isinstance(params, dict):
        return "input is not an object"
    command = params.get("command")
    if not isinstance(command, str) or command not in _PARAMS:
        return "unknown command"
    schema = _PARAMS[command]
    for name in params:
        if name != "command" and name not in schema:
            return f"unexpected parameter {name}"
    for name, (kind, required) in schema.items():
        if name not in params or params[name] is None:
            if required:
                return f"missing parameter {name}"
            continue
        value = params[name]
        if kind == "str" and not isinstance(value, str):
            return f"{name} is not a string"
        if kind == "str" and not _is_unicode(value):
            return f"{name} is not valid Unicode (a lone surrogate): refused before anything else"
        if kind == "int" and (not isinstance(value, int) or isinstance(value, bool)):
            return f"{name} is not an integer"
        if kind == "range" and not (
            isinstance(value, (list, tuple))
            and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        ):
            return "view_range is not [start, end]"
    return None
