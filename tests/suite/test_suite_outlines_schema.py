"""The benchmark's outlines_schema workload: the schema_extraction table and schema,
constrained by outlines' own logits processor; plain llama-cpp-python and ngramspec
give the same JSON, and ngramspec's runs speculate."""
from __future__ import annotations

import json

from ngramspec.suite import runner, sources
from ngramspec.suite.schema_extraction import SCHEMA
from ngramspec.suite.workload import Item
from tests.support.suite_runs import plain_and_ngramspec


def test_outlines_schema_is_optional_and_carries_its_schema(llm):
    assert "outlines_schema" not in sources.DEFAULT_WORKLOADS
    (w,) = sources.build(llm, quick=True, names=["outlines_schema"])
    assert w.name == "outlines_schema" and len(w.items) == 1 and "outlines" in w.description
    item = w.items[0]
    assert item.json_schema is not None and item.grammar is None
    assert json.loads(item.json_schema) == SCHEMA
    assert all(i.json_schema is None for x in sources.build(llm, quick=True) for i in x.items)


def test_plain_and_ngramspec_give_the_same_json_and_ngramspec_speculates(llm, invariance):
    plain, spec = plain_and_ngramspec(llm, invariance, "outlines_schema", 160)
    assert spec.text == plain.text and plain.tokens > 0
    assert spec.stats["accepted_tokens"] > 0 and spec.stats["forward_passes"] < spec.tokens
    if plain.tokens < 160:   # finished: JSON that follows the schema
        countries = json.loads(plain.text)["countries"]
        assert countries and set(countries[0]) == set(SCHEMA["properties"]["countries"]["items"]["required"])
    else:   # constrained all the way: the start of the schema's JSON
        assert plain.text.lstrip().startswith('{') and '"countries"' in plain.text


def test_a_server_method_is_not_given_the_processor():
    item = Item("x", "p", 4, json_schema="{}")
    run = runner._run_server(object(), "llama-server", "outlines_schema", item, 0)
    assert run.error == "not given the item's outlines processor"
