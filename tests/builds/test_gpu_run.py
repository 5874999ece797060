"""The prepared GPU run (scripts/gpu/): the sdist trimming, the model parts and
their checksums, the split that keeps each device call under its limit, the
device calls themselves, the measurement's bookkeeping (deadline, resume, a
failed step), and bench/replay.py reading the run's curves. The real sdist and
the synthetic model are in the slow tier (test_gpu_run_sdist.py)."""
from __future__ import annotations

import importlib.util
import io
import json
import re
import tarfile
import time
from pathlib import Path

import pytest

from ngramspec.options import DEFAULT_MAX_DRAFT
from tests.support.gpu_scripts import GPU, gpu_module

ROOT = GPU.parents[1]
device_calls = gpu_module("device_calls")
measure = gpu_module("measure")
model_parts = gpu_module("model_parts")
prepare = gpu_module("prepare")
trim_sdist = gpu_module("trim_sdist")

TOP = "llama_cpp_python-0.3.36"


def _fake_sdist(path: Path, *, drop: tuple[str, ...] = (), extra: dict[str, bytes] | None = None,
                tops: tuple[str, ...] = (TOP,)) -> Path:
    """A tarball shaped like the sdist: every required file, some dropped folders' files."""
    files = {f: f"contents of {f}\n".encode() for f in trim_sdist.REQUIRED_FILES if f not in drop}
    files.update({"vendor/llama.cpp/models/ggml-vocab-llama-spm.gguf": b"x" * 5000,
                  "vendor/llama.cpp/docs/build.md": b"docs", "vendor/llama.cpp/tools/ui/index.html": b"ui",
                  "vendor/llama.cpp/ggml/src/ggml-vulkan/ggml-vulkan.cpp": b"vk", ".git/HEAD": b"ref",
                  "vendor/llama.cpp/ggml/src/ggml-cuda/fattn.cu": b"cuda", "docs/index.md": b"doc"})
    files.update(extra or {})
    with tarfile.open(path, "w:gz") as tar:
        for top in tops:
            for name, data in files.items():
                info = tarfile.TarInfo(f"{top}/{name}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def _names(path: Path) -> set[str]:
    with tarfile.open(path) as tar:
        return {m.name.partition("/")[2] for m in tar if m.isfile()}


def test_trim_keeps_what_a_build_needs_and_drops_the_rest(tmp_path: Path):
    out = tmp_path / "trimmed.tar.gz"
    report = trim_sdist.trim(_fake_sdist(tmp_path / "sdist.tar.gz"), out)
    names = _names(out)
    assert set(trim_sdist.REQUIRED_FILES) <= names
    assert "vendor/llama.cpp/ggml/src/ggml-cuda/fattn.cu" in names       # the CUDA backend stays
    for gone in ("vendor/llama.cpp/models/ggml-vocab-llama-spm.gguf", "vendor/llama.cpp/docs/build.md",
                 "vendor/llama.cpp/tools/ui/index.html", "vendor/llama.cpp/ggml/src/ggml-vulkan/ggml-vulkan.cpp",
                 ".git/HEAD", "docs/index.md"):
        assert gone not in names
    assert report.top == TOP and report.kept_files == len(names)
    assert report.dropped_by_folder["vendor/llama.cpp/models"] == 5000


@pytest.mark.parametrize("case, needle", [
    ("missing", "missing vendor/llama.cpp/ggml/src/ggml-cuda/mmq.cu"),
    ("two tops", "more than one top folder"),
    ("not a tarball", "cannot be trimmed"),
])
def test_trim_refuses_what_it_does_not_know_and_leaves_nothing(tmp_path: Path, case, needle):
    src = tmp_path / "sdist.tar.gz"
    if case == "missing":
        _fake_sdist(src, drop=("vendor/llama.cpp/ggml/src/ggml-cuda/mmq.cu",))
    elif case == "two tops":
        _fake_sdist(src, tops=(TOP, "other-0.1"))
    else:
        src.write_bytes(b"not a tarball")
    out = tmp_path / "trimmed.tar.gz"
    with pytest.raises(trim_sdist.TrimError, match=re.escape(needle)):
        trim_sdist.trim(src, out)
    assert not out.exists() and not list(tmp_path.glob("*.partial"))


def test_trim_refuses_links(tmp_path: Path):
    src = _fake_sdist(tmp_path / "sdist.tar.gz")
    with tarfile.open(src, "r:gz") as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar]  # type: ignore[union-attr]
    link = tarfile.TarInfo(f"{TOP}/vendor/llama.cpp/link")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    with tarfile.open(src, "w:gz") as tar:
        for m, data in members:
            tar.addfile(m, io.BytesIO(data) if data is not None else None)
        tar.addfile(link)
    with pytest.raises(trim_sdist.TrimError, match="is a link"):
        trim_sdist.trim(src, tmp_path / "out.tar.gz")


