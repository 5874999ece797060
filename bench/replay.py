"""Replay ngramspec's drafting decisions on the true greedy outputs of a suite run,
with no model: each pass costs r(B) from a cost curve (the run's measured one by
default), and a draft token counts as accepted when it equals the next true token.
It drives the shipped ``Drafter`` (the proposers, the policy and the allowed
sizes exactly as the engine builds them), so what it prices is the code that
ships, in seconds rather than the suite's tens of minutes, and it compares that
with the model-free limit on the same tokens. Only the decode cost is modelled
(no Python overhead), so it ranks policies; the suite measures them.

--cost-curve replays under another machine's curve: a JSON file ({"verify_cost":
[r(1), r(2), ...], "exact_sizes": [...]} or a bare list), the GPU run's results
(scripts/gpu/measure.py) as FILE#MODEL/SETTING (its r(B) after 128 cached tokens and
the sizes its check found bit-exact at depth, e.g.
gpu-results.json#smollm2-135m/fa_off), or a preset:
  avx2      the AVX2 EPYC of the last suite runs, 2 threads (this run's own curve
            when the report was measured there; r(7) about 4.3-4.9);
  cpu-1t    a 1-thread CPU curve (measured: r(2) 1.15, r(4) 1.75, r(7) 2.8, r(8) 3.5);
  gpu       a GPU-like curve, r(B) = 1 + 0.05 (B - 1), exact sizes up to 16.

--believed-curve replays the online correction: the policy starts from
this curve (a preset or file, e.g. the loaded-machine curve "trap": r(B) = B), learns
the cost from the timings the true curve (--cost-curve) gives each pass, and
explores as the engine does; --no-explore turns exploration off to compare, and
--burst A:B:F multiplies every pass's timing in passes A..B-1 of each output by F
(load arriving mid-generation). The header counts the explored passes.

--hindsight adds a column: the same proposals, each pass verifying the offered
draft prefix that yields the most tokens per unit of cost given the true text
(best_in_hindsight). The gap between it
and the limit is what the proposals never offer; the gap between the policy and
it is the policy's uncertainty about which draft is right and for how long.

--prediction right|wrong replays a predicted_edit report
(python -m ngramspec.suite.predicted_edit) with each item's prediction, or its
unrelated wrong one, as the engine's PredictionProposer.

With --context-cost (a JSON from bench/context_cost.py, or the GPU run's results as
FILE#MODEL/SETTING), every pass is also priced at the context length it runs at, the
replayed schedule and the limit alike, and plain decoding by the same clock.

Usage: python bench/replay.py bench/results/suite-qwen2.5-coder-0.5b.json [--max-draft 64]
           [--cost-curve gpu] [--context-cost bench/results/context-cost-qwen2.5-coder-0.5b.json]
       python bench/replay.py bench/results/suite-smollm2-135m.json \
           --cost-curve gpu-results.json#smollm2-135m/fa_off [--all-sizes]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import llama_cpp
import numpy as np

from ngramspec._llama import tokenize_text
from ngramspec.calibration.cost_curve import ContextCost
from ngramspec.drafting.drafter import Drafter
from ngramspec.drafting.policy import CostAwarePolicy
from ngramspec.engine.request import prompt_tokens_for
from ngramspec.options import DEFAULT_MAX_DRAFT
from ngramspec.proposers.base import Proposal
from ngramspec.proposers.copy import CopyProposer
from ngramspec.proposers.ngram import NGramProposer
from ngramspec.proposers.prediction import PredictionProposer
from ngramspec.suite import oracle, sources
from ngramspec.suite.loading import model_path

# r(B) for B = 1.., and the batch sizes an exact decoder may use there.
PRESETS: dict[str, tuple[list[float], list[int]]] = {
    "cpu-1t": ([1.0, 1.15, 1.45, 1.75, 2.05, 2.35, 2.8, 3.5, 3.85, 4.2, 4.55, 4.9, 5.25, 5.6, 5.95, 6.3, 6.65],
               list(range(1, 8))),
    "gpu": ([1.0 + 0.05 * b for b in range(16)], list(range(1, 17))),
    # A start-up curve measured under load, after clipping: every batch costs B singles.
    "trap": ([float(b) for b in range(1, 17)], list(range(1, 17))),
}


class CurveError(ValueError):
    """A --cost-curve or --context-cost that names no usable curve; the message says why."""


def gpu_entry(spec: str) -> dict:
    """The measurements of one model and setting in the GPU run's results
    (scripts/gpu/measure.py), named FILE#MODEL/SETTING: {"cost": {"verify_cost",
    "contexts", "seconds", ...}, "invariance": {"invariant_sizes", ...}, ...}."""
    path, _, key = spec.partition("#")
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise CurveError(f"{path}: cannot be read as JSON: {e}") from None
    models = raw.get("models") if isinstance(raw, dict) else None
    if not isinstance(models, dict):
        raise CurveError(f"{path}: not the GPU run's results (no \"models\"); FILE#MODEL/SETTING is for those")
    choices = [f"{m}/{s}" for m, entry in models.items() for s in entry.get("settings", {})]
    model, _, setting = key.partition("/")
    entry = models.get(model, {}).get("settings", {}).get(setting)
    if entry is None:
        raise CurveError(f"{path}: no {key!r} in it; choose one of: {', '.join(choices) or 'none measured'}")
    if "cost" not in entry:
        raise CurveError(f"{path}#{key}: its cost curve was not measured (see the run's steps)")
    return dict(entry)


def load_curve(spec: str, data: dict) -> tuple[list[float], list[int]]:
    if spec == "avx2":
        return data["verify_cost"], data["invariant_sizes"]
    if spec in PRESETS:
        return PRESETS[spec]
    if "#" in spec:
        entry = gpu_entry(spec)
        cost = [float(x) for x in entry["cost"]["verify_cost"]]
        # Sizes the check at depth did not find bit-exact, or did not check, stay out of exact mode.
        exact = entry.get("invariance", {}).get("invariant_sizes", [1])
        return cost, [int(b) for b in exact]
    try:
        raw = json.loads(Path(spec).read_text())
    except (OSError, ValueError) as e:
        raise CurveError(f"--cost-curve {spec}: neither a preset ({', '.join(['avx2', *PRESETS])}) nor a readable "
                         f"JSON file: {e}") from None
    if isinstance(raw, list):
        return [float(x) for x in raw], list(range(1, len(raw) + 1))
    if isinstance(raw, dict) and "models" in raw:
        raise CurveError(f"--cost-curve {spec}: the GPU run's results hold several curves; name one as "
                         f"{spec}#MODEL/SETTING")
    cost = [float(x) for x in raw["verify_cost"]]
    return cost, [int(b) for b in raw.get("exact_sizes", range(1, len(cost) + 1))]


def load_context_cost(spec: str) -> ContextCost:
    """A ContextCost from bench/context_cost.py's JSON, or from the GPU run's results (FILE#MODEL/SETTING)."""
    if "#" in spec:
        cost = gpu_entry(spec)["cost"]
        return ContextCost(cost["contexts"], cost["seconds"])
    raw = json.loads(Path(spec).read_text())
    return ContextCost(raw["contexts"], raw["seconds"])


def best_in_hindsight(offered: list[Proposal], truth: list[int], cost: list[float],
                      allowed: np.ndarray) -> Proposal:
    """The offered draft prefix that yields the most tokens per unit of cost, knowing
    ``truth`` (the tokens that follow): verifying k tokens of a proposal right for
    its first m yields min(k, m) + 1 tokens for cost[k] (r(k + 1)). Usually that is
    the proposal right for longest, cut where it goes wrong; where a batch costs
    less than one token (r(2) < 1 at split thread counts) a wrong token can still
    beat a plain pass. Empty when a plain pass is best."""
    best, best_k, best_rate = Proposal.none(), 0, 1.0 / cost[0]
    for p in offered:
        m = 0
        while m < len(p) and m < len(truth) and int(p.tokens[m]) == truth[m]:
            m += 1
        for k in range(1, min(len(p), len(allowed) - 2) + 1):
            if allowed[k + 1] and (min(k, m) + 1) / cost[k] > best_rate:
                best, best_k, best_rate = p, k, (min(k, m) + 1) / cost[k]
    return best.head(best_k) if best_k else Proposal.none()


def replay(prompt: list[int], output: list[int], cost: list[float], allowed: np.ndarray, max_draft: int,
           policy: CostAwarePolicy, priced: ContextCost | None = None,
           burst: tuple[int, int, float] | None = None,
           prediction: list[int] | None = None, hindsight: bool = False) -> tuple[float, int, float]:
    """(total verify cost in single-token passes, passes, the same passes priced in
    seconds at their context by ``priced``, or nan) for output[1:], drafted by the
    engine's own Drafter (with a PredictionProposer when given ``prediction``).
    ``hindsight``: each pass verifies, instead of the policy's choice, what
    ``best_in_hindsight`` picks: what a policy that knew each draft's fate would
    make of the same proposals."""
    proposers: list = [NGramProposer(), CopyProposer()]
    if prediction is not None:
        proposers.append(PredictionProposer(prediction))
    drafter = Drafter(proposers, policy, allowed, max_draft)
    drafter.begin(prompt)
    drafter.accept(output[:1])
    t, total, passes = 0, 0.0, 0    # output[: t + 1] is emitted
    seconds = 0.0 if priced else float("nan")
    n = len(output)
    while t < n - 1:
        draft = drafter.draft(n - 2 - t)
        if hindsight:
            draft = best_in_hindsight(drafter.offered, output[t + 1:], cost, allowed)
        k, accepted = len(draft), 0
        while accepted < k and int(draft.tokens[accepted]) == output[t + 1 + accepted]:
            accepted += 1
        load = burst[2] if burst and burst[0] <= passes < burst[1] else 1.0
        drafter.verified(draft, cost[k] * load, accepted)
        total += cost[k]
        if priced:
            seconds += priced.time(k + 1, len(prompt) + t)
        passes += 1
        drafter.accept(output[t + 1: t + 2 + accepted])
        t += 1 + accepted
    return total, passes, seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report")
    ap.add_argument("--max-draft", type=int, default=DEFAULT_MAX_DRAFT,
                    help=f"longest draft (default: the engine's, {DEFAULT_MAX_DRAFT})")
    ap.add_argument("--all-sizes", action="store_true",
                    help="fast mode (exact=False): every batch size of the curve is allowed, for the replay and the "
                         "limit alike, and the policy prices the curve's shape")
    ap.add_argument("--cost-curve", default="avx2", help="a JSON file, the GPU run's results as FILE#MODEL/SETTING, or "
                    "a preset: avx2 (the run's own), cpu-1t, gpu")
    ap.add_argument("--context-cost", help="JSON from bench/context_cost.py, or the GPU run's results as "
                    "FILE#MODEL/SETTING")
    ap.add_argument("--keep-acceptance", action="store_true",
                    help="one policy for all outputs, in the report's order, carrying its acceptance estimates "
                         "from one generation to the next (the default starts each from the priors, as the engine "
                         "does)")
    ap.add_argument("--believed-curve", help="the start-up curve the policy is calibrated with (a preset such "
                    "as trap, or a file); timings come from --cost-curve and the cost is learned online")
    ap.add_argument("--no-explore", action="store_true", help="with --believed-curve: no online exploration")
    ap.add_argument("--burst", help="A:B:F: timings of passes A..B-1 of each output multiplied by F")
    ap.add_argument("--hindsight", action="store_true",
                    help="add a column: the same proposals, each pass verifying the draft prefix that yields the most "
                         "tokens per unit of cost given the true text (what the proposals offer; the gap to the "
                         "policy is its uncertainty)")
    ap.add_argument("--prediction", choices=("none", "right", "wrong"), default="none",
                    help="a predicted_edit report (python -m ngramspec.suite.predicted_edit): replay with each "
                         "item's prediction, or its unrelated wrong one, as the engine's PredictionProposer")
    opts = ap.parse_args()
    burst = None
    if opts.burst:
        a, b, f = opts.burst.split(":")
        burst = (int(a), int(b), float(f))
    data = json.loads(Path(opts.report).read_text())
    try:
        cost, exact_sizes = load_curve(opts.cost_curve, data)
        priced = load_context_cost(opts.context_cost) if opts.context_cost else None
        believed = load_curve(opts.believed_curve, data)[0] if opts.believed_curve else None
    except CurveError as e:
        print(f"replay.py: {e}", file=sys.stderr)
        return 2
    llm = llama_cpp.Llama(model_path(data["model"]), vocab_only=True, verbose=False)
    names = sorted({r["workload"] for r in data["runs"]})
    items = {(w.name, i.label): i for w in sources.build(llm, data["quick"], names) for i in w.items}
    max_draft = min(opts.max_draft, len(cost) - 1)
    sizes = [opts.all_sizes or b in exact_sizes for b in range(1, len(cost) + 1)]
    allowed = np.array([False] + sizes[: max_draft + 1], dtype=bool)
    by_workload: dict[str, list[tuple[float, ...]]] = {}

    carried: list[CostAwarePolicy] = []
    policies: list[CostAwarePolicy] = []

    def fresh_policy() -> CostAwarePolicy:
        if carried:
            return carried[0]
        # Fixed costs, so a replay's decisions do not depend on this machine's timing
        # (with --believed-curve: learned from the true curve's timings, as the engine does).
        learn = bool(opts.believed_curve)
        policy = CostAwarePolicy(max_draft + 1, learn_cost=learn, keep_acceptance=opts.keep_acceptance,
                                 explore=learn and not opts.no_explore)
        start = believed if believed is not None else cost
        policy.calibrate({b + 1: c for b, c in enumerate(start[: max_draft + 1])}, shape=opts.all_sizes)
        policies.append(policy)
        if opts.keep_acceptance:
            carried.append(policy)
        return policy

    for r in data["runs"]:
        if r["method"] != "plain" or r["round"] != 0 or "text" not in r:
            continue
        prompt = prompt_tokens_for(llm, items[(r["workload"], r["item"])].prompt)
        output = llm.tokenize(r["text"].encode(), add_bos=False, special=True)
        if len(output) < 2:
            continue
        item = items[(r["workload"], r["item"])]
        text = {"none": None, "right": item.prediction, "wrong": item.wrong_prediction}[opts.prediction]
        predicted = None if text is None else tokenize_text(llm, text)
        spent, _, seconds = replay(prompt, output, cost, allowed, max_draft, fresh_policy(), priced, burst,
                                   predicted)
        seen = float("nan")
        if opts.hindsight:
            policy = CostAwarePolicy(max_draft + 1, learn_cost=False)
            policy.calibrate({b + 1: c for b, c in enumerate(cost[: max_draft + 1])}, shape=opts.all_sizes)
            seen = replay(prompt, output, cost, allowed, max_draft, policy, prediction=predicted, hindsight=True)[0]
        # The limit may use every size of the curve, beyond max_draft.
        limit = oracle.model_free_limit(prompt, output, cost, sizes)
        row = [spent, limit.cost, len(output) - 1, seen]
        if priced:
            at = oracle.priced_by_context(len(prompt), priced.time)
            limit_ctx = oracle.model_free_limit(prompt, output, cost, sizes, cost_at=at)
            row += [seconds, limit_ctx.cost, limit_ctx.plain_cost or 0.0]
        by_workload.setdefault(r["workload"], []).append(tuple(row))
    head = "| workload | replayed speed-up | limit | % of limit |"
    if opts.hindsight:
        head += " offered, in hindsight | its % of limit |"
    if priced:
        head += " priced by context: replayed | limit | % of limit |"
    kind = "every size" if opts.all_sizes else "exact sizes"
    if opts.prediction != "none":
        kind += f", {opts.prediction} prediction"
    note = ""
    if opts.believed_curve:
        explored = sum(p.explored for p in {id(p): p for p in policies}.values())
        note = (f", believed {opts.believed_curve}{' no-explore' if opts.no_explore else ''}"
                f"{', burst ' + opts.burst if opts.burst else ''}, explored passes {explored}")
    print(head + f"  ({data['model']}, max_draft {max_draft}, {kind}, cost curve {opts.cost_curve}{note})")
    print("|---" * (head.count("|") - 1) + "|")
    for name, rows in by_workload.items():
        sums = [sum(x[i] for x in rows) for i in range(len(rows[0]))]
        spent, lim, tokens, seen = sums[:4]
        line = f"| {name} | {tokens / spent:.2f}x | {tokens / lim:.2f}x | {lim / spent:.0%} |"
        if opts.hindsight:
            line += f" {tokens / seen:.2f}x | {lim / seen:.0%} |"
        if priced:
            seconds, lim_s, plain_s = sums[4:]
            line += f" {plain_s / seconds:.2f}x | {plain_s / lim_s:.2f}x | {lim_s / seconds:.0%} |"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
