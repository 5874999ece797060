"""Runs every method on every workload: same model file, same llama.cpp build,
same thread count, methods interleaved and rotated round by round.

Timing: a run's prefill ends when its first generated token is known (the
first call of its stopping criteria, which llama-cpp-python and the engine both
make right after choosing a token); decode is the rest. Decode speed is
(generated tokens - 1) / decode time, because the first token comes with the
prefill.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ngramspec.suite import sources
from ngramspec.suite.other_build import OtherBuild
from ngramspec.suite.sources import Item, Workload

METHODS = ("plain", "prompt lookup", "ngramspec")
# Run only when asked for: ngramspec without its copy drafts (an ablation), and
# fast mode (exact=False: every batch size, up to 16 draft tokens; its output
# may drift from plain greedy at floating-point near-ties).
# The draft-model methods (issue 20): model-free sources plus a draft model, and the
# draft model alone (no n-gram or copy drafts). The draft model is
# ``draft_model_for(model)``: DRAFT_MODELS, or the environment's
# NGRAMSPEC_BENCH_DRAFT_MODEL (a name from ngramspec.models or a GGUF path).
DRAFT_METHODS = ("ngramspec+draft", "draft-only")
EXTRA_METHODS: tuple[str, ...] = ("ngramspec n-gram only", "ngramspec fast") + DRAFT_METHODS
DRAFT_MODELS = {"qwen2.5-coder-1.5b": "qwen2.5-coder-0.5b"}
DRAFT_MODEL_ENV = "NGRAMSPEC_BENCH_DRAFT_MODEL"
# llama-cpp-python's documented prompt-lookup setting (num_pred_tokens=10 in its
# README; max_ngram_size=2 is its default).
LOOKUP_PRED_TOKENS = 10
# Invariance and the verify-cost curve are measured up to this batch size: the
# engine's default cap (9) and room above it for the model-free limit.
MEASURED_MAX_BATCH = 17
# Predicted outputs (issue 17): ngramspec given each item's prediction (the
# unedited file), and given an unrelated file instead. They run only on items that
# carry a prediction (the predicted_edit workload); each has its own engine.
PREDICTION_METHODS = ("ngramspec+prediction", "ngramspec+wrong-prediction")
# `ngramspec serve` over loopback HTTP (issue 18): the in-process "ngramspec" method
# behind the package's server, run when Suite(serve=True) (``ngramspec bench --serve``).
SERVE_METHOD = "ngramspec serve"


class FirstTokenClock:
    """A stopping criterion that never stops: it notes when the first token was chosen."""

    def __init__(self) -> None:
        self.first: float | None = None

    def __call__(self, input_ids: Any, logits: Any) -> bool:
        if self.first is None:
            self.first = time.perf_counter()
        return False


@dataclass
class Run:
    method: str
    workload: str
    item: str
    round: int
    prefill_s: float
    decode_s: float
    tokens: int                      # generated tokens
    text: str
    error: str = ""
    output_ids: list[int] = field(default_factory=list)   # ngramspec only
    stats: dict[str, Any] = field(default_factory=dict)   # ngramspec only

    @property
    def decode_tokens(self) -> int:
        return max(0, self.tokens - 1)


def _model_path(model: str) -> str:
    """Kept for the bench/ scripts: ``ngramspec.models.resolve_model_path``."""
    from ngramspec.models import resolve_model_path

    return resolve_model_path(model)


def load(path: str, method: str, n_ctx: int, threads: int | None) -> Any:
    """The ``Llama`` that ``method`` runs on (prompt lookup gets its draft model)."""
    from ngramspec.models import load_llama

    kwargs: dict[str, Any] = {"n_ctx": n_ctx, "seed": 0, "n_threads": threads}
    if method == "prompt lookup":
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        kwargs["draft_model"] = LlamaPromptLookupDecoding(num_pred_tokens=LOOKUP_PRED_TOKENS)
    return load_llama(path, **kwargs)


# How each ngramspec method configures its SpeculativeEngine: the suite and the
# peak-RSS probe (rss.py) both build engines from this one table.
ENGINE_OPTIONS: dict[str, dict[str, Any]] = {
    "ngramspec": {},
    "ngramspec n-gram only": {"copy": False},
    "ngramspec fast": {"exact": False, "max_draft": MEASURED_MAX_BATCH - 1},
    # draft_model=True: the target's draft model (draft_model_for), loaded by the
    # engine with the target's n_ctx and threads unless make_engine is given a Llama.
    "ngramspec+draft": {"draft_model": True},
    # The draft model alone, always called, every allowed draft token verified, at
    # most 3 per pass: llama-server's draft-model defaults (draft n_max 3, p_min 0), so
    # its acceptance is the draft model's own, not the gate's choice.
    "draft-only": {"copy": False, "draft_model": True, "adaptive": False, "max_draft": 3},
}


def draft_model_for(model: str) -> str:
    """The draft model (a name or GGUF path) the draft-model methods use for ``model``
    (a name or GGUF path): $NGRAMSPEC_BENCH_DRAFT_MODEL, else DRAFT_MODELS."""
    import os

    from ngramspec.models import resolve_model_path

    env = os.environ.get(DRAFT_MODEL_ENV)
    if env:
        return env
    if model in DRAFT_MODELS:
        return DRAFT_MODELS[model]
    for target, draft in DRAFT_MODELS.items():
        try:
            if os.path.realpath(resolve_model_path(target)) == os.path.realpath(model):
                return draft
        except Exception:  # not fetched: cannot be this file
            continue
    raise ValueError(f"no draft model known for {model!r}: set {DRAFT_MODEL_ENV} to a draft model's name or GGUF "
                     f"path (known pairs: {DRAFT_MODELS})")


ENGINE_OPTIONS.update({m: {} for m in PREDICTION_METHODS})
EXTRA_METHODS += PREDICTION_METHODS


def make_engine(llm: Any, method: str, **extra: Any) -> Any:
    """The SpeculativeEngine for an ngramspec method, ``extra`` (e.g. invariance,
    or draft_model: a loaded draft Llama) added."""
    from ngramspec.engine.speculative_engine import SpeculativeEngine

    options = {**ENGINE_OPTIONS[method], **extra}
    if options.get("draft_model") is True:
        options["draft_model"] = draft_model_for(llm.model_path)
    engine = SpeculativeEngine(llm, **options)
    if method == "draft-only":  # the engine always has its n-gram proposer: keep only the draft model
        engine.proposers = [p for p in engine.proposers if getattr(p, "gate", None) is not None]
    return engine


def draft_proposer(engine: Any) -> Any:
    """The engine's draft-model proposer, or None."""
    return next((p for p in engine.proposers if getattr(p, "gate", None) is not None), None)


