"""Drop-in speculative wrapper around a ``llama_cpp.Llama``.

``SpeculativeLlama(llm)`` (or ``wrap(llm)``) offers ``create_completion``,
``__call__``, ``create_chat_completion`` and ``generate`` with llama-cpp-python's
signatures, defaults and return shapes. Greedy requests (temperature 0, or
top_k == 1 at a positive temperature; a negative temperature samples, as in
llama-cpp-python) go through the speculative engine and return the same text as
the plain ``Llama``; every response carries a ``speculative`` key with the stats.
Sampled requests use exact speculative sampling (``ngramspec.sampling``): the
model's own distribution under the same parameters, reproducible by seed, but
not the same random draws as llama-cpp-python's sampler.

A ``SpeculativeLlama`` is a ``llama_cpp.Llama`` (a subclass, so ``isinstance`` checks
and code that takes a ``Llama``, such as ``outlines.from_llamacpp``, accept it; a
library that loads its own, as LangChain's and llama-index's do, takes the wrapper in
place of that one: docs/usage.md) built without ``Llama.__init__``: it loads nothing
and owns nothing of the model.
Every other method of ``Llama`` runs on the wrapped instance's state: reads of any
attribute it lacks go to the wrapped ``Llama``, and setting one the ``Llama`` has sets
it there (``set_cache``, ``reset``, ``chat_format``...), so both see one model, context,
cache and token history. Garbage-collecting the wrapper frees nothing; ``close()``
frees the wrapped ``Llama`` (once: closing either again does nothing).
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Generator, Iterator
from typing import Any

from llama_cpp import Llama

from ngramspec._llama import registered_chat_handler
from ngramspec.engine.generation import GenerationStream
from ngramspec.engine.llama_samplers import check_grammar
from ngramspec.engine.request import check_exact, prompt_tokens_for
from ngramspec.engine.speculative_engine import SpeculativeEngine
from ngramspec.integrations.completion_logprobs import completion_logprobs
from ngramspec.integrations.llama_call_args import (
    COMPLETION_PLAIN,
    COMPLETION_PLAIN_SAMPLED,
    GENERATE_PLAIN,
    call_seeds,
    check_finite,
    check_token_ids,
    in_use,
    is_greedy,
    logit_bias_map,
    min_tokens_of,
    plain_reason,
    sampling_params,
)
from ngramspec.integrations.plain_path import mark_completion, mark_stream
from ngramspec.integrations.row_processors import row_processors_of
from ngramspec.options import EngineOptions
from ngramspec.proposers.prediction import prediction_text

__all__ = ["SpeculativeLlama", "wrap"]


def _usage(n_prompt: int, gen: Any) -> dict[str, Any]:
    usage: dict[str, Any] = {"prompt_tokens": n_prompt, "completion_tokens": len(gen.tokens),
                   "total_tokens": n_prompt + len(gen.tokens)}
    if gen.prediction_usage is not None:
        usage["completion_tokens_details"] = dict(gen.prediction_usage)
    return usage


#: What a SpeculativeLlama itself holds; every other attribute set on it goes to
#: its Llama when the Llama has one of that name.
_WRAPPER_ATTRS = frozenset({"llm", "engine", "last_speculative", "last_plain_reason", "_forwarded"})


def _defined_below_llama(cls: type, name: str) -> bool:
    """Whether ``name`` is defined by ``cls`` or a base of it that is not ``Llama``
    (nor one of Llama's own bases): SpeculativeLlama's overrides, a subclass's."""
    for klass in cls.__mro__:
        if klass is Llama:
            return False
        if name in vars(klass):
            return True
    return False


class SpeculativeLlama(Llama):
    """llm: the ``llama_cpp.Llama`` to speed up (a ``SpeculativeLlama`` is unwrapped:
    the new wrapper wraps its Llama, with this call's options only). options: an
    ``EngineOptions``, and ``changes``: options on top of it by name
    (``SpeculativeEngine``'s, as keywords). ``exact`` there is the wrapper's default;
    each call may override it with its own ``exact=`` keyword (greedy and sampled
    requests alike).

    A ``Llama`` itself, sharing the wrapped one's model, context and cache (the
    module's docstring says how); ``Llama.__init__`` is never called on it.

    Threading: calls on one wrapper are serialised (a non-streamed call holds the
    engine's lock to its end, a stream for each pass). A call that starts while
    a stream of the same wrapper is unfinished ends that stream: resuming it
    raises RuntimeError. Streams never interleave on one Llama; give each
    concurrent user its own Llama (and wrapper)."""

    # Llama.__init__ would load a second model: this class shares the wrapped one's.
    def __init__(self, llm: Llama, options: EngineOptions | None = None, **changes: Any) -> None:
        if isinstance(llm, SpeculativeLlama):   # never a wrapper of a wrapper
            llm = vars(llm)["llm"]
        self._forwarded: set[str] = set()   # names set on the Llama through the wrapper
        self.llm = llm
        self.engine = SpeculativeEngine(llm, options, **changes)
        self.last_speculative: dict[str, Any] = {}  # the stats of the latest request
        # Why the latest create_completion call was decoded plainly (None: speculative), set
        # when the call is made: a server reads it before a stream's first byte.
        self.last_plain_reason: str | None = None

    def __getattr__(self, name: str) -> Any:
        # Only reached for names neither this instance nor its classes have: the
        # wrapped Llama's state (_ctx, _model, n_tokens, cache, chat_format...), which
        # Llama's own methods read through self. Not before __init__ has set llm
        # (a bare instance, as copy or pickle make one): that would recurse.
        if name in ("llm", "_forwarded"):
            raise AttributeError(name)
        return getattr(self.llm, name)

    def _owns(self, name: str) -> bool:
        if name in _WRAPPER_ATTRS or name in self.__dict__ or _defined_below_llama(type(self), name):
            return True
        return name not in self._forwarded and not hasattr(self.llm, name)

    def __setattr__(self, name: str, value: Any) -> None:
        # Settings and state read from the Llama (chat_format, cache, n_tokens...) are
        # set there, as on a plain Llama, whether the user sets them or one of Llama's
        # methods run on the wrapper does; a copy on the wrapper would be ignored.
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

    def close(self) -> None:
        """``Llama.close``: frees the wrapped ``Llama``'s model and context, which
        this wrapper shares (closing it, or either of them again, does nothing more)."""
        self.llm.close()

    def __del__(self) -> None:
        # Llama.__del__ closes: the wrapper owns nothing to free. The wrapped Llama is
        # freed by its own __del__ when the last reference to it (ours included) goes.
        pass

    def __copy__(self) -> SpeculativeLlama:
        # Llama's __getstate__/__setstate__ would reload the model through __init__:
        # a copy shares the Llama and the engine, as the wrapper's attributes are shared.
        twin = object.__new__(type(self))
        vars(twin).update(vars(self))
        return twin

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as the Llama (which llama-cpp-python pickles as its settings and
        # reloads) and the engine's options, wrapped again when unpickled.
        return (type(self), (self.llm, self.engine.options))

    @classmethod
    def from_pretrained(cls, *args: Any, **kwargs: Any) -> SpeculativeLlama:
        """``Llama.from_pretrained`` (the same arguments), wrapped with the default options."""
        return cls(Llama.from_pretrained(*args, **kwargs))

    def detokenize(self, tokens: Any, prev_tokens: Any = None, special: bool = False) -> bytes:
        """``Llama.detokenize``, with the ids checked first: llama.cpp aborts the
        whole process (std::out_of_range) on an id outside the vocabulary."""
        n_vocab = self.llm.n_vocab()
        check_token_ids(tokens, n_vocab)
        check_token_ids(() if prev_tokens is None else prev_tokens, n_vocab)
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
        check_exact(exact)
        check_finite({"temperature": temperature, "top_p": top_p, "min_p": min_p, "typical_p": typical_p,
                      "frequency_penalty": frequency_penalty, "presence_penalty": presence_penalty,
                      "repeat_penalty": repeat_penalty, "tfs_z": tfs_z, "mirostat_tau": mirostat_tau,
                      "mirostat_eta": mirostat_eta})
        greedy = is_greedy(temperature, top_k, mirostat_mode)
        # Processors known or declared safe on verified rows (row_processors.py), applied before
        # logit_bias as plain's list would be (usage.md: plain's list.extend drops both).
        rows = row_processors_of(logits_processor) if min_tokens_of(logits_processor) is None else None
        args = {"suffix": suffix, "logprobs with echo": logprobs is not None and echo, "mirostat_mode": mirostat_mode,
                "logits_processor": None if rows is not None else logits_processor}
        reason = plain_reason(COMPLETION_PLAIN if greedy else COMPLETION_PLAIN + COMPLETION_PLAIN_SAMPLED, args,
                              greedy)
        if grammar is not None:   # on either path: plain would crash on a grammar llama.cpp cannot parse
            check_grammar(self.llm, grammar)
        self.last_plain_reason = reason
        if reason is not None:
            prediction_text(prediction)   # a bad one is refused on either path
            return self._plain_completion(reason, stream, {
                "prompt": prompt, "suffix": suffix, "max_tokens": max_tokens, "temperature": temperature,
                "top_p": top_p, "min_p": min_p, "typical_p": typical_p, "logprobs": logprobs, "echo": echo,
                "stop": stop, "frequency_penalty": frequency_penalty, "presence_penalty": presence_penalty,
                "repeat_penalty": repeat_penalty, "top_k": top_k, "stream": stream, "seed": seed, "tfs_z": tfs_z,
                "mirostat_mode": mirostat_mode, "mirostat_tau": mirostat_tau, "mirostat_eta": mirostat_eta,
                "model": model, "stopping_criteria": stopping_criteria, "logits_processor": logits_processor,
                "grammar": grammar, "logit_bias": logit_bias})
        if logit_bias:
            logit_bias = logit_bias_map(logit_bias, self.llm.n_vocab())
        llm_seed, call_seed = call_seeds(self.llm, seed)
        sampling = None if greedy else sampling_params(
            self.llm, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p,
            repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
            logit_bias=logit_bias, seed=call_seed)
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        limit = None if max_tokens is None or max_tokens <= 0 else max_tokens
        head = {"id": f"cmpl-{uuid.uuid4()}", "object": "text_completion", "created": int(time.time()),
                "model": model if model is not None else self.llm.model_path}
        prefix = self._echoed_prompt(prompt) if echo else ""
        min_tokens = min_tokens_of(logits_processor) if rows is None else (0, -1)
        assert min_tokens is not None   # any other processor took the plain path
        # A greedy request's penalties and bias are applied row by row as plain's chain
        # applies them (a sampled one's are in its SamplingParams).
        penalties = ((self.llm.last_n_tokens_size, repeat_penalty, frequency_penalty, presence_penalty)
                     if greedy else None)
        run = self.engine.stream(prompt, max_tokens=limit, stop=stops, stopping_criteria=stopping_criteria,
                                 sampling=sampling, exact=exact, prediction=prediction, grammar=grammar,
                                 logit_bias=logit_bias if greedy else None, penalties=penalties,
                                 min_tokens=min_tokens[0], logprobs=logprobs, row_processors=rows or ())
        if llm_seed is not None and hasattr(self.llm, "set_seed"):
            self.llm.set_seed(llm_seed)
        if stream:
            return self._stream_chunks(run, head, prefix, prompt)
        return self._completion(run, head, prefix, prompt)

    __call__ = create_completion

    def _plain_completion(self, reason: str, stream: bool, kwargs: dict[str, Any]) -> Any:
        """The request through the Llama's own ``create_completion``, marked as plain
        (``plain_path``). It holds the engine's lock as a speculative call does, and
        ends any unfinished stream of this wrapper first (a generation that begins does)."""
        engine = self.engine
        if not stream:
            with engine.lock:
                engine.begin_generation()
                out: Any = self.llm.create_completion(**kwargs)   # not streamed: a dict
            self.last_speculative = mark_completion(out, reason)["speculative"]
            return out
        with engine.lock:   # plain raises bad arguments at its first next(): ours when called
            engine.begin_generation()
            chunks: Iterator[Any] = iter(self.llm.create_completion(**kwargs))
            first = next(chunks, None)
        prompt, suffix = kwargs["prompt"], kwargs["suffix"]
        n_prompt = len(prompt_tokens_for(self.llm, prompt)) if suffix is None else 0
        return self._plain_chunks(first, chunks, reason, n_prompt)

    def _plain_chunks(self, first: Any, chunks: Iterator[dict[str, Any]], reason: str,
                      n_prompt: int) -> Iterator[dict[str, Any]]:
        def locked() -> Iterator[dict[str, Any]]:
            if first is None:
                return
            yield first
            while True:
                with self.engine.lock:
                    chunk = next(chunks, None)
                if chunk is None:
                    return
                yield chunk

        def count(text: str) -> int:
            return len(self.llm.tokenize(text.encode("utf-8"), add_bos=False)) if text else 0

        for chunk in mark_stream(locked(), reason, n_prompt, count):
            if "speculative" in chunk:
                self.last_speculative = chunk["speculative"]
            yield chunk

    def _echoed_prompt(self, prompt: str | list[int]) -> str:
        """The prompt's text, as ``echo=True`` puts it before the completion."""
        if isinstance(prompt, str):
            return prompt
        text: str = self.llm.detokenize(prompt_tokens_for(self.llm, prompt)).decode("utf-8", errors="ignore")
        return text

    def _stats(self, run: GenerationStream, gen: Any) -> dict[str, Any]:
        """The response's ``speculative`` stats: the engine's, and with a grammar how
        many rows it was checked on and how many needed it applied to the whole row."""
        stats: dict[str, Any] = {"used": True, **gen.stats.to_dict()}
        if run.rules is not None and run.rules.has_grammar:
            stats["grammar_rows"] = run.rules.grammar_rows
            stats["grammar_full_rows"] = run.rules.full_grammar_rows
        self.last_speculative = stats
        return stats

    def _logprobs(self, run: GenerationStream, prompt: Any, tokens: list[int], start: int = 0,
                  end: int | None = None) -> dict[str, Any] | None:
        if run.logprobs is None:
            return None
        return completion_logprobs(self.llm, prompt, tokens, run.logprobs, start, end)

    def _completion(self, run: GenerationStream, head: dict[str, Any], prefix: str, prompt: Any) -> dict[str, Any]:
        """Runs the generation to its end and returns the response."""
        gen = run.run_to_end()
        stats = self._stats(run, gen)
        return {
            **head,
            "choices": [{"text": prefix + gen.text, "index": 0, "logprobs": self._logprobs(run, prompt, gen.tokens),
                         "finish_reason": gen.finish_reason}],
            "usage": _usage(len(run.prompt_tokens), gen),
            "speculative": stats,
        }

    def _stream_chunks(self, run: GenerationStream, head: dict[str, Any], prefix: str,
                       prompt: Any) -> Iterator[dict[str, Any]]:
        """One chunk per verify pass: the text that can no longer change (no split
        UTF-8 character, nothing that may still turn out to start a stop string).
        The last chunk, with no text as plain's, carries the finish reason, the
        usage and the stats. With ``logprobs``, each chunk with text carries those
        of the tokens emitted since the previous one."""
        reported = 0

        def chunk(text: str, finish: str | None, tokens: list[int] | None = None) -> dict[str, Any]:
            nonlocal reported
            logprobs = None
            if tokens is not None and run.logprobs is not None:
                logprobs = self._logprobs(run, prompt, tokens, reported, len(tokens))
                reported = len(tokens)
            return {**head, "choices": [{"text": text, "index": 0, "logprobs": logprobs, "finish_reason": finish}]}

        sent = 0
        if prefix:
            yield chunk(prefix, None)
        for _ in run:
            text = run.text
            assert text is not None   # set by the run's first pass
            end = text.stable_end
            if end > sent:
                yield chunk(text.slice(sent, end).decode("utf-8", errors="ignore"), None, run.emitted)
                sent = end
        gen, text = run.result, run.text
        assert gen is not None and text is not None   # set when the run ended
        stats = self._stats(run, gen)
        rest = text.slice(sent).decode("utf-8", errors="ignore")
        if rest or (run.logprobs is not None and reported < len(gen.tokens)):
            # Its own chunk, as plain's stream ends with an empty finishing chunk: the
            # chat handler turns a chunk with a finish_reason into an empty delta, so
            # text held back for a possible stop string was lost from chat streams.
            yield chunk(rest, None, gen.tokens)
        last = chunk("", gen.finish_reason)
        last["usage"] = _usage(len(run.prompt_tokens), gen)
        last["speculative"] = stats
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
        check_exact(exact)  # a bad value fails here, before any formatting
        prediction_text(prediction)
        if logprobs and top_logprobs is None:
            # OpenAI's logprobs=True alone asks for the chosen tokens' logprobs; plain's
            # handler passes logprobs on only with top_logprobs, and returned none.
            top_logprobs = 0
        llm = self.llm
        handler = (llm.chat_handler or registered_chat_handler(llm)
                   or llama_chat_format.get_chat_completion_handler(str(llm.chat_format)))
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
                 grammar: Any = None, exact: bool | None = None) -> Generator[int, Any, None]:
        """``Llama.generate``: yields token ids. Greedy requests are speculative and
        yield exactly the plain tokens (with exact=True); unlike ``Llama.generate``
        they end after an end-of-generation token (yielded last) or at the end of
        the context. ``exact``: this call's verify mode (None: the wrapper's)."""
        check_exact(exact)
        plain_args = {"repeat_penalty": repeat_penalty, "frequency_penalty": frequency_penalty,
                      "presence_penalty": presence_penalty, "mirostat_mode": mirostat_mode,
                      "logits_processor": logits_processor, "grammar": grammar, "reset=False": reset}
        if not is_greedy(temp, top_k, mirostat_mode) or in_use(GENERATE_PLAIN, plain_args):
            plain: Generator[int, Any, None] = self.llm.generate(
                tokens, top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p, temp=temp,
                repeat_penalty=repeat_penalty, reset=reset, frequency_penalty=frequency_penalty,
                presence_penalty=presence_penalty, tfs_z=tfs_z, mirostat_mode=mirostat_mode,
                mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta, penalize_nl=penalize_nl,
                logits_processor=logits_processor, stopping_criteria=stopping_criteria, grammar=grammar)
            return plain
        return self._generate_greedy(list(tokens), stopping_criteria, exact)

    def _generate_greedy(self, tokens: list[int], stopping_criteria: Any,
                         exact: bool | None) -> Generator[int, Any, None]:
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


def wrap(llm: Llama, options: EngineOptions | None = None, **changes: Any) -> SpeculativeLlama:
    """Shorthand for ``SpeculativeLlama(llm, options, **changes)``: ``llm`` sped up,
    with an ``EngineOptions`` and/or the options by name (``wrap(llm, exact=False)``).
    ``wrap`` of a wrapper wraps its ``Llama`` anew, with these options only (the old
    wrapper's are not carried over): a wrapper never wraps a wrapper."""
    return SpeculativeLlama(llm, options, **changes)
