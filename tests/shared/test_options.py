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
