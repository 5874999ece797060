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


def sibling_lengths(policy: CostAwarePolicy, candidates: list[list[int]], allowed: list[bool],
                    chosen: list[int]) -> list[int]:
    """How many tokens of each of two candidates to verify side by side (sibling
    sequences after the shared token just emitted), by the policy's own expected
    gain per unit cost. Their first tokens differ, so at most one can be right and
    the expected tokens add: 1 + E0(k0) + E1(k1) for a batch of 1 + k0 + k1."""
    expected, acceptance = [], policy.acceptance
    for sources in candidates:
        reach, e = 1.0, [0.0]
        for source in sources:
            reach *= acceptance[source]
            e.append(e[-1] + reach)
        expected.append(e)
    def score(k0: int, k1: int) -> float:
        return (1 + expected[0][k0] + expected[1][k1]) / policy.relative_cost(1 + k0 + k1)

    top = min(len(allowed) - 1, policy.max_batch)
    best, lengths = score(*chosen), chosen
    for k0 in range(len(expected[0])):
        for k1 in range(len(expected[1])):
            if 1 + k0 + k1 <= top and allowed[1 + k0 + k1] and score(k0, k1) > best:
                best, lengths = score(k0, k1), [k0, k1]
    return lengths


def replay(prompt: list[int], output: list[int], cost: list[float], allowed: list[bool], max_draft: int,
           policy: CostAwarePolicy, priced: ContextCost | None = None,
           siblings: str = "") -> tuple[float, int, float, int]:
    """(total verify cost in single-token passes, passes, the same passes priced in
    seconds at their context by ``priced``, or nan, passes that verified two
    candidates) for output[1:].

    siblings="bound": an upper bound for verifying the other drafter's candidate
    beside the chosen one (llama.cpp sibling sequences sharing the prefix): whenever
    the other candidate would have been accepted further, its right tokens, and only
    those, ride in the same batch and the longer acceptance wins. No real scheme
    knows in advance which tokens are right, so none can do better than this.
    siblings="priced": a real scheme: when the two candidates' first tokens differ,
    ``sibling_lengths`` decides how much of each to verify, every verified token is
    paid for, and the one accepted further wins."""
    predictor, matcher = NGramPredictor(), SuffixMatcher()
    predictor.update_batch(prompt + output[:1])
    matcher.update_batch(prompt + output[:1])
    allowed_arr = [False] + allowed
    t, total, passes, continuing, paired = 0, 0.0, 0, False, 0    # output[: t + 1] is emitted
    seconds = 0.0 if priced else float("nan")
    n = len(output)
    while t < n - 1:
        k = min(max_draft, n - 2 - t)
        draft, _, counts, totals = predictor.predict_detailed(k)
        candidates = [ngram_sources(counts, totals)]
        copied, match = matcher.predict(k)
        candidates.append(copy_sources(match, continuing, len(copied)))
        which, m = policy.choose_among(candidates, allowed_arr)
        full = [draft.tolist(), copied.tolist()]

        def right(i: int, limit: int) -> int:   # how many of candidate i's first `limit` tokens are right
            j = 0
            while j < min(limit, len(full[i])) and full[i][j] == output[t + 1 + j]:
                j += 1
            return j

        verified = [m if which == 0 else 0, m if which == 1 else 0]
        if siblings == "priced" and full[0] and full[1] and full[0][0] != full[1][0]:
            verified = sibling_lengths(policy, candidates, allowed_arr, verified)
        hits = [right(0, verified[0]), right(1, verified[1])]
        for i in (0, 1):   # what each verified draft taught
            if verified[i]:
                policy.observe(verified[i] + 1, cost[verified[i]], candidates[i][: verified[i]], hits[i])
        accepted = max(hits)
        batch = 1 + sum(verified)
        paired += all(verified)
        if siblings == "bound":
            m = verified[which]
            other = right(1 - which, len(full[1 - which]))
            if other > accepted and m + 1 + other <= len(cost) and allowed[m + other]:
                batch, accepted = m + 1 + other, other
        total += cost[batch - 1]
        if priced:
            seconds += priced.time(batch, len(prompt) + t)
        passes += 1
        for i, cand in enumerate(candidates):       # as the engine does: score the rest in hindsight
            if not verified[i]:
                policy.defer(t + 1, full[i], cand)
            elif hits[i] == verified[i]:
                policy.defer(t + 1 + verified[i], full[i][verified[i]:], cand[verified[i]:])
        policy.settle(output[: t + 2 + accepted])
        emitted = output[t + 1: t + 2 + accepted]
        continuing = copy_confirmed(copied, emitted)
        predictor.update_batch(emitted)
        matcher.update_batch(emitted)
        t += 1 + accepted
    return total, passes, seconds, paired


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report")
    ap.add_argument("--max-draft", type=int, default=8)
    ap.add_argument("--all-sizes", action="store_true",
                    help="fast mode (exact=False): every measured batch size is allowed, for the replay and the "
                         "limit alike, and the policy prices the measured curve's shape")
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
    allowed = [opts.all_sizes or b in data["invariant_sizes"] for b in range(1, len(cost) + 1)]
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
        policy.calibrate({b + 1: c for b, c in enumerate(cost)}, shape=opts.all_sizes)
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
        spent, _, seconds, _ = replay(prompt, output, cost, allowed, opts.max_draft, fresh_policy(), priced)
        if opts.siblings:
            bound, _, _, _ = replay(prompt, output, cost, allowed, opts.max_draft, fresh_policy(), siblings="bound")
            paid, _, _, paired = replay(prompt, output, cost, allowed, opts.max_draft, fresh_policy(),
                                        siblings="priced")
        limit = oracle.model_free_limit(prompt, output, cost, allowed)
        row = [spent, limit.cost, len(output) - 1]
        if opts.siblings:
            row += [bound, paid, paired]
        if priced:
            at = oracle.priced_by_context(len(prompt), priced.time)
            limit_ctx = oracle.model_free_limit(prompt, output, cost, allowed, cost_at=at)
            row += [seconds, limit_ctx.cost, limit_ctx.plain_cost or 0.0]
        by_workload.setdefault(r["workload"], []).append(tuple(row))
    head = "| workload | replayed speed-up | limit | % of limit |"
    if opts.siblings:
        head += " with siblings: upper bound | priced | passes with two candidates |"
    if priced:
        head += " priced by context: replayed | limit | % of limit |"
    sizes = "every size" if opts.all_sizes else "exact sizes"
    print(head + f"  ({data['model']}, max_draft {opts.max_draft}, {sizes})")
    print("|---" * (head.count("|") - 1) + "|")
    for name, rows in by_workload.items():
        sums = [sum(x[i] for x in rows) for i in range(len(rows[0]))]
        spent, lim, tokens = sums[:3]
        line = f"| {name} | {tokens / spent:.2f}x | {tokens / lim:.2f}x | {lim / spent:.0%} |"
        rest = sums[3:]
        if opts.siblings:
            bound, paid, paired = rest[:3]
            rest = rest[3:]
            line += f" {tokens / bound:.2f}x | {tokens / paid:.2f}x | {paired:.0f} |"
        if priced:
            seconds, lim_s, plain_s = rest
            line += f" {plain_s / seconds:.2f}x | {plain_s / lim_s:.2f}x | {lim_s / seconds:.0%} |"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
