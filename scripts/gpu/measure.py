"""The GPU run's measurements, in order of what matters most, each written to the
results file as soon as it is done, until the deadline: whatever is measured
by then comes back.

For the real model (SmolLM2-135M, when the run could stitch it) and for synthetic
models of Qwen2.5's shapes (synthetic_gguf.py, generated here), each with
llama-cpp-python's default settings (``fa_off``: flash attention off) and with
``flash_attn=True`` (``fa_on``), every layer offloaded:

1. ``check_batch_invariance`` at depth (the engine's depths up to 1,024 cached
   tokens; the sizes exact mode may use: 1-16, 17, 21, 25, 33, 41, 49, 65): which
   verify batch sizes are bit-exact;
2. the verify cost r(B) for B = 1..65, after 128 and after 1,024 cached tokens
   (``measure_verify_cost``; the bench/context_cost.py format, which
   bench/replay.py reads);
3. the quick suite (plain, exact mode "ngramspec", fast mode "ngramspec fast"):
   tokens/s, text identity, divergences; its report beside the results;
4. where some size up to 17 is not bit-exact on the real model: the same check in
   fresh processes with one runtime switch each (``invariance_probe.py``), and the
   first graph node whose output differs (``op_diff.py``).

Order: the real model's checks and curves, the 1.5B synthetic shape's, the
suite, the diagnosis, then the other synthetic shapes. With ``--cpu --quick``
(the CPU test) the sizes, depths, rounds and shapes are small.

Usage: python scripts/gpu/measure.py --out results.json --deadline EPOCH --work DIR --gguf-py DIR
           [--model NAME] [--cpu] [--quick] [--setup JSON] [--keep DIR] [--resume EARLIER.json]
(gpu_run.py runs it with the installed packages on PYTHONPATH and NGRAMSPEC_CACHE_DIR
holding the stitched model.)
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

#: The two attention settings every model is measured with.
SETTINGS = {"fa_off": False, "fa_on": True}


@dataclass
class Plan:
    """How much of each measurement: the GPU run's, or the CPU test's (quick)."""
    n_gpu_layers: int = -1
    n_ctx: int = 4096
    max_batch: int = 65                 # check_sizes(65): 1-16, 17, 21, 25, 33, 41, 49, 65 (exact mode's)
    curve_max: int = 65
    curve_reps: int = 5
    contexts: tuple[int, ...] = (128, 1024)
    suite_rounds: int = 3
    first_synthetic: tuple[tuple[str, str], ...] = (("qwen2.5-1.5b", "q4_k"),)
    later_synthetic: tuple[tuple[str, str], ...] = (("qwen2.5-7b", "q4_k"), ("qwen2.5-0.5b", "q8_0"))
    diagnose_up_to: int = 17            # diagnose when a size up to this one is not bit-exact
    # The suite checks invariance itself (up to 17, as the CPU suites did), unless this says
    # to hand it step 1's report (the CPU test: a check at depth takes minutes on a CPU).
    suite_reuses_check: bool = False
    probe_switches: tuple[tuple[str, dict[str, str], dict[str, Any]], ...] = (
        ("GGML_CUDA_DISABLE_FUSION=1", {"GGML_CUDA_DISABLE_FUSION": "1"}, {}),
        ("GGML_CUDA_DISABLE_GRAPHS=1", {"GGML_CUDA_DISABLE_GRAPHS": "1"}, {}),
        ("offload_kqv=False (attention on the CPU)", {}, {"offload_kqv": False}),
    )


def quick_plan() -> Plan:
    return Plan(n_gpu_layers=0, n_ctx=512, max_batch=5, curve_max=6, curve_reps=2, contexts=(32, 128), suite_rounds=1,
                first_synthetic=(("tiny", "q4_k"),), later_synthetic=(("tiny", "q8_0"),), diagnose_up_to=5,
                probe_switches=(("GGML_CPU_TILED_MM=0", {"GGML_CPU_TILED_MM": "0"}, {}),), suite_reuses_check=True)


class Results:
    """The results file, rewritten whole (atomically) after every step, and a copy in
    ``keep`` (a folder that outlives the call: $OUT is emptied before the next one).
    ``previous``: an earlier call's copy; its finished steps are not run again."""

    def __init__(self, path: Path, deadline: float, setup: dict[str, Any], keep: Path | None = None,
                 previous: dict[str, Any] | None = None) -> None:
        self.path, self.deadline, self.keep = path, deadline, keep
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
        self.data: dict[str, Any] = {"setup": setup, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                     "steps": [], "models": {}, "diagnosis": {}}
        self.done: set[str] = set()
        self.reports: dict[tuple[str, str], Any] = {}    # (model, setting) -> this call's InvarianceReport
        if previous:
            self.data.update(models=previous.get("models", {}), diagnosis=previous.get("diagnosis", {}),
                             earlier_calls=[*previous.get("earlier_calls", []),
                                            {k: previous.get(k) for k in ("setup", "started", "finished", "steps")}])
            self.done = {s["name"] for s in previous.get("steps", []) if s.get("status") in ("ok", "done earlier")}
        self.save()

    def save(self) -> None:
        text = json.dumps(_finite(self.data), indent=1, default=str, allow_nan=False)
        for path in (self.path, self.keep / self.path.name if self.keep else None):
            if path is not None:
                tmp = path.with_name(path.name + ".partial")
                tmp.write_text(text)
                os.replace(tmp, path)

    def left(self) -> float:
        return self.deadline - time.time()

    @contextlib.contextmanager
    def step(self, name: str, needs_s: float) -> Iterator[dict[str, Any]]:
        """Runs the body as one step, recorded with its time and outcome; skipped
        (the body does not run) when less than ``needs_s`` seconds are left."""
        record: dict[str, Any] = {"name": name}
        self.data["steps"].append(record)
        if name in self.done:
            record["status"] = "done earlier"
            self.save()
            raise _Skipped
        if self.left() < needs_s:
            record["status"] = f"skipped: {self.left():.0f} s left, needs about {needs_s:.0f}"
            print(f"skip {name} ({record['status']})", flush=True)
            self.save()
            raise _Skipped
        print(f"step {name} ({self.left():.0f} s left)", flush=True)
        record["status"] = "started, not finished (killed at the deadline?)"   # what stays if it is killed
        self.save()
        t0 = time.perf_counter()
        try:
            yield record
            record["status"] = "ok"
        except _Skipped:
            raise
        except Exception as e:   # one failed measurement must not lose the others
            record["status"] = f"error: {type(e).__name__}: {e}"
            record["traceback"] = traceback.format_exc()[-3000:]
            print(f"  {record['status']}", flush=True)
        finally:
            record["seconds"] = round(time.perf_counter() - t0, 2)
            print(f"  done {name}: {record.get('status')} in {record['seconds']} s", flush=True)
            self.save()

    def model(self, name: str) -> dict[str, Any]:
        entry: dict[str, Any] = self.data["models"].setdefault(name, {"settings": {}})
        return entry

    def setting(self, model: str, setting: str) -> dict[str, Any]:
        entry: dict[str, Any] = self.model(model)["settings"].setdefault(setting, {})
        return entry


