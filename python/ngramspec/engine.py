"""Exact speculative greedy decoding on a user's ``llama_cpp.Llama``.

Each step drafts up to ``max_draft`` tokens with an NGramPredictor, verifies
``[next token, draft...]`` in one batched ``llama_decode``, keeps the longest
matching prefix plus the model's own token at the first mismatch, and removes
the rejected tail from the KV cache.

State: the engine drives the user's own context and keeps ``Llama``'s
bookkeeping (``n_tokens``, ``input_ids``) coherent with the KV cache, so prompt
prefix reuse works across calls in both directions (engine -> create_completion
and back) and the ``Llama`` stays usable. It does not keep ``Llama.scores``
(only filled with ``logits_all=True``, which the engine never needs).
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np

from . import _llama
from ._core import NGramPredictor, SuffixMatcher
from .invariance import InvarianceReport, check_batch_invariance
from .invariance_cache import load_or_check
from .policy import CostAwarePolicy, copy_confirmed, copy_sources, ngram_sources
from .sampling import SamplingParams, position_uniform, sample, target_distribution
from .stats import GenerationStats

__all__ = ["DEFAULT_MAX_DRAFT", "Generation", "SpeculativeEngine", "prompt_tokens_for"]

_EMPTY = np.empty(0, dtype=np.int32)

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


def prompt_tokens_for(llm: Any, prompt: str | Sequence[int]) -> list[int]:
    """Tokens exactly as ``Llama.create_completion`` builds them for this prompt."""
    if isinstance(prompt, str):
        bos, cls = llm.token_bos(), llm._model.token_cls()
        sep = llm._model.token_sep()
        head = [cls if cls != -1 else bos] if llm._model.add_bos_token() and (cls if cls != -1 else bos) != -1 else []
        body = llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True) if prompt else []
        tail = [] if (not llm._model.add_eos_token() and sep == -1) else [sep if sep != -1 else llm.token_eos()]
        tokens = head + body + tail
    elif isinstance(prompt, (bytes, bytearray)):
        raise TypeError("prompt must be a str or a sequence of token ids, not bytes")
    else:
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
    """Speculative greedy decoding that returns exactly what plain greedy decoding
    (``create_completion(temperature=0)``) returns, in fewer forward passes.

    llm: the ``llama_cpp.Llama`` to drive (its context and cache are used).
    max_draft: most draft tokens verified per forward pass (0 = plain decoding).
    exact: verify only with batch sizes that ``check_batch_invariance`` found
        bit-exact on this model and build. ``False`` allows every size, for
        users who accept floating-point drift in exchange for speed.
    invariance: a report from ``check_batch_invariance`` to use instead of
        measuring one on the first generation (which clears the KV cache once).
    invariance_cache: keep the measured report on disk per model file, llama.cpp
        build and context settings (``invariance_cache``), so the next engine on
        the same setup neither measures nor clears the cache; False always measures.
    adaptive: choose each draft's length by expected tokens per unit of verify
        time (``CostAwarePolicy``); False verifies every draft token offered; a
        ``CostAwarePolicy`` instance uses that policy.
    min_order, max_order, window: passed to ``NGramPredictor``.
    copy: also offer long copy drafts from a ``SuffixMatcher`` over the whole
        prompt and output (the policy picks between them and the n-gram draft
        each pass by expected gain; without a policy the longer match wins).
    trace: record every pass in ``stats.trace`` (source, offered, verified,
        accepted, decode time), to see why a slow case drafted what it did.
    """

    def __init__(self, llm: Any, *, max_draft: int = DEFAULT_MAX_DRAFT, exact: bool = True,
                 invariance: InvarianceReport | None = None, adaptive: bool | CostAwarePolicy = True,
                 min_order: int = 2,
                 max_order: int = 4, window: int = 512, copy: bool = True, trace: bool = False,
                 invariance_cache: bool = True) -> None:
        _llama.context_of(llm)
        if isinstance(max_draft, bool) or not isinstance(max_draft, (int, np.integer)):
            raise TypeError(f"max_draft must be an int, got {type(max_draft).__name__}")
        if max_draft < 0:
            raise ValueError(f"max_draft must be >= 0, got {max_draft}")
        if invariance is not None and not isinstance(invariance, InvarianceReport):
            raise TypeError("invariance must be an InvarianceReport from check_batch_invariance")
        self.llm = llm
        self.exact = bool(exact)
        self.predictor = NGramPredictor(min_order=min_order, max_order=max_order, window=window)
        self.matcher = SuffixMatcher() if copy else None
        self.trace = bool(trace)
        self.invariance_cache = bool(invariance_cache)
        self.batch_limit = min(llm.n_batch, llm.context_params.n_ubatch)
        self.max_draft = int(min(max_draft, self.batch_limit - 1))
        self.invariance = invariance
        self._allowed: np.ndarray | None = None  # allowed[b]: may verify with a batch of b tokens
        self._calibrated = not (adaptive is True)  # a policy given by the user keeps its own cost model
        self._rollback_ok = _llama.can_roll_back(llm)
        self._is_eog: dict[int, bool] = {}
        if not self._rollback_ok:
            warnings.warn("this model's cache cannot be rolled back (recurrent or hybrid); "
                          "ngramspec decodes it plainly", RuntimeWarning, stacklevel=2)
        self._batch = _llama.Batch(self.max_draft + 1)
        if isinstance(adaptive, CostAwarePolicy):
            self.policy: CostAwarePolicy | None = adaptive
        else:
            self.policy = CostAwarePolicy(self.max_draft + 1) if adaptive else None

    # -- batch sizes -----------------------------------------------------
    def _allowed_sizes(self) -> np.ndarray:
        if self._allowed is not None:
            return self._allowed
        allowed = np.zeros(self.max_draft + 2, dtype=bool)
        allowed[1] = True
        costs: dict[int, float] = {}
        if self.max_draft > 0 and self._rollback_ok:
            if not self.exact:
                allowed[:] = True
                allowed[0] = False
                if self.policy is not None and not self._calibrated:
                    if self.invariance is not None:
                        costs = self.invariance.relative_costs()
                    else:
                        # One sweep: fast mode's curve is far from linear (a tiled kernel
                        # makes 8+ rows cheap per row), so price it as measured.
                        from .costcurve import measure_verify_cost

                        curve = measure_verify_cost(self.llm, self.max_draft + 1, reps=1, context_tokens=32)
                        costs = dict(enumerate(curve.relative, 1))
            else:
                if self.invariance is None:
                    if self.invariance_cache:
                        self.invariance = load_or_check(self.llm, self.max_draft + 1)
                    else:
                        self.invariance = check_batch_invariance(self.llm, max_batch=self.max_draft + 1)
                for b in range(2, self.max_draft + 2):
                    r = self.invariance.results.get(b)
                    allowed[b] = bool(r is not None and r.invariant)
                # The check timed every batch size it decoded: a free first cost curve.
                costs = self.invariance.relative_costs()
                if not allowed[2:].any():
                    warnings.warn("no verify batch size above 1 is bit-exact with this model and llama.cpp build; "
                                  "decoding plainly (exact=False speculates anyway)", RuntimeWarning, stacklevel=3)
        if self.policy is not None and not self._calibrated and costs:
            self.policy.calibrate({b: c for b, c in costs.items() if b <= self.max_draft + 1}, shape=not self.exact)
            self._calibrated = True
        self._allowed = allowed
        return allowed

    # -- generation ------------------------------------------------------
    def generate(self, prompt: str | Sequence[int], max_tokens: int | None = 16,
                 stop: str | Sequence[str] | None = None, stopping_criteria: Any = None,
                 sampling: SamplingParams | None = None) -> Generation:
        """Completion of ``prompt``: greedy, or sampled with ``sampling``.

        max_tokens: most tokens to generate, >= 1; None fills the context.
        stop: string(s) that end generation; the text stops before them.
        stopping_criteria: a callable (input_ids, logits) -> bool, called as
            llama-cpp-python calls it: before a token is emitted, with the
            tokens before it and the logits that chose it; True ends generation
            without that token.
        sampling: ``SamplingParams`` for exact speculative sampling (each
            position's randomness comes from (seed, position), so the tokens equal
            non-speculative sampling with the same seed); None decodes greedily.
        """
        run = self.stream(prompt, max_tokens=max_tokens, stop=stop, stopping_criteria=stopping_criteria,
                          sampling=sampling)
        for _ in run:
            pass
        assert run.result is not None
        return run.result

    def stream(self, prompt: str | Sequence[int], max_tokens: int | None = 16,
               stop: str | Sequence[str] | None = None, stopping_criteria: Any = None,
               sampling: SamplingParams | None = None) -> "_Run":
        """Like ``generate``, but yields lists of newly emitted token ids as they are
        accepted; after exhaustion ``.result`` holds the ``Generation``."""
        return _Run(self, prompt, max_tokens, stop, stopping_criteria, sampling)


class _Run:
    """One generation, as an iterator of emitted-token chunks."""

    def __init__(self, engine: SpeculativeEngine, prompt: Any, max_tokens: Any, stop: Any,
                 stopping_criteria: Any = None, sampling: SamplingParams | None = None) -> None:
        llm = engine.llm
        if sampling is not None and not isinstance(sampling, SamplingParams):
            raise TypeError("sampling must be a SamplingParams or None")
        self.sampling = sampling
        if stopping_criteria is not None and not callable(stopping_criteria):
            raise TypeError("stopping_criteria must be callable (input_ids, logits) -> bool")
        self.stopping_criteria = stopping_criteria
        _llama.context_of(llm)
        if max_tokens is not None:
            if isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer)):
                raise TypeError(f"max_tokens must be an int or None, got {type(max_tokens).__name__}")
            if max_tokens <= 0:
                raise ValueError(f"max_tokens must be >= 1 (or None to fill the context), got {max_tokens}")
        if stop is None:
            stops: list[bytes] = []
        elif isinstance(stop, str):
            stops = [stop.encode("utf-8")] if stop else []
        else:
            stop_list = list(stop)
            if not all(isinstance(s, str) for s in stop_list):
                raise TypeError("stop must be a str or a list of str")
            stops = [s.encode("utf-8") for s in stop_list if s]
        self.prompt_tokens = prompt_tokens_for(llm, prompt)
        if not self.prompt_tokens or (isinstance(prompt, str) and not prompt):
            raise ValueError("prompt is empty: give at least one token")
        n_ctx = _llama.usable_n_ctx(llm)
        if len(self.prompt_tokens) >= n_ctx:
            raise ValueError(f"Requested tokens ({len(self.prompt_tokens)}) exceed context window of {n_ctx}")
        self.engine = engine
        self.stops = stops
        room = n_ctx - len(self.prompt_tokens)
        self.max_tokens = room if max_tokens is None else min(int(max_tokens), room)
        self.result: Generation | None = None
        self._gen = self._run()

    def __iter__(self) -> Iterator[list[int]]:
        return self

    def __next__(self) -> list[int]:
        return next(self._gen)

    # ------------------------------------------------------------------
    def _prefill(self, stats: GenerationStats) -> None:
        """Evaluate the prompt the way Llama.generate does, reusing a cached prefix."""
        llm, tokens = self.engine.llm, list(self.prompt_tokens)
        if llm.n_tokens > 0:
            cached = llm.input_ids[: llm.n_tokens]
            common = 0
            for a, b in zip(cached, tokens):
                if a != b:
                    break
                common += 1
            # A fully cached prompt still replays its last token to get fresh logits.
            reuse = common - 1 if common == len(tokens) else common
            if reuse > 0 and _llama.remove_from(llm, reuse):
                tokens = tokens[reuse:]
                llm.n_tokens = reuse
            else:
                _llama.clear_memory(llm)
        else:
            _llama.clear_memory(llm)
        stats.prefill_tokens = len(tokens)
        llm.eval(tokens)  # n_batch chunks, logits on the last row: same kernels as plain decoding

    def _run(self) -> Iterator[list[int]]:
        engine, llm = self.engine, self.engine.llm
        stats = GenerationStats(prompt_tokens=len(self.prompt_tokens))
        t_start = time.perf_counter()
        allowed = engine._allowed_sizes()  # may run the invariance check (clears the cache)
        predictor, batch, policy = engine.predictor, engine._batch, engine.policy
        vocab = llm._model.vocab
        llama_cpp = _llama.llama_cpp_module()
        n_ctx = _llama.usable_n_ctx(llm)
        # Looked up once: each attribute or ctypes lookup in the loop costs more
        # right after a decode has flushed the CPU caches.
        ctx = _llama.context_of(llm)
        memory = llama_cpp.llama_get_memory(ctx)
        llama_decode, seq_rm = llama_cpp.llama_decode, llama_cpp.llama_memory_seq_rm
        is_eog_cache = engine._is_eog

        t0 = time.perf_counter()
        self._prefill(stats)
        stats.time_prefill_s = time.perf_counter() - t0
        kv = list(self.prompt_tokens)  # tokens whose keys/values are in the cache
        n_past = len(kv)
        first_row = _llama.last_logits(llm)
        sampling = self.sampling

        def pick(row: np.ndarray, position: int, history: list[int]) -> int:
            """The token at absolute `position`: argmax, or a draw fixed by (seed, position)."""
            if sampling is None:
                return int(np.argmax(row))
            ids, probs = target_distribution(row, sampling, history)
            return sample(ids, probs, position_uniform(sampling.seed, position))

        # Penalty history is the generated tokens only: llama-cpp-python builds a new
        # sampler per call and feeds it only the tokens it samples.
        nxt = pick(first_row, n_past, [])

        t0 = time.perf_counter()
        predictor.reset()
        predictor.update_batch(self.prompt_tokens)
        matcher = engine.matcher
        if matcher is not None:
            matcher.reset()
            matcher.update_batch(self.prompt_tokens)
        if policy is not None:
            policy.new_generation()
        stats.time_predictor_s += time.perf_counter() - t0

        emitted: list[int] = []
        text = b""
        finish = "length"
        max_tokens, stops = self.max_tokens, self.stops
        longest_stop = max((len(s) for s in stops), default=0)
        prompt_tokens = self.prompt_tokens

        criteria = self.stopping_criteria
        eog: list[int] = []

        def emit(token: int, row: np.ndarray) -> bool:
            """Append one token; True when generation must end here."""
            nonlocal text, finish
            if criteria is not None and criteria(np.array(prompt_tokens + emitted, dtype=np.intc), row):
                finish = "stop"
                return True
            is_eog = is_eog_cache.get(token)
            if is_eog is None:
                is_eog = is_eog_cache[token] = bool(llama_cpp.llama_vocab_is_eog(vocab, token))
            if is_eog:
                finish = "stop"
                eog.append(token)
                return True
            emitted.append(token)
            if stops:
                before = len(text)
                text += llm.detokenize([token], prev_tokens=prompt_tokens)
                window = text[max(0, before - longest_stop + 1):]
                hits = [s for s in stops if s in window]
                if hits:
                    text = text[: text.index(hits[0], max(0, before - longest_stop + 1))]
                    finish = "stop"
                    return True
            if len(emitted) >= max_tokens:
                finish = "length"
                return True
            return False

        try:
            done = emit(nxt, first_row)
            t0 = time.perf_counter()
            if not done:
                predictor.update(nxt)
                if matcher is not None:
                    matcher.update(nxt)
            stats.time_predictor_s += time.perf_counter() - t0
            yield emitted[:]
            continuing = False  # the last pass's copy draft agreed with all it emitted
            while not done:
                # How many draft tokens may ride along with `nxt` in this pass.
                k = min(engine.max_draft, max_tokens - len(emitted) - 1, n_ctx - n_past - 1)
                draft, sources, source = _EMPTY, [], "plain"
                offered: list[tuple[Any, list[int]]] = []   # (tokens, sources) per candidate
                which = 0
                if k > 0 and engine._rollback_ok:
                    t0 = time.perf_counter()
                    draft, _, counts, totals = predictor.predict_detailed(k)
                    sources, source = ngram_sources(counts, totals), "ngram"
                    candidates = [sources]
                    offered.append((draft, sources))
                    if matcher is not None:
                        copied, match = matcher.predict(k)
                        copied_sources = copy_sources(match, continuing, len(copied))
                        candidates.append(copied_sources)
                        offered.append((copied, copied_sources))
                    if policy is not None:
                        which, n = policy.choose_among(candidates, allowed)
                    else:  # eager: the copy when its match is longer than any n-gram context
                        which = 1 if len(candidates) > 1 and (match > predictor.max_order - 1 or not sources) else 0
                        n = len(candidates[which])
                        while n > 0 and not allowed[n + 1]:
                            n -= 1
                    if which == 1:
                        draft, sources, source = copied, copied_sources, "copy"
                    draft, sources = draft[:n], sources[:n]
                    stats.time_predictor_s += time.perf_counter() - t0
                k = len(draft)
                if k == 0:
                    source = "plain"
                batch.fill_verify(nxt, draft, n_past)
                t0 = time.perf_counter()
                rc = llama_decode(ctx, batch.batch)
                t_verify = time.perf_counter() - t0
                if rc != 0:
                    _llama.raise_decode_error(rc)
                stats.time_decode_s += t_verify
                stats.forward_passes += 1
                stats.verify_batch_sizes[k + 1] = stats.verify_batch_sizes.get(k + 1, 0) + 1
                # Argmax row by row, stopping at the first mismatch: rows after a
                # rejection are never needed, and each row is n_vocab floats.
                rows = _llama.output_logits(llm, k + 1)
                if sampling is None:
                    targets = [int(np.argmax(rows[0]))]
                    m = 0
                    while m < k and draft[m] == targets[m]:
                        m += 1
                        targets.append(int(np.argmax(rows[m])))
                else:
                    # One-hot q: draw from p with the position's uniform and accept
                    # the draft token when the draw equals it (module sampling).
                    hist = emitted[-sampling.penalty_last_n:] if sampling.penalty_last_n > 0 else emitted[:]
                    targets = [pick(rows[0], n_past + 1, hist)]
                    m = 0
                    while m < k and draft[m] == targets[m]:
                        hist.append(int(draft[m]))
                        m += 1
                        targets.append(pick(rows[m], n_past + 1 + m, hist))
                if k:
                    stats.record_draft(k, m)
                stats.record_pass(source, m)
                if self.engine.trace:
                    stats.trace.append((source, sources[0] if sources else 0, k, m, t_verify))
                if policy is not None:
                    policy.observe(k + 1, t_verify, sources, m)
                    # The rest of what was offered is scored once the text shows it.
                    start = len(emitted)
                    for i, (tokens, srcs) in enumerate(offered):
                        if i != which:
                            policy.defer(start, tokens.tolist(), srcs)
                        elif m == k:
                            policy.defer(start + k, tokens[k:].tolist(), srcs[k:])
                kv.append(nxt)
                kv.extend(int(t) for t in draft[:m])
                n_past += 1 + m
                if m < k and not seq_rm(memory, 0, n_past, -1):
                    self._recover_without_rollback(kv)
                accepted = targets
                start = len(emitted)
                for i, tok in enumerate(accepted):
                    done = emit(tok, rows[i])
                    if done:
                        stats.stopped_inside_draft = i < m
                        break
                t0 = time.perf_counter()
                if len(emitted) - start == 1:
                    predictor.update(emitted[-1])
                    if matcher is not None:
                        matcher.update(emitted[-1])
                else:
                    predictor.update_batch(emitted[start:])
                    if matcher is not None:
                        matcher.update_batch(emitted[start:])
                if policy is not None:
                    policy.settle(emitted)
                continuing = len(offered) > 1 and copy_confirmed(offered[1][0], emitted[start:])
                stats.time_predictor_s += time.perf_counter() - t0
                nxt = accepted[-1]
                if len(emitted) > start:
                    yield emitted[start:]
        finally:
            # Keep Llama's bookkeeping true to the cache so it stays usable.
            llm.input_ids[:n_past] = kv[:n_past]
            llm.n_tokens = n_past
            llm._requires_eval = True
            stats.generated_tokens = len(emitted)
            stats.time_total_s = time.perf_counter() - t_start
            # An abandoned stream can be finalised by the garbage collector after
            # its Llama was closed: never touch a freed model.
            alive = getattr(getattr(llm, "_ctx", None), "ctx", None) is not None
            if not self.stops and alive:
                text = llm.detokenize(emitted, prev_tokens=prompt_tokens)
            self.result = Generation(emitted, text.decode("utf-8", errors="ignore"), finish, stats,
                                     eog[0] if eog else None)

    def _recover_without_rollback(self, kv: list[int]) -> None:
        """llama.cpp refused to drop the rejected tail: rebuild the cache from the
        accepted tokens and decode plainly from now on, rather than go on wrong."""
        engine, llm = self.engine, self.engine.llm
        warnings.warn("KV cache rollback failed; re-evaluating and decoding plainly from here",
                      RuntimeWarning, stacklevel=3)
        engine._rollback_ok = False
        _llama.clear_memory(llm)
        llm.eval(kv)
