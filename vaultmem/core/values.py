"""Checks on values handed in by callers, shared by every layer."""

from __future__ import annotations

from typing import TypeGuard


def is_int(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an integer and not a bool (``True`` is an ``int``
    to Python, never a count or a size to vaultmem)."""
    return isinstance(value, int) and not isinstance(value, bool)
