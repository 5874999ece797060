"""What a workload is (``Workload``, its ``Item``s) and what every module that builds
workloads shares: the check that a package holding material is installed
(``require_dist``) and tzdata's ISO 3166 table. ``sources`` (the default workloads),
``long_sources`` and ``schema_extraction`` build on it; it imports none of them, so
no two of them import each other."""
from __future__ import annotations

import importlib.metadata
import importlib.resources
from dataclasses import dataclass, field
from typing import Callable

from ngramspec.errors import NgramspecError

__all__ = ["Chat", "Item", "MissingMaterialError", "Workload", "iso3166_rows", "require_dist"]

#: Messages -> prompt text, with the model's chat template (``sources.chat_formatter``).
Chat = Callable[[list[dict[str, str]]], str]


@dataclass
class Item:
    """One prompt of a workload."""
    label: str
    prompt: str                      # the exact text sent (chat template already applied)
    max_tokens: int
    stop: list[str] = field(default_factory=list)
    # predicted_edit only: the caller's predicted output (OpenAI's ``prediction``),
    # and an unrelated text given as a wrong prediction.
    prediction: str | None = None
    wrong_prediction: str | None = None
    # schema_extraction only: the GBNF grammar every method decodes under.
    grammar: str | None = None
    # outlines_schema only: the JSON schema outlines' logits processor constrains the output to.
    json_schema: str | None = None


@dataclass
class Workload:
    name: str
    description: str
    source: str                      # where the material comes from, for the report
    items: list[Item]


class MissingMaterialError(NgramspecError, RuntimeError):
    """A package that holds benchmark material is not installed."""


def require_dist(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        raise MissingMaterialError(f"the benchmark needs the {dist!r} package for its material: "
                                   f"pip install 'ngramspec[bench]'") from None


def iso3166_rows() -> list[str]:
    text = (importlib.resources.files("tzdata") / "zoneinfo" / "iso3166.tab").read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line and not line.startswith("#")]
