"""``ngramspec serve``: llama-cpp-python's OpenAI-compatible server, answering
through ngramspec's speculative wrapper.

One job: build llama-cpp-python's own FastAPI app (``llama_cpp.server.app.create_app``,
from the ``llama-cpp-python[server]`` extras) for one model, make its completion
routes answer through ``SpeculativeLlama``, and run it with uvicorn.

What is llama-cpp-python's, unchanged: the settings and their command-line spelling
(``--model``, ``--host``, ``--port``, ``--n_ctx``, ``--n_threads``, ``--api_key``...,
``llama_cpp.server.settings``), the model loading (``LlamaProxy``), the middleware,
CORS, API-key check, ``/v1/models``, ``/v1/embeddings``, ``/extras/*``, its request
types (subclassed here), its one-at-a-time locks (``get_llama_proxy``), its request
preparation (``prepare_request_resources``) and its SSE (sse-starlette's
``EventSourceResponse``).

What is ours:
- ``/v1/completions`` and ``/v1/chat/completions`` are replaced by routes that call
  the ``SpeculativeLlama`` (the proxy hands out the wrapper, never the plain
  ``Llama``), accept OpenAI's ``prediction`` and ``stream_options``, and add to every
  response ``usage.completion_tokens_details`` (predicted-output counts),
  ``timings`` (llama.cpp server's names: ``draft_n``, ``draft_n_accepted``,
  ``predicted_n``, ``predicted_ms``...) and ``speculative`` (our full stats).
- A stream takes the model lock before its response starts, so a request that
  fails (prompt too long, unsupported parameter) gets a 4xx JSON error, not a
  broken stream; a client that goes away mid-stream has its generator closed under
  the lock, so the next request finds the context coherent.
- Requests wait in arrival order (the app's FIFO locks); at most ``--max_queue``
  completion requests are running or waiting, and the next gets a 503.
- Errors are OpenAI-shaped, ``{"error": {"message", "type", "param", "code"}}``,
  with a 4xx status for anything the request did wrong (malformed JSON, wrong
  types, prompt longer than the context, max_tokens < 1, unknown model, bad
  prediction, parameters speculation cannot honour).
- ``GET /health`` answers at once, without waiting for the model.

Defaults that differ from ``python -m llama_cpp.server``: ``--logits_all`` is False
(the engine asks for logits only on the rows it verifies; True would keep an
n_ctx x n_vocab array filled on every decode), ``--interrupt_requests`` is False
(queued requests wait, they do not cut a running stream short), and requests'
``repeat_penalty`` defaults to 1.0 (OpenAI has no repetition penalty, and greedy
speculation refuses one).
"""
# Pydantic evaluates the request types' annotations at run time, where Python 3.9
# has no `X | None`: this module keeps typing's Optional / List / Dict throughout.
# ruff: noqa: UP006, UP007, UP035, UP045
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Literal, Optional, Sequence, Tuple, Union

import anyio
import llama_cpp
import uvicorn
from fastapi import APIRouter, Depends, HTTPException, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from llama_cpp.server import app as llama_app
from llama_cpp.server.cli import _parse_bool_arg, add_args_from_model, parse_model_from_args
from llama_cpp.server.errors import RouteErrorHandler
from llama_cpp.server.settings import ModelSettings, ServerSettings, Settings
from llama_cpp.server.types import (
    CreateChatCompletionRequest,
    CreateCompletionRequest,
    DetokenizeInputRequest,
    DetokenizeInputResponse,
)
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette.sse import EventSourceResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request as StarletteRequest

from ngramspec import models
from ngramspec.integrations.wrapper import wrap

__all__ = ["ServeOptions", "build_parser", "create_app", "main"]

DEFAULT_MAX_QUEUE = 16


@dataclass
class ServeOptions:
    """ngramspec's own settings, on top of llama-cpp-python's."""

    exact: bool = True                 # verify only with bit-exact batch sizes (README: fast mode)
    max_draft: Optional[int] = None    # SpeculativeEngine's max_draft (None: its default)
    max_queue: int = DEFAULT_MAX_QUEUE  # completion requests running or waiting; the next gets 503
    warmup: bool = True                # before listening: the engine's first-use work, a first decode
    memory: Optional[str] = None       # `--memory FILE`: loaded at start if it exists, saved when the server stops

    def engine_options(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"exact": self.exact}
        if self.max_draft is not None:
            out["max_draft"] = self.max_draft
        return out


