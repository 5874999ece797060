"""The draft-model proposer: classic speculative decoding (Leviathan et al. 2023;
Chen et al. 2023) with a second, smaller ``llama_cpp.Llama`` that shares the
target's vocabulary.

The draft model keeps its own context. Its KV cache follows the accepted text:
``accept`` only records the tokens; the next ``propose`` rolls the draft cache
back to the longest common prefix of (what it holds) and (the true text), then
decodes the missing true tokens in one batch (usually the bonus token, plus the
last accepted draft token, which a proposal never decodes). A draft model the
policy stops calling therefore costs nothing per pass; the next call catches up
in one batch.

Drafts are greedy (argmax of the draft's logits: q is one-hot, ``draft_probs``
is None), or, when the generation samples (``sampling`` set) and
``sample_draft`` is True, sampled from the draft's own distribution q (the
target's sampling parameters applied to the draft's logits with
``sampling.target_distribution``), with the uniform
``position_uniform(seed, position, stream=DRAFT_STREAM)``; each token's q is
kept as ``(ids, probs)`` in ``Proposal.draft_probs`` for modified rejection
sampling (``sampling.verify_token``).

Exactness and seeds (docs/draft-model.md): greedy output is the target's plain
greedy decoding whatever the draft proposes; sampled, the output distribution is
exactly the target's (modified rejection sampling with the real q). For that,
whether and how much of a sampled draft is verified must not depend on the
sampled tokens: sampled proposals always have exactly k tokens, and the sources
the policy decides on depend on positions only.

Source buckets are draft positions (``min(i, n_buckets - 1)``):
the policy multiplies per-token acceptances, so one bucket per position lets it
learn how fast the draft model's agreement decays along a draft.

Cost: ``seconds_per_token`` is a moving average of the seconds one proposal
spent per drafted token (including the usual one-batch catch-up);
``expected_seconds(k)`` prices a proposal of k tokens now, including any
catch-up still pending; ``size_ratio`` (draft parameters / target parameters)
is a prior for a draft token's cost relative to a target token before anything
is measured.
"""
from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ngramspec import _llama
from ngramspec.arg_checks import checked_int
from ngramspec.proposers.base import EMPTY_TOKENS, CostlyProposer, Proposal
from ngramspec.proposers.draft_model_loading import check_compatible, is_llama, load_draft_model, memory_report
from ngramspec.sampling import SamplingParams, position_uniform, sample, target_distribution

if TYPE_CHECKING:
    from llama_cpp import Llama

__all__ = ["DEFAULT_DRAFT_PRIOR", "DRAFT_STREAM", "N_DRAFT_BUCKETS", "DraftModelProposer", "as_draft_proposer"]

# The stream of position_uniform the draft model samples with. The target's
# verification uses stream 0 (plain draws, residual and bonus tokens) and stream 1
# (acceptance tests), so the draft's randomness is independent of both.
DRAFT_STREAM = 2
N_DRAFT_BUCKETS = 8
DEFAULT_DRAFT_PRIOR = 0.7
_EMA = 0.2
# Catch-ups longer than this (after the policy skipped the draft model for a while,
# or a long prompt prefilled lazily) are timed apart from the per-token average.
_SHORT_CATCHUP = 2


