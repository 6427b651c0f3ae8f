"""How often the secrets filter is wrong, and how fast it is, on the test corpus.

    python bench/secrets_rate.py [--runs 5] [--independent]

Reads tests/corpus/ordinary (text that must not be flagged; files named
``personal-*`` hold e-mail addresses and phone numbers on purpose) and
tests/corpus/secrets (each file starts with ``expect: <kinds>``), and prints:

* the size of each corpus;
* false positives: the share of ordinary files, and of their lines, with any
  finding, with and without personal-data detection;
* detection per kind: the share of secrets files listing a kind in which that
  kind is found;
* how often a random 16-digit number passes as a card (a known prefix and
  Luhn make about 3 in 100 look like one: no detector can tell them apart);
* throughput: every ordinary file scanned one by one, as writes are, timed
  with time.perf_counter, the median of ``--runs`` runs.

tests/test_secrets.py asserts the corpus numbers; this script is for quoting.
The corpus was written alongside the detectors, so it guards against
regressions more than it measures; ``--independent`` also scans text nobody
tuned the detectors on: the Python standard library running this script
(its top-level modules and the email and json packages).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections import Counter
from pathlib import Path

from vaultmem.core.detectors import KINDS, Detector, Match, detectors, scan

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "corpus"


def load(folder: str) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((CORPUS / folder).iterdir())}


def expected(text: str) -> set[str]:
    return set(text.splitlines()[0].removeprefix("expect: ").split())


def flagged_lines(text: str, matches: list[Match]) -> int:
    return len({n for m in matches for n in range(text.count("\n", 0, m.start), text.count("\n", 0, m.end) + 1)})


def false_positives(files: dict[str, str], dets: tuple[Detector, ...]) -> tuple[int, int, int, int]:
    hit_files = hit_lines = lines = 0
    for text in files.values():
        matches = scan(text, dets)
        lines += len(text.splitlines())
        hit_lines += flagged_lines(text, matches)
        hit_files += bool(matches)
    return hit_files, len(files), hit_lines, lines


def throughput(files: dict[str, str], dets: tuple[Detector, ...], runs: int) -> tuple[float, float]:
    """Median seconds for one pass over all files, and MB/s (UTF-8 bytes)."""
    texts = list(files.values())
    size = sum(len(t.encode()) for t in texts)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        for text in texts:
            scan(text, dets)
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    return median, size / median / 1e6


def pct(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.2f}%)" if whole else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--independent", action="store_true", help="also scan the Python standard library")
    args = parser.parse_args()

    ordinary, secrets = load("ordinary"), load("secrets")
    plain = {name: text for name, text in ordinary.items() if not name.startswith("personal-")}
    secret_only, with_personal = detectors(), detectors(personal_data=True)

    print("corpus")
    print(f"  {'':<28}{'files':>7}{'lines':>9}{'KB':>9}")
    personal = {name: text for name, text in ordinary.items() if name.startswith("personal-")}
    for name, files in (("ordinary", ordinary), ("  of which personal-*", personal), ("secrets", secrets)):
        lines = sum(len(t.splitlines()) for t in files.values())
        size = sum(len(t.encode()) for t in files.values()) / 1024
        print(f"  {name:<28}{len(files):>7}{lines:>9}{size:>9.1f}")

    print("\nfalse positives (ordinary corpus)")
    print(f"  {'detectors':<36}{'files flagged':>20}{'lines flagged':>22}")
    rows = (
        ("secrets (default)", ordinary, secret_only),
        ("secrets + personal, all files", ordinary, with_personal),
        ("secrets + personal, not personal-*", plain, with_personal),
    )
    for label, files, dets in rows:
        hit_files, n_files, hit_lines, n_lines = false_positives(files, dets)
        print(f"  {label:<36}{pct(hit_files, n_files):>20}{pct(hit_lines, n_lines):>22}")

    print("\ndetection per kind (secrets corpus, secrets + personal detectors)")
    wanted: Counter[str] = Counter()
    got: Counter[str] = Counter()
    unexpected = 0
    for text in secrets.values():
        want = expected(text)
        kinds = {m.kind for m in scan(text, with_personal)}
        wanted.update(want)
        got.update(want & kinds)
        unexpected += len(kinds - want)
    print(f"  {'kind':<24}{'files':>7}{'found':>7}{'rate':>9}")
    for kind in KINDS:
        print(f"  {kind:<24}{wanted[kind]:>7}{got[kind]:>7}{100 * got[kind] / max(wanted[kind], 1):>8.1f}%")
    total_want, total_got = sum(wanted.values()), sum(got.values())
    print(f"  {'all kinds':<24}{total_want:>7}{total_got:>7}{100 * total_got / total_want:>8.1f}%")
    print(f"  kinds found that a file did not list: {unexpected}")

    rng = random.Random(1)
    numbers = [f"{rng.randrange(10**15, 10**16)}" for _ in range(100_000)]
    cards = sum(bool(scan(f"ref {n} ok", secret_only)) for n in numbers)
    print(f"\nrandom 16-digit numbers reported as cards: {pct(cards, len(numbers))}")

    size_mb = sum(len(t.encode()) for t in ordinary.values()) / 1e6
    print(f"\nthroughput (ordinary corpus, {size_mb:.2f} MB in {len(ordinary)} files, median of {args.runs} runs)")
    for label, dets in (("secrets (default)", secret_only), ("secrets + personal", with_personal)):
        seconds, rate = throughput(ordinary, dets, args.runs)
        per_100kb = seconds / size_mb * 0.1 * 1000
        print(f"  {label:<24}{seconds * 1000:>8.1f} ms{rate:>8.1f} MB/s   ({per_100kb:.1f} ms per 100 KB)")
    if args.independent:
        independent(secret_only)


def independent(dets: tuple[Detector, ...]) -> None:
    """False positives on text the detectors were not written against."""
    import sysconfig

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    paths = sorted([*stdlib.glob("*.py"), *stdlib.glob("email/*.py"), *stdlib.glob("json/*.py")])
    files = {str(p.relative_to(stdlib)): p.read_text(encoding="utf-8", errors="replace") for p in paths}
    hit_files, n_files, hit_lines, n_lines = false_positives(files, dets)
    size_mb = sum(len(t.encode()) for t in files.values()) / 1e6
    print(f"\nindependent text: the Python standard library ({stdlib}, {size_mb:.1f} MB)")
    print(f"  files flagged {pct(hit_files, n_files)}, lines flagged {pct(hit_lines, n_lines)}")


if __name__ == "__main__":
    main()
