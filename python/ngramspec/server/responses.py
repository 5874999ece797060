"""``POST /v1/responses``: OpenAI's Responses API, answered by the chat route's machinery.

A Responses request is translated into the chat request it means
(``ChatCompletionRequest``: ``instructions`` a system message first, the input items
as messages, ``function_call`` items as an assistant turn's ``tool_calls``,
``function_call_output`` items as ``tool`` messages, function tools as chat tools,
``text.format`` as ``response_format``, ``max_output_tokens`` as ``max_tokens``), which
app.py answers as it answers ``/v1/chat/completions``: the same queue, lock, speculative
wrapper, grammar path and refusals. The chat completion (or its stream of chunks) is
then translated back: a ``response`` object whose ``output`` holds a ``message`` item
(one ``output_text`` part) and/or ``function_call`` items, or the Responses API's
stream of events (``response.created`` ... ``response.completed``, each with its
``sequence_number``).

What the request asks for that this server cannot do is a 400 naming the field, never
ignored: ``previous_response_id`` and ``conversation`` (nothing is stored), built-in
tools, ``tool_choice`` ``allowed_tools`` or a built-in tool, ``required`` with more than
one function tool, ``background``, ``reasoning``, ``prompt`` (stored prompts),
``truncation: auto``, ``top_logprobs``, ``include`` other than
``reasoning.encrypted_content``, ``text.verbosity`` other than ``medium``, input items
other than messages and function calls and their outputs, file inputs.
"""
from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool

from ngramspec.server.errors import ClientError
from ngramspec.server.response_fields import finish_response
from ngramspec.server.responses_types import (
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionTool,
    InputImage,
    InputText,
    MessageItem,
    OtherFormat,
    OtherToolChoice,
    OutputTextPart,
    RefusalPart,
    ResponsesRequest,
    TextFormatJsonObject,
    TextFormatJsonSchema,
    ToolChoiceFunction,
)
from ngramspec.server.state import ServerState
from ngramspec.server.streaming import END, StreamAnswer, client_error
from ngramspec.server.types import ChatCompletionRequest

__all__ = ["ResponsesAnswer", "ResponsesStream", "StreamTranslator", "chat_request"]

_STORE = ("this server does not store responses: send the whole conversation as `input` (the previous "
          "response's `output` items, then your `function_call_output` items)")


def _unsupported(param: str, message: str) -> ClientError:
    return ClientError(400, f"{param}: {message}", param=param, code="unsupported_parameter")


def _invalid(param: str, message: str) -> ClientError:
    return ClientError(400, f"{param}: {message}", param=param, code="invalid_value")


def _refuse_unsupported(body: ResponsesRequest) -> None:
    """A 400 for each field this server cannot honour (module docstring)."""
    if body.previous_response_id is not None:
        raise _unsupported("previous_response_id", _STORE)
    if body.conversation is not None:
        raise _unsupported("conversation", _STORE)
    if body.background:
        raise _unsupported("background", "background responses are not supported (nothing is stored to poll)")
    if body.prompt is not None:
        raise _unsupported("prompt", "stored prompt templates are not supported: send the text as input")
    if body.reasoning is not None:
        raise _unsupported("reasoning", "this server's models take no reasoning settings")
    if body.truncation == "auto":
        raise _unsupported("truncation", "`auto` is not supported: an input longer than the context is a 400 "
                                         "(context_length_exceeded)")
    if body.top_logprobs:
        raise _unsupported("top_logprobs", "log probabilities are not supported on /v1/responses "
                                           "(/v1/chat/completions has logprobs)")
    for name in ("context_management", "moderation", "access_programs", "image", "background_options"):
        if getattr(body, name) is not None:
            raise _unsupported(name, "not supported by this server")
    other = [x for x in body.include or () if x != "reasoning.encrypted_content"]
    if other:
        raise _unsupported("include", f"`{other[0]}` is not supported (only reasoning.encrypted_content, which "
                                      "this server's responses never hold)")
    if body.text is not None and isinstance(body.text.format, OtherFormat):
        raise _unsupported("text.format", f"`{body.text.format.type}` is not supported (text, json_object, "
                                          "json_schema)")
    if body.text is not None and body.text.verbosity not in (None, "medium"):
        raise _unsupported("text.verbosity", f"`{body.text.verbosity}` is not supported (only medium)")


