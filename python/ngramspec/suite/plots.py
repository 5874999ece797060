"""The report's four PNG plots: speed-up per workload and method (with the
limits), acceptance by draft position, tokens per forward pass, and the
verify-cost curve."""
from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ngramspec.suite.runner import Suite
from ngramspec.suite.summary import WorkloadFigures


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only: never needs a display
    import matplotlib.pyplot as plt

    return plt


def draw_all(out_dir: Path, name: str, suite: Suite, figs: Sequence[WorkloadFigures]) -> list[str]:
    plt = _pyplot()
    paths = []
    for suffix, draw in [("speedup", _speedup), ("acceptance", _acceptance), ("tokens-per-pass", _tokens_per_pass),
                         ("verify-cost", _verify_cost)]:
        fig, ax = plt.subplots(figsize=(9, 4.5))
        draw(ax, suite, figs)
        ax.set_title(f"{suite.model}: {ax.get_title()}")
        fig.tight_layout()
        path = out_dir / f"{name}-{suffix}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(str(path))
    return paths


def _speedup(ax: Any, suite: Suite, figs: Sequence[WorkloadFigures]) -> None:
    methods = [m for m in suite.methods if m != "plain"]
    names = [f.name for f in figs]
    width = 0.8 / (len(methods) + 2)
    for j, m in enumerate(methods):
        meds = [f.methods[m].speedup for f in figs]
        lo = [med - min(f.methods[m].speedups, default=med) for med, f in zip(meds, figs)]
        hi = [max(f.methods[m].speedups, default=med) - med for med, f in zip(meds, figs)]
        xs = [i + (j - len(methods) / 2) * width for i in range(len(figs))]
        ax.bar(xs, [0 if math.isnan(v) else v for v in meds], width, yerr=[lo, hi], capsize=2, label=m)
    for j, (label, key) in enumerate([("model-free limit", "limit"), ("perfect drafter", "perfect")]):
        xs = [i + (len(methods) + j - len(methods) / 2) * width for i in range(len(figs))]
        ax.bar(xs, [getattr(f, key).speedup for f in figs], width, label=label, alpha=0.35, hatch="//" if j else None)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(figs)), names, rotation=20, ha="right")
    ax.set_ylabel("decode speed-up over plain greedy")
    ax.set_title("speed-up (bars: median; whiskers: spread over rounds)")
    ax.legend(fontsize=8)


def _acceptance(ax: Any, suite: Suite, figs: Sequence[WorkloadFigures]) -> None:
    for f in figs:
        acc = f.acceptance_by_position
        if acc:
            ax.plot(range(1, len(acc) + 1), acc, marker="o", label=f.name)
    ax.set_xlabel("draft position")
    ax.set_ylabel("ngramspec acceptance (given the earlier ones were accepted)")
    ax.set_ylim(0, 1.05)
    ax.set_title("acceptance by draft position")
    ax.legend(fontsize=8)


def _tokens_per_pass(ax: Any, suite: Suite, figs: Sequence[WorkloadFigures]) -> None:
    xs = range(len(figs))
    ax.bar([x - 0.2 for x in xs], [f.tokens_per_pass for f in figs], 0.4, label="ngramspec")
    ax.bar([x + 0.2 for x in xs], [f.limit.tokens_per_pass for f in figs], 0.4, label="model-free oracle", alpha=0.5)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(list(xs), [f.name for f in figs], rotation=20, ha="right")
    ax.set_ylabel("generated tokens per forward pass")
    ax.set_title("tokens per forward pass")
    ax.legend(fontsize=8)


def _verify_cost(ax: Any, suite: Suite, figs: Sequence[WorkloadFigures]) -> None:
    cost = suite.cost.relative
    sizes = list(range(1, len(cost) + 1))
    exact = [b == 1 or suite.invariance.allows(b) for b in sizes]
    ax.plot(sizes, cost, color="tab:blue", label="r(B) measured")
    ax.scatter([b for b, e in zip(sizes, exact) if e], [c for c, e in zip(cost, exact) if e], color="tab:green",
               zorder=3, label="bit-exact size")
    ax.scatter([b for b, e in zip(sizes, exact) if not e], [c for c, e in zip(cost, exact) if not e],
               color="tab:red", marker="x", zorder=3, label="not bit-exact")
    ax.plot(sizes, sizes, color="gray", linestyle=":", label="r(B) = B (no batching gain)")
    ax.set_xlabel("verify batch size B")
    ax.set_ylabel("time relative to one token")
    ax.set_title(f"verify-cost curve (one token = {suite.cost.single_seconds * 1e3:.1f} ms)")
    ax.legend(fontsize=8)
