"""Checks on values handed in by callers, shared by every layer."""

from __future__ import annotations

import importlib
import math
import os
import re
from typing import Any, TypeGuard

from vaultmem.errors import VaultError


def is_int(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an integer and not a bool (``True`` is an ``int``
    to Python, never a count or a size to vaultmem)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_unicode(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8: it holds no lone surrogate,
    which is what Python makes of bytes that are not UTF-8 on a command
    line, in the environment or on a pipe (0xE9, a Latin-1 "é", becomes
    ``"\\udce9"``)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def compile_regex(pattern: str, flags: int = 0) -> re.Pattern[str]:
    """``re.compile``; a pattern whose groups nest deeper than Python's
    parser can follow is refused as ``re.error``, as any other bad pattern."""
    try:
        return re.compile(pattern, flags)
    except RecursionError:
        raise re.error("its groups nest too deeply") from None


def file_name(value: object, what: str) -> str:
    """``value`` as the name of a file or folder on this machine, which the
    caller gave as ``what`` (``path``, ``folder``): a str or an
    ``os.PathLike`` giving one.  Anything else (None, bytes, a number), an
    empty name, a NUL, or a lone surrogate no file name can hold is a VaultError naming
    ``what``, not Python's TypeError or ValueError from deep inside."""
    name = value.__fspath__() if isinstance(value, os.PathLike) else value
    if not isinstance(name, str):
        raise VaultError(
            f"Error: {what} must be a file or folder name as text (a str or a pathlib.Path), not {type(name).__name__}."
        )
    if not name:  # pathlib reads "" as ".": an unset setting would name the current folder
        raise VaultError(f"Error: {what} is empty; give a file or folder name ('.' for the current folder).")
    if "\x00" in name:
        raise VaultError(f"Error: {what} holds a NUL character, which no file or folder name can hold.")
    try:
        os.fsencode(name)
    except UnicodeEncodeError:
        raise VaultError(
            f"Error: {what} holds a lone surrogate (such as \\ud800), which no file or folder name can hold."
        ) from None
    return name


def check_flag(name: str, value: object) -> bool:
    """``value`` when it is True or False; else a VaultError naming
    ``name``: a flag is never guessed from a truthy value (``"no"``)."""
    if not isinstance(value, bool):
        raise VaultError(f"Error: {name} must be True or False, not {type(value).__name__}.")
    return value


def check_moment(name: str, value: object) -> float:
    """``value`` as a time in seconds since the epoch: a finite number, not a bool."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise VaultError(
            f"Error: {name} must be a time in seconds since the epoch (a finite number), not {value!r:.40}."
        )
    return value


# The parser of the re module (re._parser since 3.11; the public name
# ``sre_parse`` is deprecated), to look at a pattern's shape before a search.
_sre_parse: Any = importlib.import_module("re._parser")


BACKTRACKS = "repeats a part that can itself match the same text in more than one way (such as '(a+)+' or '(a|aa)*')"
BACKTRACKS_FIX = (
    "Write it without the nested repeat ('a+' for '(a+)+'), or make the inner repeat possessive ('(a++)+') "
    "or atomic ('(?>a+)+')."
)


def backtracks(compiled: re.Pattern[str]) -> bool:
    """Whether a regular expression repeats a part that can match the same
    text in more than one way (``(a+)+``, ``(a|aa)*``): Python's regex engine
    tries every way, exponentially many on text that nearly matches."""
    return _backtracks(_sre_parse.parse(compiled.pattern, compiled.flags), inside_repeat=False)


_REPEATS = {_sre_parse.MAX_REPEAT, _sre_parse.MIN_REPEAT}


def _items(part: Any) -> list[tuple[Any, Any]]:
    """The items of a parsed pattern, whether a SubPattern or a list."""
    return list(part.data if isinstance(part, _sre_parse.SubPattern) else part)


def _backtracks(part: Any, *, inside_repeat: bool) -> bool:
    """Whether a parsed pattern repeats a part that can match the same text
    in more than one way: a repeat of varying count (``a+``, ``a?``) or an
    alternation whose branches are not distinct literals (``a|aa``) inside
    another repeat (``(a+)+``, ``(a|aa)*``, ``(a?){30}``).  Python's regex
    engine backtracks through every way, exponentially many on text that
    nearly matches: such a search would never end, so it is refused before
    any search."""
    for op, av in _items(part):
        if op in _REPEATS:
            low, high, body = av
            if inside_repeat and low != high:
                return True
            if _backtracks(body, inside_repeat=inside_repeat or high > 1):
                return True
        elif op is _sre_parse.BRANCH:
            if inside_repeat and not _distinct_literals(av[1]):
                return True
            if any(_backtracks(branch, inside_repeat=inside_repeat) for branch in av[1]):
                return True
        elif op is _sre_parse.SUBPATTERN and _backtracks(av[-1], inside_repeat=inside_repeat):
            return True
        # POSSESSIVE_REPEAT and ATOMIC_GROUP never give back what they matched;
        # look-arounds, classes and literals match one way.
    return False


def _distinct_literals(branches: Any) -> bool:
    """Whether every branch is a plain text and none starts another, so at
    most one of them can match at any place."""
    texts: list[str] = []
    for branch in branches:
        items = _items(branch)
        if not all(op is _sre_parse.LITERAL for op, _ in items):
            return False
        texts.append("".join(chr(code) for _, code in items).casefold())
    return not any(a.startswith(b) for i, a in enumerate(texts) for j, b in enumerate(texts) if i != j)
