"""A plain-Python reference of NGramPredictor, written for clarity, not speed.

It recounts the tables from the history on every call, so it shares no
bookkeeping (rings, decrements, hash-table deletion) with the C++ core.
"""
from __future__ import annotations

from collections import defaultdict

FNV_OFFSET_BASIS = 14695981039346656037
FNV_PRIME = 1099511628211
MASK64 = (1 << 64) - 1


def fnv1a(tokens: list[int]) -> int:
    h = FNV_OFFSET_BASIS
    for t in tokens:
        h ^= t & 0xFFFFFFFF
        h = (h * FNV_PRIME) & MASK64
    return h


class ReferencePredictor:
    def __init__(self, min_order: int = 2, max_order: int = 4, window: int = 512) -> None:
        self.min_order, self.max_order, self.window = min_order, max_order, window
        self.tokens: list[int] = []

    def update(self, token: int) -> None:
        self.tokens.append(token)

    def update_batch(self, tokens: list[int]) -> None:
        self.tokens.extend(tokens)

    @property
    def history(self) -> list[int]:
        return self.tokens[-self.window:]

    def tables(self) -> dict[int, dict[int, dict[int, tuple[int, int]]]]:
        """order -> key -> next -> (count, last position); only n-grams inside the window."""
        hist = self.history
        offset = len(self.tokens) - len(hist)
        tables: dict[int, dict[int, dict[int, tuple[int, int]]]] = {}
        for order in range(self.min_order, self.max_order + 1):
            table: dict[int, dict[int, tuple[int, int]]] = defaultdict(dict)
            for end in range(order - 1, len(hist)):
                key = fnv1a(hist[end - order + 1:end])
                count, _ = table[key].get(hist[end], (0, -1))
                table[key][hist[end]] = (count + 1, offset + end)
            tables[order] = table
        return tables

    def predict(self, n: int) -> list[int]:
        return self.predict_with_orders(n)[0]

    def predict_with_orders(self, n: int) -> tuple[list[int], list[int]]:
        out, orders, _, _ = self.predict_detailed(n)
        return out, orders

    def predict_detailed(self, n: int) -> tuple[list[int], list[int], list[int], list[int]]:
        """(draft, orders, counts, totals): counts[i] is how often draft[i] followed
        its context, totals[i] how often that context was followed by anything."""
        tables = self.tables()
        context = self.history[-(self.max_order - 1):] if self.history else []
        out: list[int] = []
        orders: list[int] = []
        counts: list[int] = []
        totals: list[int] = []
        while len(out) < n:
            choice = None
            for order in range(self.max_order, self.min_order - 1, -1):
                if len(context) < order - 1:
                    continue
                conts = tables[order].get(fnv1a(context[len(context) - order + 1:]))
                if conts:
                    # most frequent, then most recent
                    choice = max(conts.items(), key=lambda kv: (kv[1][0], kv[1][1]))[0]
                    orders.append(order)
                    counts.append(conts[choice][0])
                    totals.append(sum(c for c, _ in conts.values()))
                    break
            if choice is None:
                break
            context.append(choice)
            out.append(choice)
        return out, orders, counts, totals

    def table_sizes(self) -> dict[int, int]:
        return {order: len(t) for order, t in self.tables().items()}

    def table_entries(self) -> dict[int, int]:
        return {order: sum(len(c) for c in t.values()) for order, t in self.tables().items()}
