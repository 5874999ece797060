"""README's plot and table (python -m ngramspec.suite.plots headline), drawn from a small
committed report: tests/suite/data/headline-qwen2.5-coder-0.5b.json, trimmed from
bench/results/suite-builds-qwen2.5-coder-0.5b-3rounds.json (three workloads, the methods
the headline reads). No model."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from ngramspec.suite.headline_figures import EXACT, FAST, SERVER, collect, markdown_table

REPORT = Path(__file__).parent / "data" / "headline-qwen2.5-coder-0.5b.json"


def test_the_figures_are_the_reports_medians_over_stock_plain():
    (qwen,) = collect([REPORT])
    assert qwen.model == "qwen2.5-coder-0.5b" and qwen.reports == [REPORT.name]
    # Long workloads first, in the suite's order, then the short ones.
    assert qwen.workloads == ["whole_file_edit", "open_story", "code_completion"]
    assert qwen.plain_tok_s["whole_file_edit"] == pytest.approx(21.8, abs=0.05)
    edit, story = qwen.cells["whole_file_edit"], qwen.cells["open_story"]
    assert edit[EXACT].speedup == pytest.approx(2.16, abs=0.005) and edit[EXACT].identical
    assert edit[FAST].speedup == pytest.approx(4.16, abs=0.005) and edit[FAST].identical
    assert story[FAST].speedup == pytest.approx(2.36, abs=0.005) and not story[FAST].identical
    # llama-server: the best mode per workload, by the median over rounds.
    assert (edit[SERVER].mode, round(edit[SERVER].speedup, 2)) == ("simple", 3.36)
    assert (story[SERVER].mode, round(story[SERVER].speedup, 2)) == ("mod", 3.99)
    assert not story[SERVER].first_round


def test_a_report_whose_servers_were_not_restarted_reads_the_pooled_mode_from_round_one():
    (qwen,) = collect([REPORT], first_round=[REPORT])
    story, edit = qwen.cells["open_story"][SERVER], qwen.cells["whole_file_edit"][SERVER]
    assert (story.mode, round(story.speedup, 2), story.first_round) == ("mod", 2.28, True)
    # ngram-simple keeps no pool: still its median (3.36x beats ngram-mod's round one, 2.90x).
    assert (edit.mode, round(edit.speedup, 2), edit.first_round) == ("simple", 3.36, False)


def test_the_table_has_a_row_per_workload_and_the_geometric_means():
    rows = markdown_table(collect([REPORT], first_round=[REPORT]))
    assert rows[0].startswith("| workload | qwen2.5-coder-0.5b: stock plain tok/s | exact mode | fast mode |")
    assert "| open_story | 24.7 | 1.85x = | 2.36x ≠ | 2.28x ≠ (mod, round 1) |" in rows
    long_mean = next(r for r in rows if "long, geometric mean" in r)
    exact = math.sqrt(2.16 * 1.85)
    assert f"**{exact:.2f}x**" in long_mean
    assert any("short, geometric mean" in r for r in rows)


def test_the_plot_is_a_png_of_three_bars_per_workload(tmp_path):
    pytest.importorskip("matplotlib")
    from ngramspec.suite.plots import draw_headline, headline_bars, main

    models = collect([REPORT])
    names, heights = headline_bars(models[0])
    assert names == models[0].workloads and len(heights) == 3 and all(len(h) == 3 for h in heights)
    assert [round(h, 2) for h in heights[0]] == [2.16, 1.85, 0.94]  # exact mode, per workload
    out = draw_headline(models, tmp_path / "img" / "speedup.png", note="a note")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The command line: the same plot, and the table on stdout.
    cli = tmp_path / "cli.png"
    assert main(["headline", str(REPORT), "--first-round", str(REPORT), "--out", str(cli)]) == 0
    assert cli.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


LONG_SMOLLM2 = (Path(__file__).resolve().parents[2] / "bench" / "results"
                / "suite-long-smollm2-135m-patched-exact-build-epyc.json")


def test_a_report_from_the_exact_build_with_a_stock_flags_server():
    """Run from the exact build, a report's own llama-server methods are unprefixed; only
    --stock-server says they are the stock column's (scripts/build_llama_server.py --stock)."""
    (plain_read,) = collect([LONG_SMOLLM2])
    assert SERVER not in plain_read.cells["whole_file_edit"]
    (smol,) = collect([LONG_SMOLLM2], stock_server=[LONG_SMOLLM2])
    edit = smol.cells["whole_file_edit"]
    assert (edit[SERVER].mode, round(edit[SERVER].speedup, 2)) == ("mod", 1.46)
    assert round(edit[EXACT].speedup, 2) == 1.86 and edit[EXACT].identical
    # stock plain, read from the other build: the baseline of every column
    assert smol.plain_tok_s["whole_file_edit"] == pytest.approx(96.8, abs=0.05)