class InProcessMethods:
    """The methods that run in this process's llama-cpp-python: plain, prompt lookup
    and the ngramspec engines, all on one Llama (the draft-model methods on a
    second). ``Suite`` holds one; a worker in another Python holds another
    (other_build.py)."""

    def __init__(self, llm: Any, engines: dict[str, Any], lookup: Any = None, draft_llm: Any = None) -> None:
        self.llm, self.engines, self.lookup, self.draft_llm = llm, engines, lookup, draft_llm

    def run_once(self, method: str, workload: str, item: Item, round_: int) -> Run:
        clock = FirstTokenClock()
        stop = item.stop or None
        t0 = time.perf_counter()
        try:
            if method in PREDICTION_METHODS:
                return self._run_predicted(method, workload, item, round_, clock, t0)
            if method in self.engines:
                self.llm.reset()
                engine = self.engines[method]
                drafter = draft_proposer(engine)
                if drafter is not None:
                    self.draft_llm.reset()   # no draft prompt cached from another method's run
                    before = _draft_counters(drafter)
                    t0 = time.perf_counter()
                gen = engine.generate(item.prompt, max_tokens=item.max_tokens, stop=stop, stopping_criteria=clock)
                t1 = time.perf_counter()
                stats = gen.stats.to_dict()
                if drafter is not None:
                    stats["draft_model"] = _draft_stats(drafter, before, engine)
                return Run(method, workload, item.label, round_, (clock.first or t1) - t0, t1 - (clock.first or t1),
                           len(gen.tokens), gen.text, output_ids=list(gen.tokens), stats=stats)
            llm = self.llm if method == "plain" else self.lookup
            assert llm is not None, f"{method} has no Llama"
            llm.reset()
            out = llm.create_completion(item.prompt, max_tokens=item.max_tokens, temperature=0.0, stop=stop,
                                        stopping_criteria=clock)
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


def _run_server(server: Any, method: str, workload: str, item: Item, round_: int) -> Run:
    """One run of a method that is a server over HTTP (llama-server, ``ngramspec serve``)."""
    try:
        out = server.complete(item.prompt, item.max_tokens, item.stop)
    except Exception as e:  # a peer failing on a prompt is a result, not the end of the benchmark
        return Run(method, workload, item.label, round_, 0.0, 0.0, 0, "", error=f"{type(e).__name__}: {e}")
    t = out["timings"]
    stats = {"drafted_tokens": t.get("draft_n", 0), "accepted_tokens": t.get("draft_n_accepted", 0)}
    if "latency_s" in out:   # ngramspec serve: the client's end-to-end time, and the server's split
        stats.update(latency_s=out["latency_s"], prompt_ms=t["prompt_ms"], predicted_ms=t["predicted_ms"])
    return Run(method, workload, item.label, round_, t["prompt_ms"] / 1e3, t["predicted_ms"] / 1e3,
               int(t["predicted_n"]), out["content"], stats=stats)


