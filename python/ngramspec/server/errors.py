"""Errors, OpenAI-shaped: ``{"error": {"message", "type", "param", "code"}}``, with a
4xx status for anything the request did wrong, and the route class that answers so."""
from __future__ import annotations

import logging
import os
import re
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import jinja2
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from llama_cpp import llama_chat_format
from llama_cpp.server.errors import RouteErrorHandler
from starlette.exceptions import HTTPException as StarletteHTTPException

from ngramspec.errors import NgramspecError

_log = logging.getLogger(__name__)

__all__ = ["ClientError", "SpeculativeRoute", "as_client_error", "error_json", "http_error", "internal_error",
           "raised_by_a_template", "raised_by_ngramspec", "template_refusal", "validation_error"]


class ClientError(NgramspecError):
    """A request the server refuses: an HTTP status and an OpenAI error object."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error = {"message": message, "type": type, "param": param, "code": code}
        self.headers = dict(headers or {})   # kept on the answer: a 405's Allow, a 401's WWW-Authenticate


#: Where ngramspec's own code lives: an exception raised there carries a message written
#: for the user; one raised by Python itself or another library may not.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LLAMA_CHAT_FORMAT = os.path.abspath(llama_chat_format.__file__)


def _frames(exc: BaseException) -> list[Any]:
    return [frame for frame, _ in traceback.walk_tb(exc.__traceback__)]


def raised_by_ngramspec(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by ngramspec's own code (its message is written for users)."""
    frames = _frames(exc)
    return bool(frames) and os.path.abspath(frames[-1].f_code.co_filename).startswith(_PACKAGE_DIR + os.sep)


def raised_by_a_template(exc: BaseException) -> bool:
    """Whether ``exc`` came out of rendering a chat template (jinja2's frames, or the
    template's own ``raise_exception``)."""
    if isinstance(exc, jinja2.TemplateError):
        return True
    return any(f.f_code.co_filename == "<template>" or f.f_code.co_name == "raise_exception"
               for f in _frames(exc))


def template_refusal(exc: BaseException, index: int | None) -> ClientError:
    """A 400 ``invalid_messages`` for messages the chat template cannot render. The
    text a template raises on purpose (``raise_exception``, "roles must alternate"...)
    is kept; a Python error inside the template is not shown."""
    where = f"messages[{index}]" if index is not None else "messages"
    said = [f for f in _frames(exc) if f.f_code.co_name == "raise_exception"
            and os.path.abspath(f.f_code.co_filename) == _LLAMA_CHAT_FORMAT]
    why = f": {exc}" if said else " (it failed on this message's fields: see the model's template)"
    return ClientError(400, f"{where}: the model's chat template cannot render this{why}", param="messages",
                       code="invalid_messages")


def _unknown_tool(match: re.Match[str]) -> ClientError:
    return ClientError(400, f"tool_choice names the function `{match.group(1)}`, which is not among the request's "
                            "tools", param="tool_choice", code="invalid_value")


#: llama-cpp-python's own refusals, by their text: what the request got wrong, as we say it.
_THEIR_REFUSALS: list[tuple[re.Pattern[str], Callable[[re.Match[str]], ClientError]]] = [
    (re.compile(r"Tool choice '(.*)' not found in tools"), _unknown_tool),
]


