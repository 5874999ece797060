"""Is speculating worth it with the row rules on? Plain llama-cpp-python against the
wrapper, interleaved round by round on the same Llama (each run from a reset cache),
for greedy requests with a repeat penalty (llama-cpp-python's server default, 1.1),
with logprobs, with a JSON schema and as a forced tool call: tokens/s of each (wall time
of the whole request, prefill included), the speed-up, and whether the text is plain's.
Plain's logprobs request runs on a second Llama made with logits_all=True, which plain
llama-cpp-python needs for logprobs (the wrapper does not).

    .venv/bin/python bench/row_rules_speed.py [MODEL] [ROUNDS] [THREADS]   # default smollm2-135m 3, Llama's threads
        [--max-tokens N] [--max-draft N]   # cap every request's length / the engine's drafts (default: none)
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import llama_cpp
from llama_cpp.llama_grammar import LlamaGrammar

import ngramspec
from ngramspec import models
from ngramspec.suite import sources
from ngramspec.suite.schema_extraction import SCHEMA

#: A forced tool call: llama-cpp-python's chat handler makes a grammar of the tool's parameters.
TOOL = {"type": "function", "function": {"name": "record_countries", "parameters": SCHEMA}}


def cases(llm: llama_cpp.Llama) -> list[tuple[str, str, Any, dict[str, Any]]]:
    """(label, the method called, its first argument, its keywords)."""
    chat = sources.chat_formatter(llm)
    (edit,) = sources.build(llm, quick=True, names=["code_editing"])
    (table,) = sources.build(llm, quick=True, names=["structured_extraction"])
    (schema,) = sources.build(llm, quick=False, names=["schema_extraction"])
    grammar = LlamaGrammar.from_json_schema(json.dumps(SCHEMA), verbose=False)
    story = chat([{"role": "user", "content": "Write a short story about a lighthouse keeper."}])
    rows = "\n".join(sources.iso3166_rows()[40:56])
    ask = [{"role": "user", "content": "Record these ISO 3166 countries (code and name):\n\n" + rows}]
    forced = {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "record_countries"}}}
    return [
        ("code edit, repeat_penalty 1.1", "create_completion", edit.items[0].prompt,
         {"repeat_penalty": 1.1, "max_tokens": 128}),
        ("table to JSON, repeat_penalty 1.1", "create_completion", table.items[0].prompt,
         {"repeat_penalty": 1.1, "max_tokens": 128}),
        ("story, repeat_penalty 1.1", "create_completion", story, {"repeat_penalty": 1.1, "max_tokens": 128}),
        ("code edit, logprobs 5", "create_completion", edit.items[0].prompt, {"logprobs": 5, "max_tokens": 128}),
        ("table to JSON, JSON schema", "create_completion", schema.items[0].prompt,
         {"grammar": grammar, "max_tokens": 320}),
        ("table to a forced tool call", "create_chat_completion", ask, {**forced, "max_tokens": 320}),
    ]


def _text(out: dict[str, Any]) -> str:
    choice = out["choices"][0]
    if "text" in choice:
        return str(choice["text"])
    message = choice["message"]
    return json.dumps([message.get("content"), [c["function"] for c in message.get("tool_calls") or []]])


def timed(call: Any, first: Any, kw: dict[str, Any]) -> tuple[float, str, int]:
    t0 = time.perf_counter()
    out = call(first, temperature=0, **kw)
    seconds = time.perf_counter() - t0
    return seconds, _text(out), out["usage"]["completion_tokens"]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default="smollm2-135m", help="a name from ngramspec.models or a GGUF path")
    ap.add_argument("rounds", nargs="?", type=int, default=3)
    ap.add_argument("threads", nargs="?", type=int, default=None, help="default: llama-cpp-python's")
    ap.add_argument("--max-tokens", type=int, default=None, help="cap every request at this many tokens")
    ap.add_argument("--max-draft", type=int, default=None, help="the engine's cap on a draft (default: its own)")
    args = ap.parse_args(argv)
    name, rounds = args.model, args.rounds
    threads: dict[str, Any] = ({} if args.threads is None
                               else {"n_threads": args.threads, "n_threads_batch": args.threads})
    path = models.resolve_model_path(name)
    llm = llama_cpp.Llama(path, n_ctx=4096, verbose=False, **threads)
    # Plain llama-cpp-python gives logprobs only on a Llama made with logits_all=True (it raises
    # ValueError otherwise); the wrapper needs none. The logprobs request's plain side runs on one.
    logits_all: llama_cpp.Llama | None = None
    spec = ngramspec.wrap(llm) if args.max_draft is None else ngramspec.wrap(llm, max_draft=args.max_draft)
    spec.engine.prepare()
    print(f"{name}, {rounds} interleaved rounds, threads {llm.context_params.n_threads} (one token), "
          f"{llm.context_params.n_threads_batch} (batches)")
    print("| request | plain tok/s | ngramspec tok/s | speed-up | same text | tokens |")
    print("|---|---|---|---|---|---|")
    for label, method, first, kw in cases(llm):
        if args.max_tokens is not None:
            kw = {**kw, "max_tokens": min(kw["max_tokens"], args.max_tokens)}
        plain_s: list[tuple[float, str, int]] = []
        spec_s: list[tuple[float, str, int]] = []
        plain_llm = llm
        if "logprobs" in kw:
            if logits_all is None:
                logits_all = llama_cpp.Llama(path, n_ctx=4096, verbose=False, logits_all=True, **threads)
            plain_llm = logits_all
        for r in range(rounds):
            order = (("plain", getattr(plain_llm, method)), ("spec", getattr(spec, method)))
            for who, call in order if r % 2 == 0 else order[::-1]:
                llm.reset()
                plain_llm.reset()
                seconds, text, n = timed(call, first, kw)
                (plain_s if who == "plain" else spec_s).append((seconds, text, n))
        same = all(p[1] == q[1] for p, q in zip(plain_s, spec_s))
        n = plain_s[0][2]
        p = statistics.median(n / s for s, _, _ in plain_s)
        q = statistics.median(n / s for s, _, _ in spec_s)
        print(f"| {label} | {p:.1f} | {q:.1f} | {q / p:.2f}x | {'yes' if same else 'NO'} | {n} |")
    llm.close()
    if logits_all is not None:
        logits_all.close()


if __name__ == "__main__":
    main()
