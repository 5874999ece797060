"""Turns a suite's runs into per-workload, per-method figures: decode speed,
pair-by-pair speed-ups with their spread, prefill, identity, acceptance, and
the model-free limit."""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ngramspec.suite import oracle
from ngramspec.suite.methods import PREDICTION_METHODS
from ngramspec.suite.run_record import Run
from ngramspec.suite.runner import Suite


@dataclass
class MethodFigures:
    decode_tok_s: float                    # median over rounds
    prefill_s: float                       # median over rounds, summed over the workload's prompts
    speedups: list[float]                  # per round, decode tok/s over plain's on the same prompts
    identical: bool                        # every run's text equals plain's
    failed: int = 0                        # runs that raised
    error: str = ""
    diverged: int = 0                      # runs whose text differs from plain's
    tokens: int = 0                        # generated tokens over every run

    @property
    def divergences_per_1000(self) -> float:
        """First divergences from plain greedy per 1,000 generated tokens (a run
        can diverge once: after that its text is no longer comparable)."""
        return 1000.0 * self.diverged / self.tokens if self.tokens else math.nan

    @property
    def speedup(self) -> float:
        return statistics.median(self.speedups) if self.speedups else math.nan


@dataclass
class WorkloadFigures:
    name: str
    source: str
    prompts: int
    prompt_tokens: int
    output_tokens: int                     # plain's, summed over prompts (one round)
    methods: dict[str, MethodFigures]
    limit: oracle.Limit
    perfect: oracle.Limit
    acceptance: float = math.nan           # ngramspec
    tokens_per_pass: float = math.nan
    acceptance_by_position: list[float] = field(default_factory=list)
    verify_sizes: dict[int, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The figures as a suite report's JSON holds them (NaN still to be made null)."""
        return {**asdict(self), "limit_speedup": self.limit.speedup, "perfect_speedup": self.perfect.speedup}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> WorkloadFigures:
        """The figures back from a suite report's JSON (``to_json``, NaN written as null)."""
        fields = {k: v for k, v in d.items() if k not in ("limit_speedup", "perfect_speedup")}
        fields["methods"] = {m: MethodFigures(**{**mf, "decode_tok_s": _nan(mf["decode_tok_s"]),
                                                 "prefill_s": _nan(mf["prefill_s"]),
                                                 "speedups": [_nan(v) for v in mf["speedups"]]})
                             for m, mf in d["methods"].items()}
        fields["acceptance"], fields["tokens_per_pass"] = _nan(d["acceptance"]), _nan(d["tokens_per_pass"])
        fields["acceptance_by_position"] = [_nan(v) for v in d["acceptance_by_position"]]
        fields["limit"], fields["perfect"] = oracle.Limit(**d["limit"]), oracle.Limit(**d["perfect"])
        fields["verify_sizes"] = {int(b): n for b, n in d.get("verify_sizes", {}).items()}
        return cls(**fields)


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


def _rate(runs: Sequence[Run]) -> float:
    t = sum(r.decode_s for r in runs)
    return sum(r.decode_tokens for r in runs) / t if t > 0 else math.nan


def allowed_sizes(suite: Suite) -> list[bool]:
    """Batch sizes exact verification may use, B = 1..len(cost curve)."""
    return [True] + [suite.invariance.allows(b)
                     for b in range(2, len(suite.cost.relative) + 1)]


def summarize(suite: Suite, runs: Sequence[Run], workloads: Sequence[str] | None = None) -> list[WorkloadFigures]:
    """Figures for each workload (all of the suite's, or those named)."""
    allowed = allowed_sizes(suite)
    rounds = sorted({r.round for r in runs})
    out = []
    for w in suite.workloads:
        if workloads is not None and w.name not in workloads:
            continue
        mine = [r for r in runs if r.workload == w.name]
        by_method: dict[str, dict[tuple[str, int], Run]] = {}
        for r in mine:
            by_method.setdefault(r.method, {})[(r.item, r.round)] = r
        plain = by_method.get("plain", {})
        methods: dict[str, MethodFigures] = {}
        for m in suite.methods:
            runs_m = [r for r in mine if r.method == m]
            if not runs_m and m in PREDICTION_METHODS:   # run only where an item has a prediction
                continue
            ok = [r for r in runs_m if not r.error]
            speedups, rates, prefills = [], [], []
            for rnd in rounds:
                these = [r for r in ok if r.round == rnd]
                base = [plain[(r.item, rnd)] for r in these]
                if these:
                    rates.append(_rate(these))
                    prefills.append(sum(r.prefill_s for r in these))
                    speedups.append(_rate(these) / _rate(base))
            # Identity is with the plain decoding of the method's own build.
            reference = by_method.get(suite.same_build_plain(m), plain)
            diverged = sum(r.text != reference[(r.item, r.round)].text for r in ok)
            errors = [r.error for r in runs_m if r.error]
            methods[m] = MethodFigures(statistics.median(rates) if rates else math.nan,
                                       statistics.median(prefills) if prefills else math.nan,
                                       speedups, diverged == 0 and bool(ok), len(errors), errors[0] if errors else "",
                                       diverged, sum(r.tokens for r in ok))
        # The limit is computed on ngramspec's tokens, which are plain greedy's
        # whenever the texts are identical (the report says if not).
        spec = [r for r in mine if r.method == "ngramspec" and r.round == rounds[0]]
        items = {i.label: i for i in w.items}
        limits, perfects, prompt_tokens = [], [], 0
        for r in spec:
            ids = suite.prompt_ids(items[r.item])
            prompt_tokens += len(ids)
            limits.append(oracle.model_free_limit(ids, r.output_ids, suite.cost.relative, allowed))
            perfects.append(oracle.perfect_limit(len(r.output_ids), suite.cost.relative, allowed))
        fig = WorkloadFigures(w.name, w.source, len(w.items), prompt_tokens,
                              sum(plain[(i.label, rounds[0])].tokens for i in w.items), methods,
                              oracle.combine(limits), oracle.combine(perfects))
        all_spec = [r for r in mine if r.method == "ngramspec"]
        if all_spec:
            _spec_stats(fig, all_spec)
        out.append(fig)
    return out


def _spec_stats(fig: WorkloadFigures, runs: Sequence[Run]) -> None:
    drafted = accepted = generated = passes = 0
    by_pos_d: list[int] = []
    by_pos_a: list[int] = []
    sizes: dict[int, int] = {}
    for r in runs:
        s: dict[str, Any] = r.stats
        drafted += s["drafted_tokens"]
        accepted += s["accepted_tokens"]
        generated += s["generated_tokens"]
        passes += s["forward_passes"]
        for i, (d, a) in enumerate(zip(s["drafted_by_position"], s["accepted_by_position"])):
            if i == len(by_pos_d):
                by_pos_d.append(0)
                by_pos_a.append(0)
            by_pos_d[i] += d
            by_pos_a[i] += a
        for b, n in s["verify_batch_sizes"].items():
            sizes[int(b)] = sizes.get(int(b), 0) + n
    fig.acceptance = accepted / drafted if drafted else math.nan
    fig.tokens_per_pass = generated / passes if passes else math.nan
    fig.acceptance_by_position = [a / d if d else math.nan for a, d in zip(by_pos_a, by_pos_d)]
    fig.verify_sizes = dict(sorted(sizes.items()))


def geomean(values: Sequence[float]) -> float:
    vals = [v for v in values if v > 0 and not math.isnan(v)]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else math.nan
