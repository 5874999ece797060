"""The ``ngramspec`` command line: one subparser per command. ``serve`` is only
named here; its settings are llama-cpp-python server's (ngramspec.server parses them)."""
from __future__ import annotations

import argparse

from ngramspec.cli.common import DEFAULT_MAX_TOKENS
from ngramspec.cli.demo import DEMO_MAX_TOKENS
from ngramspec.cli.spellings import add_other_spellings
from ngramspec.models import DEFAULT_MODEL
from ngramspec.options import add_arguments


def build_parser() -> argparse.ArgumentParser:
    # allow_abbrev=False everywhere: a prefix must not silently stand for another
    # option (an old install's `bench --serve` was taken as `--server-modes`).
    ap = argparse.ArgumentParser(prog="ngramspec", description="Model-free n-gram speculative decoding "
                                 "for llama-cpp-python.", allow_abbrev=False)
    sub = ap.add_subparsers(dest="command", required=True)
    _add_generate(sub)
    _add_doctor(sub)
    _add_install_llama(sub)
    _add_bench(sub)
    _add_rpc_worker(sub)
    sub.add_parser("serve", add_help=False,
                   help="OpenAI-compatible server (llama-cpp-python's) answering with speculative decoding; "
                        "`ngramspec serve --help` lists its settings")
    # --n_ctx for --n-ctx, --n_threads for --threads...: serve's spellings work here too.
    add_other_spellings(ap)
    return ap


def _add_generate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    g = sub.add_parser("generate", allow_abbrev=False, help="speculative completion, streamed, with stats")
    g.add_argument("prompt", nargs="?", default=None,
                   help="prompt text, or - for stdin (default: the demo, the model editing one of this package's "
                        "source files with the file as its prediction)")
    g.add_argument("--file", default=None, help="read the prompt from this file")
    g.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"a name from ngramspec.models or a GGUF path (default: {DEFAULT_MODEL})")
    g.add_argument("--chat", action="store_true", help="send the prompt as a user message with the chat template")
    g.add_argument("--max-tokens", type=int, default=None,
                   help=f"(default: {DEFAULT_MAX_TOKENS}; the demo's: {DEMO_MAX_TOKENS})")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (speculative); > 0 = sampled")
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--json", action="store_true", help="print the full response as JSON instead of streaming")
    g.add_argument("--n-ctx", type=int, default=2048)
    g.add_argument("--threads", type=int, default=None,
                   help="llama.cpp threads, for one-token and batched decoding alike (default: llama-cpp-python's)")
    add_arguments(g.add_argument_group("engine options (ngramspec.EngineOptions)"), style="dash")
    g.add_argument("--inexact", action="store_true", help="the same as --exact false (fast mode)")
    g.add_argument("--draft-model", default=None, metavar="PATH|NAME",
                   help="also draft with this smaller model (same vocabulary): a GGUF path or a name from "
                        "ngramspec.models")
    g.add_argument("--memory", default=None, metavar="FILE",
                   help="draft also from a memory of earlier requests: load FILE if it exists (else start one), "
                        "save it there after the generation")
    g.add_argument("--prime", action="append", default=[], metavar="PATH",
                   help="put this file or folder (read recursively) in the memory first; repeatable")
    g.add_argument("--prediction", default=None, metavar="FILE|-",
                   help="the expected output (e.g. the file being edited), read from FILE or stdin (-): "
                        "drafts from it; greedy output stays exactly what it is without it")
    g.add_argument("--compare", action="store_true",
                   help="also run plain llama-cpp-python and compare (certifies every verify size first "
                        "unless --warmup false)")
    add_rpc_option(g)


def _add_doctor(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    d = sub.add_parser("doctor", allow_abbrev=False, help="check the llama.cpp build for exact speculation")
    d.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"a name from ngramspec.models or a GGUF path (default: {DEFAULT_MODEL})")
    d.add_argument("--max-batch", type=int, default=12)
    d.add_argument("--threads", type=int, default=None)
    d.add_argument("--n-ctx", type=int, default=2048, help="context size (part of the cache key, as for generate)")
    d.add_argument("--recalibrate", action="store_true",
                   help="measure the invariance and the verify-cost curve again and replace the cached entry "
                        "(sizes the audit withdrew are forgotten)")
    d.add_argument("--no-trial", action="store_true",
                   help="skip the trial generation (plain, exact and fast mode on one code edit)")
    add_rpc_option(d)


