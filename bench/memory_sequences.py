"""Memory across requests: sequences of requests run in order through
one wrapper, with and without an ``ngramspec.Memory``.

Sequences, from real material nobody on the team wrote:
  extraction  rows of tzdata's zone1970.tab turned into JSON with one schema,
              one row per request, the schema stated in prose (the JSON skeleton
              repeats across answers, the values do not; it is in no prompt);
  tool_calls  an agent's turns: "where is shlex.quote defined?" answered by one
              call of a grep tool whose JSON shape the system prompt describes
              (function names from the __all__ of four standard-library modules);
  edits       several edit instructions in turn on one standard-library file
              (colorsys's RGB/HSV/HLS conversions); each answer is the whole file;
  chat        a multi-turn chat in a small context (--n-ctx): code is edited, leaves
              the window, and is re-quoted later for another edit;
  unrelated   one request of each other kind of text (HumanEval completion, an
              essay on a Zen of Python line, a question over the Apache licence,
              a shlex function): memory should not help here, and must not hurt.

Methods, one wrapper each for the whole sequence, interleaved per request (the
order rotates each request) so machine noise hits all alike, each request from a
cold cache (``llm.reset()``):
  plain      ``Llama.create_completion(temperature=0)``;
  no memory  ngramspec without a memory (the default);
  memory     ngramspec with a Memory that holds this sequence's earlier outputs only;
  primed     the same, primed first with related files (extraction: tzdata's
             zone1970.tab and iso3166.tab; tool_calls: the four modules' sources;
             edits: colorsys.py; chat: fnmatch.py and shlex.py; unrelated: the
             standard library's json package, i.e. stale).

Decode speed is (generated tokens - 1) / time after the first token (as the
suite measures it). Per sequence: speed-up over plain = total plain decode time /
total decode time of the method (the texts are identical, so the tokens are the
same), the median of the per-request ratios, and memory / no memory; per request:
decode seconds, forward passes, draft tokens accepted from memory, and the cost
curve the memory run priced with (r(2), r(8)), so a slow request can be explained.

Usage: python bench/memory_sequences.py --model qwen2.5-coder-0.5b [--threads 2] [--quick] [--rounds 1]
Writes bench/results/memory-<model>-<threads>t.json and .md (machine, commit, command, load averages).
"""
from __future__ import annotations

import argparse
import faulthandler
import importlib.resources
import inspect
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Callable

from ngramspec import Memory, wrap
from ngramspec.calibration import invariance_cache
from ngramspec.models import load_llama
from ngramspec.suite import sources
from ngramspec.suite.run_record import FirstTokenClock

RESULTS = Path(__file__).resolve().parent / "results"
METHODS = ("plain", "no memory", "memory", "primed")


# --- the sequences ------------------------------------------------------------------

def _tz_file(name: str) -> Path:
    return Path(str(importlib.resources.files("tzdata") / "zoneinfo" / name))


def extraction(n: int, max_tokens: int) -> dict:
    """One row per request, as an extraction job over thousands of rows runs: the
    schema is stated in prose (as users write it), so the JSON skeleton of the
    answer is not in the prompt; only earlier answers hold it."""
    table = [r for r in _tz_file("zone1970.tab").read_text(encoding="utf-8").splitlines()
             if r and not r.startswith("#")]
    reqs = []
    for i in range(n):
        at = 5 + i * 29   # spread over the table
        msg = ("Convert this row of the tz database's zone1970.tab (tab-separated: country codes, "
               "coordinates, time zone, optional comment) into a JSON object with the keys "
               '"countries" (a list of codes), "latitude" and "longitude" (decimal degrees), "zone", '
               '"region" (the part of the zone before the slash), "city" and "comment" (null when absent). '
               "Output only the JSON.\n\n" + table[at])
        reqs.append((f"zone1970.tab row {at}", [{"role": "user", "content": msg}], max_tokens))
    return {"name": "extraction", "requests": reqs, "prime": [_tz_file("zone1970.tab"), _tz_file("iso3166.tab")],
            "source": f"tzdata {sources.require_dist('tzdata')} zoneinfo/zone1970.tab"}


