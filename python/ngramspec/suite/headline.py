"""README's headline table from one or more suite JSON reports: per model and
workload, plain decode speed, each peer's speed-up, ngramspec's, and the share of
the model-free limit. Usage: python -m ngramspec.suite.headline REPORT.json...
"""
from __future__ import annotations

import json
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ngramspec.suite.cells import percent, ratio
from ngramspec.suite.methods import OTHER_BUILD_METHODS

SERVER_PREFIX = "llama-server ngram-"


def median_or_nan(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def table(report: dict[str, Any]) -> list[str]:
    methods = report["methods"]
    servers = [m for m in methods if m.startswith(SERVER_PREFIX)]
    fast = "ngramspec fast" in methods
    head = ["workload", "plain tok/s"]
    if "prompt lookup" in methods:
        head.append("prompt lookup")
    if servers:
        head += ["best llama.cpp ngram mode", "ngramspec / best mode (tok/s)"]
    head += ["ngramspec", "limit", "ngramspec % of limit"]
    if fast:
        head += ["fast mode", "fast: first divergences"]
    head.append("identical to plain")
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for w in report["workloads"]:
        m = w["methods"]

        def speedup(name: str, m: dict[str, Any] = m) -> float:  # m bound now: called within this iteration only
            s = m.get(name)
            return median_or_nan(s["speedups"]) if s and not s["failed"] else math.nan

        cells = [w["name"], f"{m['plain']['decode_tok_s']:.1f}"]
        if "prompt lookup" in methods:
            cells.append(ratio(speedup("prompt lookup")) if not m["prompt lookup"]["failed"] else "failed")
        if servers:
            best = max(servers, key=lambda s: -1.0 if math.isnan(speedup(s)) else speedup(s))
            cells.append(f"{ratio(speedup(best))} ({best[len('llama-server '):]})")
            cells.append(ratio(m["ngramspec"]["decode_tok_s"] / m[best]["decode_tok_s"]))
        ours = speedup("ngramspec")
        cells += [ratio(ours), ratio(w["limit_speedup"]), percent(ours / w["limit_speedup"])]
        if fast:
            f = m["ngramspec fast"]
            cells += [ratio(speedup("ngramspec fast")), f"{f['diverged']} in {f['tokens']} tokens"]
        cells.append("yes" if m["ngramspec"]["identical"] else "NO")
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def builds_table(report: dict[str, Any]) -> list[str]:
    """The table over stock plain, when the report ran two builds side by side
    (``ngramspec bench --other-build``): each build's plain, exact and fast mode as a
    speed-up over the stock build's plain decoding, text identity with the same
    build's plain decoding, and llama-server's best n-gram mode when it ran."""
    local, other = report["build"], report["other_build"]
    name = {f"{local} {m}": m for m in OTHER_BUILD_METHODS}
    name.update({m: m for m in other["methods"]})
    stock_plain = "plain" if local == "stock" else other["plain"]   # the baseline
    servers = [m for m in report["methods"] if m.startswith(SERVER_PREFIX)]
    cols = [(f"{b} {kind}", f"{b} {m}") for b in ("stock", "exact-build")
            for kind, m in zip(("plain", "exact", "fast"), OTHER_BUILD_METHODS)]
    head = ["workload", "stock plain tok/s"] + [c for c, _ in cols[1:]]
    if servers:
        head.append("llama-server best n-gram mode (stock flags)" if local == "stock" else
                    "llama-server best n-gram mode")
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for w in report["workloads"]:
        m = w["methods"]
        base = m[stock_plain]

        def cell(method: str, m: dict[str, Any] = m, base: dict[str, Any] = base) -> str:
            f = m.get(method)
            if not f or f["failed"] or not f["decode_tok_s"]:
                return "-"
            # Run from the stock build, a method's speed-ups are already round by round
            # over stock plain; otherwise the ratio of median speeds.
            speed_up = (median_or_nan(f["speedups"]) if stock_plain == "plain"
                        else f["decode_tok_s"] / base["decode_tok_s"])
            text = ratio(speed_up)
            if not method.endswith("plain"):
                text += " =" if f["identical"] else f" ({f['diverged']} div. in {f['tokens']} tok)"
            return text

        cells = [w["name"], f"{base['decode_tok_s']:.1f}"] + [cell(name[key]) for _, key in cols[1:]]
        if servers:
            best = max(servers, key=lambda s: m[s]["decode_tok_s"] or 0.0)
            cells.append(f"{ratio(m[best]['decode_tok_s'] / base['decode_tok_s'])} ({best[len(SERVER_PREFIX):]})")
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def main(paths: list[str]) -> int:
    if not paths:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    for p in paths:
        report = json.loads(Path(p).read_text())
        print(f"**{report['model']}** ({report['machine']}; commit {report['commit']}; `{report['command']}`)\n")
        rows = builds_table(report) if "other_build" in report else table(report)
        print("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
