"""Exact speculative decoding on a user's ``llama_cpp.Llama``.

Each pass the ``Drafter`` offers a draft; one batched ``llama_decode`` verifies
``[token just emitted, draft...]``; the longest prefix the model agrees with is
kept, plus the model's own token after it; the rejected tail leaves the KV cache.

State: the engine drives the user's own context and keeps ``Llama``'s
bookkeeping (``n_tokens``, ``input_ids``) true to the KV cache after every pass,
so prompt prefix reuse works across calls in both directions (engine ->
create_completion and back) and the ``Llama`` stays usable. It does not keep
``Llama.scores`` (only filled with ``logits_all=True``, which the engine never needs).

Threading and interleaving: one engine serialises its work with a lock. A
non-streamed generation holds it to the end; a stream holds it for each pass.
A generation that starts makes every earlier unfinished stream on the engine
inert: resuming one raises ``RuntimeError``, and finalising one (by the garbage
collector, at any time) touches nothing, so an abandoned stream can never
change later output.
"""
from __future__ import annotations

import functools
import itertools
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ngramspec import _llama
from ngramspec.calibration.audit import AuditResult, AuditRule, audit_pass, describe_mismatch, features_note
from ngramspec.calibration.invariance import InvarianceReport
from ngramspec.calibration.verify_plan import VerifyPlan, build_plan
from ngramspec.drafting.drafter import Drafter
from ngramspec.drafting.policy import CostAwarePolicy, EagerPolicy, curve_origin, describe_cost
from ngramspec.engine.acceptance import accept_greedy, accept_sampled, pick
from ngramspec.engine.output_text import OutputText
from ngramspec.engine.stats import GenerationStats
from ngramspec.errors import PromptTooLong
from ngramspec.proposers.base import Proposer
from ngramspec.proposers.copy import CopyProposer
from ngramspec.proposers.ngram import NGramProposer
from ngramspec.proposers.prediction import PredictionProposer, prediction_text, prediction_usage
from ngramspec.sampling import SamplingParams

__all__ = ["DEFAULT_MAX_DRAFT", "Generation", "SpeculativeEngine", "prompt_tokens_for"]

# Measured on SmolLM2-135M (bench/results/max_draft.md): with the adaptive
# policy choosing each draft's length, caps from 2 to 16 were within run-to-run
# noise of each other (geometric mean 62.5-65.8 tokens/s); 8 bounds the cost of
# one misprediction while leaving long drafts to highly predictable text.
DEFAULT_MAX_DRAFT = 8


@dataclass
class Generation:
    tokens: list[int]
    text: str
    finish_reason: str  # "stop" (end-of-generation token or stop string) or "length"
    stats: GenerationStats
    eog_token: int | None = None  # the end-of-generation token that ended it, never emitted
    # OpenAI's completion_tokens_details when a prediction was given, else None.
    prediction_usage: dict[str, int] | None = None


def prompt_tokens_for(llm: Any, prompt: str | Sequence[int]) -> list[int]:
    """Tokens exactly as ``Llama.create_completion`` builds them for this prompt."""
    if isinstance(prompt, str):
        return _llama.completion_prompt_tokens(llm, prompt)
    if isinstance(prompt, (bytes, bytearray)):
        raise TypeError("prompt must be a str or a sequence of token ids, not bytes")
    try:
        tokens = [_token_id(t) for t in prompt]
    except TypeError as e:
        raise TypeError(f"prompt must be a str or a sequence of int token ids: {e}") from None
    n_vocab = llm.n_vocab()
    bad = [t for t in tokens if not 0 <= t < n_vocab]
    if bad:
        raise ValueError(f"prompt token ids must be in [0, {n_vocab}), got {bad[0]}")
    return tokens


def _token_id(t: Any) -> int:
    if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
        raise TypeError(f"{t!r} is not an int")
    return int(t)


