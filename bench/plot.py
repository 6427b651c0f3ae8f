"""docs/benchmarks.png: median latency per command against history length
(left) and against memory size (right), on a quiet disk; vaultmem solid, the
SDK's own tool dashed, one colour per command."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from measure import COMMANDS
from report import SDK, VAULT, Results, vault_at

WIDTH, HEIGHT, DPI = 14, 6, 100  # 1400 x 600 pixels


def pyplot() -> ModuleType:
    """matplotlib's pyplot on the Agg backend (files only, no display)."""
    try:
        import matplotlib
    except ImportError as err:
        raise SystemExit(
            "bench/run.py draws its plot with matplotlib, which is not installed: pip install -e '.[bench]'"
        ) from err
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _panel(ax: Any, xs: list[int], vaultmem: dict[str, list[float]], sdk: dict[str, list[float]], colors: Any) -> None:
    from matplotlib.ticker import NullLocator

    for n, command in enumerate(COMMANDS):
        color = colors(n)
        ax.plot(xs, [v * 1e6 for v in vaultmem[command]], "-o", color=color, label=command)
        ax.plot(xs, [v * 1e6 for v in sdk[command]], "--", color=color, alpha=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(xs, [f"{x:,}" for x in xs])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_ylabel("median latency per call (µs, log scale)")
    ax.grid(True, which="both", alpha=0.3)


def draw(results: Results, path: Path) -> None:
    plt = pyplot()
    from matplotlib.lines import Line2D

    colors = plt.get_cmap("tab10")
    fig, (left, right) = plt.subplots(1, 2, figsize=(WIDTH, HEIGHT), dpi=DPI)
    hs, hsweep = results.histories, results.history_sweep
    _panel(
        left,
        hs,
        {c: [hsweep.median(c, vault_at(h)) for h in hs] for c in COMMANDS},
        {c: [hsweep.median(c, SDK)] * len(hs) for c in COMMANDS},  # the SDK keeps no history
        colors,
    )
    left.set_title(f"Against history length ({hsweep.files:,} files)")
    left.set_xlabel("commits in the vault's history (log scale)")
    sizes = [s.files for s in results.size_sweeps]
    _panel(
        right,
        sizes,
        {c: [s.median(c, VAULT) for s in results.size_sweeps] for c in COMMANDS},
        {c: [s.median(c, SDK) for s in results.size_sweeps] for c in COMMANDS},
        colors,
    )
    right.set_title(f"Against memory size ({results.size_history:,} commits)")
    right.set_xlabel("files in the memory (log scale)")
    handles, labels = left.get_legend_handles_labels()
    handles += [Line2D([], [], color="black", linestyle="-"), Line2D([], [], color="black", linestyle="--")]
    labels += ["vaultmem", "SDK"]
    fig.legend(handles, labels, loc="center right", frameon=False)
    fig.suptitle("vaultmem vs the SDK's filesystem memory tool: median latency per call, quiet disk")
    fig.tight_layout(rect=(0, 0, 0.88, 1))
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