class Suite:
    """The loaded models, the measured build facts and the workloads of one benchmark.

    model: a name from ngramspec.models or a GGUF path.
    quick: one short prompt per workload (the README demo and CI smoke runs).
    threads: llama.cpp threads for every method (None: llama-cpp-python's default).
    methods: a subset of METHODS, in order; "plain" is always run.
    server: path to a llama-server binary built by scripts/build_llama_server.py;
        adds one method per ``server_modes`` entry, "llama-server <mode>".
    serve: also run ``ngramspec serve`` (SERVE_METHOD) in a subprocess on the same
        model file, n_ctx and threads, driven over HTTP (ngramspec_server.py).
    other_python: a Python whose llama-cpp-python is another build (a stock venv's,
        or the exact build's): plain, ngramspec and ngramspec fast also run there,
        interleaved with the rest, named after that build ("stock plain",
        "exact-build ngramspec", ...; other_build.py).
    """

    def __init__(self, model: str, *, quick: bool, n_ctx: int = 4096, threads: int | None = None,
                 methods: tuple[str, ...] = METHODS, progress: bool = True, server: str | None = None,
                 server_modes: tuple[str, ...] = (), workloads: Sequence[str] | None = None,
                 trace: bool = False, cost: Any = None, serve: bool = False,
                 other_python: str | None = None) -> None:
        from ngramspec.calibration.cost_curve import measure_verify_cost
        from ngramspec.calibration.invariance import check_batch_invariance

        unknown = [m for m in methods if m not in METHODS + EXTRA_METHODS]
        if unknown:
            raise ValueError(f"unknown method(s) {unknown}; choose from {list(METHODS + EXTRA_METHODS)}")
        self.model, self.quick, self.n_ctx = model, quick, n_ctx
        self.methods = ("plain",) + tuple(m for m in methods if m != "plain")
        self.path = _model_path(model)
        self.llm = load(self.path, "plain", n_ctx, threads)
        self.threads = self.llm.context_params.n_threads
        # llama.cpp decodes batches (prefill, verification) on n_threads_batch: every
        # method, llama-server included, gets the same pair (models.load_llama).
        self.threads_batch = self.llm.context_params.n_threads_batch
        self.workloads: list[Workload] = sources.build(self.llm, quick, workloads)
        self.invariance = check_batch_invariance(self.llm, max_batch=MEASURED_MAX_BATCH, progress=progress)
        # cost: a CostCurve to use instead of measuring one (a machine too busy to time)
        self.cost = cost if cost is not None else measure_verify_cost(self.llm, MEASURED_MAX_BATCH,
                                                                      reps=3 if quick else 7, progress=progress)
        # The draft-model methods share one draft Llama (target's n_ctx and threads),
        # loaded only when one of them runs; reset before each of their runs.
        self.draft_llm: Any = None
        if any(m in DRAFT_METHODS for m in self.methods):
            from ngramspec.proposers.draft_model import load_draft_model

            self.draft_llm = load_draft_model(draft_model_for(model), self.llm)
        self.engines = {m: make_engine(self.llm, m, invariance=self.invariance,
                                       **({"draft_model": self.draft_llm} if m in DRAFT_METHODS else {}))
                        for m in ENGINE_OPTIONS if m not in DRAFT_METHODS or m in self.methods}
        self.lookup = load(self.path, "prompt lookup", n_ctx, threads) if "prompt lookup" in self.methods else None
        self.progress = progress
        if trace:   # every ngramspec pass recorded in stats.trace (SpeculativeEngine(trace=True))
            for e in self.engines.values():
                e.trace = True
        for m in self.methods:  # plan and cost curve now, not inside a timed run
            if m in self.engines:
                self.engines[m].prepare()
        self.servers: dict[str, Any] = {}
        try:
            if other_python:
                self.other = OtherBuild(other_python, self.path, n_ctx, threads, progress=progress)
            if serve:
                from ngramspec.suite.ngramspec_server import NgramspecServer

                self.servers[SERVE_METHOD] = NgramspecServer(self.path, n_ctx, self.threads, self.threads_batch)
            if server:
                from ngramspec.suite.llama_server import DEFAULT_MODES, LlamaServer

                for mode in server_modes or DEFAULT_MODES:
                    draft = _model_path(draft_model_for(model)) if mode == "draft" else None
                    self.servers[f"llama-server {mode}"] = LlamaServer(server, self.path, mode, n_ctx, self.threads,
                                                                       draft=draft, threads_batch=self.threads_batch)
        except BaseException:
            self.close()
            raise
        self.methods += tuple(self.servers) + (tuple(self.other.methods) if self.other is not None else ())

    # A second build's worker (other_build.py), when one was asked for.
    other: OtherBuild | None = None

    @property
    def local(self) -> InProcessMethods:
        """The methods that run in this process, on the suite's current Llama and engines
        (a test or bench script may build a Suite by hand and swap them)."""
        return InProcessMethods(self.llm, self.engines, self.lookup, getattr(self, "draft_llm", None))

    def same_build_plain(self, method: str) -> str:
        """The plain decoding on ``method``'s build: what its text is compared with."""
        if self.other is not None and method in self.other.methods:
            return self.other.plain
        return "plain"

    def close(self) -> None:
        for srv in getattr(self, "servers", {}).values():
            srv.close()
        other = getattr(self, "other", None)
        if other is not None:
            other.close()
        self.llm.close()
        if self.lookup is not None:
            self.lookup.close()
        if getattr(self, "draft_llm", None) is not None:
            self.draft_llm.close()

    def workload(self, name: str) -> Workload:
        for w in self.workloads:
            if w.name == name:
                return w
        raise KeyError(name)

    def run_once(self, method: str, workload: str, item: Item, round_: int) -> Run:
        if method in self.servers:
            return _run_server(self.servers[method], method, workload, item, round_)
        if self.other is not None and method in self.other.methods:
            return self.other.run_once(method, workload, item, round_)
        return self.local.run_once(method, workload, item, round_)

    def run(self, rounds: int) -> list[Run]:
        """Every method on every item, ``rounds`` times. Within a round each item
        runs every method back to back, in an order that rotates by round."""
        from tqdm import tqdm  # type: ignore[import-untyped]

        if rounds < 1:
            raise ValueError("rounds must be >= 1")
        total = rounds * sum(len(w.items) for w in self.workloads) * len(self.methods)
        runs: list[Run] = []
        with tqdm(total=total, desc=f"bench {self.model}", unit="run", disable=not self.progress) as bar:
            for r in range(rounds):
                order = self.methods[r % len(self.methods):] + self.methods[: r % len(self.methods)]
                for w in self.workloads:
                    for item in w.items:
                        for m in order:
                            if m in PREDICTION_METHODS and item.prediction is None:
                                bar.update()
                                continue
                            runs.append(self.run_once(m, w.name, item, r))
                            bar.update()
        return runs

    def prompt_ids(self, item: Item) -> list[int]:
        from ngramspec.engine.speculative_engine import prompt_tokens_for

        return prompt_tokens_for(self.llm, item.prompt)


