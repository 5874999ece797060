"""Drop-in speculative wrapper around a ``llama_cpp.Llama``.

``SpeculativeLlama(llm)`` (or ``wrap(llm)``) offers ``create_completion``,
``__call__``, ``create_chat_completion`` and ``generate`` with llama-cpp-python's
signatures, defaults and return shapes. Greedy requests (temperature 0, or
top_k == 1 at a positive temperature; a negative temperature samples, as in
llama-cpp-python) go through the speculative engine and return the same text as
the plain ``Llama``; every response carries a ``speculative`` key with the stats.
Sampled requests use exact speculative sampling (``ngramspec.sampling``): the
model's own distribution under the same parameters, reproducible by seed, but
not the same random draws as llama-cpp-python's sampler. Any other attribute is the
wrapped ``Llama``'s.
"""
from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np

from ngramspec.engine.speculative_engine import SpeculativeEngine, prompt_tokens_for
from ngramspec.proposers.prediction import prediction_text
from ngramspec.sampling import SamplingParams

__all__ = ["SpeculativeLlama", "wrap"]


def _check_exact(exact: Any) -> None:
    if exact is not None and not isinstance(exact, bool):
        raise TypeError(f"exact must be True, False or None, got {type(exact).__name__}")


#: LLAMA_DEFAULT_SEED: the seed (-1, or 2**32 - 1) that llama.cpp replaces by a random one.
_RANDOM_SEED = 0xFFFFFFFF


def _call_seeds(llm: Any, seed: Any) -> tuple[int | None, int]:
    """(the seed the Llama keeps after this call, the seed this call samples with),
    as llama-cpp-python's ``create_completion`` has them: a given seed becomes the
    Llama's seed; without one, the next seed of the Llama's own sequence
    (``random.Random(llm._seed)``) does. So ``Llama(seed=...)`` and ``set_seed``
    make sampled text reproducible here as they do there (a fresh OS-random seed per
    call made them no-ops). A seed of -1 samples from a fresh random seed, as it
    does there. Nothing is set here: the caller sets the Llama's seed once the
    request has passed its checks (plain checks the prompt first)."""
    if seed is not None and (isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer))):
        raise TypeError(f"seed must be an int or None, got {type(seed).__name__}")
    if seed is None:
        current = getattr(llm, "_seed", None)
        if current is None:        # not a llama_cpp.Llama: nothing to follow
            return None, random.SystemRandom().randrange(2**32)
        seed = random.Random(current).randint(0, 2**32)
    seed = int(seed)
    if seed & 0xFFFFFFFF == _RANDOM_SEED:
        # llama.cpp's sampler takes this seed (-1 as a uint32) to mean "draw one
        # from std::random_device", so plain samples differently on every such call.
        return seed, random.SystemRandom().randrange(2**32)
    return seed, seed


def _check_token_ids(ids: Any, n_vocab: int, what: str = "token id") -> None:
    """ValueError naming the first id outside the vocabulary (llama.cpp would index
    past its tables: an IndexError, or the process aborted)."""
    bad = [t for t in ids if not 0 <= t < n_vocab]
    if bad:
        raise ValueError(f"{what} {bad[0]} is out of range: the vocabulary has {n_vocab} tokens (0..{n_vocab - 1})")


def _logit_bias_map(logit_bias: Any, n_vocab: int) -> dict[int, float]:
    """``logit_bias`` as llama-cpp-python reads it, ``{int(id): float(bias)}`` (so
    OpenAI's string ids are fine), with every id in the vocabulary and every bias a
    number: a bad one is a ValueError / TypeError naming it, not an IndexError."""
    out: dict[int, float] = {}
    for key, bias in logit_bias.items():
        if isinstance(key, (bool, np.bool_)):
            raise TypeError(f"logit_bias keys must be token ids, got {key!r}")
        try:
            tok = int(key)
        except (TypeError, ValueError):
            raise TypeError(f"logit_bias keys must be token ids (int, or a str of one), got {key!r}") from None
        if isinstance(key, float) and key != tok:
            raise TypeError(f"logit_bias keys must be token ids, got {key!r}")
        _check_token_ids([tok], n_vocab, "logit_bias token id")
        try:
            value = float(bias)
        except (TypeError, ValueError):
            value = float("nan")
        if value != value:
            raise ValueError(f"logit_bias[{key!r}] must be a number, got {bias!r}")
        out[tok] = value
    return out


