"""Splits a file into parts that travel in separate device calls, and stitches
them back together there, checking every part's sha256 and the whole file's.

A GGUF model larger than what one call carries (SmolLM2-135M's is 98 MB; a call
carries 64 MiB with the working tree) goes in two calls while the machine stays
warm: the first call's part is copied into a git-ignored folder, which survives
until the second call, and the second call stitches.

Usage: python scripts/gpu/model_parts.py split FILE --sizes N1,N2 --names A,B --out DIR
       python scripts/gpu/model_parts.py stitch OUTFILE --sha256 HEX PART [PART ...]
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

_BLOCK = 1 << 20


class PartsError(Exception):
    """A part is missing, or a part or the stitched file has the wrong sha256; the message says which."""


@dataclass(frozen=True)
class Part:
    name: str
    size: int
    sha256: str


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def split(path: Path, sizes: Sequence[int], names: Sequence[str], out_dir: Path) -> list[Part]:
    """Writes ``path`` as consecutive parts of ``sizes`` bytes (the last one gets the
    rest; give it as 0) named ``names`` into ``out_dir``."""
    if len(sizes) != len(names) or not names:
        raise ValueError("give one size per part name")
    total = path.stat().st_size
    if any(s < 1 for s in sizes[:-1]) or sum(sizes[:-1]) >= total:
        raise ValueError(f"part sizes {list(sizes[:-1])} do not leave a last part of a {total}-byte file")
    out_dir.mkdir(parents=True, exist_ok=True)
    parts = []
    with path.open("rb") as src:
        for i, (size, name) in enumerate(zip(sizes, names)):
            left = total - src.tell() if i == len(sizes) - 1 else size
            digest = hashlib.sha256()
            with (out_dir / name).open("wb") as dst:
                while left > 0:
                    block = src.read(min(_BLOCK, left))
                    if not block:
                        raise PartsError(f"{path} shrank while it was split")
                    digest.update(block)
                    dst.write(block)
                    left -= len(block)
            parts.append(Part(name, (out_dir / name).stat().st_size, digest.hexdigest()))
    return parts


def stitch(parts: Sequence[Path], out: Path, sha256: str, part_sha256: Sequence[str] | None = None) -> Path:
    """Concatenates ``parts`` into ``out`` (written beside it first, renamed into place only
    when the whole file's sha256 is ``sha256``). ``part_sha256``: each part's expected
    sha256, checked first so that a failure names the part at fault."""
    missing = [str(p) for p in parts if not p.is_file()]
    if missing:
        raise PartsError(f"missing part(s): {', '.join(missing)}")
    if part_sha256 is not None:
        for p, want in zip(parts, part_sha256):
            got = sha256_of(p)
            if got != want:
                raise PartsError(f"{p}: sha256 {got}, expected {want}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    digest = hashlib.sha256()
    try:
        with tmp.open("wb") as dst:
            for p in parts:
                with p.open("rb") as src:
                    while block := src.read(_BLOCK):
                        digest.update(block)
                        dst.write(block)
        if digest.hexdigest() != sha256:
            raise PartsError(f"the stitched {out.name} has sha256 {digest.hexdigest()}, expected {sha256}")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("split")
    s.add_argument("file", type=Path)
    s.add_argument("--sizes", required=True, help="bytes per part, comma-separated; the last is the rest (0)")
    s.add_argument("--names", required=True)
    s.add_argument("--out", type=Path, required=True)
    t = sub.add_parser("stitch")
    t.add_argument("out", type=Path)
    t.add_argument("--sha256", required=True)
    t.add_argument("parts", type=Path, nargs="+")
    opts = ap.parse_args()
    try:
        if opts.command == "split":
            for p in split(opts.file, [int(x) for x in opts.sizes.split(",")], opts.names.split(","), opts.out):
                print(f"{p.name} {p.size} {p.sha256}")
        else:
            print(stitch(opts.parts, opts.out, opts.sha256))
    except (PartsError, ValueError, OSError) as e:
        print(f"model_parts.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
