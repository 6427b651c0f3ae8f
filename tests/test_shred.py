"""The puncturable key tree of format 2 (vaultmem.core.shred): properties."""

from __future__ import annotations

import hashlib
import os

from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from vaultmem.core import shred

nonces = st.integers(min_value=0, max_value=(1 << 64) - 1)
# Nonces that share long prefixes too: the hard cases for covers.
near = st.builds(lambda base, low: (base & ~0xFFFF) | low, nonces, st.integers(min_value=0, max_value=0xFFFF))
some = st.lists(st.one_of(nonces, near), max_size=12)


def root() -> shred.Cover:
    return {"": os.urandom(32)}


def test_a_leaf_is_the_hash_chain_from_the_root() -> None:
    cover = root()
    node = cover[""]
    for bit in shred.bits(5):
        node = hashlib.sha256((b"vaultmem-shred 1" if bit == "1" else b"vaultmem-shred 0") + node).digest()
    assert shred.leaf(cover, 5) == node


@settings(max_examples=examples(200), deadline=None)
@given(erased=some, probe=st.lists(st.one_of(nonces, near), max_size=12))
def test_puncturing_destroys_exactly_those_keys_and_keeps_every_other(erased: list[int], probe: list[int]) -> None:
    cover = root()
    punctured = shred.puncture(cover, erased)
    assert shred.check(punctured)
    assert len(punctured) <= 1 + shred.DEPTH * len(set(erased))
    for nonce in [*erased, *probe]:
        if nonce in erased:
            assert shred.leaf(punctured, nonce) is None
            assert not shred.alive(punctured, nonce)
        else:
            assert shred.leaf(punctured, nonce) == shred.leaf(cover, nonce)  # the very same key


@settings(max_examples=examples(200), deadline=None)
@given(a=some, b=some, probe=st.lists(st.one_of(nonces, near), max_size=12))
def test_two_clones_merge_to_the_keys_both_still_have(a: list[int], b: list[int], probe: list[int]) -> None:
    cover = root()
    merged = shred.intersect(shred.puncture(cover, a), shred.puncture(cover, b))
    assert shred.check(merged)
    both = shred.puncture(cover, [*a, *b])
    for nonce in [*a, *b, *probe]:
        assert shred.leaf(merged, nonce) == shred.leaf(both, nonce)
    assert shred.intersect(merged, merged) == merged


@settings(max_examples=examples(100), deadline=None)
@given(erased=some)
def test_no_node_left_derives_an_erased_key(erased: list[int]) -> None:
    """Every node of the cover lies off the path of each erased nonce, so no
    chain of hashes from it reaches that leaf."""
    punctured = shred.puncture(root(), erased)
    for nonce in erased:
        path = shred.bits(nonce)
        assert not any(path.startswith(prefix) for prefix in punctured)


def test_malformed_covers_are_refused() -> None:
    node = os.urandom(32)
    assert not shred.check({"2": node})
    assert not shred.check({"0": node, "01": node})  # one above another
    assert not shred.check({"0": b"short"})
    assert not shred.check({"0" * 65: node})
    assert shred.check({"0": node, "10": node})
