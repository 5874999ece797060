"""The structured-extraction workload as outlines runs it: the same table and JSON schema
as ``schema_extraction``, with the output constrained by outlines' own logits processor
(outlines_core, as ``outlines.from_llamacpp(llm)(prompt, schema)`` builds it) instead of
a GBNF grammar. Plain llama-cpp-python calls that processor once per token; ngramspec
applies it to each verified row (integrations/row_processors.py). Methods behind HTTP
are not given the processor, so their runs are recorded as errors, not timed.
"""
from __future__ import annotations

import json
from typing import Any, Callable

from ngramspec.suite.schema_extraction import SCHEMA, table_prompts
from ngramspec.suite.workload import Item, Workload, require_dist

__all__ = ["OutlinesProcessors", "outlines_schema"]


def outlines_schema(chat: Callable[[list[dict[str, str]]], str], n: int, rows: int, max_tokens: int) -> Workload:
    tz_version, version = require_dist("tzdata"), require_dist("outlines")
    schema = json.dumps(SCHEMA)
    items = [Item(label, prompt, max_tokens, json_schema=schema) for label, prompt in table_prompts(chat, n, rows)]
    return Workload("outlines_schema", f"a real data table turned into JSON that follows a JSON schema, "
                                       f"constrained by outlines {version}'s logits processor (in-process methods)",
                    f"iso3166.tab from PyPI tzdata {tz_version}", items)


#: Each schema's index, per model file: seconds to build, and the same for every run.
_INDEXES: dict[tuple[str, str], Any] = {}


class OutlinesProcessors:
    """A fresh outlines processor per run for an item's JSON schema, on one Llama. The
    schema's index (seconds to build) is built once per model and schema, outside the
    timings."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm

    def prepare(self, schema: str) -> Any:
        """The schema's index, built now if it is not yet (the suite calls this before
        it starts a run's clock)."""
        key = (str(self.llm.model_path), schema)
        if key not in _INDEXES:
            import outlines
            from outlines.backends.outlines_core import OutlinesCoreBackend

            backend = OutlinesCoreBackend(outlines.from_llamacpp(self.llm))
            _INDEXES[key] = backend.get_json_schema_logits_processor(schema).index
        return _INDEXES[key]

    def processor(self, schema: str) -> Any:
        """A new ``LogitsProcessorList`` holding outlines_core's processor for ``schema``."""
        from llama_cpp import LogitsProcessorList
        from outlines.backends.outlines_core import OutlinesCoreLogitsProcessor

        processor: Any = OutlinesCoreLogitsProcessor(self.prepare(schema), "numpy")
        return LogitsProcessorList([processor])
