"""Where a benchmark ran: the CPU and the commit, for every report we write."""
from __future__ import annotations

import platform
import subprocess


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except Exception:
        return platform.processor() or "unknown"


def git_commit() -> str:
    """The commit of the git checkout the benchmark runs from (the current
    directory), for reports; "unknown" outside a checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True).stdout.strip()
        return out.stdout.strip() + (" (with uncommitted changes)" if dirty else "") if out.returncode == 0 \
            else "unknown"
    except OSError:
        return "unknown"


def emit_report(text: str, out: str | None) -> None:
    """Print a markdown report and, when asked, write it to ``out``."""
    from pathlib import Path

    print(text)
    if out:
        Path(out).write_text(text)
