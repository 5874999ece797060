"""The report's comparison with llama-server: each ngramspec method against the best
n-gram mode of its own llama.cpp build, never another build's server."""
from __future__ import annotations

import json
import math

from ngramspec.suite import report
from ngramspec.suite.oracle import Limit
from ngramspec.suite.summary import MethodFigures, WorkloadFigures

METHODS = ("plain", "ngramspec", "ngramspec fast",
           "llama-server none", "llama-server ngram-simple", "llama-server ngram-mod",
           "exact-build plain", "exact-build ngramspec", "exact-build ngramspec fast",
           "exact-build llama-server none", "exact-build llama-server ngram-simple",
           "exact-build llama-server ngram-mod")


def _workload(name: str, tok_s: dict[str, float]) -> WorkloadFigures:
    methods = {m: MethodFigures(tok_s.get(m, 50.0), 0.1, [1.0], True) for m in METHODS}
    limit = Limit(tokens=10, cost=10.0, passes=10)
    return WorkloadFigures(name, "src", 1, 10, 10, methods, limit, limit)


def _rows(lines: list[str], heading: str) -> dict[str, list[str]]:
    """The table after ``heading``: its rows' cells by first cell."""
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    rows: dict[str, list[str]] = {}
    for line in lines[start + 4:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells
    return rows


def test_each_build_is_set_against_its_own_best_mode():
    figs = [
        # The stock server's best is ngram-mod (100); the exact build's is ngram-simple (80),
        # although the stock server's ngram-mod is faster than anything on the exact build.
        _workload("copy", {"ngramspec": 60.0, "ngramspec fast": 120.0, "llama-server none": 55.0,
                           "llama-server ngram-mod": 100.0, "llama-server ngram-simple": 90.0,
                           "exact-build ngramspec": 88.0, "exact-build ngramspec fast": 72.0,
                           "exact-build llama-server ngram-simple": 80.0,
                           "exact-build llama-server ngram-mod": 40.0}),
        # A failed server mode (NaN) is never the best.
        _workload("prose", {"llama-server ngram-mod": math.nan, "llama-server ngram-simple": 40.0,
                            "ngramspec fast": 50.0}),
    ]
    lines = report.llama_server_section(figs, METHODS)
    assert "## ngramspec against llama.cpp's own n-gram modes" in lines
    stock = _rows(lines, "On this process's build")
    assert stock["copy"][2:4] == ["ngram-mod", "100.00"]
    assert stock["copy"][4:8] == ["60.00", "0.60x", "120.00", "1.20x"]
    assert stock["prose"][2:4] == ["ngram-simple", "40.00"]
    assert stock["**lowest**"][5] == "0.60x" and stock["**lowest**"][7] == "1.20x"
    assert stock["**geometric mean**"][7] == f"{math.sqrt(1.2 * 1.25):.2f}x"
    exact = _rows(lines, "On the other build")
    assert exact["copy"][2:4] == ["ngram-simple", "80.00"]
    assert exact["copy"][4:8] == ["88.00", "1.10x", "72.00", "0.90x"]
    # No ngramspec method on the exact build is compared with the stock server.
    assert all("exact-build" not in c for c in stock["copy"])


def test_no_server_no_section():
    figs = [_workload("copy", {})]
    assert report.llama_server_section(figs, ("plain", "ngramspec")) == []
    # A server without an ngramspec method of its build: nothing to set against it.
    assert report.llama_server_section(figs, ("plain", "exact-build llama-server ngram-mod")) == []


def test_the_section_renders_the_same_from_the_reports_json():
    # bench/server_comparison.py rebuilds the figures from a report's JSON, where NaN is null.
    figs = [_workload("copy", {"llama-server ngram-mod": math.nan, "exact-build ngramspec fast": 70.0})]
    figs[0].acceptance_by_position = [0.5, math.nan]
    stored = json.loads(json.dumps(report.json_safe([f.to_json() for f in figs])))
    rebuilt = [WorkloadFigures.from_json(w) for w in stored]
    assert math.isnan(rebuilt[0].methods["llama-server ngram-mod"].decode_tok_s)
    assert rebuilt[0].limit == figs[0].limit and rebuilt[0].acceptance_by_position[0] == 0.5
    assert report.llama_server_section(rebuilt, METHODS) == report.llama_server_section(figs, METHODS)
