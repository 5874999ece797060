"""The benchmark suite behind ``ngramspec bench`` and ``bench/test_suite.py``:
real workloads (sources), the methods (named in methods, loaded by loading, timed
in in_process and run_record) run side by side (runner), the model-free limit
(oracle), the figures (summary), and the report with its plots (report, plots,
http_overhead). Imports run one way: methods, llama_settings, run_record -> loading -> in_process,
rss -> other_build, servers -> runner -> summary -> reports."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ngramspec.suite.llama_settings import LLAMA_DEFAULTS, LlamaSettings


def run_suite(model: str, *, quick: bool, rounds: int, out_dir: Path, command: str,
              threads: int | None = None, methods: Sequence[str] | None = None, rss: bool = True,
              plot: bool = True, progress: bool = True, server: str | None = None,
              server_modes: Sequence[str] = (), serve: bool = False, other_python: str | None = None,
              workloads: Sequence[str] | None = None, other_server: str | None = None,
              settings: LlamaSettings | None = None, rpc: str | None = None,
              other_methods: Sequence[str] | None = None) -> Path:
    """Runs the whole suite and writes its report; returns the Markdown file's path.
    serve: also run ``ngramspec serve`` over HTTP (method "ngramspec serve").
    other_python: also run plain, ngramspec and ngramspec fast on that Python's
    llama-cpp-python build (runner.Suite); ``other_methods``: only these of them.
    workloads: the workloads to run (default: sources.DEFAULT_WORKLOADS).
    other_server: a llama-server built with the other build's flags (runner.Suite).
    settings: GPU offload and flash attention for every method (default: llama-cpp-python's).
    rpc: RPC workers for the in-process methods' models (no peak-memory probes then:
    they load the model in another process, and a worker serves one client at a time)."""
    from ngramspec.suite import report, runner, sources, summary
    from ngramspec.suite.methods import EXTRA_METHODS, METHODS
    from ngramspec.suite.provenance import git_commit
    from ngramspec.suite.rss import peak_rss_mib

    if rounds < 1:
        raise ValueError("rounds must be >= 1")
    if methods is not None and not {"plain", "ngramspec"} <= set(methods):
        # Checked before the run, not found after it: every speed-up is over plain, and the
        # report's limit, detail and llama-server comparison come from ngramspec's runs.
        raise ValueError("methods must include 'plain' and 'ngramspec'")
    sources.check_installed(plots=plot)
    settings = settings or LLAMA_DEFAULTS
    suite = runner.Suite(model, quick=quick, threads=threads, methods=tuple(methods or METHODS),
                         progress=progress, server=server, server_modes=tuple(server_modes),
                         serve=serve, other_python=other_python, other_methods=other_methods,
                         workloads=tuple(workloads) if workloads is not None else None,
                         other_server=other_server, settings=settings, rpc=rpc)
    rss = rss and not rpc
    peaks: dict[str, float] = {}
    try:
        runs = suite.run(rounds)
        figs = summary.summarize(suite, runs)
        for name, srv in suite.servers.items():
            peak = srv.peak_rss_mib()
            if rss and peak is not None:
                peaks[name] = peak
    finally:
        suite.close()
    if rss:
        # The longest prompt that every method got through (a peer may fail on some).
        failed = {(r.workload, r.item) for r in runs if r.error}
        longest = max((i for w in suite.workloads for i in w.items if (w.name, i.label) not in failed),
                      key=lambda i: len(i.prompt))
        peaks = {**{m: peak_rss_mib(suite.path, m, longest, suite.n_ctx, threads, settings) for m in suite.methods
                    if m in METHODS + EXTRA_METHODS}, **peaks}
    return report.write(Path(out_dir), suite, figs, runs, rounds, command, git_commit(), peaks, plot=plot)