def tool_calls(n: int, max_tokens: int) -> dict:
    """An agent's turns: each request asks where a standard-library function is
    defined, and the answer is one call of a grep tool (same JSON shape every time,
    different arguments)."""
    import colorsys
    import fnmatch
    import shlex
    import textwrap as textwrap_mod

    modules = (shlex, fnmatch, textwrap_mod, colorsys)
    funcs = [(m.__name__, name) for m in modules
             for name in sorted(getattr(m, "__all__", []))][:n]
    system = ("You are a coding agent working in a checkout of CPython. You have one tool, grep, which "
              "searches files for a regular expression and returns matching lines with context. To call "
              "it, reply with a JSON object with the keys \"tool\" (\"grep\"), \"arguments\" (an object with "
              "\"pattern\", \"path\" relative to the checkout, and \"context_lines\", an integer) and "
              "\"reason\" (one short sentence). Reply with the JSON only.")
    reqs = [(f"grep for {mod}.{name}", [{"role": "system", "content": system},
                                       {"role": "user", "content": f"Where is {mod}.{name} defined? Show me "
                                        "its definition."}], max_tokens)
            for mod, name in funcs]
    return {"name": "tool_calls", "requests": reqs, "prime": [Path(str(m.__file__)) for m in modules],
            "source": "__all__ of shlex, fnmatch, textwrap, colorsys (function names); prompts ours"}


def _src(*funcs: Any) -> str:
    return "\n\n".join(textwrap.dedent(inspect.getsource(f)).rstrip() for f in funcs) + "\n"


def edits(n: int, max_tokens: int) -> dict:
    import colorsys

    code = _src(colorsys.rgb_to_hsv, colorsys.hsv_to_rgb)
    instructions = [
        "Add type hints to every function.",
        "Add a docstring to every function.",
        "Rename the parameters r, g, b to red, green, blue.",
        "Replace the chain of if statements in hsv_to_rgb with a tuple lookup.",
        "Add a comment above each return statement.",
        "Make every function raise ValueError for inputs outside [0, 1].",
    ][:n]
    reqs = [(f"colorsys edit {i + 1}", [{"role": "user", "content":
             f"{ins} Reply with the whole file.\n\n```python\n{code}```"}], max_tokens)
            for i, ins in enumerate(instructions)]
    return {"name": "edits", "requests": reqs, "prime": [Path(colorsys.__file__)],
            "source": f"Python {platform.python_version()} colorsys.rgb_to_hsv, hsv_to_rgb"}


def chat_turns(n: int, max_tokens: int) -> dict:
    """User turns only: the assistant turns are plain's answers (the same text every
    method produced), filled in as the sequence runs."""
    import fnmatch
    import shlex

    funcs = [fnmatch.filter, shlex.quote, fnmatch.fnmatchcase]
    turns = [f"Add a docstring to this function. Reply with the whole function.\n\n```python\n{_src(f)}```"
             for f in funcs]
    turns += [f"Here is the {which} function again:\n\n```python\n{_src(f)}```\n\nAdd type hints to it and "
              "keep the docstring you wrote before. Reply with the whole function."
              for which, f in (("first", funcs[0]), ("second", funcs[1]), ("third", funcs[2]))]
    turns = turns[:n]
    return {"name": "chat", "turns": turns, "max_tokens": max_tokens,
            "prime": [Path(fnmatch.__file__), Path(shlex.__file__)],
            "source": f"Python {platform.python_version()} fnmatch.filter, fnmatchcase, shlex.quote"}


def unrelated(max_tokens: int) -> dict:
    import json as json_pkg
    import shlex

    code = sources.code_completion(1, max_tokens).items[0]
    zen = sources.zen_of_python()[2]
    licence = importlib.metadata.distribution("tzdata").read_text("licenses/licenses/LICENSE_APACHE") or ""
    licence = licence[:licence.index("3. Grant of Patent License")].strip()
    reqs = [
        ("HumanEval/0 (raw completion)", code.prompt, max_tokens),
        ("zen essay", [{"role": "user", "content":
                        f'Write a short essay about this principle from the Zen of Python: "{zen}"'}], max_tokens),
        ("licence question", [{"role": "user", "content": licence + '\n\nQuote the definition of "Contribution".'}],
         max_tokens),
        ("shlex.join explained", [{"role": "user", "content":
                                   f"What does this function do?\n\n```python\n{_src(shlex.join)}```"}], max_tokens),
    ]
    return {"name": "unrelated", "requests": reqs, "prime": [Path(json_pkg.__file__).parent],
            "source": "HumanEval/0, Zen of Python, Apache-2.0 (tzdata), shlex.join; primed with the json package"}


