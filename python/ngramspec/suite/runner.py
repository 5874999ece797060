"""Runs every method on every workload: same model file, same llama.cpp build,
same thread count, methods interleaved and rotated round by round (``Suite``).
The methods are named in methods.py, loaded by loading.py and timed as
run_record.py says; this module only puts them side by side.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ngramspec.suite import sources
from ngramspec.suite.in_process import InProcessMethods
from ngramspec.suite.llama_server import LlamaServer
from ngramspec.suite.llama_settings import LLAMA_DEFAULTS, LlamaSettings
from ngramspec.suite.loading import check_for_methods, load, make_engine, model_path
from ngramspec.suite.methods import (
    DRAFT_METHODS,
    ENGINE_OPTIONS,
    EXTRA_METHODS,
    MEASURED_MAX_BATCH,
    METHODS,
    OTHER_BUILD_METHODS,
    PREDICTION_METHODS,
    SERVE_METHOD,
    draft_model_for,
)
from ngramspec.suite.other_build import OtherBuild
from ngramspec.suite.run_record import Run
from ngramspec.suite.workload import Item, Workload

if TYPE_CHECKING:
    from llama_cpp import Llama


def _run_server(server: Any, method: str, workload: str, item: Item, round_: int) -> Run:
    """One run of a method that is a server over HTTP (llama-server, ``ngramspec serve``)."""
    if item.grammar is not None:   # the servers' completion calls here carry no grammar: not comparable
        return Run(method, workload, item.label, round_, 0.0, 0.0, 0, "", error="not given the item's grammar")
    if item.json_schema is not None:   # nor an outlines processor
        return Run(method, workload, item.label, round_, 0.0, 0.0, 0, "",
                   error="not given the item's outlines processor")
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
        "exact-build ngramspec", ...; other_build.py); ``other_methods``: only
        these of them (plain among them).
    other_server: a llama-server built with the other build's flags (needs
        ``other_python``): its modes run too, named after that build
        ("exact-build llama-server ngram-mod"), so each build is compared with
        llama.cpp's own server on the same kernels.
    settings: GPU offload and flash attention for every method (llama_settings.py);
        the default is llama-cpp-python's (CPU, flash attention off).
    rpc: RPC workers ("host:port,...") to load the in-process methods' models onto.
    """

    def __init__(self, model: str, *, quick: bool, n_ctx: int = 4096, threads: int | None = None,
                 methods: tuple[str, ...] = METHODS, progress: bool = True, server: str | None = None,
                 server_modes: tuple[str, ...] = (), workloads: Sequence[str] | None = None,
                 trace: bool = False, cost: Any = None, serve: bool = False,
                 other_python: str | None = None, other_server: str | None = None,
                 settings: LlamaSettings = LLAMA_DEFAULTS, invariance: Any = None, rpc: str | None = None,
                 other_methods: Sequence[str] | None = None) -> None:
        from ngramspec.calibration.cost_timing import measure_verify_cost
        from ngramspec.calibration.invariance import check_sizes

        unknown = [m for m in methods if m not in METHODS + EXTRA_METHODS]
        if unknown:
            raise ValueError(f"unknown method(s) {unknown}; choose from {list(METHODS + EXTRA_METHODS)}")
        self.model, self.quick, self.n_ctx, self.settings = model, quick, n_ctx, settings
        self.methods = ("plain",) + tuple(m for m in methods if m != "plain")
        self.path = model_path(model)
        self.rpc = rpc
        self.llm = load(self.path, "plain", n_ctx, threads, settings, rpc)
        self.threads = self.llm.context_params.n_threads
        # llama.cpp decodes batches (prefill, verification) on n_threads_batch: every
        # method, llama-server included, gets the same pair (models.load_llama).
        self.threads_batch = self.llm.context_params.n_threads_batch
        self.workloads: list[Workload] = sources.build(self.llm, quick, workloads)
        # invariance: an InvarianceReport of this model, build and settings to use instead of
        # checking again (a caller that has just checked; its sizes bound exact mode's)
        self.invariance = invariance if invariance is not None else \
            check_for_methods(self.llm, self.methods, progress, repeats=3 if quick else 5)
        # cost: a CostCurve to use instead of measuring one (a machine too busy to time)
        # Every size to 16, then the checked ones (interpolated between): a sweep of all 65
        # sizes took minutes on a busy 2-core machine.
        self.cost = cost if cost is not None else measure_verify_cost(
            self.llm, MEASURED_MAX_BATCH, reps=3 if quick else 7, progress=progress,
            sizes=check_sizes(MEASURED_MAX_BATCH))
        # The draft-model methods share one draft Llama (target's n_ctx and threads),
        # loaded only when one of them runs; reset before each of their runs.
        self.draft_llm: Llama | None = None
        if any(m in DRAFT_METHODS for m in self.methods):
            from ngramspec.proposers.draft_model_loading import load_draft_model

            self.draft_llm = load_draft_model(draft_model_for(model), self.llm, **settings.llama_kwargs())
        self.engines = {m: make_engine(self.llm, m, invariance=self.invariance,
                                       **({"draft_model": self.draft_llm} if m in DRAFT_METHODS else {}))
                        for m in ENGINE_OPTIONS if m not in DRAFT_METHODS or m in self.methods}
        self.lookup = (load(self.path, "prompt lookup", n_ctx, threads, settings, rpc)
                       if "prompt lookup" in self.methods else None)
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
                self.other = OtherBuild(other_python, self.path, n_ctx, threads, progress=progress, settings=settings,
                                        methods=tuple(other_methods or OTHER_BUILD_METHODS))
            if serve:
                from ngramspec.suite.ngramspec_server import NgramspecServer

                self.servers[SERVE_METHOD] = NgramspecServer(self.path, n_ctx, self.threads, self.threads_batch,
                                                             extra_args=settings.serve_args())
            if other_server and self.other is None:
                raise ValueError("other_server needs other_python: it is the other build's llama-server")
            binaries = [(server, "")] if server else []
            if other_server:
                assert self.other is not None
                binaries.append((other_server, f"{self.other.label} "))
            for binary, label in binaries:
                from ngramspec.suite.llama_server import DEFAULT_MODES

                for mode in server_modes or DEFAULT_MODES:
                    draft = model_path(draft_model_for(model)) if mode == "draft" else None
                    self.servers[f"{label}llama-server {mode}"] = LlamaServer(
                        binary, self.path, mode, n_ctx, self.threads, draft=draft, threads_batch=self.threads_batch,
                        settings=settings)
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
        if self.other is not None and (method in self.other.methods or method.startswith(f"{self.other.label} ")):
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
        draft_llm = getattr(self, "draft_llm", None)
        if draft_llm is not None:
            draft_llm.close()

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
                if r > 0:   # every round starts llama-server afresh: see LlamaServer.restart
                    for server in self.servers.values():
                        if isinstance(server, LlamaServer):
                            server.restart()
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
        from ngramspec.engine.request import prompt_tokens_for

        return prompt_tokens_for(self.llm, item.prompt)

