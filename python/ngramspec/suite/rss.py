"""Child process for ``runner.peak_rss_mib``: reads a job as JSON on stdin, loads
the model, runs one method on one prompt, prints its peak RSS in MiB."""
from __future__ import annotations

import json
import resource
import sys


def main() -> None:
    job = json.load(sys.stdin)
    from .runner import load
    from .sources import Item

    item = Item(**job["item"])
    method = job["method"]
    llm = load(job["path"], method, job["n_ctx"], job["threads"])
    if method.startswith("ngramspec"):
        from ..engine import SpeculativeEngine

        engine = (SpeculativeEngine(llm, exact=False, max_draft=16) if method == "ngramspec fast"
                  else SpeculativeEngine(llm, copy=method != "ngramspec n-gram only"))
        engine.generate(item.prompt, max_tokens=item.max_tokens, stop=item.stop or None)
    else:
        llm.create_completion(item.prompt, max_tokens=item.max_tokens, temperature=0.0, stop=item.stop or None)
    llm.close()
    print(peak_mib())


def peak_mib() -> float:
    """This process's peak resident memory. On Linux, ru_maxrss survives exec
    (a child inherits its parent's peak), so read the fresh address space's
    high-water mark instead."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB elsewhere


if __name__ == "__main__":
    main()