def builders(quick: bool) -> dict[str, Callable[[], dict]]:
    """Each sequence's builder, at the sizes a run uses (``--quick``: tiny); the
    ceiling script (memory_ceiling.py) rebuilds a run's prompts from these."""
    q = quick
    return {
        "extraction": lambda: extraction(3 if q else 10, 48 if q else 128),
        "tool_calls": lambda: tool_calls(3 if q else 10, 48 if q else 96),
        "edits": lambda: edits(2 if q else 3, 48 if q else 192),
        "chat": lambda: chat_turns(4 if q else 5, 32 if q else 128),
        "unrelated": lambda: unrelated(24 if q else 64),
    }


# --- running --------------------------------------------------------------------------

def _machine() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown"


def _commit() -> str:
    try:
        root = Path(__file__).resolve().parent.parent
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=root).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "python", "cpp", "bench/memory_sequences.py"],
                               capture_output=True, text=True, cwd=root).stdout.strip()
        return sha + (" (with uncommitted changes)" if dirty else "")
    except OSError:
        return "unknown"


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _fit(llm: Any, chat: Callable, messages: list[dict], max_tokens: int, n_ctx: int) -> tuple[str, int]:
    """The chat prompt with the oldest (user, assistant) pairs dropped until it and
    the answer fit the window; returns (prompt, pairs dropped)."""
    dropped = 0
    while True:
        prompt = chat(messages)
        if len(llm.tokenize(prompt.encode(), add_bos=False, special=True)) + max_tokens <= n_ctx - 4 \
                or len(messages) <= 1:
            return prompt, dropped
        messages = messages[2:]
        dropped += 1


def run_one(method: str, llm: Any, spec: Any, prompt: str, max_tokens: int) -> dict:
    clock = FirstTokenClock()
    llm.reset()
    t0 = time.perf_counter()
    if method == "plain":
        out = llm.create_completion(prompt, max_tokens=max_tokens, temperature=0, stopping_criteria=clock)
    else:
        out = spec.create_completion(prompt, max_tokens=max_tokens, temperature=0, stopping_criteria=clock)
    t1 = time.perf_counter()
    first = clock.first if clock.first is not None else t1
    row = {"method": method, "text": out["choices"][0]["text"], "tokens": out["usage"]["completion_tokens"],
           "prefill_s": first - t0, "decode_s": t1 - first}
    if method != "plain":
        s = out["speculative"]
        row.update({k: s[k] for k in ("forward_passes", "passes_by_source", "accepted_by_source",
                                      "drafted_by_source", "verify_batch_sizes", "cost_curve_origin")})
        row["relative_costs"] = {str(b): c for b, c in s["relative_costs"].items()}
    return row


def run_sequence(seq: dict, llm: Any, chat: Callable, invariance: Any, n_ctx: int, rotate: int,
                 progress: bool) -> list[dict]:
    mem = Memory()
    primed = Memory()
    report = primed.prime(path=seq["prime"])
    specs = {"plain": None,
             "no memory": wrap(llm, invariance=invariance),
             "memory": wrap(llm, invariance=invariance, memory=mem),
             "primed": wrap(llm, invariance=invariance, memory=primed)}
    rows: list[dict] = []
    history: list[dict] = []
    if "turns" in seq:
        reqs = [(f"turn {i + 1}", None, seq["max_tokens"]) for i in range(len(seq["turns"]))]
    else:
        reqs = seq["requests"]
    for i, (label, messages, max_tokens) in enumerate(reqs):
        dropped = 0
        if "turns" in seq:
            history.append({"role": "user", "content": seq["turns"][i]})
            prompt, dropped = _fit(llm, chat, history, max_tokens, n_ctx)
        else:
            prompt = messages if isinstance(messages, str) else chat(messages)
        order = list(METHODS[(i + rotate) % 4:] + METHODS[:(i + rotate) % 4])
        got = {m: run_one(m, llm, specs[m], prompt, max_tokens) for m in order}
        plain = got["plain"]["text"]
        for m in METHODS:
            r = got[m]
            r.update({"sequence": seq["name"], "request": i, "label": label, "identical": r["text"] == plain,
                      "order": order.index(m), "pairs_dropped": dropped})
            rows.append(r)
        if "turns" in seq:
            history.append({"role": "assistant", "content": plain})
        if progress:
            p = got["plain"]
            line = "  ".join(f"{m}: {p['decode_s'] / got[m]['decode_s']:.2f}x" for m in METHODS[1:]
                             if got[m]["decode_s"] > 0)
            print(f"[{seq['name']}] {label}: {p['tokens']} tokens, plain {p['decode_s']:.2f}s; {line}"
                  + ("" if all(got[m]["text"] == plain for m in METHODS) else "  NOT IDENTICAL"),
                  file=sys.stderr, flush=True)
    rows.append({"sequence": seq["name"], "primed_files": len(report.files), "primed_tokens": len(primed),
                 "memory_tokens_end": len(mem), "meta": True})
    return rows