class _Skipped(Exception):
    pass


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities as None (standard JSON; a size not timed has no time)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def run_step(results: Results, name: str, needs_s: float, body: Any) -> bool:
    """results.step around ``body(record)``; False when skipped."""
    try:
        with results.step(name, needs_s) as record:
            body(record)
    except _Skipped:
        return False
    return True


def load(path: str, plan: Plan, flash_attn: bool, **extra: Any) -> Any:
    from ngramspec.models import load_llama

    return load_llama(path, n_ctx=plan.n_ctx, seed=0, n_gpu_layers=plan.n_gpu_layers, flash_attn=flash_attn,
                      **extra)


def invariance_record(report: Any) -> dict[str, Any]:
    return {"summary": report.summary(), "invariant_sizes": report.invariant_sizes, "depths": report.depths,
            "probes": report.probes, "check_seconds": report.check_seconds,
            "single_token_seconds": report.single_token_seconds,
            "sizes": {str(b): {k: v for k, v in asdict(r).items() if k != "batch_size"}
                      for b, r in sorted(report.results.items())}}


def measure_model(results: Results, name: str, path: str, plan: Plan) -> None:
    """Invariance at depth and the cost curves, for each setting."""
    results.model(name).update(path=path, bytes=os.path.getsize(path))
    for setting, flash_attn in SETTINGS.items():
        measure_setting(results, name, path, plan, setting, flash_attn)


