"""``ngramspec bench``: plain decoding vs llama-cpp-python's prompt lookup vs
ngramspec on real workloads, on your machine, with a report."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from ngramspec.errors import MissingChatTemplateError, UserError


def run(args: argparse.Namespace) -> int:
    from ngramspec.suite import run_suite
    from ngramspec.suite.llama_settings import LlamaSettings
    from ngramspec.suite.other_build import OtherBuildError
    from ngramspec.suite.workload import MissingMaterialError

    if args.rounds is not None and args.rounds < 1:
        raise UserError("--rounds must be >= 1")
    if args.n_gpu_layers < -1:
        raise UserError("--n-gpu-layers must be >= -1 (-1: every layer)")
    out_dir = Path(args.out)
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"--out {args.out}: exists and is not a directory (give a directory for the report)")
    rounds = args.rounds or (1 if args.quick else 3)
    from ngramspec.suite.llama_server import MODES

    bad = [m for m in (args.server_modes or "").split(",") if m and m not in MODES]
    if bad:
        raise UserError(f"--server-modes: unknown mode(s) {bad}; choose from {', '.join(MODES)}")
    if args.llama_server and not Path(args.llama_server).is_file():
        raise UserError(f"--llama-server: no such file {args.llama_server!r} (build it with "
                        "scripts/build_llama_server.py)")
    if args.other_llama_server and not args.other_build:
        raise UserError("--other-llama-server needs --other-build (it is that build's llama-server)")
    other_methods = None
    if args.other_methods is not None:
        if not args.other_build:
            raise UserError("--other-methods needs --other-build (they are that build's methods)")
        other_methods = _other_methods(args.other_methods)
    if args.other_llama_server and not Path(args.other_llama_server).is_file():
        raise UserError(f"--other-llama-server: no such file {args.other_llama_server!r} (build it with "
                        "scripts/build_llama_server.py)")
    if args.other_build and not (os.path.isfile(args.other_build) and os.access(args.other_build, os.X_OK)):
        raise UserError(f"--other-build: {args.other_build!r} is not an executable Python (give a venv's "
                        "bin/python)")
    if args.serve:
        import importlib.util

        missing = [m for m in ("fastapi", "uvicorn", "sse_starlette") if importlib.util.find_spec(m) is None]
        if missing:
            raise UserError(f"--serve needs llama-cpp-python's server extras ({', '.join(missing)} missing): "
                            "pip install 'ngramspec[server]'")
    if args.rpc:
        # Those run in other processes, and a worker serves one client at a time.
        clash = [o for o, on in (("--llama-server", args.llama_server), ("--other-build", args.other_build),
                                 ("--other-llama-server", args.other_llama_server),
                                 ("--serve", args.serve)) if on]
        if clash:
            raise UserError(f"--rpc cannot be combined with {', '.join(clash)}: those load the model in another "
                            "process, and an RPC worker serves one client at a time")
    methods = _methods(args)
    workloads = _workloads(args)
    try:  # before the long run: a report that cannot be written would lose it
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out_dir):
            pass
    except OSError as e:
        raise UserError(f"--out {args.out}: cannot write the report there: {e.strerror or e}") from None
    try:
        md = run_suite(args.model, quick=args.quick, rounds=rounds, out_dir=out_dir, threads=args.threads,
                       methods=methods, rss=not args.no_rss, plot=not args.no_plots, server=args.llama_server,
                       server_modes=args.server_modes.split(",") if args.server_modes else (),
                       serve=args.serve, other_python=args.other_build, other_methods=other_methods,
                       workloads=workloads,
                       other_server=args.other_llama_server, rpc=args.rpc,
                       settings=LlamaSettings(n_gpu_layers=args.n_gpu_layers, flash_attn=args.flash_attn),
                       command="ngramspec bench " + " ".join(sys.argv[2:]))
    except MissingMaterialError as e:
        raise UserError(str(e)) from None
    except OtherBuildError as e:
        raise UserError(f"--other-build {args.other_build}: {e}") from None
    except MissingChatTemplateError as e:  # the model cannot run the chat workloads
        raise UserError(f"--model {args.model}: {e}") from None
    print(md.read_text())
    print(f"report written to {md}", file=sys.stderr)
    return 0


def _methods(args: argparse.Namespace) -> list[str]:
    """The in-process methods to run: --methods (plain and ngramspec are required:
    every speed-up is over plain, and the report's model-free limit, acceptance
    detail and llama-server comparison are computed from ngramspec's runs), less
    prompt lookup with --no-lookup."""
    from ngramspec.suite.methods import EXTRA_METHODS, METHODS

    methods = list(METHODS)
    if args.methods:
        methods = [m.strip() for m in args.methods.split(",") if m.strip()]
        unknown = [m for m in methods if m not in METHODS + EXTRA_METHODS]
        missing = [m for m in ("plain", "ngramspec") if m not in methods]
        if unknown or missing:
            verb = "is" if len(missing) == 1 else "are"
            what = f"unknown {unknown!r}" if unknown else f"{' and '.join(missing)} {verb} required"
            raise UserError(f"--methods: {what}; choose from {', '.join(METHODS + EXTRA_METHODS)}")
    if args.no_lookup:
        methods = [m for m in methods if m != "prompt lookup"]
    return methods


def _other_methods(text: str) -> tuple[str, ...]:
    """--other-methods as the other build's method names, plain first (always run)."""
    from ngramspec.suite.methods import OTHER_BUILD_METHODS

    names = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in names if m not in OTHER_BUILD_METHODS]
    if bad or not names:
        raise UserError(f"--other-methods: unknown or no method(s) {bad}; choose from {', '.join(OTHER_BUILD_METHODS)}")
    return ("plain",) + tuple(m for m in OTHER_BUILD_METHODS if m in names and m != "plain")


def _workloads(args: argparse.Namespace) -> tuple[str, ...] | None:
    """The workloads to run: --workloads, with 'default' and 'long' standing for their sets."""
    from ngramspec.suite.long_sources import LONG_WORKLOADS
    from ngramspec.suite.sources import DEFAULT_WORKLOADS, OPTIONAL_WORKLOADS

    if not args.workloads:
        return None
    sets = {"default": DEFAULT_WORKLOADS, "long": LONG_WORKLOADS}
    names: list[str] = []
    for name in (n.strip() for n in args.workloads.split(",") if n.strip()):
        for w in sets.get(name, (name,)):
            if w not in DEFAULT_WORKLOADS + OPTIONAL_WORKLOADS + LONG_WORKLOADS:
                raise UserError(f"--workloads: unknown workload {w!r}; choose from default, long, "
                                f"{', '.join(DEFAULT_WORKLOADS + OPTIONAL_WORKLOADS + LONG_WORKLOADS)}")
            if w not in names:
                names.append(w)
    if not names:
        raise UserError("--workloads: give at least one workload")
    return tuple(names)
