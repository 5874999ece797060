"""One generation on a ``SpeculativeEngine``: the run (``GenerationStream``) and its result (``Generation``).

Each pass the ``Drafter`` offers a draft; one batched ``llama_decode`` verifies
``[token just emitted, draft...]``; the longest prefix the model agrees with is
kept, plus the model's own token after it; the rejected tail leaves the KV cache.
"""
from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ngramspec import _llama
from ngramspec.arg_checks import checked_int
from ngramspec.calibration.audit import AuditRule, audit_pass
from ngramspec.calibration.verify_plan import VerifyPlan
from ngramspec.drafting.drafter import Drafter
from ngramspec.drafting.policy_protocol import Policy
from ngramspec.engine.acceptance import accept_greedy, accept_sampled, pick
from ngramspec.engine.cost_report import describe_cost
from ngramspec.engine.logprobs import TokenLogprobs
from ngramspec.engine.output_text import OutputText
from ngramspec.engine.request import check_exact, prompt_tokens_for, stop_list
from ngramspec.engine.row_rules import row_rules_for
from ngramspec.engine.run_host import RunHost
from ngramspec.engine.stats import GenerationStats
from ngramspec.errors import PromptTooLongError
from ngramspec.proposers.prediction import prediction_text, prediction_usage
from ngramspec.sampling import SamplingParams

__all__ = ["Generation", "GenerationStream"]


@dataclass
class Generation:
    """The result of one generation."""

    tokens: list[int]
    text: str
    finish_reason: str  # "stop" (end-of-generation token or stop string) or "length"
    stats: GenerationStats
    eog_token: int | None = None  # the end-of-generation token that ended it, never emitted
    # OpenAI's completion_tokens_details when a prediction was given, else None.
    prediction_usage: dict[str, int] | None = None