class DraftModelProposer(CostlyProposer):
    """Drafts with a second ``llama_cpp.Llama`` (see the module docstring).

    draft_llm: the draft model; its context and cache are used (keep it for this
        proposer while a generation runs). Its ``n_tokens``/``input_ids`` stay
        coherent with its cache, so it remains usable afterwards.
    target_llm: the model that verifies (only read, for compatibility checks).
    sampling: the generation's ``SamplingParams`` (None: greedy). Set it before
        each ``begin`` (``proposer.sampling = params``) when generations differ.
    sample_draft: when the generation samples, draw drafts from q (True) or take
        the draft's argmax (False: one-hot q, so verification keeps the
        same-seed-same-tokens property of model-free drafts).
    draft_temperature: sample drafts at this temperature instead of the
        generation's (q then differs from the target's p even for a draft model
        as good as the target; the output distribution is the target's either way).
    n_buckets: source buckets, one per draft position (the last one also covers
        every later position).
    prior: prior acceptance of every bucket.
    lazy_prefill: evaluate the prompt at the first ``propose`` rather than in
        ``begin`` (a draft model the policy never calls then costs nothing).
    """

    name: ClassVar[str] = "draft_model"

    def __init__(self, draft_llm: Llama, target_llm: Llama, *, sampling: SamplingParams | None = None,
                 sample_draft: bool = True, draft_temperature: float | None = None,
                 n_buckets: int = N_DRAFT_BUCKETS, prior: float = DEFAULT_DRAFT_PRIOR,
                 lazy_prefill: bool = False, check_tokenizer: bool = True) -> None:
        check_compatible(draft_llm, target_llm, check_tokenizer=check_tokenizer)
        checked_int(n_buckets, "n_buckets", minimum=1)
        if not 0.0 < float(prior) < 1.0:
            raise ValueError(f"prior must be in (0, 1), got {prior!r}")
        self.draft = draft_llm
        self.target = target_llm
        self.sampling = sampling
        self.sample_draft = bool(sample_draft)
        if draft_temperature is not None and not float(draft_temperature) > 0:
            raise ValueError(f"draft_temperature must be > 0, got {draft_temperature!r}")
        self.draft_temperature = None if draft_temperature is None else float(draft_temperature)
        self.lazy_prefill = bool(lazy_prefill)
        self.n_buckets = int(n_buckets)
        self.source_priors: Sequence[float] = (float(prior),) * self.n_buckets
        llama_cpp = _llama.llama_cpp_module()
        self.size_ratio = (llama_cpp.llama_model_n_params(_llama.model_handle(draft_llm))
                           / max(1, llama_cpp.llama_model_n_params(_llama.model_handle(target_llm))))
        self._vocab = _llama.vocab_handle(draft_llm)
        self._is_eog: dict[int, bool] = {}
        self._batch = _llama.Batch(max(1, min(draft_llm.n_batch, draft_llm.context_params.n_ubatch)))
        self._text: list[int] | None = None
        self._n_prompt = 0
        self._kv: list[int] = []  # the tokens in the draft cache, positions 0..
        self._agree = 0      # leading tokens on which the draft cache equals the text
        self._fresh = -1     # len(_kv) when the context's last logits row was computed (by us)
        # Measured costs (seconds).
        self.seconds_per_token: float | None = None   # per drafted token, per proposal (EMA)
        self.decode_seconds: float | None = None      # one single-token draft decode (EMA)
        self.batch_token_seconds: float | None = None  # per token of a long catch-up batch (EMA)
        self.last_seconds = 0.0
        self.prefill_seconds = 0.0
        self.catchup_seconds = 0.0
        self.proposals = 0
        self.drafted_tokens = 0
        self.draft_seconds = 0.0

    def set_sampling(self, sampling: SamplingParams | None) -> None:
        """The next generation's sampling parameters (None: greedy). The engine
        calls it before ``begin``."""
        if sampling is not None and not isinstance(sampling, SamplingParams):
            raise TypeError("sampling must be a SamplingParams or None")
        self.sampling = sampling

    # -- bookkeeping --------------------------------------------------------
    @property
    def text(self) -> list[int]:
        """The true text (prompt and accepted tokens) as this proposer knows it."""
        return list(self._text or [])

    def _require_begun(self) -> list[int]:
        if self._text is None:
            raise RuntimeError("DraftModelProposer: call begin(prompt) before propose/accept")
        return self._text

    def _eog(self, tok: int) -> bool:
        v = self._is_eog.get(tok)
        if v is None:
            v = self._is_eog[tok] = bool(_llama.llama_cpp_module().llama_vocab_is_eog(self._vocab, tok))
        return v

    def pending_tokens(self) -> int:
        """Tokens of the text the draft model has not evaluated yet (the next call's catch-up)."""
        return len(self._text or ()) - self._agree

    def _roll_back(self, pos: int, always: bool = False) -> None:
        llm = self.draft
        if always or len(self._kv) > pos or llm.n_tokens > pos:
            if not _llama.remove_from(llm, pos):
                raise RuntimeError("llama.cpp refused to roll back the draft model's cache")
            del self._kv[pos:]
            _llama.set_cached_tokens(llm, len(self._kv))
            if self._fresh > pos:
                self._fresh = -1

    def _decode(self, tokens: Sequence[int]) -> None:
        """Decode ``tokens`` after the cache (n_batch chunks, logits on the last row),
        keeping the Llama's n_tokens/input_ids true to the cache, as Llama.eval does
        (input_ids is sized by the n_ctx asked for: positions past it are not recorded)."""
        llm, batch, kv = self.draft, self._batch, self._kv
        cap = batch.capacity
        for i in range(0, len(tokens), cap):
            chunk = tokens[i: i + cap]
            start = len(kv)
            batch.fill(chunk, start, all_logits=False)
            _llama.decode(llm, batch)
            kv.extend(chunk)
            end = min(len(kv), len(llm.input_ids))
            if end > start:
                llm.input_ids[start:end] = chunk[: end - start]
            llm.n_tokens = len(kv)
        _llama.set_cached_tokens(llm, len(kv))
        self._fresh = len(kv)

    def _sync(self, need_logits: bool) -> np.ndarray | None:
        """Make the draft cache hold exactly the text; with need_logits, return the
        draft's logits for the position after it (re-decoding the last text token
        when no fresh row is at hand, as Llama.generate does)."""
        text = self._text
        assert text is not None
        common = self._agree
        if need_logits and common == len(text) and self._fresh != len(text):
            common -= 1
        self._roll_back(common)
        missing = text[common:]
        if missing:
            t0 = time.perf_counter()
            self._decode(missing)
            dt = time.perf_counter() - t0
            if len(missing) > _SHORT_CATCHUP:
                self.catchup_seconds += dt
                per = dt / len(missing)
                self.batch_token_seconds = per if self.batch_token_seconds is None else \
                    (1 - _EMA) * self.batch_token_seconds + _EMA * per
        self._agree = len(text)
        return _llama.last_logits(self.draft) if need_logits else None

    def _match_cache_to_text(self) -> None:
        """Trust the draft Llama's bookkeeping for what its cache holds (someone else
        may have used it), keep the prefix that agrees with the text, drop the rest."""
        text = self._text
        assert text is not None
        self._agree = _llama.cached_prefix(self.draft, text)
        self._kv = text[: self._agree]
        # Llama.reset() only zeroes n_tokens: drop whatever the cache still holds after the prefix.
        self._roll_back(self._agree, always=True)
        self._fresh = -1

    def _used_elsewhere(self) -> bool:
        """Whether the draft Llama's cache changed since this proposer last decoded
        (a plain call on it, or another engine drafting with it, during a paused
        stream): its bookkeeping no longer says the cache is ``_kv``."""
        return not _llama.records(self.draft, self._kv, len(self._kv))

    def _check_open(self) -> None:
        try:
            _llama.context_of(self.draft)
        except ValueError:   # "this Llama has been closed" would not say which Llama
            raise ValueError("the draft model's Llama has been closed; create a new one (and a new engine "
                             "or wrapper with it)") from None

    # -- the Proposer protocol ------------------------------------------------
    def begin(self, prompt: Sequence[int]) -> None:
        """Start a generation after ``prompt`` (token ids). Reuses the draft
        context's cached prefix, like Llama.generate; evaluates the rest now
        unless ``lazy_prefill``."""
        self._check_open()
        n_vocab = self.draft.n_vocab()
        text = [int(t) for t in prompt]
        if not text:
            raise ValueError("prompt is empty: give at least one token")
        bad = [t for t in text if not 0 <= t < n_vocab]
        if bad:
            raise ValueError(f"prompt token ids must be in [0, {n_vocab}), got {bad[0]}")
        if len(text) >= self.draft.n_ctx():
            raise ValueError(f"the prompt ({len(text)} tokens) does not fit the draft model's context "
                             f"({self.draft.n_ctx()})")
        self._text, self._n_prompt = text, len(text)
        self._match_cache_to_text()
        if not self.lazy_prefill:
            t0 = time.perf_counter()
            self._sync(need_logits=False)
            self.prefill_seconds += time.perf_counter() - t0

    def accept(self, tokens: Sequence[int]) -> None:
        """The text grew by ``tokens``. Only recorded; the draft cache catches up
        (rolled back to the common prefix, the missing tokens decoded in one batch)
        at the next ``propose``."""
        text = self._require_begun()
        old = len(text)
        text.extend(int(t) for t in tokens)
        if self._agree == old:
            kv, i = self._kv, old
            n = min(len(kv), len(text))
            while i < n and kv[i] == text[i]:
                i += 1
            self._agree = i

    def propose(self, k: int) -> Proposal:
        """Up to ``k`` draft tokens after the text: one draft decode per token
        (the last token is never decoded). Greedy drafts stop after an
        end-of-generation token; sampled drafts always have k tokens, so that
        their length never depends on the sampled values."""
        checked_int(k, "k", minimum=0)
        text = self._require_begun()
        llm = self.draft
        self._check_open()
        k = min(int(k), llm.n_ctx() - len(text))
        if k <= 0:
            return Proposal(EMPTY_TOKENS, [], self.name)
        if self._used_elsewhere():
            # Decoding after a cache that is not what _kv says failed in llama_decode (another
            # engine had moved it on) or drafted from another text; match it again, as begin does.
            self._match_cache_to_text()
        t0 = time.perf_counter()
        long_catchup = self.pending_tokens() > _SHORT_CATCHUP
        logits = self._sync(need_logits=True)
        assert logits is not None  # need_logits=True always returns the row
        t1 = time.perf_counter()
        params = self.sampling if self.sample_draft else None
        if params is not None and self.draft_temperature is not None:
            params = dataclasses.replace(params, temperature=self.draft_temperature)
        tokens: list[int] = []
        q: list[tuple[np.ndarray, np.ndarray]] | None = None
        penalties, history = False, []
        if params is not None:
            q = []
            # Penalties see the generated tokens only, as the target's do.
            penalties = params.penalizes
            if penalties:
                history = text[self._n_prompt:]
        pos = len(text)
        for i in range(k):
            if q is not None and params is not None:  # q is a list exactly when params is set
                ids, probs = target_distribution(logits, params, history)
                tok = sample(ids, probs, position_uniform(params.seed, pos + i, stream=DRAFT_STREAM))
                q.append((ids, probs))
                if penalties:
                    history.append(tok)
            else:
                tok = int(np.argmax(logits))
            tokens.append(tok)
            if i == k - 1 or (q is None and self._eog(tok)):
                break
            self._decode([tok])
            logits = _llama.last_logits(llm)
        t2 = time.perf_counter()
        n = len(tokens)
        if n > 1:
            per = (t2 - t1) / (n - 1)
            self.decode_seconds = per if self.decode_seconds is None else (1 - _EMA) * self.decode_seconds + _EMA * per
        seconds = (t2 - t1) if long_catchup else (t2 - t0)
        self.last_seconds = t2 - t0
        self.seconds_per_token = seconds / n if self.seconds_per_token is None else \
            (1 - _EMA) * self.seconds_per_token + _EMA * seconds / n
        self.proposals += 1
        self.drafted_tokens += n
        self.draft_seconds += t2 - t0
        last = self.n_buckets - 1
        sources = [i if i < last else last for i in range(n)]
        return Proposal(np.asarray(tokens, dtype=np.int32), sources, self.name, len(text), q)

    def end(self, output: Sequence[int]) -> None:
        """Nothing to release: the draft Llama's bookkeeping already matches its cache."""
        self._fresh = -1

    # -- pricing ----------------------------------------------------------------
    def planned_sources(self, k: int) -> list[int]:
        """The sources a proposal of ``k`` tokens will carry, known before it is made
        (they depend on positions only), so it can be priced before it is paid for."""
        last = self.n_buckets - 1
        return [i if i < last else last for i in range(max(0, k))]

    def expected_seconds(self, k: int) -> float | None:
        """Estimated seconds to propose ``k`` tokens now (catch-up included); None
        before anything was measured (use ``size_ratio`` x a target token then)."""
        if k <= 0:
            return 0.0
        one = self.decode_seconds if self.decode_seconds is not None else self.seconds_per_token
        if one is None:
            return None
        pending = max(1, self.pending_tokens())
        if pending <= _SHORT_CATCHUP or self.batch_token_seconds is None:
            catchup = one if pending <= _SHORT_CATCHUP else pending * one
        else:
            catchup = max(one, pending * self.batch_token_seconds)
        return catchup + (k - 1) * one

    def memory(self) -> dict[str, int]:
        """``memory_report(draft, target)``."""
        return memory_report(self.draft, self.target)


