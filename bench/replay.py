"""Replay ngramspec's drafting decisions on the true greedy outputs of a suite run,
with no model: each pass costs r(B) from the run's measured verify-cost curve, and
a draft token counts as accepted when it equals the next true token. This prices
a policy change in seconds (the real suite takes tens of minutes) and compares it
with the model-free limit on the same tokens. Only the decode cost is modelled
(no Python overhead), so it ranks policies; the suite measures them.

With --context-cost (a JSON from bench/context_cost.py), every pass is also
priced at the context length it runs at, the replayed schedule and the limit
alike, and plain decoding by the same clock: the short-context r(B) under-prices
verification after a long prompt.

Usage: python bench/replay.py bench/results/suite-qwen2.5-coder-0.5b.json [--max-draft 8]
           [--context-cost bench/results/context-cost-qwen2.5-coder-0.5b.json]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import llama_cpp

from ngramspec import NGramPredictor, SuffixMatcher
from ngramspec.costcurve import ContextCost
from ngramspec.engine import prompt_tokens_for
from ngramspec.policy import CostAwarePolicy, copy_confirmed, copy_sources, ngram_sources
from ngramspec.suite import oracle, sources
from ngramspec.suite.runner import _model_path


def replay(prompt: list[int], output: list[int], cost: list[float], allowed: list[bool], max_draft: int,
           policy: CostAwarePolicy, priced: ContextCost | None = None,
           siblings: bool = False) -> tuple[float, int, float]:
    """(total verify cost in single-token passes, passes, the same passes priced in
    seconds at their context by ``priced``, or nan) for output[1:].

    siblings: an upper bound for verifying the other drafter's candidate beside the
    chosen one (llama.cpp sibling sequences sharing the prefix): whenever the other
    candidate would have been accepted further, its right tokens, and only those,
    ride in the same batch and the longer acceptance wins. No real scheme knows in
    advance which tokens are right, so none can do better than this."""
    predictor, matcher = NGramPredictor(), SuffixMatcher()
    predictor.update_batch(prompt + output[:1])
    matcher.update_batch(prompt + output[:1])
    allowed_arr = [False] + allowed
    t, total, passes, continuing = 0, 0.0, 0, False    # output[: t + 1] is emitted
    seconds = 0.0 if priced else float("nan")
    n = len(output)
    while t < n - 1:
        k = min(max_draft, n - 2 - t)
        draft, _, counts, totals = predictor.predict_detailed(k)
        candidates = [ngram_sources(counts, totals)]
        copied, match = matcher.predict(k)
        candidates.append(copy_sources(match, continuing, len(copied)))
        which, m = policy.choose_among(candidates, allowed_arr)
        tokens = (draft if which == 0 else copied)[:m]
        sources_ = candidates[which][:m]
        accepted = 0
        while accepted < m and tokens[accepted] == output[t + 1 + accepted]:
            accepted += 1
        policy.observe(m + 1, cost[m], sources_, accepted)   # what the chosen draft taught
        batch = m + 1
        if siblings:
            other = (copied if which == 0 else draft)
            right = 0
            while right < len(other) and other[right] == output[t + 1 + right]:
                right += 1
            if right > accepted and m + 1 + right <= len(cost) and allowed[m + right]:
                batch, accepted = m + 1 + right, right
        total += cost[batch - 1]
        if priced:
            seconds += priced.time(batch, len(prompt) + t)
        passes += 1
        full = [draft.tolist(), copied.tolist()]
        for ci, cand in enumerate(candidates):       # as the engine does: score the rest in hindsight
            if ci != which:
                policy.defer(t + 1, full[ci], cand)
            elif accepted == m:
                policy.defer(t + 1 + m, full[ci][m:], cand[m:])
        policy.settle(output[: t + 2 + accepted])
        emitted = output[t + 1: t + 2 + accepted]
        continuing = copy_confirmed(copied, emitted)
        predictor.update_batch(emitted)
        matcher.update_batch(emitted)
        t += 1 + accepted
    return total, passes, seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report")
    ap.add_argument("--max-draft", type=int, default=8)
    ap.add_argument("--context-cost", help="JSON from bench/context_cost.py")
    ap.add_argument("--keep-acceptance", action="store_true",
                    help="one policy for all outputs, in the report's order, carrying its acceptance estimates "
                         "from one generation to the next (the default starts each from the priors, as the engine does)")
    ap.add_argument("--siblings", action="store_true",
                    help="also price an upper bound for verifying both drafters' candidates in one batch")
    opts = ap.parse_args()
    data = json.loads(Path(opts.report).read_text())
    llm = llama_cpp.Llama(_model_path(data["model"]), vocab_only=True, verbose=False)
    items = {(w.name, i.label): i for w in sources.build(llm, data["quick"]) for i in w.items}
    cost = data["verify_cost"]
    allowed = [b in data["invariant_sizes"] for b in range(1, len(cost) + 1)]
    priced = None
    if opts.context_cost:
        raw = json.loads(Path(opts.context_cost).read_text())
        priced = ContextCost(raw["contexts"], raw["seconds"])
    by_workload: dict[str, list[tuple[float, ...]]] = {}

    carried: list[CostAwarePolicy] = []

    def fresh_policy() -> CostAwarePolicy:
        if carried:
            carried[0].new_generation()
            return carried[0]
        # Fixed costs, so a replay's decisions do not depend on this machine's timing.
        policy = CostAwarePolicy(opts.max_draft + 1, learn_cost=False, keep_acceptance=opts.keep_acceptance)
        policy.calibrate({b + 1: c for b, c in enumerate(cost)})
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
        spent, _, seconds = replay(prompt, output, cost, allowed, opts.max_draft, fresh_policy(), priced)
        if opts.siblings:
            spent_sib, _, _ = replay(prompt, output, cost, allowed, opts.max_draft, fresh_policy(), None,
                                     siblings=True)
        limit = oracle.model_free_limit(prompt, output, cost, allowed)
        row = [spent, limit.cost, len(output) - 1]
        if opts.siblings:
            row.append(spent_sib)
        if priced:
            at = oracle.priced_by_context(len(prompt), priced.time)
            limit_ctx = oracle.model_free_limit(prompt, output, cost, allowed, cost_at=at)
            row += [seconds, limit_ctx.cost, limit_ctx.plain_cost or 0.0]
        by_workload.setdefault(r["workload"], []).append(tuple(row))
    head = "| workload | replayed speed-up | limit | % of limit |"
    if opts.siblings:
        head += " with siblings (upper bound) |"
    if priced:
        head += " priced by context: replayed | limit | % of limit |"
    print(head + f"  ({data['model']}, max_draft {opts.max_draft})")
    print("|---" * (head.count("|") - 1) + "|")
    for name, rows in by_workload.items():
        sums = [sum(x[i] for x in rows) for i in range(len(rows[0]))]
        spent, lim, tokens = sums[:3]
        line = f"| {name} | {tokens / spent:.2f}x | {tokens / lim:.2f}x | {lim / spent:.0%} |"
        rest = sums[3:]
        if opts.siblings:
            line += f" {tokens / rest.pop(0):.2f}x |"
        if priced:
            seconds, lim_s, plain_s = rest
            line += f" {plain_s / seconds:.2f}x | {plain_s / lim_s:.2f}x | {lim_s / seconds:.0%} |"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
