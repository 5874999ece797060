"""Errors, OpenAI-shaped: ``{"error": {"message", "type", "param", "code"}}``, with a
4xx status for anything the request did wrong, and the route class that answers so."""
from __future__ import annotations

import sys
import time
import traceback
from typing import Any

import jinja2
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from llama_cpp.server.errors import RouteErrorHandler
from starlette.exceptions import HTTPException as StarletteHTTPException

__all__ = ["ClientError", "SpeculativeRoute", "as_client_error", "error_json", "http_error",
           "internal_error", "validation_error"]


class ClientError(Exception):
    """A request the server refuses: an HTTP status and an OpenAI error object."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error = {"message": message, "type": type, "param": param, "code": code}
        self.headers = dict(headers or {})   # kept on the answer: a 405's Allow, a 401's WWW-Authenticate


def as_client_error(exc: BaseException, body: Any = None) -> BaseException:
    """What the wrapper raises for a bad request, as a 4xx; anything else unchanged."""
    if isinstance(exc, ClientError):
        return exc
    from ngramspec.rpc.errors import RpcError, RpcWorkerLost

    if isinstance(exc, RpcError):   # a worker is down or was lost: not the request's fault, and temporary
        return ClientError(503, str(exc), type="server_error",
                           code="rpc_worker_lost" if isinstance(exc, RpcWorkerLost) else "rpc_worker_unavailable")
    if isinstance(exc, NotImplementedError):
        sent = _fields_behind(str(exc), body)
        if sent:
            return ClientError(400, f"{', '.join(sent)}: not supported (llama-cpp-python's server turns "
                                    f"{'it' if len(sent) == 1 else 'them'} into what the wrapper refuses: {exc})",
                               param=sent[0], code="unsupported_parameter")
        return ClientError(400, str(exc), code="unsupported_parameter")
    if isinstance(exc, jinja2.TemplateError):
        # The model's chat template could not render the messages (an assistant
        # message without content, say, for a template that reads it): the
        # request's messages are what it cannot take.
        return ClientError(400, f"The model's chat template cannot render these messages: "
                                f"{type(exc).__name__}: {exc}", param="messages", code="invalid_messages")
    if isinstance(exc, (ValueError, TypeError)):
        for pattern, formatter in RouteErrorHandler.pattern_and_formatters.items():
            match = pattern.search(str(exc))
            if match is not None and body is not None:
                status, err = formatter(body, match)
                return ClientError(status, **err)
        return ClientError(400, str(exc))
    return exc


def _fields_behind(message: str, body: Any) -> list[str]:
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


def validation_error(exc: Any) -> ClientError:
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
    """An exception the request did not cause: logged with its traceback, answered with a 500."""
    traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    return ClientError(500, str(exc) or type(exc).__name__, type="internal_server_error")


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