def test_parts_split_and_stitch_back_to_the_same_bytes(tmp_path: Path):
    data = bytes(range(256)) * 4099
    src = tmp_path / "model.gguf"
    src.write_bytes(data)
    parts = model_parts.split(src, [300_000, 0], ["a", "b"], tmp_path / "parts")
    assert [p.size for p in parts] == [300_000, len(data) - 300_000]
    whole = model_parts.sha256_of(src)
    out = model_parts.stitch([tmp_path / "parts" / "a", tmp_path / "parts" / "b"], tmp_path / "out.gguf", whole,
                             [p.sha256 for p in parts])
    assert out.read_bytes() == data


def test_stitch_checks_each_part_and_the_whole(tmp_path: Path):
    src = tmp_path / "model.gguf"
    src.write_bytes(b"0123456789" * 1000)
    parts = model_parts.split(src, [4000, 0], ["a", "b"], tmp_path)
    whole = model_parts.sha256_of(src)
    paths = [tmp_path / "a", tmp_path / "b"]
    out = tmp_path / "out.gguf"
    with pytest.raises(model_parts.PartsError, match="missing part"):
        model_parts.stitch([paths[0], tmp_path / "c"], out, whole)
    (tmp_path / "b").write_bytes((tmp_path / "b").read_bytes()[:-1] + b"X")     # one byte changed
    with pytest.raises(model_parts.PartsError, match=r"b: sha256 .* expected " + parts[1].sha256):
        model_parts.stitch(paths, out, whole, [p.sha256 for p in parts])
    with pytest.raises(model_parts.PartsError, match="the stitched out.gguf has sha256"):
        model_parts.stitch(paths, out, whole)            # no part checksums: the whole one catches it
    assert not out.exists() and not (tmp_path / "out.gguf.partial").exists()


@pytest.mark.parametrize("sizes, names", [([0, 0], ["a", "b"]), ([10_000, 0], ["a", "b"]), ([1], ["a", "b"]),
                                          ([], [])])
def test_split_refuses_sizes_that_leave_no_last_part(tmp_path: Path, sizes, names):
    src = tmp_path / "model.gguf"
    src.write_bytes(b"x" * 10_000)
    with pytest.raises(ValueError):
        model_parts.split(src, sizes, names, tmp_path / "parts")


def test_the_split_balances_both_calls_under_the_limit():
    model, fixed, tree = 98_362_432, 4_700_000, 4_400_000
    part1, part2 = prepare.plan_split(model, fixed, tree)
    assert part1 + part2 == model
    assert abs(part1 - (part2 + fixed)) <= 1
    assert max(part1, part2 + fixed) + tree < prepare.LIMIT_MIB * 2**20 < prepare.CALL_LIMIT_MIB * 2**20
    with pytest.raises(SystemExit, match="over 60 MiB each"):
        prepare.plan_split(model, fixed, 20 * 2**20)      # a working tree of 20 MiB leaves too little room


