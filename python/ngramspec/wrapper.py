"""Drop-in speculative wrapper around a ``llama_cpp.Llama``.

``SpeculativeLlama(llm)`` (or ``wrap(llm)``) offers ``create_completion``,
``__call__``, ``create_chat_completion`` and ``generate`` with llama-cpp-python's
signatures, defaults and return shapes. Greedy requests (temperature <= 0 or
top_k == 1) go through the speculative engine and return the same text as the
plain ``Llama``; every response carries a ``speculative`` key with the stats.
Sampled requests use exact speculative sampling (``ngramspec.sampling``): the
model's own distribution under the same parameters, reproducible by seed, but
not the same random draws as llama-cpp-python's sampler. Any other attribute is the
wrapped ``Llama``'s.
"""
from __future__ import annotations

import random
import time
import uuid
from typing import Any, Dict, Iterator, List, Optional, Union


from .engine import SpeculativeEngine, prompt_tokens_for
from .sampling import SamplingParams

__all__ = ["SpeculativeLlama", "wrap"]

def _utf8_complete_prefix(data: bytes) -> bytes:
    """``data`` without a trailing, still incomplete UTF-8 sequence."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # a lead byte (or ASCII)
            need = 1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4
            return data if need <= back else data[:-back]
    return data


def _held_back(text: str, stops: list[str]) -> int:
    """Length of the longest suffix of ``text`` that could still grow into a stop string."""
    hold = 0
    for s in stops:
        for i in range(min(len(s) - 1, len(text)), hold, -1):
            if text.endswith(s[:i]):
                hold = i
                break
    return hold


class SpeculativeLlama:
    """llm: the ``llama_cpp.Llama`` to speed up. options: ``SpeculativeEngine``'s.
    ``exact`` there is the wrapper's default; each call may override it with its
    own ``exact=`` keyword (greedy and sampled requests alike)."""

    def __init__(self, llm: Any, **options: Any) -> None:
        self.llm = llm
        self.engine = SpeculativeEngine(llm, **options)
        self._options = options
        self._other: Optional[SpeculativeEngine] = None  # the engine of the other exactness, made on first use
        self._chat_exact: Optional[bool] = None  # a chat call's override, seen by the handler's completion call
        self.last_speculative: dict = {}  # the stats of the latest request

    def _engine_for(self, exact: Optional[bool]) -> SpeculativeEngine:
        if exact is None:
            exact = self._chat_exact
        if exact is not None and not isinstance(exact, bool):
            raise TypeError(f"exact must be True, False or None, got {type(exact).__name__}")
        if exact is None or exact == self.engine.exact:
            return self.engine
        if self._other is None:
            # Both engines drive the same Llama and rebuild their tables per call, so
            # they share nothing but the measured invariance report.
            options = {**self._options, "exact": exact}
            if exact and self.engine.invariance is not None:
                options["invariance"] = self.engine.invariance
            self._other = SpeculativeEngine(self.llm, **options)
        return self._other

    def __getattr__(self, name: str) -> Any:
        # Only reached for names this class lacks: tokenize, metadata, chat_format...
        return getattr(self.llm, name)

    # ------------------------------------------------------------------
    def create_completion(
        self,
        prompt: Union[str, List[int]],
        suffix: Optional[str] = None,
        max_tokens: Optional[int] = 16,
        temperature: float = 0.8,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        logprobs: Optional[int] = None,
        echo: bool = False,
        stop: Optional[Union[str, List[str]]] = [],
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        top_k: int = 40,
        stream: bool = False,
        seed: Optional[int] = None,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: Optional[str] = None,
        stopping_criteria: Any = None,
        logits_processor: Any = None,
        grammar: Any = None,
        logit_bias: Optional[Dict[int, float]] = None,
        exact: Optional[bool] = None,
    ) -> Any:
        """llama-cpp-python's ``Llama.create_completion``, speculative. ``exact``:
        this call's verify mode (None: the wrapper's)."""
        engine = self._engine_for(exact)
        greedy = temperature <= 0 or top_k == 1
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
        sampling = None
        if not greedy:
            sampling = SamplingParams(
                temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p,
                repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
                presence_penalty=presence_penalty, penalty_last_n=self.llm.last_n_tokens_size,
                logit_bias=dict(logit_bias) if logit_bias else None,
                seed=seed if seed is not None else random.SystemRandom().randrange(2**63))
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        limit = None if max_tokens is None or max_tokens <= 0 else max_tokens
        head = {"id": f"cmpl-{uuid.uuid4()}", "object": "text_completion", "created": int(time.time()),
                "model": model if model is not None else self.llm.model_path}
        prefix = ""
        if echo:
            prefix = prompt if isinstance(prompt, str) else self.llm.detokenize(
                prompt_tokens_for(self.llm, prompt)).decode("utf-8", errors="ignore")
        run = engine.stream(prompt, max_tokens=limit, stop=stops, stopping_criteria=stopping_criteria,
                                 sampling=sampling)
        if stream:
            return self._stream_chunks(run, head, prefix, stops)
        for _ in run:
            pass
        gen = run.result
        n_prompt = len(run.prompt_tokens)
        self.last_speculative = {"used": True, **gen.stats.to_dict()}
        return {
            **head,
            "choices": [{"text": prefix + gen.text, "index": 0, "logprobs": None,
                         "finish_reason": gen.finish_reason}],
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": len(gen.tokens),
                      "total_tokens": n_prompt + len(gen.tokens)},
            "speculative": {"used": True, **gen.stats.to_dict()},
        }

    __call__ = create_completion

    def _stream_chunks(self, run: Any, head: dict, prefix: str, stops: list[str]) -> Iterator[dict]:
        """One chunk per verify pass: the text that can no longer change (no split
        UTF-8 character, nothing that may still turn out to start a stop string)."""
        def chunk(text: str, finish: Optional[str], extra: Optional[dict] = None) -> dict:
            out = {**head, "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish}]}
            if extra is not None:
                out["speculative"] = extra
            return out

        llm = self.llm
        sent = 0
        data = b""
        if prefix:
            yield chunk(prefix, None)
        for tokens in run:
            data += llm.detokenize(tokens, prev_tokens=run.prompt_tokens)
            text = _utf8_complete_prefix(data).decode("utf-8", errors="ignore")
            safe = len(text) - _held_back(text, stops)
            for s in stops:  # a stop completed in this chunk: the engine ends right after it
                found = text.find(s, max(0, sent - len(s)))
                if found >= 0:
                    safe = min(safe, found)
            if safe > sent:
                yield chunk(text[sent:safe], None)
                sent = safe
        gen = run.result
        self.last_speculative = {"used": True, **gen.stats.to_dict()}
        yield chunk(gen.text[sent:], gen.finish_reason, self.last_speculative)

    # ------------------------------------------------------------------
    def create_chat_completion(
        self,
        messages: List[Any],
        functions: Optional[List[Any]] = None,
        function_call: Any = None,
        tools: Optional[List[Any]] = None,
        tool_choice: Any = None,
        temperature: float = 0.2,
        top_p: float = 0.95,
        top_k: int = 40,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        stream: bool = False,
        stop: Optional[Union[str, List[str]]] = [],
        seed: Optional[int] = None,
        response_format: Any = None,
        max_tokens: Optional[int] = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: Optional[str] = None,
        logits_processor: Any = None,
        grammar: Any = None,
        logit_bias: Optional[Dict[int, float]] = None,
        logprobs: Optional[bool] = None,
        top_logprobs: Optional[int] = None,
        exact: Optional[bool] = None,
    ) -> Any:
        """llama-cpp-python's ``Llama.create_chat_completion``: the model's chat
        handler formats the messages exactly as it does for the plain ``Llama``,
        then calls this wrapper's ``create_completion``. ``exact``: as there."""
        from llama_cpp import llama_chat_format

        self._engine_for(exact)  # a bad value fails here, before any formatting
        llm = self.llm
        handler = (llm.chat_handler or llm._chat_handlers.get(llm.chat_format)
                   or llama_chat_format.get_chat_completion_handler(llm.chat_format))
        self._chat_exact = exact
        try:
            out = handler(
                llama=self, messages=messages, functions=functions, function_call=function_call, tools=tools,
                tool_choice=tool_choice, temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
                typical_p=typical_p, logprobs=logprobs, top_logprobs=top_logprobs, stream=stream, stop=stop,
                seed=seed, response_format=response_format, max_tokens=max_tokens,
                presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
                repeat_penalty=repeat_penalty, tfs_z=tfs_z, mirostat_mode=mirostat_mode,
                mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta, model=model,
                logits_processor=logits_processor, grammar=grammar, logit_bias=logit_bias)
        finally:
            self._chat_exact = None
        if isinstance(out, dict):  # the chat handler rebuilds the dict, so add the stats back
            out["speculative"] = self.last_speculative
        return out

    # ------------------------------------------------------------------
    def generate(self, tokens: Any, top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
                 typical_p: float = 1.0, temp: float = 0.80, repeat_penalty: float = 1.0, reset: bool = True,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0, tfs_z: float = 1.0,
                 mirostat_mode: int = 0, mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                 penalize_nl: bool = True, logits_processor: Any = None, stopping_criteria: Any = None,
                 grammar: Any = None, exact: Optional[bool] = None) -> Iterator[int]:
        """``Llama.generate``: yields token ids. Greedy requests are speculative and
        yield exactly the plain tokens (with exact=True); unlike ``Llama.generate``
        they end after an end-of-generation token (yielded last) or at the end of
        the context. ``exact``: this call's verify mode (None: the wrapper's)."""
        engine = self._engine_for(exact)
        if not (temp <= 0 or top_k == 1):
            return self.llm.generate(
                tokens, top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p, temp=temp,
                repeat_penalty=repeat_penalty, reset=reset, frequency_penalty=frequency_penalty,
                presence_penalty=presence_penalty, tfs_z=tfs_z, mirostat_mode=mirostat_mode,
                mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta, penalize_nl=penalize_nl,
                logits_processor=logits_processor, stopping_criteria=stopping_criteria, grammar=grammar)
        bad = [n for n, used in {"repeat_penalty": repeat_penalty != 1.0, "frequency_penalty": frequency_penalty != 0,
                                 "presence_penalty": presence_penalty != 0, "mirostat_mode": mirostat_mode != 0,
                                 "logits_processor": logits_processor is not None, "grammar": grammar is not None,
                                 "reset=False": not reset}.items() if used]
        if bad:
            raise NotImplementedError(f"ngramspec's greedy generate does not support {', '.join(bad)}")
        return self._generate_greedy(engine, list(tokens), stopping_criteria)

    def _generate_greedy(self, engine: SpeculativeEngine, tokens: list, stopping_criteria: Any) -> Iterator[int]:
        run = engine.stream(tokens, max_tokens=None, stopping_criteria=stopping_criteria)
        for chunk in run:
            yield from chunk
        if run.result.eog_token is not None:  # Llama.generate yields it too
            yield run.result.eog_token


def wrap(llm: Any, **options: Any) -> SpeculativeLlama:
    """Shorthand for ``SpeculativeLlama(llm, **options)``."""
    return SpeculativeLlama(llm, **options)
