"""README's headline figures, read from suite JSON reports that ran the two builds side
by side (``ngramspec bench --other-build``): per model and workload, the decode speed-up
over the stock build's plain decoding of exact mode (on the exact build), fast mode (on
the stock build) and llama-server's best n-gram mode (the stock build's flags), and
whether each one's text was its own build's plain greedy text in every run.

``python -m ngramspec.suite.plots headline REPORT.json...`` draws them (plots.py) and
prints them as README's table (``markdown_table``).
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ngramspec.suite.cells import ratio
from ngramspec.suite.headline import SERVER_PREFIX
from ngramspec.suite.headline import median_or_nan as _median
from ngramspec.suite.long_sources import LONG_WORKLOADS
from ngramspec.suite.summary import geomean

# The three columns: (label, build, the suite's method on that build). The llama-server
# column is the best of that build's llama-server n-gram modes on each workload.
EXACT, FAST, SERVER = "exact mode", "fast mode", "llama-server best n-gram mode"
COLUMNS = ((EXACT, "exact-build", "ngramspec"), (FAST, "stock", "ngramspec fast"),
           (SERVER, "stock", SERVER_PREFIX))
# llama-server's modes that keep a pool of every request's tokens across requests: run
# against a server that was not restarted between rounds, their later rounds draft from
# the earlier rounds' answers, so only round one counts (``first_round``).
POOLED_MODES = ("ngram-mod",)


@dataclass(frozen=True)
class Cell:
    speedup: float              # decode tokens/s over the stock build's plain decoding
    identical: bool             # text identical to the same build's plain greedy in every run
    mode: str = ""              # llama-server's best mode ("simple", "mod"); "" for ngramspec
    first_round: bool = False   # read from round one only (a pooled mode, server not restarted)


@dataclass
class ModelFigures:
    model: str
    machine: str
    reports: list[str] = field(default_factory=list)                 # file names, in the order read
    plain_tok_s: dict[str, float] = field(default_factory=dict)      # stock plain, per workload
    cells: dict[str, dict[str, Cell]] = field(default_factory=dict)  # workload -> column label -> Cell

    @property
    def workloads(self) -> list[str]:
        return ordered(self.cells)


def ordered(workloads: Iterable[str]) -> list[str]:
    """The long workloads first, in LONG_WORKLOADS' order, then the rest as given."""
    names = list(dict.fromkeys(workloads))
    return [w for w in LONG_WORKLOADS if w in names] + [w for w in names if w not in LONG_WORKLOADS]


def _name(report: dict[str, Any], build: str, method: str) -> str:
    """The report's name for ``method`` run on ``build``: bare on the build the suite ran
    in, prefixed with the build's label ("exact-build ngramspec") on the other build."""
    return method if report["build"] == build else f"{build} {method}"


def report_figures(report: dict[str, Any], first_round: bool = False,
                   stock_server: bool = False) -> dict[str, dict[str, Cell]]:
    """Per workload of one report, the three columns' cells. ``first_round``: the report's
    llama-servers were not restarted between rounds, so a pooled mode (POOLED_MODES)
    counts by its first round only. ``stock_server``: the report ran from the exact build
    with a llama-server built with the stock flags (``--llama-server``, e.g.
    ``scripts/build_llama_server.py --stock``), so its unprefixed llama-server modes are the
    stock column's. Missing or failed methods are left out."""
    if "other_build" not in report or {report["build"], report["other_build"]["label"]} != {"stock", "exact-build"}:
        raise ValueError("not a side-by-side report of the stock and the exact build (ngramspec bench --other-build)")
    stock_plain = _name(report, "stock", "plain")
    out: dict[str, dict[str, Cell]] = {}
    for w in report["workloads"]:
        m = w["methods"]
        base = m[stock_plain]

        def speedup(method: str, first: bool = False, m: dict[str, Any] = m, base: dict[str, Any] = base) -> float:
            f = m.get(method)
            if not f or f["failed"] or not f["decode_tok_s"]:
                return math.nan
            if stock_plain != "plain":  # run from the exact build: the ratio of median speeds
                if first:
                    raise ValueError("first_round needs a report run from the stock build (round-by-round speed-ups)")
                return float(f["decode_tok_s"] / base["decode_tok_s"])
            return float(f["speedups"][0] if first else _median(f["speedups"]))

        cells: dict[str, Cell] = {}
        for label, build, method in COLUMNS:
            if label != SERVER:
                name = _name(report, build, method)
                x = speedup(name)
                if not math.isnan(x):
                    cells[label] = Cell(x, bool(m[name]["identical"]))
                continue
            prefix = method if stock_server else _name(report, build, method)
            best: Cell | None = None
            for name in (n for n in report["methods"] if n.startswith(prefix)):
                mode = name[len(prefix):]
                first = first_round and f"ngram-{mode}" in POOLED_MODES
                x = speedup(name, first)
                if not math.isnan(x) and (best is None or x > best.speedup):
                    best = Cell(x, bool(m[name]["identical"]), mode, first)
            if best is not None:
                cells[label] = best
        out[w["name"]] = cells
    return out