def _part(where: str, part: Any) -> dict[str, Any]:
    """A content part as the chat route takes it."""
    if isinstance(part, (InputText, OutputTextPart)):
        return {"type": "text", "text": part.text}
    if isinstance(part, RefusalPart):
        return {"type": "text", "text": part.refusal}
    if isinstance(part, InputImage):
        if part.image_url is None:
            raise _unsupported(where, "an input_image by file_id is not supported (no file store): send its "
                                      "image_url (a data: URL for an upload)")
        return {"type": "image_url", "image_url": {"url": part.image_url,
                                                   **({"detail": part.detail} if part.detail else {})}}
    raise _unsupported(where, f"content parts of type `{part.type}` are not supported (input_text, output_text, "
                              "refusal, input_image)")


def _content(where: str, content: Any) -> Any:
    if isinstance(content, str):
        return content
    return [_part(f"{where}.content[{j}]", part) for j, part in enumerate(content)]


def _output_text(where: str, output: Any) -> str:
    """A function_call_output's output: a string, or its text parts joined with newlines."""
    if isinstance(output, str):
        return output
    texts = []
    for j, part in enumerate(output):
        if not isinstance(part, (InputText, OutputTextPart)):
            raise _unsupported(f"{where}.output[{j}]", "a function's output may hold text parts only here")
        texts.append(part.text)
    return "\n".join(texts)


def _messages(body: ResponsesRequest) -> tuple[list[dict[str, Any]], list[str]]:
    """``instructions`` and ``input`` as chat messages, and where each came from
    (``instructions``, ``input``, ``input[i]``)."""
    out: list[dict[str, Any]] = []
    origins: list[str] = []
    if body.instructions is not None:
        out.append({"role": "system", "content": body.instructions})
        origins.append("instructions")
    if isinstance(body.input, str):
        out.append({"role": "user", "content": body.input})
        origins.append("input")
        return out, origins
    calls: set[str] = set()
    for i, item in enumerate(body.input):
        where = f"input[{i}]"
        if isinstance(item, MessageItem):
            out.append({"role": item.role, "content": _content(where, item.content)})
            origins.append(where)
        elif isinstance(item, FunctionCallItem):
            call = {"id": item.call_id, "type": "function",
                    "function": {"name": item.name, "arguments": item.arguments}}
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":   # the calls of one turn, after its text
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
                origins.append(where)
            calls.add(item.call_id)
        elif isinstance(item, FunctionCallOutputItem):
            if item.call_id not in calls:
                raise _invalid("input", f"{where}: no function_call item with call_id `{item.call_id}` comes before "
                                        f"this function_call_output ({_STORE})")
            out.append({"role": "tool", "tool_call_id": item.call_id, "content": _output_text(where, item.output)})
            origins.append(where)
        else:
            raise _unsupported("input", f"{where}: input items of type `{item.type}` are not supported (messages, "
                                        "function_call, function_call_output)")
    return out, origins


def _tools(body: ResponsesRequest) -> list[FunctionTool]:
    tools = []
    for i, tool in enumerate(body.tools or ()):
        if not isinstance(tool, FunctionTool):
            raise _unsupported("tools", f"tools[{i}]: the built-in tool `{tool.type}` is not supported: this server "
                                        "runs no tools (function tools are)")
        tools.append(tool)
    return tools


