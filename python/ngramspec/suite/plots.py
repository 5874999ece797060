"""The report's four PNG plots: speed-up per workload and method (with the
limits), acceptance by draft position, tokens per forward pass, and the
verify-cost curve. And README's plot, drawn from committed JSON reports:

    python -m ngramspec.suite.plots headline REPORT.json... [--first-round REPORT.json] --out PNG [--note TEXT]

(speed-up over stock plain per workload: exact mode, fast mode, llama-server's best
n-gram mode, one panel per model; headline_figures.py reads the reports). It also
prints README's headline table.
"""
from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ngramspec.suite.headline_figures import COLUMNS, ModelFigures, collect, markdown_table
from ngramspec.suite.long_sources import LONG_WORKLOADS
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


HEADLINE_COLOURS = ("tab:green", "tab:orange", "tab:gray")


def headline_bars(f: ModelFigures) -> tuple[list[str], list[list[float]]]:
    """One model's panel: its workloads (long ones first) and, per column of COLUMNS, the
    bar heights (NaN where the method did not run)."""
    names = f.workloads
    return names, [[f.cells[w][label].speedup if label in f.cells[w] else math.nan for w in names]
                   for label, _, _ in COLUMNS]


def draw_headline(models: Sequence[ModelFigures], out: Path, note: str = "") -> Path:
    """README's plot: a panel per model, a group of bars per workload (exact mode on the
    exact build, fast mode on the stock build, llama-server's best n-gram mode with the
    stock flags), each a speed-up over the stock build's plain decoding; a hatched bar's
    text left its own build's plain greedy text in at least one run. ``note`` ends the title."""
    from matplotlib.patches import Patch

    plt = _pyplot()
    fig, axes = plt.subplots(len(models), 1, figsize=(11, 3.6 * len(models)), squeeze=False)
    width = 0.27
    for ax, f in zip(axes[:, 0], models):
        names, heights = headline_bars(f)
        for j, ((label, _, _), ys, colour) in enumerate(zip(COLUMNS, heights, HEADLINE_COLOURS)):
            xs = [i + (j - 1) * width for i in range(len(names))]
            bars = ax.bar(xs, [0 if math.isnan(y) else y for y in ys], width, color=colour, label=label)
            for bar, w in zip(bars, names):
                cell = f.cells[w].get(label)
                if cell is not None and not cell.identical:
                    bar.set_hatch("///")
                    bar.set_edgecolor("white")
        long = sum(w in LONG_WORKLOADS for w in names)
        if 0 < long < len(names):
            ax.axvline(long - 0.5, color="black", linestyle=":", linewidth=0.8)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
        ax.set_ylabel("speed-up over stock plain")
        ax.set_title(f"{f.model}: long workloads (left), short (right)" if 0 < long < len(names) else f.model,
                     fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        handles = [Patch(color=c, label=f"{label} ({'exact' if build == 'exact-build' else 'stock'} build)")
                   for (label, build, _), c in zip(COLUMNS, HEADLINE_COLOURS)]
        handles.append(Patch(facecolor="lightgray", edgecolor="white", hatch="///",
                             label="hatched: text left plain greedy's in a run"))
        top = max((y for ys in heights for y in ys if not math.isnan(y)), default=1.0)
        ax.set_ylim(0, top * 1.22)  # room for the legend above the bars
        ax.legend(handles=handles, fontsize=8, loc="upper left", ncol=len(handles))
    parts = [p.strip() for p in models[0].machine.split(",")] if models else []
    machine = ", ".join(parts[:2] + [p for p in parts if p.startswith("n_threads=")])
    fig.suptitle(f"Decode speed-up over stock plain llama-cpp-python ({machine})" + (f"\n{note}" if note else ""),
                 fontsize=11)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ngramspec.suite.plots",
                                     description="README's plot and table from suite JSON reports.")
    sub = parser.add_subparsers(dest="command", required=True)
    head = sub.add_parser("headline", help="speed-up over stock plain per workload: exact, fast, llama-server best")
    head.add_argument("reports", nargs="+", help="side-by-side suite JSON reports (ngramspec bench --other-build); "
                                                "a workload two reports of one model ran is read from the first")
    head.add_argument("--first-round", action="append", default=[], metavar="REPORT",
                      help="a report whose llama-servers were not restarted between rounds: its pooled modes "
                           "(ngram-mod) count by round one only (repeatable)")
    head.add_argument("--stock-server", action="append", default=[], metavar="REPORT",
                      help="a report run from the exact build whose llama-server was built with the stock "
                           "flags (its unprefixed llama-server modes are the stock column's; repeatable)")
    head.add_argument("--out", type=Path, required=True, help="the PNG to write")
    head.add_argument("--note", default="", help="a line under the plot's title (e.g. which build ran)")
    args = parser.parse_args(argv)
    models = collect(args.reports, args.first_round, args.stock_server)
    print("\n".join(markdown_table(models)))
    print(f"wrote {draw_headline(models, args.out, args.note)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
