"""Checks on values handed in by callers, shared by every layer."""

from __future__ import annotations

import re
from typing import TypeGuard


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
