"""The main job's demo: what ``ngramspec generate`` does when it is given no prompt.

A task a user really runs: the model edits a real source file (one of this
package's own, ``ngramspec/json_checks.py``) and answers with the whole file, with
the file as its prediction (OpenAI's predicted outputs). Most of the answer is the
file unchanged, so most of it is drafted from the prediction and verified in
batches; the text stays exactly what plain greedy decoding gives.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["DEMO_MAX_TOKENS", "Demo", "demo"]

#: The demo's answer is the whole file (about 250 tokens): room for it, and its end.
DEMO_MAX_TOKENS = 512

# Worded for the default model (Qwen2.5-Coder-0.5B): with the instruction before the
# code, or asked for a rename, it answered with the file unchanged.
_SYSTEM = "You are a careful programmer. You edit code exactly as asked."
_INSTRUCTION = "Add a function is_text(x) that returns True when x is a str. Reply with the whole updated file."


@dataclass(frozen=True)
class Demo:
    """The demo's chat messages, its prediction, and a line that says what it is."""

    messages: list[dict[str, str]]
    prediction: str
    description: str


def demo() -> Demo:
    """The demo task, built from the installed package's ``json_checks.py``."""
    from ngramspec import json_checks

    path = Path(json_checks.__file__)
    source = path.read_text(encoding="utf-8")
    messages = [{"role": "system", "content": _SYSTEM},
                {"role": "user", "content": f"```python\n{source}```\n\n{_INSTRUCTION}"}]
    prediction = f"```python\n{source}```"
    return Demo(messages, prediction,
                f"the model adds a function to ngramspec/{path.name}, answering with the whole file; the file "
                "is its prediction")
