"""``ngramspec serve``: llama-cpp-python's OpenAI-compatible server, answering
through ngramspec's speculative wrapper.

One job: build a FastAPI app for one model, as llama-cpp-python's server builds
its own (``llama_cpp.server.app``, from the ``llama-cpp-python[server]`` extras),
whose completion routes answer through ``SpeculativeLlama``. Each app owns its
state (``app.state.ngramspec``: the model, its locks, the queue): nothing is written
into llama-cpp-python's module, so two apps in one process serve their own models.

What is llama-cpp-python's, unchanged: the settings and their command-line spelling
(``--model``, ``--host``, ``--port``, ``--n_ctx``, ``--n_threads``, ``--api_key``...,
``llama_cpp.server.settings``), the model loading
(``LlamaProxy.load_llama_from_model_settings``), the middleware, CORS, the API-key
check (``authenticate``), the endpoints of ``/v1/models``, ``/v1/embeddings`` and
``/extras/*`` (added to our router one by one, their model and settings given by
this app through FastAPI's ``dependency_overrides``), its request types (subclassed
here), its one-at-a-time double lock (kept per app), its request preparation
(``prepare_request_resources``) and its SSE (sse-starlette's ``EventSourceResponse``).

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
(queued requests wait, they do not cut a running stream short). Requests' fields
keep llama-cpp-python's defaults (``repeat_penalty`` 1.1, ``temperature`` 0.8...).
"""
# FastAPI reads the routes' annotations at run time, from this module's globals:
# the request and response types they name are imported here, not under TYPE_CHECKING.
from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import llama_cpp
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.middleware import Middleware
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from llama_cpp.server import app as llama_app
from llama_cpp.server.types import DetokenizeInputRequest, DetokenizeInputResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette_context.middleware import RawContextMiddleware
from starlette_context.plugins import RequestIdPlugin  # type: ignore[attr-defined]

from ngramspec.errors import UserError
from ngramspec.server.choices import choice_kwargs, merged_response, n_choices
from ngramspec.server.errors import (
    ClientError,
    SpeculativeRoute,
    error_json,
    http_error,
    validation_error,
)
from ngramspec.server.memory_saver import save_at_shutdown
from ngramspec.server.messages import llama_response_format
from ngramspec.server.openapi import publish_error_responses
from ngramspec.server.response_fields import decoding_headers, finish_response, plain_reason_of
from ngramspec.server.responses import ResponsesAnswer
from ngramspec.server.responses_types import ResponseObject, ResponsesRequest
from ngramspec.server.rpc_model import RpcModel
from ngramspec.server.served_model import SpeculativeProxy, build_wrapper, short_model_id
from ngramspec.server.settings import ServeOptions
from ngramspec.server.state import ServerState
from ngramspec.server.streaming import StreamAnswer
from ngramspec.server.types import NOT_KWARGS, ChatCompletionRequest, CompletionRequest

if TYPE_CHECKING:
    from llama_cpp import Llama

__all__ = ["create_app"]


def _kwargs(body: Any, chat: bool, state: ServerState) -> dict[str, Any]:
    """The request as keyword arguments of the wrapper's create_(chat_)completion."""
    if not chat and isinstance(body.prompt, list):
        if len(body.prompt) > 1:
            raise ClientError(400, "a batch of prompts is not supported: send one prompt per request",
                              param="prompt", code="unsupported_parameter")
        body.prompt = body.prompt[0] if body.prompt else ""
    kwargs: dict[str, Any] = body.model_dump(exclude=NOT_KWARGS)
    for name in ("presence_penalty", "frequency_penalty"):
        if kwargs.get(name) is None:
            kwargs[name] = 0.0
    kwargs["model"] = body.model if body.model is not None else state.proxy.alias
    if chat:
        kwargs["messages"] = state.chat.prepare(body.messages)
        kwargs["response_format"] = llama_response_format(body.response_format)
        if kwargs.get("max_tokens") is None:
            kwargs["max_tokens"] = body.max_completion_tokens
    if body.prediction is not None:
        kwargs["prediction"] = body.prediction.model_dump()  # OpenAI's shape, checked by the request type
    return kwargs


