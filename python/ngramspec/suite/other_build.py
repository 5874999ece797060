"""Methods that run on another llama.cpp build, side by side with this process's.

Users mostly have the stock llama-cpp-python (llamafile's sgemm and weight repacking
on); exact mode wants our exact build. One Python can load only one of them, so the
suite starts a worker in the other build's Python (``python -m
ngramspec.suite.other_build``) and hands it one run at a time over a pipe: both builds'
runs are interleaved in the same rounds, on the same prompts, as ratios to one baseline.

Protocol: one JSON object per line. The suite sends the set-up (model path, n_ctx,
threads, methods); the worker answers with its build's description once loaded, then
answers each job (method, workload, item, round) with a ``Run``. The worker's own
stdout is its stderr, so nothing llama.cpp prints can corrupt the pipe.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from typing import IO, Any

from ngramspec.errors import NgramspecError
from ngramspec.suite.in_process import InProcessMethods
from ngramspec.suite.llama_settings import LLAMA_DEFAULTS, LlamaSettings
from ngramspec.suite.loading import check_for_methods, load, make_engine
from ngramspec.suite.methods import ENGINE_OPTIONS, OTHER_BUILD_METHODS
from ngramspec.suite.run_record import Run
from ngramspec.suite.workload import Item


class OtherBuildError(NgramspecError, RuntimeError):
    """The other build's worker could not start or stopped answering."""


class OtherBuild:
    """A worker process on another Python's llama-cpp-python build.

    methods: the suite's names for its methods, prefixed by the build's label
    ("stock plain", "exact-build ngramspec fast"); ``plain``: its plain decoding's name.
    """

    def __init__(self, python: str, model_path: str, n_ctx: int, threads: int | None, *,
                 methods: tuple[str, ...] = OTHER_BUILD_METHODS, progress: bool = True,
                 settings: LlamaSettings = LLAMA_DEFAULTS) -> None:
        from ngramspec.builds.kernel_env import peer_environ

        # The other build's own ngramspec decides its kernel switches, as it would for a user.
        env = {**peer_environ(), "PYTHONUNBUFFERED": "1"}
        try:
            self.proc = subprocess.Popen([python, "-m", "ngramspec.suite.other_build"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=None if progress else subprocess.DEVNULL,
                                         text=True, env=env)
        except OSError as e:
            raise OtherBuildError(f"cannot start {python}: {e.strerror or e}") from None
        try:
            hello = self._ask({"model_path": model_path, "n_ctx": n_ctx, "threads": threads,
                               "methods": list(methods), "progress": progress, "settings": asdict(settings)})
        except BaseException:
            self.close()
            raise
        self.info: dict[str, Any] = hello
        from ngramspec.builds.build_info import build_tag

        self.label = build_tag(hello["system_info"])
        self.names = {f"{self.label} {m}": m for m in methods}
        self.methods = tuple(self.names)
        self.plain = f"{self.label} plain"

    def _ask(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
        except OSError:
            pass  # the worker is gone; its exit is reported below
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            raise OtherBuildError(f"the other build's worker stopped (exit code {code}); its stderr says why")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise OtherBuildError(f"the other build's worker failed: {answer['error']}")
        return answer

    def run_once(self, method: str, workload: str, item: Item, round_: int) -> Run:
        answer = self._ask({"method": self.names[method], "workload": workload, "item": asdict(item),
                            "round": round_})
        run = Run(**answer["run"])
        run.method = method
        return run

    def close(self) -> None:
        proc = getattr(self, "proc", None)
        if proc is None or proc.poll() is not None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()


def _serve(requests: IO[str], answers: IO[str]) -> None:
    import llama_cpp

    from ngramspec.builds.build_info import system_info

    def send(obj: dict[str, Any]) -> None:
        answers.write(json.dumps(obj) + "\n")
        answers.flush()

    setup = json.loads(requests.readline())
    llm = load(setup["model_path"], "plain", setup["n_ctx"], setup["threads"],
               LlamaSettings.from_dict(setup.get("settings")))
    invariance = check_for_methods(llm, setup["methods"], setup["progress"])
    engines = {m: make_engine(llm, m, invariance=invariance) for m in setup["methods"] if m in ENGINE_OPTIONS}
    for engine in engines.values():
        engine.prepare()
    methods = InProcessMethods(llm, engines)
    info = system_info()
    send({"system_info": info, "version": llama_cpp.__version__,
          "python": sys.executable})
    for line in requests:
        job = json.loads(line)
        run = methods.run_once(job["method"], job["workload"], Item(**job["item"]), job["round"])
        send({"run": asdict(run)})
    llm.close()


def main() -> int:
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())   # anything else printed goes to stderr
    try:
        _serve(sys.stdin, answers)
    except Exception as e:
        answers.write(json.dumps({"error": f"{type(e).__name__}: {e}"}) + "\n")
        answers.flush()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
