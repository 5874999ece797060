"""The long-output workloads: answers of 256-1,024 tokens, where long drafts can show.

The quick and default workloads (``sources.py``) end after 48-192 tokens, too soon
for a drafter that learns, or for a long copy draft, to matter. These ask for what
users ask for at length: a whole file edited, a long function with a rename, a
table turned into JSON, a clause quoted in full, a story, and a refactor of code
from an earlier turn. The material is real text that no one on the team wrote, from
the running Python's standard library and PyPI tzdata, and none of the tests use it.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import platform
import textwrap
from typing import Any, Callable

from ngramspec.suite.workload import Chat, Item, MissingMaterialError, Workload, iso3166_rows, require_dist

__all__ = ["LONG_WORKLOADS", "build_long"]


def _source(module: str, qualname: str = "") -> str:
    obj: Any = importlib.import_module(module)
    for part in filter(None, qualname.split(".")):
        obj = getattr(obj, part)
    return textwrap.dedent(inspect.getsource(obj))


def whole_file_edit(chat: Chat, max_tokens: int) -> Workload:
    edits = [("colorsys", "Rename the helper function `_v` to `_hue_to_value` everywhere in this module."),
             ("bisect", "Add type hints to the parameters and return values of every function in this module.")]
    items = [Item(f"{module}.py", chat([{"role": "user", "content":
                  f"{instruction} Reply with the whole updated file.\n\n```python\n{_source(module)}```"}]),
                  max_tokens) for module, instruction in edits]
    return Workload("whole_file_edit", "a whole module edited and given back in full",
                    f"Python {platform.python_version()} standard library (colorsys.py, bisect.py)", items)


def rename_in_function(chat: Chat, max_tokens: int) -> Workload:
    edits = [("shlex", "shlex.read_token", "nextchar", "next_char"),
             ("textwrap", "TextWrapper._wrap_chunks", "cur_line", "current_line")]
    items = [Item(f"{module}.{name}", chat([{"role": "user", "content":
                  f"Rename the local variable `{old}` to `{new}`. Reply with the whole method.\n\n"
                  f"```python\n{_source(module, name)}```"}]), max_tokens)
             for module, name, old, new in edits]
    return Workload("rename_in_function", "a rename inside a long method, the method given back in full",
                    f"Python {platform.python_version()} standard library (shlex, textwrap)", items)


def table_to_json(chat: Chat, rows: int, max_tokens: int) -> Workload:
    version = require_dist("tzdata")
    table = iso3166_rows()
    items = []
    for start in (120, 180):
        chunk = "\n".join(table[start:start + rows])
        items.append(Item(f"iso3166.tab rows {start}-{start + rows - 1}", chat([{"role": "user", "content":
                          "Turn this tab-separated table of ISO 3166 country codes into a JSON array of objects "
                          'with the keys "alpha2" and "country". Output only the JSON.\n\n' + chunk}]), max_tokens))
    return Workload("table_to_json", "a long data table turned into JSON",
                    f"iso3166.tab from PyPI tzdata {version}", items)


def grounded_quote(chat: Chat, max_tokens: int) -> Workload:
    version = require_dist("tzdata")
    licence = importlib.metadata.distribution("tzdata").read_text("licenses/licenses/LICENSE_APACHE")
    if not licence:
        raise MissingMaterialError("tzdata's wheel no longer ships licenses/LICENSE_APACHE")
    text = licence[: licence.index("5. Submission of Contributions")].strip()
    # Worded as Qwen2.5-Coder answers with the quote (asked to "quote Section 4 ... then
    # say ...", it repeated the question and stopped).
    items = [Item(f"section {n}", chat([{"role": "user", "content":
                  f"Read this license.\n\n{text}\n\nWhat does Section {n} say? Quote it in full."}]), max_tokens)
             for n in (4, 3)]
    return Workload("grounded_quote", "a long answer that quotes a long text",
                    f"Apache License 2.0, sections 1-4 (as shipped in PyPI tzdata {version})", items)


def open_story(chat: Chat, max_tokens: int) -> Workload:
    subjects = ["a lighthouse keeper who finds a message in a bottle",
                "two rival bakers in a small mountain town who must work together"]
    items = [Item(f"story: {s}", chat([{"role": "user", "content": f"Write a long story about {s}."}]), max_tokens)
             for s in subjects]
    return Workload("open_story", "an open-ended story: nothing to copy, speculation must not hurt",
                    "two story requests (no source text)", items)


def multi_turn_refactor(chat: Chat, max_tokens: int) -> Workload:
    turns = [("reprlib", "Repr", "It produces size-limited string representations of objects, with one "
              "repr_<type> method per built-in type and limits such as maxlist and maxstring."),
             ("calendar", "TextCalendar", "It formats calendars as plain text, like the UNIX program cal: "
              "days, weeks, months and whole years.")]
    items = []
    for module, name, summary in turns:
        src = _source(module, name)
        messages = [{"role": "user", "content": f"What does this class do?\n\n```python\n{src}```"},
                    {"role": "assistant", "content": summary},
                    {"role": "user", "content": "Refactor it: add a docstring to every method that has none and "
                                                "type hints to every method. Show the whole class."}]
        items.append(Item(f"{module}.{name}", chat(messages), max_tokens))
    return Workload("multi_turn_refactor", "a third turn that refactors code from the first",
                    f"Python {platform.python_version()} standard library (reprlib, calendar)", items)


#: The long-output workloads, in report order.
LONG_WORKLOADS = ("whole_file_edit", "rename_in_function", "table_to_json", "grounded_quote", "open_story",
                  "multi_turn_refactor")


def build_long(chat: Chat, names: tuple[str, ...]) -> list[Workload]:
    """The named long-output workloads (two items each), formatted with ``chat``."""
    makers: dict[str, Callable[[], Workload]] = {
        "whole_file_edit": lambda: whole_file_edit(chat, 768),
        "rename_in_function": lambda: rename_in_function(chat, 640),
        "table_to_json": lambda: table_to_json(chat, 30, 512),
        "grounded_quote": lambda: grounded_quote(chat, 512),
        "open_story": lambda: open_story(chat, 512),
        "multi_turn_refactor": lambda: multi_turn_refactor(chat, 640),
    }
    return [makers[n]() for n in names]