def as_client_error(exc: BaseException, body: Any = None) -> BaseException:
    """What the wrapper (or llama-cpp-python under it) raises for a bad request, as a
    4xx; anything else unchanged. A message reaches the client only when it was
    written for one (raised by ngramspec, or a refusal of llama-cpp-python's that we
    recognise and reword); never raw Python exception text."""
    if isinstance(exc, ClientError):
        return exc
    from ngramspec.rpc.errors import RpcError, RpcWorkerLostError

    if isinstance(exc, RpcError):   # a worker is down or was lost: not the request's fault, and temporary
        return ClientError(503, str(exc), type="server_error",
                           code="rpc_worker_lost" if isinstance(exc, RpcWorkerLostError) else "rpc_worker_unavailable")
    ours = raised_by_ngramspec(exc)
    if isinstance(exc, NotImplementedError):
        message = str(exc) if ours else "llama-cpp-python does not implement what this request asks for"
        _log_refusal(exc, ours)
        return ClientError(400, message, code="unsupported_parameter")
    if raised_by_a_template(exc):
        return template_refusal(exc, None)
    if isinstance(exc, (ValueError, TypeError)):
        for pattern, formatter in RouteErrorHandler.pattern_and_formatters.items():
            match = pattern.search(str(exc))
            if match is not None and body is not None:
                status, err = formatter(body, match)
                return ClientError(status, **err)
        for pattern, refusal in _THEIR_REFUSALS:
            match = pattern.search(str(exc))
            if match is not None:
                return refusal(match)
        if ours:
            return ClientError(400, str(exc))
        _log_refusal(exc, ours)
        return ClientError(400, "llama-cpp-python could not take this request's arguments (the server's log "
                                "says which)", code="invalid_value")
    return exc


def _log_refusal(exc: BaseException, ours: bool) -> None:
    """One line on the server's log for a refusal whose own text the client does not get."""
    if not ours:
        _log.warning("refused a request: %s: %s", type(exc).__name__, exc)


def _where(loc: Any) -> str:
    """A field's place as a client names it (``messages[2].content``): pydantic's
    location without ``body`` and without the names it gives the branches of a union
    (``list[union[TextPart,ImagePart]]``, ``TextPart``)."""
    out = ""
    for x in loc:
        if x == "body":
            continue
        if isinstance(x, int):
            out += f"[{x}]"
        elif not any(c in str(x) for c in "[(") and not str(x)[:1].isupper():
            out += f".{x}" if out else str(x)
    return out or "body"


def validation_error(exc: Any) -> ClientError:
    errors = exc.errors()
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        return ClientError(400, f"The request body is not valid JSON: {first.get('msg', '')}",
                           code="invalid_json")
    parts: list[str] = []
    for e in errors[:5]:
        part = f"{_where(e.get('loc', ()))}: {e.get('msg', 'invalid')}"
        if part not in parts:
            parts.append(part)
    top = [str(x) for x in first.get("loc", ()) if x != "body"][:1]
    if top == ["messages"]:
        return ClientError(400, "Invalid messages: " + "; ".join(parts), param="messages", code="invalid_messages")
    param = _where(first.get("loc", ()))
    return ClientError(400, "Invalid request: " + "; ".join(parts), param=None if param == "body" else param,
                       code="invalid_value")


def error_json(err: ClientError) -> Any:
    headers = dict(err.headers)
    if err.status == 503:
        headers.setdefault("Retry-After", "1")
    return JSONResponse({"error": err.error}, status_code=err.status, headers=headers or None)


def http_error(exc: Any) -> ClientError:
    return ClientError(exc.status_code, str(exc.detail),
                       type="invalid_request_error" if exc.status_code < 500 else "server_error",
                       headers=getattr(exc, "headers", None))


def internal_error(exc: BaseException) -> ClientError:
    """An exception the request did not cause: logged with its traceback, answered
    with a 500 that says so (its text is for the log, not the client)."""
    traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    return ClientError(500, "The server failed on this request (a fault of its own; its log has the details)",
                       type="internal_server_error")


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
                return error_json(validation_error(exc))
            except ClientError as exc:
                return error_json(exc)
            except StarletteHTTPException as exc:
                return error_json(http_error(exc))
            except Exception as exc:  # a fault of ours: 500, and the server lives on
                err = as_client_error(exc) if _is_rpc_error(exc) else None   # --rpc: a worker down is a 503
                return error_json(err if isinstance(err, ClientError) else internal_error(exc))
            response.headers["openai-processing-ms"] = f"{int((time.perf_counter() - start) * 1000)}"
            return response

        return handler


def _is_rpc_error(exc: BaseException) -> bool:
    from ngramspec.rpc.errors import RpcError

    return isinstance(exc, RpcError)
