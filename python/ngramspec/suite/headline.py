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
    build's plain decoding, and, for each build whose llama-server ran, its best
    n-gram mode and its plain decoding (``none``)."""
    local, other = report["build"], report["other_build"]
    name = {f"{local} {m}": m for m in OTHER_BUILD_METHODS}
    name.update({m: m for m in other["methods"]})
    stock_plain = "plain" if local == "stock" else other["plain"]   # the baseline
    prefix = {local: "", other["label"]: f"{other['label']} "}      # a build's llama-server methods
    cols: list[tuple[str, str]] = []
    for b in ("stock", "exact-build"):
        cols += [(f"{b} {kind}", f"{b} {m}") for kind, m in zip(("plain", "exact", "fast"), OTHER_BUILD_METHODS)]
        servers = _servers(report["methods"], prefix.get(b))
        if servers:
            cols.append((f"{b} llama-server best n-gram mode", "best:" + b))
        if f"{prefix.get(b)}llama-server none" in report["methods"]:
            cols.append((f"{b} llama-server none", f"{prefix.get(b)}llama-server none"))
    head = ["workload", "stock plain tok/s"] + [c for c, _ in cols[1:]]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for w in report["workloads"]:
        m = w["methods"]
        base = m[stock_plain]

        def speed_up(method: str, m: dict[str, Any] = m, base: dict[str, Any] = base) -> float:
            f = m.get(method)
            if not f or f["failed"] or not f["decode_tok_s"]:
                return math.nan
            # Run from the stock build, a method's speed-ups are already round by round
            # over stock plain; otherwise the ratio of median speeds.
            return (median_or_nan(f["speedups"]) if stock_plain == "plain"
                    else f["decode_tok_s"] / base["decode_tok_s"])

        def cell(key: str, m: dict[str, Any] = m) -> str:
            if key.startswith("best:"):
                servers = _servers(report["methods"], prefix.get(key[5:]))
                best = max(servers, key=lambda s: -1.0 if math.isnan(speed_up(s)) else speed_up(s))
                mode = best[len(prefix[key[5:]] + "llama-server "):]
                return f"{ratio(speed_up(best))} ({mode[len('ngram-'):]})" if not math.isnan(speed_up(best)) else "-"
            method = name.get(key, key)
            x = speed_up(method)
            if math.isnan(x):
                return "-"
            text = ratio(x)
            f = m[method]
            if not method.endswith(("plain", "none")):
                text += " =" if f["identical"] else f" ({f['diverged']} div. in {f['tokens']} tok)"
            return text

        cells = [w["name"], f"{base['decode_tok_s']:.1f}"] + [cell(key) for _, key in cols[1:]]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def _servers(methods: Sequence[str], prefix: str | None) -> list[str]:
    """A build's llama-server n-gram modes in the report (none when its server did not run)."""
    if prefix is None:
        return []
    return [m for m in methods if m.startswith(prefix + SERVER_PREFIX)]


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