async def _answer(request: Any, body: Any, chat: bool, responses: ResponsesAnswer | None = None) -> Any:
    """``responses``: a /v1/responses request, whose chat request ``body`` is: the
    answer is then in the Responses API's shape (server/responses.py)."""
    state: ServerState = request.app.state.ngramspec
    state.check_model(body.model)
    n = n_choices(body)
    kwargs = _kwargs(body, chat, state)
    state.enter()
    if body.stream:  # leaves the queue when it ends
        if responses is not None:
            return responses.stream(state, body, kwargs)
        return StreamAnswer(state, body, kwargs, chat, n)
    try:
        async with state.model() as proxy:
            try:
                # Our SpeculativeLlama (the proxy's), typed by llama-cpp-python as its Llama.
                llama: Any = llama_app.prepare_request_resources(body, proxy,  # type: ignore[arg-type]
                                                                 body.model, kwargs)
                if await request.is_disconnected():
                    raise HTTPException(status_code=status.HTTP_400_BAD_REQUEST, detail="Client closed request")
                call = llama.create_chat_completion if chat else llama.create_completion
                outs = [await run_in_threadpool(call, **choice_kwargs(kwargs, i)) for i in range(n)]
                out: dict[str, Any] = merged_response(outs)  # not streamed: dicts
            except Exception as exc:
                raise state.refusal(exc, body, kwargs) from exc
        out = finish_response(out, out.get("speculative"))
        headers = decoding_headers(plain_reason_of(out["speculative"]))
        return JSONResponse(out if responses is None else responses.json(out), headers=headers)
    finally:
        state.leave()


async def _model(request: Request) -> Any:
    """The model for a route, held until the response is made: this app's, in
    arrival order. It stands in for llama-cpp-python's ``get_llama_proxy`` in its
    routes too (``dependency_overrides``)."""
    state: ServerState = request.app.state.ngramspec
    async with state.model() as proxy:
        yield proxy


_PROXY = Depends(_model)

#: llama-cpp-python's completion routes as it declares them: their documented responses
#: (JSON, or SSE when stream=True) are ours too.
_THEIRS = {r.path: r for r in llama_app.router.routes if isinstance(r, APIRoute)}


def _documented(path: str) -> dict[str, Any]:
    theirs = _THEIRS.get(path)
    if theirs is None:
        return {}
    return {"response_model": theirs.response_model, "responses": theirs.responses}


#: A route's 200 as a stream of server-sent events too (with "stream": true).
_STREAMED: dict[int | str, dict[str, Any]] = {200: {"content": {"text/event-stream": {}}}}


def _router() -> Any:
    router = APIRouter(route_class=SpeculativeRoute)
    auth = [Depends(llama_app.authenticate)]

    @router.post("/v1/completions", summary="Completion", dependencies=auth, tags=[llama_app.openai_v1_tag],
                 **_documented("/v1/completions"))
    # llama-cpp-python serves its completions here too (GitHub Copilot's path); ours replaces both.
    @router.post("/v1/engines/copilot-codex/completions", include_in_schema=False, dependencies=auth)
    async def create_completion(request: Request, body: CompletionRequest) -> Any:
        return await _answer(request, body, chat=False)

    @router.post("/v1/chat/completions", summary="Chat", dependencies=auth, tags=[llama_app.openai_v1_tag],
                 **_documented("/v1/chat/completions"))
    async def create_chat_completion(request: Request, body: ChatCompletionRequest) -> Any:
        return await _answer(request, body, chat=True)

    @router.post("/v1/responses", summary="Responses", dependencies=auth, tags=[llama_app.openai_v1_tag],
                 response_model=ResponseObject, responses=_STREAMED)
    async def create_response(request: Request, body: ResponsesRequest) -> Any:
        # OpenAI's Responses API, answered as the chat request it means (server/responses.py).
        answer = ResponsesAnswer(body)
        try:
            return await _answer(request, answer.chat, chat=True, responses=answer)
        except ClientError as exc:   # a refusal of the chat messages names the input they came from
            raise answer.reword(exc) from None

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
        state: ServerState = request.app.state.ngramspec
        out = {"status": "ok", "model": state.proxy.alias, "pending": state.pending,
               "max_queue": state.options.max_queue, "served": state.served, "cancelled_streams": state.cancelled,
               "exact": state.options.exact}
        if state.proxy.rpc_model is not None:
            out["rpc"] = {"workers": state.options.rpc, "reloads": state.proxy.rpc_model.reloads}
        return out

    return router


_REPLACED = {"/v1/completions", "/v1/engines/copilot-codex/completions", "/v1/chat/completions",
             "/extras/detokenize"}


