"""EngineOptions: each engine option declared once, checked once."""
from __future__ import annotations

import argparse

import pytest

from ngramspec.options import EngineOptions, add_arguments, command_line_options, from_arguments


def test_bad_values_and_unknown_names_are_refused_by_name():
    with pytest.raises(TypeError, match="max_draft must be an int"):
        EngineOptions(max_draft="8")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_draft must be >= 0"):
        EngineOptions().replace(max_draft=-1)
    with pytest.raises(TypeError, match="exact must be True or False"):
        EngineOptions(exact=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unknown engine option.*max_drafts"):
        EngineOptions().replace(max_drafts=8)


@pytest.mark.parametrize("style, flag", [("dash", "--max-draft"), ("underscore", "--max_draft")])
def test_command_line_arguments_come_from_the_fields(style, flag):
    parser = argparse.ArgumentParser()
    add_arguments(parser, style=style)
    by_dest = {a.dest: a for a in parser._actions}
    for name in command_line_options():
        assert EngineOptions.help_of(name) in (by_dest[name].help or "")
    args = parser.parse_args([flag, "16", "--exact" if style == "underscore" else "--exact", "false"])
    assert from_arguments(args) == EngineOptions(max_draft=16, exact=False)
    assert from_arguments(parser.parse_args([])) == EngineOptions()       # nothing given: the defaults
    with pytest.raises(SystemExit):
        parser.parse_args(["--exact", "maybe"])


def _engine_arguments(parser: argparse.ArgumentParser) -> dict[str, tuple[str, str]]:
    """dest -> (flag, help) of the parser's arguments that are engine options."""
    out = {}
    for action in parser._actions:
        if action.dest in command_line_options():
            out[action.dest] = (action.option_strings[0], action.help or "")
    return out


def test_every_front_end_takes_each_option_by_the_same_name_and_help():
    from ngramspec.cli.parser import build_parser
    from ngramspec.server.launch import build_parser as serve_parser

    generate = build_parser()._subparsers._group_actions[0].choices["generate"]  # type: ignore[union-attr,index]
    serve = serve_parser()
    for parser, sep in ((generate, "-"), (serve, "_")):
        found = _engine_arguments(parser)
        assert set(found) == set(command_line_options()), parser.prog
        for name, (flag, help_text) in found.items():
            assert flag == "--" + name.replace("_", sep)
            assert help_text.startswith(EngineOptions.help_of(name)), (parser.prog, name)
    # The engine and wrap take every option, the Python-only ones too, under the field names.
    import inspect

    from ngramspec import SpeculativeEngine, wrap

    for front in (SpeculativeEngine.__init__, wrap):
        assert "options" in inspect.signature(front).parameters


def test_the_commands_give_the_options_to_the_engine(tmp_path):
    from ngramspec.cli.generate import engine_options
    from ngramspec.cli.parser import build_parser
    from ngramspec.errors import UserError
    from ngramspec.server.launch import build_parser as serve_parser
    from ngramspec.server.launch import settings_from_args

    parse = build_parser().parse_args
    assert engine_options(parse(["generate", "hi", "--max-draft", "5", "--copy", "false"])) == \
        EngineOptions(max_draft=5, copy=False)
    assert engine_options(parse(["generate", "hi", "--inexact"])) == EngineOptions(exact=False)
    with pytest.raises(UserError, match="--max-draft must be >= 0"):
        engine_options(parse(["generate", "hi", "--max-draft", "-1"]))
    with pytest.raises(UserError, match="contradict"):
        engine_options(parse(["generate", "hi", "--inexact", "--exact", "true"]))
    model = tmp_path / "m.gguf"    # a path is taken as it is: nothing is loaded here
    model.write_bytes(b"GGUF")
    args = serve_parser().parse_args(["--model", str(model), "--window", "256", "--exact", "false"])
    assert settings_from_args(args)[2].engine == EngineOptions(window=256, exact=False)
    with pytest.raises(UserError, match="--min_order must be >= 1"):
        settings_from_args(serve_parser().parse_args(["--model", str(model), "--min_order", "0"]))
