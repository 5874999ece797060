"""A pure-Python CorpusMatcher, written from its documented behaviour with no index:
it rescans the whole corpus on every prediction."""
from __future__ import annotations

BOUNDARY = -1


class ReferenceCorpusMatcher:
    def __init__(self, anchor: int = 3, max_candidates: int = 64, max_match: int = 64,
                 max_tokens: int = 1_000_000) -> None:
        self.anchor, self.max_candidates, self.max_match = anchor, max_candidates, max_match
        self.max_tokens = max_tokens
        self.corpus: list[int] = []
        self.dropped = 0   # tokens dropped from the front: the absolute position of corpus[0]

    def add(self, tokens) -> None:
        tokens = [int(t) for t in tokens]
        if not tokens:
            return
        # Each document is followed by a boundary; past the budget (checked after
        # every token) keep the newest three quarters of it.
        keep = self.max_tokens - self.max_tokens // 4
        for t in tokens + [BOUNDARY]:
            self.corpus.append(t)
            if len(self.corpus) > self.max_tokens:
                self.dropped += len(self.corpus) - keep
                self.corpus = self.corpus[-keep:]

    def predict(self, context, n: int) -> tuple[list[int], int]:
        draft, match, _at = self.predict_at(context, n)
        return draft, match

    def predict_at(self, context, n: int) -> tuple[list[int], int, int]:
        ctx = [int(t) for t in context]
        if n == 0:
            return [], 0, 0
        best_len, best_end = 0, -1
        for e in self._candidates(ctx):
            length = self._backward(e, ctx)
            if length > best_len:
                best_len, best_end = length, e
        if best_len == 0:
            return [], 0, 0
        return self._copy(best_end + 1, n), best_len, self.dropped + best_end + 1

    def support(self, context, draft) -> tuple[list[int], list[int]]:
        """Per draft token: candidates (as predict_at takes them) agreeing with draft[:i+1], and with draft[:i]."""
        c, draft = self.corpus, [int(t) for t in draft]
        agree, seen = [0] * len(draft), [0] * len(draft)
        for e in self._candidates([int(t) for t in context]) if draft else []:
            for i, t in enumerate(draft):
                seen[i] += 1
                if c[e + 1 + i] != t:
                    break
                agree[i] += 1
        return agree, seen

    def follow(self, start: int, window: int, context, n: int) -> tuple[list[int], int, int]:
        """Positions start..start+window-1 (absolute), in start's document: the longest
        backward match with the context's end (>= 1), the nearest among equals."""
        c, ctx = self.corpus, [int(t) for t in context]
        first = start - self.dropped
        if n == 0 or not ctx or first < 0 or first >= len(c):
            return [], 0, 0
        best_len, best_end = 0, -1
        for end in range(first, min(len(c), first + window)):
            if c[end] == BOUNDARY or c[end + 1] == BOUNDARY:
                break
            length = self._backward(end, ctx)
            if length > best_len:
                best_len, best_end = length, end
        if best_len == 0:
            return [], 0, 0
        return self._copy(best_end + 1, n), best_len, self.dropped + best_end + 1

    def _candidates(self, ctx: list[int]) -> list[int]:
        """Positions whose anchor equals the context's end and whose next token is not
        a boundary, newest first, at most max_candidates."""
        c, a = self.corpus, self.anchor
        if len(ctx) < a:
            return []
        return [e for e in range(len(c) - 2, a - 2, -1)
                if c[e - a + 1: e + 1] == ctx[-a:] and c[e + 1] != BOUNDARY][: self.max_candidates]

    def _backward(self, end: int, ctx: list[int]) -> int:
        """How far the context's end matches the corpus ending at ``end`` (a boundary stops it)."""
        length, c = 0, self.corpus
        while length < min(self.max_match, len(ctx), end + 1) and c[end - length] == ctx[-1 - length]:
            length += 1
        return length

    def clear(self) -> None:
        self.dropped += len(self.corpus)
        self.corpus = []

    def _copy(self, src: int, n: int) -> list[int]:
        draft: list[int] = []
        while len(draft) < n and self.corpus[src] != BOUNDARY:
            draft.append(self.corpus[src])
            src += 1
        return draft
