"""Every script in bench/ on its smallest setting (bench/README.md lists them).

Each test runs a script's ``main`` in this process (as ``python bench/X.py ARGS``
would, with ``sys.argv`` set), or as a command where the script is one (the
pytest-benchmark files, kernel_cost_ab.py's subprocesses), on SmolLM2-135M with a
few tokens, one round and a short draft cap, and asserts on what it printed or
wrote. A script that needs a llama-server binary, a stock venv, or minutes whatever
its setting, is run as far as it can be without them: its --help, and one of its
functions (bench/README.md says which). bench/replay.py is tested in
tests/suite/test_replay_tool.py and tests/builds/test_gpu_run.py.

Tiers: the tests that load a model ask for ``smollm2_path`` (or ``llm``), which marks
them ``model`` (tests/conftest.py); the others load none.
"""
from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
MODEL = "smollm2-135m"   # by name: the smollm2_path fixture has fetched it into the model cache


def script(name: str) -> ModuleType:
    """bench/<name>.py as a module (pyproject.toml puts bench/ on the tests' path)."""
    return importlib.import_module(name)


def run_main(name: str, args: list[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """``python bench/<name>.py ARGS`` in this process: main's return value, or the
    code SystemExit carried."""
    mod = script(name)
    monkeypatch.setattr(sys, "argv", [str(BENCH / f"{name}.py"), *args])
    try:
        return mod.main()
    except SystemExit as e:
        return e.code


def run_command(args: list[str], timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """A command from the repository root with tests/ and bench/ importable, as
    bench/README.md runs them."""
    path = os.pathsep.join([str(ROOT), str(BENCH), *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": path})


# ---- no model ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["draft_model_run", "rpc_speed", "rpc_guard_cost", "rpc_driver_threads"])
def test_help(name, monkeypatch, capsys):
    assert run_main(name, ["--help"], monkeypatch) == 0
    assert "usage:" in capsys.readouterr().out


def test_edit_replay_replays_its_committed_tokens(monkeypatch, capsys):
    assert run_main("edit_replay", [str(RESULTS / "edit-replay-qwen2.5-coder-0.5b.json")], monkeypatch) == 0
    out = capsys.readouterr().out
    rows = {m[0]: [int(x) for x in m[1:]] for m in re.findall(r"^\| (\S+) \| (\d+) \| (\d+) \| (\d+) \|$", out, re.M)}
    assert len(rows) == 14 and "demo" in rows and "total" in rows
    with_set, without, hindsight = rows["demo"]
    assert hindsight < with_set < without   # what bench/results/edit-replay-qwen2.5-coder-0.5b.md reports
    # and the report holds this very table
    assert out.strip() in (RESULTS / "edit-replay-qwen2.5-coder-0.5b.md").read_text()


def test_edit_replay_perfect_column_bounds_every_replay(monkeypatch, capsys):
    assert run_main("edit_replay", [str(RESULTS / "edit-replay-qwen2.5-coder-0.5b.json"), "--perfect"],
                    monkeypatch) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^\| (\S+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|$", out, re.M)
    assert len(rows) == 14 and "every draft token right" in out
    for name, *ms in rows:
        with_set, without, hindsight, perfect = (int(x) for x in ms)
        # No drafter verifies the output in less time than every token drafted right.
        assert 0 < perfect <= min(with_set, without, hindsight), name


def test_plain_path_cost_without_a_server_prints_its_usage(monkeypatch):
    # It needs a llama-server binary (scripts/build_llama_server.py): without one, its usage.
    code = run_main("plain_path_cost", [], monkeypatch)
    assert isinstance(code, str) and "LLAMA_SERVER" in code and "plain_path_cost.py" in code


def test_server_comparison_renders_the_section_its_report_holds(monkeypatch, capsys):
    report = RESULTS / "suite-builds-smollm2-135m-3rounds-fresh-servers"
    run_main("server_comparison", [str(report.with_suffix(".json"))], monkeypatch)
    out = capsys.readouterr().out.strip()
    md = report.with_suffix(".md").read_text()
    start = md.index("## ngramspec against llama.cpp's own n-gram modes")
    end = md.index("(This section was rendered from the JSON by `bench/server_comparison.py`")
    assert out == md[start:end].strip()


def test_draft_model_run_renders_its_reports_again(tmp_path, monkeypatch):
    for stem in ("draft-model-qwen2.5-coder-1.5b", "draft-model-qwen2.5-coder-1.5b-probe-every-32"):
        data = shutil.copy(RESULTS / f"{stem}.json", tmp_path)
        assert run_main("draft_model_run", ["--render", str(data)], monkeypatch) == 0
        assert (tmp_path / f"{stem}.md").read_text() == (RESULTS / f"{stem}.md").read_text()


def test_draft_model_run_writes_into_a_folder_it_makes(tmp_path):
    data = json.loads((RESULTS / "draft-model-qwen2.5-coder-1.5b.json").read_text())
    path = script("draft_model_run").write_report(tmp_path / "new" / "folder", "qwen2.5-coder-1.5b", data)
    assert json.loads(path.read_text()) == data
    assert path.with_suffix(".md").read_text() == (RESULTS / "draft-model-qwen2.5-coder-1.5b.md").read_text()


def test_rpc_speed_renders_its_reports_again():
    # The reports' machine lines were completed by hand after the runs; the rest is the script's.
    markdown = script("rpc_speed").markdown
    for model in ("smollm2-135m", "qwen2.5-coder-0.5b"):
        got = markdown(json.loads((RESULTS / f"rpc-{model}.json").read_text())).splitlines()
        want = (RESULTS / f"rpc-{model}.md").read_text().splitlines()
        assert len(got) == len(want)
        assert [a for a, b in zip(got, want) if a != b and not a.startswith("- Machine:")] == []


def test_rpc_relay_rtt(monkeypatch, capsys):
    run_main("rpc_relay_rtt", ["--rtt", "1", "--repeats", "5"], monkeypatch)
    out = capsys.readouterr().out
    direct = re.search(r"^direct: ([\d.]+) ms", out, re.M)
    through = re.search(r"^relay of 1 ms: ([\d.]+) ms", out, re.M)
    assert direct and through, out
    assert float(through.group(1)) > float(direct.group(1))


def test_predictor_speed_benchmarks_run():
    p = run_command([sys.executable, "-m", "pytest", "bench/test_predictor_speed.py", "--benchmark-only",
                     "--benchmark-max-time", "0.05", "-q", "-p", "no:cacheprovider"])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert "4 passed" in p.stdout and "test_update_batch_per_token[random]" in p.stdout


def test_suite_benchmark_covers_the_suites_workloads():
    # Running it is running the suite (minutes; the suite's own tests are in tests/suite/): here, that
    # it imports and has one test per workload of `ngramspec bench`.
    from ngramspec.suite.sources import DEFAULT_WORKLOADS

    assert list(DEFAULT_WORKLOADS) == script("test_suite").WORKLOADS


# ---- on SmolLM2-135M --------------------------------------------------------------


def test_engine_overhead_benchmark_runs(smollm2_path):
    p = run_command([sys.executable, "-m", "pytest", "bench/test_engine_overhead.py", "--benchmark-disable",
                     "-q", "-s", "-p", "no:cacheprovider", "-k", "code_edit and eager"])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert "1 passed" in p.stdout and re.search(r"code_edit/eager: overhead [\d.]+ ms/pass", p.stdout)


def test_argmax_cost(smollm2_path, monkeypatch, capsys):
    run_main("argmax_cost", [MODEL], monkeypatch)
    assert re.search(r"smollm2-135m: n_vocab 49152, one-token decode [\d.]+ ms, argmax after it [\d.]+ us",
                     capsys.readouterr().out)


def test_output_matrix_cost(smollm2_path, monkeypatch, capsys):
    run_main("output_matrix_cost", [MODEL, "--size", "4", "--rounds", "2"], monkeypatch)
    m = re.search(r"smollm2-135m: 4 rows 300 deep, threads \d+/\d+: every row's logits ([\d.]+) ms, "
                  r"the last row's only ([\d.]+) ms: the output matrix for 3 rows is -?\d+% of the pass",
                  capsys.readouterr().out)
    assert m and float(m.group(1)) > 0 and float(m.group(2)) > 0


def test_contention(smollm2_path, monkeypatch, capsys):
    run_main("contention", ["--model", MODEL, "--rounds", "1", "--load", "none", "--max-tokens", "16",
                            "--max-draft", "2"], monkeypatch)
    out = capsys.readouterr().out
    assert "identical True" in out and re.search(r"median plain/ngramspec over 1 rounds, load none: [\d.]+x", out)


def test_context_cost(smollm2_path, tmp_path, monkeypatch, capsys):
    out = tmp_path / "context-cost.json"
    assert run_main("context_cost", ["--model", MODEL, "--contexts", "32", "--max-batch", "3", "--reps", "1",
                                     "--json", str(out)], monkeypatch) == 0
    assert re.search(r"^\| 32 \| [\d.]+ \| [\d.]+ \| [\d.]+ \|$", capsys.readouterr().out, re.M)
    data = json.loads(out.read_text())
    assert data["model"] == MODEL and data["contexts"] == [32] and len(data["seconds"][0]) >= 3


def test_exact_curve_ab(smollm2_path, monkeypatch, capsys):
    assert run_main("exact_curve_ab", [MODEL, "1", "--workloads", "open_story", "--max-draft", "2",
                                       "--max-tokens", "8"], monkeypatch) == 0
    out = capsys.readouterr().out
    assert "TEXTS DIFFER" not in out and len(re.findall(r"^round 0 open_story .* tok/s", out, re.M)) == 4
    assert re.search(r"^geometric mean of measured/line: [\d.]+$", out, re.M)


def test_fast_mode_ledger(smollm2_path, monkeypatch, capsys):
    run_main("fast_mode_ledger", ["--model", MODEL, "--rounds", "1", "--workloads", "code_completion",
                                  "--max-draft", "2"], monkeypatch)
    out = capsys.readouterr().out
    assert re.search(r"^\| code_completion \| exact \| [\d.]+ \|", out, re.M)
    assert re.search(r"^\| code_completion \| fast \| [\d.]+ \|", out, re.M)


def test_fast_mode_paths(smollm2_path, monkeypatch, capsys):
    run_main("fast_mode_paths", ["1.18", "--model", MODEL, "--max-draft", "2"], monkeypatch)
    out = capsys.readouterr().out
    assert re.search(r"^scale fresh: \d+ passes, plain's text: (True|False)", out, re.M)
    assert re.search(r"^scale 1.18: \d+ passes, plain's text: (True|False)", out, re.M)
    assert out.count("  trace: [") == 2


def test_identity_settings(smollm2_path, tmp_path, monkeypatch):
    report = tmp_path / "identity.md"
    code = run_main("identity_settings", ["--model", MODEL, "--setting", "default", "--prompts", "quick",
                                          "--limit", "2", "--max-tokens", "8", "--max-draft", "2",
                                          "--out", str(report)], monkeypatch)
    text = report.read_text()
    assert code == 0, text
    assert re.search(r"^\| smollm2-135m \| default \| [\d, -]+ \| 2/2 \| \d+ \| \d+ \| - \|$", text, re.M)


def test_edit_replay_records(smollm2_path, tmp_path, monkeypatch):
    out = tmp_path / "edits.json"
    assert run_main("edit_replay", ["--record", str(out), "--model", MODEL, "--limit", "1", "--max-tokens", "8",
                                    "--max-draft", "2"], monkeypatch) == 0
    data = json.loads(out.read_text())
    (item,) = data["items"]
    assert data["model"] == MODEL and item["name"] == "demo"
    assert 1 <= len(item["output"]) <= 9 and len(item["prompt"]) > 100 and len(item["prediction"]) > 100


def test_invariance_depth(smollm2_path, monkeypatch, capsys):
    run_main("invariance_depth", [MODEL, "--max-batch", "3", "--n-ctx", "256", "--per-depth"], monkeypatch)
    out = capsys.readouterr().out
    assert "the engine's check" in out and re.search(r"bit-exact at depths 8, ", out)
    assert re.search(r"^  depth +8: bit-exact sizes \[1", out, re.M)


def test_invariance_every_size(smollm2_path, monkeypatch, capsys):
    run_main("invariance_every_size", [MODEL, "--max-batch", "3", "--depths", "8"], monkeypatch)
    assert re.search(r"^smollm2-135m: .* at depths 8 \(2 probe texts each\)", capsys.readouterr().out, re.M)


def test_kernel_cost_ab_runs_kernel_cost(smollm2_path):
    # kernel_cost_ab.py runs kernel_cost.py in each build's Python: here one build, this one.
    p = run_command([sys.executable, "bench/kernel_cost_ab.py", "--models", MODEL, "--rounds", "1", "--reps", "1",
                     "--depth", "16", "--sizes", "3", f"here={sys.executable}"])
    assert p.returncode == 0, p.stderr[-3000:]
    # --sizes: one token (always) and the sizes asked for, nothing else
    assert re.search(r"^\| model \| build \| 16-token prefill \| one token \| B=3 \|$", p.stdout, re.M), p.stdout
    assert re.search(r"^\| smollm2-135m \| here \| [\d.]+ s \| [\d.]+ ms \| [\d.]+ ms \|$", p.stdout, re.M), p.stdout


def test_kernel_cost_ab_rotates_the_build_order_each_round():
    # a fixed order ran one build always right after another (a bias of up to 1.43x seen)
    ab = script("kernel_cost_ab")
    builds = [["stock", "a"], ["exact", "b"], ["old", "c"]]
    orders = [[n for n, _ in ab.round_order(builds, r)] for r in range(4)]
    assert orders == [["stock", "exact", "old"], ["exact", "old", "stock"], ["old", "stock", "exact"],
                      ["stock", "exact", "old"]]
    assert ab.ratio_cell(12.34, 10.0, [1.1, 1.3, 1.2], "ms", 1) == "12.3 ms (1.23x, 1.10-1.30)"
    assert ab.ratio_cell(2.0, 4.0, [0.5], "s", 2) == "2.00 s (0.50x)"


@pytest.mark.parametrize("args", [["here"], ["a=x", "a=y"], ["=x"], ["a="], ["--rounds", "0", "a=x"]])
def test_kernel_cost_ab_refuses_bad_input(args, monkeypatch, capsys):
    assert run_main("kernel_cost_ab", args, monkeypatch) == 2
    assert "kernel_cost_ab.py: error:" in capsys.readouterr().err


def test_kernel_cpu_time(smollm2_path, monkeypatch, capsys):
    run_main("kernel_cpu_time", [MODEL, "--depth", "16", "--sizes", "1,4", "--runs", "1"], monkeypatch)
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["model"] == MODEL and set(result["cpu_ms"]) == {"1", "4"}
    assert all(ms > 0 for ms in result["cpu_ms"].values())


def test_repeat_penalty_cost(smollm2_path, monkeypatch, capsys):
    run_main("repeat_penalty_cost", ["--rounds", "1", "--prompts", "code", "--max-tokens", "8", "--no-warmup"],
             monkeypatch)
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 1.")]
    assert [r.split(" | ")[:2] for r in rows] == [["| 1.0", "code"], ["| 1.0", "all"], ["| 1.1", "code"],
                                                   ["| 1.1", "all"]]
    assert all(r.endswith("| yes |") for r in rows if "| code |" in r)     # exact mode: plain's text


def test_repeat_penalty_cost_on_the_suites_items(smollm2_path, monkeypatch, capsys):
    """--suite takes the suite's items, each with its own max_tokens and stop strings
    (here one item of each default workload, cut to 8 tokens)."""
    import dataclasses

    from ngramspec.suite import sources

    build = sources.build

    def short(llm, quick, names=None):
        assert quick and tuple(names or ()) == sources.DEFAULT_WORKLOADS
        return [dataclasses.replace(w, items=[dataclasses.replace(w.items[0], max_tokens=8)])
                for w in build(llm, quick, names)[:2]]

    monkeypatch.setattr(sources, "build", short)
    run_main("repeat_penalty_cost", ["--rounds", "1", "--suite", "quick", "--no-warmup"], monkeypatch)
    out = capsys.readouterr().out
    assert "the quick suite's items" in out
    rows = [line.split(" | ")[:2] for line in out.splitlines() if line.startswith("| 1.0 |")]
    assert rows == [["| 1.0", "code_completion#0"], ["| 1.0", "code_editing#0"], ["| 1.0", "all"]]


def test_max_draft(smollm2_path, tmp_path, monkeypatch):
    report = tmp_path / "max_draft.md"
    run_main("max_draft", ["--model", MODEL, "--caps", "2", "--rounds", "1", "--max-tokens", "8",
                           "--out", str(report)], monkeypatch)
    text = report.read_text()
    assert re.search(r"^\| code_edit \| [\d.]+ \|$", text, re.M)
    assert re.search(r"^\| geometric mean \| \*\*[\d.]+\*\* \|$", text, re.M)
    # Priced as a user's engine is (a curve timed over rounds, or the prior with its reason),
    # not by the invariance check's one-shot timings.
    origin = re.search(r"^Exact mode's cost curve: (.*)\.$", text, re.M)
    assert origin and "one-shot" not in origin[1], text
    assert "interleaved rounds" in origin[1] or origin[1].startswith("prior"), text


@pytest.fixture(scope="module")
def memory_run(smollm2_path, tmp_path_factory) -> Path:
    """bench/memory_sequences.py --quick on the extraction sequence: its JSON, which
    memory_replay.py and memory_ceiling.py read."""
    out = tmp_path_factory.mktemp("memory")
    mod = script("memory_sequences")
    assert mod.main(["--model", MODEL, "--quick", "--sequences", "extraction", "--out", str(out)]) == 0
    (path,) = out.glob("memory-smollm2-135m-*-quick.json")
    return path


def test_memory_sequences(memory_run):
    data = json.loads(memory_run.read_text())
    assert data["summary"]["extraction"]["identical"] and data["summary"]["extraction"]["requests"] == 3
    assert {r["method"] for r in data["runs"] if not r.get("meta")} == {"plain", "no memory", "memory", "primed"}
    assert "| extraction | 3 |" in memory_run.with_suffix(".md").read_text()


def test_memory_replay(memory_run, capsys):
    assert script("memory_replay").main([str(memory_run), "--per-request"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^\| extraction \| \d+ \| \d+ / \d+ \| [\d.]+x / [\d.]+x \| [\d.]+x \|$", out, re.M)
    assert len(re.findall(r"^\|   zone1970.tab row \d+ \|", out, re.M)) == 3


def test_memory_ceiling(memory_run, capsys):
    assert script("memory_ceiling").main([str(memory_run)]) == 0
    assert re.search(r"^extraction: oracle-length ceiling over plain: no memory [\d.]+x, memory [\d.]+x",
                     capsys.readouterr().out, re.M)


def test_plain_path_cost_bare_loop(llm):
    # The script's llama-server half needs a binary; its bare llama_decode loop runs on any Llama.
    ms = script("plain_path_cost")._bare_loop(llm, "def add(a, b):\n    return", 8)
    assert 0 < ms < 10_000 and llm.n_tokens == 0


def test_row_rules_cost(smollm2_path, monkeypatch, capsys):
    run_main("row_rules_cost", [MODEL], monkeypatch)
    out = capsys.readouterr().out
    for what in ("grammar, one token:", "grammar, whole vocabulary:", "logprobs, top 5:",
                 "one-token decode (for scale):"):
        assert re.search(rf"^{re.escape(what)} +[\d.]+ us", out, re.M), what


def test_row_rules_speed(smollm2_path, monkeypatch, capsys):
    run_main("row_rules_speed", [MODEL, "1", "--max-tokens", "8", "--max-draft", "2"], monkeypatch)
    rows = re.findall(r"^\| ([^|]+) \| [\d.]+ \| [\d.]+ \| [\d.]+x \| (yes|NO) \| \d+ \|$",
                      capsys.readouterr().out, re.M)
    assert len(rows) == 6 and all(same == "yes" for _, same in rows), rows


def test_rpc_round_trips(smollm2_path, monkeypatch, capsys):
    run_main("rpc_round_trips", ["--model", MODEL], monkeypatch)
    rows = re.findall(r"^\| (\d+) \| (\d+) \| ([\d,]+), ([\d,]+) \|", capsys.readouterr().out, re.M)
    assert [int(size) for _, size, _, _ in rows] == [1, 1, 4, 4, 8, 8, 1, 4, 1, 8]
    assert all(int(a.replace(",", "")) > 0 for _, _, a, _ in rows)


def test_tiled_cost(smollm2_path, monkeypatch, capsys):
    run_main("tiled_cost", [MODEL, "--tokens", "64"], monkeypatch)
    assert re.search(r"^smollm2-135m GGML_CPU_TILED_MM=\S+ threads=2: prefill of \d+ tokens [\d.]+ s, "
                     r"one-token decode [\d.]+ ms$", capsys.readouterr().out, re.M)


def test_mul_mat_cost_times_each_build_and_environment():
    # two "builds": this Python, and this Python with the tiled matmul switched off
    p = run_command([sys.executable, "bench/mul_mat_cost.py", "--type", "q6_K", "--shape", "64,512", "--sizes",
                     "1,9", "--rounds", "1", "--reps", "1", f"here={sys.executable}",
                     f"cols=GGML_CPU_TILED_MM=0@{sys.executable}"])
    assert p.returncode == 0, p.stderr[-3000:]
    assert re.search(r"^\| build \| B=1 \| B=9 \|$", p.stdout, re.M), p.stdout
    assert re.search(r"^\| here \| [\d.]+ \| [\d.]+ \|$", p.stdout, re.M), p.stdout
    assert re.search(r"^\| cols \| [\d.]+ \([\d.]+x\) \| [\d.]+ \([\d.]+x\) \|$", p.stdout, re.M), p.stdout


@pytest.mark.parametrize("args, message", [(["here"], "a build is name=python"),
                                           (["x=FOO@/bin/python"], "is not VAR=VALUE"),
                                           (["--shape", "4,100", "x=python"], "need a multiple of 256"),
                                           ([], "name at least one build")])
def test_mul_mat_cost_refuses_bad_input(args, message, monkeypatch):
    code = run_main("mul_mat_cost", args, monkeypatch)
    assert isinstance(code, str) and message in code, code
