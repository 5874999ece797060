"""The ``ngramspec`` command: generate, doctor, bench.

generate  completion (or --chat) with speculative decoding, streamed, then one
          line of stats; --compare also runs plain decoding and checks identity.
doctor    the llama.cpp build, the AMX hazard, bit-exact batch sizes, the
          verify-cost curve, and a verdict per mode with the command to run.
install-llama  rebuild llama-cpp-python with the flags exact speculation needs.
bench     plain vs llama-cpp-python's prompt lookup vs ngramspec on your machine.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ngramspec.errors import ContextTooSmall, PromptTooLong

DEFAULT_PROMPT = (
    "Here is a Python function and a refactored copy of it.\n\n"
    "def total_price(items, tax_rate):\n"
    "    subtotal = 0\n"
    "    for item in items:\n"
    "        subtotal += item.price * item.quantity\n"
    "    return subtotal * (1 + tax_rate)\n\n"
    "# Refactored, same behaviour, with a docstring:\n"
    "def total_price(items, tax_rate):\n"
)


class UserError(Exception):
    """A mistake in the command line or its inputs: reported in one line, no traceback."""


def _err(msg: str) -> None:
    print(f"ngramspec: {msg}", file=sys.stderr, flush=True)


def _load(model: str, n_ctx: int, threads: int | None, seed: int | None = None) -> Any:
    """The command's Llama: ``models.load_llama`` (a name or a GGUF path)."""
    from ngramspec.models import load_llama

    return load_llama(model, n_ctx=n_ctx, seed=0 if seed is None else seed, n_threads=threads)


def _read_text(path: str | None, what: str, *, blank_is_empty: bool, allow_empty: bool = False) -> str:
    """The text of the file at ``path``, or of stdin when ``path`` is None, strictly
    UTF-8 whatever the locale (a C locale would smuggle bad bytes in as surrogates).
    ``what`` ("prompt", "prediction") names the input in every error. Empty text is
    an error unless ``allow_empty``; with ``blank_is_empty``, so is whitespace only."""
    if path is None:
        try:
            raw = getattr(sys.stdin, "buffer", None)
            text = raw.read().decode("utf-8") if raw is not None else sys.stdin.read()
        except UnicodeDecodeError as e:
            raise UserError(f"the {what} on stdin is not UTF-8 text: {e}") from None
    else:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as e:
            raise UserError(f"cannot read {what} file: {e}") from None
        except UnicodeDecodeError as e:
            raise UserError(f"{what} file {path} is not UTF-8 text: {e}") from None
    if not allow_empty and not (text.strip() if blank_is_empty else text):
        raise UserError(f"the {what} on stdin is empty" if path is None else f"{what} file {path} is empty")
    return text


def _read_prompt(args: argparse.Namespace) -> str:
    """The prompt: --file, the argument, or stdin ("-", or piped in with no argument).
    With no prompt at all (no argument, nothing piped in) it is DEFAULT_PROMPT; a
    prompt that is given but empty (or only whitespace) is an error."""
    if args.file is not None:
        if args.prompt is not None:
            raise UserError("give the prompt as text or with --file, not both")
        return _read_text(args.file, "prompt", blank_is_empty=True)
    if args.prompt == "-" or (args.prompt is None and not sys.stdin.isatty()):
        # Piped in without "-": an empty pipe means no prompt (the default), not an error.
        text = _read_text(None, "prompt", blank_is_empty=True, allow_empty=args.prompt is None)
        if text.strip():
            return text
    if args.prompt is None:
        return DEFAULT_PROMPT
    prompt: str = args.prompt
    if not prompt.strip():
        raise UserError("the prompt is empty")
    return prompt


def _read_prediction(args: argparse.Namespace) -> str | None:
    """--prediction FILE, or - for stdin: the expected output (OpenAI's predicted
    outputs; whitespace alone is a valid one). stdin cannot carry both the prompt
    and the prediction."""
    if args.prediction is None:
        return None
    if args.prediction == "-" and args.prompt == "-":
        raise UserError("stdin cannot be both the prompt and the prediction: give the prompt as text or "
                        "with --file when the prediction comes from stdin (--prediction -)")
    return _read_text(None if args.prediction == "-" else args.prediction, "prediction", blank_is_empty=False)


