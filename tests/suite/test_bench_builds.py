"""`ngramspec bench --other-build`: methods on a second llama.cpp build, run in that
build's Python and interleaved with this process's, reported over stock plain."""
import subprocess
import sys

import pytest

from ngramspec.suite import headline
from ngramspec.suite.other_build import OtherBuild, OtherBuildError
from tests.support.cli import TEST_THREADS


def test_a_python_that_is_not_there_is_a_one_line_error(tmp_path):
    out = subprocess.run([sys.executable, "-m", "ngramspec", "bench", "--quick", "--other-build",
                          str(tmp_path / "nope" / "python"), "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "--other-build" in out.stderr and "not an executable Python" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_worker_that_cannot_start_says_so(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(OtherBuildError, match="exit code 3"):
        OtherBuild(str(fake), "model.gguf", 512, 1, progress=False)


def test_other_methods_needs_the_other_build(tmp_path):
    out = subprocess.run([sys.executable, "-m", "ngramspec", "bench", "--quick", "--other-methods", "ngramspec fast",
                          "--out", str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "needs --other-build" in out.stderr and "Traceback" not in out.stderr


def test_other_methods_are_the_other_builds_plain_and_those_named():
    from ngramspec.cli.bench import _other_methods
    from ngramspec.errors import UserError

    assert _other_methods("ngramspec fast") == ("plain", "ngramspec fast")
    assert _other_methods("ngramspec fast, plain,ngramspec") == ("plain", "ngramspec", "ngramspec fast")
    for bad in ("", "fast", "ngramspec,prompt lookup"):
        with pytest.raises(UserError, match="--other-methods"):
            _other_methods(bad)


@pytest.mark.model
def test_the_other_build_runs_side_by_side_and_is_compared_with_its_own_plain(smollm2_path, invariance):
    """This Python stands in for the other build: its methods must carry the build's
    label, produce the same text as the local plain, and be judged against their own
    build's plain decoding. The local side takes the suite's sizes-to-17 report (the
    other build checks its 65 sizes itself, as in a real run)."""
    from ngramspec.suite import runner, summary

    suite = runner.Suite(smollm2_path, quick=True, threads=TEST_THREADS, methods=("plain", "ngramspec"),
                         workloads=["code_editing"], other_python=sys.executable, progress=False,
                         other_methods=("plain", "ngramspec"), invariance=invariance)
    try:
        other = suite.other
        assert other is not None
        assert other.methods == tuple(f"{other.label} {m}" for m in ("plain", "ngramspec"))
        assert suite.methods[-2:] == other.methods
        assert suite.same_build_plain(f"{other.label} ngramspec") == f"{other.label} plain"
        assert suite.same_build_plain("ngramspec") == "plain"
        runs = suite.run(1)
        by = {r.method: r for r in runs}
        assert set(by) == set(suite.methods)
        assert all(not r.error for r in runs)
        # Greedy plain decoding on one build is the same in either process, and exact mode matches it.
        assert by[other.plain].text == by["plain"].text
        assert by[f"{other.label} ngramspec"].text == by["plain"].text
        assert by[f"{other.label} plain"].tokens > 0
        # its exact mode priced as a user's engine: a curve timed over rounds (or the prior
        # because that measurement failed), never the invariance check's one-shot timings
        origin = by[f"{other.label} ngramspec"].stats["cost_curve_origin"]
        assert "one-shot" not in origin and ("interleaved rounds" in origin or "measurement" in origin), origin
        figs = summary.summarize(suite, runs)
        assert figs[0].methods[f"{other.label} ngramspec"].identical
    finally:
        suite.close()
    assert suite.other is not None and suite.other.proc.poll() is not None   # the worker is gone


def _fig(tok_s: float, speedups: list[float], identical: bool = True, diverged: int = 0) -> dict:
    return {"decode_tok_s": tok_s, "speedups": speedups, "identical": identical, "diverged": diverged,
            "tokens": 256, "failed": 0}


def test_the_builds_table_is_over_stock_plain_with_identity_marked():
    report = {
        "build": "stock", "other_build": {"label": "exact-build", "plain": "exact-build plain",
                                          "methods": ["exact-build plain", "exact-build ngramspec",
                                                      "exact-build ngramspec fast"]},
        "methods": ["plain", "ngramspec", "ngramspec fast", "llama-server ngram-simple", "llama-server ngram-mod",
                    "llama-server none", "exact-build plain", "exact-build ngramspec", "exact-build ngramspec fast",
                    "exact-build llama-server ngram-mod", "exact-build llama-server none"],
        "workloads": [{"name": "code_editing", "methods": {
            "plain": _fig(100.0, [1.0]), "ngramspec": _fig(100.0, [1.0]),
            "ngramspec fast": _fig(150.0, [1.5], identical=False, diverged=1),
            "llama-server ngram-simple": _fig(120.0, [1.2]), "llama-server ngram-mod": _fig(110.0, [1.1]),
            "llama-server none": _fig(103.0, [1.03]),
            "exact-build plain": _fig(90.0, [0.9]), "exact-build ngramspec": _fig(160.0, [1.6]),
            "exact-build ngramspec fast": _fig(170.0, [1.7]),
            "exact-build llama-server ngram-mod": _fig(140.0, [1.4], identical=False, diverged=2),
            "exact-build llama-server none": _fig(95.0, [0.95])}}],
    }
    head, _, row = headline.builds_table(report)
    cols = [c.strip() for c in head.strip("|").split("|")]
    cells = dict(zip(cols, (c.strip() for c in row.strip("|").split("|"))))
    assert cells["stock plain tok/s"] == "100.0"
    assert cells["stock exact"] == "1.00x ="
    assert cells["stock fast"] == "1.50x (1 div. in 256 tok)"
    assert cells["exact-build plain"] == "0.90x"
    assert cells["exact-build exact"] == "1.60x ="
    assert cells["exact-build fast"] == "1.70x ="
    # Each build's llama-server: its best n-gram mode and its plain decoding.
    assert cells["stock llama-server best n-gram mode"] == "1.20x (simple)"
    assert cells["stock llama-server none"] == "1.03x"
    assert cells["exact-build llama-server best n-gram mode"] == "1.40x (mod)"
    assert cells["exact-build llama-server none"] == "0.95x"
