"""Soak: a million tokens through a bounded SuffixMatcher / CorpusMatcher keep
their memory within the budget's bound (at most ~24 bytes per budget token),
measured by the matcher itself and by the resident set of a fresh process.

Each soak runs in its own interpreter, so pages freed by an earlier test cannot
hide growth. Run with -s to see the numbers, e.g.
    PYTHONPATH=python .venv/bin/python -m pytest -s tests/core/test_suffix_matcher_bounded.py
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")

MiB = 1 << 20

_SOAK = r"""
import gc, json, sys, time
import numpy as np
from ngramspec._core import CorpusMatcher, SuffixMatcher

def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024

kind, budget, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
chunk_size = 10_000
rng = np.random.default_rng(0)
# Zipf-distributed ids, so anchors repeat as they do in text and chains get long.
chunks = [(rng.zipf(1.3, size=chunk_size) % 50_000).astype(np.int32) for _ in range(8)]
if kind == "suffix":
    m = SuffixMatcher(max_tokens=budget)
    feed, predict = m.update_batch, lambda c: m.predict(8)
else:
    m = CorpusMatcher(max_tokens=budget)
    feed = lambda c: [m.add(c[i:i + 1000]) for i in range(0, len(c), 1000)]  # 1,000-token documents
    predict = lambda c: m.predict(c[-64:], 8)
gc.collect()
start = rss()
peak = 0
t0 = time.perf_counter()
for i in range(total // chunk_size):
    c = chunks[i % len(chunks)].copy()
    c[::97] = i  # no two chunks identical
    feed(c)
    predict(c)
    peak = max(peak, rss() - start)
seconds = time.perf_counter() - t0
seen = m.tokens_seen if kind == "suffix" else m.tokens_added
print(json.dumps({"held": len(m), "seen": seen, "memory_bytes": m.memory_bytes,
                  "rss_growth": rss() - start, "rss_peak_growth": peak, "seconds": seconds}))
"""


def run_soak(kind: str, budget: int, total: int = 1_000_000) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-c", _SOAK, kind, str(budget), str(total)], env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# memory_bytes (capacity of every buffer) is bounded by 24 bytes per budget token.
# The RSS bound allows 32 bytes per budget token plus 8 MiB: glibc keeps some freed
# buffers of the growth phase in its heap (measured: 22 MiB of RSS growth for
# 15.6 MiB of buffers at a budget of 1,000,000), and numpy makes temporaries.
@pytest.mark.parametrize("kind", ["suffix", "corpus"])
@pytest.mark.parametrize("budget", [1 << 16, 1 << 18, 1_000_000])
def test_a_million_tokens_stay_within_the_budget(kind, budget):
    r = run_soak(kind, budget)
    bound = 32 * budget + 8 * MiB
    print(f"\n{kind} max_tokens={budget}: {r['seen']} tokens in {r['seconds']:.2f} s, held {r['held']}, "
          f"memory_bytes {r['memory_bytes'] / MiB:.1f} MiB, RSS growth {r['rss_growth'] / MiB:.1f} MiB "
          f"(peak {r['rss_peak_growth'] / MiB:.1f} MiB; bound {bound / MiB:.1f} MiB)")
    assert r["seen"] == 1_000_000 and r["held"] <= budget
    assert r["memory_bytes"] <= 24 * budget + 64
    assert r["rss_peak_growth"] <= bound
