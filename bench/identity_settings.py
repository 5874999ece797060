"""Exact mode's greedy text against plain greedy's, with the Llama settings users
set: default, flash_attn, a small n_batch/n_ubatch, a q8_0 KV cache (with
flash_attn, which llama.cpp needs for a quantized V cache). On whatever build
the running Python has: run it once with .venv (our exact build) and once with
.venv-stock (a plain `pip install llama-cpp-python`).

Prompts: the long chats of the identity tests (300-2,000 tokens deep) and the
quick suite's workloads; each generation is up to --max-tokens tokens, plain from
a reset cache and exact mode from a reset cache. Each setting starts from an empty
verdict cache (NGRAMSPEC_CACHE_DIR in a temporary folder), so it is certified as
on a first start-up.

Run (from the repository root), once per build:
  PYTHONPATH=.:python .venv/bin/python bench/identity_settings.py \
      --out bench/results/identity-settings-exact-build.md
  PYTHONPATH=.:python .venv-stock/bin/python bench/identity_settings.py \
      --out bench/results/identity-settings-stock-build.md

--setting NAME (repeated) picks from SETTINGS (default: the first four). The run of the
removed bench/results/exactness-settings.py (a q8_0 K cache, n_ubatch 4, n_batch =
n_ubatch = 64, on four of the long chats, 256 tokens; bench/results/exactness.md) is
  --setting type_k=q8_0 --setting n_ubatch=4 --setting n_batch=n_ubatch=64 --prompts chats --max-tokens 256
(on all six long chats).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import llama_cpp
from tests.support.long_chats import conversations
from tests.support.plain import plain_tokens

from ngramspec import SpeculativeEngine, models
from ngramspec.builds.build_info import build_tag
from ngramspec.calibration import invariance_cache
from ngramspec.suite import sources
from ngramspec.suite.cells import size_ranges
from ngramspec.suite.provenance import cpu_name, emit_report, git_commit

GGML_TYPE_Q8_0 = 8
SETTINGS: dict[str, dict[str, object]] = {
    "default": {},
    "flash_attn": {"flash_attn": True},
    "n_batch=n_ubatch=64": {"n_batch": 64, "n_ubatch": 64},
    "q8_0 KV cache, flash_attn": {"flash_attn": True, "type_k": GGML_TYPE_Q8_0, "type_v": GGML_TYPE_Q8_0},
    # Not run by default (bench/results/exactness.md measured them with the script this one replaced):
    "type_k=q8_0": {"type_k": GGML_TYPE_Q8_0},
    "n_ubatch=4": {"n_ubatch": 4},
}
DEFAULT_SETTINGS = list(SETTINGS)[:4]


def run_setting(model: str, name: str, max_tokens: int, which: str = "all", max_draft: int | None = None,
                limit: int | None = None) -> str:
    llm = llama_cpp.Llama(models.resolve_model_path(model), n_ctx=4096, n_threads=2, n_threads_batch=2,
                          seed=0, verbose=False, **SETTINGS[name])  # type: ignore[arg-type]
    before = os.environ.get("NGRAMSPEC_CACHE_DIR")
    with tempfile.TemporaryDirectory() as cache:
        os.environ["NGRAMSPEC_CACHE_DIR"] = cache
        invariance_cache.forget_priors()
        engine = SpeculativeEngine(llm) if max_draft is None else SpeculativeEngine(llm, max_draft=max_draft)
        plan = engine.prepare()
        chat = sources.chat_formatter(llm)
        prompts = {k: chat(m) for k, m in conversations().items()} if which in ("all", "chats") else {}
        for workload in sources.build(llm, quick=True) if which in ("all", "quick") else []:
            for i, item in enumerate(workload.items):
                prompts[f"{workload.name}[{i}]"] = item.prompt
        prompts = dict(list(prompts.items())[:limit])
        identical, drafted, tokens, differ = 0, 0, 0, []
        for key, prompt in prompts.items():
            plain = plain_tokens(llm, prompt, max_tokens)
            llm.reset()
            gen = engine.generate(prompt, max_tokens=max_tokens)
            llm.reset()
            drafted += gen.stats.drafted_tokens
            tokens += len(gen.tokens)
            if gen.tokens == plain:
                identical += 1
            else:
                differ.append(key)
    if before is None:
        os.environ.pop("NGRAMSPEC_CACHE_DIR", None)
    else:
        os.environ["NGRAMSPEC_CACHE_DIR"] = before
    invariance_cache.forget_priors()
    sizes = [b for b in range(1, len(plan.allowed)) if plan.allowed[b]]
    llm.close()
    return (f"| {model} | {name} | {size_ranges(sizes)} "
            f"| {identical}/{len(prompts)} | {tokens} | {drafted} | {', '.join(differ) or '-'} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m", help="a name from ngramspec.models or a GGUF path")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--setting", action="append", choices=list(SETTINGS), dest="settings",
                    help="run this setting (repeat for more; default: the first four)")
    ap.add_argument("--prompts", choices=("all", "chats", "quick"), default="all",
                    help="the long chats, the quick suite's prompts, or both (default)")
    ap.add_argument("--max-draft", type=int, default=None, help="exact mode's cap on a draft (default: the engine's)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N of those prompts")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    names = args.settings or DEFAULT_SETTINGS
    command = " ".join([os.path.basename(sys.executable), "bench/identity_settings.py",
                        *(sys.argv[1:] if argv is None else argv)])
    prompts = {"all": "long chats (300-2,000 prompt tokens) and the quick suite's prompts",
               "chats": "the long chats (300-2,000 prompt tokens)", "quick": "the quick suite's prompts"}
    t0 = time.perf_counter()
    rows = [run_setting(args.model, name, args.max_tokens, args.prompts, args.max_draft, args.limit)
            for name in names]
    text = "\n".join([
        f"# Exact mode vs plain greedy, with user settings ({build_tag()})",
        "",
        f"- Machine: {cpu_name()}, {os.cpu_count()} cores; llama-cpp-python {llama_cpp.__version__}; "
        f"commit {git_commit()}.",
        f"- Command: `{command}` ({time.perf_counter() - t0:.0f} s).",
        "- Each prompt: plain greedy (Llama.generate) from a reset cache vs exact mode from a reset cache, up to "
        f"{args.max_tokens} tokens; {prompts[args.prompts]}"
        + (f" (the first {args.limit})." if args.limit is not None else "."),
        "- 'exact sizes': the verify batch sizes exact mode certified for that setting (1 alone: it decodes "
        "plainly).",
        "",
        "| model | setting | exact sizes | identical | tokens | drafted tokens | differing prompts |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
    ])
    emit_report(text, args.out)
    return 0 if all("| - |" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
