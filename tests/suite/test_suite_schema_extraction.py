"""The benchmark's schema_extraction workload (response_format json_schema): built from a
real table, every item carries the schema's grammar, and plain and ngramspec decode
under it to the same JSON."""
from __future__ import annotations

import dataclasses
import json

from ngramspec.suite import runner, sources
from ngramspec.suite.loading import make_engine
from ngramspec.suite.schema_extraction import SCHEMA


def test_schema_extraction_is_optional_and_carries_its_grammar(llm):
    assert "schema_extraction" not in sources.DEFAULT_WORKLOADS
    (w,) = sources.build(llm, quick=True, names=["schema_extraction"])
    assert w.name == "schema_extraction" and len(w.items) == 1
    item = w.items[0]
    assert item.grammar and "countries" in item.grammar and "iso3166.tab rows" in item.label
    assert all(i.grammar is None for x in sources.build(llm, quick=True) for i in x.items)


def test_plain_and_ngramspec_give_the_same_json(llm, invariance):
    (w,) = sources.build(llm, quick=True, names=["schema_extraction"])
    w = dataclasses.replace(w, items=[dataclasses.replace(w.items[0], max_tokens=160)])
    suite = runner.Suite.__new__(runner.Suite)
    suite.model, suite.quick, suite.llm, suite.progress = "smollm2-135m", True, llm, False
    suite.methods, suite.workloads, suite.servers, suite.lookup = ("plain", "ngramspec"), [w], {}, None
    suite.invariance = invariance
    suite.engines = {"ngramspec": make_engine(llm, "ngramspec", invariance=invariance)}
    runs = suite.run(1)
    assert all(not r.error for r in runs)
    plain, spec = (next(r for r in runs if r.method == m) for m in ("plain", "ngramspec"))
    assert spec.text == plain.text and plain.tokens > 0
    if plain.tokens < 160:   # finished: JSON that follows the schema
        countries = json.loads(plain.text)["countries"]
        assert countries and set(countries[0]) == set(SCHEMA["properties"]["countries"]["items"]["required"])