def _tool_choice(body: ResponsesRequest, tools: list[FunctionTool]) -> Any:
    """``tool_choice`` as the chat route takes it: a named function forces its call."""
    choice = body.tool_choice
    names = [t.name for t in tools]
    if isinstance(choice, OtherToolChoice):
        raise _unsupported("tool_choice", f"`{choice.type}` is not supported (none, auto, required, or a function)")
    if choice == "required":
        if not tools:
            raise _invalid("tool_choice", "`required` asks for a function call, and the request has no function "
                                          "tools")
        if len(tools) > 1:
            raise _unsupported("tool_choice", "`required` needs exactly one function tool here (name the function "
                                              f"to call with {{\"type\": \"function\", \"name\": ...}}); "
                                              f"the request has {len(tools)}")
        return {"type": "function", "function": {"name": names[0]}}
    if isinstance(choice, ToolChoiceFunction):
        if choice.name not in names:
            raise _invalid("tool_choice", f"it names the function `{choice.name}`, which is not among the request's "
                                          "function tools")
        return {"type": "function", "function": {"name": choice.name}}
    return choice


def _response_format(body: ResponsesRequest) -> dict[str, Any] | None:
    """``text.format`` as the chat route's ``response_format``."""
    fmt = body.text.format if body.text is not None else None
    if isinstance(fmt, TextFormatJsonSchema):
        return {"type": "json_schema", "json_schema": {"name": fmt.name, "schema": fmt.schema_,
                                                       **({"strict": fmt.strict} if fmt.strict is not None else {})}}
    if isinstance(fmt, TextFormatJsonObject):
        return {"type": "json_object"}
    return None


#: Sampling fields that pass to the chat request as they are, when given.
_SAMPLING = ("temperature", "top_p", "seed", "stop", "top_k", "min_p")


def chat_request(body: ResponsesRequest) -> ChatCompletionRequest:
    """The chat request a Responses request means; a 400 for what it cannot mean."""
    _refuse_unsupported(body)
    return _chat_request(body, _messages(body)[0])


def _chat_request(body: ResponsesRequest, messages: list[dict[str, Any]]) -> ChatCompletionRequest:
    tools = _tools(body)
    payload: dict[str, Any] = {"model": body.model, "messages": messages, "stream": bool(body.stream),
                               "max_tokens": body.max_output_tokens, "user": body.user}
    if tools:
        payload["tools"] = [{"type": "function", "function": {
            "name": t.name, "parameters": t.parameters if t.parameters is not None else {"type": "object",
                                                                                          "properties": {}},
            **({"description": t.description} if t.description is not None else {})}} for t in tools]
    choice = _tool_choice(body, tools)
    if choice is not None and tools:
        payload["tool_choice"] = choice
    response_format = _response_format(body)
    if response_format is not None:
        payload["response_format"] = response_format
    for name in _SAMPLING:
        value = getattr(body, name)
        if value is not None:
            payload[name] = value
    try:
        return ChatCompletionRequest.model_validate(payload)
    except ValidationError as exc:   # what the chat route's own types refuse (an odd function name...)
        errors = exc.errors()
        where = ".".join(str(x) for x in errors[0]["loc"]) if errors else "body"
        why = errors[0]["msg"] if errors else "invalid"
        raise ClientError(400, f"Invalid request: {where}: {why}", code="invalid_value") from None


# --- the answer ------------------------------------------------------------------------------

def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _usage(usage: dict[str, Any], stats: dict[str, Any]) -> dict[str, Any]:
    """The chat usage under the Responses API's names; ``cached_tokens``: the prompt's
    tokens the context already held (not evaluated again)."""
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    cached = prompt - int(stats["prefill_tokens"]) if "prefill_tokens" in stats else 0
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": max(0, cached), "cache_write_tokens": 0},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion}


def _json_parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


