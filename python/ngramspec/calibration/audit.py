"""The online audit of exact mode: a backstop behind the batch-invariance check.

The check (``invariance.check_batch_invariance``) certifies the batch sizes exact
mode may use, at depths up to ``invariance.MAX_CHECK_DEPTH``. The audit re-checks
real verify passes: it decodes the pass's accepted tokens again one at a time,
as plain decoding would, and compares every logits row it used bit for bit.
An audited pass is always right: when a row differs, the pass's tokens are taken
from the one-token rows instead, and the batch size is withdrawn at once (for
this engine; in the invariance report it shares, so plans built from that report
afterwards leave it out, while another engine's plan built before keeps it; and
in the on-disk cache, for later processes), with a warning that says what was seen.

The sampling rule (``AuditRule.wants``), for exact-mode passes of 2+ tokens:
- beyond the certified depth, the first pass (of any size of 2+) in each
  power-of-two span of positions (1025-2048, 2049-4096, ...) is audited, so a
  kernel that changes with the KV length is looked for once per span, at a
  bounded cost whatever the context (one audit per size and span took 15% of
  Qwen2.5-Coder-0.5B's decode time on a 1,600-token prompt);
- otherwise a pass is audited when the engine's audit time, with this audit
  (priced as the pass's own verify time: re-decoding its accepted tokens one at
  a time costs about as much), stays within ``share`` (1%) of its verify time so
  far. So audits start once about 1/share passes have run, and never take more
  than the share; the first of each span above is the only overshoot;
- and such a pass is audited only while this generation's own audit time, with
  it, stays within ``run_share`` (2%) of this generation's verify time. The
  engine's budget builds up over its life, and without this cap a short answer
  spent what long ones had saved: Qwen2.5-Coder-0.5B's 43-token code completion
  took two audits of 2-token passes in one generation (80 ms of 1.7 s: exact mode
  0.91x of plain in that round, `ngramspec bench --quick`). A short answer is then audited
  only where it reaches a new span beyond the certified depth; the sample comes
  from the longer ones.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

__all__ = ["AUDIT_SHARE", "RUN_AUDIT_SHARE", "AuditResult", "AuditRule", "audit_pass"]

#: Audit time as a share of verify time (the cost goal is 3% of decode time). A rule
#: that always audited the first pass, at 2%, took 3.3% on the SmolLM2 quick suite.
AUDIT_SHARE = 0.01
#: The most one generation spends on audits that the share pays for.
RUN_AUDIT_SHARE = 0.02


@dataclass
class AuditRule:
    """Which exact-mode passes to audit. ``certified_depth``: the last position
    the invariance check covered (0: none recorded, so every span is new)."""
    certified_depth: int = 0
    share: float = AUDIT_SHARE
    run_share: float = RUN_AUDIT_SHARE
    audit_seconds: float = 0.0
    verify_seconds: float = 0.0
    run_audit_seconds: float = 0.0    # this generation's (begin_run resets them)
    run_verify_seconds: float = 0.0
    _spans_seen: set[int] = field(default_factory=set)

    def begin_run(self) -> None:
        """A new generation starts: its own audit budget starts at zero."""
        self.run_audit_seconds = self.run_verify_seconds = 0.0

    def wants(self, size: int, end_position: int, expected_seconds: float) -> bool:
        """Whether to audit a pass of ``size`` tokens ending before ``end_position``
        whose audit would take about ``expected_seconds``."""
        if size < 2:
            return False
        if end_position > self.certified_depth:
            span = (end_position - 1).bit_length()
            if span not in self._spans_seen:
                self._spans_seen.add(span)
                return True
        return (self.audit_seconds + expected_seconds <= self.share * self.verify_seconds
                and self.run_audit_seconds + expected_seconds <= self.run_share * self.run_verify_seconds)

    def verified(self, seconds: float) -> None:
        self.verify_seconds += seconds
        self.run_verify_seconds += seconds

    def audited(self, seconds: float) -> None:
        self.audit_seconds += seconds
        self.run_audit_seconds += seconds


@dataclass
class AuditResult:
    rows: np.ndarray        # the one-token rows: the truth for this pass
    targets: list[int]      # the pass's tokens, from those rows
    mismatch_row: int | None  # the first row that differed from the batch's, None if none did
    max_abs_diff: float


def audit_pass(decode_one: Callable[[int, int], np.ndarray], batch_rows: np.ndarray, tokens: list[int],
               start: int, accept: Callable[[np.ndarray, np.ndarray], list[int]]) -> AuditResult:
    """Decodes ``tokens`` (the token just emitted and the accepted draft tokens)
    one at a time from ``start`` with ``decode_one(token, position)``, which the
    caller runs on a cache rolled back to ``start``, and compares each row with
    ``batch_rows`` (the verify pass's rows for the same tokens, a copy). On a
    mismatch the targets are chosen again from the one-token rows by ``accept``
    (rows, draft tokens)."""
    single = np.empty_like(batch_rows)
    for i, tok in enumerate(tokens):
        single[i] = decode_one(tok, start + i)
    same = np.all(single.view(np.uint32) == batch_rows.view(np.uint32), axis=1)
    if same.all():
        return AuditResult(single, [], None, 0.0)
    first = int(np.argmin(same))
    diff = float(np.max(np.abs(single - batch_rows)))
    return AuditResult(single, accept(single, np.asarray(tokens[1:], dtype=np.int32)), first, diff)


def describe_mismatch(size: int, start: int, result: AuditResult, rows_checked: int, where: str,
                      features: str) -> str:
    """The warning's text: what was seen, what was done."""
    assert result.mismatch_row is not None
    return (f"exact mode's audit: a verify batch of {size} tokens at positions {start}-{start + size - 1} gave "
            f"logits that differ from one-token decoding (row {result.mismatch_row} of {rows_checked} checked, "
            f"max |diff| {result.max_abs_diff:.3g}){features}. Batch size {size} is withdrawn for this model and "
            f"build{where}; this pass's tokens were taken from one-token decoding, but earlier unaudited passes "
            "of that size may have left plain greedy's text")


def features_note(build: Any) -> str:
    """', on a build with LLAMAFILE, REPACK' when the build has features known to
    break batch invariance, else ''."""
    names = list(build) if build else []
    return f", on a build with {', '.join(names)}" if names else ""
