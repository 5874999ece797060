"""Each ngramspec method against the best llama-server n-gram mode of its own llama.cpp
build, per workload, from a suite report's JSON (``ngramspec bench --llama-server ...
--out DIR``): the report's own section, for reports written before it compared every
ngramspec method and both builds.

    python bench/server_comparison.py bench/results/suite-....json
"""
from __future__ import annotations

import argparse
import json

from ngramspec.suite.report import llama_server_section
from ngramspec.suite.summary import WorkloadFigures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("report", help="a suite report's JSON")
    args = ap.parse_args()
    with open(args.report) as f:
        data = json.load(f)
    figs = [WorkloadFigures.from_json(w) for w in data["workloads"]]
    lines = llama_server_section(figs, data["methods"])
    print("\n".join(lines) if lines else "no llama-server mode and ngramspec method of one build in this report")


if __name__ == "__main__":
    main()
