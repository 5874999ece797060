"""Replay ngramspec's drafting decisions on the true greedy outputs of a suite run,
with no model: each pass costs r(B) from the run's measured verify-cost curve, and
a draft token counts as accepted when it equals the next true token. This prices
a policy change in seconds (the real suite takes tens of minutes) and compares it
with the model-free limit on the same tokens. Only the decode cost is modelled
(no Python overhead), so it ranks policies; the suite measures them.

Usage: python bench/replay.py bench/results/suite-qwen2.5-coder-0.5b.json [--max-draft 8]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import llama_cpp

from ngramspec import NGramPredictor, SuffixMatcher
from ngramspec.engine import prompt_tokens_for
from ngramspec.policy import CostAwarePolicy, copy_sources
from ngramspec.suite import oracle, sources
from ngramspec.suite.runner import _model_path


def replay(prompt: list[int], output: list[int], cost: list[float], allowed: list[bool], max_draft: int,
           policy: CostAwarePolicy) -> tuple[float, int]:
    """(total verify cost in single-token passes, passes) for output[1:]."""
    predictor, matcher = NGramPredictor(), SuffixMatcher()
    predictor.update_batch(prompt + output[:1])
    matcher.update_batch(prompt + output[:1])
    allowed_arr = [False] + allowed
    t, total, passes, continuing = 0, 0.0, 0, False    # output[: t + 1] is emitted
    n = len(output)
    while t < n - 1:
        k = min(max_draft, n - 2 - t)
        draft, orders = predictor.predict_with_orders(k)
        candidates = [orders.tolist()]
        copied, match = matcher.predict(k)
        candidates.append(copy_sources(match, continuing, len(copied)))
        which, m = policy.choose_among(candidates, allowed_arr)
        tokens = (draft if which == 0 else copied)[:m]
        sources_ = candidates[which][:m]
        accepted = 0
        while accepted < m and tokens[accepted] == output[t + 1 + accepted]:
            accepted += 1
        total += cost[m]
        passes += 1
        policy.observe(m + 1, cost[m], sources_, accepted)
        full = [draft.tolist(), copied.tolist()]
        for ci, cand in enumerate(candidates):       # as the engine does: score the rest in hindsight
            if ci != which:
                policy.defer(t + 1, full[ci], cand)
            elif accepted == m:
                policy.defer(t + 1 + m, full[ci][m:], cand[m:])
        policy.settle(output[: t + 2 + accepted])
        new = output[t + 1: t + 2 + accepted]
        continuing = len(copied) > 0 and all(int(copied[i]) == new[i] for i in range(min(len(copied), len(new))))
        emitted = output[t + 1: t + 2 + accepted]
        predictor.update_batch(emitted)
        matcher.update_batch(emitted)
        t += 1 + accepted
    return total, passes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report")
    ap.add_argument("--max-draft", type=int, default=8)
    opts = ap.parse_args()
    data = json.loads(Path(opts.report).read_text())
    llm = llama_cpp.Llama(_model_path(data["model"]), vocab_only=True, verbose=False)
    items = {(w.name, i.label): i for w in sources.build(llm, data["quick"]) for i in w.items}
    cost = data["verify_cost"]
    allowed = [b in data["invariant_sizes"] for b in range(1, len(cost) + 1)]
    by_workload: dict[str, list[tuple[float, float, int]]] = {}
    for r in data["runs"]:
        if r["method"] != "plain" or r["round"] != 0 or "text" not in r:
            continue
        prompt = prompt_tokens_for(llm, items[(r["workload"], r["item"])].prompt)
        output = llm.tokenize(r["text"].encode(), add_bos=False, special=True)
        if len(output) < 2:
            continue
        policy = CostAwarePolicy(opts.max_draft + 1, learn_cost=False)
        policy.calibrate({b + 1: c for b, c in enumerate(cost)})
        spent, _ = replay(prompt, output, cost, allowed, opts.max_draft, policy)
        limit = oracle.model_free_limit(prompt, output, cost, allowed)
        by_workload.setdefault(r["workload"], []).append((spent, limit.cost, len(output) - 1))
    print(f"| workload | replayed speed-up | limit | % of limit |  ({data['model']}, max_draft {opts.max_draft})")
    print("|---|---|---|---|")
    for name, rows in by_workload.items():
        spent, lim, tokens = (sum(x[i] for x in rows) for i in range(3))
        print(f"| {name} | {tokens / spent:.2f}x | {tokens / lim:.2f}x | {lim / spent:.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
