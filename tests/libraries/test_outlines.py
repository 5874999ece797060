"""outlines (1.x): ``outlines.from_llamacpp(wrapped)`` takes the wrapper as it is (it is a
Llama).

Unconstrained generation (no output type) speculates. A Pydantic schema or a regex
becomes outlines_core's logits processor, which the engine applies to each verified row
in plain's order (integrations/row_processors.py): it speculates too, with plain's text,
even when exact mode's audit chooses a pass's tokens again. With a logit_bias beside it,
both apply (plain llama-cpp-python drops both: its list.extend returns None).
"""
from __future__ import annotations

import json
import re
import warnings

import numpy as np
import outlines
import pytest

from ngramspec.calibration.audit import AuditResult, audit_pass
from ngramspec.calibration.invariance import BatchSizeResult, InvarianceReport
from ngramspec.engine import generation
from tests.support.libraries import (
    COPY_JSON,
    COPY_JSON_COMPLETION,
    JSON_TEXT,
    Fruits,
    assert_decoded_plainly,
    assert_speculated,
    wrap,
)

GREEDY = {"temperature": 0.0, "max_tokens": 48}
PLAIN_REASON = "logits_processor in greedy decoding"
DATE = r"20[0-9]{2}-[01][0-9]-[0-3][0-9]"


def _both(llm, wrapped, call, **options):
    """``call(model)`` with outlines on the plain Llama, then on the wrapper (reset before each)."""
    llm.reset()
    plain = call(outlines.from_llamacpp(llm, **options))
    llm.reset()
    return plain, call(outlines.from_llamacpp(wrapped, **options))


@pytest.mark.parametrize("chat_mode", [True, False], ids=["chat", "completion"])
def test_unconstrained_generation_speculates_with_plains_text(llm, wrapped, chat_mode):
    prompt = COPY_JSON if chat_mode else COPY_JSON_COMPLETION
    plain, spec = _both(llm, wrapped, lambda model: model(prompt, **GREEDY), chat_mode=chat_mode)
    assert spec == plain
    assert '"elderberry"' in plain
    assert_speculated(wrapped.last_speculative)


def test_streamed_generation_speculates_with_plains_text(llm, wrapped):
    plain, spec = _both(llm, wrapped, lambda model: list(model.stream(COPY_JSON, **GREEDY)))
    assert "".join(spec) == "".join(plain) == JSON_TEXT
    assert_speculated(wrapped.last_speculative)


def _schema(model):
    return model(COPY_JSON, Fruits, **{**GREEDY, "max_tokens": 64})


@pytest.mark.parametrize("chat_mode", [True, False], ids=["chat", "completion"])
def test_a_pydantic_schema_speculates_with_plains_text(llm, wrapped, chat_mode):
    plain, spec = _both(llm, wrapped, _schema, chat_mode=chat_mode)
    assert spec == plain
    assert Fruits.model_validate_json(spec).fruits == Fruits.model_validate_json(JSON_TEXT).fruits
    assert_speculated(wrapped.last_speculative)


def test_a_streamed_schema_speculates_with_plains_text(llm, wrapped):
    plain, spec = _both(llm, wrapped, lambda model: list(model.stream(COPY_JSON, Fruits, **GREEDY)))
    assert "".join(spec) == "".join(plain)
    assert_speculated(wrapped.last_speculative)


def test_a_regex_speculates_with_plains_text(llm, wrapped):
    prompt = "The launch was on 2024-03-15 and the review on 2024-04-02. When was the launch? Answer as YYYY-MM-DD."
    date = outlines.types.Regex(DATE)
    plain, spec = _both(llm, wrapped, lambda model: model(prompt, date, max_tokens=16, temperature=0.0))
    assert spec == plain == "2024-03-15"   # constrained (without numba it silently is not)
    assert re.fullmatch(DATE, spec), spec
    assert_speculated(wrapped.last_speculative)


def test_the_audit_choosing_a_pass_again_keeps_plains_text(llm, invariance_cache_dir, monkeypatch):
    """Every pass is audited and every audit reports a changed row, so each pass's
    tokens are chosen again from its start: outlines' guide must be put back first, or
    it advances twice through the pass and the text leaves plain's (or the schema)."""
    from ngramspec.calibration import invariance_cache

    def always_differs(decode_one, batch_rows, tokens, start, accept):
        real = audit_pass(decode_one, batch_rows, tokens, start, accept)
        return AuditResult(real.rows, accept(real.rows, np.asarray(tokens[1:], dtype=np.int32)), 0, 0.0)

    monkeypatch.setattr(generation, "audit_pass", always_differs)
    # Sizes 1-17 are bit-exact on the exact build: the rows chosen again are the same.
    trusting = InvarianceReport({b: BatchSizeResult(b, True, 0, 0.0, 0.01) for b in range(1, 18)}, 0.01)
    spec = wrap(llm, trusting)
    spec.engine.audit_rule.share = spec.engine.audit_rule.run_share = 1e9
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # each audit warns that it withdrew a size
            plain, got = _both(llm, spec, _schema)
        stats = spec.last_speculative
        assert stats["audited_passes"] >= 2 and stats["withdrawn_sizes"], stats
        assert got == plain
        assert Fruits.model_validate_json(got).fruits == Fruits.model_validate_json(JSON_TEXT).fruits
    finally:
        invariance_cache._process_withdrawn.clear()


def test_with_a_logit_bias_both_apply(llm, wrapped):
    """outlines' processor, then the bias, as a list of both would apply them on the
    plain Llama (plain's own logit_bias beside a processor drops both: docs/usage.md)."""
    from llama_cpp import LogitsProcessorList
    from outlines.backends import get_json_schema_logits_processor

    banana = int(llm.tokenize(b"banana", add_bos=False)[0])
    model = outlines.from_llamacpp(llm, chat_mode=False)

    def biased(ids, scores):
        scores[banana] -= 100.0
        return scores

    def fresh():
        llm.reset()
        return get_json_schema_logits_processor(None, model, json.dumps(Fruits.model_json_schema()))

    prompt = COPY_JSON + "\n"
    plain = llm.create_completion(prompt, max_tokens=48, temperature=0.0,
                                  logits_processor=LogitsProcessorList([fresh(), biased]))["choices"][0]["text"]
    spec = wrapped.create_completion(prompt, max_tokens=48, temperature=0.0, logit_bias={banana: -100.0},
                                     logits_processor=LogitsProcessorList([fresh()]))["choices"][0]["text"]
    assert spec == plain
    assert "apple" in spec and "banana" not in spec
    assert_speculated(wrapped.last_speculative)


def test_a_processor_used_before_stays_plains(llm, wrapped):
    """An outlines processor that has already made its first call carries another
    generation's state: the engine cannot know it, so the call is plain's."""
    from llama_cpp import LogitsProcessorList
    from outlines.backends import get_regex_logits_processor

    model = outlines.from_llamacpp(wrapped)
    proc = get_regex_logits_processor(None, model, r"[a-z ]{0,40}")
    proc(np.array([1, 2], dtype=np.intc), np.zeros(llm.n_vocab(), dtype=np.float32))
    llm.reset()
    wrapped.create_completion("Today is", max_tokens=4, temperature=0.0,
                              logits_processor=LogitsProcessorList([proc]))
    assert_decoded_plainly(wrapped.last_speculative, PLAIN_REASON)