class ResponsesAnswer:
    """One /v1/responses request: its chat request (``chat``), and the translation of
    the chat answer back into a response object or a stream of events."""

    def __init__(self, body: ResponsesRequest) -> None:
        self.body = body
        _refuse_unsupported(body)
        messages, self.origins = _messages(body)
        self.chat = _chat_request(body, messages)
        self.id = _id("resp")
        self.created_at = int(time.time())

    # The response object ---------------------------------------------------------------

    def response(self, status: str, model: str, output: list[dict[str, Any]], usage: dict[str, Any] | None = None,
                 incomplete: str | None = None, error: dict[str, Any] | None = None) -> dict[str, Any]:
        """The ``response`` object: the request's settings as they were applied, and what came out."""
        body, chat = self.body, self.chat
        tools = [{"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters,
                  "strict": t.strict} for t in _tools(body)]
        fmt = body.text.format if body.text is not None else None
        text_format = fmt.model_dump(by_alias=True, exclude_none=True) if fmt is not None else {"type": "text"}
        out: dict[str, Any] = {
            "id": self.id, "object": "response", "created_at": self.created_at, "status": status,
            "error": error, "incomplete_details": {"reason": incomplete} if incomplete else None,
            "instructions": body.instructions, "max_output_tokens": body.max_output_tokens, "model": model,
            "output": output, "parallel_tool_calls": body.parallel_tool_calls is not False,
            "previous_response_id": None, "reasoning": None, "store": False,
            "temperature": chat.temperature, "top_p": chat.top_p,
            "text": {"format": text_format, "verbosity": "medium"},
            "tool_choice": (body.tool_choice.model_dump() if isinstance(body.tool_choice, BaseModel)
                            else body.tool_choice or "auto"),
            "tools": tools, "truncation": "disabled", "usage": usage, "user": body.user,
            "metadata": body.metadata or {},
        }
        return out

    def _status(self, finish_reason: str | None, completion_tokens: int, calls: Iterable[str]) -> str | None:
        """Why the answer is incomplete (``max_output_tokens``), or None. A forced call
        cut short still says ``tool_calls`` in chat: its arguments do not parse."""
        if finish_reason == "length":
            return "max_output_tokens"
        limit = self.chat.max_tokens
        if (finish_reason == "tool_calls" and limit is not None and completion_tokens >= limit
                and not all(_json_parses(c) for c in calls)):
            return "max_output_tokens"
        return None

    def final(self, model: str, items: list[dict[str, Any]], finish_reason: str | None,
              finished: dict[str, Any]) -> dict[str, Any]:
        """The finished response, from its output items (completed or incomplete by
        ``finish_reason``) and the chat answer ``finished`` (a completion, or a stream's
        last chunk, through ``finish_response``)."""
        stats = finished.get("speculative") or {}
        usage = _usage(finished.get("usage") or {}, stats)
        incomplete = self._status(finish_reason, usage["output_tokens"],
                                  [i["arguments"] for i in items if i["type"] == "function_call"])
        state = "incomplete" if incomplete else "completed"
        for item in items:
            item["status"] = state
        out = self.response(state, model, items, usage, incomplete)
        out["timings"] = finished.get("timings")
        out["speculative"] = stats
        return out

    def json(self, out: dict[str, Any]) -> dict[str, Any]:
        """A (finished) chat completion as the response object."""
        choice = out["choices"][0]
        message = choice.get("message") or {}
        items: list[dict[str, Any]] = []
        calls = message.get("tool_calls") or []
        content = message.get("content")
        if content or not calls:
            items.append(message_item(_id("msg"), content or ""))
        items += [call_item(_id("fc"), c.get("id") or _id("call"), c["function"]["name"], c["function"]["arguments"])
                  for c in calls]
        return self.final(str(out.get("model")), items, choice.get("finish_reason"), out)

    def stream(self, state: ServerState, body: Any, kwargs: dict[str, Any]) -> ResponsesStream:
        return ResponsesStream(state, body, kwargs, self)

    def reword(self, err: ClientError) -> ClientError:
        """A refusal of the chat messages (``messages[k]: ...``, param ``messages``) as
        one of the input it came from (``input[i]: ...``, param ``input``)."""
        if err.error.get("param") != "messages":
            return err
        message = str(err.error["message"])
        match = re.match(r"messages\[(\d+)\]", message)
        where = "input"
        if match is not None and int(match.group(1)) < len(self.origins):
            where = self.origins[int(match.group(1))]
            message = where + message[match.end():]
        elif message.startswith("messages"):
            message = "input" + message[len("messages"):]
        param = "instructions" if where == "instructions" else "input"
        return ClientError(err.status, message, type=str(err.error["type"]), param=param,
                           code=err.error.get("code"), headers=err.headers)