class UserError(Exception):
    """A bad command line: one line on stderr, exit status 2."""


# ----------------------------------------------------------------------------
# Request types: llama-cpp-python's, plus OpenAI fields it drops or checks loosely.

class PredictionText(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]
    text: str


class Prediction(BaseModel):
    """OpenAI predicted outputs: ``{"type": "content", "content": str | [{"type": "text", "text": str}]}``."""
    model_config = ConfigDict(extra="forbid")
    type: Literal["content"]
    content: Union[str, List[PredictionText]]


class StreamOptions(BaseModel):
    include_usage: bool = False


_PENALTY = "Repetition penalty (llama.cpp's); 1.0 = off, as in OpenAI."
# llama-cpp-python's request types have no typical_p (their create_completion does):
# without the field, a request's typical_p was dropped without a word.
_TYPICAL_P = "Locally typical sampling (llama.cpp's typical_p), in (0, 1]; 1.0 = off."


class CompletionRequest(CreateCompletionRequest):
    max_tokens: Optional[int] = Field(default=16, ge=1, description="The maximum number of tokens to generate.")
    repeat_penalty: float = Field(default=1.0, ge=0.0, description=_PENALTY)
    typical_p: float = Field(default=1.0, gt=0.0, le=1.0, description=_TYPICAL_P)
    prediction: Optional[Prediction] = None
    stream_options: Optional[StreamOptions] = None


class ChatCompletionRequest(CreateChatCompletionRequest):
    messages: List[llama_cpp.ChatCompletionRequestMessage] = Field(
        min_length=1, description="A list of messages to generate completions for.")
    max_tokens: Optional[int] = Field(default=None, ge=1, description="OpenAI's older name of max_completion_tokens.")
    max_completion_tokens: Optional[int] = Field(default=None, ge=1)
    repeat_penalty: float = Field(default=1.0, ge=0.0, description=_PENALTY)
    typical_p: float = Field(default=1.0, gt=0.0, le=1.0, description=_TYPICAL_P)
    prediction: Optional[Prediction] = None
    stream_options: Optional[StreamOptions] = None

# Fields of the request that are not keyword arguments of create_completion /
# create_chat_completion.
_NOT_KWARGS = {"n", "best_of", "logit_bias_type", "user", "min_tokens", "prediction", "stream_options",
               "max_completion_tokens"}


# ----------------------------------------------------------------------------
# Errors

