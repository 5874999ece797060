"""``ngramspec install-llama``: rebuild the installed llama-cpp-python with the
flags exact speculation needs (or, with --stock, as a plain pip install does)."""
from __future__ import annotations

import argparse
import sys

from ngramspec.errors import UserError


def run(args: argparse.Namespace) -> int:
    from ngramspec.builds import llama_build

    kind = "stock" if args.stock else "exact"
    p = llama_build.plan(kind, args.version)
    if args.print_flags:
        print(" ".join(p.args) or "(no flags)")
        print(p.folder)
        print("patches: " + (" ".join(str(f) for f in p.patches) or "(none)"))
        return 0
    print(p.describe())
    if p.version != llama_build.PINNED_VERSION:
        print(f"note: ngramspec is tested with llama-cpp-python {llama_build.PINNED_VERSION}, not {p.version}")
    from ngramspec.builds.build_info import build_label, is_exact_build

    cur = p.current
    same_kind = cur.importable and is_exact_build(cur.system_info) == (kind == "exact")
    # An exact build from before GGML_RPC=ON or our patch set was added is rebuilt.
    patched = not p.patches or llama_build.batch_invariant_max(cur.system_info) > 0
    current_flags = kind != "exact" or (cur.rpc and patched)
    if same_kind and current_flags and cur.version == p.version and not args.rebuild:
        print(f"llama-cpp-python {cur.version} is already the {kind} build: nothing to do")
        return 0
    if args.dry_run:
        print("dry run: nothing was changed")
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            raise UserError("refusing to replace llama-cpp-python without confirmation: add --yes")
        answer = input("Replace it? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            print("nothing was changed")
            return 1
    try:
        after = llama_build.install(p, rebuild=args.rebuild)
    except llama_build.BuildError as e:
        raise UserError(str(e)) from None
    verdict = build_label(after.system_info)
    print(f"llama-cpp-python {after.version} installed: {verdict}. `ngramspec doctor` checks it with a model.")
    return 0
