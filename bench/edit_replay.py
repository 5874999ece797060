"""Predicted-output edits replayed with no model: the main job's request (``ngramspec
generate``'s demo) and edits of this package's own files, each with the file as its
prediction.

``--record FILE`` runs them once through exact mode on a model (their text is plain
greedy's) and writes each one's prompt, output and prediction tokens to FILE (JSON).
Given such a FILE, it replays them through the shipped Drafter (bench/replay.py's
``replay``) under a cost curve, with the prediction proposer's in-order resync buckets
and without them (``_NEAR = -1``: no resync counts as one), and with
``best_in_hindsight`` for the limit of the same proposals. It prints the verify time
of each edit in milliseconds at the curve's one-token time; ``--perfect`` adds the
least verify time of any drafter (every draft token right, the cheapest passes:
ngramspec.suite.oracle.perfect_limit), the bound no proposal can beat.

    PYTHONPATH=python .venv/bin/python bench/edit_replay.py --record /tmp/edits.json
    PYTHONPATH=python:. .venv/bin/python bench/edit_replay.py /tmp/edits.json --cost-curve CURVE.json [--perfect]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from unittest import mock

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay import load_curve, replay  # noqa: E402

#: (file under python/ngramspec, instruction); the instructions cycle over the files
FILES = ["arg_checks.py", "server/settings.py", "suite/sample_prompts.py", "rpc/errors.py", "suite/provenance.py",
         "suite/run_record.py", "suite/cells.py", "log.py", "server/memory_saver.py", "errors.py",
         "server/shutdown.py", "engine/request.py"]
INSTRUCTIONS = [
    "Add a function is_positive(x) that returns True when x is a number above zero.",
    "Add a one-line comment above each function saying what it returns.",
    "Remove the module docstring.",
    "Rename the first function so that its name starts with an underscore, and update its uses.",
    "Add a __repr__ method to the first class, or a function describe() if there is no class.",
    "Sort the imports alphabetically.",
]
SYSTEM = "You are a careful programmer. You edit code exactly as asked."


def tasks(limit: int | None = None) -> list[tuple[str, list[dict[str, str]], str]]:
    """(name, chat messages, prediction): the demo first, then the file edits."""
    from ngramspec.cli.demo import demo

    d = demo()
    out = [("demo", d.messages, d.prediction)]
    root = Path(__file__).resolve().parent.parent / "python" / "ngramspec"
    for i, name in enumerate(FILES):
        source = (root / name).read_text(encoding="utf-8")
        ask = f"```python\n{source}```\n\n{INSTRUCTIONS[i % len(INSTRUCTIONS)]} Reply with the whole updated file."
        out.append((name, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ask}],
                    f"```python\n{source}```"))
    return out[:limit] if limit else out


def record(path: Path, model: str, limit: int | None, max_tokens: int, max_draft: int) -> None:
    """Runs every task through exact mode and writes their tokens to ``path``."""
    from ngramspec._llama import tokenize_text
    from ngramspec.cli.common import load_model
    from ngramspec.engine.request import prompt_tokens_for
    from ngramspec.integrations.wrapper import SpeculativeLlama
    from ngramspec.options import EngineOptions
    from ngramspec.suite.sources import chat_formatter

    llm = load_model(model, 4096, None, None, rpc=None)
    chat = chat_formatter(llm)   # the prompt as the Llama's default chat handler formats it
    spec = SpeculativeLlama(llm, options=EngineOptions(warmup=True, max_draft=max_draft))
    items = []
    for name, messages, prediction in tasks(limit):
        out = spec.create_chat_completion(messages, max_tokens=max_tokens, temperature=0,
                                          prediction={"type": "content", "content": prediction})
        text = out["choices"][0]["message"]["content"]
        items.append({"name": name, "prompt": prompt_tokens_for(llm, chat(messages)),
                      "output": llm.tokenize(text.encode(), add_bos=False, special=True),
                      "prediction": tokenize_text(llm, prediction)})
        print(f"{name}: {len(items[-1]['output'])} tokens", file=sys.stderr)
    path.write_text(json.dumps({"model": model, "items": items}))


def replay_all(data: dict, cost: list[float], one_token_ms: float, max_draft: int = 64,
               perfect: bool = False, sizes: list[int] | None = None) -> list[tuple[str, ...]]:
    """Per edit: (name, ms with the in-order buckets, ms without, ms in hindsight[, ms with
    every draft token right]). ``sizes``: the verify batch sizes allowed (exact mode's
    certified ones), else every size up to max_draft + 1."""
    import ngramspec.proposers.prediction as prediction_module
    from ngramspec.drafting.policy import CostAwarePolicy
    from ngramspec.suite.oracle import perfect_limit

    max_draft = min(max_draft, len(cost) - 1)
    allowed = np.array([False] + [sizes is None or b in sizes for b in range(1, max_draft + 2)])
    allowed[1] = True   # one token: plain decoding

    def policy() -> CostAwarePolicy:
        p = CostAwarePolicy(max_draft + 1, learn_cost=False)
        p.calibrate({b + 1: c for b, c in enumerate(cost[: max_draft + 1])})
        return p

    rows = []
    for item in data["items"]:
        args = (item["prompt"], item["output"], cost, allowed, max_draft)
        with_set = replay(*args, policy(), prediction=item["prediction"])[0]
        hindsight = replay(*args, policy(), prediction=item["prediction"], hindsight=True)[0]
        with mock.patch.object(prediction_module, "_NEAR", -1):   # no resync counts as in order
            without = replay(*args, policy(), prediction=item["prediction"])[0]
        costs = [with_set, without, hindsight]
        if perfect:   # the first token comes from prefill, as in the replays
            costs.append(perfect_limit(len(item["output"]), cost[: max_draft + 1], allowed[1:].tolist()).cost)
        rows.append((item["name"], *(f"{x * one_token_ms:.0f}" for x in costs)))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tokens", nargs="?", help="a --record file to replay")
    ap.add_argument("--record", type=Path, help="run the edits on --model and write their tokens here")
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--limit", type=int, help="the first N tasks only (the demo is the first)")
    ap.add_argument("--max-tokens", type=int, default=768)
    ap.add_argument("--max-draft", type=int, default=64, help="--record: the engine's draft cap (the text is the same)")
    ap.add_argument("--cost-curve", help='JSON {"verify_cost": [r(1), r(2), ...]}, with "exact_sizes": [...] to '
                    'verify with those batch sizes only (default: the tokens file\'s "verify_cost", else '
                    'r(B) = 1 + 0.15 (B - 1))')
    ap.add_argument("--one-token-ms", type=float, default=22.7, help="the curve's one-token time, for the ms columns")
    ap.add_argument("--perfect", action="store_true", help="add a column: the least verify time of any drafter "
                    "(every draft token right)")
    opts = ap.parse_args()
    if opts.record:
        record(opts.record, opts.model, opts.limit, opts.max_tokens, opts.max_draft)
        return 0
    if not opts.tokens:
        ap.error("give a --record file to replay, or --record FILE")
    data = json.loads(Path(opts.tokens).read_text())
    # replay.py's curve reader: its presets, bare lists, GPU results and "exact_sizes".
    cost, sizes = (load_curve(opts.cost_curve, data) if opts.cost_curve
                   else (data.get("verify_cost") or [1.0 + 0.15 * b for b in range(65)], None))
    rows = replay_all(data, cost, opts.one_token_ms, perfect=opts.perfect, sizes=sizes)
    print("| edit | verify ms, in-order buckets | without them | in hindsight |" + (" every draft token right |"
                                                                                  if opts.perfect else ""))
    print("|---|---|---|---|" + ("---|" if opts.perfect else ""))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    total = [sum(float(r[i]) for r in rows) for i in range(1, len(rows[0]))]
    print("| total | " + " | ".join(f"{t:.0f}" for t in total) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
