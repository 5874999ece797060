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

SERVER_PREFIX = "llama-server ngram-"


def median_or_nan(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def _x(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:.2f}x"


def _pct(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:.0%}"


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
            cells.append(_x(speedup("prompt lookup")) if not m["prompt lookup"]["failed"] else "failed")
        if servers:
            best = max(servers, key=lambda s: -1.0 if math.isnan(speedup(s)) else speedup(s))
            cells.append(f"{_x(speedup(best))} ({best[len('llama-server '):]})")
            cells.append(_x(m["ngramspec"]["decode_tok_s"] / m[best]["decode_tok_s"]))
        ours = speedup("ngramspec")
        cells += [_x(ours), _x(w["limit_speedup"]), _pct(ours / w["limit_speedup"])]
        if fast:
            f = m["ngramspec fast"]
            cells += [_x(speedup("ngramspec fast")), f"{f['diverged']} in {f['tokens']} tokens"]
        cells.append("yes" if m["ngramspec"]["identical"] else "NO")
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def main(paths: list[str]) -> int:
    if not paths:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    for p in paths:
        report = json.loads(Path(p).read_text())
        print(f"**{report['model']}** ({report['machine']}; commit {report['commit']}; `{report['command']}`)\n")
        print("\n".join(table(report)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
