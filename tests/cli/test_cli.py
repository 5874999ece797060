"""The ngramspec command, end to end through subprocess."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ngramspec.suite.methods import MEASURED_MAX_BATCH
from tests.support.cli import EXE, TEST_THREADS, ngramspec
from tests.support.prompts import PROMPTS

run = ngramspec


def test_generate_streams_and_reports_stats(llm):
    p = run("generate", PROMPTS["list"], "--max-tokens", "24", "--compare")
    assert p.returncode == 0, p.stderr
    llm.reset()
    ref = llm.create_completion(PROMPTS["list"], max_tokens=24, temperature=0.0)["choices"][0]["text"]
    llm.reset()
    assert p.stdout == ref + "\n"
    assert "tokens per pass: " in p.stderr and "identical text: yes" in p.stderr
    assert "Traceback" not in p.stderr


def test_generate_from_stdin_and_file_with_json(tmp_path: Path, llm):
    p = run("generate", "-", "--max-tokens", "8", "--json", stdin=PROMPTS["json"])
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["object"] == "text_completion" and out["usage"]["completion_tokens"] == 8
    assert out["speculative"]["used"] is True
    f = tmp_path / "prompt.txt"
    f.write_text(PROMPTS["json"], encoding="utf-8")
    q = run("generate", "--file", str(f), "--max-tokens", "8", "--json")
    assert q.returncode == 0, q.stderr
    assert json.loads(q.stdout)["choices"][0]["text"] == out["choices"][0]["text"]


def _stderr_tail(stderr: str) -> list[str]:
    """generate --compare's last three lines: speed-up, identity, tokens per pass."""
    return [line for line in stderr.splitlines() if line.strip()][-3:]


def test_demo_streams_the_edit_then_speed_up_identity_and_tokens_per_pass(llm):
    from ngramspec.cli.demo import demo

    p = run("generate", "--compare", "--max-tokens", "40")      # no prompt: the demo, on the test model
    assert p.returncode == 0, p.stderr
    assert p.stderr.startswith("ngramspec: demo on smollm2-135m: the model adds a function to "
                               "ngramspec/json_checks.py"), p.stderr
    task = demo()
    llm.reset()
    plain = llm.create_chat_completion(task.messages, max_tokens=40, temperature=0)["choices"][0]["message"]
    llm.reset()
    assert p.stdout == plain["content"] + "\n"
    speed_up, identical, per_pass = _stderr_tail(p.stderr)
    assert speed_up.startswith("speed-up: ") and "x over plain llama-cpp-python (" in speed_up, speed_up
    assert float(speed_up.split()[1].rstrip("x")) > 0
    assert identical == "identical text: yes"
    assert per_pass.startswith("tokens per pass: ") and "prediction: " in per_pass, per_pass
    assert "Traceback" not in p.stderr


def test_compare_certifies_every_size_first_on_a_fresh_cache(smollm2_path, invariance_cache_dir):
    # The main job (README's first command) is --compare: on a new model or setting its
    # first run decoded plainly or with sizes 2-4 while the rest were left to certify,
    # and printed about 1.0x; now every size is certified before the timed run.
    p = run("generate", PROMPTS["json"], "--model", smollm2_path, "--max-tokens", "32", "--compare")
    assert p.returncode == 0, p.stderr
    speed_up, identical, per_pass = _stderr_tail(p.stderr)
    assert "had certified" not in speed_up and "certifying verify sizes first" not in per_pass, p.stderr
    assert identical == "identical text: yes"
    assert len(list(invariance_cache_dir.glob("*.json"))) == 1       # the whole check, stored


@pytest.mark.model
def test_demo_on_the_default_model_answers_sensibly():
    """README's first command, as it runs after set-up: the default model (not the
    tests' SmolLM2, which loops on this edit) adds the function and keeps the file."""
    from ngramspec.models import DEFAULT_MODEL

    p = run("generate", "--compare", "--model", DEFAULT_MODEL, timeout=900)
    assert p.returncode == 0, p.stderr
    answer = p.stdout
    assert answer.count("```") == 2 and "def is_text(x" in answer, answer
    for kept in ("def is_int(x: Any) -> TypeGuard[int]:", "def is_number(x: Any) -> TypeGuard[float]:",
                 "from __future__ import annotations"):
        assert kept in answer, answer
    assert "isinstance(x, str)" in answer.split("def is_text(", 1)[1], answer
    speed_up, identical, per_pass = _stderr_tail(p.stderr)
    assert identical == "identical text: yes", p.stderr
    assert speed_up.startswith("speed-up: ") and per_pass.startswith("tokens per pass: "), p.stderr


def test_generate_chat_and_sampled(smollm2_path):
    p = run("generate", "Name a colour.", "--chat", "--max-tokens", "12")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip()
    q = run("generate", "Name a colour.", "--temperature", "0.7", "--seed", "3", "--max-tokens", "8")
    assert q.returncode == 0, q.stderr
    assert "tokens per pass: " in q.stderr