def collect(paths: Iterable[str | Path], first_round: Iterable[str | Path] = (),
            stock_server: Iterable[str | Path] = ()) -> list[ModelFigures]:
    """The reports' figures, per model in the order first met. A workload that two reports
    of one model both ran is read from the first (list the main report first); a report in
    ``first_round`` reads its pooled llama-server modes from round one only, one in
    ``stock_server`` its unprefixed llama-server modes as the stock build's (report_figures)."""
    firsts = {Path(p).name for p in first_round}
    stock_servers = {Path(p).name for p in stock_server}
    models: dict[str, ModelFigures] = {}
    for p in map(Path, paths):
        report = json.loads(p.read_text())
        fig = models.setdefault(report["model"], ModelFigures(report["model"], report["machine"]))
        fig.reports.append(p.name)
        plain = _name(report, "stock", "plain")
        for w, cells in report_figures(report, p.name in firsts, p.name in stock_servers).items():
            if w not in fig.cells:
                fig.cells[w] = cells
                fig.plain_tok_s[w] = next(float(x["methods"][plain]["decode_tok_s"])
                                          for x in report["workloads"] if x["name"] == w)
    return list(models.values())


def _cell(c: Cell | None) -> str:
    if c is None:
        return "-"
    text = ratio(c.speedup) + (" =" if c.identical else " ≠")
    if c.mode:
        text += f" ({c.mode}{', round 1' if c.first_round else ''})"
    return text


def markdown_table(models: Sequence[ModelFigures], short_name: dict[str, str] | None = None) -> list[str]:
    """README's table: a row per workload (the long ones first), then the geometric mean of
    each column over the long and over the short workloads; per model, stock plain
    tokens/s and the three columns. "=": text identical to the same build's plain greedy
    in every run, "≠": not in at least one."""
    names = short_name or {}
    head = ["workload"]
    for f in models:
        label = names.get(f.model, f.model)
        head += [f"{label}: stock plain tok/s", EXACT, FAST, "llama-server best"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    order = ordered(w for f in models for w in f.workloads)
    long = [w for w in order if w in LONG_WORKLOADS]
    short = [w for w in order if w not in LONG_WORKLOADS]
    for w in long + short:
        cells = [w]
        for f in models:
            c = f.cells.get(w, {})
            cells.append(f"{f.plain_tok_s[w]:.1f}" if w in f.plain_tok_s else "-")
            cells += [_cell(c.get(label)) for label, _, _ in COLUMNS]
        rows.append("| " + " | ".join(cells) + " |")
    for title, group in (("long, geometric mean", long), ("short, geometric mean", short)):
        if not group:
            continue
        cells = [f"**{title}**"]
        for f in models:
            cells.append("")
            for label, _, _ in COLUMNS:
                xs = [f.cells[w][label].speedup for w in group if w in f.cells and label in f.cells[w]]
                cells.append(f"**{ratio(geomean(xs))}**" if xs else "-")
        rows.append("| " + " | ".join(cells) + " |")
    return rows