_DRAFT_COUNTERS = ("calls", "probes", "refusals")
_PROPOSER_COUNTERS = ("proposals", "drafted_tokens", "draft_seconds", "prefill_seconds", "catchup_seconds")


def _draft_counters(p: Any) -> dict[str, float]:
    return {**{k: getattr(p.gate, k) for k in _DRAFT_COUNTERS}, **{k: getattr(p, k) for k in _PROPOSER_COUNTERS}}


def _draft_stats(p: Any, before: dict[str, float], engine: Any) -> dict[str, Any]:
    """One run's draft-model figures: the gate's decisions (passes it let the draft
    model run, probes among them, refusals), the draft's work and its measured
    prices next to a target token's."""
    now = _draft_counters(p)
    out: dict[str, Any] = {k: now[k] - before[k] for k in now}
    policy = engine.policy
    out.update(seconds_per_token=p.seconds_per_token, decode_seconds=p.decode_seconds,
               size_ratio=p.size_ratio,
               target_single_seconds=getattr(getattr(policy, "cost", None), "single_seconds", None))
    return out


def peak_rss_mib(path: str, method: str, item: Item, n_ctx: int, threads: int | None) -> float:
    """Peak resident memory of a fresh process that loads the model and runs one
    method on one item (MiB): each method's own footprint, not the suite's."""
    job = json.dumps({"path": path, "method": method, "item": asdict(item), "n_ctx": n_ctx, "threads": threads})
    out = subprocess.run([sys.executable, "-m", "ngramspec.suite.rss"], input=job, capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"peak RSS probe for {method} failed: {tail}")
    return float(out.stdout.strip().splitlines()[-1])
