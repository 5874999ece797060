"""The engine's options, each declared once: its name, type, default and help.

``EngineOptions`` is what ``SpeculativeEngine``, ``wrap``, ``ngramspec serve`` and
``ngramspec generate`` take: the engine and the wrapper as keywords (or an
``EngineOptions``), the commands as arguments made from the same fields
(``add_arguments`` / ``from_arguments``), so a name and its help are written here
and nowhere else. The options whose values are Python objects (an invariance
report, a Memory, a draft model, a policy instance) are Python-only; the commands
offer their own ways to give them (``--memory FILE``, ``--draft-model NAME``).
"""
from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

from ngramspec.arg_checks import checked_int

__all__ = ["DEFAULT_MAX_DRAFT", "EngineOptions", "add_arguments", "command_line_options", "from_arguments",
           "parse_bool"]

# The policy prices every length against the cost curve and the acceptance it has
# seen, so the cap only bounds what a long copy may draft: 64, as llama.cpp's own
# n-gram drafters (docs/performance.md has the long-output measurements).
DEFAULT_MAX_DRAFT = 64


def _option(default: Any, help: str, *, command_line: bool = True, minimum: int | None = None) -> Any:
    return field(default=default, metadata={"help": help, "command_line": command_line, "minimum": minimum})


@dataclass(frozen=True)
class EngineOptions:
    """How a ``SpeculativeEngine`` drafts and verifies (each field's help is its doc)."""

    exact: bool = _option(
        True, "verify only with batch sizes found bit-exact on this model and build, so greedy text equals plain "
              "decoding (false: fast mode, every size, text may leave plain's at near-ties)")
    max_draft: int = _option(
        DEFAULT_MAX_DRAFT, "most draft tokens verified in one pass (0: plain decoding)", minimum=0)
    adaptive: Any = _option(
        True, "choose each draft and its length by expected tokens per unit of verify time (false: verify every "
              "allowed token of the longest match); a CostAwarePolicy uses that policy", command_line=False)
    min_order: int = _option(2, "shortest context the n-gram tables draft from", minimum=1)
    max_order: int = _option(4, "longest context the n-gram tables draft from", minimum=1)
    window: int = _option(512, "tokens of recent text the n-gram tables count", minimum=1)
    ngram: bool = _option(
        True, "draft from n-gram tables of the recent text (false, with copy false: only a memory, a draft model "
              "or a prediction drafts)")
    copy: bool = _option(True, "also draft long copies of what followed the longest earlier match of the context")
    trace: bool = _option(False, "record every pass in the stats' trace (source, offered, verified, accepted, time)")
    invariance_cache: bool = _option(
        True, "keep the measured invariance verdict and cost curve on disk per model, build and context settings")
    warmup: bool = _option(
        False, "certify every verify batch size and measure the verify-cost curve when the engine is made (or the "
               "server starts), about a minute on a 2-core CPU, instead of a few seconds at the start of each of the "
               "first requests, smallest sizes first")
    progress: Any = _option(
        "bar", "how a check that keeps the caller waiting over 2 s shows itself: 'bar' (tqdm on stderr), 'log' "
               "(logging records, as the server does) or 'off'", command_line=False)
    invariance: Any = _option(
        None, "an InvarianceReport (check_batch_invariance) to use instead of measuring one", command_line=False)
    memory: Any = _option(
        None, "an ngramspec.Memory to draft from and add outputs to (None or False: none)", command_line=False)
    draft_model: Any = _option(
        None, "a smaller model with the same vocabulary to draft with: a llama_cpp.Llama, a GGUF path, a model "
              "name or a DraftModelProposer", command_line=False)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type == "int" or f.type is int:
                checked_int(value, f.name, minimum=f.metadata["minimum"])
            elif (f.type == "bool" or f.type is bool) and not isinstance(value, bool):
                raise TypeError(f"{f.name} must be True or False, got {type(value).__name__}")
        from ngramspec.calibration.progress import style_of

        style_of(self.progress)   # ValueError names the styles

    def replace(self, **changes: Any) -> EngineOptions:
        """These options with ``changes``; TypeError names an unknown option."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise TypeError(f"unknown engine option(s) {', '.join(unknown)}; the options are "
                            f"{', '.join(sorted(names))}")
        return dataclasses.replace(self, **changes)

    @staticmethod
    def help_of(name: str) -> str:
        """An option's help, as every front end shows it."""
        return str(_FIELDS[name].metadata["help"])


_FIELDS = {f.name: f for f in dataclasses.fields(EngineOptions)}


def command_line_options() -> list[str]:
    """The options a command line can set (the rest are Python objects)."""
    return [name for name, f in _FIELDS.items() if f.metadata["command_line"]]


def parse_bool(text: str) -> bool:
    """``true``/``false`` (also 1/0, yes/no, on/off) as a command line spells a boolean."""
    value = text.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def add_arguments(parser: argparse.ArgumentParser | Any, *, style: str = "dash",
                  names: list[str] | None = None) -> None:
    """Adds one argument per command-line option (``names``: those only), spelled
    ``--max-draft`` (style "dash", the ``ngramspec`` command's) or ``--max_draft``
    (style "underscore", llama-cpp-python's server's), each with the field's help and
    its default, and ``true|false`` values for the booleans."""
    for name in names or command_line_options():
        f = _FIELDS[name]
        flag = "--" + (name.replace("_", "-") if style == "dash" else name)
        kind: Callable[[str], Any] = parse_bool if f.type in ("bool", bool) else int
        metavar = "true|false" if kind is parse_bool else "N"
        parser.add_argument(flag, dest=name, type=kind, default=None, metavar=metavar,
                            help=f"{f.metadata['help']} (default: {str(f.default).lower()})")


def from_arguments(args: argparse.Namespace, base: EngineOptions | None = None) -> EngineOptions:
    """The options ``add_arguments`` read (those not given keep ``base``'s, or the defaults)."""
    given = {name: getattr(args, name) for name in command_line_options()
             if getattr(args, name, None) is not None}
    return (base or EngineOptions()).replace(**given)