def _their_routes() -> APIRouter:
    """llama-cpp-python's other routes (/v1/models, /v1/embeddings, /extras/*), their
    endpoints added one by one to a router of ours (theirs, a module global, is left
    as it is), with our route class so that a malformed body is a 400 there too
    (theirs answers it with a 500)."""
    router = APIRouter(route_class=SpeculativeRoute)
    for r in llama_app.router.routes:
        if not isinstance(r, APIRoute) or r.path in _REPLACED:
            continue
        endpoint = _embeddings_if_enabled(r.endpoint) if r.path == "/v1/embeddings" else r.endpoint
        router.add_api_route(r.path, endpoint, methods=sorted(r.methods or ()), dependencies=list(r.dependencies),
                             summary=r.summary, tags=r.tags, response_model=r.response_model,
                             responses=r.responses, include_in_schema=r.include_in_schema, name=r.name)
    return router


def _embeddings_if_enabled(endpoint: Any) -> Any:
    """llama-cpp-python's /v1/embeddings, answering 400 when the model was not loaded
    with ``--embedding true``: llama-cpp-python's ``create_embedding`` raises a
    RuntimeError there, which its route answered with a 500."""

    @functools.wraps(endpoint)  # the same signature: FastAPI resolves the same body and dependencies
    async def create_embedding(*args: Any, **kwargs: Any) -> Any:
        proxy: SpeculativeProxy = kwargs["llama_proxy"]   # this app's model (_model)
        if not proxy.wrapper.llm.context_params.embeddings:
            raise ClientError(400, "This server does not compute embeddings: its model was loaded without "
                                   "`--embedding true` (start `ngramspec serve` with it to use /v1/embeddings)",
                              code="embeddings_not_enabled")
        return await endpoint(*args, **kwargs)

    return create_embedding


def _rpc_model(model_settings: Any, options: ServeOptions) -> RpcModel | None:
    """With ``--rpc``: what loads the model onto the workers, and again after one was lost."""
    if not options.rpc:
        return None
    from llama_cpp.server.model import LlamaProxy

    from ngramspec.rpc.loading import with_rpc_defaults

    if model_settings.tensor_split is not None:
        with_rpc_defaults({"tensor_split": model_settings.tensor_split}, len(options.rpc.split(",")))

    def rebuild(llm: Llama, old: Any) -> Any:
        return build_wrapper(llm, options, memory=old.engine.memory)

    return RpcModel(options.rpc, functools.partial(LlamaProxy.load_llama_from_model_settings, model_settings),
                    rebuild)


def create_app(server_settings: Any, model_settings: Any, options: ServeOptions | None = None,
               names: Sequence[str] = ()) -> Any:
    """The app for one model, answering through ``SpeculativeLlama``.
    ``names``: extra model names a request may use under ``--strict_model_names``
    (besides the alias, the path, its file name and stem); without it, any name is
    this model."""
    from llama_cpp.server.model import LlamaProxy

    options = options or ServeOptions()
    if os.environ.get("CONFIG_FILE"):
        raise UserError("CONFIG_FILE (llama-cpp-python's multi-model config) is not supported by ngramspec serve")
    # The Llama with every model setting applied, as llama-cpp-python's server loads it.
    load = functools.partial(LlamaProxy.load_llama_from_model_settings, model_settings)
    rpc_model = _rpc_model(model_settings, options)
    llm = load() if rpc_model is None else rpc_model.first(load)
    wrapper = build_wrapper(llm, options)
    app = FastAPI(middleware=[Middleware(RawContextMiddleware, plugins=(RequestIdPlugin(),))],
                  title="ngramspec serve (llama.cpp Python API)", version=llama_cpp.__version__,
                  root_path=server_settings.root_path)
    app.add_middleware(CORSMiddleware, allow_origins=["*"], allow_credentials=True, allow_methods=["*"],
                       allow_headers=["*"])
    if options.memory is not None:
        save_at_shutdown(app, wrapper.engine.memory, options.memory)
    alias = model_settings.model_alias or short_model_id(model_settings.model)
    # A stand-in for llama-cpp-python's LlamaProxy (the same calls), not a subclass.
    proxy = SpeculativeProxy(wrapper, alias, [alias, model_settings.model, os.path.basename(model_settings.model),
                                              short_model_id(model_settings.model), *names], rpc_model)
    app.state.ngramspec = ServerState(proxy, options, server_settings)
    app.include_router(_router())
    app.include_router(_their_routes())
    # Their endpoints and their API-key check ask llama-cpp-python's module for the
    # model and the settings; this app answers for itself.
    app.dependency_overrides[llama_app.get_llama_proxy] = _model
    app.dependency_overrides[llama_app.get_server_settings] = lambda: server_settings

    async def on_http_error(request: Any, exc: Any) -> Any:
        return error_json(http_error(exc))

    async def on_validation_error(request: Any, exc: Any) -> Any:
        return error_json(validation_error(exc))

    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    publish_error_responses(app, secured=server_settings.api_key is not None)
    return app
