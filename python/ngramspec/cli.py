"""Command line: ``ngramspec generate`` and ``ngramspec doctor``.

generate: greedy completion with speculative decoding on a GGUF model, with
          stats; --compare also runs plain greedy decoding and checks identity.
doctor:   the llama.cpp build, the CPU features it uses, and whether batched
          verification is bit-exact (check_batch_invariance) on a model.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Sequence

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


def _load(model: str, n_ctx: int, threads: int | None):
    import llama_cpp

    from . import models

    path = str(models.fetch(model)) if model in models.MODELS else model
    kwargs = {"n_ctx": n_ctx, "verbose": False, "seed": 0}
    if threads:
        kwargs["n_threads"] = threads
    return llama_cpp.Llama(path, **kwargs)


def _generate(args: argparse.Namespace) -> int:
    from .engine import SpeculativeEngine

    llm = _load(args.model, args.n_ctx, args.threads)
    engine = SpeculativeEngine(llm, max_draft=args.max_draft, exact=not args.inexact)
    prompt = args.prompt if args.prompt is not None else DEFAULT_PROMPT
    engine.generate(prompt, max_tokens=1)  # warm-up; measures batch invariance once
    llm.reset()
    gen = engine.generate(prompt, max_tokens=args.max_tokens)
    s = gen.stats
    print(gen.text)
    print("-" * 60, file=sys.stderr)
    print(f"speculative: {s.generated_tokens} tokens in {s.time_total_s:.2f}s "
          f"({s.generated_tokens / s.time_total_s:.1f} tok/s), {s.forward_passes} forward passes, "
          f"{s.tokens_per_forward:.2f} tokens/pass, acceptance {s.acceptance_rate:.0%} "
          f"({s.accepted_tokens}/{s.drafted_tokens}), finish={gen.finish_reason}", file=sys.stderr)
    print(f"time: prefill {s.time_prefill_s:.3f}s, decode {s.time_decode_s:.3f}s, predictor "
          f"{s.time_predictor_s * 1e3:.1f}ms, other {s.time_other_s * 1e3:.1f}ms "
          f"({s.overhead_per_step_ms:.3f} ms/pass overhead)", file=sys.stderr)
    if args.compare:
        llm.reset()
        t0 = time.perf_counter()
        plain = llm.create_completion(prompt, max_tokens=args.max_tokens, temperature=0.0)
        dt = time.perf_counter() - t0
        n = plain["usage"]["completion_tokens"]
        same = plain["choices"][0]["text"] == gen.text
        print(f"plain:       {n} tokens in {dt:.2f}s ({n / dt:.1f} tok/s); speed-up "
              f"{dt / s.time_total_s:.2f}x; identical text: {same}", file=sys.stderr)
        if not same and not args.inexact:
            return 1
    return 0


def _doctor(args: argparse.Namespace) -> int:
    import llama_cpp

    from .invariance import check_batch_invariance

    print(f"llama-cpp-python {llama_cpp.__version__}")
    print(llama_cpp.llama_print_system_info().decode().strip())
    llm = _load(args.model, 512, args.threads)
    report = check_batch_invariance(llm, max_batch=args.max_batch)
    print(report)
    print(f"largest bit-exact verify batch: {report.max_invariant_batch}")
    return 0 if report.max_invariant_batch > 1 else 1


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ngramspec", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="speculative greedy completion with stats")
    g.add_argument("--model", default="smollm2-135m", help="a name from ngramspec.models or a GGUF path")
    g.add_argument("--prompt", default=None, help="prompt text (default: a code-refactoring prompt)")
    g.add_argument("--max-tokens", type=int, default=128)
    g.add_argument("--max-draft", type=int, default=None)
    g.add_argument("--n-ctx", type=int, default=2048)
    g.add_argument("--threads", type=int, default=None)
    g.add_argument("--inexact", action="store_true", help="allow non-bit-exact verify batch sizes")
    g.add_argument("--compare", action="store_true", help="also run plain greedy decoding and compare")
    d = sub.add_parser("doctor", help="check the llama.cpp build for bit-exact batched verification")
    d.add_argument("--model", default="smollm2-135m")
    d.add_argument("--max-batch", type=int, default=16)
    d.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    if args.command == "generate":
        if args.max_draft is None:
            from .engine import DEFAULT_MAX_DRAFT

            args.max_draft = DEFAULT_MAX_DRAFT
        return _generate(args)
    return _doctor(args)


if __name__ == "__main__":
    sys.exit(main())
