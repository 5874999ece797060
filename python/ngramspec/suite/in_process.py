"""The methods that run in this process's llama-cpp-python: one timed run of
plain, prompt lookup or an ngramspec engine on one prompt, with the draft
model's figures for the draft-model methods."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ngramspec.integrations.row_processors import row_processors_of
from ngramspec.suite.methods import PREDICTION_METHODS
from ngramspec.suite.outlines_schema import OutlinesProcessors
from ngramspec.suite.run_record import FirstTokenClock, Run
from ngramspec.suite.workload import Item

if TYPE_CHECKING:
    from llama_cpp import Llama


class InProcessMethods:
    """The methods that run in this process's llama-cpp-python: plain, prompt lookup
    and the ngramspec engines, all on one Llama (the draft-model methods on a
    second). ``Suite`` holds one; a worker in another Python holds another
    (other_build.py)."""

    def __init__(self, llm: Llama, engines: dict[str, Any], lookup: Any = None, draft_llm: Llama | None = None) -> None:
        self.llm, self.engines, self.lookup, self.draft_llm = llm, engines, lookup, draft_llm
        self.outlines = OutlinesProcessors(llm)

    def run_once(self, method: str, workload: str, item: Item, round_: int) -> Run:
        clock = FirstTokenClock()
        stop = item.stop or None
        if item.json_schema is not None:
            self.outlines.prepare(item.json_schema)   # the index, once, before any clock starts
        t0 = time.perf_counter()
        try:
            if method in PREDICTION_METHODS:
                return self._run_predicted(method, workload, item, round_, clock, t0)
            if method in self.engines:
                self.llm.reset()
                engine = self.engines[method]
                drafter = engine.draft_proposer
                if drafter is not None:
                    if self.draft_llm is not None:
                        self.draft_llm.reset()   # no draft prompt cached from another method's run
                    before = _draft_counters(drafter, engine)
                    t0 = time.perf_counter()
                gen = engine.generate(item.prompt, max_tokens=item.max_tokens, stop=stop, stopping_criteria=clock,
                                      grammar=_grammar(item),
                                      row_processors=row_processors_of(self._processor(item)) or ())
                t1 = time.perf_counter()
                stats = gen.stats.to_dict()
                if drafter is not None:
                    stats["draft_model"] = _draft_stats(drafter, before, engine)
                return Run(method, workload, item.label, round_, (clock.first or t1) - t0, t1 - (clock.first or t1),
                           len(gen.tokens), gen.text, output_ids=list(gen.tokens), stats=stats)
            llm = self.llm if method == "plain" else self.lookup
            assert llm is not None, f"{method} has no Llama"
            if item.json_schema is not None and llm is not self.llm:
                # Prompt lookup's draft path hands processors input_ids with its unverified
                # draft tokens: outlines' guide would advance through them (errors swallowed).
                return Run(method, workload, item.label, round_, 0.0, 0.0, 0, "",
                           error="not run with an outlines processor (its draft path feeds the processor "
                                 "unverified tokens)")
            llm.reset()
            # The clock is a callable, as a StoppingCriteriaList is (one call less per token).
            out: Any = llm.create_completion(item.prompt, max_tokens=item.max_tokens, temperature=0.0, stop=stop,
                                             stopping_criteria=clock,  # type: ignore[arg-type]
                                             grammar=_grammar(item), logits_processor=self._processor(item))
            t1 = time.perf_counter()
            return Run(method, workload, item.label, round_, (clock.first or t1) - t0, t1 - (clock.first or t1),
                       out["usage"]["completion_tokens"], out["choices"][0]["text"])
        except Exception as e:  # a peer failing on a prompt is a result, not the end of the benchmark
            if method in self.engines:
                raise
            return Run(method, workload, item.label, round_, 0.0, 0.0, 0, "", error=f"{type(e).__name__}: {e}")

    def _run_predicted(self, method: str, workload: str, item: Item, round_: int, clock: FirstTokenClock,
                       t0: float) -> Run:
        prediction = item.prediction if method == "ngramspec+prediction" else item.wrong_prediction
        if prediction is None:
            raise ValueError(f"{method} needs an item with a prediction; {item.label!r} has none")
        self.llm.reset()
        gen = self.engines[method].generate(item.prompt, max_tokens=item.max_tokens, stop=item.stop or None,
                                            stopping_criteria=clock, prediction=prediction)
        t1 = time.perf_counter()
        return Run(method, workload, item.label, round_, (clock.first or t1) - t0, t1 - (clock.first or t1),
                   len(gen.tokens), gen.text, output_ids=list(gen.tokens), stats=gen.stats.to_dict())


    def _processor(self, item: Item) -> Any:
        """The item's outlines processor (a fresh one per run), or None."""
        return None if item.json_schema is None else self.outlines.processor(item.json_schema)


def _grammar(item: Item) -> Any:
    """The item's grammar as llama-cpp-python takes it (a fresh one per run), or None."""
    if item.grammar is None:
        return None
    from llama_cpp.llama_grammar import LlamaGrammar

    return LlamaGrammar.from_string(item.grammar, verbose=False)


_DRAFT_COUNTERS = ("calls", "probes", "refusals")
_PROPOSER_COUNTERS = ("proposals", "drafted_tokens", "draft_seconds", "prefill_seconds", "catchup_seconds")


def _draft_counters(p: Any, engine: Any) -> dict[str, float]:
    gate = engine.gates[p]
    return {**{k: getattr(gate, k) for k in _DRAFT_COUNTERS}, **{k: getattr(p, k) for k in _PROPOSER_COUNTERS}}


def _draft_stats(p: Any, before: dict[str, float], engine: Any) -> dict[str, Any]:
    """One run's draft-model figures: the gate's decisions (passes it let the draft
    model run, probes among them, refusals), the draft's work and its measured
    prices next to a target token's."""
    now = _draft_counters(p, engine)
    out: dict[str, Any] = {k: now[k] - before[k] for k in now}
    policy = engine.policy
    out.update(seconds_per_token=p.seconds_per_token, decode_seconds=p.decode_seconds,
               size_ratio=p.size_ratio,
               target_single_seconds=policy.single_seconds if policy is not None else None)
    return out