def message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    return {"id": item_id, "type": "message", "role": "assistant", "status": status,
            "content": [_text_part(text)]}


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def call_item(item_id: str, call_id: str, name: str, arguments: str, status: str = "completed") -> dict[str, Any]:
    return {"id": item_id, "type": "function_call", "call_id": call_id, "name": name, "arguments": arguments,
            "status": status}


# --- the stream ----------------------------------------------------------------------------

class StreamTranslator:
    """Chat completion chunks in, Responses API events out (dicts with ``type`` and
    ``sequence_number``): an output item is added when its first text or call arrives,
    and every open item is done before ``response.completed`` (or
    ``response.incomplete``, when ``max_output_tokens`` cut the answer short)."""

    def __init__(self, answer: ResponsesAnswer, model: str) -> None:
        self.answer = answer
        self.sequence = 0
        self.model = model
        self.items: list[dict[str, Any]] = []   # output items, in order, as they grow
        self.open: int | None = None            # the index of the item being written
        self.calls: dict[int, int] = {}         # a chat tool call's index -> its output index

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def start(self) -> list[dict[str, Any]]:
        response = self.answer.response("in_progress", self.model, [])
        return [self._event("response.created", response=response),
                self._event("response.in_progress", response=response)]

    def _add(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        events = self._close()
        self.items.append(item)
        self.open = len(self.items) - 1
        announced = {**item, "content": []} if item["type"] == "message" else dict(item)   # its part comes next
        events.append(self._event("response.output_item.added", output_index=self.open, item=announced))
        if item["type"] == "message":
            item["content"] = [_text_part("")]
            events.append(self._event("response.content_part.added", item_id=item["id"], output_index=self.open,
                                      content_index=0, part=_text_part("")))
        return events

    def _close(self, status: str = "completed") -> list[dict[str, Any]]:
        """The open item's done events."""
        if self.open is None:
            return []
        index, item = self.open, self.items[self.open]
        self.open = None
        item["status"] = status
        events = []
        if item["type"] == "message":
            part = item["content"][0]
            events.append(self._event("response.output_text.done", item_id=item["id"], output_index=index,
                                      content_index=0, text=part["text"], logprobs=[]))
            events.append(self._event("response.content_part.done", item_id=item["id"], output_index=index,
                                      content_index=0, part=dict(part)))
        else:
            events.append(self._event("response.function_call_arguments.done", item_id=item["id"],
                                      output_index=index, name=item["name"], arguments=item["arguments"]))
        events.append(self._event("response.output_item.done", output_index=index,
                                  item=json.loads(json.dumps(item))))
        return events

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """The events of one chat chunk (its finish_reason is for ``finish``)."""
        events: list[dict[str, Any]] = []
        self.model = str(chunk.get("model") or self.model)
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if text:
                if self.open is None or self.items[self.open]["type"] != "message":
                    events += self._add(message_item(_id("msg"), "", "in_progress"))
                index = self.open
                assert index is not None
                part = self.items[index]["content"][0]
                part["text"] += text
                events.append(self._event("response.output_text.delta", item_id=self.items[index]["id"],
                                          output_index=index, content_index=0, delta=text, logprobs=[]))
            for call in delta.get("tool_calls") or []:
                events += self._call_delta(call)
        return events

    def _call_delta(self, call: dict[str, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        function = call.get("function") or {}
        key = int(call.get("index") or 0)
        if key not in self.calls:
            events += self._add(call_item(_id("fc"), call.get("id") or _id("call"), function.get("name") or "", "",
                                          "in_progress"))
            assert self.open is not None
            self.calls[key] = self.open
        index = self.calls[key]
        piece = function.get("arguments") or ""
        if piece:
            self.items[index]["arguments"] += piece
            events.append(self._event("response.function_call_arguments.delta", item_id=self.items[index]["id"],
                                      output_index=index, delta=piece))
        return events

    def finish(self, finish_reason: str | None, finished: dict[str, Any]) -> list[dict[str, Any]]:
        """The last events: every item done, then the finished response."""
        events: list[dict[str, Any]] = []
        if not self.items:   # nothing was generated: one empty message, as the non-streamed answer has
            events += self._add(message_item(_id("msg"), "", "in_progress"))
        final = self.answer.final(self.model, json.loads(json.dumps(self.items)), finish_reason, finished)
        events += self._close(final["status"])
        kind = "response.completed" if final["status"] == "completed" else "response.incomplete"
        events.append(self._event(kind, response=final))
        return events

    def interrupted(self) -> list[dict[str, Any]]:
        """Cut short for a waiting request (``--interrupt_requests``): incomplete."""
        events = self._close("incomplete")
        response = self.answer.response("incomplete", self.model, json.loads(json.dumps(self.items)))
        events.append(self._event("response.incomplete", response=response))
        return events

    def failed(self, error: dict[str, Any]) -> list[dict[str, Any]]:
        """An error mid-stream (the status is sent already): an ``error`` event, then ``response.failed``."""
        response = self.answer.response("failed", self.model, json.loads(json.dumps(self.items)),
                                        error={"code": "server_error", "message": error["message"]})
        return [self._event("error", code=error.get("code"), message=error["message"], param=error.get("param")),
                self._event("response.failed", response=response)]


def _sse(event: dict[str, Any]) -> dict[str, Any]:
    return {"event": event["type"], "data": json.dumps(event)}


class ResponsesStream(StreamAnswer):
    """A streamed /v1/responses request: the chat route's stream (the lock taken before
    the response starts, a failing request a 4xx JSON error, a client that goes away
    closing the generation), with the Responses API's events for the chat chunks."""

    def __init__(self, state: ServerState, body: Any, kwargs: dict[str, Any], answer: ResponsesAnswer) -> None:
        super().__init__(state, body, kwargs, chat=True)
        self.answer = answer

    def _refusal(self, exc: Exception) -> ClientError:
        return self.answer.reword(super()._refusal(exc))

    async def _events(self, llama: Any, iterator: Any, chunk: Any) -> AsyncIterator[dict[str, Any]]:
        translator = StreamTranslator(self.answer, str(self.kwargs.get("model") or ""))
        for event in translator.start():
            yield _sse(event)
        done = False   # the finished response is sent; what follows is read to the end, not sent
        while chunk is not END:
            if not done:
                for event in translator.feed(chunk):
                    yield _sse(event)
                choices = chunk.get("choices") or []
                if choices and choices[0].get("finish_reason") is not None:
                    stats = chunk.get("speculative") or getattr(llama, "last_speculative", None)
                    for event in translator.finish(choices[0]["finish_reason"], finish_response(chunk, stats)):
                        yield _sse(event)
                    done = True
                elif self.state.interrupt and self.state.someone_waits():
                    for event in translator.interrupted():
                        yield _sse(event)
                    return
            try:
                chunk = await run_in_threadpool(next, iterator, END)
            except Exception as exc:  # mid-stream: the status is sent already
                err = client_error(exc, self.state, self.request_body, self.kwargs)
                self.finished = True
                if not done:
                    for event in translator.failed(err.error):
                        yield _sse(event)
                return
        if not done:   # the chunks ended without a finish_reason: what came is the answer
            for event in translator.finish(None, finish_response({}, getattr(llama, "last_speculative", None))):
                yield _sse(event)
        self.finished = True