def measure_setting(results: Results, name: str, path: str, plan: Plan, setting: str, flash_attn: bool) -> None:
    from ngramspec.builds.build_info import invariance_hazards, system_info
    from ngramspec.calibration.cost_timing import measure_verify_cost
    from ngramspec.calibration.invariance import check_batch_invariance

    entry = results.setting(name, setting)
    llm = None

    def check(record: dict[str, Any]) -> None:
        nonlocal llm
        t0 = time.perf_counter()
        llm = load(path, plan, flash_attn)
        entry.update(llama_kwargs={"n_ctx": plan.n_ctx, "n_gpu_layers": plan.n_gpu_layers, "flash_attn": flash_attn},
                     load_seconds=round(time.perf_counter() - t0, 2), system_info=system_info(),
                     hazards=invariance_hazards(llm))
        report = check_batch_invariance(llm, max_batch=plan.max_batch)
        results.reports[(name, setting)] = report
        entry["invariance"] = invariance_record(report)
        print(f"  {name} {setting}: {report.summary()}", flush=True)

    def cost(record: dict[str, Any]) -> None:
        nonlocal llm
        if llm is None:   # the check ran in an earlier call
            llm = load(path, plan, flash_attn)
        seconds = []
        for context in plan.contexts:
            curve = measure_verify_cost(llm, plan.curve_max, reps=plan.curve_reps, context_tokens=context)
            seconds.append([c * curve.single_seconds for c in curve.relative])
        first = seconds[0]
        entry["cost"] = {"contexts": list(plan.contexts), "seconds": seconds,
                         "verify_cost": [t / first[0] for t in first],
                         "single_token_ms": [s[0] * 1e3 for s in seconds], "reps": plan.curve_reps}
        r = entry["cost"]["verify_cost"]
        print(f"  {name} {setting}: one token {first[0] * 1e3:.2f} ms; r(B) "
              + ", ".join(f"{b}: {r[b - 1]:.2f}" for b in (2, 4, 8, 16, 32, 64) if b <= len(r)), flush=True)

    try:
        run_step(results, f"invariance {name} {setting}", 10, check)
        run_step(results, f"cost {name} {setting}", 5, cost)
    finally:
        if llm is not None:
            llm.close()


def run_suite(results: Results, name: str, plan: Plan, out_dir: Path) -> None:
    """The quick suite (plain, exact mode, fast mode) with each setting."""
    for setting, flash_attn in SETTINGS.items():
        suite_setting(results, name, plan, out_dir, setting, flash_attn)