def as_draft_proposer(draft_model: Any, target_llm: Llama, **options: Any) -> DraftModelProposer:
    """``SpeculativeEngine(draft_model=...)``'s argument as a proposer: a
    ``DraftModelProposer`` (built for this target), a ``llama_cpp.Llama``, or a
    GGUF path / model name (loaded with ``load_draft_model``). The prompt is
    evaluated lazily (``lazy_prefill``), at the draft model's first call: the
    engine's gate prices that catch-up, so a draft model it never calls costs
    nothing (eager prefill doubled the time to the first token even then:
    docs/performance.md, "Draft model")."""
    options.setdefault("lazy_prefill", True)
    if isinstance(draft_model, DraftModelProposer):
        if set(options) - {"lazy_prefill"}:
            raise TypeError("options apply when the draft model is a Llama or a path, not a DraftModelProposer")
        if draft_model.target is not target_llm:
            raise ValueError("this DraftModelProposer was built for another target Llama")
        return draft_model
    if isinstance(draft_model, (str, os.PathLike)):
        draft_model = load_draft_model(draft_model, target_llm)
    elif not is_llama(draft_model):
        raise TypeError("draft_model must be a llama_cpp.Llama, a GGUF path, a model name or a DraftModelProposer, "
                        f"got {type(draft_model).__name__}")
    return DraftModelProposer(draft_model, target_llm, **options)
