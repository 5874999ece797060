"""``ngramspec doctor``: the llama.cpp build, the AMX hazard, the bit-exact batch
sizes, the verify-cost curve, a trial generation, and a verdict per mode with
the command to run next."""
from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from ngramspec.cli.common import DEFAULT_PROMPT, load_model
from ngramspec.errors import ContextTooSmallError, UserError

if TYPE_CHECKING:
    from llama_cpp import Llama

    from ngramspec.calibration.invariance import InvarianceReport

#: The doctor's trial: a code edit, as users run it (the refactor of a small function).
_TRIAL_TOKENS = 128


def run(args: argparse.Namespace) -> int:
    import llama_cpp

    from ngramspec.builds.build_info import invariance_hazards, is_exact_build, system_info

    info = system_info()
    exact_build = is_exact_build(info)
    _print_build(llama_cpp.__version__, info)
    if args.max_batch < 1:
        raise UserError("--max-batch must be >= 1")
    llm = load_model(args.model, args.n_ctx, args.threads, rpc=args.rpc)
    hazards = invariance_hazards(llm, info)
    if hazards:
        print("batch-invariance hazards on this build and setting: " + "; ".join(hazards))
    report = _invariance_report(llm, args)
    # Read before the trial: the trial's engines may withdraw sizes from this report.
    exact_sizes = [b for b in report.invariant_sizes if b > 1]
    _print_cost_curve(llm, report, args.recalibrate)
    trial = None if args.no_trial else _trial(llm, args.max_batch - 1)
    _print_verdict(report, exact_sizes, hazards, trial, exact_build, llama_cpp.__version__)
    return 0 if exact_sizes else 1


def _print_build(version: str, info: str) -> None:
    """The llama-cpp-python version and build, and whether it uses AMX on a CPU that has it."""
    from ngramspec.builds.build_info import INSTALL_COMMAND, build_label
    from ngramspec.builds.llama_build import cpu_flags

    print(f"llama-cpp-python {version}, "
          + build_label(info) + f"\n{info}")
    cpu_amx = "amx_tile" in cpu_flags()
    build_amx = "AMX" in info
    print(f"AMX: CPU {'has' if cpu_amx else 'lacks'} it; "
          f"this llama.cpp build {'uses' if build_amx else 'does not use'} it"
          + (f"  -> HAZARD: native AMX builds crash on this CPU; run `{INSTALL_COMMAND}`"
             if cpu_amx and build_amx else "  -> ok"))


def _invariance_report(llm: Llama, args: argparse.Namespace) -> InvarianceReport:
    """This setup's invariance report with its cost curve: measured again with
    --recalibrate, else what an engine on this setup would use (cached if valid)."""
    from ngramspec.calibration import invariance_cache

    try:
        if args.recalibrate:   # measure again and replace this setup's cache entry
            return invariance_cache.recalibrate(llm, args.max_batch, recheck=True, progress=True)
        return invariance_cache.load_or_check(llm, args.max_batch, progress=True)
    except ContextTooSmallError as e:
        raise UserError(f"{e}: raise --n-ctx or lower --max-batch") from None


def _print_cost_curve(llm: Llama, report: InvarianceReport, recalibrated: bool) -> None:
    """The invariance report, the verify-cost curve, where it is stored, and the
    acceptance each draft length needs to pay off."""
    from ngramspec.calibration import invariance_cache

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
              + ("" if recalibrated else "\n  (ngramspec doctor --recalibrate measures it again)"))
    exact_max = report.max_invariant_batch
    top = max(curve.relative)
    cost = [curve.relative.get(b, float(b)) for b in range(1, top + 1)]
    worth = [f"k={k}: >= {_break_even(cost, k):.0%}" for k in range(1, min(exact_max, top))
             if k + 1 in curve.relative]
    if worth:
        print("a k-token draft beats plain decoding when per-token acceptance is at least: " + ", ".join(worth))


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


def _print_verdict(report: InvarianceReport, exact_sizes: list[int], hazards: list[str], trial: dict[str, str] | None,
                   exact_build: bool, version: str) -> None:
    """Whether exact speculation is possible, what each mode gave in the trial,
    and what to do when exact mode cannot speed up."""
    from ngramspec.builds.build_info import INSTALL_COMMAND

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
            nexts.append(f"`{INSTALL_COMMAND}` rebuilds llama-cpp-python {version} without LLAMAFILE "
                         "and REPACK (a few minutes, once), for exact speculation")
        if any(h.startswith("flash_attn") for h in hazards):
            nexts.append("create the Llama with flash_attn=False")
        nexts.append("or use fast mode (exact=False / --inexact) if text that may leave plain greedy's is acceptable")
        print("  next: " + "; ".join(nexts))


def _trial(llm: Llama, max_draft: int) -> dict[str, str]:
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
        out: Any
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

