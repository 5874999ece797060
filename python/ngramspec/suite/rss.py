"""Peak resident memory: ``peak_rss_mib`` starts this module as a child process
(``main``: reads a job as JSON on stdin, loads the model, runs one method on one
prompt, prints its peak RSS in MiB), and the one reader of Linux's high-water mark
(``vmhwm_mib``) that the child and ``llama_server.ServerProcess`` share."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict

from ngramspec.suite.llama_settings import LLAMA_DEFAULTS, LlamaSettings
from ngramspec.suite.loading import load, make_engine
from ngramspec.suite.methods import ENGINE_OPTIONS
from ngramspec.suite.workload import Item


def peak_rss_mib(path: str, method: str, item: Item, n_ctx: int, threads: int | None,
                 settings: LlamaSettings = LLAMA_DEFAULTS) -> float:
    """Peak resident memory of a fresh process that loads the model and runs one
    method on one item (MiB): each method's own footprint, not the suite's."""
    job = json.dumps({"path": path, "method": method, "item": asdict(item), "n_ctx": n_ctx, "threads": threads,
                      "settings": asdict(settings)})
    out = subprocess.run([sys.executable, "-m", "ngramspec.suite.rss"], input=job, capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"peak RSS probe for {method} failed: {tail}")
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    job = json.load(sys.stdin)
    item = Item(**job["item"])
    method = job["method"]
    llm = load(job["path"], method, job["n_ctx"], job["threads"], LlamaSettings.from_dict(job.get("settings")))
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