def _stats_line(spec: dict[str, Any]) -> str:
    if not spec.get("used"):
        reason: str = spec.get("reason", "speculation not used")
        return "ngramspec: " + reason
    n, t = spec["generated_tokens"], spec["time_total_s"]
    return (f"ngramspec: {n} tokens in {t:.2f}s ({n / t if t else 0:.1f} tok/s), {spec['forward_passes']} passes, "
            f"{spec['tokens_per_forward']:.2f} tokens/pass, acceptance {spec['acceptance_rate']:.0%} "
            f"({spec['accepted_tokens']}/{spec['drafted_tokens']}), "
            f"overhead {spec['overhead_per_step_ms']:.2f} ms/pass")


def _generate(args: argparse.Namespace) -> int:
    from ngramspec.integrations.wrapper import SpeculativeLlama

    if args.max_tokens is not None and args.max_tokens < 1:
        raise UserError("--max-tokens must be >= 1")
    if args.max_draft is not None and args.max_draft < 0:
        raise UserError("--max-draft must be >= 0")
    if args.n_ctx != 0 and args.n_ctx < 32:
        raise UserError("--n-ctx must be 0 (the model's training context) or >= 32")
    prediction = _read_prediction(args)   # first: with --prediction -, stdin is the prediction's
    prompt = _read_prompt(args)
    memory, memory_path = _open_memory(args)  # a bad --memory/--prime fails before the model loads
    llm = _load(args.model, args.n_ctx, args.threads, args.seed)
    options: dict[str, Any] = {"exact": not args.inexact}
    if args.max_draft is not None:
        options["max_draft"] = args.max_draft
    if args.draft_model is not None:  # issue 20: loaded and checked against the target here, errors in one line
        from ngramspec.proposers.draft_model import as_draft_proposer

        try:
            options["draft_model"] = as_draft_proposer(args.draft_model, llm)
        except ValueError as e:
            raise UserError(f"--draft-model: {e}") from None
    if memory is not None:
        from ngramspec.memory.store import TokenizerMismatchError

        options["memory"] = memory
        try:
            spec = SpeculativeLlama(llm, **options)
        except TokenizerMismatchError as e:
            raise UserError(f"--memory {memory_path or ''}: {e}") from None
    else:
        spec = SpeculativeLlama(llm, **options)
    req = {"max_tokens": args.max_tokens, "temperature": args.temperature, "seed": args.seed}
    messages = [{"role": "user", "content": prompt}]
    predicted: dict[str, Any] = {} if prediction is None else {"prediction": {"type": "content", "content": prediction}}
    call = (lambda **kw: spec.create_chat_completion(messages, **kw, **predicted)) if args.chat else \
        (lambda **kw: spec.create_completion(prompt, **kw, **predicted))
    try:   # measured (or read from the cache) before timing, as a server does at start-up
        spec.engine.prepare()
    except ContextTooSmall as e:   # the probe does not fit in --n-ctx
        raise UserError(f"{e}: raise --n-ctx or lower --max-draft") from None
    t0 = time.perf_counter()
    try:
        text = _complete(call, req, args)
    except PromptTooLong as e:   # the prompt does not fit in --n-ctx
        raise UserError(f"{e}: shorten the prompt or raise --n-ctx") from None
    elapsed = time.perf_counter() - t0
    print(_stats_line(spec.last_speculative), file=sys.stderr)
    if prediction is not None:
        used = spec.last_speculative.get("prediction") or {}
        print(f"ngramspec: prediction: {used.get('accepted_prediction_tokens', 0)} tokens accepted, "
              f"{used.get('rejected_prediction_tokens', 0)} rejected", file=sys.stderr)
    if memory is not None and memory_path is not None:  # the generation's output is in the memory now
        memory.save(memory_path)
        print(f"ngramspec: memory saved to {memory_path} ({len(memory)} tokens)", file=sys.stderr)
    if args.compare:
        llm.reset()
        t0 = time.perf_counter()
        plain = llm.create_chat_completion(messages, **req) if args.chat else llm.create_completion(prompt, **req)
        dt = time.perf_counter() - t0
        ptext = plain["choices"][0]["message"]["content"] if args.chat else plain["choices"][0]["text"]
        same = ptext == text
        print(f"plain llama-cpp-python: {dt:.2f}s vs ngramspec {elapsed:.2f}s: speed-up {dt / elapsed:.2f}x; "
              f"identical text: {'yes' if same else 'NO'}", file=sys.stderr)
        if not same and args.temperature <= 0 and not args.inexact:
            return 1
    return 0


