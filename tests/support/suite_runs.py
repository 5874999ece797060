"""One quick item of a suite workload, run by plain and by ngramspec on the suite's
Llama, as the benchmark runs it (a Suite built by hand around the test's Llama)."""
from __future__ import annotations

import dataclasses
from typing import Any

from ngramspec.suite import runner, sources
from ngramspec.suite.loading import make_engine


def plain_and_ngramspec(llm: Any, invariance: Any, workload: str, max_tokens: int) -> tuple[Any, Any]:
    """The plain and ngramspec runs of the quick ``workload``'s first item, cut to
    ``max_tokens``; neither ended in an error."""
    (w,) = sources.build(llm, quick=True, names=[workload])
    w = dataclasses.replace(w, items=[dataclasses.replace(w.items[0], max_tokens=max_tokens)])
    suite = runner.Suite.__new__(runner.Suite)
    suite.model, suite.quick, suite.llm, suite.progress = "smollm2-135m", True, llm, False
    suite.methods, suite.workloads, suite.servers, suite.lookup = ("plain", "ngramspec"), [w], {}, None
    suite.invariance = invariance
    suite.engines = {"ngramspec": make_engine(llm, "ngramspec", invariance=invariance)}
    runs = suite.run(1)
    assert all(not r.error for r in runs), [r.error for r in runs]
    plain, spec = (next(r for r in runs if r.method == m) for m in ("plain", "ngramspec"))
    return plain, spec