def test_carried_wheels_are_the_versions_the_dev_tools_pin():
    pins = dict(line.split("==") for line in (ROOT / "requirements-dev.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    shared = [name for name in prepare.WHEELS if name in pins]
    assert len(shared) == len(prepare.WHEELS) - 1        # diskcache comes with llama-cpp-python, not the dev tools
    assert all(prepare.WHEELS[name] == pins[name] for name in shared)


def test_device_calls_fit_the_tool_and_match_the_readme():
    readme = (GPU / "README.md").read_text()
    for name, call in device_calls.CALLS.items():
        assert len(str(call["command"])) <= device_calls.COMMAND_LIMIT
        assert str(call["command"]) in readme, name
        for path in call["carry"]:
            assert path.startswith(".gpu-carry/") and f'"{path}"' in readme
    assert 0 < device_calls.RUN["timeout_s"] <= device_calls.CALL_LIMIT_S
    budget = int(re.search(r"--budget (\d+)", str(device_calls.RUN["command"])).group(1))  # type: ignore[union-attr]
    hard = int(re.search(r"timeout -k 5 (\d+)", str(device_calls.RUN["command"])).group(1))  # type: ignore[union-attr]
    assert budget < hard < device_calls.RUN["timeout_s"]
    call = device_calls.resume_call(300)
    assert "--budget 300" in call["command"] and "timeout -k 5 320" in call["command"] and call["timeout_s"] == 350
    with pytest.raises(ValueError):
        device_calls.resume_call(device_calls.CALL_LIMIT_S)


def test_the_carried_folders_are_ignored_by_git():
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert ".gpu-carry/" in ignored and ".gpu-work/" in ignored


def test_measure_skips_steps_past_the_deadline_and_keeps_going_after_an_error(tmp_path: Path):
    results = measure.Results(tmp_path / "results.json", time.time() + 100, {"commit": "abc"}, keep=tmp_path / "keep")
    ran = []

    def while_running(rec):   # a step killed now leaves this on disk
        saved = json.loads((tmp_path / "results.json").read_text())
        ran.append(saved["steps"][-1]["status"])

    measure.run_step(results, "first", 1, while_running)
    assert ran.pop() == "started, not finished (killed at the deadline?)"
    assert measure.run_step(results, "a", 1, lambda rec: ran.append("a"))
    assert measure.run_step(results, "b", 1, lambda rec: 1 / 0)                     # an error is recorded
    results.setting("m", "fa_off")["seconds"] = [float("nan"), 1.0]                  # saved as null
    assert not measure.run_step(results, "c", 1000, lambda rec: ran.append("c"))    # not enough time left
    assert ran == ["a"]
    saved = json.loads((tmp_path / "results.json").read_text())
    steps = {s["name"]: s for s in saved["steps"]}
    assert steps["a"]["status"] == "ok" and steps["b"]["status"].startswith("error: ZeroDivisionError")
    assert "ZeroDivisionError" in steps["b"]["traceback"] and steps["c"]["status"].startswith("skipped:")
    assert json.loads((tmp_path / "keep" / "results.json").read_text()) == saved
    measure.run_step(results, "d", 1, lambda rec: None)
    assert json.loads((tmp_path / "results.json").read_text(),
                      parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}"))["models"]["m"]["settings"] \
        == {"fa_off": {"seconds": [None, 1.0]}}


def test_measure_resumes_without_repeating_finished_steps(tmp_path: Path):
    first = measure.Results(tmp_path / "results.json", time.time() + 100, {})
    measure.run_step(first, "a", 1, lambda rec: first.setting("m", "fa_off").update(x=1))
    measure.run_step(first, "b", 1000, lambda rec: None)
    second = measure.Results(tmp_path / "again.json", time.time() + 100, {}, previous=first.data)
    ran = []
    measure.run_step(second, "a", 1, lambda rec: ran.append("a"))
    measure.run_step(second, "b", 1, lambda rec: ran.append("b"))
    assert ran == ["b"]
    assert second.data["models"]["m"]["settings"]["fa_off"] == {"x": 1}
    assert [s["status"] for s in second.data["steps"]] == ["done earlier", "ok"]
    assert second.data["earlier_calls"][0]["steps"][0]["name"] == "a"


def _replay_tool():
    spec = importlib.util.spec_from_file_location("bench_replay_gpu", ROOT / "bench" / "replay.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def made_up_gpu_results(path: Path) -> Path:
    """The GPU run's results format (measure.py), with a made-up curve: flat, as a GPU's would be."""
    cost = [1.0 + 0.02 * b for b in range(64)]
    entry = {"cost": {"contexts": [128, 1024], "seconds": [[0.002 * c for c in cost], [0.0025 * c for c in cost]],
                      "verify_cost": cost, "single_token_ms": [2.0, 2.5], "reps": 5},
             "invariance": {"invariant_sizes": [1, 2, 3, 4], "summary": "sizes 1-4 bit-exact"}}
    data = {"setup": {}, "steps": [], "diagnosis": {},
            "models": {"smollm2-135m": {"settings": {"fa_off": entry, "fa_on": {"invariance": {}}}}}}
    path.write_text(json.dumps(data))
    return path


def test_replay_reads_a_curve_from_the_gpu_results(tmp_path: Path):
    replay = _replay_tool()
    path = made_up_gpu_results(tmp_path / "gpu.json")
    cost, exact = replay.load_curve(f"{path}#smollm2-135m/fa_off", {})
    assert len(cost) == 64 and cost[0] == 1.0 and cost[16] == pytest.approx(1.32)
    assert exact == [1, 2, 3, 4]
    priced = replay.load_context_cost(f"{path}#smollm2-135m/fa_off")
    assert priced.contexts == [128, 1024] and priced.time(1, 128) == pytest.approx(0.002)


@pytest.mark.parametrize("spec, needle", [
    ("{path}", "hold several curves; name one as"),
    ("{path}#smollm2-135m/fa_auto", "choose one of: smollm2-135m/fa_off, smollm2-135m/fa_on"),
    ("{path}#qwen/fa_off", "no 'qwen/fa_off' in it"),
    ("{path}#smollm2-135m/fa_on", "its cost curve was not measured"),
    ("{missing}#smollm2-135m/fa_off", "cannot be read as JSON"),
    ("{missing}", "neither a preset"),
])
def test_replay_names_what_is_wrong_with_a_curve(tmp_path: Path, spec, needle):
    replay = _replay_tool()
    path = made_up_gpu_results(tmp_path / "gpu.json")
    with pytest.raises(replay.CurveError, match=re.escape(needle)):
        replay.load_curve(spec.format(path=path, missing=tmp_path / "none.json"), {})


def test_replay_predicts_speed_ups_under_a_gpu_curve(tmp_path: Path, smollm2_path):
    """The command docs/performance.md gives for the GPU run's results, on a made-up
    flat curve (every batch up to 64 for about one token): exact mode with the four
    sizes the made-up check passed, and fast mode with every size."""
    import subprocess
    import sys

    path = made_up_gpu_results(tmp_path / "gpu.json")
    report = str(ROOT / "bench" / "results" / "suite-smollm2-135m.json")
    tables = {}
    # Exact mode with replay.py's defaults: the engine's max_draft, capped by the 64-size curve.
    for mode, extra, header in (("exact", [], f"max_draft {min(DEFAULT_MAX_DRAFT, 63)}, exact sizes"),
                                ("fast", ["--all-sizes", "--max-draft", "16"], "max_draft 16, every size")):
        p = subprocess.run([sys.executable, str(ROOT / "bench" / "replay.py"), report, "--cost-curve",
                            f"{path}#smollm2-135m/fa_off", *extra], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        rows = {line.split("|")[1].strip(): float(line.split("|")[2].strip().rstrip("x"))
                for line in p.stdout.splitlines() if line.startswith("| ") and "x |" in line}
        assert len(rows) == 6 and all(v >= 1.0 for v in rows.values()), p.stdout
        assert header in p.stdout
        tables[mode] = rows
    # Longer drafts on a flat curve: fast mode verifies more per pass where text repeats.
    assert tables["fast"]["code_editing"] > tables["exact"]["code_editing"]
    q = subprocess.run([sys.executable, str(ROOT / "bench" / "replay.py"), report, "--cost-curve", str(path)],
                       capture_output=True, text=True, timeout=300)
    assert q.returncode == 2 and "name one as" in q.stderr and "Traceback" not in q.stderr