class ClientError(Exception):
    """A request the server refuses: an HTTP status and an OpenAI error object."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: Optional[str] = None, code: Optional[str] = None) -> None:
        super().__init__(message)
        self.status = status
        self.error = {"message": message, "type": type, "param": param, "code": code}


def _as_client_error(exc: BaseException, body: Any = None) -> BaseException:
    """What the wrapper raises for a bad request, as a 4xx; anything else unchanged."""
    if isinstance(exc, ClientError):
        return exc
    if isinstance(exc, NotImplementedError):
        sent = _fields_behind(str(exc), body)
        if sent:
            return ClientError(400, f"{', '.join(sent)}: not supported (llama-cpp-python's server turns "
                                    f"{'it' if len(sent) == 1 else 'them'} into what the wrapper refuses: {exc})",
                               param=sent[0], code="unsupported_parameter")
        return ClientError(400, str(exc), code="unsupported_parameter")
    if isinstance(exc, (ValueError, TypeError)):
        for pattern, formatter in RouteErrorHandler.pattern_and_formatters.items():
            match = pattern.search(str(exc))
            if match is not None and body is not None:
                status, err = formatter(body, match)
                return ClientError(status, **err)
        return ClientError(400, str(exc))
    return exc


def _fields_behind(message: str, body: Any) -> List[str]:
    """The request fields behind a refusal that names what the wrapper was given:
    llama-cpp-python's server turns min_tokens into a logits_processor, and a JSON
    response_format, a forced tool_choice or function_call into a grammar."""
    if body is None:
        return []
    sent = []
    if "logits_processor" in message and getattr(body, "min_tokens", None):
        sent.append("min_tokens")
    if "grammar" in message:
        if getattr(body, "grammar", None):
            sent.append("grammar")
        fmt = getattr(body, "response_format", None)
        kind = fmt.get("type") if isinstance(fmt, dict) else getattr(fmt, "type", None)
        if fmt is not None and kind != "text":
            sent.append("response_format")
        for name in ("tool_choice", "function_call"):   # a named tool or function: a grammar for it
            if isinstance(getattr(body, name, None), dict):
                sent.append(name)
    return sent


def _validation_error(exc: Any) -> ClientError:
    errors = exc.errors()
    first = errors[0] if errors else {}
    loc = [str(x) for x in first.get("loc", ()) if x != "body"]
    if first.get("type") == "json_invalid":
        return ClientError(400, f"The request body is not valid JSON: {first.get('msg', '')}",
                           code="invalid_json")
    parts = []
    for e in errors[:5]:
        where = ".".join(str(x) for x in e.get("loc", ()) if x != "body") or "body"
        parts.append(f"{where}: {e.get('msg', 'invalid')}")
    return ClientError(400, "Invalid request: " + "; ".join(parts), param=".".join(loc) or None,
                       code="invalid_value")


def _error_json(err: ClientError) -> Any:
    headers = {"Retry-After": "1"} if err.status == 503 else None
    return JSONResponse({"error": err.error}, status_code=err.status, headers=headers)


def _http_error(exc: Any) -> ClientError:
    return ClientError(exc.status_code, str(exc.detail),
                       type="invalid_request_error" if exc.status_code < 500 else "server_error")


def _internal_error(exc: BaseException) -> ClientError:
    """An exception the request did not cause: logged with its traceback, answered with a 500."""
    import traceback

    traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    return ClientError(500, str(exc) or type(exc).__name__, type="internal_server_error")


def _route_class() -> type:
    class SpeculativeRoute(RouteErrorHandler):
        """llama-cpp-python's RouteErrorHandler, except that a request's own
        faults (malformed JSON, wrong types, what the wrapper refuses) are 4xx;
        its handler would answer those with 500, or fail on a body that is not JSON."""

        def get_route_handler(self) -> Any:
            original = APIRoute.get_route_handler(self)

            async def handler(request: Any) -> Any:
                start = time.perf_counter()
                try:
                    response = await original(request)
                except RequestValidationError as exc:
                    return _error_json(_validation_error(exc))
                except ClientError as exc:
                    return _error_json(exc)
                except StarletteHTTPException as exc:
                    return _error_json(_http_error(exc))
                except Exception as exc:  # a fault of ours: 500, and the server lives on
                    return _error_json(_internal_error(exc))
                response.headers["openai-processing-ms"] = f"{int((time.perf_counter() - start) * 1000)}"
                return response

            return handler

    return SpeculativeRoute


# ----------------------------------------------------------------------------
# The model: llama-cpp-python's LlamaProxy loads it; requests get the wrapper.

class SpeculativeProxy:
    """Stands in for llama-cpp-python's ``LlamaProxy`` (its ``__call__``,
    ``__iter__``, ``free``): one model, handed out as the ``SpeculativeLlama``."""

    def __init__(self, wrapper: Any, alias: str, names: Sequence[str]) -> None:
        self.wrapper = wrapper
        self.alias = alias
        self.names = {n for n in names if n}

    def __call__(self, model: Optional[str] = None) -> Any:
        return self.wrapper

    def __iter__(self) -> Iterator[str]:
        yield self.alias

    def free(self) -> None:
        self.wrapper.llm.close()


class _State:
    """The server's own state: the proxy, the queue count, the options."""

    def __init__(self, proxy: SpeculativeProxy, options: ServeOptions, server_settings: Any) -> None:
        self.proxy = proxy
        self.options = options
        self.interrupt = bool(server_settings.interrupt_requests)
        self.pending = 0
        self.served = 0
        self.cancelled = 0  # streams that ended before their end: the client went away (or was interrupted)

    def check_model(self, model: Optional[str]) -> None:
        if model is not None and model not in self.proxy.names:
            raise ClientError(404, f"The model `{model}` does not exist; this server serves `{self.proxy.alias}` "
                                   "(GET /v1/models)", param="model", code="model_not_found")

    def enter(self) -> None:
        if self.pending >= self.options.max_queue:
            raise ClientError(503, f"Server busy: {self.pending} requests are running or waiting (max_queue "
                                   f"{self.options.max_queue}); retry later", type="server_error",
                              code="queue_full")
        self.pending += 1

    def leave(self) -> None:
        self.pending -= 1
        self.served += 1


