"""The device tool calls of the GPU run, exactly as a session makes them: the
command (at most 2,000 characters), the paths carried (relative to the root of
the checkout the session sends) and the timeout. scripts/gpu/README.md shows the
same calls; tests/builds/test_gpu_run.py checks that they agree and fit.

Usage: python scripts/gpu/device_calls.py      (prints them as JSON)
"""
from __future__ import annotations

import json
import sys

#: The device tool's limit on one command's length.
COMMAND_LIMIT = 2000
#: The device tool's limit on one command's run (seconds).
CALL_LIMIT_S = 600

# Call 1: the first model part into a git-ignored folder that outlives the call
# while the machine stays warm (about 30 s): call 2 must follow at once.
STASH = {
    "command": "set -e; python3 scripts/gpu/gpu_run.py stash",
    "carry": [".gpu-carry/call1"],
    "timeout_s": 120,
}

# Call 2: everything else. gpu_run.py stops measuring at --budget (seconds from its
# start), `timeout` kills it 20 s later if a step hangs, and the tool's own limit
# (timeout_s) is 20 s after that: the results written so far come back in $OUT.
RUN = {
    "command": ('set -eo pipefail; export PYTHONUNBUFFERED=1; '
                'timeout -k 5 570 python3 scripts/gpu/gpu_run.py all --out "$OUT" --budget 550 '
                '2>&1 | tee "$OUT/run.log"'),
    "carry": [".gpu-carry/call2"],
    "timeout_s": 600,
}

# Call 3, only if call 2 ran out of time and the session has the minutes: on the
# same warm machine, the steps call 2 finished are skipped (.gpu-work keeps its
# results, the build and the models); nothing needs carrying.
RESUME = {
    "command": ('set -eo pipefail; export PYTHONUNBUFFERED=1; '
                'timeout -k 5 BUDGET_PLUS_20 python3 scripts/gpu/gpu_run.py all --resume --out "$OUT" '
                '--budget BUDGET 2>&1 | tee "$OUT/run.log"'),
    "carry": [],
    "timeout_s": 0,   # BUDGET + 50, at most CALL_LIMIT_S
}

CALLS = {"stash": STASH, "run": RUN, "resume": RESUME}


def resume_call(budget_s: int) -> dict[str, object]:
    """Call 3 for a budget of ``budget_s`` seconds (what the session has left, less
    a margin for the transfer)."""
    if not 30 <= budget_s <= CALL_LIMIT_S - 50:
        raise ValueError(f"budget_s must be in 30..{CALL_LIMIT_S - 50}, got {budget_s}")
    command = str(RESUME["command"]).replace("BUDGET_PLUS_20", str(budget_s + 20)).replace("BUDGET", str(budget_s))
    return {"command": command, "carry": [], "timeout_s": budget_s + 50}


def main() -> int:
    print(json.dumps(CALLS, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
