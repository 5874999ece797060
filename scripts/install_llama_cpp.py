#!/usr/bin/env python3
"""Build (once) and install the pinned llama-cpp-python with the exact flags (or,
with --stock, as a plain `pip install` builds it) into the running Python.

The logic lives in the package (``ngramspec.builds.llama_build``, the `ngramspec
install-llama` command); this script loads that one module from the source tree,
so it runs before ngramspec itself is installed (scripts/setup.sh).

Usage: python scripts/install_llama_cpp.py [--stock] [--print-flags] [--rebuild] [--dry-run]
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

MODULE = Path(__file__).resolve().parent.parent / "python" / "ngramspec" / "builds" / "llama_build.py"


def load_llama_build():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("ngramspec_llama_build", MODULE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod   # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stock", action="store_true", help="build as a plain `pip install` does, not exact")
    ap.add_argument("--print-flags", action="store_true", help="print the CMake flags and cache folder")
    ap.add_argument("--rebuild", action="store_true", help="ignore the cached wheel")
    ap.add_argument("--dry-run", action="store_true", help="say what would happen, change nothing")
    opts = ap.parse_args()
    lb = load_llama_build()
    kind = "stock" if opts.stock else "exact"
    plan = lb.plan(kind, lb.PINNED_VERSION)
    folder = plan.folder
    if opts.print_flags:
        print(" ".join(plan.args) or "(no flags)")
        print(folder)
        print("patches: " + (" ".join(str(f) for f in plan.patches) or "(none)"))
        return 0
    if opts.dry_run:
        print(plan.describe())
        print("dry run: nothing was changed")
        return 0
    try:
        after = lb.install(plan, rebuild=opts.rebuild)
    except lb.BuildError as e:
        print(f"install_llama_cpp.py: {e}", file=sys.stderr)
        return 2
    print(f"llama-cpp-python {after.version} ({kind} build) installed from {lb.cached_wheel(folder)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
