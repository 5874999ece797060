"""What the delaying relay (tests/support/delay_relay.py) really adds: the median
time of the RPC handshake (one round trip on a new connection) to an idle
``ngramspec rpc-worker`` on 127.0.0.1, directly and through relays of each nominal
round-trip time, on this machine at its current load.

Run (from the repository root):
  PYTHONPATH=.:python .venv/bin/python bench/rpc_relay_rtt.py [--rtt 1,5] [--repeats 40]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

from tests.support.delay_relay import DelayRelay
from tests.support.rpc_workers import Worker

from ngramspec.rpc.protocol import handshake


def median_ms(port: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        handshake("127.0.0.1", port, timeout=5)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rtt", default="1,5")
    ap.add_argument("--repeats", type=int, default=40)
    args = ap.parse_args()
    worker = Worker(threads=1).start()
    try:
        print(f"load average {os.getloadavg()[0]:.1f}")
        direct = median_ms(worker.port, args.repeats)
        print(f"direct: {direct:.2f} ms")
        for rtt in (float(x) for x in args.rtt.split(",")):
            relay = DelayRelay(("127.0.0.1", worker.port), rtt)
            through = median_ms(relay.port, args.repeats)
            relay.close()
            print(f"relay of {rtt:g} ms: {through:.2f} ms, {through - direct:.2f} ms more than direct")
    finally:
        worker.kill()


if __name__ == "__main__":
    main()
