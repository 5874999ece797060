"""Timing the verify-cost curve r(B) on a Llama (the curve types and their
validation are in ``cost_curve``).

Two ways to get it:

- ``measure_verify_cost``: a plain sweep (median over ``reps`` sweeps of B=1..max).
- ``measure_cost_curve``: the curve the exact engine starts from. It survives a
  busy machine: the batch sizes are timed interleaved (every round decodes each
  size once, in a shuffled order, so load hits all sizes alike), each size's
  statistic is the median over rounds of t(B) / t(1) *of the same round*, and the
  result is checked (``validate_curve``) before it is used. A curve that fails is
  measured again, at most ``attempts`` times in all; if it still fails, the
  returned curve is the stated conservative prior (``prior_curve``), marked as
  such, never a clipped worst case.

Both time the same pass (``_timed_passes``: the same cached text, prefix and
rollback); they differ only in which passes they time and how they summarise
them: the sweep times the sizes in ascending order with no warm-up and takes the
median time per size over the median one-token time; the curve warms up, shuffles
the sizes in every round and takes the median of the per-round ratios.
"""
from __future__ import annotations

import contextlib
import math
import random
import statistics
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Callable

from ngramspec import _llama
from ngramspec.calibration.cost_curve import STATISTIC, CostCurve, CostCurveResult, evaluate_rounds, prior_curve
from ngramspec.errors import ContextTooSmallError

if TYPE_CHECKING:
    from llama_cpp import Llama

__all__ = ["BUDGET_ATTEMPTS", "DEFAULT_BUDGET_S", "llm_threads", "measure_cost_curve", "measure_verify_cost"]

#: Wall-time budget of ``measure_cost_curve``, all attempts together (seconds): this
#: floor, or BUDGET_ATTEMPTS quiet attempts as the first round prices them, whichever is
#: longer. Past it the machine is too busy for a trustworthy curve anyway, so a busy
#: start-up costs a bounded time, not minutes, per process. A fixed 20 s was too short
#: for the larger models: with the 15 sizes the exact engine times, one attempt took
#: 22-25 s on Qwen2.5-Coder-1.5B Q4_K_M and 11-15 s on Qwen2.5-Coder-0.5B (2-core Xeon,
#: llama-cpp-python's default threads), so the 1.5B fell to the prior in 1 of 2 tries
#: there (bench/results/cost-curve-validation-xeon.md), a larger model would every time, and the 0.5B
#: had no time to repeat a failed attempt.
DEFAULT_BUDGET_S = 20.0
#: ... the floor's alternative: the first attempt, a full retry and half of a third.
BUDGET_ATTEMPTS = 2.5

# Real text, so that attention sees a plausible cache; repeated to any length.
_TEXT = ("def total_price(items, tax_rate):\n    subtotal = 0\n    for item in items:\n"
         "        subtotal += item.price * item.quantity\n    return subtotal * (1 + tax_rate)\n")