def test_doctor(smollm2_path):
    p = run("doctor", "--max-batch", "6")
    assert p.returncode == 0, p.stderr
    assert "batch  invariant" in p.stdout and "verify cost" in p.stdout
    assert "exact speculation POSSIBLE" in p.stdout
    # The exact build (this venv): a verdict per mode, from a trial of each.
    assert "an exact build" in p.stdout
    exact = next(line for line in p.stdout.splitlines() if line.strip().startswith("exact mode:"))
    fast = next(line for line in p.stdout.splitlines() if line.strip().startswith("fast mode"))
    assert "verifies with sizes 1, 2, 3, 4, 5, 6" in exact and "identical text" in exact, exact
    assert "x plain's tokens per second" in fast and "tokens per pass" in fast, fast
    assert "first divergences from plain: " in fast and "per 1,000" in fast, fast


WORKLOAD_NAMES = ["code_completion", "code_editing", "structured_extraction", "grounded_qa", "open_prose",
                  "multi_turn_chat"]


def test_bench_quick_writes_a_well_formed_report(tmp_path: Path, smollm2_path):
    p = run("bench", "--quick", "--threads", str(TEST_THREADS), "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr
    md = (tmp_path / "suite-smollm2-135m-quick.md").read_text()
    assert md.strip() in p.stdout
    for name in WORKLOAD_NAMES:
        row = next(line for line in md.splitlines() if line.startswith(f"| {name} |"))
        assert "ngramspec: yes" in row, row          # greedy speculation stayed exact
    assert "| **geometric mean** |" in md and "## Peak RSS" in md and "HumanEval" in md and "iso3166.tab" in md
    data = json.loads((tmp_path / "suite-smollm2-135m-quick.json").read_text(),
                      parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert [w["name"] for w in data["workloads"]] == WORKLOAD_NAMES
    assert data["methods"] == ["plain", "prompt lookup", "ngramspec"]
    assert len(data["runs"]) == 3 * len(WORKLOAD_NAMES)
    for w in data["workloads"]:
        # The perfect drafter bounds the copy oracle, which cannot lose to plain decoding.
        assert 1.0 <= w["limit_speedup"] <= w["perfect_speedup"]
        assert w["methods"]["ngramspec"]["identical"] is True
        assert w["methods"]["plain"]["decode_tok_s"] > 0
    assert data["verify_cost"][0] == 1.0 and len(data["verify_cost"]) == MEASURED_MAX_BATCH
    assert data["llama_settings"] == {"n_gpu_layers": 0, "flash_attn": False}
    assert set(data["peak_rss_mib"]) == {"plain", "prompt lookup", "ngramspec"}
    assert all(v > 50 for v in data["peak_rss_mib"].values())
    for plot in ["speedup", "acceptance", "tokens-per-pass", "verify-cost"]:
        png = tmp_path / f"suite-smollm2-135m-quick-{plot}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"({png.name})" in md
    from ngramspec.suite import headline

    rows = headline.table(data)
    assert len(rows) == 2 + len(WORKLOAD_NAMES) and rows[0].startswith("| workload | plain tok/s | prompt lookup |")
    assert all(r.endswith("| yes |") for r in rows[2:])


@pytest.mark.parametrize("args, needle", [
    (["generate", "--model", "no-such-model"], "neither a file nor one of"),
    (["generate", "x", "--max-tokens", "0"], "--max-tokens must be >= 1"),
    (["generate", "x", "--file", "/no/such/file"], "not both"),
    (["generate", "--file", "/no/such/file"], "cannot read prompt file"),
    (["generate", "--max-tokens", "many"], "invalid int value"),
    (["bench", "--rounds", "0"], "must be >= 1"),
    (["bench", "--threads", "0"], "--threads must be >= 1"),
    (["bench", "--n-gpu-layers", "-2"], "--n-gpu-layers must be >= -1"),
    (["doctor", "--threads", "0"], "--threads must be >= 1"),
    (["doctor", "--max-batch", "0"], "--max-batch must be >= 1"),
    (["bench", "--server-modes", "ngram-fast"], "unknown mode(s) ['ngram-fast']"),
    (["bench", "--llama-server", "/no/such/llama-server"], "no such file"),
    (["bench", "--methods", "plain,ngramspec turbo"], "unknown ['ngramspec turbo']"),
    (["bench", "--methods", "ngramspec"], "plain is required"),
    # Without ngramspec the report (its limit, detail and llama-server comparison) cannot be
    # written: refused before the run, not after it.
    (["bench", "--methods", "plain,ngramspec fast"], "ngramspec is required"),
    (["frobnicate"], "invalid choice"),
    (["generate", "x", "--temperature", "nan"], "--temperature must be a finite number"),
    (["generate", "x", "--prime", ""], "--prime: prime: an empty path"),
    # No abbreviations: a prefix of an option is an error, not that option.
    (["generate", "x", "--max-tok", "3"], "unrecognized arguments: --max-tok"),
    (["bench", "--serv"], "unrecognized arguments: --serv"),
    (["serve", "--model", "smollm2-135m", "--port", "99999"], "--port must be in 0..65535"),
])
def test_bad_arguments_get_one_clear_line(args, needle):
    p = run(*args, timeout=120)
    assert p.returncode != 0
    assert needle in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("args, stdin, needle", [
    (["generate", "-", "--json"], "", "the prompt on stdin is empty"),
    (["generate", "-"], " \n\t\n", "the prompt on stdin is empty"),
    (["generate", ""], "", "the prompt is empty"),
    (["generate", "  ", "--json"], "", "the prompt is empty"),
    (["generate", "x", "--max-draft", "-1"], "", "--max-draft must be >= 0"),
    (["generate", "x", "--threads", "0"], "", "--threads must be >= 1"),
    (["generate", "x", "--n-ctx", "-5"], "", "--n-ctx must be 0"),
])
def test_empty_or_invalid_generate_input_is_exit_2(args, stdin, needle):
    """An empty prompt is an error, not a run on the built-in default prompt."""
    p = run(*args, stdin=stdin, timeout=120)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert needle in p.stderr
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    assert p.stdout == ""


def test_empty_or_undecodable_prompt_files_and_stdin(tmp_path: Path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    p = run("generate", "--file", str(empty), timeout=120)
    assert p.returncode == 2 and "is empty" in p.stderr and "Traceback" not in p.stderr
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("caf\xe9".encode("latin-1"))
    q = run("generate", "--file", str(latin), timeout=120)
    assert q.returncode == 2 and "not UTF-8" in q.stderr and "Traceback" not in q.stderr
    r = subprocess.run(EXE + ["generate", "-"], input=b"\xff\xfe\xfa", capture_output=True, timeout=120)
    assert r.returncode == 2 and b"stdin is not UTF-8" in r.stderr and b"Traceback" not in r.stderr


def test_model_that_is_not_a_gguf_file_is_one_line(tmp_path: Path):
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    p = run("generate", "x", "--model", str(notes), timeout=120)
    assert p.returncode == 2 and "not a GGUF file" in p.stderr and "Traceback" not in p.stderr
    q = run("generate", "x", "--model", str(tmp_path), timeout=120)
    assert q.returncode == 2 and "a directory, not a file" in q.stderr and "Traceback" not in q.stderr


def test_prompt_longer_than_the_context_is_one_line(smollm2_path):
    p = run("generate", "word " * 200, "--n-ctx", "64", "--max-draft", "0", "--model", smollm2_path, timeout=300)
    assert p.returncode == 2, p.stderr
    assert "context window" in p.stderr and "--n-ctx" in p.stderr and "Traceback" not in p.stderr


def test_bench_out_is_checked_before_benchmarking(tmp_path: Path):
    """A --out that cannot take the report fails at once, not after the run."""
    existing = tmp_path / "report.md"
    existing.write_text("keep me")
    p = run("bench", "--quick", "--out", str(existing), timeout=60)
    assert p.returncode == 2, p.stderr
    assert "exists and is not a directory" in p.stderr and "Traceback" not in p.stderr
    assert existing.read_text() == "keep me"
    q = run("bench", "--quick", "--out", "/proc/ngramspec-no-such-dir/out", timeout=60)
    assert q.returncode == 2 and "cannot write the report there" in q.stderr and "Traceback" not in q.stderr


def test_only_user_errors_are_one_line_a_bug_keeps_its_traceback(monkeypatch, capsys):
    """Main() no longer turns every ValueError/TypeError into exit code 2."""
    from ngramspec import models
    from ngramspec.cli import generate, main
    from ngramspec.errors import UserError

    def raising(exc):
        def command(args):
            raise exc
        return command

    errors: list[Exception] = [UserError("bad input"), models.ModelFetchError("no cache"),
                               models.ModelLoadError("no model")]
    for exc in errors:
        monkeypatch.setattr(generate, "run", raising(exc))
        assert main(["generate", "x"]) == 2
        assert capsys.readouterr().err == f"ngramspec: error: {exc}\n"
    for exc in [ValueError("a bug"), TypeError("a bug"), NotImplementedError("a bug"), FileNotFoundError("a bug")]:
        monkeypatch.setattr(generate, "run", raising(exc))
        with pytest.raises(type(exc)):
            main(["generate", "x"])


@pytest.mark.parametrize("cmd", ["generate", "doctor", "bench"])
def test_help(cmd):
    p = run(cmd, "--help", timeout=60)
    assert p.returncode == 0 and "usage: ngramspec " + cmd in p.stdout