def _kwargs(body: Any, chat: bool, state: _State) -> Dict[str, Any]:
    """The request as keyword arguments of the wrapper's create_(chat_)completion."""
    if body.n not in (None, 1) or getattr(body, "best_of", None) not in (None, 1):
        raise ClientError(400, "n and best_of must be 1: this server returns one choice per request",
                          param="n", code="unsupported_parameter")
    if not chat and isinstance(body.prompt, list):
        if len(body.prompt) > 1:
            raise ClientError(400, "a batch of prompts is not supported: send one prompt per request",
                              param="prompt", code="unsupported_parameter")
        body.prompt = body.prompt[0] if body.prompt else ""
    kwargs: Dict[str, Any] = body.model_dump(exclude=_NOT_KWARGS)
    for name in ("presence_penalty", "frequency_penalty"):
        if kwargs.get(name) is None:
            kwargs[name] = 0.0
    kwargs["model"] = body.model if body.model is not None else state.proxy.alias
    if chat and kwargs.get("max_tokens") is None:
        kwargs["max_tokens"] = body.max_completion_tokens
    if body.prediction is not None:
        kwargs["prediction"] = body.prediction.model_dump()  # OpenAI's shape, checked by the request type
    return kwargs


# ----------------------------------------------------------------------------
# Response fields: usage details, llama.cpp-style timings, our stats.

def _prediction_details(out: Dict[str, Any]) -> Dict[str, int]:
    """OpenAI's usage.completion_tokens_details: the wrapper's counts, 0 without a prediction."""
    details = dict((out.get("usage") or {}).get("completion_tokens_details") or {})
    for key in ("accepted_prediction_tokens", "rejected_prediction_tokens"):
        details[key] = int(details.get(key) or 0)
    return details


def timings(stats: Dict[str, Any]) -> Dict[str, Any]:
    """Our stats under llama.cpp server's ``timings`` names."""
    n = int(stats.get("generated_tokens", 0))
    prompt_n = int(stats.get("prefill_tokens", 0))
    prompt_ms = float(stats.get("time_prefill_s", 0.0)) * 1e3
    predicted_ms = max(0.0, float(stats.get("time_total_s", 0.0)) * 1e3 - prompt_ms)
    return {
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
        "prompt_per_second": prompt_n / prompt_ms * 1e3 if prompt_ms else 0.0,
        "predicted_n": n,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / n if n else 0.0,
        "predicted_per_second": n / predicted_ms * 1e3 if predicted_ms else 0.0,
        "draft_n": int(stats.get("drafted_tokens", 0)),
        "draft_n_accepted": int(stats.get("accepted_tokens", 0)),
        "forward_passes": int(stats.get("forward_passes", 0)),
        "tokens_per_forward": float(stats.get("tokens_per_forward", 0.0)),
    }


