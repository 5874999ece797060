"""Chat messages as OpenAI clients send them, made renderable by the model's chat template.

llama-cpp-python's request types take a message's ``content`` as a string only, and its
chat templates (SmolLM2's, for one, ``'\\n' + message['content']``) fail on anything
else. Clients send more: content as a list of parts, ``"content": null`` on an
assistant turn that carries ``tool_calls``, ``tool`` messages with the results, a
``developer`` message (OpenAI's newer name for ``system``). Here, before the template
sees them:

- text parts are joined with newlines (as llama.cpp's server joins them); an image
  part is refused (400) unless the model has a vision chat handler, which takes the
  parts as they are;
- a null or missing ``content`` is the empty string (as llama.cpp's server renders it);
- an assistant turn's ``tool_calls`` (and the older ``function_call``) stay on the
  message for templates that render them; for a template that does not mention
  ``tool_calls``, they are also written into the turn's text, one JSON object per
  call (``{"name": ..., "arguments": ...}``), so the model still sees what it called;
- ``developer`` is ``system``.

Anything the template still cannot render is a 400 ``invalid_messages`` naming the
first message it fails on (``first_unrenderable``).
"""
# Pydantic evaluates these annotations at run time, where Python 3.9 has no
# `X | None`: this module keeps typing's Optional / List / Union throughout.
# ruff: noqa: UP006, UP007, UP035, UP045
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Dict, List, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from ngramspec._llama import eos_bos_text
from ngramspec.server.errors import ClientError

if TYPE_CHECKING:
    from llama_cpp import Llama

__all__ = ["ChatMessage", "ChatTemplate", "ResponseFormat", "first_unrenderable", "llama_response_format",
           "renderable_messages"]


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ImageUrl(BaseModel):
    model_config = ConfigDict(extra="allow")
    url: str
    detail: Optional[str] = None


class ImagePart(BaseModel):
    type: Literal["image_url"]
    image_url: Union[str, ImageUrl]


class ToolCallFunction(BaseModel):
    name: str
    arguments: str


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: Optional[str] = None
    type: Literal["function"] = "function"
    function: ToolCallFunction


class ChatMessage(BaseModel):
    """One message of a chat request, in any shape OpenAI's API takes."""
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: Optional[Union[str, List[Union[TextPart, ImagePart]]]] = None
    name: Optional[str] = None
    tool_calls: Optional[List[ToolCall]] = None
    tool_call_id: Optional[str] = None
    function_call: Optional[ToolCallFunction] = None


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    name: Optional[str] = None
    description: Optional[str] = None
    # "schema" shadows a BaseModel attribute: the field is schema_ in Python.
    schema_: Optional[Dict[str, Any]] = Field(default=None, alias="schema")
    strict: Optional[bool] = None


class ResponseFormat(BaseModel):
    """OpenAI's ``response_format`` (``text``, ``json_object``, ``json_schema`` with
    ``{"name", "schema", "strict"}``), and llama-cpp-python's own ``json_object``
    with a ``schema``."""
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    type: Literal["text", "json_object", "json_schema"]
    schema_: Optional[Dict[str, Any]] = Field(default=None, alias="schema")
    json_schema: Optional[JsonSchemaFormat] = None


def llama_response_format(fmt: Optional[ResponseFormat]) -> Optional[Dict[str, Any]]:
    """``response_format`` as llama-cpp-python's chat handlers read it: ``json_object``,
    with the schema when there is one (OpenAI's ``json_schema`` carries it under
    ``json_schema.schema``; llama-cpp-python knows only ``json_object`` + ``schema``).
    A ``json_schema`` without a schema is any JSON object."""
    if fmt is None:
        return None
    if fmt.type == "text":
        return {"type": "text"}
    schema = fmt.json_schema.schema_ if fmt.type == "json_schema" and fmt.json_schema is not None else fmt.schema_
    return {"type": "json_object", **({"schema": schema} if schema is not None else {})}


