"""The OpenAPI schema the server publishes (``/openapi.json``): FastAPI's, with the
error responses this server really gives.

FastAPI documents a 422 with its own validation body on every route; this server
answers a bad request with a 4xx in OpenAI's error shape instead (``errors.py``),
a fault of its own with a 500 in the same shape, and a full queue with a 503. A
client generated from the schema, or a schema-driven fuzzer, then expects what it
gets.
"""
from __future__ import annotations

from typing import Any

__all__ = ["ERROR_SCHEMA", "SSE_EVENT_SCHEMA", "publish_error_responses"]

_NULLABLE_STRING = {"anyOf": [{"type": "string"}, {"type": "null"}]}

#: OpenAI's error object: ``{"error": {"message", "type", "param", "code"}}``.
ERROR_SCHEMA: dict[str, Any] = {
    "title": "ErrorResponse",
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                           "param": _NULLABLE_STRING, "code": _NULLABLE_STRING},
        },
    },
}

#: One server-sent event of a streamed completion, as a client parses it (Open API
#: before 3.2 has a text/event-stream schema describe each event, not the stream).
SSE_EVENT_SCHEMA: dict[str, Any] = {
    "title": "ServerSentEvent",
    "type": "object",
    "required": ["data"],
    "properties": {
        "data": {"type": "string", "description": "a JSON chunk (CreateCompletionResponse, or a "
                                                  "chat.completion.chunk), a JSON error object, or [DONE]; "
                                                  "on /v1/responses, a Responses API event (its type also "
                                                  "in `event`)"},
        "event": {"type": "string"},
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
}

_ERROR_CONTENT = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}

#: Routes that queue for the model, and answer 503 when the queue is full.
QUEUED = {"/v1/completions", "/v1/chat/completions", "/v1/responses"}


def publish_error_responses(app: Any, secured: bool = True) -> None:
    """Make ``app.openapi()`` document the error responses (4XX and 500 on every
    route, 503 on the queued ones, no 422) and a stream's events: FastAPI's own
    schema, amended once, when it is first built. ``secured``: whether the server
    checks an API key; without one the schema declares no bearer authentication
    (llama-cpp-python's routes declare it whether or not a key is set)."""
    build = app.openapi   # FastAPI's: builds the schema once and keeps it in app.openapi_schema

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            built = build()
            _amend(built)
            if not secured:
                _drop_security(built)
        schema: dict[str, Any] = app.openapi_schema
        return schema

    app.openapi = openapi


def _amend(schema: dict[str, Any]) -> None:
    schema.setdefault("components", {}).setdefault("schemas", {})["ErrorResponse"] = ERROR_SCHEMA
    for path, operations in schema.get("paths", {}).items():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            for response in responses.values():
                stream = response.get("content", {}).get("text/event-stream")
                if stream is not None:
                    stream["schema"] = SSE_EVENT_SCHEMA
            responses["4XX"] = {"description": "The request's fault (malformed JSON, a wrong type, a value "
                                               "out of range, what speculation cannot honour)",
                                "content": _ERROR_CONTENT}
            responses["500"] = {"description": "A fault of the server's", "content": _ERROR_CONTENT}
            if path in QUEUED:
                responses["503"] = {"description": "The queue is full (--max_queue); retry after Retry-After",
                                    "content": _ERROR_CONTENT}
    for unused in ("HTTPValidationError", "ValidationError"):
        schema["components"]["schemas"].pop(unused, None)


def _drop_security(schema: dict[str, Any]) -> None:
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            operation.pop("security", None)
    components = schema.get("components", {})
    components.pop("securitySchemes", None)
