"""One spelling for every command: each long option also answers to its other
spelling, so the options the commands share are typed the same way everywhere.

``ngramspec generate``, ``doctor``, ``bench`` and ``rpc-worker`` spell their options
with dashes (``--n-ctx``, ``--max-draft``), ``ngramspec serve`` with underscores as
llama-cpp-python's server does (``--n_ctx``, ``--max_draft``); each also takes the
other spelling, and the short and long names of the thread count (``--threads``,
``--n_threads``, ``--n-threads``) are one option. The help shows each command's own
spelling only: the other is an alias of the same argparse action, registered in the
parser's table of option strings (as ``add_argument`` registers its own), so it
parses to the same destination with the same type, checks and errors.
"""
from __future__ import annotations

import argparse
from collections.abc import Iterable

__all__ = ["ALIAS_GROUPS", "OTHER_SPELLINGS_NOTE", "add_other_spellings", "other_spelling"]

#: Names that are one option wherever a command has one of them: the thread count's,
#: ``--threads`` (the ngramspec commands') and ``--n_threads`` (llama-cpp-python's
#: server's), in either spelling.
ALIAS_GROUPS = (("--threads", "--n-threads", "--n_threads"),)

#: What each parser's help says about the spellings it does not show.
OTHER_SPELLINGS_NOTE = ("Every option also takes its other spelling: dashes or underscores (--n-ctx or --n_ctx, "
                        "--max-draft or --max_draft), and --threads, --n-threads and --n_threads are one option.")


def other_spelling(option: str) -> str | None:
    """``--n_ctx`` for ``--n-ctx`` and the reverse; None for an option with neither."""
    if not option.startswith("--"):
        return None
    name = option[2:]
    if "_" in name:
        return "--" + name.replace("_", "-")
    if "-" in name:
        return "--" + name.replace("-", "_")
    return None


def add_other_spellings(parser: argparse.ArgumentParser, *, skip: Iterable[str] = ()) -> None:
    """Registers on ``parser`` (and on each of its subcommands' parsers) the other
    spelling of every long option it has, and the other names of its group in
    ``ALIAS_GROUPS`` of an option there, where the parser does not already
    use that string for something else, and says so at the end of its help (unless
    it has an epilog of its own). ``skip``: option strings left as they are (one
    whose other spelling would mean something else in another command)."""
    skipped = set(skip)
    groups = {option: group for group in ALIAS_GROUPS for option in group}
    table = parser._option_string_actions
    for action in list(parser._actions):
        if isinstance(action, argparse._SubParsersAction):
            for sub in set(action.choices.values()):
                add_other_spellings(sub, skip=skipped)
            continue
        wanted: list[str] = []
        for option in action.option_strings:
            if option in skipped:
                continue
            for alias in groups.get(option, (option,)):
                wanted += [alias, other_spelling(alias) or alias]
        for alias in wanted:
            if alias not in table:
                table[alias] = action
    if parser.epilog is None:
        kept = sorted(skipped & set(table))
        parser.epilog = OTHER_SPELLINGS_NOTE + (f" Except {', '.join(kept)}, spelled only so." if kept else "")