def _invalid(index: int, what: str) -> ClientError:
    return ClientError(400, f"messages[{index}]: {what}", param="messages", code="invalid_messages")


def _text(index: int, content: Any, vision: bool) -> Any:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    images = [j for j, part in enumerate(content) if isinstance(part, ImagePart)]
    if images and not vision:
        raise _invalid(index, f"content part {images[0]} is an image (image_url), and this server's model has no "
                              "vision chat handler: send text parts only, or serve a vision model with its "
                              "--clip_model_path and --chat_format")
    if images:
        return [part.model_dump(exclude_none=True) for part in content]
    return "\n".join(part.text for part in content if isinstance(part, TextPart))


def _calls_as_text(message: ChatMessage) -> str:
    # llama-cpp-python's answers carry a call twice, as tool_calls and as the older function_call.
    calls = [c.function for c in message.tool_calls or []]
    if not calls and message.function_call is not None:
        calls.append(message.function_call)
    lines = []
    for call in calls:
        try:
            arguments: Any = json.loads(call.arguments)
        except ValueError:
            arguments = call.arguments
        lines.append(json.dumps({"name": call.name, "arguments": arguments}, ensure_ascii=False))
    return "\n".join(lines)


def renderable_messages(messages: List[ChatMessage], vision: bool, template_renders_tool_calls: bool,
                        ) -> List[Dict[str, Any]]:
    """The messages as the chat handler takes them (module docstring)."""
    out = []
    for i, message in enumerate(messages):
        d: Dict[str, Any] = message.model_dump(exclude_none=True)
        d["role"] = "system" if message.role == "developer" else message.role
        d["content"] = _text(i, message.content, vision)
        calls = message.tool_calls or message.function_call
        if calls and not template_renders_tool_calls and isinstance(d["content"], str):
            d["content"] = "\n".join(t for t in (d["content"], _calls_as_text(message)) if t)
        out.append(d)
    return out


def first_unrenderable(render: Any, messages: List[Dict[str, Any]]) -> int | None:
    """The index of the first message the template fails on: the shortest prefix of
    ``messages`` that ``render`` (the model's chat formatter) cannot render ends
    there. None if it renders them all, or if no prefix fails (the whole list's
    shape, not one message, is what the template refused)."""
    for i in range(len(messages)):
        try:
            render(messages=messages[: i + 1])
        except Exception:
            return i
    return None


#: llama-cpp-python's chat formats that render tool calls themselves.
_FUNCTION_FORMATS = frozenset({"chatml-function-calling", "functionary", "functionary-v1", "functionary-v2"})


class ChatTemplate:
    """The served model's chat formatting, as far as preparing messages needs it:
    whether it has a vision handler, whether its template renders ``tool_calls``,
    and (for a GGUF Jinja template) a formatter to find the message a failing
    template stops at."""

    def __init__(self, llm: Llama) -> None:
        from llama_cpp import llama_chat_format

        handler, fmt = llm.chat_handler, llm.chat_format or ""
        self.vision = isinstance(handler, llama_chat_format.Llava15ChatHandler)
        template = None
        if handler is None and fmt.startswith("chat_template."):
            key = "tokenizer.chat_template" + ("" if fmt == "chat_template.default" else fmt[len("chat_template"):])
            template = llm.metadata.get(key)
        self.renders_tool_calls = handler is not None or fmt in _FUNCTION_FORMATS or "tool_calls" in (template or "")
        self._render: Any = None
        if template:
            eos, bos = eos_bos_text(llm)
            self._render = llama_chat_format.Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)

    def prepare(self, messages: List[ChatMessage]) -> List[Dict[str, Any]]:
        return renderable_messages(messages, self.vision, self.renders_tool_calls)

    def failing_message(self, messages: List[Dict[str, Any]]) -> int | None:
        """The index of the first message the template fails on, when that can be found."""
        return first_unrenderable(self._render, messages) if self._render is not None else None