def summarise(rows: list[dict]) -> dict:
    out: dict = {}
    runs = [r for r in rows if not r.get("meta")]
    for name in dict.fromkeys(r["sequence"] for r in runs):
        seq = [r for r in runs if r["sequence"] == name]
        by = {m: [r for r in seq if r["method"] == m] for m in METHODS}
        total = {m: sum(r["decode_s"] for r in by[m]) for m in METHODS}
        toks = sum(max(0, r["tokens"] - 1) for r in by["plain"])
        per_req: dict[str, list[float]] = {m: [] for m in METHODS[1:]}
        for p in by["plain"]:
            for m in METHODS[1:]:
                q = next(r for r in by[m] if r["request"] == p["request"])
                if q["decode_s"] > 0:
                    per_req[m].append(p["decode_s"] / q["decode_s"])
        s = {"requests": len(by["plain"]), "decode_tokens": toks,
             "plain_tok_s": toks / total["plain"] if total["plain"] else 0.0,
             "identical": all(r["identical"] for r in seq)}
        for m in METHODS[1:]:
            s[f"{m} speedup"] = total["plain"] / total[m] if total[m] else 0.0
            s[f"{m} median"] = statistics.median(per_req[m]) if per_req[m] else 0.0
            s[f"{m} passes"] = sum(r["forward_passes"] for r in by[m])
            s[f"{m} memory accepted"] = sum(r["accepted_by_source"].get("memory", 0) for r in by[m])
        s["memory / no memory"] = total["no memory"] / total["memory"] if total["memory"] else 0.0
        s["primed / no memory"] = total["no memory"] / total["primed"] if total["primed"] else 0.0
        # The same once memory holds something: a long job's steady state (the first
        # request of a sequence runs with an empty memory, unless primed).
        later = {m: sum(r["decode_s"] for r in by[m] if r["request"] > 0) for m in ("no memory", "memory")}
        s["memory / no memory after the first"] = later["no memory"] / later["memory"] if later["memory"] else 0.0
        out[name] = s
    return out


