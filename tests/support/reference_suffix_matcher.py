"""A pure-Python SuffixMatcher, written from its documented behaviour with no index:
it rescans the whole history on every prediction."""
from __future__ import annotations


class ReferenceSuffixMatcher:
    def __init__(self, anchor: int = 2, max_candidates: int = 64, max_match: int = 64,
                 max_tokens: int = 1 << 20) -> None:
        self.anchor, self.max_candidates, self.max_match = anchor, max_candidates, max_match
        self.max_tokens = max_tokens
        self.history: list[int] = []

    def update_batch(self, tokens) -> None:
        # Past the budget, keep the newest three quarters of it (checked after every token).
        keep = self.max_tokens - self.max_tokens // 4
        for t in tokens:
            self.history.append(int(t))
            if len(self.history) > self.max_tokens:
                self.history = self.history[-keep:]

    def predict(self, n: int) -> tuple[list[int], int]:
        h, a = self.history, self.anchor
        if n == 0 or len(h) < a + 1:
            return [], 0
        suffix = h[-a:]
        # Earlier occurrences of the anchor that have a continuation, newest first.
        ends = [e for e in range(len(h) - 2, a - 2, -1) if h[e - a + 1: e + 1] == suffix][: self.max_candidates]
        best_len, best_end = 0, -1
        for e in ends:
            length = 0
            while length < min(self.max_match, e + 1) and h[e - length] == h[len(h) - 1 - length]:
                length += 1
            if length > best_len:
                best_len, best_end = length, e
        if best_len == 0:
            return [], 0
        seq = list(h)
        draft = []
        for j in range(n):
            seq.append(seq[best_end + 1 + j])
            draft.append(seq[-1])
        return draft, best_len
