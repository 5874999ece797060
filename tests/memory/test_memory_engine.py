"""Memory in the engine and the wrapper, on the real SmolLM2-135M.

Exactness: a memory full of misleading text (the prompt's own continuation with
the details changed) never changes greedy output, with the eager policy (every
memory draft verified) and the adaptive one. Speed: the same request twice
through one wrapper with a memory takes fewer forward passes the second time.
Isolation: no memory unless one is passed; a Memory passed to several wrappers is
shared, and what one adds changes another's speed, never its text. Persistence
through the engine, and the tokenizer check at construction."""
from __future__ import annotations

from pathlib import Path

import pytest

from ngramspec import Memory, SpeculativeEngine, wrap
from ngramspec.memory.fingerprint import TokenizerMismatchError

# A real structured-extraction request (rows of tzdata's iso3166.tab, as the
# suite's structured_extraction workload): SmolLM2 answers with JSON whose shape
# repeats across requests.
ROWS = "AD\tAndorra\nAE\tUnited Arab Emirates\nAF\tAfghanistan\nAG\tAntigua & Barbuda\nAI\tAnguilla\n"
EXTRACT = ("<|im_start|>user\nConvert this tab-separated table of ISO 3166 country codes into a JSON array "
           'of objects with the keys "code" and "name". Output only the JSON.\n\n' + ROWS +
           "<|im_end|>\n<|im_start|>assistant\n")
CODE = ("def total_price(items, tax_rate):\n    subtotal = 0\n    for item in items:\n"
        "        subtotal += item.price * item.quantity\n    return subtotal * (1 + tax_rate)\n\n"
        "# The same function, with a docstring:\ndef total_price(items, tax_rate):\n")
N = 48


def fixed_cost_policy():
    """The prior cost line, never re-timed (as in test_engine_copy): the drafting
    decisions depend on the tokens only, not on how busy the machine is."""
    from ngramspec.drafting.policy import CostAwarePolicy

    return CostAwarePolicy(9, learn_cost=False)


def plain_text(llm, prompt: str, n: int = N) -> str:
    llm.reset()
    out = llm.create_completion(prompt, max_tokens=n, temperature=0)["choices"][0]["text"]
    llm.reset()
    return out


def misleading(prompt: str, truth: str) -> str:
    """The prompt and its true continuation with every few words changed: matches
    the context everywhere and drafts something else after a few tokens."""
    words = truth.split(" ")
    changed = [w + "_x" if i % 3 == 1 else w for i, w in enumerate(words)]
    return prompt + " ".join(changed)