def _open_memory(args: argparse.Namespace) -> tuple[Any, Path | None]:
    """(memory, file to save it to) for --memory/--prime; (None, None) without them.
    --memory FILE loads FILE when it exists (else starts a new memory) and the
    memory is saved back there after the generation; --prime adds files or folders."""
    if args.memory is None and not args.prime:
        return None, None
    from ngramspec.memory.store import Memory, MemoryFileError, check_save_path

    path = None
    if args.memory is not None:
        try:   # saved there after the generation: refused now, before any work
            path = check_save_path(args.memory)
        except (ValueError, IsADirectoryError) as e:
            raise UserError(f"--memory: {e}") from None
    if path is not None and path.exists():
        try:
            memory = Memory.load(path)
        except (MemoryFileError, OSError) as e:
            raise UserError(f"--memory {path}: {e}") from None
    else:
        if path is not None and not path.parent.is_dir():
            raise UserError(f"--memory {path}: no such directory {str(path.parent)!r}")
        memory = Memory()
    for p in args.prime:
        try:
            report = memory.prime(path=p)
        except (FileNotFoundError, ValueError) as e:
            raise UserError(f"--prime: {e}") from None
        print(f"ngramspec: primed {len(report.files)} file(s) from {p}"
              + (f", skipped {len(report.skipped)}" if report.skipped else ""), file=sys.stderr)
    return memory, path


