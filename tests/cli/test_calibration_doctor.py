"""``ngramspec doctor`` says which cost curve is in use and where it came
from; ``--recalibrate`` measures again and replaces the cache entry."""
from __future__ import annotations

import json
import time

from ngramspec.calibration import invariance_cache
from ngramspec.calibration.cost_curve import STATISTIC, CostCurveResult, prior_curve
from ngramspec.cli import main


def doctor(path, *extra):
    return main(["doctor", "--model", path, "--max-batch", "4", "--n-ctx", "256", *extra])


def stored_curve(invariance_cache_dir):
    # The invariance verdict's file (fast mode's curve has its own, "-fast.json").
    files = [f for f in invariance_cache_dir.glob("*.json") if not f.stem.endswith("-fast")]
    assert len(files) == 1
    return json.loads(files[0].read_text()).get("cost_curve")


def fake_measure(passes):
    calls = []

    def measure(llm, sizes, progress=False):
        calls.append(list(sizes))
        if not passes:
            return prior_curve(sizes, "test: the machine was busy", attempts=3)
        return CostCurveResult({b: 1 + 0.4 * (b - 1) for b in sizes}, "measured", True, time.time(), 5, STATISTIC,
                               (2, 2), None, dict.fromkeys(sizes, 0.0), 1, 128)
    return measure, calls


def test_doctor_says_measured_then_cached_then_recalibrates(smollm2_path, invariance_cache_dir, capsys, monkeypatch):
    measure, calls = fake_measure(True)
    monkeypatch.setattr(invariance_cache, "_default_measure", measure)
    assert doctor(smollm2_path) == 0
    out = capsys.readouterr().out
    assert "cost curve in use: measured now" in out and "stored in" in out and len(calls) == 1
    first = stored_curve(invariance_cache_dir)["measured_at"]

    assert doctor(smollm2_path) == 0
    out = capsys.readouterr().out
    assert "cost curve in use: cached (measured " in out and "--recalibrate" in out and len(calls) == 1

    time.sleep(0.01)
    assert doctor(smollm2_path, "--recalibrate") == 0
    out = capsys.readouterr().out
    assert "cost curve in use: measured now" in out and len(calls) == 2
    assert stored_curve(invariance_cache_dir)["measured_at"] > first


def test_doctor_recalibrate_on_a_busy_machine_says_prior_and_why(smollm2_path, invariance_cache_dir, capsys,
                                                                 monkeypatch):
    good, _ = fake_measure(True)
    monkeypatch.setattr(invariance_cache, "_default_measure", good)
    assert doctor(smollm2_path) == 0
    capsys.readouterr()
    busy, calls = fake_measure(False)
    monkeypatch.setattr(invariance_cache, "_default_measure", busy)
    assert doctor(smollm2_path, "--recalibrate") == 0
    out = capsys.readouterr().out
    assert "cost curve in use: prior r(B) = 1 + 0.6 (B - 1), because test: the machine was busy" in out
    assert "not stored" in out and len(calls) == 1
    assert stored_curve(invariance_cache_dir) is None        # the old entry is replaced, by nothing


def test_doctor_recalibrate_measures_for_real(smollm2_path, invariance_cache_dir, capsys):
    assert doctor(smollm2_path, "--recalibrate") == 0
    out = capsys.readouterr().out
    assert "verify cost, relative to one token:  B=1:1.00  B=2:" in out
    assert "cost curve in use: measured now" in out or "cost curve in use: prior" in out
    assert "verdict: exact speculation POSSIBLE" in out


def test_doctor_rejects_a_bad_max_batch(smollm2_path, invariance_cache_dir, capsys):
    assert main(["doctor", "--model", smollm2_path, "--max-batch", "0"]) == 2
    assert "--max-batch" in capsys.readouterr().err
