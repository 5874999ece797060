"""The benchmark's schema_extraction workload (response_format json_schema): built from a
real table, every item carries the schema's grammar, and plain and ngramspec decode
under it to the same JSON."""
from __future__ import annotations

import json

from ngramspec.suite import sources
from ngramspec.suite.schema_extraction import SCHEMA
from tests.support.suite_runs import plain_and_ngramspec


def test_schema_extraction_is_optional_and_carries_its_grammar(llm):
    assert "schema_extraction" not in sources.DEFAULT_WORKLOADS
    (w,) = sources.build(llm, quick=True, names=["schema_extraction"])
    assert w.name == "schema_extraction" and len(w.items) == 1
    item = w.items[0]
    assert item.grammar and "countries" in item.grammar and "iso3166.tab rows" in item.label
    assert all(i.grammar is None for x in sources.build(llm, quick=True) for i in x.items)


def test_plain_and_ngramspec_give_the_same_json(llm, invariance):
    plain, spec = plain_and_ngramspec(llm, invariance, "schema_extraction", 160)
    assert spec.text == plain.text and plain.tokens > 0
    if plain.tokens < 160:   # finished: JSON that follows the schema
        countries = json.loads(plain.text)["countries"]
        assert countries and set(countries[0]) == set(SCHEMA["properties"]["countries"]["items"]["required"])