def _complete(call: Any, req: dict[str, Any], args: argparse.Namespace) -> str:
    """Runs the request, printing JSON or streaming the text; returns the text."""
    if args.json:
        out = call(**req)
        text: str = out["choices"][0]["message"]["content"] if args.chat else out["choices"][0]["text"]
        print(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        parts = []
        for chunk in call(stream=True, **req):
            choice = chunk["choices"][0]
            piece = (choice["delta"].get("content") or "") if args.chat else choice["text"]
            parts.append(piece)
            print(piece, end="", flush=True)
        print()
        text = "".join(parts)
    return text


def _break_even(cost: list[float], k: int) -> float:
    """Per-token acceptance a at which drafting k tokens matches plain decoding:
    1 + a + ... + a^k = cost(k + 1)."""
    lo, hi = 0.0, 1.0
    for _ in range(40):
        a = (lo + hi) / 2
        if sum(a ** i for i in range(k + 1)) < cost[k]:
            lo = a
        else:
            hi = a
    return hi


def _doctor(args: argparse.Namespace) -> int:
    import llama_cpp

    from ngramspec.builds.build_info import (
        INSTALL_COMMAND,
        build_label,
        invariance_hazards,
        is_exact_build,
        system_info,
    )

    info = system_info()
    exact_build = is_exact_build(info)
    print(f"llama-cpp-python {llama_cpp.__version__}, "
          + build_label(info) + f"\n{info}")
    from ngramspec.builds.llama_build import cpu_flags

    cpu_amx = "amx_tile" in cpu_flags()
    build_amx = "AMX" in info
    print(f"AMX: CPU {'has' if cpu_amx else 'lacks'} it; "
          f"this llama.cpp build {'uses' if build_amx else 'does not use'} it"
          + (f"  -> HAZARD: native AMX builds crash on this CPU; run `{INSTALL_COMMAND}`"
             if cpu_amx and build_amx else "  -> ok"))
    if args.max_batch < 1:
        raise UserError("--max-batch must be >= 1")
    from ngramspec.calibration import invariance_cache

    llm = _load(args.model, args.n_ctx, args.threads)
    hazards = invariance_hazards(llm, info)
    if hazards:
        print("batch-invariance hazards on this build and setting: " + "; ".join(hazards))
    try:
        if args.recalibrate:   # measure again and replace this setup's cache entry
            report = invariance_cache.recalibrate(llm, args.max_batch, recheck=True, progress=True)
        else:                  # what an engine on this setup would use (cached if valid)
            report = invariance_cache.load_or_check(llm, args.max_batch, progress=True)
    except ContextTooSmall as e:
        raise UserError(f"{e}: raise --n-ctx or lower --max-batch") from None
    print("\nbatch invariance (verify logits bit-identical to one-token decoding):")
    print(report)
    curve = report.cost_curve
    assert curve is not None  # load_or_check and recalibrate always attach one
    print("\nverify cost, relative to one token:  "
          + "  ".join(f"B={b}:{c:.2f}" for b, c in sorted(curve.relative.items())))
    print(f"cost curve in use: {curve.describe()}")
    path = invariance_cache.cache_path(invariance_cache.fingerprint(llm))
    if curve.origin == "prior":
        print(f"  not stored: the next engine on this setup measures again ({path})")
    else:
        print(f"  stored in {path}"
              + ("" if args.recalibrate else "\n  (ngramspec doctor --recalibrate measures it again)"))
    exact_sizes = [b for b in report.invariant_sizes if b > 1]
    exact_max = report.max_invariant_batch
    top = max(curve.relative)
    cost = [curve.relative.get(b, float(b)) for b in range(1, top + 1)]
    worth = [f"k={k}: >= {_break_even(cost, k):.0%}" for k in range(1, min(exact_max, top))
             if k + 1 in curve.relative]
    if worth:
        print("a k-token draft beats plain decoding when per-token acceptance is at least: " + ", ".join(worth))
    trial = None if args.no_trial else _trial(llm, args.max_batch - 1)
    print(f"\nverdict: exact speculation {'POSSIBLE' if exact_sizes else 'NOT possible'} on this build and setting")
    if exact_sizes:
        print(f"  exact mode: verifies with sizes {', '.join(map(str, report.invariant_sizes))} "
              f"(bit-exact to position {report.certified_depth}; deeper passes are audited)"
              + (f"; {trial['exact']}" if trial else ""))
    else:
        why = "; ".join(hazards) if hazards else "this model's kernels round batches differently"
        print(f"  exact mode: no speed-up (it decodes plainly): no verify batch above 1 token is bit-exact. "
              f"Why: {why}")
    if trial:
        print(f"  fast mode (exact=False, --inexact): {trial['fast']}")
    if not exact_sizes:
        nexts = []
        if not exact_build:
            nexts.append(f"`{INSTALL_COMMAND}` rebuilds llama-cpp-python {llama_cpp.__version__} without LLAMAFILE "
                         "and REPACK (a few minutes, once), for exact speculation")
        if any(h.startswith("flash_attn") for h in hazards):
            nexts.append("create the Llama with flash_attn=False")
        nexts.append("or use fast mode (exact=False / --inexact) if text that may leave plain greedy's is acceptable")
        print("  next: " + "; ".join(nexts))
    return 0 if exact_sizes else 1


#: The doctor's trial: a code edit, as users run it (the refactor of a small function).
_TRIAL_TOKENS = 128


def _trial(llm: Any, max_draft: int) -> dict[str, str]:
    """One greedy generation each of plain, exact and fast mode on the default
    prompt, from a reset cache, after an untimed warm-up: each mode's decode speed
    (tokens per second) over plain's and whether its text left plain's. One run
    each: a direction, not a benchmark."""
    import warnings

    from ngramspec.integrations.wrapper import SpeculativeLlama

    spec = SpeculativeLlama(llm, max_draft=max(0, max_draft))
    with warnings.catch_warnings():   # the verdict says what the engine's first-use warning says
        warnings.simplefilter("ignore", RuntimeWarning)
        for exact in (True, False):   # measured before timing, as an engine at start-up
            spec.engine.prepare(exact=exact)
    llm.reset()
    llm.create_completion(DEFAULT_PROMPT, max_tokens=8, temperature=0)   # warm-up: first-call allocations
    runs: dict[str, tuple[float, int, list[int], Any]] = {}
    for mode in ("plain", "exact", "fast"):
        llm.reset()
        t0 = time.perf_counter()
        if mode == "plain":
            out = llm.create_completion(DEFAULT_PROMPT, max_tokens=_TRIAL_TOKENS, temperature=0)
        else:
            out = spec.create_completion(DEFAULT_PROMPT, max_tokens=_TRIAL_TOKENS, temperature=0,
                                         exact=mode == "exact")
        seconds = time.perf_counter() - t0
        runs[mode] = (seconds, int(out["usage"]["completion_tokens"]),
                      llm.tokenize(out["choices"][0]["text"].encode(), add_bos=False), out.get("speculative"))
    llm.reset()
    plain_s, plain_n, plain_tokens, _ = runs["plain"]
    result = {}
    for mode in ("exact", "fast"):
        seconds, n, tokens, stats = runs[mode]
        speed = (f"{(n / seconds) / (plain_n / plain_s):.2f}x plain's tokens per second on a {plain_n}-token "
                 "code edit (one run)")
        same = tokens == plain_tokens
        if mode == "exact":
            result[mode] = speed + ("; identical text" if same else "; TEXT DIFFERS from plain (please report)")
        else:
            first = next((i for i, (a, b) in enumerate(zip(tokens, plain_tokens)) if a != b),
                         min(len(tokens), len(plain_tokens)))
            # A text can leave plain's once (after that it is another text): one prompt
            # gives 0 or 1 first divergences; the suite measures the rate over many.
            diverged = 0 if same else 1
            result[mode] = speed + (f"; first divergences from plain: {diverged} in {len(plain_tokens)} tokens "
                                    f"({1000.0 * diverged / max(1, len(plain_tokens)):.1f} per 1,000"
                                    + ("" if same else f", at token {first}")
                                    + "; `ngramspec bench --methods 'plain,ngramspec,ngramspec fast'` "
                                    "measures the rate over the suite)")
        if stats is not None:
            result[mode] += f", {stats.get('tokens_per_forward', 0):.2f} tokens per pass"
    return result


def _bench(args: argparse.Namespace) -> int:
    from ngramspec.suite import run_suite
    from ngramspec.suite.other_build import OtherBuildError
    from ngramspec.suite.sources import MissingMaterial

    if args.rounds is not None and args.rounds < 1:
        raise UserError("--rounds must be >= 1")
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
    if args.other_build and not (os.path.isfile(args.other_build) and os.access(args.other_build, os.X_OK)):
        raise UserError(f"--other-build: {args.other_build!r} is not an executable Python (give a venv's "
                        "bin/python)")
    if args.serve:
        import importlib.util

        missing = [m for m in ("fastapi", "uvicorn", "sse_starlette") if importlib.util.find_spec(m) is None]
        if missing:
            raise UserError(f"--serve needs llama-cpp-python's server extras ({', '.join(missing)} missing): "
                            "pip install 'ngramspec[server]'")
    from ngramspec.suite.runner import EXTRA_METHODS, METHODS

    methods = list(METHODS)
    if args.methods:
        methods = [m.strip() for m in args.methods.split(",") if m.strip()]
        unknown = [m for m in methods if m not in METHODS + EXTRA_METHODS]
        if unknown or "plain" not in methods:
            raise UserError(f"--methods: {'unknown ' + repr(unknown) if unknown else 'plain is required'}; "
                            f"choose from {', '.join(METHODS + EXTRA_METHODS)}")
    if args.no_lookup:
        methods = [m for m in methods if m != "prompt lookup"]
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
                       serve=args.serve, other_python=args.other_build,
                       command="ngramspec bench " + " ".join(sys.argv[2:]))
    except MissingMaterial as e:
        raise UserError(str(e)) from None
    except OtherBuildError as e:
        raise UserError(f"--other-build {args.other_build}: {e}") from None
    except ValueError as e:
        if "chat template" in str(e):  # the model cannot run the chat workloads
            raise UserError(f"--model {args.model}: {e}") from None
        raise
    print(md.read_text())
    print(f"report written to {md}", file=sys.stderr)
    return 0


