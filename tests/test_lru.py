"""The bounded LRU behind vaultmem's caches: eviction order, bounds, threads."""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Iterator

import pytest

from vaultmem.core.lru import LRU
from vaultmem.git import objects, snapshot


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Switch threads often, so races have every chance to show."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def test_the_least_recently_put_entry_goes_first() -> None:
    cache: LRU[str, int] = LRU(3)
    for i, key in enumerate("abcd"):
        cache.put(key, i)
    assert cache.ordered_keys() == ["b", "c", "d"] and len(cache) == 3
    assert cache.get("a") is None
    assert cache.get("b") == 1


def test_get_and_put_make_an_entry_the_most_recently_used() -> None:
    cache: LRU[str, int] = LRU(3)
    for i, key in enumerate("abc"):
        cache.put(key, i)
    assert cache.get("a") == 0  # now b is the oldest
    cache.put("d", 3)
    assert cache.ordered_keys() == ["c", "a", "d"]
    cache.put("c", 20)  # replacing makes it the newest
    cache.put("e", 4)
    assert cache.ordered_keys() == ["d", "c", "e"] and cache.get("c") == 20


def test_a_miss_and_contains_do_not_change_the_order() -> None:
    cache: LRU[str, int] = LRU(2)
    cache.put("a", 0)
    cache.put("b", 1)
    assert cache.get("x") is None and "a" in cache and "x" not in cache
    cache.put("c", 2)
    assert cache.ordered_keys() == ["b", "c"]


def test_pop_and_clear() -> None:
    cache: LRU[str, bytes] = LRU(10, weight=len)
    cache.put("a", b"aaa")
    cache.put("b", b"bb")
    assert cache.pop("a") == b"aaa" and cache.pop("a") is None
    assert cache.total == 2 and cache.ordered_keys() == ["b"]
    cache.clear()
    assert len(cache) == 0 and cache.total == 0 and cache.get("b") is None


def test_a_weighted_cache_keeps_its_total_within_the_limit() -> None:
    cache: LRU[str, bytes] = LRU(10, weight=len)
    cache.put("a", b"aaaa")
    cache.put("b", b"bbbb")
    cache.put("c", b"cccc")  # 12 bytes: a goes
    assert cache.ordered_keys() == ["b", "c"] and cache.total == 8
    cache.put("b", b"b")  # replacing counts the new weight only
    assert cache.total == 5
    cache.put("d", b"dddddd")  # 11 bytes: c, put before b was replaced, goes
    assert cache.ordered_keys() == ["b", "d"] and cache.total == 7


def test_a_value_heavier_than_the_limit_is_not_kept_and_drops_nothing() -> None:
    cache: LRU[str, bytes] = LRU(10, weight=len)
    cache.put("a", b"aaaa")
    cache.put("b", b"bbbb")
    cache.put("big", b"x" * 11)
    assert cache.get("big") is None and cache.ordered_keys() == ["a", "b"] and cache.total == 8
    cache.put("a", b"y" * 11)  # what was held for the key goes: it is no longer the value
    assert cache.get("a") is None and cache.ordered_keys() == ["b"] and cache.total == 4


def test_a_limit_of_zero_holds_nothing_and_a_negative_one_is_refused() -> None:
    cache: LRU[str, int] = LRU(0)
    cache.put("a", 1)
    assert len(cache) == 0 and cache.get("a") is None
    with pytest.raises(ValueError):
        LRU(-1)


def test_threads_hammering_one_cache_keep_it_within_its_bound(fast_switching: None) -> None:
    limit = 64
    counted: LRU[int, int] = LRU(limit)
    weighed: LRU[int, bytes] = LRU(1000, weight=len)
    errors: list[BaseException] = []
    seen_over: list[str] = []
    start = threading.Barrier(9)
    done = threading.Event()

    def hammer(seed: int) -> None:
        rng = random.Random(seed)
        try:
            start.wait()
            for _ in range(20_000):
                key = rng.randrange(200)
                op = rng.random()
                if op < 0.45:
                    found = counted.get(key)
                    assert found is None or found == key * 2
                    data = weighed.get(key)
                    assert data is None or data == bytes([key % 256]) * (key % 50 + 1)
                elif op < 0.9:
                    counted.put(key, key * 2)
                    weighed.put(key, bytes([key % 256]) * (key % 50 + 1))
                elif op < 0.99:
                    counted.pop(key)
                    weighed.pop(key)
                else:
                    counted.clear()
        except BaseException as err:  # reported by the main thread
            errors.append(err)

    def watch() -> None:
        start.wait()
        while not done.is_set():
            if len(counted) > limit or counted.total > limit:
                seen_over.append(f"{len(counted)} entries")
            if weighed.total > weighed.limit:
                seen_over.append(f"{weighed.total} bytes")

    threads = [threading.Thread(target=hammer, args=(seed,)) for seed in range(8)]
    watcher = threading.Thread(target=watch)
    for thread in [*threads, watcher]:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    watcher.join()

    assert errors == [] and seen_over == []
    assert len(counted) == counted.total <= limit
    held = {key: weighed.get(key) for key in weighed.ordered_keys()}
    assert weighed.total == sum(len(v) for v in held.values() if v is not None) <= 1000


def test_the_shared_caches_keep_their_bounds() -> None:
    trees = snapshot.TreeCache(limit=2)
    raws = {bytes([i]) * 20: objects.encode_tree({b"f%d" % i: (objects.MODE_BLOB, bytes([i]) * 20)}) for i in range(3)}
    reads: list[bytes] = []

    def read(oid: bytes) -> bytes:
        reads.append(oid)
        return raws[oid]

    first, second, third = raws
    trees.get(read, first)
    trees.get(read, second)
    trees.get(read, first)  # held: no read, and now the most recently used
    trees.get(read, third)  # second goes
    trees.get(read, first)
    assert reads == [first, second, third]
    trees.get(read, second)
    assert reads == [first, second, third, second]
    assert trees.limit == 2 and snapshot.TreeCache().limit == 4096 and snapshot.Layouts().limit == 256

    recent = snapshot.RecentObjects(limit=10)
    big = objects.packed(objects.BLOB, b"x" * 11)
    small = objects.packed(objects.BLOB, b"abc")
    recent.add([small, big])
    assert recent.get(small.id) == b"abc" and recent.get(big.id) is None
    assert recent.limit == 10 and snapshot.RecentObjects().limit == 8 << 20
