"""``ngramspec generate``: a completion (or --chat) with speculative decoding,
streamed, then its tokens per pass; --compare also runs plain decoding and says
the speed-up and whether the text is identical. With no prompt, the demo
(``cli/demo.py``)."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ngramspec.cli.common import DEFAULT_MAX_TOKENS, load_model, read_prediction, read_prompt
from ngramspec.cli.demo import DEMO_MAX_TOKENS, demo
from ngramspec.errors import ContextTooSmallError, PromptTooLongError, UserError
from ngramspec.options import EngineOptions, from_arguments

if TYPE_CHECKING:
    from llama_cpp import Llama


def run(args: argparse.Namespace) -> int:
    if args.max_tokens is not None and args.max_tokens < 1:
        raise UserError("--max-tokens must be >= 1")
    options = engine_options(args)   # a bad option is a one-line error before anything loads
    if args.n_ctx != 0 and args.n_ctx < 32:
        raise UserError("--n-ctx must be 0 (the model's training context) or >= 32")
    prediction = read_prediction(args)   # first: with --prediction -, stdin is the prediction's
    given = read_prompt(args)
    prompt, chat, max_tokens = given or "", args.chat, args.max_tokens
    messages = [{"role": "user", "content": prompt}]
    if given is None:   # no prompt given: the demo, a chat edit of a real file with its prediction
        task = demo()
        messages, chat = task.messages, True
        prediction = task.prediction if prediction is None else prediction
        max_tokens = DEMO_MAX_TOKENS if max_tokens is None else max_tokens
        print(f"ngramspec: demo on {args.model}: {task.description}", file=sys.stderr, flush=True)
    max_tokens = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    memory, memory_path = _open_memory(args)  # a bad --memory/--prime fails before the model loads
    llm = load_model(args.model, args.n_ctx, args.threads, args.seed, rpc=args.rpc)
    try:   # --warmup true: the whole invariance check and cost curve here, with a progress bar
        spec = _speculative_llama(llm, args, options, memory, memory_path)
    except ContextTooSmallError as e:   # the probe does not fit in --n-ctx
        raise UserError(f"{e}: raise --n-ctx or lower --max-draft") from None
    req = {"max_tokens": max_tokens, "temperature": args.temperature, "seed": args.seed}
    predicted: dict[str, Any] = {} if prediction is None else {"prediction": {"type": "content", "content": prediction}}
    call = (lambda **kw: spec.create_chat_completion(messages, **kw, **predicted)) if chat else \
        (lambda **kw: spec.create_completion(prompt, **kw, **predicted))
    # With --warmup false, exact mode certifies verify sizes a few seconds at a time as
    # generations start (calibration/certify.py; a bar shows past 2 s): that time is left
    # out of --compare's timing.
    t0 = time.perf_counter()
    try:
        text = _complete(call, req, args.json, chat)
    except PromptTooLongError as e:   # the prompt does not fit in --n-ctx
        raise UserError(f"{e}: shorten the prompt or raise --n-ctx") from None
    except ContextTooSmallError as e:   # the invariance check's probe does not fit in --n-ctx
        raise UserError(f"{e}: raise --n-ctx or lower --max-draft") from None
    elapsed = time.perf_counter() - t0 - float(spec.last_speculative.get("time_plan_s", 0.0))
    if memory is not None and memory_path is not None:  # the generation's output is in the memory now
        memory.save(memory_path)
        print(f"ngramspec: memory saved to {memory_path} ({len(memory)} tokens)", file=sys.stderr)
    same = True
    if args.compare:
        print("ngramspec: now plain llama-cpp-python on the same request, for comparison...", file=sys.stderr,
              flush=True)
        llm.reset()
        t0 = time.perf_counter()
        plain = llm.create_chat_completion(messages, **req) if chat else llm.create_completion(prompt, **req)
        dt = time.perf_counter() - t0
        ptext = plain["choices"][0]["message"]["content"] if chat else plain["choices"][0]["text"]
        same = ptext == text
        print(f"speed-up: {dt / elapsed:.2f}x over plain llama-cpp-python ({dt:.2f} s plain, {elapsed:.2f} s "
              f"ngramspec){_certifying_note(spec, options)}", file=sys.stderr)
        print(f"identical text: {'yes' if same else 'NO'}", file=sys.stderr)
    print(_tokens_per_pass_line(spec.last_speculative), file=sys.stderr)
    if not same and args.temperature <= 0 and options.exact:
        return 1
    return 0


def _certifying_note(spec: Any, options: EngineOptions) -> str:
    """What --compare's speed-up line adds while exact mode is still certifying verify
    sizes (calibration/certify.py): the first runs on a new model or setting speculate
    with the small sizes only."""
    from ngramspec.calibration.verify_plan import STEPWISE_ORIGIN

    if not options.exact or spec.engine.plan(True).origin != STEPWISE_ORIGIN:
        return ""
    sizes = spec.last_speculative.get("certified_sizes") or []
    done = f"verify sizes up to {max(sizes)}" if sizes else "no verify size yet"
    return f"; exact mode had certified {done}: the next runs certify more (--warmup true: all now)"


def _speculative_llama(llm: Llama, args: argparse.Namespace, engine: EngineOptions, memory: Any,
                       memory_path: Path | None) -> Any:
    """The command's SpeculativeLlama: the engine options, --draft-model, --memory."""
    from ngramspec.integrations.wrapper import SpeculativeLlama

    options: dict[str, Any] = {"options": engine}
    if args.draft_model is not None:  # loaded and checked against the target here, so its errors are one line
        from ngramspec.proposers.draft_model import as_draft_proposer

        try:
            options["draft_model"] = as_draft_proposer(args.draft_model, llm)
        except ValueError as e:
            raise UserError(f"--draft-model: {e}") from None
    if memory is None:
        return SpeculativeLlama(llm, **options)
    from ngramspec.memory.fingerprint import TokenizerMismatchError

    try:
        return SpeculativeLlama(llm, memory=memory, **options)
    except TokenizerMismatchError as e:
        raise UserError(f"--memory {memory_path or ''}: {e}") from None