def _add_install_llama(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    i = sub.add_parser("install-llama", allow_abbrev=False,
                       help="rebuild the installed llama-cpp-python with the flags exact speculation needs")
    i.add_argument("--yes", action="store_true", help="replace the installed llama-cpp-python without asking")
    i.add_argument("--dry-run", action="store_true", help="say what would be built and replaced, change nothing")
    i.add_argument("--print-flags", action="store_true", help="print the CMake flags and the wheel cache folder")
    i.add_argument("--rebuild", action="store_true", help="build again even if a cached wheel exists")
    i.add_argument("--stock", action="store_true",
                   help="build as a plain `pip install llama-cpp-python` does (for comparisons), not exact")
    i.add_argument("--version", default=None,
                   help="the llama-cpp-python version to build (default: the installed one, else the pinned one)")


def _add_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    b = sub.add_parser("bench", allow_abbrev=False,
                       help="plain vs prompt lookup vs ngramspec on real workloads, with a report")
    b.add_argument("--model", default="smollm2-135m", help="a name from ngramspec.models or a GGUF path")
    b.add_argument("--quick", action="store_true",
                   help="one short prompt per workload, one round unless --rounds (~1-2 minutes a round)")
    b.add_argument("--rounds", type=int, default=None,
                   help="interleaved rounds (default: 3, or 1 with --quick)")
    b.add_argument("--threads", type=int, default=None,
                   help="llama.cpp threads for every method, one-token and batched decoding alike")
    b.add_argument("--n-gpu-layers", type=int, default=0, metavar="N",
                   help="layers every method offloads to the GPU on a GPU build of llama.cpp (-1: all; default 0, "
                        "llama-cpp-python's)")
    b.add_argument("--flash-attn", action="store_true",
                   help="flash attention on for every method (llama-cpp-python's default is off)")
    b.add_argument("--no-lookup", action="store_true", help="skip llama-cpp-python's prompt-lookup decoder")
    b.add_argument("--methods", default=None,
                   help="comma-separated in-process methods (default: plain,prompt lookup,ngramspec; "
                        "also 'ngramspec n-gram only', 'ngramspec fast')")
    b.add_argument("--workloads", default=None,
                   help="comma-separated workloads, or 'default' (the six of the suite) and 'long' (the six "
                        "long-output ones: 256-1,024-token answers, the same with --quick); default: 'default'")
    b.add_argument("--no-rss", action="store_true", help="skip the per-method peak-memory probes")
    b.add_argument("--no-plots", action="store_true", help="write the report without PNG plots")
    b.add_argument("--out", default="ngramspec-bench", help="directory for the report, its JSON and plots")
    b.add_argument("--llama-server", default=None, metavar="PATH",
                   help="also run llama.cpp's llama-server (built by scripts/build_llama_server.py) in each mode")
    b.add_argument("--server-modes", default=None,
                   help="comma-separated llama-server modes (default: none and every ngram-* mode)")
    b.add_argument("--other-build", default=None, metavar="PYTHON",
                   help="also run plain, ngramspec and ngramspec fast on another Python's llama-cpp-python build "
                        "(e.g. a stock venv's python, or the exact build's), interleaved with the rest")
    b.add_argument("--other-methods", default=None, metavar="METHODS",
                   help="with --other-build: which of plain, ngramspec and ngramspec fast it runs "
                        "(comma-separated; plain always runs: each method's text is compared with it)")
    b.add_argument("--other-llama-server", default=None, metavar="PATH",
                   help="with --other-build: also run a llama-server built with that build's flags "
                        "(scripts/build_llama_server.py, with or without --stock) in each mode")
    add_rpc_option(b)
    b.add_argument("--serve", action="store_true",
                   help="also run `ngramspec serve` over HTTP (same model, n_ctx, threads): its decode speed, "
                        "end-to-end latency per request and HTTP overhead against in-process ngramspec")


RPC_HELP = ("load the model onto these RPC workers (`ngramspec rpc-worker` on each), every layer on them: "
            "comma-separated host:port, in order (docs/rpc.md)")


def add_rpc_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--rpc HOST:PORT,HOST:PORT``, the same for every command that loads a model."""
    parser.add_argument("--rpc", default=None, metavar="HOST:PORT,...", help=RPC_HELP)


def _add_rpc_worker(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from ngramspec.cli.rpc_worker import default_threads

    w = sub.add_parser("rpc-worker", allow_abbrev=False,
                       help="serve this machine's CPU to a model split across machines (llama.cpp's RPC backend); "
                            "trusted networks only")
    w.add_argument("--host", default="127.0.0.1",
                   help="IPv4 address to listen on (default: 127.0.0.1; 0.0.0.0 = every interface: only on a "
                        "trusted network, the protocol has no authentication)")
    w.add_argument("--port", type=int, default=50052, help="TCP port (default: 50052, llama.cpp's)")
    w.add_argument("--threads", type=int, default=None,
                   help=f"threads for the computation (default: half the cores, here {default_threads()})")
