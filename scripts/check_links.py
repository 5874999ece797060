"""Checks that every relative link in the given Markdown files (default: README.md)
names a file or folder that exists. mkdocs checks the links inside docs/
(scripts/check.sh docs); README.md is outside docs/, so this checks it.

Skipped: links with a scheme (https:, mailto:, ...), links that are only an #anchor,
and anything inside code (fenced blocks and `spans`). An #anchor after a path is
dropped: only the file is checked. An absolute path (/docs/...) is an error: links
must be relative, so that they work on GitHub, in a clone and in the sdist.

Usage: python scripts/check_links.py [FILE.md ...]     exit status 1 on a broken link
"""
from __future__ import annotations

import re
import sys
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+).+?\1", re.DOTALL)
# [text](target) or [text](target "title"), images included; also [label]: target definitions.
INLINE = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'(][^)]*)?\)")
DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def broken_links(path: Path) -> list[str]:
    text = CODE_SPAN.sub("", FENCE.sub("", path.read_text(encoding="utf-8")))
    problems = []
    for target in INLINE.findall(text) + DEFINITION.findall(text):
        if SCHEME.match(target) or target.startswith("#"):
            continue
        file = unquote(target.split("#", 1)[0].split("?", 1)[0])
        resolved = path.parent / file
        if file.startswith("/"):
            problems.append(f"{path}: link to '{target}': an absolute path; use a relative link")
        elif not resolved.exists():
            problems.append(f"{path}: link to '{target}': {resolved} does not exist")
    return problems


def main(argv: list[str]) -> int:
    files = [Path(a) for a in argv] or [ROOT / "README.md"]
    problems = [p for f in files for p in broken_links(f)]
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