def engine_options(args: argparse.Namespace) -> EngineOptions:
    """The engine options given on the command line (``--inexact``: ``--exact false``;
    ``--compare``: ``--warmup true`` unless --warmup is given)."""
    try:
        options = from_arguments(args)
    except (TypeError, ValueError) as e:
        raise UserError(f"--{str(e).replace('_', '-')}") from None
    if args.inexact:
        if args.exact is True:
            raise UserError("--inexact and --exact true contradict each other")
        options = options.replace(exact=False)
    if args.compare and args.warmup is None:
        # --compare measures the speed-up: exact mode certifies every verify size first (a
        # progress line; once per model and setting, then cached), so the first run shows
        # what later ones get instead of plain decoding while sizes are left to certify.
        options = options.replace(warmup=True)
    return options


def _open_memory(args: argparse.Namespace) -> tuple[Any, Path | None]:
    """(memory, file to save it to) for --memory/--prime; (None, None) without them.
    --memory FILE loads FILE when it exists (else starts a new memory) and the
    memory is saved back there after the generation; --prime adds files or folders."""
    if args.memory is None and not args.prime:
        return None, None
    from ngramspec.memory.file_format import MemoryFileError, check_save_path
    from ngramspec.memory.store import Memory

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


def _complete(call: Any, req: dict[str, Any], as_json: bool, chat: bool) -> str:
    """Runs the request, printing JSON or streaming the text; returns the text."""
    if as_json:
        out = call(**req)
        text: str = out["choices"][0]["message"]["content"] if chat else out["choices"][0]["text"]
        print(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        parts = []
        for chunk in call(stream=True, **req):
            choice = chunk["choices"][0]
            piece = (choice["delta"].get("content") or "") if chat else choice["text"]
            parts.append(piece)
            print(piece, end="", flush=True)
        print()
        text = "".join(parts)
    return text


def _tokens_per_pass_line(spec: dict[str, Any]) -> str:
    """The run's stats (``last_speculative``) in one line, tokens per pass first, or
    why speculation was not used."""
    if not spec.get("used"):
        reason: str = spec.get("reason", "speculation not used")
        return "ngramspec: " + reason
    n, t = spec["generated_tokens"], spec["time_total_s"]
    line = (f"tokens per pass: {spec['tokens_per_forward']:.2f} ({n} tokens in {spec['forward_passes']} passes, "
            f"{n / t if t else 0:.1f} tok/s; acceptance {spec['acceptance_rate']:.0%} "
            f"({spec['accepted_tokens']}/{spec['drafted_tokens']})")
    used = spec.get("prediction")
    if used:
        line += (f"; prediction: {used.get('accepted_prediction_tokens', 0)} tokens accepted, "
                 f"{used.get('rejected_prediction_tokens', 0)} rejected")
    line += f"; overhead {spec['overhead_per_step_ms']:.2f} ms/pass)"
    if spec.get("time_plan_s", 0.0) >= 0.05:   # exact mode certified verify sizes first (calibration/certify.py)
        line += f"; {spec['time_plan_s']:.1f} s certifying verify sizes first"
    off = spec.get("speculation_off_reason")
    return line + (f"; {off}" if off else "")
