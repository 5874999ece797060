"""Per-generation statistics: what speculation did and where the time went."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    generated_tokens: int = 0
    prefill_tokens: int = 0          # prompt tokens actually decoded (the rest came from the cache)
    forward_passes: int = 0          # llama_decode calls after prefill (verify or plain)
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    drafted_by_position: list[int] = field(default_factory=list)
    accepted_by_position: list[int] = field(default_factory=list)
    verify_batch_sizes: dict[int, int] = field(default_factory=dict)  # batch size -> passes
    # Why each pass drafted what it did: passes and accepted draft tokens per
    # source ("plain": no draft, "ngram": the n-gram tables, "copy": the suffix matcher).
    passes_by_source: dict[str, int] = field(default_factory=dict)
    drafted_by_source: dict[str, int] = field(default_factory=dict)
    accepted_by_source: dict[str, int] = field(default_factory=dict)
    # With SpeculativeEngine(trace=True): one (source, first token's source index
    # (proposers.ngram.ngram_source: its share bucket, or proposers.copy.copy_source: its match-length
    # bucket), draft tokens verified, accepted, decode seconds) per pass.
    trace: list[tuple[str, int, int, int, float]] = field(default_factory=list)
    # With a prediction: OpenAI's accepted_prediction_tokens / rejected_prediction_tokens.
    prediction: dict[str, int] = field(default_factory=dict)
    # Which verify-cost curve priced the drafts (docs/design.md, the cost model): where it came from
    # ("measured now", "cached (measured ...)", "prior ..., because ...", fast mode's
    # sweep, ...; "; corrected online (scale s)" when timings moved it by > 10%),
    # r(B) as priced at the end of the generation, the passes chosen to measure the
    # cost rather than for their expected gain (drafting/policy.py: exploration and one-token
    # refresh), and why no draft was verified at all, when none was (None otherwise).
    cost_curve_origin: str = ""
    relative_costs: dict[int, float] = field(default_factory=dict)
    explored_passes: int = 0
    speculation_off_reason: str | None = None
    stopped_inside_draft: bool = False  # the last token came from an accepted draft, not the bonus
    # Exact mode's online audit (audit.py): passes re-checked against one-token decoding,
    # the sizes it withdrew in this generation, and the time it took.
    audited_passes: int = 0
    withdrawn_sizes: list[int] = field(default_factory=list)
    time_audit_s: float = 0.0
    # Exact mode: the batch sizes above 1 certified bit-exact when this generation
    # started, the only ones it may verify with (calibration/certify.py), and the
    # time it spent before its prefill building the plan and certifying more.
    certified_sizes: list[int] = field(default_factory=list)
    time_plan_s: float = 0.0
    time_prefill_s: float = 0.0
    time_decode_s: float = 0.0       # inside llama_decode after prefill
    # In the Drafter: begin, draft (every proposer's proposal, a draft model's decoding
    # included, and the policy's choice) and accept (every proposer and the policy told
    # the emitted tokens); the name is from when the n-gram tables were all there was.
    time_predictor_s: float = 0.0
    time_total_s: float = 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0

    @property
    def tokens_per_forward(self) -> float:
        """Generated tokens per forward pass; the first token comes from prefill."""
        return self.generated_tokens / self.forward_passes if self.forward_passes else float(self.generated_tokens)

    @property
    def acceptance_by_position(self) -> list[float]:
        return [a / d if d else 0.0 for a, d in zip(self.accepted_by_position, self.drafted_by_position)]

    @property
    def time_other_s(self) -> float:
        return max(0.0, self.time_total_s - self.time_prefill_s - self.time_decode_s - self.time_predictor_s
                   - self.time_audit_s - self.time_plan_s)

    @property
    def overhead_per_step_ms(self) -> float:
        """Engine time outside llama_decode and prefill, per forward pass."""
        steps = max(1, self.forward_passes)
        return (self.time_predictor_s + self.time_other_s) / steps * 1e3

    def record_draft(self, drafted: int, accepted: int) -> None:
        while len(self.drafted_by_position) < drafted:
            self.drafted_by_position.append(0)
            self.accepted_by_position.append(0)
        for i in range(drafted):
            self.drafted_by_position[i] += 1
            if i < accepted:
                self.accepted_by_position[i] += 1
        self.drafted_tokens += drafted
        self.accepted_tokens += accepted

    def record_pass(self, source: str, drafted: int, accepted: int, seconds: float, first_source: int = 0,
                    trace: bool = False) -> None:
        """One verify pass: ``drafted`` tokens from ``source`` after the token just
        emitted, ``accepted`` of them kept, ``seconds`` inside llama_decode."""
        self.forward_passes += 1
        self.verify_batch_sizes[drafted + 1] = self.verify_batch_sizes.get(drafted + 1, 0) + 1
        if drafted:
            self.record_draft(drafted, accepted)
        self.passes_by_source[source] = self.passes_by_source.get(source, 0) + 1
        self.drafted_by_source[source] = self.drafted_by_source.get(source, 0) + drafted
        self.accepted_by_source[source] = self.accepted_by_source.get(source, 0) + accepted
        if trace:
            self.trace.append((source, first_source, drafted, accepted, seconds))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(
            acceptance_rate=self.acceptance_rate,
            tokens_per_forward=self.tokens_per_forward,
            acceptance_by_position=self.acceptance_by_position,
            time_other_s=self.time_other_s,
            overhead_per_step_ms=self.overhead_per_step_ms,
        )
        return d
