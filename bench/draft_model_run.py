"""Issue 20's measurement: a draft model (Qwen2.5-Coder-0.5B) drafting for
Qwen2.5-Coder-1.5B, beside plain decoding, model-free ngramspec, ngramspec with
both kinds of source, the draft model alone, and llama-server plainly and in its
own draft-model mode (``-md``), on the same two GGUF files, build flags and threads,
methods interleaved per item in one run.

Writes bench/results/draft-model-<model>.md and .json. Run from the repository root:

    .venv/bin/python bench/draft_model_run.py \\
        --llama-server PATH [--workloads a,b,...] [--rounds N] [--threads 2]

(Until issue 56 it lived beside its results as bench/results/draft-model-run.py; the
reports it wrote name that path in their command lines.)
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ngramspec.suite import report, runner, summary
from ngramspec.suite.methods import draft_model_for
from ngramspec.suite.rss import peak_rss_mib
from ngramspec.suite.run_record import Run

METHODS = ("plain", "ngramspec", "ngramspec+draft", "draft-only")
SERVER_MODES = ("none", "draft")


def sh(cmd: str) -> str:
    return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()


def method_figures(runs: list[Run], method: str, workload: str) -> dict[str, Any]:
    mine = [r for r in runs if r.method == method and r.workload == workload and not r.error]
    out: dict[str, Any] = {"runs": len(mine), "tokens": sum(r.tokens for r in mine)}
    drafted = sum(r.stats.get("drafted_tokens", 0) for r in mine)
    accepted = sum(r.stats.get("accepted_tokens", 0) for r in mine)
    out["drafted"], out["accepted"] = drafted, accepted
    out["acceptance"] = accepted / drafted if drafted else math.nan
    passes = sum(r.stats.get("forward_passes", 0) for r in mine)
    if passes:
        out["tokens_per_pass"] = sum(r.stats["generated_tokens"] for r in mine) / passes
    elif method.startswith("llama-server"):
        # The server reports no pass count: each pass after the first token yields
        # its accepted draft tokens plus one.
        steps = sum(max(1, r.tokens - 1 - r.stats.get("accepted_tokens", 0)) for r in mine)
        out["tokens_per_pass"] = sum(max(0, r.tokens - 1) for r in mine) / steps if steps else math.nan
    dm = [r.stats["draft_model"] for r in mine if "draft_model" in r.stats]
    if dm:
        out["draft_model"] = {k: sum(d[k] for d in dm) for k in ("calls", "probes", "refusals", "proposals",
                                                                 "drafted_tokens", "draft_seconds")}
        out["draft_model"]["passes"] = sum(r.stats["forward_passes"] for r in mine)
        out["draft_model"]["verified_from_draft"] = sum(r.stats["passes_by_source"].get("draft_model", 0)
                                                        for r in mine)
        out["draft_model"]["accepted_from_draft"] = sum(r.stats["accepted_by_source"].get("draft_model", 0)
                                                        for r in mine)
        out["draft_model"]["drafted_verified"] = sum(r.stats["drafted_by_source"].get("draft_model", 0)
                                                     for r in mine)
        per_tok = [d["decode_seconds"] for d in dm if d.get("decode_seconds")]
        single = [d["target_single_seconds"] for d in dm if d.get("target_single_seconds")
                  and not math.isnan(d["target_single_seconds"])]
        out["draft_model"]["draft_token_s"] = sorted(per_tok)[len(per_tok) // 2] if per_tok else math.nan
        out["draft_model"]["target_token_s"] = sorted(single)[len(single) // 2] if single else math.nan
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--llama-server", default=None)
    ap.add_argument("--workloads", default=None)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-rss", action="store_true")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--server-only", action="store_true", help="only llama-server none and draft (see server_only)")
    ap.add_argument("--render", default=None, metavar="JSON", help="only rewrite the Markdown from a run's JSON")
    args = ap.parse_args()
    if args.server_only:
        print(server_only(args.model, args.llama_server, args.workloads.split(",") if args.workloads else None,
                          args.threads, Path(args.out)))
        return 0
    if args.render:
        path = Path(args.render)
        path.with_suffix(".md").write_text(render(json.loads(path.read_text())))
        return 0
    command = ".venv/bin/python bench/draft_model_run.py " + " ".join(sys.argv[1:])
    start = {"time": time.strftime("%Y-%m-%d %H:%M:%S"), "uptime": sh("uptime")}
    t_start = time.time()
    workloads = args.workloads.split(",") if args.workloads else None
    suite = runner.Suite(args.model, quick=True, threads=args.threads, methods=METHODS, server=args.llama_server,
                         server_modes=SERVER_MODES if args.llama_server else (), workloads=workloads)
    peaks: dict[str, float] = {}
    try:
        assert suite.draft_llm is not None
        draft_path = suite.draft_llm.model_path
        prompt_tokens = {(w.name, i.label): len(suite.prompt_ids(i)) for w in suite.workloads for i in w.items}
        runs = suite.run(args.rounds)
        # Kept at once: a later step failing must not lose a long run.
        Path("/tmp/draft-model-runs.json").write_text(json.dumps(
            [{k: v for k, v in r.__dict__.items() if k != "output_ids"} for r in runs], default=str))
        figs = summary.summarize(suite, runs)
        for name, srv in suite.servers.items():
            peak = srv.peak_rss_mib()
            if peak is not None:
                peaks[name] = peak
    finally:
        suite.close()
    if not args.no_rss:
        failed = {(r.workload, r.item) for r in runs if r.error}
        longest = max((i for w in suite.workloads for i in w.items if (w.name, i.label) not in failed),
                      key=lambda i: len(i.prompt))
        peaks = {**{m: peak_rss_mib(suite.path, m, longest, suite.n_ctx, args.threads) for m in METHODS},
                 **peaks}
        rss_item = longest.label
    else:
        rss_item = ""
    end = {"time": time.strftime("%Y-%m-%d %H:%M:%S"), "uptime": sh("uptime"), "wall_s": time.time() - t_start}
    from ngramspec.suite.provenance import git_commit

    commit = git_commit()
    cpu = sh("lscpu | sed -n 's/^Model name: *//p'")
    methods = list(suite.methods)
    per: dict[str, dict[str, Any]] = {f.name: {m: method_figures(runs, m, f.name) for m in methods} for f in figs}
    for f in figs:
        for m in methods:
            mf = f.methods[m]
            per[f.name][m].update(decode_tok_s=mf.decode_tok_s, speedup=mf.speedup, speedups=mf.speedups,
                                  identical=mf.identical, failed=mf.failed, error=mf.error)
    data = report.json_safe({
        "model": args.model, "draft_model": draft_path, "machine": f"{cpu}, {report.machine(suite)}",
        "commit": commit, "command": command, "start": start, "end": end, "rounds": args.rounds,
        "verify_cost": suite.cost.relative, "single_token_seconds": suite.cost.single_seconds,
        "invariant_sizes": suite.invariance.invariant_sizes, "peak_rss_mib": peaks, "rss_item": rss_item,
        "workloads": {w.name: [{"label": i.label, "max_tokens": i.max_tokens,
                                "prompt_tokens": prompt_tokens[(w.name, i.label)]}
                               for i in w.items] for w in suite.workloads},
        "figures": per,
        "runs": [{k: v for k, v in r.__dict__.items() if k not in ("output_ids",)} for r in runs],
    })
    path = write_report(Path(args.out), report.slug(args.model), data)
    print(f"wrote {path} in {end['wall_s']:.0f} s")
    return 0


def write_report(out: Path, slug: str, data: dict[str, Any]) -> Path:
    """Writes draft-model-<slug>.json and .md into ``out``, made if missing (a run's
    minutes are not lost to a folder that is not there); returns the JSON's path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"draft-model-{slug}.json"
    path.write_text(json.dumps(data, indent=1, allow_nan=False))
    (out / f"draft-model-{slug}.md").write_text(render(data))
    return path


