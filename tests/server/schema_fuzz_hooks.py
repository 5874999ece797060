"""Schemathesis hooks for the schema fuzz (test_schema_fuzz.py), loaded by
``st run`` through SCHEMATHESIS_HOOKS.

- ``before_call`` caps how many tokens a request may generate: every phase's
  requests (the schema's own examples too) ask for at most CAP tokens, so ~1,000
  requests fit in minutes. Only an integer above CAP is lowered, and a chat or
  /v1/responses request that names no limit gets one; a negative, zero or mistyped
  value is sent as drawn.
- ``openai_error_shape`` checks that every 4xx body is OpenAI's error object.
"""
from __future__ import annotations

import json
from typing import Any

import schemathesis

CAP = 8


@schemathesis.hook
def before_call(ctx: Any, case: Any, **kwargs: Any) -> None:
    body = case.body
    if not isinstance(body, dict):
        return
    for name in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > CAP:
            body[name] = CAP
    if "messages" in body and body.get("max_tokens") is None and body.get("max_completion_tokens") is None:
        body["max_tokens"] = CAP     # a chat request's default is the whole context
    if getattr(case, "path", None) == "/v1/responses" and body.get("max_output_tokens") is None:
        body["max_output_tokens"] = CAP


@schemathesis.check
def openai_error_shape(ctx: Any, response: Any, case: Any) -> bool | None:
    if not 400 <= response.status_code < 500:
        return None
    try:
        data = json.loads(response.content)
    except ValueError:
        raise AssertionError(f"a {response.status_code} whose body is not JSON: {response.content[:200]!r}") from None
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict) or set(error) != {"message", "type", "param", "code"}:
        raise AssertionError(f"a {response.status_code} not in OpenAI's error shape: {data!r}")
    if not (isinstance(error["message"], str) and error["message"] and isinstance(error["type"], str)):
        raise AssertionError(f"a {response.status_code} with an empty or mistyped message or type: {error!r}")
    for key in ("param", "code"):
        if error[key] is not None and not isinstance(error[key], str):
            raise AssertionError(f"a {response.status_code} whose {key} is not a string or null: {error!r}")
    return True
