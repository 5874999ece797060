"""A streamed completion: the model lock is taken before the response starts, so a
request that fails (prompt too long, unsupported parameter) gets a 4xx JSON error,
not a broken stream; a client that goes away mid-stream has its generator closed
under the lock, so the next request finds the context coherent."""
from __future__ import annotations

import json
from typing import Any

import anyio
from fastapi.responses import Response
from llama_cpp.server.app import prepare_request_resources
from sse_starlette.sse import EventSourceResponse
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request as StarletteRequest

from ngramspec.server.choices import numbered_chunks
from ngramspec.server.errors import ClientError, error_json, internal_error
from ngramspec.server.response_fields import decoding_headers, finish_response
from ngramspec.server.state import ServerState

__all__ = ["END", "StreamAnswer", "client_error"]

#: What ``next(iterator, END)`` returns once a stream has no chunk left.
END = object()


def _start(call: Any, kwargs: dict[str, Any], n: int) -> tuple[Any, Any]:
    """Start a streamed generation (n choices, one after another) and take its first
    chunk (so that a request that fails, fails before the response starts)."""
    iterator = numbered_chunks(call, kwargs, n, iter(call(**kwargs)))
    return iterator, next(iterator, END)


def _close(iterator: Any) -> None:
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


def client_error(exc: Exception, state: ServerState, body: Any, kwargs: dict[str, Any]) -> ClientError:
    """The request's fault as a 4xx, or ours as a logged 500."""
    err = state.refusal(exc, body, kwargs)
    if not isinstance(err, ClientError):
        err = internal_error(exc)
    return err


class StreamAnswer(Response):
    """The ASGI response of a streamed request. It waits for the model lock in
    the request's own task (the app's FIFO ``ServerState.model``), starts
    the generation, then either answers with a JSON error or streams SSE through
    sse-starlette; the generator is closed before the lock is released, also when
    the client has gone away."""

    def __init__(self, state: ServerState, body: Any, kwargs: dict[str, Any], chat: bool, n: int = 1) -> None:
        super().__init__()
        # request_body, not body: Response.body is the (empty) response body
        self.state, self.request_body, self.kwargs, self.chat, self.n = state, body, kwargs, chat, n
        self.finished = False  # the generation ran to its end

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            async with self.state.model() as proxy:
                try:
                    llama = prepare_request_resources(self.request_body, proxy,  # type: ignore[arg-type]
                                                      self.request_body.model, self.kwargs)
                    if await StarletteRequest(scope, receive).is_disconnected():
                        return
                    call = llama.create_chat_completion if self.chat else llama.create_completion
                    iterator, first = await run_in_threadpool(_start, call, self.kwargs, self.n)
                except Exception as exc:
                    err = self._refusal(exc)
                    await error_json(err)(scope, receive, send)
                    return
                try:
                    events = self._events(llama, iterator, first)
                    # llama-cpp-python's factory is typed as returning bytes; it passes it to
                    # sse-starlette (which wants a ServerSentEvent) the same way.
                    ping = self.state.ping
                    headers = decoding_headers(getattr(llama, "last_plain_reason", None))
                    await EventSourceResponse(events, sep="\n", headers=headers,
                                              ping_message_factory=ping)(  # type: ignore[arg-type]
                        scope, receive, send)
                finally:
                    if not self.finished:
                        self.state.cancelled += 1
                    with anyio.CancelScope(shield=True):
                        await run_in_threadpool(_close, iterator)
        finally:
            self.state.leave()

    def _refusal(self, exc: Exception) -> ClientError:
        """What failed the request before its stream started, as the JSON error it gets."""
        return client_error(exc, self.state, self.request_body, self.kwargs)

    async def _events(self, llama: Any, iterator: Any, chunk: Any) -> Any:
        body = self.request_body
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        last: dict[str, Any] | None = None
        completion_tokens = 0   # over every choice
        while chunk is not END:
            choices = chunk.get("choices") or []
            if choices and choices[0].get("finish_reason") is not None:
                stats = chunk.get("speculative") or getattr(llama, "last_speculative", None)
                last = finish_response(chunk, stats)
                completion_tokens += int(last["usage"].get("completion_tokens") or 0)
            yield {"data": json.dumps(chunk)}
            if self.state.interrupt and self.state.someone_waits():
                yield {"data": "[DONE]"}
                return
            try:
                chunk = await run_in_threadpool(next, iterator, END)
            except Exception as exc:  # mid-stream: the status is sent already; an error event, then the end
                err = client_error(exc, self.state, self.request_body, self.kwargs)
                self.finished = True
                yield {"data": json.dumps({"error": err.error})}
                return
        if include_usage and last is not None:
            usage = {**last["usage"], "completion_tokens": completion_tokens,
                     "total_tokens": int(last["usage"].get("prompt_tokens") or 0) + completion_tokens}
            yield {"data": json.dumps({k: last[k] for k in ("id", "object", "created", "model") if k in last}
                                      | {"choices": [], "usage": usage, "timings": last["timings"]})}
        self.finished = True
        yield {"data": "[DONE]"}