# ---------------------------------------------------------------------------
# The Markdown report, from the JSON (``--render PATH.json`` redoes it alone).

def _x(v: Any) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.2f}x"


def _f(v: Any, fmt: str = ".2f") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def render(data: dict[str, Any]) -> str:
    figs = data["figures"]
    names = list(figs)
    methods = list(next(iter(figs.values())))
    others = [m for m in methods if m != "plain"]
    lines = [
        f"# Draft model: {Path(data['draft_model']).name} drafting for {data['model']}",
        "",
        f"- Machine: {data['machine']}.",
        f"- Commit: {data['commit']}. Command: `{data['command']}`.",
        f"- Load at the start ({data['start']['time']}): `{data['start']['uptime']}`; at the end "
        f"({data['end']['time']}, {data['end']['wall_s'] / 60:.0f} min later): `{data['end']['uptime']}`. "
        "The machine has 2 cores shared with other engineers' jobs: every timing here is noisy, and a speed-up "
        "only compares methods run back to back on the same prompt. Acceptance, tokens per pass and the gate's "
        "decisions (how often the draft model was called) are counts and do not depend on the load; the gate's "
        "decisions depend on measured prices, whose *ratio* (draft token / target token) the load distorts less.",
        f"- {data['rounds']} round(s); within a round each prompt runs every method back to back, the order "
        "rotating by round. Greedy. Decode speed excludes prefill. Speed-ups are decode tokens/s over plain "
        "llama-cpp-python's on the same prompts (median over rounds).",
        "- Workloads (the suite's quick items): " + "; ".join(
            w + " (" + ", ".join(f"{i['label']}: {i['prompt_tokens']} prompt tokens, max {i['max_tokens']} new"
                                 for i in items) + ")"
            for w, items in data["workloads"].items()) + ".",
        "- Verify cost r(B) of the target: " + ", ".join(f"{b}: {c:.2f}" for b, c in enumerate(data["verify_cost"], 1))
        + f" (one token = {data['single_token_seconds'] * 1e3:.0f} ms at the start); bit-exact verify sizes: "
        f"{data['invariant_sizes']}.",
        "",
        "Methods: **plain** llama-cpp-python greedy; **ngramspec** (model-free: n-gram and copy drafts); "
        "**ngramspec+draft** (the same plus the draft model as a third proposer, priced per pass by "
        "`CostlyGate` and called only when it pays, probed once per 32 refused passes); **draft-only** "
        "(ngramspec with only the draft model, always called, every draft token verified, at most 3 per pass: "
        "llama-server's default draft settings, so its acceptance is the draft model's own); "
        "**llama-server none** (llama.cpp's server decoding plainly); **llama-server draft** (`-md DRAFT "
        "--spec-type draft-simple`, llama.cpp's default draft settings: at most 3 draft tokens, no minimum, "
        "p_min 0; draft on the same threads). Same GGUF files, llama.cpp build flags and thread count.",
        "",
        "## Decode speed-up over plain llama-cpp-python",
        "",
        "| workload | plain tok/s | " + " | ".join(others) + " | identical to plain |",
        "|---" * (3 + len(others)) + "|",
    ]
    for w in names:
        row = [w, _f(figs[w]["plain"]["decode_tok_s"], ".1f")]
        for m in others:
            mf = figs[w][m]
            cell = _x(mf["speedup"])
            if len(mf["speedups"] or []) > 1:
                cell += f" ({min(mf['speedups']):.2f}-{max(mf['speedups']):.2f})"
            if mf["failed"]:
                cell += f" [failed {mf['failed']}]"
            row.append(cell)
        row.append(", ".join(f"{m}: {'yes' if figs[w][m]['identical'] else 'NO'}" for m in others))
        lines.append("| " + " | ".join(row) + " |")
    gm = ["**geometric mean**", ""] + [_x(summary.geomean([figs[w][m]["speedup"] or math.nan for w in names]))
                                       for m in others] + [""]
    lines.append("| " + " | ".join(gm) + " |")

    lines += ["", "## Acceptance and tokens per forward pass (load-independent)", "",
              "Acceptance: accepted draft tokens / verified draft tokens. Tokens per pass: generated tokens per "
              "target forward pass (llama-server reports no pass count: estimated as tokens after the first / "
              "(tokens after the first - accepted draft tokens)).", "",
              "| workload | " + " | ".join(f"{m} acceptance | {m} tokens/pass" for m in others
                                          if m != "llama-server none")
              + " |", "|---" * (1 + 2 * len([m for m in others if m != "llama-server none"])) + "|"]
    for w in names:
        row = [w]
        for m in others:
            if m == "llama-server none":
                continue
            mf = figs[w][m]
            row += [f"{_f(mf['acceptance'] * 100 if mf['acceptance'] is not None else None, '.0f')}% "
                    f"({mf['accepted']}/{mf['drafted']})", _f(mf.get("tokens_per_pass"))]
        lines.append("| " + " | ".join(row) + " |")

    lines += ["", "## The draft model's gate (ngramspec+draft) and its price", "",
              "passes: target forward passes; draft calls: passes the gate let the draft model run (probes "
              "among them: calls made only to keep its acceptance and price current, every 32 refused passes); "
              "verified: passes whose verified draft came from the draft model; accepted: its draft tokens "
              "accepted. Draft token / target token: the draft model's measured seconds per drafted token over "
              "the target's one-token decode, the price the gate weighs.", "",
              "| workload | method | passes | draft calls | probes | refusals | verified from draft "
              "| accepted draft-model tokens | draft token ms | target token ms | ratio | draft time share of decode |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for w in names:
        for m in ("ngramspec+draft", "draft-only"):
            dm = figs[w].get(m, {}).get("draft_model")
            if not dm:
                continue
            runs = [r for r in data["runs"] if r["method"] == m and r["workload"] == w and not r["error"]]
            dec = sum(r["decode_s"] for r in runs)
            share = dm["draft_seconds"] / dec if dec else math.nan
            ratio = (dm["draft_token_s"] / dm["target_token_s"]) if dm["draft_token_s"] and dm["target_token_s"] \
                else math.nan
            lines.append(f"| {w} | {m} | {dm['passes']} | {dm['calls']} | {dm['probes']} | {dm['refusals']} | "
                         f"{dm['verified_from_draft']} | {dm['accepted_from_draft']}/{dm['drafted_verified']} | "
                         f"{_f(dm['draft_token_s'] * 1e3 if dm['draft_token_s'] else None, '.0f')} | "
                         f"{_f(dm['target_token_s'] * 1e3 if dm['target_token_s'] else None, '.0f')} | "
                         f"{_f(ratio)} | {_f(share * 100, '.0f')}% |")

    lines += ["", "## Goals", ""]
    lines += ["| workload | ngramspec+draft / ngramspec (tok/s) | llama-server draft / llama-server none | "
              "llama-server draft / plain | ngramspec+draft / llama-server draft |", "|---|---|---|---|---|"]
    for w in names:
        f = figs[w]
        t = {m: f[m]["decode_tok_s"] for m in methods}

        def r(a: str, b: str, t: dict[str, Any] = t) -> Any:
            return t[a] / t[b] if t.get(a) and t.get(b) else math.nan

        lines.append(f"| {w} | {_x(r('ngramspec+draft', 'ngramspec'))} | "
                     f"{_x(r('llama-server draft', 'llama-server none'))} | "
                     f"{_x(r('llama-server draft', 'plain'))} | {_x(r('ngramspec+draft', 'llama-server draft'))} |")

    if data["peak_rss_mib"]:
        rss = data["peak_rss_mib"]
        lines += ["", "## Peak RSS", "",
                  f"In-process methods: a fresh process loads the model(s) and runs one method on the longest prompt "
                  f"({data['rss_item']}); the draft-model methods load both models. llama-server: its process's "
                  "high-water mark (VmHWM) over the whole run.", "",
                  "| " + " | ".join(rss) + " |", "|---" * len(rss) + "|",
                  "| " + " | ".join(f"{v:.0f} MiB" for v in rss.values()) + " |"]
    return "\n".join(lines) + "\n"


def server_only(model: str, binary: str, workloads: list[str] | None, threads: int, out: Path) -> Path:
    """llama-server plainly and in its draft-model mode on the same quick items, one
    round, interleaved per item; written to draft-model-<model>-server.json. For when
    the server binary was not ready for the main run (the counts, acceptance and
    tokens per pass do not depend on the load; the timings compare only with each other)."""
    from llama_cpp import Llama

    from ngramspec.models import resolve_model_path
    from ngramspec.suite import sources
    from ngramspec.suite.llama_server import LlamaServer

    path = resolve_model_path(model)
    draft = resolve_model_path(draft_model_for(model))
    start = {"time": time.strftime("%Y-%m-%d %H:%M:%S"), "uptime": sh("uptime")}
    t0 = time.time()
    llm = Llama(path, n_ctx=512, n_threads=threads, verbose=False)
    try:
        wls = sources.build(llm, True, workloads)
        prompt_tokens = {(w.name, i.label): len(llm.tokenize(i.prompt.encode(), special=True))
                         for w in wls for i in w.items}
    finally:
        llm.close()
    servers = {f"llama-server {m}": LlamaServer(binary, path, m, 4096, threads, draft=draft if m == "draft" else None)
               for m in SERVER_MODES}
    rows = []
    try:
        for w in wls:
            for item in w.items:
                for name, srv in servers.items():
                    res = srv.complete(item.prompt, item.max_tokens, item.stop)
                    t = res["timings"]
                    rows.append({"method": name, "workload": w.name, "item": item.label,
                                 "prompt_tokens": prompt_tokens[(w.name, item.label)], "tokens": t["predicted_n"],
                                 "prefill_s": t["prompt_ms"] / 1e3, "decode_s": t["predicted_ms"] / 1e3,
                                 "drafted": t.get("draft_n", 0), "accepted": t.get("draft_n_accepted", 0),
                                 "text": res["content"]})
        peaks = {name: srv.peak_rss_mib() for name, srv in servers.items()}
    finally:
        for srv in servers.values():
            srv.close()
    data = {"model": model, "draft_model": draft, "binary": binary, "threads": threads, "start": start,
            "end": {"time": time.strftime("%Y-%m-%d %H:%M:%S"), "uptime": sh("uptime"), "wall_s": time.time() - t0},
            "peak_rss_mib": peaks, "runs": rows}
    dest = out / f"draft-model-{report.slug(model)}-server.json"
    dest.write_text(json.dumps(data, indent=1))
    return dest


if __name__ == "__main__":
    sys.exit(main())
