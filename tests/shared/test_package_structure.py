"""The package's import graph and private names, read from the source with ``ast``
(no model, nothing imported).

**No import cycle** between any two modules of ``python/ngramspec``
(docs/design.md, "The layers": imports run one way, downward). Every import
statement counts, wherever it stands: at module level, inside a function, under
``if TYPE_CHECKING:``. A function-local import runs later than a module-level one,
but it still means each module needs the other, which is the tangle this rule keeps
out; so deferring an import is never the way around a cycle: moving what both
need into a module below both is. Not counted: the implicit import of a module's
parent packages, and ``importlib.import_module`` calls (ngramspec/__init__.py's
lazy exports), which name no module to ``ast``.

**No module reads another module's private names**: no ``from x import _y`` and no
``x._y``, where ``x`` is another module of the package, and no ``obj._y`` (or
``getattr(obj, "_y")``) of a name the reading module does not itself define. The
underscore modules (``_llama``, ``_rpc``, ``_core``) are the package's own shared
internals and may be imported; their names are public to the package. The one
module that reaches into llama-cpp-python's private names (``llm._model``,
``LlamaGrammar._grammar``, ...) is ``_llama.py``: everything else asks it; the one
that reaches into outlines' (its processor's guides) is ``integrations/outlines_rows.py``.
The standard library's private classes (``argparse._SubParsersAction`` in
annotations) are outside this rule.
"""
from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2] / "python"
PACKAGE = SOURCE / "ngramspec"
#: The one module that may read llama-cpp-python's private names.
LLAMA_INTERNALS = "ngramspec._llama"
#: The one module that may read outlines' private names.
OUTLINES_INTERNALS = "ngramspec.integrations.outlines_rows"
#: The standard library's private attributes read on its objects (``ast`` cannot tell
#: an ``argparse.ArgumentParser`` from any other object): argparse's table of actions,
#: which the command line reads to spell each option two ways.
STDLIB_OBJECT_INTERNALS = frozenset({"_actions", "_option_string_actions"})


def _modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of the package (``_core``: its stub)."""
    out = {}
    for f in sorted(PACKAGE.rglob("*.py")) + [PACKAGE / "_core.pyi"]:
        parts = list(f.relative_to(SOURCE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = f
    return out


MODULES = _modules()
TREES = {name: ast.parse(path.read_text(encoding="utf-8"), str(path)) for name, path in MODULES.items()}


def _is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def _imported_from(module: str, node: ast.ImportFrom) -> str | None:
    """The absolute module an ``from ... import`` statement of ``module`` names."""
    if not node.level:
        return node.module
    base = module.split(".") if _is_package(module) else module.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str) -> Iterator[tuple[str, int]]:
    """(package module imported, line) for every import statement of ``module``."""
    for node in ast.walk(TREES[module]):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                # ``import a.b.c`` imports a.b.c (and its parents, implicitly)
                target = next((".".join(parts[:n]) for n in range(len(parts), 0, -1)
                               if ".".join(parts[:n]) in MODULES), None)
                if target is not None:
                    yield target, node.lineno
        elif isinstance(node, ast.ImportFrom):
            source = _imported_from(module, node)
            if source is None:
                continue
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                if sub in MODULES:            # from package import submodule
                    yield sub, node.lineno
                elif source in MODULES:
                    yield source, node.lineno


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {module it imports: line of the first such import}."""
    graph: dict[str, dict[str, int]] = {}
    for module in MODULES:
        edges: dict[str, int] = {}
        for target, line in _imports(module):
            if target != module:
                edges.setdefault(target, line)
        graph[module] = edges
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph)))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return found


def test_no_import_cycle_between_modules_of_the_package():
    graph = import_graph()
    assert len(graph) > 100 and "ngramspec.engine.speculative_engine" in graph["ngramspec.suite.loading"]
    report = []
    for component in cycles(graph):
        edges = [f"  {a} -> {b} (line {graph[a][b]})" for a in component for b in graph[a] if b in component]
        report.append("cycle: " + ", ".join(component) + "\n" + "\n".join(edges))
    assert not report, "\n".join(report)