def markdown(model: str, summary: dict, meta: dict, rows: list[dict]) -> str:
    lines = [f"## Memory across requests: {model}", "",
             f"Machine: {meta['machine']}, n_threads {meta['threads']}, n_threads_batch "
             f"{meta.get('threads_batch', '?')}, n_ctx {meta['n_ctx']}; commit {meta['commit']}.",
             f"Load average at start: `{meta['uptime_start']}`; at end: `{meta['uptime_end']}`.",
             f"Command: `{meta['command']}`", "",
             "Decode speed-up over plain (total plain decode time / total method decode time; "
             "median of per-request ratios in brackets), forward passes, and memory's ratio to no memory.", "",
             "| sequence | requests | tokens | plain tok/s | no memory | memory | primed | memory / no memory "
             "| memory / no memory after the first request | primed / no memory | passes (none / mem / primed) "
             "| identical |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, s in summary.items():
        cell = {m: f"{s[f'{m} speedup']:.2f}x ({s[f'{m} median']:.2f})" for m in METHODS[1:]}
        lines.append(
            f"| {name} | {s['requests']} | {s['decode_tokens']} | {s['plain_tok_s']:.1f} | {cell['no memory']} "
            f"| {cell['memory']} | {cell['primed']} | {s['memory / no memory']:.2f}x | "
            f"{s.get('memory / no memory after the first', 0.0):.2f}x | {s['primed / no memory']:.2f}x | "
            f"{s['no memory passes']} / {s['memory passes']} / {s['primed passes']} | "
            f"{'yes' if s['identical'] else 'NO'} |")
    lines += ["", "Per request: decode seconds (plain / no memory / memory / primed), forward passes "
              "(no memory / memory / primed), draft tokens accepted from memory (memory / primed), and the "
              "cost curve the memory run priced with at its end (r(2), r(8)).", ""]
    for name in summary:
        lines += [f"**{name}**", "", "| request | tokens | decode s | passes | memory accepted | r(2), r(8) |",
                  "|---|---|---|---|---|---|"]
        seq = [r for r in rows if not r.get("meta") and r["sequence"] == name]
        for i in dict.fromkeys(r["request"] for r in seq):
            got = {r["method"]: r for r in seq if r["request"] == i}
            rc = got["memory"].get("relative_costs", {})
            curve = f"{rc.get('2', float('nan')):.2f}, {rc.get('8', float('nan')):.2f}"
            lines.append(
                f"| {got['plain']['label']} | {got['plain']['tokens']} | "
                + " / ".join(f"{got[m]['decode_s']:.2f}" for m in METHODS) + " | "
                + " / ".join(str(got[m]["forward_passes"]) for m in METHODS[1:]) + " | "
                + " / ".join(str(got[m]["accepted_by_source"].get("memory", 0)) for m in ("memory", "primed"))
                + f" | {curve} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--threads-batch", type=int, default=None,
                    help="threads for batches of more than one token (verification, prefill); default --threads. "
                         "llama-cpp-python's own default is every core (1 / 2 on a 2-core machine)")
    ap.add_argument("--n-ctx", type=int, default=1024)
    ap.add_argument("--quick", action="store_true", help="tiny sizes, to try the script")
    ap.add_argument("--rounds", type=int, default=1, help="times each sequence is run (fresh memories each time)")
    ap.add_argument("--sequences", default="extraction,tool_calls,edits,chat,unrelated")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--render", metavar="JSON", help="only rewrite the Markdown of this results file from its "
                    "recorded runs (after a change to the report), next to it")
    args = ap.parse_args(argv)
    if args.render:
        path = Path(args.render)
        data = json.loads(path.read_text())
        summary = summarise(data["runs"])
        path.with_suffix(".md").write_text(markdown(data["meta"]["model"], summary, data["meta"], data["runs"]))
        print(f"written {path.with_suffix('.md')}", file=sys.stderr)
        return 0
    if hasattr(signal, "SIGUSR1"):   # kill -USR1 <pid> prints where a slow run is
        faulthandler.register(signal.SIGUSR1)
    meta = {"model": args.model, "machine": _machine(), "threads": args.threads, "n_ctx": args.n_ctx,
            "commit": _commit(), "command": "python bench/memory_sequences.py " + " ".join(sys.argv[1:]),
            "python": platform.python_version(), "uptime_start": _uptime(), "quick": args.quick}
    print(f"load at start: {meta['uptime_start']}", file=sys.stderr)
    llm = load_llama(args.model, n_ctx=args.n_ctx, seed=0, n_threads=args.threads,
                     n_threads_batch=args.threads_batch)   # None: --threads for batches too
    meta["threads_batch"] = llm.context_params.n_threads_batch
    chat = sources.chat_formatter(llm)
    invariance = invariance_cache.load_or_check(llm, 9)   # cached on disk per model and build
    print(f"invariance checked; exact sizes up to {invariance.max_invariant_batch}", file=sys.stderr, flush=True)
    meta["max_exact_batch"] = invariance.max_invariant_batch
    q = args.quick
    build = builders(q)
    names = [s.strip() for s in args.sequences.split(",") if s.strip()]
    rows: list[dict] = []
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model_name = Path(args.model).name   # a model name ("qwen2.5-coder-0.5b") or a GGUF path
    model_name = model_name[: -len(".gguf")] if model_name.endswith(".gguf") else model_name
    batch = meta["threads_batch"]
    stem = (f"memory-{model_name}-{args.threads}t" + (f"{batch}b" if batch != args.threads else "")
            + ("-quick" if q else ""))
    for r in range(args.rounds):
        for name in names:
            rows += run_sequence(build[name](), llm, chat, invariance, args.n_ctx, rotate=r, progress=True)
            meta["uptime_end"] = _uptime()   # written after every sequence: a cut-off run keeps what it measured
            summary = summarise(rows)
            md = markdown(args.model, summary, meta, rows)
            (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "summary": summary, "runs": rows},
                                                         indent=1))
            (out / f"{stem}.md").write_text(md)
    print(md)
    print(f"written {out / stem}.json and .md", file=sys.stderr)
    return 0 if all(s["identical"] for s in summary.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