def _usage(n_prompt: int, gen: Any) -> dict[str, Any]:
    usage: dict[str, Any] = {"prompt_tokens": n_prompt, "completion_tokens": len(gen.tokens),
                   "total_tokens": n_prompt + len(gen.tokens)}
    if gen.prediction_usage is not None:
        usage["completion_tokens_details"] = dict(gen.prediction_usage)
    return usage


#: What a SpeculativeLlama itself holds; every other attribute set on it goes to
#: its Llama when the Llama has one of that name.
_WRAPPER_ATTRS = frozenset({"llm", "engine", "last_speculative", "_forwarded"})


class SpeculativeLlama:
    """llm: the ``llama_cpp.Llama`` to speed up. options: ``SpeculativeEngine``'s.
    ``exact`` there is the wrapper's default; each call may override it with its
    own ``exact=`` keyword (greedy and sampled requests alike).

    Threading: calls on one wrapper are serialised (a non-streamed call holds the
    engine's lock to its end, a stream for each pass). A call that starts while
    a stream of the same wrapper is unfinished ends that stream: resuming it
    raises RuntimeError. Streams never interleave on one Llama; give each
    concurrent user its own Llama (and wrapper)."""

    def __init__(self, llm: Any, **options: Any) -> None:
        self._forwarded: set[str] = set()   # names set on the Llama through the wrapper
        self.llm = llm
        self.engine = SpeculativeEngine(llm, **options)
        self.last_speculative: dict[str, Any] = {}  # the stats of the latest request

    def __getattr__(self, name: str) -> Any:
        # Only reached for names this class lacks: tokenize, metadata, chat_format...
        # Not before __init__ has set llm (copy.copy probes a bare instance): that
        # would recurse.
        if name in ("llm", "_forwarded"):
            raise AttributeError(name)
        return getattr(self.llm, name)

    def _owns(self, name: str) -> bool:
        if name in _WRAPPER_ATTRS or name in self.__dict__ or hasattr(type(self), name):
            return True
        return name not in self._forwarded and not hasattr(self.llm, name)

    def __setattr__(self, name: str, value: Any) -> None:
        # Settings read from the Llama (chat_format, chat_handler, verbose...) are
        # set there, as on a plain Llama; a copy on the wrapper would be ignored.
        if self._owns(name):
            object.__setattr__(self, name, value)
        else:
            self._forwarded.add(name)
            setattr(self.llm, name, value)

    def __delattr__(self, name: str) -> None:
        # The same rule as setting. A name once forwarded stays forwarded after it is
        # deleted, so mock.patch.object (set, delete, then set the original back
        # when the name is gone) restores it on the Llama.
        if self._owns(name):
            object.__delattr__(self, name)
        else:
            self._forwarded.add(name)
            delattr(self.llm, name)

    def detokenize(self, tokens: Any, prev_tokens: Any = None, special: bool = False) -> bytes:
        """``Llama.detokenize``, with the ids checked first: llama.cpp aborts the
        whole process (std::out_of_range) on an id outside the vocabulary."""
        n_vocab = self.llm.n_vocab()
        _check_token_ids(tokens, n_vocab)
        _check_token_ids(() if prev_tokens is None else prev_tokens, n_vocab)
        return bytes(self.llm.detokenize(tokens, prev_tokens=prev_tokens, special=special))

    # ------------------------------------------------------------------
    def create_completion(
        self,
        prompt: str | list[int],
        suffix: str | None = None,
        max_tokens: int | None = 16,
        temperature: float = 0.8,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        logprobs: int | None = None,
        echo: bool = False,
        stop: str | list[str] | None = None,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        top_k: int = 40,
        stream: bool = False,
        seed: int | None = None,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: str | None = None,
        stopping_criteria: Any = None,
        logits_processor: Any = None,
        grammar: Any = None,
        logit_bias: dict[int, float] | None = None,
        exact: bool | None = None,
        prediction: Any = None,
    ) -> Any:
        """llama-cpp-python's ``Llama.create_completion``, speculative.
        exact: this call's verify mode (None: the wrapper's).
        prediction: OpenAI's predicted output, ``{"type": "content", "content": str
            | [{"type": "text", "text": str}, ...]}``: drafted from where the output
            follows it. The text is the same as without it; the response's usage
            then carries ``completion_tokens_details`` with OpenAI's
            ``accepted_prediction_tokens`` and ``rejected_prediction_tokens``."""
        if stop is None:
            stop = []
        _check_exact(exact)
        greedy = temperature == 0 or (temperature > 0 and top_k == 1)
        unsupported = {
            "suffix": suffix is not None, "logprobs": logprobs is not None,
            "mirostat_mode": mirostat_mode != 0, "logits_processor": logits_processor is not None,
            "grammar": grammar is not None,
        }
        if greedy:
            unsupported.update({
                "frequency_penalty": frequency_penalty != 0.0, "presence_penalty": presence_penalty != 0.0,
                "repeat_penalty": repeat_penalty != 1.0, "logit_bias": bool(logit_bias)})
        bad = [name for name, used in unsupported.items() if used]
        if bad:
            raise NotImplementedError(
                f"ngramspec does not support {', '.join(bad)} in {'greedy' if greedy else 'sampled'} speculative "
                "decoding; call the wrapped Llama (.llm) directly for such requests")
        if logit_bias:
            logit_bias = _logit_bias_map(logit_bias, self.llm.n_vocab())
        llm_seed, call_seed = _call_seeds(self.llm, seed)
        sampling = None
        if not greedy:
            if temperature < 0:
                # llama-cpp-python samples from the whole distribution at a negative
                # temperature: logit bias and penalties, then no truncation, T = 1.
                top_k, top_p, min_p, typical_p, temperature = 0, 1.0, 0.0, 1.0, 1.0
            sampling = SamplingParams(
                temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p,
                repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
                presence_penalty=presence_penalty, penalty_last_n=self.llm.last_n_tokens_size,
                logit_bias=logit_bias or None,
                seed=call_seed)
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        limit = None if max_tokens is None or max_tokens <= 0 else max_tokens
        head = {"id": f"cmpl-{uuid.uuid4()}", "object": "text_completion", "created": int(time.time()),
                "model": model if model is not None else self.llm.model_path}
        prefix = ""
        if echo:
            prefix = prompt if isinstance(prompt, str) else self.llm.detokenize(
                prompt_tokens_for(self.llm, prompt)).decode("utf-8", errors="ignore")
        run = self.engine.stream(prompt, max_tokens=limit, stop=stops, stopping_criteria=stopping_criteria,
                                 sampling=sampling, exact=exact, prediction=prediction)
        if llm_seed is not None and hasattr(self.llm, "set_seed"):
            self.llm.set_seed(llm_seed)
        if stream:
            return self._stream_chunks(run, head, prefix)
        gen = run.run_to_end()
        self.last_speculative = {"used": True, **gen.stats.to_dict()}
        return {
            **head,
            "choices": [{"text": prefix + gen.text, "index": 0, "logprobs": None,
                         "finish_reason": gen.finish_reason}],
            "usage": _usage(len(run.prompt_tokens), gen),
            "speculative": self.last_speculative,
        }

    __call__ = create_completion

    def _stream_chunks(self, run: Any, head: dict[str, Any], prefix: str) -> Iterator[dict[str, Any]]:
        """One chunk per verify pass: the text that can no longer change (no split
        UTF-8 character, nothing that may still turn out to start a stop string).
        The last chunk, with no text as plain's, carries the finish reason, the
        usage and the stats."""
        def chunk(text: str, finish: str | None) -> dict[str, Any]:
            return {**head, "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish}]}

        sent = 0
        if prefix:
            yield chunk(prefix, None)
        for _ in run:
            end = run.text.stable_end
            if end > sent:
                yield chunk(run.text.slice(sent, end).decode("utf-8", errors="ignore"), None)
                sent = end
        gen = run.result
        self.last_speculative = {"used": True, **gen.stats.to_dict()}
        rest = run.text.slice(sent).decode("utf-8", errors="ignore")
        if rest:
            # Its own chunk, as plain's stream ends with an empty finishing chunk: the
            # chat handler turns a chunk with a finish_reason into an empty delta, so
            # text held back for a possible stop string was lost from chat streams.
            yield chunk(rest, None)
        last = chunk("", gen.finish_reason)
        last["usage"] = _usage(len(run.prompt_tokens), gen)
        last["speculative"] = self.last_speculative
        yield last

    # ------------------------------------------------------------------
    def create_chat_completion(
        self,
        messages: list[Any],
        functions: list[Any] | None = None,
        function_call: Any = None,
        tools: list[Any] | None = None,
        tool_choice: Any = None,
        temperature: float = 0.2,
        top_p: float = 0.95,
        top_k: int = 40,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        stream: bool = False,
        stop: str | list[str] | None = None,
        seed: int | None = None,
        response_format: Any = None,
        max_tokens: int | None = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: str | None = None,
        logits_processor: Any = None,
        grammar: Any = None,
        logit_bias: dict[int, float] | None = None,
        logprobs: bool | None = None,
        top_logprobs: int | None = None,
        exact: bool | None = None,
        prediction: Any = None,
    ) -> Any:
        """llama-cpp-python's ``Llama.create_chat_completion``: the model's chat
        handler formats the messages exactly as it does for the plain ``Llama``,
        then calls ``create_completion`` on a view of this wrapper that adds this
        call's ``exact`` and ``prediction`` (as there), so concurrent calls never
        share per-call state."""
        from llama_cpp import llama_chat_format

        if stop is None:
            stop = []
        _check_exact(exact)  # a bad value fails here, before any formatting
        prediction_text(prediction)
        # The chat handler passes logprobs on only with top_logprobs, so logprobs=True
        # alone would reach create_completion as None and be dropped without a word.
        if logprobs or top_logprobs is not None:
            raise NotImplementedError("ngramspec does not support logprobs / top_logprobs in chat completions; "
                                      "call the wrapped Llama (.llm) directly for such requests")
        llm = self.llm
        handler = (llm.chat_handler or llm._chat_handlers.get(llm.chat_format)
                   or llama_chat_format.get_chat_completion_handler(llm.chat_format))
        view = _CallView(self, exact=exact, prediction=prediction)
        call: Any = handler   # the handler takes our duck-typed view and logit_bias as Llama passes them
        out: Any = call(
            llama=view, messages=messages, functions=functions, function_call=function_call, tools=tools,
            tool_choice=tool_choice, temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
            typical_p=typical_p, logprobs=logprobs, top_logprobs=top_logprobs, stream=stream, stop=stop,
            seed=seed, response_format=response_format, max_tokens=max_tokens,
            presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
            repeat_penalty=repeat_penalty, tfs_z=tfs_z, mirostat_mode=mirostat_mode,
            mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta, model=model,
            logits_processor=logits_processor, grammar=grammar, logit_bias=logit_bias)
        if isinstance(out, dict):  # the chat handler rebuilds the dict: add what it drops
            out["speculative"] = view.last_speculative
            if view.last_usage is not None:
                out["usage"] = view.last_usage
            return out
        return _chat_stream(out, view)

    # ------------------------------------------------------------------
    def generate(self, tokens: Any, top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
                 typical_p: float = 1.0, temp: float = 0.80, repeat_penalty: float = 1.0, reset: bool = True,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0, tfs_z: float = 1.0,
                 mirostat_mode: int = 0, mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                 penalize_nl: bool = True, logits_processor: Any = None, stopping_criteria: Any = None,
                 grammar: Any = None, exact: bool | None = None) -> Iterator[int]:
        """``Llama.generate``: yields token ids. Greedy requests are speculative and
        yield exactly the plain tokens (with exact=True); unlike ``Llama.generate``
        they end after an end-of-generation token (yielded last) or at the end of
        the context. ``exact``: this call's verify mode (None: the wrapper's)."""
        _check_exact(exact)
        if not (temp == 0 or (temp > 0 and top_k == 1)):
            plain: Iterator[int] = self.llm.generate(
                tokens, top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p, temp=temp,
                repeat_penalty=repeat_penalty, reset=reset, frequency_penalty=frequency_penalty,
                presence_penalty=presence_penalty, tfs_z=tfs_z, mirostat_mode=mirostat_mode,
                mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta, penalize_nl=penalize_nl,
                logits_processor=logits_processor, stopping_criteria=stopping_criteria, grammar=grammar)
            return plain
        bad = [n for n, used in {"repeat_penalty": repeat_penalty != 1.0, "frequency_penalty": frequency_penalty != 0,
                                 "presence_penalty": presence_penalty != 0, "mirostat_mode": mirostat_mode != 0,
                                 "logits_processor": logits_processor is not None, "grammar": grammar is not None,
                                 "reset=False": not reset}.items() if used]
        if bad:
            raise NotImplementedError(f"ngramspec's greedy generate does not support {', '.join(bad)}")
        return self._generate_greedy(list(tokens), stopping_criteria, exact)

    def _generate_greedy(self, tokens: list[int], stopping_criteria: Any, exact: bool | None) -> Iterator[int]:
        run = self.engine.stream(tokens, max_tokens=None, stopping_criteria=stopping_criteria, exact=exact)
        for chunk in run:
            yield from chunk
        eog = run.result.eog_token if run.result is not None else None
        if eog is not None:  # Llama.generate yields it too
            yield eog


class _CallView:
    """The wrapper as one chat call's handler sees it: ``create_completion`` gets
    the call's ``exact`` and ``prediction``; the usage and stats it returns are
    kept for the chat response (the handler rebuilds the dict without them)."""

    def __init__(self, spec: SpeculativeLlama, **extra: Any) -> None:
        self._spec, self._extra = spec, extra
        self.last_speculative: dict[str, Any] = {}
        self.last_usage: dict[str, Any] | None = None

    def create_completion(self, *args: Any, **kwargs: Any) -> Any:
        out = self._spec.create_completion(*args, **{**kwargs, **self._extra})
        if isinstance(out, dict):
            self.last_speculative, self.last_usage = out["speculative"], out["usage"]
            return out
        return self._watch(out)

    __call__ = create_completion

    def _watch(self, chunks: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for c in chunks:
            if "speculative" in c:
                self.last_speculative, self.last_usage = c["speculative"], c.get("usage")
            yield c

    def __getattr__(self, name: str) -> Any:
        return getattr(self._spec, name)


def _chat_stream(chunks: Iterator[dict[str, Any]], view: _CallView) -> Iterator[dict[str, Any]]:
    """A chat stream whose last chunk carries the usage and stats, as a completion stream's does."""
    pending = None
    for c in chunks:
        if pending is not None:
            yield pending
        pending = c
    if pending is not None:
        if view.last_usage is not None:
            pending["usage"] = view.last_usage
        pending["speculative"] = view.last_speculative
        yield pending


def wrap(llm: Any, **options: Any) -> SpeculativeLlama:

    """Shorthand for ``SpeculativeLlama(llm, **options)``."""
    return SpeculativeLlama(llm, **options)