def suite_setting(results: Results, name: str, plan: Plan, out_dir: Path, setting: str, flash_attn: bool) -> None:
    """The quick suite with one setting: its report (Markdown and JSON) beside the
    results, as suite-<setting>.md/.json, and a summary in them."""
    from ngramspec.suite import report, summary
    from ngramspec.suite.llama_settings import LlamaSettings
    from ngramspec.suite.runner import Suite

    def body(record: dict[str, Any]) -> None:
        settings = LlamaSettings(n_gpu_layers=plan.n_gpu_layers, flash_attn=flash_attn)
        checked = results.reports.get((name, setting)) if plan.suite_reuses_check else None
        suite = Suite(name, quick=True, methods=("plain", "ngramspec", "ngramspec fast"), progress=False,
                      settings=settings, invariance=checked)
        try:
            runs = suite.run(plan.suite_rounds)
            figs = summary.summarize(suite, runs)
        finally:
            suite.close()
        command = f"scripts/gpu/measure.py (quick suite, {settings.describe()}, {plan.suite_rounds} rounds)"
        with tempfile.TemporaryDirectory() as tmp:
            md = report.write(Path(tmp), suite, figs, runs, plan.suite_rounds, command,
                              results.data["setup"].get("commit", "unknown"), {}, plot=False)
            for f in (md, md.with_suffix(".json")):
                shutil.copyfile(f, out_dir / f"suite-{setting}{f.suffix}")
        results.setting(name, setting)["suite"] = suite_summary(figs, suite)
        for f in figs:
            cells = ", ".join(f"{m} {v.speedup:.2f}x{'' if v.identical else f' ({v.diverged} div.)'}"
                              for m, v in f.methods.items() if m != "plain")
            print(f"  {setting} {f.name}: plain {f.methods['plain'].decode_tok_s:.0f} tok/s; {cells}", flush=True)

    run_step(results, f"suite {name} {setting}", 60, body)


def suite_summary(figs: Any, suite: Any) -> dict[str, Any]:
    return {"invariant_sizes": suite.invariance.invariant_sizes, "verify_cost": suite.cost.relative,
            "workloads": {f.name: {"tokens_per_pass": f.tokens_per_pass, "acceptance": f.acceptance,
                                   "methods": {m: {"decode_tok_s": v.decode_tok_s, "speedup": v.speedup,
                                                   "identical": v.identical, "diverged": v.diverged,
                                                   "tokens": v.tokens, "failed": v.failed,
                                                   "divergences_per_1000": v.divergences_per_1000}
                                               for m, v in f.methods.items()}}
                          for f in figs}}


def synthetic(results: Results, shape: str, kind: str, plan: Plan, work: Path, gguf_py: Path) -> None:
    name = f"synthetic-{shape}-{kind}"
    path = work / f"{name}.gguf"

    def generate(record: dict[str, Any]) -> None:
        from synthetic_gguf import write

        if not path.is_file():
            write(shape, path, weight_type=kind, gguf_py=gguf_py)
        results.model(name).update(kind="synthetic", shape=shape, weight_type=kind)

    needs = {"qwen2.5-7b": 90, "qwen2.5-1.5b": 45}.get(shape, 20)
    run_step(results, f"generate {name}", needs, generate)
    if path.is_file():
        measure_model(results, name, str(path), plan)


def failing_sizes(results: Results, model: str, setting: str, up_to: int) -> list[int]:
    inv = results.setting(model, setting).get("invariance")
    if not inv:
        return []
    return [int(b) for b, r in inv["sizes"].items() if not r["invariant"] and int(b) <= up_to]


def diagnose(results: Results, name: str, path: str, plan: Plan) -> None:
    """For each setting where a size up to plan.diagnose_up_to is not bit-exact: the
    check again with one runtime switch at a time (fresh processes), and the first
    graph node whose output row differs."""
    for setting, flash_attn in SETTINGS.items():
        failing = failing_sizes(results, name, setting, plan.diagnose_up_to)
        if failing:
            diagnose_setting(results, name, path, plan, setting, flash_attn, min(failing))


def diagnose_setting(results: Results, name: str, path: str, plan: Plan, setting: str, flash_attn: bool,
                     size: int) -> None:
    depth = results.setting(name, setting)["invariance"]["sizes"][str(size)]["failed_at"]
    diag = results.data["diagnosis"].setdefault(f"{name} {setting}", {"size": size, "depth": depth})
    for label, env, kwargs in plan.probe_switches:
        run_step(results, f"probe {name} {setting} {label}", 15,
                 lambda record, label=label, env=env, kwargs=kwargs: probe_switch(
                     results, diag, path, plan, flash_attn, label, env, kwargs))

    def ops(record: dict[str, Any]) -> None:
        from op_diff import first_differences

        llm = load(path, plan, flash_attn)
        try:
            found = first_differences(llm, size=size, depth=int(depth or 8))
        finally:
            llm.close()
        diag["op_diff"] = found
        print(f"  {setting} B={size} at depth {depth}: first differing node "
              f"{found['first'] if found['first'] else 'none'}", flush=True)

    run_step(results, f"op_diff {name} {setting}", 20, ops)