class SpeculativeEngine:
    """Speculative decoding that returns exactly what plain decoding returns
    (greedy: the same tokens; sampled: the same distribution), in fewer forward passes.

    llm: the ``llama_cpp.Llama`` to drive (its context and cache are used).
    max_draft: most draft tokens verified per forward pass (0 = plain decoding).
    exact: the default verify mode; each call may override it. True verifies
        only with batch sizes that ``check_batch_invariance`` found bit-exact on
        this model and build; False allows every size, for users who accept
        floating-point drift in exchange for speed.
    invariance: a report from ``check_batch_invariance`` to use instead of
        measuring one.
    invariance_cache: keep the measured report on disk per model file, llama.cpp
        build and context settings, so the next engine on the same setup neither
        measures nor clears the cache; False always measures.
    adaptive: choose each draft by expected tokens per unit of verify time
        (``CostAwarePolicy``); False verifies every allowed token of the draft
        with the longest match (``EagerPolicy``); a ``CostAwarePolicy`` instance
        uses that policy (with its own cost model: it is not calibrated).
    min_order, max_order, window: passed to ``NGramPredictor``.
    copy: also offer long copy drafts from a ``SuffixMatcher`` over the whole
        prompt and output.
    memory: an ``ngramspec.Memory`` to draft from (and add this engine's outputs to);
        None or False (the default): no memory. A Memory passed to several engines
        is shared by them; its tokenizer must be ``llm``'s (``TokenizerMismatchError``).
    draft_model: a smaller model with the same vocabulary to draft with (classic
        speculative decoding): a ``llama_cpp.Llama``, a GGUF path, a model name or a
        ``model_proposer.DraftModelProposer``. It is priced per pass and called
        only when it pays (``model_proposer.CostlyGate``); see README.
    trace: record every pass in ``stats.trace`` (source, offered, verified,
        accepted, decode time), to see why a slow case drafted what it did.

    The verify plan (allowed sizes and cost curve) is built on first use per
    exactness, or up front with ``prepare()``; see ``verify_plan.build_plan`` for
    its side effects (measuring clears the Llama's KV cache once).
    """

    def __init__(self, llm: Any, *, max_draft: int = DEFAULT_MAX_DRAFT, exact: bool = True,
                 invariance: InvarianceReport | None = None, adaptive: bool | CostAwarePolicy = True,
                 min_order: int = 2, max_order: int = 4, window: int = 512, copy: bool = True,
                 memory: Any = None, trace: bool = False, invariance_cache: bool = True,
                 draft_model: Any = None) -> None:
        _llama.context_of(llm)
        if isinstance(max_draft, bool) or not isinstance(max_draft, (int, np.integer)):
            raise TypeError(f"max_draft must be an int, got {type(max_draft).__name__}")
        if max_draft < 0:
            raise ValueError(f"max_draft must be >= 0, got {max_draft}")
        if not isinstance(exact, bool):
            raise TypeError(f"exact must be True or False, got {type(exact).__name__}")
        if invariance is not None and not isinstance(invariance, InvarianceReport):
            raise TypeError("invariance must be an InvarianceReport from check_batch_invariance")
        self.llm = llm
        self.exact = exact
        self.trace = bool(trace)
        self.invariance_cache = bool(invariance_cache)
        self.batch_limit = _llama.batch_limit(llm)
        self.max_draft = int(min(max_draft, self.batch_limit - 1))
        self.invariance = invariance
        self.proposers: list[Proposer] = [NGramProposer(min_order=min_order, max_order=max_order, window=window)]
        if copy:
            self.proposers.append(CopyProposer())
        if memory is False:   # spelled out: no memory (the default, None, is the same)
            memory = None
        if memory is not None and not callable(getattr(memory, "proposer_for", None)):
            raise TypeError(f"memory must be an ngramspec.Memory, None or False, got {type(memory).__name__} "
                            "(load a file with ngramspec.Memory.load(path))")
        self.memory = memory
        if memory is not None:  # binds it to llm's tokenizer: TokenizerMismatchError here
            self.proposers.append(memory.proposer_for(llm))
        if draft_model is not None:  # a second Llama drafting (issue 20)
            from ngramspec.proposers.draft_model import as_draft_proposer

            self.proposers.append(as_draft_proposer(draft_model, llm))
        self._adaptive = adaptive
        self._plans: dict[bool, tuple[VerifyPlan, Any]] = {}
        self._rollback_ok = _llama.can_roll_back(llm)
        if not self._rollback_ok:
            warnings.warn("this model's cache cannot be rolled back (recurrent or hybrid); "
                          "ngramspec decodes it plainly", RuntimeWarning, stacklevel=2)
        self._batch = _llama.Batch(self.max_draft + 1)
        self._is_eog: dict[int, bool] = {}
        self._pieces: dict[int, bytes] = {}   # token -> its bytes, for OutputText
        self._audit_rule = AuditRule()    # exact mode's online audit (audit.py), per engine
        self._lock = threading.RLock()
        self._generations = itertools.count(1)
        self._current = 0   # the generation that owns the Llama's state

    # -- compatibility views of the default plan -----------------------------
    @property
    def predictor(self) -> Any:
        return self.proposers[0].predictor  # type: ignore[attr-defined]

    @property
    def policy(self) -> Any:
        """The policy of the default exactness (None without adaptivity)."""
        policy = self._plan_and_policy(self.exact)[1]
        return policy if isinstance(policy, CostAwarePolicy) else None

    # -- verify plans -----------------------------------------------------
    def plan(self, exact: bool | None = None) -> VerifyPlan:
        """The verify plan for ``exact`` (None: the engine's default), built on first use."""
        return self._plan_and_policy(self.exact if exact is None else exact)[0]

    def prepare(self, exact: bool | None = None) -> VerifyPlan:
        """Builds the verify plan now rather than in the first generation."""
        return self.plan(exact)

    def _plan_and_policy(self, exact: bool) -> tuple[VerifyPlan, Any]:
        cached = self._plans.get(exact)
        if cached is not None:
            return cached
        with self._lock:
            plan, report = build_plan(self.llm, exact=exact, max_batch=self.max_draft + 1,
                                      can_roll_back=self._rollback_ok,
                                      invariance=self.invariance if exact else None,
                                      use_cache=self.invariance_cache)
            if exact:
                self.invariance = report
                if report is not None:
                    self._audit_rule.certified_depth = report.certified_depth
            adaptive = self._adaptive
            if isinstance(adaptive, CostAwarePolicy):
                policy: Any = adaptive      # the user's policy keeps its own cost model
            elif adaptive:
                policy = CostAwarePolicy(self.max_draft + 1)
                costs = {b: c for b, c in plan.relative_costs.items() if b <= self.max_draft + 1}
                if costs:
                    policy.calibrate(costs, shape=not exact, origin=curve_origin(plan, report))
            else:
                policy = EagerPolicy()
            self._plans[exact] = (plan, policy)
            return plan, policy

    # -- generation ------------------------------------------------------
    def generate(self, prompt: str | Sequence[int], max_tokens: int | None = 16,
                 stop: str | Sequence[str] | None = None, stopping_criteria: Any = None,
                 sampling: SamplingParams | None = None, *, exact: bool | None = None,
                 prediction: Any = None) -> Generation:
        """Completion of ``prompt``: greedy, or sampled with ``sampling``.

        max_tokens: most tokens to generate, >= 1; None fills the context. As in
            llama-cpp-python, a character split across tokens is completed first,
            so a multi-byte character can take the count past max_tokens.
        stop: string(s) that end generation; the text stops before them.
        stopping_criteria: a callable (input_ids, logits) -> bool, called as
            llama-cpp-python calls it: before a token is emitted, with the
            tokens before it and the logits that chose it; True ends generation
            without that token.
        sampling: ``SamplingParams`` for exact speculative sampling (each
            position's randomness comes from (seed, position), so the tokens equal
            non-speculative sampling with the same seed); None decodes greedily.
        exact: this call's verify mode (None: the engine's).
        prediction: the expected output (OpenAI's ``{"type": "content", "content":
            ...}`` or a str): drafted from where the output follows it; the output
            is the same as without it (sampled with a sampled draft model: the
            same distribution, not necessarily the same draws).
        """
        run = self.stream(prompt, max_tokens=max_tokens, stop=stop, stopping_criteria=stopping_criteria,
                          sampling=sampling, exact=exact, prediction=prediction)
        return run.run_to_end()

    def stream(self, prompt: str | Sequence[int], max_tokens: int | None = 16,
               stop: str | Sequence[str] | None = None, stopping_criteria: Any = None,
               sampling: SamplingParams | None = None, *, exact: bool | None = None,
               prediction: Any = None) -> _Run:
        """Like ``generate``, but yields lists of newly emitted token ids as they are
        accepted; after exhaustion ``.result`` holds the ``Generation``. Another
        generation on this engine, or a plain call on the Llama, ends the stream:
        resuming it then raises RuntimeError."""
        return _Run(self, prompt, max_tokens, stop, stopping_criteria, sampling, exact, prediction)

    def _proposers_for(self, prediction_tokens: list[int] | None) -> list[Proposer]:
        if not prediction_tokens:
            return self.proposers
        return [*self.proposers, PredictionProposer(prediction_tokens)]

    def _withdraw(self, size: int, start: int, result: AuditResult, rows_checked: int, plan: VerifyPlan,
                  stats: GenerationStats) -> None:
        """The audit saw a batch of ``size`` differ from one-token decoding: no later
        pass of this engine uses it in exact mode, nor does a plan built afterwards from
        the same invariance report (an engine planned before keeps its plan) or (with
        the cache) a later process. Says so in a warning."""
        from ngramspec.builds.build_info import invariance_hazards
        from ngramspec.calibration import invariance_cache

        plan.allowed[size] = False
        stats.withdrawn_sizes.append(size)
        hazards = invariance_hazards(self.llm)
        note = features_note([h.split(" ")[0] for h in hazards])
        # Withdraw first (process and file), then describe where it went.
        seen = describe_mismatch(size, start, result, rows_checked, "", note)
        path = invariance_cache.withdraw(self.llm, size, seen, store=self.invariance_cache)
        if self.invariance is not None:
            self.invariance.withdrawn[size] = seen
        where = f" (recorded in {path})" if path is not None else " (for this process)"
        warnings.warn(describe_mismatch(size, start, result, rows_checked, where, note), RuntimeWarning,
                      stacklevel=5)

    def _is_end_of_generation(self, token: int) -> bool:
        known = self._is_eog.get(token)
        if known is None:
            known = self._is_eog[token] = _llama.is_eog(self.llm, token)
        return known


