"""The predicted-outputs benchmark: ngramspec given a prediction, on real edits.

The ``predicted_edit`` workload (sources.predicted_edit: standard-library
functions, each with a small edit; the prediction is the unedited function) run
by plain llama-cpp-python, ngramspec, ngramspec given the prediction, and
ngramspec given an unrelated function as its prediction, interleaved round by
round as the suite runs every workload. Next to them: the model-free limit and
the perfect-drafter ceiling, both under this run's measured verify-cost curve and
exact batch sizes (oracle.model_free_limit / oracle.perfect_limit).

Two kinds of figures:
- load-independent: tokens per forward pass, acceptance, and the *modelled*
  speed-up, each run's passes priced by the measured curve r(B), in the same
  unit as the ceilings (tokens after the first / sum of r(B) over its passes);
- timed: decode tokens/s and the speed-up over plain, round by round. On a
  shared machine these move with the load, so the report records the load
  average before and after.

Usage:
  python -m ngramspec.suite.predicted_edit --model qwen2.5-coder-0.5b --threads 2 --rounds 2 \
      --out bench/results
Writes predicted-edit-<model>[-full].md and .json.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from ngramspec.calibration.cost_curve import CostCurve
from ngramspec.options import DEFAULT_MAX_DRAFT
from ngramspec.suite.loading import make_engine
from ngramspec.suite.methods import MEASURED_MAX_BATCH
from ngramspec.suite.predicted_edit_figures import METHODS, WORKLOAD, method_results, per_item
from ngramspec.suite.predicted_edit_report import to_json, to_markdown
from ngramspec.suite.provenance import git_commit
from ngramspec.suite.reference_curves import REFERENCE_CURVE_ORIGIN, reference_curve, reference_model
from ngramspec.suite.report import json_safe, slug
from ngramspec.suite.runner import Suite
from ngramspec.suite.summary import allowed_sizes, summarize

# ``--cost-curve reference``: every ngramspec engine prices drafts by a fixed reference
# curve (learn_cost=False) and the ceilings use it too. On a machine too busy to time,
# a measured curve is noise (r(2) = 14 was measured under load 11 on 2 cores) and the
# cost-aware policy, which learns from timings, then stops drafting, so even tokens
# per pass would depend on the load.
COST_CURVES = ("measured", "reference")
# The old name of ``reference``, still accepted on the command line.
_OLD_REFERENCE_NAME = "facts"


def load_average() -> str:
    """The 1, 5 and 15 minute load averages (``uptime``'s), or "unknown"."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


def ngramspec_engines(suite: Suite, trace: bool, max_draft: int | None, fixed_cost: bool) -> None:
    """Gives each ngramspec method an engine with this max_draft (None: the
    engine's default); with ``fixed_cost``, its policy prices drafts by
    ``suite.cost`` and never re-times it (CostAwarePolicy(learn_cost=False))."""
    from ngramspec.drafting.policy import CostAwarePolicy

    cap = DEFAULT_MAX_DRAFT if max_draft is None else max_draft
    for m in list(suite.engines):
        if m not in METHODS:
            continue
        options: dict[str, Any] = {}
        if fixed_cost:
            policy = CostAwarePolicy(cap + 1, learn_cost=False)
            policy.calibrate({b: r for b, r in enumerate(suite.cost.relative, 1) if b <= cap + 1},
                             shape=True, origin=REFERENCE_CURVE_ORIGIN)
            options["adaptive"] = policy
        suite.engines[m] = make_engine(suite.llm, m, invariance=suite.invariance, trace=trace, max_draft=cap,
                                       **options)


def _reference_cost(model: str) -> CostCurve:
    """The reference curve for ``model`` as the suite's cost curve (no one-token time)."""
    name = reference_model(model)
    if name is None:
        raise ValueError(f"no reference cost curve for {model!r}; use --cost-curve measured")
    return CostCurve(reference_curve(name, MEASURED_MAX_BATCH), math.nan)


def run(model: str, *, quick: bool, rounds: int, threads: int | None, out_dir: Path, command: str,
        trace: bool = True, progress: bool = True, cost_curve: str = "measured",
        max_draft: int | None = None) -> Path:
    """Runs the benchmark and writes predicted-edit-<model>[-full].md and .json into
    ``out_dir``; returns the .md path. cost_curve: one of COST_CURVES."""
    if max_draft is not None and not 1 <= max_draft < MEASURED_MAX_BATCH:
        raise ValueError(f"max_draft must be in [1, {MEASURED_MAX_BATCH - 1}] (the sizes the suite measures)")
    start_load = load_average()
    cost = _reference_cost(model) if cost_curve in ("reference", _OLD_REFERENCE_NAME) else None
    suite = Suite(model, quick=quick, threads=threads, methods=METHODS, progress=progress, workloads=(WORKLOAD,),
                  trace=trace, cost=cost)
    if cost is not None or max_draft is not None:
        ngramspec_engines(suite, trace, max_draft, fixed_cost=cost is not None)
    # Read back with getattr in the report.
    suite.cost_origin = (  # type: ignore[attr-defined]
        f"{REFERENCE_CURVE_ORIGIN}, fixed: the engines' policies price drafts by it and do not re-time it"
        if cost is not None else "measured in this run (measure_verify_cost)")
    try:
        runs = suite.run(rounds)
        (fig,) = summarize(suite, runs, [WORKLOAD])
        allowed = allowed_sizes(suite)
        res = method_results(fig, [r for r in runs if r.workload == WORKLOAD], suite.cost.relative)
        items = per_item(suite, runs, allowed)
    finally:
        suite.close()
    load = (start_load, load_average())
    commit = git_commit()
    out_dir.mkdir(parents=True, exist_ok=True)
    name = f"predicted-edit-{slug(model)}" + ("" if quick else "-full")
    md = out_dir / f"{name}.md"
    md.write_text(to_markdown(suite, fig, res, items, rounds, command, commit, load))
    data = to_json(suite, fig, res, items, runs, rounds, command, commit, load)
    (out_dir / f"{name}.json").write_text(json.dumps(json_safe(data), indent=1, allow_nan=False))
    return md


def _cost_curve_name(value: str) -> str:
    return "reference" if value == _OLD_REFERENCE_NAME else value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ngramspec.suite.predicted_edit", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--full", action="store_true", help="four items instead of the quick two")
    p.add_argument("--out", type=Path, default=Path("bench/results"))
    p.add_argument("--no-trace", action="store_true")
    p.add_argument("--max-draft", type=int, default=None,
                   help=f"the ngramspec methods' max_draft (default: the engine's, {DEFAULT_MAX_DRAFT}); the "
                        f"ceilings use every exact size the suite measures (up to {MEASURED_MAX_BATCH}), so a "
                        "smaller cap keeps the methods from sizes the ceilings use")
    p.add_argument("--cost-curve", choices=COST_CURVES, type=_cost_curve_name, default="measured",
                   help="measured: this run's measure_verify_cost, re-timed online by each engine (the suite's "
                        "way); reference: a curve measured once on a quiet 2-core Xeon (reference_curves.py), "
                        "fixed, for a machine too busy to time")
    a = p.parse_args(argv)
    command = "python -m ngramspec.suite.predicted_edit " + " ".join(sys.argv[1:] if argv is None else argv)
    md = run(a.model, quick=not a.full, rounds=a.rounds, threads=a.threads, out_dir=a.out, command=command,
             trace=not a.no_trace, cost_curve=a.cost_curve, max_draft=a.max_draft)
    print(md.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
