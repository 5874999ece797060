"""One spelling: every command takes each option both with dashes and with
underscores (and --threads / --n_threads as one option); the help shows one."""
from __future__ import annotations

import argparse
import re

import pytest

from ngramspec.cli.main import main
from ngramspec.cli.parser import build_parser
from ngramspec.server.launch import build_parser as build_serve_parser
from ngramspec.server.launch import settings_from_args
from tests.support.cli import ngramspec


def parsers() -> dict[str, argparse.ArgumentParser]:
    """Every command's parser: the ngramspec command's subcommands, and serve's own."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    out = {name: p for name, p in sub.choices.items() if name != "serve"}
    out["serve"] = build_serve_parser()
    return out


def set_by(parser: argparse.ArgumentParser, lead: list[str], option: str) -> tuple[list[str], dict]:
    """Arguments for ``option`` that change what ``parser`` parses, and that parse."""
    base = vars(parser.parse_args(lead))
    action = parser._option_string_actions[option]
    tries = [[]] if action.nargs == 0 else [[str(c)] for c in action.choices or ()] + [
        ["7"], ["true"], ["false"], ['{"a": 1}'], ["x"]]
    for value in tries:
        try:
            got = vars(parser.parse_args([*lead, option, *value]))
        except SystemExit:
            continue
        if got != base:
            return value, got
    raise AssertionError(f"no value of {option} changes the parse")


def other(option: str) -> str:
    name = option[2:]
    return "--" + (name.replace("_", "-") if "_" in name else name.replace("-", "_"))


@pytest.mark.parametrize("command", ["generate", "doctor", "bench", "install-llama", "serve"])
def test_every_option_takes_its_other_spelling(command):
    parser = parsers()[command]
    lead = ["x"] if command == "generate" else []
    checked = 0
    for action in parser._actions:
        for option in action.option_strings:
            if not option.startswith("--") or not {"-", "_"} & set(option[2:]) or option == "--draft_model":
                continue
            value, want = set_by(parser, lead, option)
            assert vars(parser.parse_args([*lead, other(option), *value])) == want, (command, option)
            checked += 1
    assert checked >= {"generate": 7, "doctor": 3, "bench": 9, "install-llama": 2, "serve": 53}[command]


@pytest.mark.parametrize("command, names, dest", [
    ("generate", ["--threads", "--n-threads", "--n_threads"], "threads"),
    ("doctor", ["--threads", "--n-threads", "--n_threads"], "threads"),
    ("bench", ["--threads", "--n-threads", "--n_threads"], "threads"),
    ("rpc-worker", ["--threads", "--n-threads", "--n_threads"], "threads"),
    ("serve", ["--n_threads", "--n-threads", "--threads"], "n_threads"),
    ("generate", ["--n-ctx", "--n_ctx"], "n_ctx"),
    ("doctor", ["--n-ctx", "--n_ctx"], "n_ctx"),
    ("serve", ["--n_ctx", "--n-ctx"], "n_ctx"),
    ("generate", ["--max-draft", "--max_draft"], "max_draft"),
    ("serve", ["--max_draft", "--max-draft"], "max_draft"),
    ("bench", ["--n-gpu-layers", "--n_gpu_layers"], "n_gpu_layers"),
    ("serve", ["--n_gpu_layers", "--n-gpu-layers"], "n_gpu_layers"),
])
def test_the_shared_options_are_spelled_alike_in_every_command(command, names, dest):
    parser = parsers()[command]
    lead = ["x"] if command == "generate" else []
    for name in names:
        assert getattr(parser.parse_args([*lead, name, "3"]), dest) == 3, name
        assert getattr(parser.parse_args([*lead, f"{name}=5"]), dest) == 5, name


def option_lines(help_text: str) -> str:
    """The help's option list, without the closing note (which names both spellings)."""
    return help_text.split("Every option also takes")[0]


def test_the_help_shows_one_spelling():
    p = parsers()
    generate = option_lines(p["generate"].format_help())
    assert re.search(r"--n-ctx N_CTX", generate) and "--n_ctx" not in generate
    assert "--threads THREADS" in generate and "n_threads" not in generate and "--n-threads" not in generate
    assert "--max-draft N" in generate and "--max_draft" not in generate
    serve = option_lines(p["serve"].format_help())
    assert "--n_ctx N_CTX" in serve and "--n-ctx" not in serve
    assert "--n_threads N_THREADS" in serve and "--threads" not in serve and "--n-threads" not in serve
    assert "--max_draft N" in serve and "--max-draft" not in serve
    for name, parser in p.items():
        assert "Every option also takes its other spelling" in parser.format_help(), name


def test_serve_keeps_llama_cpp_pythons_draft_model_to_its_own_spelling(capsys):
    # generate's --draft-model is a second model drafting; llama-cpp-python's
    # --draft_model is its prompt-lookup decoder: serve takes no dashed spelling of it.
    with pytest.raises(SystemExit):
        build_serve_parser().parse_args(["--draft-model", "x.gguf"])
    assert "unrecognized arguments: --draft-model" in capsys.readouterr().err
    assert build_serve_parser().parse_args(["--draft_model", "prompt-lookup-decoding"]).draft_model


def test_serve_settings_read_the_dashed_spellings(smollm2_path):
    args = build_serve_parser().parse_args(["--model", smollm2_path, "--n-ctx", "512", "--threads", "1",
                                            "--n-threads-batch", "1", "--max-draft", "5", "--max-queue", "3"])
    _, model_settings, options, _ = settings_from_args(args)
    assert (model_settings.n_ctx, model_settings.n_threads, model_settings.n_threads_batch) == (512, 1, 1)
    assert options.engine.max_draft == 5 and options.max_queue == 3


def test_a_bad_value_under_the_other_spelling_is_named_in_the_error(capsys):
    assert main(["generate", "x", "--n_threads", "0"]) == 2
    assert capsys.readouterr().err.strip() == "ngramspec: error: --threads must be >= 1"
    with pytest.raises(SystemExit) as e:
        main(["generate", "x", "--n_ctx", "many"])
    assert e.value.code == 2
    assert "argument --n-ctx: invalid int value: 'many'" in capsys.readouterr().err


def test_generate_runs_with_serves_spellings(llm):
    prompt = "one two three four, one two three four, one two three four,"
    p = ngramspec("generate", prompt, "--n_ctx", "256", "--n_threads", "1", "--max_tokens", "12", "--max_draft",
                  "4", "--compare")
    assert p.returncode == 0, p.stderr
    llm.reset()
    want = llm.create_completion(prompt, max_tokens=12, temperature=0.0)["choices"][0]["text"]
    llm.reset()
    assert p.stdout == want + "\n"
    assert "identical text: yes" in p.stderr