def _install_llama(args: argparse.Namespace) -> int:
    from ngramspec.builds import llama_build

    kind = "stock" if args.stock else "exact"
    p = llama_build.plan(kind, args.version)
    if args.print_flags:
        print(" ".join(p.args) or "(no flags)")
        print(p.folder)
        return 0
    print(p.describe())
    if p.version != llama_build.PINNED_VERSION:
        print(f"note: ngramspec is tested with llama-cpp-python {llama_build.PINNED_VERSION}, not {p.version}")
    from ngramspec.builds.build_info import build_label, is_exact_build

    cur = p.current
    same_kind = cur.importable and is_exact_build(cur.system_info) == (kind == "exact")
    if same_kind and cur.version == p.version and not args.rebuild:
        print(f"llama-cpp-python {cur.version} is already the {kind} build: nothing to do")
        return 0
    if args.dry_run:
        print("dry run: nothing was changed")
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            raise UserError("refusing to replace llama-cpp-python without confirmation: add --yes")
        answer = input("Replace it? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            print("nothing was changed")
            return 1
    try:
        after = llama_build.install(p, rebuild=args.rebuild)
    except llama_build.BuildError as e:
        raise UserError(str(e)) from None
    verdict = build_label(after.system_info)
    print(f"llama-cpp-python {after.version} installed: {verdict}. `ngramspec doctor` checks it with a model.")
    return 0


def _serve(argv: list[str]) -> int:
    try:
        from ngramspec.server.app import main as serve
    except ImportError as e:
        _err(f"error: `serve` needs llama-cpp-python's server extras ({e.name} is missing): "
             "pip install 'ngramspec[server]'")
        return 2
    return serve(argv)


def build_parser() -> argparse.ArgumentParser:
    # allow_abbrev=False everywhere: a prefix must not silently stand for another
    # option (an old install's `bench --serve` was taken as `--server-modes`).
    ap = argparse.ArgumentParser(prog="ngramspec", description="Model-free n-gram speculative decoding "
                                 "for llama-cpp-python.", allow_abbrev=False)
    sub = ap.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", allow_abbrev=False, help="speculative completion, streamed, with stats")
    g.add_argument("prompt", nargs="?", default=None, help="prompt text, or - for stdin (default: a code prompt)")
    g.add_argument("--file", default=None, help="read the prompt from this file")
    g.add_argument("--model", default="smollm2-135m", help="a name from ngramspec.models or a GGUF path")
    g.add_argument("--chat", action="store_true", help="send the prompt as a user message with the chat template")
    g.add_argument("--max-tokens", type=int, default=128)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (speculative); > 0 = sampled")
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--json", action="store_true", help="print the full response as JSON instead of streaming")
    g.add_argument("--max-draft", type=int, default=None)
    g.add_argument("--n-ctx", type=int, default=2048)
    g.add_argument("--threads", type=int, default=None,
                   help="llama.cpp threads, for one-token and batched decoding alike (default: llama-cpp-python's)")
    g.add_argument("--inexact", action="store_true", help="allow verify batch sizes that are not bit-exact")
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
    g.add_argument("--compare", action="store_true", help="also run plain llama-cpp-python and compare")
    d = sub.add_parser("doctor", allow_abbrev=False, help="check the llama.cpp build for exact speculation")
    d.add_argument("--model", default="smollm2-135m")
    d.add_argument("--max-batch", type=int, default=12)
    d.add_argument("--threads", type=int, default=None)
    d.add_argument("--n-ctx", type=int, default=2048, help="context size (part of the cache key, as for generate)")
    d.add_argument("--recalibrate", action="store_true",
                   help="measure the invariance and the verify-cost curve again and replace the cached entry "
                        "(sizes the audit withdrew are forgotten)")
    d.add_argument("--no-trial", action="store_true",
                   help="skip the trial generation (plain, exact and fast mode on one code edit)")
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
    b = sub.add_parser("bench", allow_abbrev=False,
                       help="plain vs prompt lookup vs ngramspec on real workloads, with a report")
    b.add_argument("--model", default="smollm2-135m", help="a name from ngramspec.models or a GGUF path")
    b.add_argument("--quick", action="store_true",
                   help="one short prompt per workload, one round unless --rounds (~1-2 minutes a round)")
    b.add_argument("--rounds", type=int, default=None,
                   help="interleaved rounds (default: 3, or 1 with --quick)")
    b.add_argument("--threads", type=int, default=None,
                   help="llama.cpp threads for every method, one-token and batched decoding alike")
    b.add_argument("--no-lookup", action="store_true", help="skip llama-cpp-python's prompt-lookup decoder")
    b.add_argument("--methods", default=None,
                   help="comma-separated in-process methods (default: plain,prompt lookup,ngramspec; "
                        "also 'ngramspec n-gram only', 'ngramspec fast')")
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
    b.add_argument("--serve", action="store_true",
                   help="also run `ngramspec serve` over HTTP (same model, n_ctx, threads): its decode speed, "
                        "end-to-end latency per request and HTTP overhead against in-process ngramspec")
    sub.add_parser("serve", add_help=False,
                   help="OpenAI-compatible server (llama-cpp-python's) answering with speculative decoding; "
                        "`ngramspec serve --help` lists its settings")
    return ap


def _check_shared_args(args: argparse.Namespace) -> None:
    """Lower bounds of the numeric options that several commands share; each
    command checks its own further limits."""
    for name in ("threads", "max_batch"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise UserError(f"--{name.replace('_', '-')} must be >= 1")
    temperature = getattr(args, "temperature", None)
    if temperature is not None and not math.isfinite(temperature):
        raise UserError(f"--temperature must be a finite number, got {temperature}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:  # its settings are llama-cpp-python server's: server.py parses them
        return _serve(argv[1:])
    args = build_parser().parse_args(argv)
    from ngramspec.models import ModelFetchError, ModelLoadError

    try:
        _check_shared_args(args)
        return {"generate": _generate, "doctor": _doctor, "bench": _bench,
                "install-llama": _install_llama}[args.command](args)
    except (UserError, ModelFetchError, ModelLoadError) as e:
        # Only mistakes in the user's input or environment end in one line; anything
        # else is a bug in ngramspec and keeps its traceback.
        _err(f"error: {e}")
        return 2
    except KeyboardInterrupt:
        _err("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
