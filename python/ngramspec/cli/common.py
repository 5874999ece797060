"""What several commands share: the default prompt, loading the model, reading
the prompt and the prediction, and the one-line error report."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ngramspec.errors import UserError

#: generate's --max-tokens for a prompt of the user's (the demo has its own).
DEFAULT_MAX_TOKENS = 128

#: The prompt of doctor's trial generations: a code completion any model continues.
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


def print_error(msg: str) -> None:
    """``msg`` on stderr, as one line prefixed with the command's name."""
    print(f"ngramspec: {msg}", file=sys.stderr, flush=True)


def load_model(model: str, n_ctx: int, threads: int | None, seed: int | None = None,
               rpc: str | None = None) -> Any:
    """The command's Llama: ``models.load_llama`` (a name or a GGUF path), onto the
    ``--rpc`` workers if given (then one line on stderr says where the weights went)."""
    from ngramspec.models import load_llama

    llm = load_llama(model, n_ctx=n_ctx, seed=0 if seed is None else seed, n_threads=threads, rpc=rpc)
    if rpc is not None:
        from ngramspec.rpc.loading import placement

        where = placement(llm)
        print(f"ngramspec: model on RPC workers {rpc}: {where.describe() if where else 'placement unknown'}",
              file=sys.stderr, flush=True)
    return llm


def read_text(path: str | None, what: str, *, blank_is_empty: bool, allow_empty: bool = False) -> str:
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


def read_prompt(args: argparse.Namespace) -> str | None:
    """The prompt: --file, the argument, or stdin ("-", or piped in with no argument).
    With no prompt at all (no argument, nothing piped in) it is None (generate runs
    its demo); a prompt that is given but empty (or only whitespace) is an error."""
    if args.file is not None:
        if args.prompt is not None:
            raise UserError("give the prompt as text or with --file, not both")
        return read_text(args.file, "prompt", blank_is_empty=True)
    if args.prompt == "-" or (args.prompt is None and not sys.stdin.isatty()):
        # Piped in without "-": an empty pipe means no prompt (the default), not an error.
        text = read_text(None, "prompt", blank_is_empty=True, allow_empty=args.prompt is None)
        if text.strip():
            return text
    if args.prompt is None:
        return None
    prompt: str = args.prompt
    if not prompt.strip():
        raise UserError("the prompt is empty")
    return prompt


def read_prediction(args: argparse.Namespace) -> str | None:
    """--prediction FILE, or - for stdin: the expected output (OpenAI's predicted
    outputs; whitespace alone is a valid one). stdin cannot carry both the prompt
    and the prediction."""
    if args.prediction is None:
        return None
    if args.prediction == "-" and args.prompt == "-":
        raise UserError("stdin cannot be both the prompt and the prediction: give the prompt as text or "
                        "with --file when the prediction comes from stdin (--prediction -)")
    return read_text(None if args.prediction == "-" else args.prediction, "prediction", blank_is_empty=False)