class GenerationStream:
    """One generation, as an iterator of the token ids each verify pass emits
    (``SpeculativeEngine.stream`` returns one; ``generate`` runs one to its end).
    The arguments are checked when it is made; the work starts at the first
    ``next``, and each ``next`` holds the engine's lock for one pass.

    Attributes callers may read (the rest is the run's own state):
    prompt_tokens: the prompt's token ids, as ``Llama.create_completion`` builds them.
    text: the ``OutputText`` of the tokens emitted so far, None before the first
        ``next``; its ``stable_end`` and ``slice`` give the text that can no longer
        change (a stream sends that much).
    emitted: the token ids emitted so far (the run's own list: read it, never change it).
    result: the ``Generation``, once the run has ended (exhausted, closed, or
        stopped by an error); None before.
    """

    def __init__(self, engine: RunHost, prompt: str | Sequence[int], *, max_tokens: object,
                 stop: str | Sequence[str] | None, stopping_criteria: object, sampling: object,
                 exact: object, prediction: object, grammar: object = None, logit_bias: object = None,
                 penalties: object = None, min_tokens: object = 0, logprobs: object = None,
                 row_processors: Any = ()) -> None:
        llm = engine.llm
        if sampling is not None and not isinstance(sampling, SamplingParams):
            raise TypeError("sampling must be a SamplingParams or None")
        if stopping_criteria is not None and not callable(stopping_criteria):
            raise TypeError("stopping_criteria must be callable (input_ids, logits) -> bool")
        check_exact(exact)
        _llama.context_of(llm)
        if max_tokens is not None:
            max_tokens = checked_int(max_tokens, "max_tokens", what="an int or None")
            if max_tokens <= 0:
                raise ValueError(f"max_tokens must be >= 1 (or None to fill the context), got {max_tokens}")
        self.stops = stop_list(stop)
        self.prompt_tokens = prompt_tokens_for(llm, prompt)
        if not self.prompt_tokens:   # "" is [BOS] on a model that adds one, as in plain
            raise ValueError("prompt is empty: give at least one token")
        # Plain's completion then starts with that BOS too, so its text loses a leading space.
        self.empty_prompt = isinstance(prompt, str) and not prompt
        n_ctx = _llama.usable_n_ctx(llm)
        if len(self.prompt_tokens) >= n_ctx:
            raise PromptTooLongError(f"Requested tokens ({len(self.prompt_tokens)}) exceed context window of {n_ctx}")
        # Llama.eval records a prompt in input_ids, sized by the n_ctx asked for (llama.cpp may
        # round the real context up): plain fails there with a numpy broadcast error.
        capacity = _llama.prompt_capacity(llm)
        if len(self.prompt_tokens) > capacity:
            raise PromptTooLongError(f"Requested tokens ({len(self.prompt_tokens)}) exceed context window of "
                                     f"{capacity} (the n_ctx this Llama was created with)")
        text = prediction_text(prediction)
        self.prediction_tokens = _llama.tokenize_text(llm, text) if text else []
        self.has_prediction = prediction is not None
        self.engine, self.sampling, self.stopping_criteria = engine, sampling, stopping_criteria
        self.exact: bool = engine.exact if exact is None else bool(exact)   # check_exact: a bool or None
        room = n_ctx - len(self.prompt_tokens)
        self.max_tokens = room if max_tokens is None else min(int(max_tokens), room)
        self.result: Generation | None = None
        self.text: OutputText | None = None   # the text so far, once the run has started
        self.emitted: list[int] = []
        # What a stopping criterion is given: the prompt and the tokens emitted so far, as
        # llama-cpp-python gives its input_ids (a view, no copy per token).
        self._criteria_ids = (np.array(self.prompt_tokens + [0] * 64, dtype=np.intc)
                              if stopping_criteria is not None else np.empty(0, dtype=np.intc))
        self.finish = "length"
        self.eog: int | None = None   # the end-of-generation token that ended it
        self._generation = 0
        # What plain's sampler chain does to each row (grammar, greedy penalties and bias,
        # min_tokens: row_rules.py), and the top logprobs of each emitted token (logprobs.py).
        self.rules = row_rules_for(llm, sampling, grammar=grammar, logit_bias=logit_bias, penalties=penalties,
                                   min_tokens=min_tokens, processors=row_processors, prompt=self.prompt_tokens)
        self.logprobs = TokenLogprobs(logprobs) if logprobs is not None else None
        self._gen = self._run()

    def __iter__(self) -> Iterator[list[int]]:
        return self

    def __next__(self) -> list[int]:
        with self.engine.lock:
            return next(self._gen)

    def run_to_end(self) -> Generation:
        """Runs the whole generation under the engine's lock."""
        with self.engine.lock:
            for _ in self:
                pass
        assert self.result is not None
        return self.result

    # -- the run: setting up, then one verify pass per chunk -------------------
    def _drafter(self, plan: VerifyPlan, policy: Policy) -> Drafter:
        engine = self.engine
        drafter = Drafter(engine.proposers_for(self.prediction_tokens), policy, plan.allowed,
                          engine.max_draft if engine.can_roll_back else 0, engine.gates)
        for p in drafter.proposers:  # a draft model samples its drafts with the generation's parameters
            p.set_sampling(self.sampling)
        return drafter

    def _prefill(self, stats: GenerationStats) -> None:
        """Evaluate the prompt the way Llama.generate does, reusing a cached prefix."""
        llm, tokens = self.engine.llm, list(self.prompt_tokens)
        common = _llama.cached_prefix(llm, tokens)
        # A fully cached prompt still replays its last token to get fresh logits.
        reuse = common - 1 if common == len(tokens) else common
        if reuse > 0 and _llama.remove_from(llm, reuse):
            tokens = tokens[reuse:]
            llm.n_tokens = reuse
        else:
            _llama.clear_memory(llm)
        stats.prefill_tokens = len(tokens)
        llm.eval(tokens)  # n_batch chunks, logits on the last row: same kernels as plain decoding

    def _load_prompt(self, stats: GenerationStats) -> tuple[list[int], np.ndarray]:
        """Prefills the prompt; returns the tokens whose keys/values are in the cache
        and the same as ``llm.input_ids`` records them (as long as input_ids), which
        the run keeps up to date pass by pass."""
        llm = self.engine.llm
        t0 = time.perf_counter()
        self._prefill(stats)
        stats.time_prefill_s = time.perf_counter() - t0
        kv = list(self.prompt_tokens)
        owned = np.zeros(len(llm.input_ids), dtype=llm.input_ids.dtype)
        owned[:min(len(kv), len(owned))] = kv[:len(owned)]
        return kv, owned

    def _first_token(self, drafter: Drafter, n_past: int, stats: GenerationStats) -> tuple[int, np.ndarray]:
        """The token the prompt's logits choose, and that row; starts the drafter on the prompt."""
        first_row = _llama.last_logits(self.engine.llm)
        # Penalty history is the generated tokens only: llama-cpp-python builds a new
        # sampler per call and feeds it only the tokens it samples.
        rules = self.rules
        nxt = (pick if rules is None else rules.first)(first_row, self.sampling, n_past, [])
        t0 = time.perf_counter()
        drafter.begin(self.prompt_tokens)
        stats.time_predictor_s += time.perf_counter() - t0
        return nxt, first_row

    def _emit(self, token: int, row: np.ndarray) -> bool:
        """Appends one token to the output; True when generation must end here."""
        criteria = self.stopping_criteria
        if criteria is not None:
            ids = self._criteria_ids
            n = len(self.prompt_tokens) + len(self.emitted)
            if criteria(ids[:n], row):
                self.finish = "stop"
                return True
            # Recorded before the end-of-generation check: a run that ends there never
            # calls the criterion again.
            if n == len(ids):   # grown by doubling: a whole copy per token cost more than the check
                ids = self._criteria_ids = np.concatenate([ids, np.empty(len(ids), dtype=np.intc)])
            ids[n] = token
        if self.engine.is_end_of_generation(token):
            self.finish, self.eog = "stop", token
            return True
        self.emitted.append(token)
        if self.logprobs is not None:
            self.logprobs.add(token, row)
        assert self.text is not None
        if not self.text.add(token):
            return False   # llama-cpp-python completes a split character before any check
        if self.text.stopped:
            self.finish = "stop"
            return True
        if len(self.emitted) >= self.max_tokens:
            self.finish = "length"
            return True
        return False

    def _still_owner(self, n_past: int, owned: np.ndarray) -> None:
        """Refuses to go on once a later generation or a plain call has used the
        Llama. ``owned``: the tokens this run put in the cache, as its ``input_ids``
        should record them. All of them are compared (a vector compare, microseconds
        even at 32k tokens): a plain call on another prompt of the same length and
        last token left the length and the last id as they were, and the stream went
        on from that prompt's cache without a word."""
        engine, llm = self.engine, self.engine.llm
        _llama.context_of(llm)   # a closed Llama raises ValueError here, never decodes
        if not engine.owns(self._generation) or not _llama.records(llm, owned, n_past):
            raise RuntimeError("this stream was interrupted: a later call used the same Llama. Finish (or close) "
                               "a stream before the next call, or give each concurrent user its own Llama")

    def _run(self) -> Iterator[list[int]]:
        # Set-up and conclusion are helpers; the per-pass loop stays inline, as it is
        # the hot path: no helper calls, copies or allocations beyond the pass's own.
        engine, llm = self.engine, self.engine.llm
        self._generation = engine.begin_generation()
        stats = GenerationStats(prompt_tokens=len(self.prompt_tokens))
        t_start = time.perf_counter()
        # May measure, clearing the cache: a slice of exact mode's check while sizes are left (certify.py).
        plan, policy = engine.plan_and_policy(self.exact, self.prompt_tokens)
        stats.time_plan_s = time.perf_counter() - t_start
        if plan.exact:
            stats.certified_sizes = [int(b) for b in np.flatnonzero(plan.allowed) if b > 1]
        drafter = self._drafter(plan, policy)
        batch, n_ctx = engine.verify_batch, _llama.usable_n_ctx(llm)
        decoder = _llama.Decoder(llm)
        audit = engine.audit_rule if plan.exact and plan.allowed[2:].any() else None
        if audit is not None:
            audit.begin_run()
        self.text, self.finish, self.eog = OutputText(llm, self.stops, engine.token_bytes, self.prompt_tokens,
                                                      after_bos=self.empty_prompt), "length", None
        emitted = self.emitted
        kv, owned = self._load_prompt(stats)   # kv: the tokens whose keys/values are in the cache
        n_past = len(kv)
        nxt, first_row = self._first_token(drafter, n_past, stats)
        completed = False
        try:
            done = self._emit(nxt, first_row)
            t0 = time.perf_counter()
            if not done:
                drafter.accept([nxt])
            stats.time_predictor_s += time.perf_counter() - t0
            yield emitted[:]
            while not done:
                self._still_owner(n_past, owned)
                if n_past >= n_ctx:   # a split character ran into the end of the context
                    break
                t0 = time.perf_counter()
                cap = min(self.max_tokens - len(emitted), n_ctx - n_past) - 1 if engine.can_roll_back else 0
                draft = drafter.draft(cap)
                stats.time_predictor_s += time.perf_counter() - t0
                k = len(draft)
                batch.fill_verify(nxt, draft.tokens, n_past)
                t_verify, rows = decoder.verify(batch, k + 1)
                stats.time_decode_s += t_verify

                targets = self._accept(rows, draft.tokens, draft.draft_probs, n_past + 1)
                m = len(targets) - 1
                if audit is not None:
                    audit.verified(t_verify)
                    if audit.wants(k + 1, n_past + k + 1, t_verify):
                        accept = functools.partial(self._accept, probs=draft.draft_probs, start=n_past + 1)
                        rows, targets, m = self._audit(decoder, batch, nxt, draft.tokens, rows, targets, n_past,
                                                       accept, audit, plan, stats)
                stats.record_pass(draft.name, k, m, t_verify, draft.sources[0] if k else 0, trace=engine.trace)
                drafter.verified(draft, t_verify, m)
                kv.append(nxt)
                kv.extend(draft.tokens[:m].tolist())
                if m < k and not decoder.roll_back(n_past + 1 + m):
                    self._recover_without_rollback(kv)
                _llama.sync_bookkeeping(llm, kv, n_past)   # the Llama is true to the cache at every step
                end = min(len(kv), len(owned))
                if end > n_past:
                    owned[n_past:end] = kv[n_past:end]
                n_past = len(kv)
                start = len(emitted)
                for i, tok in enumerate(targets):
                    done = self._emit(tok, rows[i])
                    if done:
                        stats.stopped_inside_draft = i < m
                        break
                t0 = time.perf_counter()
                drafter.accept(emitted[start:])
                stats.time_predictor_s += time.perf_counter() - t0
                nxt = targets[-1]
                if len(emitted) > start:
                    yield emitted[start:]
            completed = True
        finally:
            self._conclude(stats, t_start, plan, policy, drafter, completed)
        if completed:
            drafter.end()

    def _conclude(self, stats: GenerationStats, t_start: float, plan: VerifyPlan, policy: Policy, drafter: Drafter,
                  completed: bool) -> None:
        """Sets ``result`` when the run ends, however it ends. Touches only this
        run's own objects: an abandoned stream may be finalised by the garbage
        collector long after a later call took over the Llama."""
        emitted = self.emitted
        stats.generated_tokens = len(emitted)
        stats.time_total_s = time.perf_counter() - t_start
        describe_cost(stats, plan, policy, max_draft=self.engine.max_draft, can_roll_back=self.engine.can_roll_back)
        # Not for a run cut short (closed, superseded, collected): nobody reads its usage,
        # and the garbage collector should not run a diff.
        usage = prediction_usage(self.prediction_tokens, emitted) if self.has_prediction and completed else None
        if usage is not None:
            stats.prediction = dict(usage)
        assert self.text is not None
        self.result = Generation(emitted, self.text.text, self.finish, stats, self.eog, usage)

    def _accept(self, rows: np.ndarray, tokens: np.ndarray, probs: Any, start: int) -> list[int]:
        """The pass's targets from its rows (``acceptance.py``); ``start``: the
        absolute position of rows[0]'s prediction."""
        sampling = self.sampling
        if self.rules is not None:
            return self.rules.targets(rows, tokens, sampling, start, self.emitted,
                                      probs[:len(tokens)] if probs is not None else None)
        if sampling is None:
            return accept_greedy(rows, tokens)
        hist = self.emitted[-sampling.penalty_last_n:] if sampling.penalizes else []
        return accept_sampled(rows, tokens, sampling, start, hist, probs[:len(tokens)] if probs is not None else None)

    def _audit(self, decoder: _llama.Decoder, batch: _llama.Batch, first: int, draft: np.ndarray,
               rows: np.ndarray, targets: list[int], n_past: int, accept: Any, rule: AuditRule, plan: VerifyPlan,
               stats: GenerationStats) -> tuple[np.ndarray, list[int], int]:
        """Re-decodes the pass's accepted tokens one at a time, as plain decoding
        would, and compares the rows it used bit for bit (``audit.py``). Returns the
        pass's rows, targets and accepted count: the batch's when they agree, the
        one-token decoding's when they do not (and the size is then withdrawn).
        Leaves the cache holding the first token and the accepted draft tokens."""
        t0 = time.perf_counter()
        m = len(targets) - 1
        used = np.array(rows[:m + 1], copy=True)
        tokens = [int(first)] + [int(t) for t in draft[:m]]
        if not decoder.roll_back(n_past):
            raise RuntimeError("KV cache rollback failed during exact mode's audit")
        result = audit_pass(lambda tok, pos: decoder.decode_one(batch, tok, pos), used, tokens, n_past, accept)
        stats.audited_passes += 1
        if result.mismatch_row is not None:
            targets = result.targets
            m = len(targets) - 1
            if m < len(tokens) - 1 and not decoder.roll_back(n_past + 1 + m):
                raise RuntimeError("KV cache rollback failed during exact mode's audit")
            self.engine.withdraw(len(draft) + 1, n_past, result, len(tokens), plan, stats)
        seconds = time.perf_counter() - t0
        rule.audited(seconds)
        stats.time_audit_s += seconds
        return result.rows, targets, m

    def _recover_without_rollback(self, kv: list[int]) -> None:
        """llama.cpp refused to drop the rejected tail: rebuild the cache from the
        accepted tokens and decode plainly from now on, rather than go on wrong."""
        engine, llm = self.engine, self.engine.llm
        warnings.warn("KV cache rollback failed; re-evaluating and decoding plainly from here",
                      RuntimeWarning, stacklevel=3)
        engine.stop_rolling_back()
        _llama.clear_memory(llm)
        llm.eval(kv)
