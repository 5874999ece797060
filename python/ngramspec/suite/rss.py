"""Peak resident memory: the child process for ``runner.peak_rss_mib`` (reads a
job as JSON on stdin, loads the model, runs one method on one prompt, prints its
peak RSS in MiB), and the one reader of Linux's high-water mark (``vmhwm_mib``)
that it and ``server.LlamaServer`` share."""
from __future__ import annotations

import json
import sys


def main() -> None:
    job = json.load(sys.stdin)
    from ngramspec.suite.runner import ENGINE_OPTIONS, load, make_engine
    from ngramspec.suite.sources import Item

    item = Item(**job["item"])
    method = job["method"]
    llm = load(job["path"], method, job["n_ctx"], job["threads"])
    if method in ENGINE_OPTIONS:
        make_engine(llm, method).generate(item.prompt, max_tokens=item.max_tokens, stop=item.stop or None)
    else:
        llm.create_completion(item.prompt, max_tokens=item.max_tokens, temperature=0.0, stop=item.stop or None)
    llm.close()
    print(peak_mib())


def vmhwm_mib(pid: int | str = "self") -> float | None:
    """A process's peak resident memory in MiB, from ``VmHWM`` in
    /proc/<pid>/status; None where that cannot be read (not Linux, process gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def peak_mib() -> float:
    """This process's peak resident memory. On Linux, ru_maxrss survives exec
    (a child inherits its parent's peak), so read the fresh address space's
    high-water mark instead."""
    peak = vmhwm_mib()
    if peak is not None:
        return peak
    import resource

    peak_raw = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak_raw / (1024 * 1024) if sys.platform == "darwin" else peak_raw / 1024  # bytes on macOS, KiB elsewhere


if __name__ == "__main__":
    main()