@contextlib.contextmanager
def _timed_passes(llm: Llama, context_tokens: int, largest: int) -> Iterator[Callable[[int], float]]:
    """Clears the Llama's cache, decodes ``context_tokens`` tokens of ``_TEXT`` (in
    chunks llama.cpp accepts), and yields ``time_pass(b)``: the seconds of one
    decode of ``b`` <= ``largest`` tokens after that prefix, logits on every row (as
    verification needs), the cache rolled back to the prefix first. Raises
    RuntimeError when the model cannot roll its cache back (recurrent or hybrid
    models): a pass on an untrimmed cache would not be a verify pass. The cache is
    cleared again on exit (its bookkeeping reset, so the next call re-evaluates
    its prompt)."""
    limit = _llama.batch_limit(llm)   # never more than n_batch / n_ubatch at once
    piece = llm.tokenize(_TEXT.encode(), add_bos=False)
    tokens = piece * ((context_tokens + largest) // len(piece) + 1)
    batch = _llama.Batch(max(min(context_tokens, limit), largest))
    try:
        _llama.clear_memory(llm)
        for start in range(0, context_tokens, limit):
            batch.fill(tokens[start:min(start + limit, context_tokens)], start, all_logits=False)
            _llama.decode(llm, batch)

        def time_pass(b: int) -> float:
            if not _llama.remove_from(llm, context_tokens):
                raise RuntimeError("this model cannot roll back its cache, so verify cost cannot be timed")
            batch.fill(tokens[context_tokens:context_tokens + b], context_tokens, all_logits=True)
            t0 = time.perf_counter()
            _llama.decode(llm, batch)
            return time.perf_counter() - t0

        yield time_pass
    finally:
        batch.close()
        _llama.clear_memory(llm)


def measure_verify_cost(llm: Llama, max_batch: int, *, reps: int = 5, context_tokens: int = 128,
                        progress: bool = False, sizes: Iterable[int] | None = None) -> CostCurve:
    """Median over ``reps`` sweeps of B = 1..max_batch, each pass after
    ``context_tokens`` cached tokens. ``sizes``: time only these (1 and max_batch
    are added) and interpolate the rest linearly, for a long curve whose every size
    would take minutes to time. Clears the Llama's cache (its bookkeeping is reset,
    so the next call re-evaluates its prompt)."""
    if max_batch < 1 or reps < 1:
        raise ValueError("max_batch and reps must be >= 1")
    if context_tokens < 1:
        raise ValueError("context_tokens must be >= 1")
    if max_batch > llm.n_batch:
        raise ValueError(f"max_batch {max_batch} exceeds the context's n_batch ({llm.n_batch})")
    if context_tokens + max_batch > _llama.usable_n_ctx(llm):
        raise ValueError(f"context_tokens + max_batch ({context_tokens + max_batch}) exceeds the context "
                         f"({_llama.usable_n_ctx(llm)} tokens)")
    from tqdm import tqdm  # type: ignore[import-untyped]  # no types-tqdm in the dev tools

    timed = sorted({1, max_batch} | {int(b) for b in (sizes or range(1, max_batch + 1)) if 1 <= b <= max_batch})
    times: dict[int, list[float]] = {b: [] for b in timed}
    with _timed_passes(llm, context_tokens, max_batch) as time_pass:
        for _ in tqdm(range(reps), desc="verify cost", unit="sweep", disable=not progress):
            for b in times:
                times[b].append(time_pass(b))
    one = statistics.median(times[1])
    ratio = {b: statistics.median(t) / one for b, t in times.items()}
    relative = []
    for b in range(1, max_batch + 1):
        if b in ratio:
            relative.append(ratio[b])
            continue
        lo = max(x for x in timed if x < b)
        hi = min(x for x in timed if x > b)
        relative.append(ratio[lo] + (ratio[hi] - ratio[lo]) * (b - lo) / (hi - lo))
    return CostCurve(relative, one)


def llm_threads(llm: Llama) -> tuple[int, int] | None:
    """(n_threads, n_threads_batch) of a Llama's context, if it says."""
    cp: Any = getattr(llm, "context_params", None)
    try:
        return int(cp.n_threads), int(cp.n_threads_batch)
    except (AttributeError, TypeError, ValueError):
        return None


class _Deadline:
    """When ``measure_cost_curve`` stops: ``floor_s`` after it starts, or later once
    the first round says how long BUDGET_ATTEMPTS attempts of ``repeats`` rounds take."""

    def __init__(self, floor_s: float | None, repeats: int) -> None:
        self.start = time.perf_counter()
        self.repeats = repeats
        self.budget_s = math.inf if floor_s is None else floor_s
        self._priced = floor_s is None

    def first_round(self, seconds: float) -> None:
        if not self._priced:
            self._priced = True
            self.budget_s = max(self.budget_s, BUDGET_ATTEMPTS * self.repeats * seconds)

    def passed(self) -> bool:
        return time.perf_counter() > self.start + self.budget_s


def _time_rounds(llm: Llama, sizes: list[int], repeats: int, context_tokens: int, rng: random.Random,
                 progress: Any, deadline: _Deadline | None = None) -> list[dict[int, float]]:
    """``repeats`` rounds; each times one decode of every size (logits on every
    row, after ``context_tokens`` cached tokens) in a fresh shuffled order.
    Stops early (fewer rounds) once ``deadline`` has passed; the first round
    timed prices it (``_Deadline.first_round``)."""
    from ngramspec.calibration.progress import progress as progress_line

    largest = max(sizes)
    rounds: list[dict[int, float]] = []
    with _timed_passes(llm, context_tokens, largest) as time_pass, \
            progress_line(repeats, "verify cost", progress, after=0.0, unit="round") as line:
        time_pass(largest)   # warm-up, not recorded
        time_pass(1)
        for _ in range(repeats):
            order = list(sizes)
            rng.shuffle(order)
            t0 = time.perf_counter()
            rounds.append({b: time_pass(b) for b in order})
            line.update(1)
            if deadline is not None:
                deadline.first_round(time.perf_counter() - t0)
                if deadline.passed():
                    break
    return rounds


def measure_cost_curve(llm: Llama, sizes: Iterable[int], *, repeats: int = 5, attempts: int = 3,
                       context_tokens: int = 128, seed: int = 0, progress: Any = False,
                       budget_s: float | None = DEFAULT_BUDGET_S,
                       time_rounds: Callable[..., list[dict[int, float]]] | None = None) -> CostCurveResult:
    """A verify-cost curve over ``sizes`` (B = 1 is always added) that a busy
    machine cannot silently spoil.

    Each attempt times ``repeats`` interleaved rounds (every size once per round,
    in a shuffled order) and takes, per size, the median over rounds of t(B)/t(1)
    within the round; ``validate_curve`` then judges it, including the spread
    across rounds. A failing attempt is repeated, ``attempts`` in all. If none
    passes, the result is ``prior_curve`` (origin "prior", passed False, the last
    failure as its reason). Cost: about ``repeats * attempts * sum(sizes)`` tokens
    of batched decoding at worst, ``repeats * sum(sizes)`` when the first passes.
    ``budget_s`` bounds the wall time of all attempts together (checked after
    each round), or BUDGET_ATTEMPTS attempts as the first round prices them if
    that is longer: a machine so busy that the measurement overruns it gets the
    prior at once, with that reason, instead of minutes of timing; None: no limit.

    context_tokens: cached tokens before each timed pass (cut to fit n_ctx).
    Clears the Llama's KV cache, as ``check_batch_invariance`` does.
    time_rounds: replaces the real timing (tests): called as
        ``time_rounds(sizes, repeats, attempt)`` and returns the rounds.
    """
    sizes_l = sorted({int(b) for b in sizes} | {1})
    if sizes_l[0] < 1:
        raise ValueError("batch sizes must be >= 1")
    if repeats < 1 or attempts < 1:
        raise ValueError("repeats and attempts must be >= 1")
    threads = None
    if time_rounds is None:
        _llama.context_of(llm)
        if sizes_l[-1] > llm.n_batch:
            raise ValueError(f"batch size {sizes_l[-1]} exceeds the context's n_batch ({llm.n_batch})")
        room = _llama.usable_n_ctx(llm) - sizes_l[-1]
        if room < 1:
            raise ContextTooSmallError(f"n_ctx {_llama.usable_n_ctx(llm)} is too small to time a batch of "
                                       f"{sizes_l[-1]}")
        context_tokens = max(1, min(context_tokens, room))
        threads = llm_threads(llm)
        rng = random.Random(seed)

        def time_rounds(s: list[int], n: int, attempt: int) -> list[dict[int, float]]:
            return _time_rounds(llm, s, n, context_tokens, rng, progress, deadline)

    deadline = _Deadline(budget_s, repeats)
    reason: str | None = "not measured"
    for attempt in range(1, attempts + 1):
        rounds = time_rounds(sizes_l, repeats, attempt)
        if len(rounds) < repeats:
            # An earlier attempt's failure is why this one ran: say what it was.
            failed = f"; the last full one failed validation: {reason}" if attempt > 1 else ""
            return prior_curve(sizes_l, f"the measurement overran its time budget of {deadline.budget_s:.3g} s after "
                               f"{attempt - 1} full attempt(s) (machine busy?){failed}", threads=threads,
                               attempts=attempt)
        relative, spread, reason = evaluate_rounds(rounds, threads)
        if reason is None:
            return CostCurveResult(relative, "measured", True, time.time(), repeats, STATISTIC, threads, None,
                                   spread, attempt, context_tokens)
        if deadline.passed() and attempt < attempts:
            return prior_curve(sizes_l, f"the last attempt failed validation ({reason}) and the time budget of "
                               f"{deadline.budget_s:.3g} s is spent", threads=threads, attempts=attempt)
    return prior_curve(sizes_l, f"{attempts} measurement(s) failed validation, the last: {reason}",
                       threads=threads, attempts=attempts)
