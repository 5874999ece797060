"""README as the front door (issue 56): short, its test command the one CI runs, and its
headline table the one the committed reports give. No model."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
RESULTS = ROOT / "bench" / "results"
# The reports README's headline table and plot are drawn from, in the order given to
# `python -m ngramspec.suite.plots headline` (README names them beside the table).
REPORTS = ["suite-long-smollm2-135m-patches-0008-epyc.json",
           "suite-long-qwen2.5-coder-0.5b-patches-0009-epyc.json"]
FIRST_ROUND: list[str] = []
# Run from the exact build with a llama-server built with the stock flags (--stock-server)
STOCK_SERVER = REPORTS


def test_readme_is_at_most_200_lines():
    assert len(README.splitlines()) <= 200


def test_readme_test_command_is_the_one_ci_runs():
    run = (ROOT / ".ci" / "run").read_text().splitlines()
    ci = [line for line in run if line and not line.startswith(("#", "set ", "cd "))]
    assert len(ci) == 1, ci
    assert ci[0] in README.splitlines()


def test_readme_headline_table_is_the_reports():
    from ngramspec.suite.headline_figures import collect, markdown_table

    rows = markdown_table(collect([RESULTS / r for r in REPORTS], [RESULTS / r for r in FIRST_ROUND],
                                  [RESULTS / r for r in STOCK_SERVER]))
    lines = README.splitlines()
    missing = [row for row in rows if row not in lines]
    assert not missing, missing
    for report in REPORTS:  # each named beside the table, by its Markdown report
        assert f"bench/results/{report[:-len('.json')]}.md" in README


def test_readme_plot_is_committed_under_docs():
    assert "](docs/img/speedup.png)" in README
    assert (ROOT / "docs" / "img" / "speedup.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