@pytest.mark.parametrize("prompt", [CODE, EXTRACT], ids=["code", "extraction"])
@pytest.mark.parametrize("adaptive", [False, True], ids=["eager", "adaptive"])
def test_misleading_memory_never_changes_greedy_output(llm, invariance, prompt, adaptive):
    truth = plain_text(llm, prompt)
    mem = Memory()
    mem.prime([misleading(prompt, truth)] * 2 + [misleading(prompt, truth[: len(truth) // 2])])
    spec = wrap(llm, memory=mem, invariance=invariance, adaptive=adaptive)
    llm.reset()
    out = spec.create_completion(prompt, max_tokens=N, temperature=0)
    assert out["choices"][0]["text"] == truth
    s = out["speculative"]
    if not adaptive:  # every memory draft was verified, and the misleading ones were refused
        assert s["passes_by_source"].get("memory", 0) > 0
        assert s["accepted_by_source"]["memory"] < s["drafted_by_source"]["memory"]


def test_a_memory_that_helps_the_same_request_twice(llm, invariance):
    truth = plain_text(llm, EXTRACT)
    spec = wrap(llm, memory=Memory(), invariance=invariance, adaptive=fixed_cost_policy())
    runs = []
    for _ in range(2):
        llm.reset()
        runs.append(spec.create_completion(EXTRACT, max_tokens=N, temperature=0))
    first, second = (r["speculative"] for r in runs)
    assert [r["choices"][0]["text"] for r in runs] == [truth, truth]
    assert "memory" not in first["accepted_by_source"]  # empty at first
    assert second["accepted_by_source"].get("memory", 0) > N // 2
    assert second["forward_passes"] < first["forward_passes"]


def test_no_memory_unless_given_and_isolated(llm, invariance):
    a, b = wrap(llm, invariance=invariance), wrap(llm, invariance=invariance, memory=None)
    assert a.engine.memory is None and b.engine.memory is None
    assert not any(p.name == "memory" for p in a.engine.proposers)
    off = wrap(llm, invariance=invariance, memory=False)
    assert off.engine.memory is None
    # Two wrappers with their own memories: what one learned the other never drafts.
    mine, theirs = Memory(), Memory()
    one, two = wrap(llm, invariance=invariance, memory=mine), wrap(llm, invariance=invariance, memory=theirs)
    assert one.engine.memory is mine and two.engine.memory is theirs
    llm.reset()
    one.create_completion(EXTRACT, max_tokens=N, temperature=0)
    assert len(mine) > 0 and len(theirs) == 0
    llm.reset()
    out = two.create_completion(EXTRACT, max_tokens=N, temperature=0)
    assert "memory" not in out["speculative"]["passes_by_source"]


def test_a_shared_memory_changes_speed_never_text(llm, invariance):
    truth = plain_text(llm, EXTRACT)
    shared = Memory()
    writer = wrap(llm, invariance=invariance, memory=shared)
    reader = wrap(llm, invariance=invariance, memory=shared, adaptive=fixed_cost_policy())
    assert writer.engine.memory is reader.engine.memory
    llm.reset()
    assert writer.create_completion(EXTRACT, max_tokens=N, temperature=0)["choices"][0]["text"] == truth
    llm.reset()
    out = reader.create_completion(EXTRACT, max_tokens=N, temperature=0)
    assert out["choices"][0]["text"] == truth
    assert out["speculative"]["accepted_by_source"].get("memory", 0) > 0


def test_memory_rejects_non_memory_objects(llm, invariance):
    with pytest.raises(TypeError, match="memory"):
        SpeculativeEngine(llm, invariance=invariance, memory="memory.bin")


def test_save_and_load_through_the_engine(llm, invariance, tmp_path: Path):
    llm.reset()
    memory = Memory()
    first = SpeculativeEngine(llm, invariance=invariance, memory=memory, adaptive=fixed_cost_policy())
    assert first.memory is memory
    gen1 = first.generate(EXTRACT, max_tokens=N)
    path = tmp_path / "mem.ngsm"
    memory.save(path)
    loaded = Memory.load(path)
    assert len(loaded) == len(memory) > 0
    assert loaded.fingerprint == memory.fingerprint
    llm.reset()
    second = SpeculativeEngine(llm, invariance=invariance, memory=loaded, adaptive=fixed_cost_policy())
    gen2 = second.generate(EXTRACT, max_tokens=N)
    assert gen2.tokens == gen1.tokens
    assert gen2.stats.accepted_by_source.get("memory", 0) > N // 2
    assert gen2.stats.forward_passes < gen1.stats.forward_passes


class _OtherTokenizer:
    """A byte-level tokenizer: not SmolLM2's."""
    metadata = {"tokenizer.ggml.model": "fake-bytes"}

    def n_vocab(self) -> int:
        return 256

    def detokenize(self, tokens):
        return bytes(tokens)

    def tokenize(self, text: bytes, add_bos: bool = False, special: bool = False):
        return list(text)


def test_tokenizer_mismatch_at_engine_construction(llm, invariance, tmp_path: Path):
    mem = Memory()
    mem.bind(_OtherTokenizer())
    with pytest.raises(TokenizerMismatchError, match="fake-bytes"):
        SpeculativeEngine(llm, invariance=invariance, memory=mem)
    mem.save(tmp_path / "other.ngsm")   # the same through a saved file and the wrapper
    with pytest.raises(TokenizerMismatchError, match="49152"):
        wrap(llm, invariance=invariance, memory=Memory.load(tmp_path / "other.ngsm"))
