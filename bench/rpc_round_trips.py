"""What one decode costs on the network, counted by ngramspec's guard: commands
relayed to each of two RPC workers (``ngramspec rpc-worker`` on 127.0.0.1), the
round trips among them (commands the client waits on), and the bytes sent, for a
sequence of batch sizes (the same size again, a new size, a size seen before).

Run (from the repository root):
  PYTHONPATH=.:python .venv/bin/python bench/rpc_round_trips.py [--model smollm2-135m]
"""
from __future__ import annotations

import argparse

from tests.support.rpc_workers import rpc_workers

from ngramspec import _llama, models
from ngramspec.rpc.loading import workers_of
from ngramspec.suite.provenance import git_commit

SEQUENCE = (1, 1, 4, 4, 8, 8, 1, 4, 1, 8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    args = ap.parse_args()
    print(f"{args.model}, commit {git_commit()}\n")
    print("| decode | batch size | commands (per worker) | round trips (per worker) | bytes sent (per worker) |")
    print("|---|---|---|---|---|")
    with rpc_workers(2) as workers:
        llm = models.load_llama(args.model, n_ctx=2048, n_threads=1, rpc=[w.address for w in workers])
        rpc = workers_of(llm)
        assert rpc is not None
        llm.eval(llm.tokenize(b"A prompt of a dozen tokens or so, before the timed decodes."))
        batch, n = _llama.Batch(max(SEQUENCE)), llm.n_tokens
        for i, size in enumerate(SEQUENCE, 1):
            before = [(g.commands, g.round_trips, g.bytes_sent) for g in rpc.guards]
            batch.fill(list(range(100, 100 + size)), n, all_logits=True)
            _llama.decode(llm, batch)
            after = [(g.commands, g.round_trips, g.bytes_sent) for g in rpc.guards]
            delta = [[a - b for a, b in zip(x, y)] for x, y in zip(after, before)]
            print(f"| {i} | {size} | " + " | ".join(", ".join(f"{d[k]:,}" for d in delta) for k in range(3)) + " |")
            _llama.remove_from(llm, n)
        llm.close()


if __name__ == "__main__":
    main()
