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
# FastAPI reads the routes' annotations at run time, from this module's globals:
# the request and response types they name are imported here, not under TYPE_CHECKING.
from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from llama_cpp.server import app as llama_app
from llama_cpp.server.types import DetokenizeInputRequest, DetokenizeInputResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

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
from ngramspec.server.model import SpeculativeProxy, build_wrapper, short_model_id
from ngramspec.server.openapi import publish_error_responses
from ngramspec.server.response_fields import decoding_headers, finish_response, plain_reason_of
from ngramspec.server.rpc_model import RpcModel
from ngramspec.server.settings import ServeOptions
from ngramspec.server.state import ServerState
from ngramspec.server.streaming import StreamAnswer
from ngramspec.server.types import NOT_KWARGS, ChatCompletionRequest, CompletionRequest

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


async def _answer(request: Any, body: Any, chat: bool) -> Any:
    state: ServerState = request.app.state.ngramspec
    state.check_model(body.model)
    n = n_choices(body)
    kwargs = _kwargs(body, chat, state)
    state.enter()
    if body.stream:
        return StreamAnswer(state, body, kwargs, chat, n)  # leaves the queue when it ends
    try:
        async with contextlib.asynccontextmanager(llama_app.get_llama_proxy)() as proxy:
            try:
                # Our SpeculativeLlama (the proxy's), typed by llama-cpp-python as its Llama.
                llama: Any = llama_app.prepare_request_resources(body, proxy, body.model, kwargs)
                if await request.is_disconnected():
                    raise HTTPException(status_code=status.HTTP_400_BAD_REQUEST, detail="Client closed request")
                call = llama.create_chat_completion if chat else llama.create_completion
                outs = [await run_in_threadpool(call, **choice_kwargs(kwargs, i)) for i in range(n)]
                out: dict[str, Any] = merged_response(outs)  # not streamed: dicts
            except Exception as exc:
                raise state.refusal(exc, body, kwargs) from exc
        out = finish_response(out, out.get("speculative"))
        return JSONResponse(out, headers=decoding_headers(plain_reason_of(out["speculative"])))
    finally:
        state.leave()


#: The model for a route, as llama-cpp-python's routes get it (its locks included).
_PROXY = Depends(llama_app.get_llama_proxy)

#: llama-cpp-python's completion routes as it declares them, read before ours replace
#: them: their documented responses (JSON, or SSE when stream=True) are ours too.
_THEIRS = {r.path: r for r in llama_app.router.routes if isinstance(r, APIRoute)}


def _documented(path: str) -> dict[str, Any]:
    theirs = _THEIRS.get(path)
    if theirs is None:
        return {}
    return {"response_model": theirs.response_model, "responses": theirs.responses}


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


def _reroute(router: APIRouter) -> None:
    """llama-cpp-python's router (a module global that create_app includes): its
    completion routes removed (ours replace them), the others (/v1/models,
    /v1/embeddings, /extras/*) kept, with their endpoints, but given our route class
    so that a malformed body is a 400 there too (theirs answers it with a 500)."""
    fresh = APIRouter(route_class=SpeculativeRoute)
    for r in router.routes:
        if not isinstance(r, APIRoute) or r.path in _REPLACED:
            continue
        endpoint = _embeddings_if_enabled(r.endpoint) if r.path == "/v1/embeddings" else r.endpoint
        fresh.add_api_route(r.path, endpoint, methods=sorted(r.methods or ()), dependencies=list(r.dependencies),
                            summary=r.summary, tags=r.tags, response_model=r.response_model,
                            responses=r.responses, include_in_schema=r.include_in_schema, name=r.name)
    router.routes[:] = fresh.routes


def _embeddings_if_enabled(endpoint: Any) -> Any:
    """llama-cpp-python's /v1/embeddings, answering 400 when the model was not loaded
    with ``--embedding true``: llama-cpp-python's ``create_embedding`` raises a
    RuntimeError there, which its route answered with a 500."""

    @functools.wraps(endpoint)  # the same signature: FastAPI resolves the same body and dependencies
    async def create_embedding(*args: Any, **kwargs: Any) -> Any:
        proxy: SpeculativeProxy = kwargs["llama_proxy"]   # create_app's stand-in, for every route
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

    def rebuild(llm: Any, old: Any) -> Any:
        return build_wrapper(llm, options, memory=old.engine.memory)

    return RpcModel(options.rpc, lambda: LlamaProxy.load_llama_from_model_settings(model_settings), rebuild)


def create_app(server_settings: Any, model_settings: Any, options: ServeOptions | None = None,
               names: Sequence[str] = ()) -> Any:
    """llama-cpp-python's app for one model, answering through ``SpeculativeLlama``.
    ``names``: extra model names a request may use under ``--strict_model_names``
    (besides the alias, the path, its file name and stem); without it, any name is
    this model."""
    options = options or ServeOptions()
    if os.environ.get("CONFIG_FILE"):
        raise UserError("CONFIG_FILE (llama-cpp-python's multi-model config) is not supported by ngramspec serve")
    _reroute(llama_app.router)

    def create() -> Any:
        return llama_app.create_app(server_settings=server_settings, model_settings=[model_settings])

    def loaded_llama(_: Any) -> Any:
        loaded = llama_app._llama_proxy
        assert loaded is not None  # create_app has set it
        return loaded()  # the Llama its LlamaProxy loaded with every setting applied

    rpc_model = _rpc_model(model_settings, options)
    app = create() if rpc_model is None else rpc_model.first(create, loaded_llama)
    llm = loaded_llama(app)
    wrapper = build_wrapper(llm, options)
    if options.memory is not None:
        save_at_shutdown(app, wrapper.engine.memory, options.memory)
    alias = model_settings.model_alias or short_model_id(model_settings.model)
    proxy = SpeculativeProxy(wrapper, alias, [alias, model_settings.model, os.path.basename(model_settings.model),
                                              short_model_id(model_settings.model), *names], rpc_model)
    # What get_llama_proxy hands to every route, ours and theirs: a stand-in for its
    # LlamaProxy (the same calls), not a subclass.
    llama_app._llama_proxy = proxy  # type: ignore[assignment]
    app.state.ngramspec = ServerState(proxy, options, server_settings)
    app.include_router(_router())

    async def on_http_error(request: Any, exc: Any) -> Any:
        return error_json(http_error(exc))

    async def on_validation_error(request: Any, exc: Any) -> Any:
        return error_json(validation_error(exc))

    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    publish_error_responses(app, secured=server_settings.api_key is not None)
    return app
