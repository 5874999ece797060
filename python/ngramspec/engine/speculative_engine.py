"""Exact speculative decoding on a user's ``llama_cpp.Llama``.

The engine holds what outlives one generation (proposers, verify plans, policy,
the lock); each generation is a ``GenerationStream`` (``generation.py``), which
drafts, verifies in one batch and keeps the longest prefix the model agrees with.

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

import itertools
import threading
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ngramspec import _llama
from ngramspec.calibration.audit import AuditResult, AuditRule, describe_mismatch, features_note
from ngramspec.calibration.certify import REUSE_KEEPS, Certification
from ngramspec.calibration.invariance import InvarianceReport
from ngramspec.calibration.progress import style_of
from ngramspec.calibration.verify_plan import VerifyPlan, build_plan, no_exact_size_warning, stepwise_plan
from ngramspec.drafting.cost_gate import CostlyGate
from ngramspec.drafting.policy import CostAwarePolicy, EagerPolicy
from ngramspec.drafting.policy_protocol import Policy
from ngramspec.engine.cost_report import curve_origin
from ngramspec.engine.generation import Generation, GenerationStream
from ngramspec.engine.run_host import RunHost
from ngramspec.engine.stats import GenerationStats
from ngramspec.memory.store import Memory
from ngramspec.options import DEFAULT_MAX_DRAFT, EngineOptions
from ngramspec.proposers.base import Proposer
from ngramspec.proposers.copy import CopyProposer
from ngramspec.proposers.ngram import NGramProposer
from ngramspec.proposers.prediction import PredictionProposer
from ngramspec.sampling import SamplingParams

if TYPE_CHECKING:
    from llama_cpp import Llama

    from ngramspec.proposers.draft_model import DraftModelProposer

__all__ = ["DEFAULT_MAX_DRAFT", "SpeculativeEngine"]



class SpeculativeEngine:
    """Speculative decoding that returns exactly what plain decoding returns
    (greedy: the same tokens; sampled: the same distribution), in fewer forward passes.

    llm: the ``llama_cpp.Llama`` to drive (its context and cache are used).
    options: an ``EngineOptions`` (``ngramspec.options`` says what each option does);
        keywords change single options on top of it: ``SpeculativeEngine(llm,
        max_draft=16, exact=False)``. ``exact`` is the default verify mode, which each
        call may override. A Memory passed to several engines is shared by them; its
        tokenizer must be ``llm``'s (``TokenizerMismatchError``). A draft model is
        priced per pass and called only when it pays (its ``CostlyGate``; see
        docs/draft-model.md). A ``CostAwarePolicy`` given as ``adaptive`` keeps its
        own cost model (it is not calibrated).

    The verify plan (allowed sizes and cost curve) is built on first use per
    exactness. In exact mode it starts with the sizes certified so far and each
    generation first spends a few seconds certifying more, smallest sizes first,
    until all are (``certify()``, ``calibration/certify.py``); ``prepare()`` (or the
    ``warmup`` option) does the whole check and the cost curve up front. Measuring
    clears the Llama's KV cache (``verify_plan.build_plan``).
    """

    def __init__(self, llm: Llama, options: EngineOptions | None = None, **changes: Any) -> None:
        _llama.context_of(llm)
        opts = (options if options is not None else EngineOptions()).replace(**changes)
        self.options = opts
        max_draft, exact, invariance, adaptive = opts.max_draft, opts.exact, opts.invariance, opts.adaptive
        memory, draft_model = opts.memory, opts.draft_model
        if invariance is not None and not isinstance(invariance, InvarianceReport):
            raise TypeError("invariance must be an InvarianceReport from check_batch_invariance")
        self.llm = llm
        self.exact = exact
        self.trace = opts.trace
        self.invariance_cache = opts.invariance_cache
        self.batch_limit = _llama.batch_limit(llm)
        self.max_draft = int(min(max_draft, self.batch_limit - 1))
        self.invariance = invariance
        self._given_report = invariance is not None
        # How a check that keeps a caller waiting shows itself (calibration/progress.py).
        self.progress = style_of(opts.progress)
        # Exact mode's invariance check while sizes are left to certify (certify.py).
        self._certification: Certification | None = None
        self.proposers: list[Proposer] = []
        if opts.ngram:
            self.proposers.append(NGramProposer(min_order=opts.min_order, max_order=opts.max_order,
                                                window=opts.window))
        if opts.copy:
            self.proposers.append(CopyProposer())
        if memory is False:   # spelled out: no memory (the default, None, is the same)
            memory = None
        if memory is not None and not isinstance(memory, Memory):
            raise TypeError(f"memory must be an ngramspec.Memory, None or False, got {type(memory).__name__} "
                            "(load a file with ngramspec.Memory.load(path))")
        self.memory = memory
        if memory is not None:  # binds it to llm's tokenizer: TokenizerMismatchError here
            self.proposers.append(memory.proposer_for(llm))
        # The gate that prices each costly proposer before it is called, kept here so
        # that its probe interval runs across generations (callers read its counters).
        self.gates: dict[Proposer, CostlyGate] = {}
        # The draft model's proposer (None without one): callers read its figures.
        self.draft_proposer: DraftModelProposer | None = None
        if draft_model is not None:  # a second Llama drafting (docs/draft-model.md)
            from ngramspec.proposers.draft_model import as_draft_proposer

            self.draft_proposer = as_draft_proposer(draft_model, llm)
            self.gates[self.draft_proposer] = CostlyGate()
            self.proposers.append(self.draft_proposer)
        self._adaptive = adaptive
        self._plans: dict[bool, tuple[VerifyPlan, Policy]] = {}
        self._rollback_ok = _llama.can_roll_back(llm)
        if not self._rollback_ok:
            warnings.warn("this model's cache cannot be rolled back (recurrent or hybrid); "
                          "ngramspec decodes it plainly", RuntimeWarning, stacklevel=2)
        # What each generation's run uses (engine/run_host.py says what each is).
        self.verify_batch = _llama.Batch(self.max_draft + 1)
        self.token_bytes: dict[int, bytes] = {}
        self.audit_rule = AuditRule()    # exact mode's online audit (audit.py), per engine
        self.lock = threading.RLock()
        self._is_eog: dict[int, bool] = {}
        self._generations = itertools.count(1)
        self._current = 0   # the generation that owns the Llama's state
        if opts.warmup:     # the whole check and the cost curve now, not in the first generations
            self.prepare()

    # -- the policy of the default exactness --------------------------------
    @property
    def policy(self) -> Any:
        """The policy of the default exactness (None without adaptivity)."""
        policy = self.plan_and_policy(self.exact)[1]
        return policy if isinstance(policy, CostAwarePolicy) else None

    # -- verify plans -----------------------------------------------------
    def plan(self, exact: bool | None = None) -> VerifyPlan:
        """The verify plan for ``exact`` (None: the engine's default), built on first use."""
        return self.plan_and_policy(self.exact if exact is None else exact)[0]

    def prepare(self, exact: bool | None = None) -> VerifyPlan:
        """Builds the verify plan now, with everything it measures (exact mode: the
        whole invariance check, the sizes a stepwise check left; both modes: the cost
        curve), rather than a slice at a time in the first generations, with a
        progress line (``progress``)."""
        exact = self.exact if exact is None else exact
        if exact in self._plans and not self._prepare_left(exact):
            return self._plans[exact][0]
        with self.lock:   # again under the lock: another thread may have built it meanwhile
            if exact in self._plans and not self._prepare_left(exact):
                return self._plans[exact][0]
            return self._build(exact, stepwise=False)[0]

    def _prepare_left(self, exact: bool) -> bool:
        """Whether ``prepare`` has work left on the built plan of ``exact``: sizes to
        certify, or (once a stepwise check has ended, which on a fast machine is the
        first generation's slice) the cost curve the check's own timings stand in for."""
        if not exact or self._given_report or self.invariance is None:
            return False
        if self._certification is not None:
            return True
        # Only the cached path measures a curve (build_plan without the cache
        # would run the whole check again and attach none).
        return bool(self.invariance_cache) and self.invariance.cost_curve is None

    def plan_and_policy(self, exact: bool, prompt: Sequence[int] | None = None) -> tuple[VerifyPlan, Policy]:
        """The verify plan and the policy of this verify mode, built on first use
        (``verify_plan`` says what building one may do to the Llama). In exact mode,
        while sizes are left to certify, a generation's call (``prompt``: its prompt
        tokens) first runs a slice of the check (``certify``), unless the prompt
        would reuse more than ``certify.REUSE_KEEPS`` cached tokens."""
        cached = self._plans.get(exact)
        if cached is not None and (prompt is None or not exact or self._certification is None):
            return cached
        with self.lock:
            if exact not in self._plans:
                self._build(exact, stepwise=True)
            if exact and prompt is not None and self._certification is not None \
                    and _llama.cached_prefix(self.llm, prompt) <= REUSE_KEEPS:
                self.certify()
            return self._plans[exact]

    def certify(self, budget_s: float | None = None) -> list[int]:
        """Runs a slice of exact mode's invariance check now, as a generation does
        before its prefill while sizes are left (about ``certify.SLICE_BUDGET_S``
        seconds, smallest sizes first; ``budget_s`` to change it), and lets the exact
        plan use the sizes it certified; returns them. Clears the Llama's KV cache.
        Returns [] when nothing is left (every size decided, or a given report)."""
        with self.lock:
            if True not in self._plans:
                self._build(True, stepwise=True)
            certification = self._certification
            if certification is None:
                return []
            new = certification.run_slice(budget_s, style=self.progress)
            if certification.complete:
                self._certification = None
            if new or certification.complete:
                self._widen(certification)
            return new

    def _build(self, exact: bool, *, stepwise: bool) -> tuple[VerifyPlan, Policy]:
        """Builds (or, from ``prepare``, rebuilds) the plan and policy of ``exact``."""
        certification = None
        if exact and stepwise and not self._given_report:
            plan, report, certification = stepwise_plan(self.llm, max_batch=self.max_draft + 1,
                                                        can_roll_back=self._rollback_ok,
                                                        use_cache=self.invariance_cache)
        else:
            plan, report = build_plan(self.llm, exact=exact, max_batch=self.max_draft + 1,
                                      can_roll_back=self._rollback_ok,
                                      invariance=self.invariance if exact and self._given_report else None,
                                      use_cache=self.invariance_cache, progress=self.progress)
        if exact:
            self.invariance = report
            self._certification = certification
            if report is not None:
                self.audit_rule.certified_depth = report.certified_depth
        adaptive = self._adaptive
        policy: Policy
        if isinstance(adaptive, CostAwarePolicy):
            policy = adaptive      # the user's policy keeps its own cost model
        elif adaptive:
            policy = CostAwarePolicy(self.max_draft + 1)
            self._calibrate(policy, plan, report, exact)
        else:
            policy = EagerPolicy()
        self._plans[exact] = (plan, policy)
        return plan, policy

    def _calibrate(self, policy: CostAwarePolicy, plan: VerifyPlan, report: InvarianceReport | None,
                   exact: bool) -> None:
        costs = {b: c for b, c in plan.relative_costs.items() if b <= self.max_draft + 1}
        if costs:
            # Both modes follow the measured shape (the patched exact build's curve bends too:
            # CostModel.calibrate); exact mode's is kept non-decreasing.
            policy.calibrate(costs, shape=True, monotone=exact, origin=curve_origin(plan, report))

    def _widen(self, certification: Certification) -> None:
        """The stepwise check certified more sizes (or ended): the exact plan allows
        them (its ``allowed`` array is changed in place, so every later generation
        sees them), and the engine's policy is priced again with the check's timings."""
        plan, policy = self._plans[True]
        report = certification.report
        allowed = plan.allowed
        for b in range(2, len(allowed)):
            allowed[b] = report.allows(b)
        origin = plan.origin if self._certification is not None else "invariance check (cached per model and build)"
        plan = VerifyPlan(allowed, report.relative_costs(), True, origin)
        if isinstance(policy, CostAwarePolicy) and policy is not self._adaptive:
            self._calibrate(policy, plan, report, True)
        self._plans[True] = (plan, policy)
        self.audit_rule.certified_depth = report.certified_depth
        if self._certification is None and not allowed[2:].any():
            warnings.warn(no_exact_size_warning(self.llm, report), RuntimeWarning, stacklevel=4)

    # -- generation ------------------------------------------------------
    def generate(self, prompt: str | Sequence[int], max_tokens: int | None = 16,
                 stop: str | Sequence[str] | None = None, stopping_criteria: Any = None,
                 sampling: SamplingParams | None = None, *, exact: bool | None = None,
                 prediction: Any = None, grammar: Any = None, logit_bias: Any = None, penalties: Any = None,
                 min_tokens: int = 0, logprobs: int | None = None, row_processors: Sequence[Any] = ()) -> Generation:
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
        grammar: a ``llama_cpp.LlamaGrammar`` the output must follow: each verified
            row's target is chosen among the tokens it allows, as plain
            llama-cpp-python's sampler chain chooses (``row_rules.py``).
        logit_bias, penalties: a greedy request's ``{id: bias}`` and (last_n,
            repeat, frequency, presence), applied to each row as plain applies them
            (a sampled request carries its own in ``sampling``).
        min_tokens: the end-of-text token is banned from the first ``min_tokens``
            generated tokens (llama-cpp-python's ``MinTokensLogitsProcessor``).
        logprobs: record each emitted token's logprob and the ``logprobs`` best
            ones, as plain llama-cpp-python computes them (``run.logprobs``).
        row_processors: logits processors ``(input_ids, scores) -> scores`` applied
            to each verified row before the rest, in plain's order with plain's
            input_ids; each must answer a second call for earlier input_ids as it
            did the first time (``row_rules.py``; ``integrations/row_processors.py``
            makes llama-cpp-python's and outlines' processors so).
        """
        run = self.stream(prompt, max_tokens=max_tokens, stop=stop, stopping_criteria=stopping_criteria,
                          sampling=sampling, exact=exact, prediction=prediction, grammar=grammar,
                          logit_bias=logit_bias, penalties=penalties, min_tokens=min_tokens, logprobs=logprobs,
                          row_processors=row_processors)
        return run.run_to_end()

    def stream(self, prompt: str | Sequence[int], max_tokens: int | None = 16,
               stop: str | Sequence[str] | None = None, stopping_criteria: Any = None,
               sampling: SamplingParams | None = None, *, exact: bool | None = None,
               prediction: Any = None, grammar: Any = None, logit_bias: Any = None, penalties: Any = None,
               min_tokens: int = 0, logprobs: int | None = None,
               row_processors: Sequence[Any] = ()) -> GenerationStream:
        """Like ``generate``, but yields lists of newly emitted token ids as they are
        accepted; after exhaustion ``.result`` holds the ``Generation``. Another
        generation on this engine, or a plain call on the Llama, ends the stream:
        resuming it then raises RuntimeError."""
        return GenerationStream(self, prompt, max_tokens=max_tokens, stop=stop, stopping_criteria=stopping_criteria,
                                sampling=sampling, exact=exact, prediction=prediction, grammar=grammar,
                                logit_bias=logit_bias, penalties=penalties, min_tokens=min_tokens, logprobs=logprobs,
                                row_processors=row_processors)

    # -- what a generation's run uses (engine/run_host.py) -------------------
    @property
    def can_roll_back(self) -> bool:
        return self._rollback_ok

    def stop_rolling_back(self) -> None:
        self._rollback_ok = False

    def begin_generation(self) -> int:
        self._current = next(self._generations)
        return self._current

    def owns(self, generation: int) -> bool:
        return self._current == generation

    def proposers_for(self, prediction_tokens: list[int] | None) -> list[Proposer]:
        """This engine's proposers, and a ``PredictionProposer`` when a generation has a prediction."""
        if not prediction_tokens:
            return self.proposers
        return [*self.proposers, PredictionProposer(prediction_tokens)]

    def withdraw(self, size: int, start: int, result: AuditResult, rows_checked: int, plan: VerifyPlan,
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

    def is_end_of_generation(self, token: int) -> bool:
        known = self._is_eog.get(token)
        if known is None:
            known = self._is_eog[token] = _llama.is_eog(self.llm, token)
        return known



if TYPE_CHECKING:  # mypy checks here that the engine is what a generation's run needs
    def _as_run_host(engine: SpeculativeEngine) -> RunHost:
        return engine
