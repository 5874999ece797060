"""Each verified row as plain llama-cpp-python's sampler chain treats it: logits
processors, min_tokens, logit bias, penalties and a grammar.

Plain's chain for a request is [logits processors (a user's, ``min_tokens``'s
end-of-text ban, then ``logit_bias``), penalties, grammar, then greedy or the
sampling steps]; its penalties and grammar see only the tokens it sampled, and it
calls each processor once per sampled token with the tokens before it
(``input_ids``: the prompt and the output so far). ``RowRules`` applies the same
rules to each row of a verify pass, in that order, with llama.cpp's own penalties
and grammar samplers (``llama_samplers.py``) and the user's own processors, so that:

- greedy: the target of each row is the token plain's chain picks from it, bit for
  bit: the first index of the largest logit after the rules. A grammar masks tokens
  (their logit becomes -inf) and changes no other logit, so when the row's largest
  logit (after bias and penalties) belongs to a token the grammar allows, that
  token is the constrained pick too: only that one token is checked, and the
  grammar is applied to the whole row only when it refuses it.
- sampled: the row is masked (grammar, ``min_tokens``) and handed to the engine's
  exact speculative sampling, whose target distribution applies logit bias and
  penalties (``sampling.target_distribution``); the output keeps the constrained
  distribution.

State: the samplers' state advances only through the tokens the pass emits (each
target is chosen under the state after the ones before it), so a rejected draft
never reaches it. The state at the pass's first position is kept until a later
pass starts, because exact mode's audit may choose that pass's targets again.

Row processors (``processors``): callables ``(input_ids, scores) -> scores`` that
are applied first to each row, in plain's order and with plain's input_ids: row
``i`` of a pass is processed only once the rows before it chose the draft's tokens,
so a stateful processor (outlines' guide) advances only by the tokens kept. After
an audit that found a row changed (a rare event), a pass's rows are processed again
from its start, with input_ids shorter than the last call's: a processor given here
must answer that as it answered the first time (``integrations/row_processors.py``
says which do).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ngramspec.arg_checks import checked_int
from ngramspec.engine.acceptance import pick
from ngramspec.engine.llama_samplers import SamplerState, TokenArray
from ngramspec.sampling import SamplingParams, position_uniform, sample, target_distribution, verify_token

if TYPE_CHECKING:
    from llama_cpp import Llama

__all__ = ["Processor", "RowRules", "row_rules_for"]

#: A row processor: (input_ids, scores) -> scores, as llama-cpp-python calls a logits processor.
Processor = Callable[[np.ndarray, np.ndarray], Any]


class RowRules:
    """What plain's chain does to a row before it picks, for one generation.

    grammar: a ``llama_cpp.LlamaGrammar`` or None.
    logit_bias: ``{id: bias}`` applied here in greedy requests (a sampled request's
        ``SamplingParams`` carries its own), or None.
    penalties: (last_n, repeat, frequency, presence) applied here in greedy
        requests, or None.
    min_tokens, eos: the end-of-text token ``eos`` is banned from the first
        ``min_tokens`` generated tokens (llama-cpp-python's ``MinTokensLogitsProcessor``).
    processors, prompt: row processors (module docstring), applied before the rest
        with input_ids made of ``prompt`` and the tokens chosen since.
    """

    def __init__(self, llm: Llama, *, grammar: Any = None, logit_bias: Mapping[int, float] | None = None,
                 penalties: tuple[int, float, float, float] | None = None, min_tokens: int = 0,
                 eos: int = -1, processors: Sequence[Processor] = (), prompt: Sequence[int] = ()) -> None:
        self.processors = list(processors)
        # input_ids as plain hands them to its processors: the prompt, then each chosen token.
        self._ids = np.zeros(len(prompt) + 64, dtype=np.intc)
        self._ids[:len(prompt)] = prompt
        self.bias = {int(t): float(b) for t, b in (logit_bias or {}).items()}
        self.min_tokens, self.eos = int(min_tokens), int(eos)
        self.has_grammar = grammar is not None
        self._start_state = SamplerState.start(llm, grammar, penalties)
        self._penalized = self._start_state.penalties is not None
        self._last_n = self._start_state.last_n
        self._vocab = TokenArray(llm.n_vocab())
        self._one = TokenArray(1)
        self._history = TokenArray(max(1, self._last_n))
        self._gen_start = 0
        # The state before the token at each of (at most) two positions: the latest
        # pass's first one (for the audit's second look) and the one after its targets.
        self._states: dict[int, SamplerState] = {}
        self.full_grammar_rows = 0   # rows the grammar had to be applied to whole
        self.grammar_rows = 0

    # -- the engine's two calls ------------------------------------------------
    def first(self, row: np.ndarray, sampling: SamplingParams | None, position: int,
              history: Sequence[int]) -> int:
        """The first generated token (at absolute ``position``), from the prompt's row."""
        self._gen_start = position
        state = self._start_state.clone()
        token = self._choose(row, state, sampling, position, list(history))
        self._chose(token, position)
        state.accept(token)
        self._states = {position + 1: state}
        return token

    def targets(self, rows: np.ndarray, draft: np.ndarray, sampling: SamplingParams | None, start: int,
                history: Sequence[int], probs: Any = None) -> list[int]:
        """The pass's targets (``acceptance.py``'s contract), row ``i`` at absolute
        position ``start + i``, each chosen under the rules after the targets before it."""
        base = self._states.get(start)
        if base is None:
            raise RuntimeError(f"no sampler state for position {start}: the passes left the rules' order")
        self._states = {start: base}
        state = base.clone()
        hist = list(history[-sampling.penalty_last_n:]) if sampling is not None and sampling.penalizes else []
        if sampling is not None and probs is not None:
            targets = self._with_q(rows, draft, sampling, start, hist, probs, state)
        else:
            targets = []
            for i in range(len(draft) + 1):
                token = self._choose(rows[i], state, sampling, start + i, hist)
                self._chose(token, start + i)
                state.accept(token)
                targets.append(token)
                if i == len(draft) or token != int(draft[i]):
                    break
                hist.append(token)
        self._states[start + len(targets)] = state
        return targets

    # -- one row ----------------------------------------------------------------
    def _reserve(self, n: int) -> None:
        if n > len(self._ids):
            grown = np.zeros(max(n, 2 * len(self._ids)), dtype=np.intc)
            grown[:len(self._ids)] = self._ids
            self._ids = grown

    def _chose(self, token: int, position: int) -> None:
        """Records the token chosen at ``position`` in the processors' input_ids."""
        if self.processors:
            self._reserve(position + 1)
            self._ids[position] = token

    def _processed(self, row: np.ndarray, position: int) -> np.ndarray:
        """A float32 copy of ``row`` after the row processors, each given the tokens
        before ``position`` and the scores so far, as plain's chain gives them."""
        x = np.array(row, dtype=np.float32)
        ids = self._ids[:position]
        for proc in self.processors:
            x[:] = proc(ids, x)
        return x

    def _choose(self, row: np.ndarray, state: SamplerState, sampling: SamplingParams | None, position: int,
                hist: list[int]) -> int:
        if sampling is None:
            return self._greedy(row, state, position)
        return pick(self._masked(row, state, position), sampling, position, hist)

    def _banned_eos(self, position: int) -> bool:
        return self.min_tokens > 0 and position - self._gen_start < self.min_tokens and self.eos >= 0

    def _greedy(self, row: np.ndarray, state: SamplerState, position: int) -> int:
        x = row
        banned = self._banned_eos(position)
        if self.processors:
            x = self._processed(row, position)
        elif self.bias or banned or self._penalized:
            x = np.array(row, dtype=np.float32)
        if self.bias or banned or self._penalized:
            if banned:
                x[self.eos] = -np.inf
            for tok, bias in self.bias.items():   # as plain's logit_bias processor: score + scores[id]
                x[tok] = bias + x[tok]
            if self._penalized:
                self._penalize(x, state)
        best = int(np.argmax(x))
        if state.grammar is None:
            return best
        self.grammar_rows += 1
        # A refused token is -inf; +inf is a real score (repeat_penalty 0 divides a seen
        # token's positive logit by 0, as llama.cpp's penalties sampler does), and plain's
        # greedy sampler takes the first such token the grammar allows.
        if x[best] > -np.inf and self._one.apply(state.grammar, x[best:best + 1],
                                                  np.array([best], dtype=np.int32))[0] > -np.inf:
            return best
        self.full_grammar_rows += 1
        masked = self._vocab.apply(state.grammar, x)
        best = int(np.argmax(masked))
        if not masked[best] > -np.inf:
            raise RuntimeError("the grammar allows no token here (every candidate was refused)")
        return best

    def _penalize(self, x: np.ndarray, state: SamplerState) -> None:
        """llama.cpp's penalties sampler on the tokens it has seen (it changes no other logit)."""
        seen = state.seen
        if len(seen):
            x[seen] = self._history.apply(state.penalties, x[seen], seen)

    def _masked(self, row: np.ndarray, state: SamplerState, position: int) -> np.ndarray:
        """A sampled row with what the grammar refuses, and a banned end-of-text, at -inf."""
        banned = self._banned_eos(position)
        if state.grammar is None and not banned:
            return self._processed(row, position) if self.processors else row
        x = self._processed(row, position) if self.processors else np.array(row, dtype=np.float32)
        if banned:
            x[self.eos] = -np.inf
        if state.grammar is not None:
            self.grammar_rows += 1
            self.full_grammar_rows += 1
            x = self._vocab.apply(state.grammar, x)
            if not (x > -np.inf).any():
                raise RuntimeError("the grammar allows no token here (every candidate was refused)")
        return x

    def _with_q(self, rows: np.ndarray, draft: np.ndarray, sampling: SamplingParams, start: int, hist: list[int],
                probs: Any, state: SamplerState) -> list[int]:
        """A draft sampled from a real distribution q (a draft model): modified
        rejection sampling one position at a time (``sampling.verify_token``), each
        p under the rules after the tokens accepted before it."""
        targets: list[int] = []
        for i, d in enumerate(int(t) for t in draft):
            dist = target_distribution(self._masked(rows[i], state, start + i), sampling, hist)
            accepted, token = verify_token(dist, probs[i], d, sampling.seed, start + i)
            self._chose(token, start + i)
            state.accept(token)
            targets.append(token)
            if not accepted:
                return targets
            hist.append(token)
        last = len(draft)
        ids, p = target_distribution(self._masked(rows[last], state, start + last), sampling, hist)
        token = sample(ids, p, position_uniform(sampling.seed, start + last))
        self._chose(token, start + last)
        state.accept(token)
        targets.append(token)
        return targets


def row_rules_for(llm: Llama, sampling: object, *, grammar: object = None, logit_bias: Any = None,
                  penalties: Any = None, min_tokens: object = 0, processors: Sequence[Any] = (),
                  prompt: Sequence[int] = ()) -> RowRules | None:
    """The rules of one generation, or None when there are none (the engine's plain
    greedy and sampled paths then run as they are). ``logit_bias`` ({id: bias}) and
    ``penalties`` ((last_n, repeat, frequency, presence)) are a greedy request's: a
    sampled one carries its own in ``SamplingParams``. ``processors``: row processors
    (module docstring) for the generation of ``prompt``."""
    min_tokens = checked_int(min_tokens, "min_tokens", minimum=0)
    processors = list(processors)
    for proc in processors:
        if not callable(proc):
            raise TypeError(f"a row processor must be callable (input_ids, scores) -> scores, got "
                            f"{type(proc).__name__}")
    if sampling is not None and (logit_bias or penalties is not None):
        raise ValueError("a sampled request's logit_bias and penalties belong in its SamplingParams")
    if penalties is not None:
        if len(penalties) != 4:
            raise ValueError("penalties must be (last_n, repeat, frequency, presence)")
        penalties = (int(penalties[0]), float(penalties[1]), float(penalties[2]), float(penalties[3]))
        if penalties[0] <= 0 or (penalties[1] == 1.0 and penalties[2] == 0.0 and penalties[3] == 0.0):
            penalties = None   # llama.cpp's penalties sampler is off for these
    if grammar is None and not logit_bias and penalties is None and not min_tokens and not processors:
        return None
    return RowRules(llm, grammar=grammar, logit_bias=logit_bias, penalties=penalties, min_tokens=min_tokens,
                    eos=int(llm.token_eos()), processors=processors, prompt=prompt)