def _finish(out: Dict[str, Any], stats: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """A full response (or a stream's last chunk): usage with the prediction
    counts, timings and speculative stats."""
    stats = dict(stats or out.get("speculative") or {})
    usage = dict(out.get("usage") or {})
    if not usage:
        p, c = int(stats.get("prompt_tokens", 0)), int(stats.get("generated_tokens", 0))
        usage = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
    usage["completion_tokens_details"] = _prediction_details(out)
    out["usage"] = usage
    out["timings"] = timings(stats)
    out["speculative"] = stats
    return out


# ----------------------------------------------------------------------------
# Routes

_END = object()


def _start(call: Any, kwargs: Dict[str, Any]) -> Tuple[Any, Any]:
    """Start a streamed generation and take its first chunk (so that a request
    that fails, fails before the response starts)."""
    iterator = iter(call(**kwargs))
    return iterator, next(iterator, _END)


def _close(iterator: Any) -> None:
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


class _StreamAnswer(Response):
    """The ASGI response of a streamed request. It waits for the model lock in
    the request's own task (llama-cpp-python's FIFO ``get_llama_proxy``), starts
    the generation, then either answers with a JSON error or streams SSE through
    sse-starlette; the generator is closed before the lock is released, also when
    the client has gone away."""

    def __init__(self, state: _State, body: Any, kwargs: Dict[str, Any], chat: bool) -> None:
        super().__init__()
        # request_body, not body: Response.body is the (empty) response body
        self.state, self.request_body, self.kwargs, self.chat = state, body, kwargs, chat
        self.finished = False  # the generation ran to its end

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            async with contextlib.asynccontextmanager(llama_app.get_llama_proxy)() as proxy:
                try:
                    llama = llama_app.prepare_request_resources(self.request_body, proxy, self.request_body.model,
                                                                self.kwargs)
                    if await StarletteRequest(scope, receive).is_disconnected():
                        return
                    call = llama.create_chat_completion if self.chat else llama.create_completion
                    iterator, first = await run_in_threadpool(_start, call, self.kwargs)
                except Exception as exc:
                    err = _as_client_error(exc, self.request_body)
                    if not isinstance(err, ClientError):
                        err = _internal_error(exc)
                    await _error_json(err)(scope, receive, send)
                    return
                try:
                    events = self._events(llama, iterator, first)
                    # llama-cpp-python's factory is typed as returning bytes; it passes it to
                    # sse-starlette (which wants a ServerSentEvent) the same way.
                    ping = llama_app._ping_message_factory
                    await EventSourceResponse(events, sep="\n",
                                              ping_message_factory=ping)(  # type: ignore[arg-type]
                        scope, receive, send)
                finally:
                    if not self.finished:
                        self.state.cancelled += 1
                    with anyio.CancelScope(shield=True):
                        await run_in_threadpool(_close, iterator)
        finally:
            self.state.leave()

    async def _events(self, llama: Any, iterator: Any, chunk: Any) -> Any:
        body = self.request_body
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        last: Optional[Dict[str, Any]] = None
        while chunk is not _END:
            choices = chunk.get("choices") or []
            if choices and choices[0].get("finish_reason") is not None:
                stats = chunk.get("speculative") or getattr(llama, "last_speculative", None)
                last = _finish(chunk, stats)
            yield {"data": json.dumps(chunk)}
            if self.state.interrupt and llama_app.llama_outer_lock.locked():
                yield {"data": "[DONE]"}
                return
            try:
                chunk = await run_in_threadpool(next, iterator, _END)
            except Exception as exc:  # mid-stream: the status is sent already; an error event, then the end
                err = _as_client_error(exc, self.request_body)
                if not isinstance(err, ClientError):
                    err = _internal_error(exc)
                self.finished = True
                yield {"data": json.dumps({"error": err.error})}
                return
        if include_usage and last is not None:
            yield {"data": json.dumps({k: last[k] for k in ("id", "object", "created", "model") if k in last}
                                      | {"choices": [], "usage": last["usage"], "timings": last["timings"]})}
        self.finished = True
        yield {"data": "[DONE]"}


async def _answer(request: Any, body: Any, chat: bool) -> Any:
    state: _State = request.app.state.ngramspec
    state.check_model(body.model)
    kwargs = _kwargs(body, chat, state)
    state.enter()
    if body.stream:
        return _StreamAnswer(state, body, kwargs, chat)  # leaves the queue when it ends
    try:
        async with contextlib.asynccontextmanager(llama_app.get_llama_proxy)() as proxy:
            try:
                # Our SpeculativeLlama (the proxy's), typed by llama-cpp-python as its Llama.
                llama: Any = llama_app.prepare_request_resources(body, proxy, body.model, kwargs)
                if await request.is_disconnected():
                    raise HTTPException(status_code=status.HTTP_400_BAD_REQUEST, detail="Client closed request")
                call = llama.create_chat_completion if chat else llama.create_completion
                out: Dict[str, Any] = await run_in_threadpool(call, **kwargs)  # not streamed: one dict
            except Exception as exc:
                raise _as_client_error(exc, body) from exc
        return JSONResponse(_finish(out, out.get("speculative")))
    finally:
        state.leave()


#: The model for a route, as llama-cpp-python's routes get it (its locks included).
_PROXY = Depends(llama_app.get_llama_proxy)


def _router() -> Any:
    router = APIRouter(route_class=_route_class())
    auth = [Depends(llama_app.authenticate)]

    @router.post("/v1/completions", summary="Completion", dependencies=auth, tags=[llama_app.openai_v1_tag])
    # llama-cpp-python serves its completions here too (GitHub Copilot's path); ours replaces both.
    @router.post("/v1/engines/copilot-codex/completions", include_in_schema=False, dependencies=auth)
    async def create_completion(request: Request, body: CompletionRequest) -> Any:
        return await _answer(request, body, chat=False)

    @router.post("/v1/chat/completions", summary="Chat", dependencies=auth, tags=[llama_app.openai_v1_tag])
    async def create_chat_completion(request: Request, body: ChatCompletionRequest) -> Any:
        return await _answer(request, body, chat=True)

    @router.post("/extras/detokenize", summary="Detokenize", dependencies=auth, tags=[llama_app.extras_tag])
    async def detokenize(body: DetokenizeInputRequest,
                         proxy: Any = _PROXY) -> DetokenizeInputResponse:
        # llama-cpp-python's route passes the ids to llama.cpp unchecked: an id
        # outside the vocabulary aborted the whole server (std::out_of_range). The
        # wrapper's detokenize checks them.
        try:
            data = proxy(body.model).detokenize(body.tokens)
        except ValueError as e:
            raise ClientError(400, str(e), param="tokens", code="invalid_token") from None
        return DetokenizeInputResponse(text=data.decode("utf-8", errors="replace"))

    @router.get("/health", summary="Health", tags=["Extras"])
    async def health(request: Request) -> Any:
        state: _State = request.app.state.ngramspec
        return {"status": "ok", "model": state.proxy.alias, "pending": state.pending,
                "max_queue": state.options.max_queue, "served": state.served, "cancelled_streams": state.cancelled,
                "exact": state.options.exact}

    return router


_REPLACED = {"/v1/completions", "/v1/engines/copilot-codex/completions", "/v1/chat/completions",
             "/extras/detokenize"}


def _reroute(router: APIRouter) -> None:
    """llama-cpp-python's router (a module global that create_app includes): its
    completion routes removed (ours replace them), the others (/v1/models,
    /v1/embeddings, /extras/*) kept, with their endpoints, but given our route class
    so that a malformed body is a 400 there too (theirs answers it with a 500)."""
    fresh = APIRouter(route_class=_route_class())
    for r in router.routes:
        if not isinstance(r, APIRoute) or r.path in _REPLACED:
            continue
        fresh.add_api_route(r.path, r.endpoint, methods=sorted(r.methods or ()), dependencies=list(r.dependencies),
                            summary=r.summary, tags=r.tags, response_model=r.response_model,
                            responses=r.responses, include_in_schema=r.include_in_schema, name=r.name)
    router.routes[:] = fresh.routes


def create_app(server_settings: Any, model_settings: Any, options: Optional[ServeOptions] = None,
               names: Sequence[str] = ()) -> Any:
    """llama-cpp-python's app for one model, answering through ``SpeculativeLlama``.
    ``names``: extra model names a request may use (besides the alias and the path)."""
    options = options or ServeOptions()
    if os.environ.get("CONFIG_FILE"):
        raise UserError("CONFIG_FILE (llama-cpp-python's multi-model config) is not supported by ngramspec serve")
    _reroute(llama_app.router)
    app = llama_app.create_app(server_settings=server_settings, model_settings=[model_settings])
    loaded = llama_app._llama_proxy
    assert loaded is not None  # create_app has set it
    llm = loaded()  # the Llama its LlamaProxy loaded with every setting applied
    wrapper = _wrap(llm, options)
    if options.memory is not None:
        _save_at_shutdown(app, wrapper.engine.memory, options.memory)
    alias = model_settings.model_alias or model_settings.model
    proxy = SpeculativeProxy(wrapper, alias, [alias, model_settings.model, os.path.basename(model_settings.model),
                                              *names])
    # What get_llama_proxy hands to every route, ours and theirs: a stand-in for its
    # LlamaProxy (the same calls), not a subclass.
    llama_app._llama_proxy = proxy  # type: ignore[assignment]
    app.state.ngramspec = _State(proxy, options, server_settings)
    app.include_router(_router())

    async def http_error(request: Any, exc: Any) -> Any:
        return _error_json(_http_error(exc))

    async def validation_error(request: Any, exc: Any) -> Any:
        return _error_json(_validation_error(exc))

    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    return app


def _wrap(llm: Any, options: ServeOptions) -> Any:
    """The server's one wrapper (one engine, holding the ``--memory`` if given),
    warmed up unless ``--warmup false``."""
    memory, path = None, options.memory
    if path is not None:
        # One memory for every request of this server: sharing across its users is
        # what `--memory` asks for (README, Memory). Saved atomically at shutdown.
        from ngramspec.memory.store import Memory

        memory = Memory.load(path) if os.path.exists(path) else Memory()
    # The engine binds the memory to llm's tokenizer as it is built, before anything is
    # measured: a memory of another tokenizer fails startup here (TokenizerMismatchError,
    # one line from main).
    wrapper = wrap(llm, memory=memory, **options.engine_options())
    if options.warmup:
        _warm_up(wrapper)
    return wrapper


class _MemorySaver:
    """Saves a server's ``--memory`` once the server stops, however it stops: at
    the app's lifespan shutdown, which uvicorn runs on SIGINT and SIGTERM alike
    before it re-raises the signal (after which ``atexit`` never runs: a plain
    ``kill``, systemd or ``docker stop`` lost the memory), and at interpreter exit
    for an app that was built but never served."""

    def __init__(self, memory: Any, path: str) -> None:
        self.memory, self.path, self.saved = memory, path, False

    def save(self) -> None:
        if self.saved:
            return
        self.saved = True
        try:
            self.memory.save(self.path)
            print(f"ngramspec: memory saved to {self.path}", file=sys.stderr, flush=True)
        except Exception as e:  # a full disk must not hide the shutdown; say so
            print(f"ngramspec: could not save the memory to {self.path}: {type(e).__name__}: {e}",
                  file=sys.stderr, flush=True)


def _save_at_shutdown(app: Any, memory: Any, path: str) -> None:
    import atexit

    saver = _MemorySaver(memory, path)
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(a: Any) -> Any:
        async with inner(a) as state:
            try:
                yield state
            finally:
                saver.save()

    app.router.lifespan_context = lifespan
    atexit.register(saver.save)


def _warm_up(wrapper: Any) -> None:
    """Before the server listens: the engine's first-use work (the verify plan: the
    batch-invariance check and cost curve, unless cached on disk) and a first decode
    on the Llama itself ("Hello", evaluated: the model's weights paged in), so that
    neither is paid by the first request; then the context is cleared, so the first
    request starts cold, as on a fresh Llama. Nothing is generated through the
    engine, so the warm-up's text never reaches a ``--memory``: no second wrapper."""
    t0 = time.perf_counter()
    llm = wrapper.llm
    try:
        wrapper.engine.prepare()
        llm.eval(llm.tokenize(b"Hello"))
    except Exception as e:  # the requests will say what is wrong; the server still starts
        print(f"ngramspec: warm-up failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    llm.reset()
    print(f"ngramspec: warmed up in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------
# Command line

def build_parser() -> argparse.ArgumentParser:
    """llama-cpp-python server's arguments (``python -m llama_cpp.server``), then ours."""
    parser = argparse.ArgumentParser(
        prog="ngramspec serve", allow_abbrev=False,   # as the CLI's: no option stands for another
        description="OpenAI-compatible server (llama-cpp-python's) with exact n-gram speculative decoding. "
                    "Takes the settings of `python -m llama_cpp.server`, spelled the same way; --model also "
                    "takes a name from ngramspec.models.")
    add_args_from_model(parser, Settings)
    # Their help prints llama-cpp-python's defaults; ours differ (settings_from_args).
    for action in parser._actions:
        if action.dest == "logits_all":
            action.help = ("Whether to keep the logits of every position (default: False here: the engine asks "
                           "for logits only on the rows it verifies)")
        elif action.dest == "interrupt_requests":
            action.help = ("Whether a waiting request cuts a running stream short (default: False here)")
    ours = parser.add_argument_group("ngramspec")
    ours.add_argument("--exact", dest="exact", type=_parse_bool_arg, default=True,
                      help="verify only with bit-exact batch sizes, so greedy text equals plain decoding "
                           "(default: true; false = fast mode)")
    ours.add_argument("--max_draft", dest="max_draft", type=int, default=None,
                      help="longest draft per verify pass (default: the engine's)")
    ours.add_argument("--max_queue", dest="max_queue", type=int, default=DEFAULT_MAX_QUEUE,
                      help=f"completion requests running or waiting; more get 503 (default: {DEFAULT_MAX_QUEUE})")
    ours.add_argument("--warmup", dest="warmup", type=_parse_bool_arg, default=True,
                      help="before listening, build the engine's verify plan and decode a first token, so the "
                           "engine's first-use measurements (batch invariance, cost curve; cached on disk) are "
                           "not paid by the first request (default: true)")
    ours.add_argument("--memory", dest="memory", default=None, metavar="FILE",
                      help="a Memory of earlier requests shared by every request of this server: loaded from FILE "
                           "if it exists, saved there when the server stops (SIGINT or SIGTERM) (README, Memory)")
    return parser


def settings_from_args(args: argparse.Namespace) -> Tuple[Any, Any, ServeOptions, List[str]]:
    if not args.model:
        raise UserError("--model is required: a GGUF path or one of " + ", ".join(models.MODELS))
    if args.max_queue < 1:
        raise UserError("--max_queue must be >= 1")
    if args.max_draft is not None and args.max_draft < 0:
        raise UserError("--max_draft must be >= 0")
    given = args.model
    resolve = getattr(models, "resolve_model_path", None)
    if resolve is not None:
        path = resolve(given)
    elif given in models.MODELS:
        path = str(models.fetch(given))
    elif os.path.isfile(given):
        path = given
    else:
        raise UserError(f"model {given!r} is neither a file nor one of: {', '.join(models.MODELS)}")
    args.model = path
    if args.model_alias is None:
        args.model_alias = given
    if args.logits_all is None:
        args.logits_all = False
    if args.interrupt_requests is None:
        args.interrupt_requests = False
    try:
        server_settings = parse_model_from_args(ServerSettings, args)
        model_settings = parse_model_from_args(ModelSettings, args)
    except Exception as e:  # pydantic's ValidationError: a setting out of range
        errors = getattr(e, "errors", None)
        if callable(errors):
            raise UserError("; ".join(f"--{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in errors())) from None
        raise UserError(str(e)) from None
    if not 0 <= server_settings.port <= 65535:   # uvicorn would bind some other port and say it had this one
        raise UserError(f"--port must be in 0..65535, got {server_settings.port}")
    if args.memory is not None:
        from ngramspec.memory.store import Memory, check_save_path

        try:   # saved there at shutdown: refused now, before the model loads
            check_save_path(args.memory)
        except (ValueError, IsADirectoryError) as e:
            raise UserError(f"--memory: {e}") from None
        if os.path.exists(args.memory):
            try:
                Memory.load(args.memory)
            except ValueError as e:
                raise UserError(f"--memory: {e}") from None
        elif not os.path.isdir(os.path.dirname(os.path.abspath(args.memory))):
            raise UserError(f"--memory {args.memory!r}: its directory does not exist")
    options = ServeOptions(exact=args.exact, max_draft=args.max_draft, max_queue=args.max_queue,
                           warmup=args.warmup, memory=args.memory)
    return server_settings, model_settings, options, [given]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``ngramspec serve ARGS``: build the app and run it with uvicorn until stopped."""
    from ngramspec.models import ModelFetchError

    args = build_parser().parse_args(argv)
    try:
        server_settings, model_settings, options, names = settings_from_args(args)
        app = create_app(server_settings, model_settings, options, names)
    except (UserError, ValueError, ModelFetchError, FileNotFoundError) as e:
        print(f"ngramspec: error: {e}", file=sys.stderr)
        return 2
    uvicorn.run(app, host=os.getenv("HOST", server_settings.host), port=int(os.getenv("PORT", server_settings.port)),
                ssl_keyfile=server_settings.ssl_keyfile, ssl_certfile=server_settings.ssl_certfile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
