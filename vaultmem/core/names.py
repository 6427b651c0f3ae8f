"""Sealed names: what a vault with sealed names stores instead of a path.

Pure rules, no I/O.  In a vault with sealed names every segment of a path is
stored (as a tree entry, in trailers and subjects) as an opaque *token*: a
keyed hash of the path up to and including that segment, under the vault's
name key.  The real name lives only inside each file version's encrypted
payload, which binds the version to its path, under the version's own
erasable key: erasing every version of a file erases its name with it.

A token depends on the whole path above it, so the same file name in two
folders gives two tokens, and a token of a folder is the prefix of every
token path below it (``seal(a/b)`` starts with ``seal(a)``).  The name key is
never destroyed: someone holding the vault's key who guesses a full path can
compute its token and see that it was there (docs/erasure.md, "Sealed names").

:class:`Names` also remembers, for this process, the real path of every
token path it sealed or was told about, so listings and the history name
files without decrypting them again; an erasure clears that memory.
"""

from __future__ import annotations

import hmac
import re
import threading

from vaultmem.core.lru import LRU
from vaultmem.core.paths import ROOT, MemoryPath

TOKEN_LENGTH = 16  # base32 characters after the leading "n": 80 bits
_TOKEN = re.compile(rf"n[a-z2-7]{{{TOKEN_LENGTH}}}")
_PURPOSE = b"vaultmem-name\0"
_BASE32 = "abcdefghijklmnopqrstuvwxyz234567"
# The root tree of a commit whose memory tree holds sealed names carries this
# entry beside ``memories`` (a blob with MARKER_CONTENT), so a reader knows
# which commits to read through tokens: a vault that sealed its names later
# keeps its earlier commits as they were written.
MARKER = b"sealed-names"
MARKER_CONTENT = b"vaultmem sealed names 1\n"
_REMEMBERED = 1 << 16  # paths each way, per process


def is_token(name: str) -> bool:
    """Whether ``name`` has the form of a sealed segment."""
    return _TOKEN.fullmatch(name) is not None


def is_sealed(path: MemoryPath) -> bool:
    """Whether every segment of ``path`` is a token (``/memories`` is not)."""
    return bool(path.parts) and all(is_token(part) for part in path.parts)


def is_sealed_text(text: str) -> bool:
    """:func:`is_sealed` of a canonical path text, without parsing it."""
    return text.startswith(ROOT + "/") and all(is_token(part) for part in text[len(ROOT) + 1 :].split("/"))


class Names:
    """Seals paths under one name key and remembers what it sealed."""

    def __init__(self, key: bytes) -> None:
        self.key = key
        self._hmac = hmac.new(key, _PURPOSE, "sha256")  # keyed once; each token copies it
        self._sealed: LRU[tuple[str, ...], tuple[str, ...]] = LRU(_REMEMBERED)
        self._real: LRU[tuple[str, ...], tuple[str, ...]] = LRU(_REMEMBERED)  # a miss is read back again
        # Names that could not be read back (every version below was erased):
        # the path shown, the token in place of the name, and what it stores.
        self._aliases: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._lock = threading.Lock()  # for the aliases; the LRUs lock themselves

    def token(self, parts: tuple[str, ...]) -> str:
        """The token of the last segment of ``parts`` (a path below /memories)."""
        text = ROOT + "".join("/" + p for p in parts)
        mac = self._hmac.copy()
        mac.update(text.encode("utf-8"))
        bits = int.from_bytes(mac.digest()[:10], "big")  # base32 (RFC 4648, lowercase) of 80 bits
        return "n" + "".join(_BASE32[(bits >> shift) & 31] for shift in range(75, -1, -5))

    def seal(self, path: MemoryPath) -> MemoryPath:
        """The path as a vault with sealed names stores it.  Leading segments
        that are tokens already are stored as they are: that is how a version
        whose name was erased is named from then on (and a name chosen in the
        form of a token is no name to hide)."""
        parts = path.parts
        sealed = self._sealed.get(parts)
        if sealed is None and self._aliases:
            with self._lock:
                sealed = self._aliases.get(parts)
        if sealed is None:
            above = self.seal(MemoryPath(parts[:-1])).parts if len(parts) > 1 else ()
            if not parts:
                sealed = ()
            elif above == parts[:-1] and is_token(parts[-1]):
                sealed = parts  # tokens only, so far: stored as they are
            else:
                sealed = (*above, self.token(parts))
            self._sealed.put(parts, sealed)
            if sealed[-1:] != parts[-1:]:  # a token stored as itself names nothing (its prefixes were done above)
                self._real.put(sealed, parts)
        return MemoryPath(sealed)

    def seal_text(self, text: str) -> str:
        """:meth:`seal` of a canonical path text (``/memories`` stays itself)."""
        parts = tuple(text[len(ROOT) + 1 :].split("/")) if text != ROOT else ()
        return self.seal(MemoryPath(parts)).text

    def alias(self, shown: MemoryPath, sealed: MemoryPath) -> None:
        """Remember that ``shown`` (a real folder path and a token where a name
        could not be read) stands for the stored path ``sealed``."""
        with self._lock:
            self._aliases[shown.parts] = sealed.parts

    def known(self, sealed: MemoryPath) -> MemoryPath | None:
        """The real path of a token path sealed or learned in this process."""
        if not sealed.parts:
            return sealed
        found = self._real.get(sealed.parts)
        return MemoryPath(found) if found is not None else None

    def forget(self) -> None:
        """Drop every remembered name (after an erasure)."""
        self._sealed.clear()
        self._real.clear()
        with self._lock:
            self._aliases.clear()
