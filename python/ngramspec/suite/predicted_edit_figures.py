"""The predicted-edit benchmark's figures: per method over every run (tokens per
pass, acceptance, modelled and measured speed-ups, prediction tokens used), and
item by item against the model-free limit and the perfect-drafter ceiling."""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ngramspec.suite import oracle
from ngramspec.suite.methods import PREDICTION_METHODS
from ngramspec.suite.run_record import Run
from ngramspec.suite.runner import Suite
from ngramspec.suite.summary import WorkloadFigures

# The methods compared, in the reports' order, and the one workload they run on.
METHODS = ("plain", "ngramspec") + PREDICTION_METHODS
WORKLOAD = "predicted_edit"


def modelled_cost(stats: dict[str, Any], cost: Sequence[float]) -> float:
    """A run's forward passes priced by the verify-cost curve, in one-token passes."""
    return float(sum(n * cost[int(b) - 1] for b, n in stats["verify_batch_sizes"].items()))


@dataclass
class MethodResult:
    name: str
    runs: int = 0
    identical: bool = True
    tokens: int = 0                    # generated tokens after the first, over every run
    passes: int = 0
    drafted: int = 0
    accepted: int = 0
    cost: float = 0.0                  # modelled, in one-token passes
    decode_tok_s: float = math.nan
    speedups: list[float] = field(default_factory=list)     # measured, per round
    passes_by_source: dict[str, int] = field(default_factory=dict)
    accepted_by_source: dict[str, int] = field(default_factory=dict)
    accepted_prediction_tokens: int = 0
    rejected_prediction_tokens: int = 0

    @property
    def tokens_per_pass(self) -> float:
        return self.tokens / self.passes if self.passes else math.nan

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else math.nan

    @property
    def modelled_speedup(self) -> float:
        return self.tokens / self.cost if self.cost else math.nan

    @property
    def speedup(self) -> float:
        return statistics.median(self.speedups) if self.speedups else math.nan


def method_results(fig: WorkloadFigures, runs: Sequence[Run], cost: Sequence[float]) -> dict[str, MethodResult]:
    out: dict[str, MethodResult] = {}
    for m in fig.methods:
        res = MethodResult(m, identical=fig.methods[m].identical, decode_tok_s=fig.methods[m].decode_tok_s,
                           speedups=list(fig.methods[m].speedups) if m != "plain" else [1.0])
        for r in runs:
            if r.method != m or r.error:
                continue
            res.runs += 1
            if m == "plain":
                res.tokens += r.decode_tokens
                res.passes += r.decode_tokens
                res.cost += r.decode_tokens
                continue
            s = r.stats
            res.tokens += r.decode_tokens
            res.passes += s["forward_passes"]
            res.drafted += s["drafted_tokens"]
            res.accepted += s["accepted_tokens"]
            res.cost += modelled_cost(s, cost)
            for key, table in (("passes_by_source", res.passes_by_source),
                               ("accepted_by_source", res.accepted_by_source)):
                for src, n in s[key].items():
                    table[src] = table.get(src, 0) + n
            pred = s.get("prediction") or {}
            res.accepted_prediction_tokens += pred.get("accepted_prediction_tokens", 0)
            res.rejected_prediction_tokens += pred.get("rejected_prediction_tokens", 0)
        out[m] = res
    return out


def per_item(suite: Suite, runs: Sequence[Run], allowed: Sequence[bool]) -> list[dict[str, Any]]:
    """Round 0, item by item: output tokens, each method's tokens per pass and
    modelled speed-up, and the two ceilings."""
    cost = suite.cost.relative
    rows = []
    for item in suite.workload(WORKLOAD).items:
        mine = {r.method: r for r in runs if r.item == item.label and r.round == 0 and not r.error}
        spec = mine.get("ngramspec")
        if spec is None:
            continue
        ids = suite.prompt_ids(item)
        limit = oracle.model_free_limit(ids, spec.output_ids, cost, allowed)
        perfect = oracle.perfect_limit(len(spec.output_ids), cost, allowed)
        row: dict[str, Any] = {"item": item.label, "output_tokens": len(spec.output_ids),
                               "prompt_tokens": len(ids), "limit_speedup": limit.speedup,
                               "limit_tokens_per_pass": limit.tokens_per_pass, "perfect_speedup": perfect.speedup,
                               "perfect_tokens_per_pass": perfect.tokens_per_pass, "methods": {}}
        for m, r in mine.items():
            if m == "plain":
                continue
            c = modelled_cost(r.stats, cost)
            row["methods"][m] = {
                "tokens_per_pass": r.decode_tokens / r.stats["forward_passes"] if r.stats["forward_passes"] else None,
                "modelled_speedup": r.decode_tokens / c if c else None,
                "passes_by_source": r.stats["passes_by_source"],
                "accepted_by_source": r.stats["accepted_by_source"],
                "prediction": r.stats.get("prediction") or {},
                "identical": r.text == mine["plain"].text if "plain" in mine else None,
            }
        rows.append(row)
    return rows


def compact_trace(run: Run) -> list[str]:
    """A run's per-pass trace as "source/first-token-source:verified/accepted"."""
    return [f"{src}/{first}:{k}/{a}" for src, first, k, a, _ in run.stats.get("trace", [])]