def probe_switch(results: Results, diag: dict[str, Any], path: str, plan: Plan, flash_attn: bool, label: str,
                 env: dict[str, str], kwargs: dict[str, Any]) -> None:
    """The invariance check in a fresh process with one switch (environment or Llama argument)."""
    job = {"model": path, "n_ctx": plan.n_ctx, "n_gpu_layers": plan.n_gpu_layers, "flash_attn": flash_attn,
           "max_batch": min(plan.max_batch, plan.diagnose_up_to), "llama_kwargs": kwargs}
    p = subprocess.run([sys.executable, str(HERE / "invariance_probe.py"), json.dumps(job)],
                       env={**os.environ, **env}, capture_output=True, text=True,
                       timeout=max(10.0, results.left() - 5))
    if p.returncode != 0:
        raise RuntimeError(f"invariance_probe.py exit {p.returncode}: {p.stderr.strip()[-500:]}")
    answer = json.loads(p.stdout.strip().splitlines()[-1])
    diag.setdefault("switches", {})[label] = answer
    print(f"  with {label}: {answer['summary']}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--deadline", type=float, required=True, help="epoch seconds by which the last result is written")
    ap.add_argument("--work", type=Path, required=True, help="where synthetic models are written")
    ap.add_argument("--gguf-py", type=Path, required=True)
    ap.add_argument("--model", default=None, help="the real model: a name from ngramspec.models, found in "
                    "$NGRAMSPEC_CACHE_DIR (absent: synthetic models only)")
    ap.add_argument("--setup", default="{}", help="JSON: what gpu_run.py did before")
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--keep", type=Path, default=None, help="also keep the results in this folder")
    ap.add_argument("--resume", type=Path, default=None, help="an earlier call's results: skip its finished steps")
    opts = ap.parse_args()
    plan = quick_plan() if opts.quick else Plan()
    if opts.cpu:
        plan.n_gpu_layers = 0
    opts.work.mkdir(parents=True, exist_ok=True)
    previous = json.loads(opts.resume.read_text()) if opts.resume and opts.resume.is_file() else None
    import ngramspec  # noqa: F401  - imported as a user imports it; record the GGML_ variables that hold

    environment = {k: v for k, v in sorted(os.environ.items()) if k.startswith("GGML_")}
    results = Results(opts.out, opts.deadline, {**json.loads(opts.setup), "plan": asdict(plan),
                                                "environment": environment}, opts.keep, previous)
    real = opts.model
    if real:
        from ngramspec.models import resolve_model_path

        results.model(real).update(kind="real")
        measure_model(results, real, resolve_model_path(real), plan)
    for shape, kind in plan.first_synthetic:
        synthetic(results, shape, kind, plan, opts.work, opts.gguf_py)
    if real:
        run_suite(results, real, plan, opts.out.parent)
        diagnose(results, real, resolve_model_path(real), plan)
    for shape, kind in plan.later_synthetic:
        synthetic(results, shape, kind, plan, opts.work, opts.gguf_py)
    results.data["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    results.save()
    print(summary_table(results.data), flush=True)
    return 0


def summary_table(data: dict[str, Any]) -> str:
    """The last lines of the output: per model and setting, the exact sizes and r(B)."""
    lines = ["| model | setting | bit-exact sizes (at depth) | one token ms | r(2) | r(8) | r(16) | r(32) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, model in data["models"].items():
        for setting, entry in model["settings"].items():
            inv = entry.get("invariance", {})
            cost = entry.get("cost", {})
            r = cost.get("verify_cost", [])
            cells = [f"{r[b - 1]:.2f}" if b <= len(r) else "-" for b in (2, 8, 16, 32)]
            ms = f"{cost['single_token_ms'][0]:.2f}" if cost else "-"
            lines.append(f"| {name} | {setting} | {inv.get('summary', '-')} | {ms} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