def test_the_cycle_finder_finds_a_function_local_cycle():
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 9}, "d": {"a": 1}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b": 1}, "b": {}}) == []


def _defined_names(tree: ast.AST) -> set[str]:
    """Every name a module defines or binds: functions, classes, assignments (of
    names and of attributes, ``self._x = ...`` included), arguments, imports."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
    return names


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _module_names(module: str, tree: ast.AST) -> dict[str, str]:
    """Local name -> module, for the names ``module`` binds to modules: of the
    package (``from ngramspec import models``, ``import ngramspec.x as y``) and of the
    standard library (``import argparse``)."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            source = _imported_from(module, node)
            for alias in node.names:
                if source and f"{source}.{alias.name}" in MODULES:
                    bound[alias.asname or alias.name] = f"{source}.{alias.name}"
    return bound


def private_reads(module: str) -> Iterator[str]:
    """Where ``module`` reads a private name that is not its own (see the module docstring)."""
    tree = TREES[module]
    own = _defined_names(tree)
    bound = _module_names(module, tree)
    path = MODULES[module].relative_to(SOURCE)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _imported_from(module, node) or ""
            for alias in node.names:
                if not _private(alias.name) or f"{source}.{alias.name}" in MODULES:
                    continue
                if source in MODULES or (source.split(".")[0] not in sys.stdlib_module_names
                                         and module not in (LLAMA_INTERNALS, OUTLINES_INTERNALS)):
                    yield f"{path}:{node.lineno}: from {source} import {alias.name}"
            continue
        if isinstance(node, ast.Attribute) and _private(node.attr):
            name, value = node.attr, node.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str) and _private(node.args[1].value)):
            name, value = node.args[1].value, node.args[0]
        else:
            continue
        where = f"{path}:{node.lineno}: {ast.unparse(node)}"
        target = bound.get(value.id) if isinstance(value, ast.Name) else None
        if target is not None:
            if f"{target}.{name}" in MODULES:       # a submodule, such as ngramspec._llama
                continue
            if target in MODULES:                   # another module's private name
                yield where
                continue
            if target.split(".")[0] in sys.stdlib_module_names:
                continue                            # the standard library's: outside this rule
        if isinstance(value, ast.Name) and value.id in ("self", "cls"):
            continue
        if name in own or name in STDLIB_OBJECT_INTERNALS or module in (LLAMA_INTERNALS, OUTLINES_INTERNALS):
            continue
        yield where


def test_no_module_reads_another_modules_private_names():
    found = [line for module in MODULES for line in private_reads(module)]
    assert not found, "private names read across modules:\n" + "\n".join(found)


def test_the_private_name_rule_sees_each_form(tmp_path):
    tree = ast.parse("from ngramspec.calibration.invariance import _GEOMETRIC\n"
                     "from llama_cpp import _logger\n"
                     "from ngramspec import models, _llama\n"
                     "import argparse\n"
                     "def f(grammar, llm):\n"
                     "    models._cache_dir()\n"
                     "    _llama.context_of(llm)\n"
                     "    argparse._SubParsersAction\n"
                     "    getattr(grammar, '_grammar', None)\n"
                     "    return grammar._root\n")
    name = "ngramspec.suite.made_up"
    MODULES[name], TREES[name] = PACKAGE / "suite" / "made_up.py", tree
    try:
        found = [line.split(": ", 1)[1] for line in private_reads(name)]
    finally:
        del MODULES[name], TREES[name]
    assert sorted(found) == sorted(["from ngramspec.calibration.invariance import _GEOMETRIC",
                                    "from llama_cpp import _logger", "models._cache_dir",
                                    "getattr(grammar, '_grammar', None)", "grammar._root"]), found
