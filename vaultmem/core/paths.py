"""Validation and normalisation of virtual ``/memories`` paths.

Pure rules, no I/O.  Every way a path enters the store (tool calls, the Python
API, the CLI, imports and exports) goes through :func:`parse`, so the rules live
in one place.  A refusal names the rule that was broken and nothing else: it
never echoes anything about the host.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from urllib.parse import unquote

from vaultmem.errors import InvalidPathError

ROOT = "/memories"
MAX_PATH_BYTES = 1024
MAX_SEGMENT_BYTES = 255

_ENCODED_TRAVERSAL = re.compile(r"%(2e|2f|5c)", re.IGNORECASE)


@dataclass(frozen=True)
class MemoryPath:
    """A validated path: the segments below ``/memories`` and its canonical text.

    ``parts`` is empty for ``/memories`` itself.  ``dir_hint`` records a single
    trailing ``/``, which asserts that the path names a directory.
    """

    parts: tuple[str, ...]
    dir_hint: bool = False

    @property
    def text(self) -> str:
        """The canonical spelling: NFC, no trailing slash."""
        return ROOT + "".join("/" + p for p in self.parts)

    @property
    def is_root(self) -> bool:
        return not self.parts

    @property
    def name(self) -> str:
        return self.parts[-1] if self.parts else "memories"

    @property
    def parent(self) -> MemoryPath:
        if not self.parts:
            raise InvalidPathError("Error: /memories has no parent.")
        return MemoryPath(self.parts[:-1])

    def child(self, name: str) -> MemoryPath:
        return MemoryPath((*self.parts, name))

    def is_within(self, other: MemoryPath) -> bool:
        """True when ``self`` is ``other`` or lies below it."""
        return self.parts[: len(other.parts)] == other.parts

    def git_path(self) -> str:
        """Where the path lives in a commit's tree."""
        return "/".join(("memories", *self.parts))

    def __str__(self) -> str:
        return self.text


def _refuse(rule: str) -> InvalidPathError:
    err = InvalidPathError(f"Error: Invalid path: {rule}. Use a path such as /memories/notes.txt.")
    err.rule = rule
    return err


_ASCII_BAD = re.compile(r"[\x00-\x1f\x7f\\]")


def _check_characters(text: str) -> None:
    if text.isascii() and not _ASCII_BAD.search(text):
        return  # the common case: nothing below can match
    for ch in text:
        category = unicodedata.category(ch)
        if category == "Cc":
            raise _refuse("control characters are not allowed")
        if category == "Cf":
            raise _refuse("invisible formatting characters (zero-width, bidi controls) are not allowed")
        if category in ("Zl", "Zp"):
            # U+2028 and U+2029: a path is one line in every log and trailer.
            raise _refuse("line and paragraph separators (U+2028, U+2029) are not allowed")
    if "\\" in text:
        raise _refuse("backslashes are not allowed")


def _check_encoding(text: str) -> None:
    if "%" not in text:
        return
    once = unquote(text)
    twice = unquote(once)
    for form in (text, once):
        if _ENCODED_TRAVERSAL.search(form):
            raise _refuse("percent-encoded '.', '/' or '\\' is not allowed")
    _check_characters(twice)


def is_git_reserved(segment: str, streams: bool = True) -> bool:
    """Whether git itself refuses ``segment`` as a tree entry (``git fsck``:
    hasDotgit; a server with ``receive.fsckObjects`` rejects the push), in
    any spelling that names ``.git`` on a case-insensitive, NTFS or HFS+
    filesystem: trailing dots and spaces, the short name ``git~1``, and an
    NTFS stream after ``:`` (``.git:x``, ``.git::$INDEX_ALLOCATION``).
    ``streams=False`` leaves out the stream spellings, which vaults made
    before they were refused may hold (see :func:`parse`'s ``existing``)."""
    folded = "".join(ch for ch in segment if unicodedata.category(ch) != "Cf").casefold()
    if streams:
        folded = folded.split(":", 1)[0]
    folded = folded.rstrip(" .")
    return folded in (".git", "git~1")


def parse(path: object, limit: int = MAX_PATH_BYTES, *, existing: bool = False) -> MemoryPath:
    """Validate ``path`` and return its canonical form, or raise InvalidPathError.

    ``existing``: the path names what may already be stored (a read, an
    edit, a delete, the source of a move, a name read back from a commit),
    which an older vaultmem may have accepted before a rule was added for
    new names: such a file stays reachable, and only new names are refused."""
    if not isinstance(path, str):
        raise _refuse("a path must be a string")
    if not path:
        raise _refuse("the path is empty")
    text = unicodedata.normalize("NFC", path)
    _check_characters(text)
    _check_encoding(text)
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise _refuse("the path is not valid Unicode text") from err
    if len(encoded) > limit:
        raise _refuse(f"the path is longer than {limit:,} bytes")
    if text != ROOT and not text.startswith(ROOT + "/"):
        raise _refuse("memory paths must be /memories or start with /memories/")
    rest = text[len(ROOT) :]
    dir_hint = False
    if rest.endswith("/"):
        rest = rest[:-1]
        dir_hint = True
    if not rest:
        return MemoryPath((), dir_hint)
    segments = rest[1:].split("/")
    for segment in segments:
        if segment == "":
            raise _refuse("empty path segments ('//') are not allowed")
        if segment in (".", ".."):
            raise _refuse("'.' and '..' segments are not allowed")
        if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
            raise _refuse(f"a path segment is longer than {MAX_SEGMENT_BYTES} bytes")
        if is_git_reserved(segment, streams=not existing):
            raise _refuse("the name .git is reserved")
    return MemoryPath(tuple(segments), dir_hint)


# A path as a commit records it: in a vault with sealed names every segment
# is a 25-character token, so a path within MAX_PATH_BYTES may take more.
MAX_STORED_BYTES = 16 * MAX_PATH_BYTES


def parse_stored(path: object) -> MemoryPath:
    """:func:`parse` for a path read from a commit (a trailer or a tree)."""
    return parse(path, MAX_STORED_BYTES, existing=True)


def from_git_path(git_path: str) -> MemoryPath:
    """The inverse of :meth:`MemoryPath.git_path`, for names read back from a tree."""
    parts = git_path.split("/")
    if parts[0] != "memories":
        raise InvalidPathError(f"Error: Invalid path: {git_path!r} is not under memories/.")
    return MemoryPath(tuple(parts[1:]))
