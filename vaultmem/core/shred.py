"""Keys that can be destroyed one by one: a puncturable key tree per epoch.

Format 2 encrypts every file version under a key of its own, so that erasing
one version destroys one key.  Storing a key per version would cost every
write a second durable update (the key store); instead each version's key is
a leaf of a binary tree of hashes (a GGM tree) under an *epoch* secret, at the
random 64-bit *nonce* written in the blob's header::

    node(prefix + "0") = SHA-256("vaultmem-shred 0" | node(prefix))
    node(prefix + "1") = SHA-256("vaultmem-shred 1" | node(prefix))
    key(nonce)         = node(the nonce's 64 bits)

An epoch is stored as a *cover*: a set of nodes, none a prefix of another,
from which every key not destroyed can be derived.  A new epoch's cover is
its root alone.  Destroying the key at a nonce (``puncture``) replaces the
node above it by the siblings along the path down to it: 64 nodes at most,
and no node left can derive the destroyed key, since SHA-256 does not run
backwards.  Two clones that destroyed different keys of one epoch merge to
the cover of the keys both still have (``intersect``).

Pure: no I/O; the covers are wrapped and stored by the keyring.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

DEPTH = 64
_CHILD = (b"vaultmem-shred 0", b"vaultmem-shred 1")

Cover = dict[str, bytes]  # prefix ("" for the root, else a string of 0s and 1s) -> node secret


def bits(nonce: int) -> str:
    if not 0 <= nonce < 1 << DEPTH:
        raise ValueError("a nonce is a 64-bit unsigned number")
    return format(nonce, "064b")


def _down(node: bytes, path: str) -> bytes:
    sha = hashlib.sha256
    for bit in path:
        node = sha(_CHILD[bit == "1"] + node).digest()
    return node


def _holder(cover: Mapping[str, bytes], path: str) -> str | None:
    """The prefix in ``cover`` above the leaf ``path``, or None."""
    for length in range(DEPTH + 1):
        if path[:length] in cover:
            return path[:length]
    return None


def leaf(cover: Mapping[str, bytes], nonce: int) -> bytes | None:
    """The key at ``nonce``, or None when it was destroyed."""
    path = bits(nonce)
    prefix = _holder(cover, path)
    if prefix is None:
        return None
    return _down(cover[prefix], path[len(prefix) :])


def puncture(cover: Mapping[str, bytes], nonces: Iterable[int]) -> Cover:
    """A cover deriving every key of ``cover`` but those at ``nonces``."""
    out = dict(cover)
    for nonce in nonces:
        path = bits(nonce)
        prefix = _holder(out, path)
        if prefix is None:
            continue  # destroyed already
        node = out.pop(prefix)
        for depth in range(len(prefix), DEPTH):
            sibling = path[:depth] + ("1" if path[depth] == "0" else "0")
            out[sibling] = _down(node, sibling[len(prefix) :])
    return out


def intersect(a: Mapping[str, bytes], b: Mapping[str, bytes]) -> Cover:
    """The cover of the keys both ``a`` and ``b`` derive (two covers of one epoch)."""
    out: Cover = {}
    for mine, other in ((a, b), (b, a)):
        for prefix, node in mine.items():
            if any(prefix[:length] in other for length in range(len(prefix) + 1)):
                out[prefix] = node
    return out


def alive(cover: Mapping[str, bytes], nonce: int) -> bool:
    return _holder(cover, bits(nonce)) is not None


def check(cover: Mapping[str, bytes]) -> bool:
    """Whether ``cover`` is well formed: prefixes of 0s and 1s at most 64
    long, none a prefix of another, 32-byte nodes."""
    for prefix, node in cover.items():
        if len(prefix) > DEPTH or prefix.strip("01") or len(node) != 32:
            return False
        if any(prefix[:length] in cover for length in range(len(prefix))):
            return False
    return True