def _stop_list(stop: Any) -> list[str]:
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    stops = list(stop)
    if not all(isinstance(s, str) for s in stops):
        raise TypeError("stop must be a str or a list of str")
    return stops


class _Run:
    """One generation, as an iterator of emitted-token chunks."""

    def __init__(self, engine: SpeculativeEngine, prompt: Any, max_tokens: Any, stop: Any,
                 stopping_criteria: Any, sampling: SamplingParams | None, exact: bool | None,
                 prediction: Any) -> None:
        llm = engine.llm
        if sampling is not None and not isinstance(sampling, SamplingParams):
            raise TypeError("sampling must be a SamplingParams or None")
        if stopping_criteria is not None and not callable(stopping_criteria):
            raise TypeError("stopping_criteria must be callable (input_ids, logits) -> bool")
        if exact is not None and not isinstance(exact, bool):
            raise TypeError(f"exact must be True, False or None, got {type(exact).__name__}")
        _llama.context_of(llm)
        if max_tokens is not None:
            if isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer)):
                raise TypeError(f"max_tokens must be an int or None, got {type(max_tokens).__name__}")
            if max_tokens <= 0:
                raise ValueError(f"max_tokens must be >= 1 (or None to fill the context), got {max_tokens}")
        self.stops = _stop_list(stop)
        self.prompt_tokens = prompt_tokens_for(llm, prompt)
        if not self.prompt_tokens:   # "" is [BOS] on a model that adds one, as in plain
            raise ValueError("prompt is empty: give at least one token")
        # Plain's completion then starts with that BOS too, so its text loses a leading space.
        self.empty_prompt = isinstance(prompt, str) and not prompt
        n_ctx = _llama.usable_n_ctx(llm)
        if len(self.prompt_tokens) >= n_ctx:
            raise PromptTooLong(f"Requested tokens ({len(self.prompt_tokens)}) exceed context window of {n_ctx}")
        # Llama.eval records a prompt in input_ids, sized by the n_ctx asked for (llama.cpp may
        # round the real context up): plain fails there with a numpy broadcast error.
        capacity = _llama.prompt_capacity(llm)
        if len(self.prompt_tokens) > capacity:
            raise PromptTooLong(f"Requested tokens ({len(self.prompt_tokens)}) exceed context window of {capacity} "
                             "(the n_ctx this Llama was created with)")
        text = prediction_text(prediction)
        self.prediction_tokens = _llama.tokenize_text(llm, text) if text else []
        self.has_prediction = prediction is not None
        self.engine, self.sampling, self.stopping_criteria = engine, sampling, stopping_criteria
        self.exact = engine.exact if exact is None else exact
        room = n_ctx - len(self.prompt_tokens)
        self.max_tokens = room if max_tokens is None else min(int(max_tokens), room)
        self.result: Generation | None = None
        self.text: OutputText | None = None   # the text so far, once the run has started
        self.emitted: list[int] = []
        self.finish = "length"
        self.eog: int | None = None   # the end-of-generation token that ended it
        self._generation = 0
        self._gen = self._run()

    def __iter__(self) -> Iterator[list[int]]:
        return self

    def __next__(self) -> list[int]:
        with self.engine._lock:
            return next(self._gen)

    def run_to_end(self) -> Generation:
        """Runs the whole generation under the engine's lock."""
        with self.engine._lock:
            for _ in self:
                pass
        assert self.result is not None
        return self.result

    # ------------------------------------------------------------------
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

    def _emit(self, token: int, row: np.ndarray) -> bool:
        """Appends one token to the output; True when generation must end here."""
        criteria = self.stopping_criteria
        if criteria is not None and criteria(np.array(self.prompt_tokens + self.emitted, dtype=np.intc), row):
            self.finish = "stop"
            return True
        if self.engine._is_end_of_generation(token):
            self.finish, self.eog = "stop", token
            return True
        self.emitted.append(token)
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
        if engine._current != self._generation or not _llama.records(llm, owned, n_past):
            raise RuntimeError("this stream was interrupted: a later call used the same Llama. Finish (or close) "
                               "a stream before the next call, or give each concurrent user its own Llama")

    def _run(self) -> Iterator[list[int]]:
        engine, llm, sampling = self.engine, self.engine.llm, self.sampling
        self._generation = engine._current = next(engine._generations)
        stats = GenerationStats(prompt_tokens=len(self.prompt_tokens))
        t_start = time.perf_counter()
        plan, policy = engine._plan_and_policy(self.exact)  # may measure (clears the cache once)
        drafter = Drafter(engine._proposers_for(self.prediction_tokens), policy, plan.allowed,
                          engine.max_draft if engine._rollback_ok else 0)
        for p in drafter.proposers:  # a draft model samples its drafts with the generation's parameters
            if hasattr(p, "set_sampling"):
                p.set_sampling(sampling)
        batch, n_ctx = engine._batch, _llama.usable_n_ctx(llm)
        decoder = _llama.Decoder(llm)
        audit = engine._audit_rule if plan.exact and plan.allowed[2:].any() else None
        self.text, self.finish, self.eog = OutputText(llm, self.stops, engine._pieces, self.prompt_tokens,
                                                          after_bos=self.empty_prompt), "length", None
        emitted = self.emitted

        t0 = time.perf_counter()
        self._prefill(stats)
        stats.time_prefill_s = time.perf_counter() - t0
        kv = list(self.prompt_tokens)  # tokens whose keys/values are in the cache
        n_past = len(kv)
        # kv as llm.input_ids records it (as long as input_ids), kept up to date pass by pass.
        owned = np.zeros(len(llm.input_ids), dtype=llm.input_ids.dtype)
        owned[:min(n_past, len(owned))] = kv[:len(owned)]
        first_row = _llama.last_logits(llm)
        # Penalty history is the generated tokens only: llama-cpp-python builds a new
        # sampler per call and feeds it only the tokens it samples.
        nxt = pick(first_row, sampling, n_past, [])
        t0 = time.perf_counter()
        drafter.begin(self.prompt_tokens)
        stats.time_predictor_s += time.perf_counter() - t0
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
                cap = min(self.max_tokens - len(emitted), n_ctx - n_past) - 1 if engine._rollback_ok else 0
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
            # Only this run's own objects: an abandoned stream may be finalised by the
            # garbage collector long after a later call took over the Llama.
            stats.generated_tokens = len(emitted)
            stats.time_total_s = time.perf_counter() - t_start
            describe_cost(stats, plan, policy, max_draft=drafter.max_draft, can_roll_back=engine._rollback_ok)
            # Not for a run cut short (closed, superseded, collected): nobody reads its usage,
            # and the garbage collector should not run a diff.
            usage = prediction_usage(self.prediction_tokens, emitted) if self.has_prediction and completed else None
            if usage is not None:
                stats.prediction = dict(usage)
            self.result = Generation(emitted, self.text.text, self.finish, stats, self.eog, usage)
        if completed:
            drafter.end()

    def _accept(self, rows: np.ndarray, tokens: np.ndarray, probs: Any, start: int) -> list[int]:
        """The pass's targets from its rows (``acceptance.py``); ``start``: the
        absolute position of rows[0]'s prediction."""
        sampling = self.sampling
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
            self.engine._withdraw(len(draft) + 1, n_past, result, len(tokens), plan, stats)
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
        engine._rollback_ok = False
        _llama.clear_memory(llm)
        llm.eval(kv)
