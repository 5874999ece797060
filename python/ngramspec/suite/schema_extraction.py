"""The structured-extraction workload with a JSON schema, as clients send it: OpenAI's
``response_format`` ``{"type": "json_schema", "json_schema": {"name", "schema"}}``.

A real data table (PyPI tzdata's ISO 3166 country codes) is to be turned into JSON that
follows a schema. The server hands the schema to llama-cpp-python's chat handler, which
makes a GBNF grammar of it (``LlamaGrammar.from_json_schema``); every in-process method
here decodes under that same grammar (``Item.grammar``): plain llama-cpp-python with
``grammar=``, ngramspec with the grammar verified row by row. The schema's keys and the
JSON scaffolding repeat from row to row, which is what model-free drafting feeds on.
Methods that run behind HTTP (llama-server, ``ngramspec serve``) are not given the
grammar, so their runs of this workload are recorded as errors, not timed.
"""
from __future__ import annotations

import json
from typing import Any, Callable

from ngramspec import _llama
from ngramspec.suite.workload import Item, Workload, iso3166_rows, require_dist

__all__ = ["SCHEMA", "schema_extraction", "table_prompts"]

#: What the extraction must follow: every row's code and name, nothing else.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"countries": {"type": "array", "items": {
        "type": "object",
        "properties": {"code": {"type": "string"}, "name": {"type": "string"}},
        "required": ["code", "name"]}}},
    "required": ["countries"],
}


def schema_extraction(chat: Callable[[list[dict[str, str]]], str], n: int, rows: int,
                      max_tokens: int) -> Workload:
    from llama_cpp.llama_grammar import LlamaGrammar

    version = require_dist("tzdata")
    grammar = _llama.grammar_source(LlamaGrammar.from_json_schema(json.dumps(SCHEMA), verbose=False))[0]
    items = [Item(label, prompt, max_tokens, grammar=grammar) for label, prompt in table_prompts(chat, n, rows)]
    return Workload("schema_extraction", "a real data table turned into JSON that follows a JSON schema "
                                         "(response_format json_schema: a grammar for every method)",
                    f"iso3166.tab from PyPI tzdata {version}", items)


def table_prompts(chat: Callable[[list[dict[str, str]]], str], n: int, rows: int) -> list[tuple[str, str]]:
    """(label, prompt) of ``n`` items, each ``rows`` rows of the table to be turned into
    JSON that follows SCHEMA (this workload's and outlines_schema's)."""
    table = iso3166_rows()
    out = []
    for i in range(n):
        start = 40 + i * 100
        chunk = "\n".join(table[start:start + rows])
        prompt = chat([{"role": "user", "content":
                        "Convert this tab-separated table of ISO 3166 country codes into JSON: an object whose "
                        '"countries" array has one object per row, with the keys "code" and "name".\n\n' + chunk}])
        out.append((f"iso3166.tab rows {start}-{start + rows - 1}", prompt))
    return out
