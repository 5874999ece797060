"""``/v1/responses``' request and response types: OpenAI's Responses API, the part this
server serves (server/responses.py translates it to a chat request and back).

Field names follow the ``openai`` package's ``types/responses`` (``ResponseCreateParams``,
``Response``, the input items and stream events). The request is checked strictly: an
unknown field is a 400, and a field OpenAI has that this server cannot honour is
declared here (so ``/openapi.json`` shows it) and refused by server/responses.py with
a 400 that says why, never ignored.
"""
# Pydantic evaluates these annotations at run time, where Python 3.9 has no
# `X | None`: this module keeps typing's Optional / List / Union throughout.
# ruff: noqa: UP006, UP007, UP035, UP045
from __future__ import annotations

from typing import Annotated, Any, Dict, List, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

__all__ = ["FunctionCallItem", "FunctionCallOutputItem", "FunctionTool", "InputImage", "InputText", "MessageItem",
           "OtherFormat", "OtherItem", "OtherPart", "OtherTool", "OtherToolChoice", "OutputTextPart", "RefusalPart",
           "ResponseObject", "ResponsesRequest", "TextFormatJsonObject", "TextFormatJsonSchema", "TextFormatText",
           "ToolChoiceFunction"]


def _tag(value: Any, known: dict[str, str], default: str | None = None) -> str | None:
    """The union branch (its class's name) of an input item, part, tool or format: by its
    ``type`` when this server knows it, ``Other...`` (refused with a 400 naming it) when
    not, ``default`` without one (or when not an object: pydantic then says what it wants).
    Branch names are capitalised, so that an error's place reads ``input[0].call_id``
    (server/errors.py leaves them out)."""
    if not isinstance(value, dict):
        return default
    kind = value.get("type")
    if kind is None:
        return default
    return known.get(kind, known["*"]) if isinstance(kind, str) else known["*"]   # pydantic: "should be a string"


def _discriminator(known: dict[str, str], default: str | None, what: str) -> Discriminator:
    return Discriminator(lambda v: _tag(v, known, default), custom_error_type="missing_type",
                         custom_error_message=f"{what} needs a `type`")


# --- content parts of an input message ---------------------------------------------------

class InputText(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["input_text"]
    text: str


class OutputTextPart(BaseModel):
    """An assistant turn's text, as a previous response's ``output`` holds it."""
    model_config = ConfigDict(extra="allow")
    type: Literal["output_text"]
    text: str


class RefusalPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["refusal"]
    refusal: str


class InputImage(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["input_image"]
    image_url: Optional[str] = None
    file_id: Optional[str] = None
    detail: Optional[str] = None


def _other(*known: str) -> Any:
    """The ``type`` of an ``Other...`` branch: any string but the known ones (so that
    the schema's ``oneOf`` has one branch for each value, as the discriminator picks)."""
    return Field(json_schema_extra={"not": {"enum": list(known)}})


class OtherPart(BaseModel):
    """A content part of a type this server does not take (``input_file``, ``input_audio``...)."""
    model_config = ConfigDict(extra="allow")
    type: str = _other("input_text", "output_text", "refusal", "input_image")


ContentPart = Annotated[
    Union[Annotated[InputText, Tag("InputText")], Annotated[OutputTextPart, Tag("OutputTextPart")],
          Annotated[RefusalPart, Tag("RefusalPart")], Annotated[InputImage, Tag("InputImage")],
          Annotated[OtherPart, Tag("OtherPart")]],
    _discriminator({"input_text": "InputText", "output_text": "OutputTextPart", "refusal": "RefusalPart",
                    "input_image": "InputImage", "*": "OtherPart"}, None, "a content part")]


def _text_or_list(value: Any) -> str:
    return "Text" if isinstance(value, str) else "List"


#: A message's content, or a function's output: a string, or a list of content parts.
TextOrParts = Annotated[Union[Annotated[str, Tag("Text")], Annotated[List[ContentPart], Tag("List")]],
                        Discriminator(_text_or_list)]


# --- input items ---------------------------------------------------------------------------

class MessageItem(BaseModel):
    """A message: OpenAI's ``EasyInputMessage`` (``type`` optional, content a string or
    parts), an input ``message`` item, or a previous response's output message."""
    model_config = ConfigDict(extra="allow")
    type: Optional[Literal["message"]] = None
    role: Literal["user", "assistant", "system", "developer"]
    content: TextOrParts
    id: Optional[str] = None
    status: Optional[str] = None


class FunctionCallItem(BaseModel):
    """A function call the model made (a previous response's ``function_call`` output item)."""
    model_config = ConfigDict(extra="allow")
    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str
    id: Optional[str] = None
    status: Optional[str] = None


class FunctionCallOutputItem(BaseModel):
    """A function's result, for the call of the same ``call_id``."""
    model_config = ConfigDict(extra="allow")
    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: TextOrParts
    id: Optional[str] = None
    status: Optional[str] = None


class OtherItem(BaseModel):
    """An input item of a type this server does not take (``reasoning``,
    ``item_reference``, built-in tools' calls...)."""
    model_config = ConfigDict(extra="allow")
    type: str = _other("message", "function_call", "function_call_output")


InputItem = Annotated[
    Union[Annotated[MessageItem, Tag("MessageItem")], Annotated[FunctionCallItem, Tag("FunctionCallItem")],
          Annotated[FunctionCallOutputItem, Tag("FunctionCallOutputItem")],
          Annotated[OtherItem, Tag("OtherItem")]],
    _discriminator({"message": "MessageItem", "function_call": "FunctionCallItem",
                    "function_call_output": "FunctionCallOutputItem", "*": "OtherItem"}, "MessageItem",
                   "an input item")]


# --- tools, tool_choice, text.format ----------------------------------------------------------

class FunctionTool(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function"]
    name: str = Field(min_length=1)
    description: Optional[str] = None
    parameters: Optional[Dict[str, Any]] = None
    strict: Optional[bool] = None


class OtherTool(BaseModel):
    """A built-in tool (``web_search``, ``file_search``, ``computer_use_preview``,
    ``mcp``, ``custom``...): refused, this server runs none."""
    model_config = ConfigDict(extra="allow")
    type: str = _other("function")


Tool = Annotated[Union[Annotated[FunctionTool, Tag("FunctionTool")], Annotated[OtherTool, Tag("OtherTool")]],
                 _discriminator({"function": "FunctionTool", "*": "OtherTool"}, None, "a tool")]


class ToolChoiceFunction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    name: str


class OtherToolChoice(BaseModel):
    """``allowed_tools``, a built-in tool's type, ``mcp``, ``custom``: refused."""
    model_config = ConfigDict(extra="allow")
    type: str = _other("function")


ToolChoiceObject = Annotated[
    Union[Annotated[ToolChoiceFunction, Tag("ToolChoiceFunction")],
          Annotated[OtherToolChoice, Tag("OtherToolChoice")]],
    _discriminator({"function": "ToolChoiceFunction", "*": "OtherToolChoice"}, None, "a tool_choice object")]


class TextFormatText(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]


class TextFormatJsonObject(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["json_object"]


class TextFormatJsonSchema(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    type: Literal["json_schema"]
    name: str
    # "schema" shadows a BaseModel attribute: the field is schema_ in Python.
    schema_: Dict[str, Any] = Field(alias="schema")
    description: Optional[str] = None
    strict: Optional[bool] = None


class OtherFormat(BaseModel):
    """A ``text.format`` of another type: refused."""
    model_config = ConfigDict(extra="allow")
    type: str = _other("text", "json_object", "json_schema")


class TextConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: Optional[Annotated[
        Union[Annotated[TextFormatText, Tag("TextFormatText")],
              Annotated[TextFormatJsonObject, Tag("TextFormatJsonObject")],
              Annotated[TextFormatJsonSchema, Tag("TextFormatJsonSchema")], Annotated[OtherFormat, Tag("OtherFormat")]],
        _discriminator({"text": "TextFormatText", "json_object": "TextFormatJsonObject",
                        "json_schema": "TextFormatJsonSchema", "*": "OtherFormat"}, None, "text.format")]] = None
    verbosity: Optional[Literal["low", "medium", "high"]] = None


_REFUSED = "Not supported by this server: a 400 unless absent or null."
_EXTENSION = "ngramspec's extension, as on /v1/chat/completions."


class ResponsesRequest(BaseModel):
    """``POST /v1/responses``: OpenAI's ``ResponseCreateParams``, the fields this server
    serves, the hints it accepts (and has no use for), and those it refuses."""
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"input": "What is the capital of France?", "instructions": "Answer in one word.",
         "max_output_tokens": 16}]})

    model: Optional[str] = None
    input: Annotated[Union[Annotated[str, Tag("Text")], Annotated[List[InputItem], Field(min_length=1), Tag("List")]],
                     Discriminator(_text_or_list)] = Field(
        description="A string (one user message), or a list of items: messages (roles user, assistant, system, "
                    "developer), function_call and function_call_output items.")
    instructions: Optional[str] = Field(default=None, description="A system message put before the input.")
    max_output_tokens: Optional[int] = Field(default=None, ge=1)
    temperature: Optional[float] = Field(default=None, ge=0.0, le=2.0,
                                         description="Default: /v1/chat/completions' (0.8).")
    top_p: Optional[float] = Field(default=None, ge=0.0, le=1.0,
                                   description="Default: /v1/chat/completions' (0.95).")
    stream: Optional[bool] = False
    tools: Optional[List[Tool]] = Field(default=None, description="Function tools (built-in tools are refused).")
    tool_choice: Optional[Union[Literal["none", "auto", "required"], ToolChoiceObject]] = None
    parallel_tool_calls: Optional[bool] = None
    max_tool_calls: Optional[int] = Field(default=None, ge=1, description="Not enforced: a forced call is one call.")
    text: Optional[TextConfig] = None
    # Accepted; they change nothing here (nothing is stored: `store` is answered false).
    store: Optional[bool] = None
    metadata: Optional[Dict[str, str]] = None
    user: Optional[str] = None
    safety_identifier: Optional[str] = None
    prompt_cache_key: Optional[str] = None
    prompt_cache_retention: Optional[str] = None
    prompt_cache_options: Optional[Dict[str, Any]] = None
    service_tier: Optional[str] = None
    stream_options: Optional[Dict[str, Any]] = None
    include: Optional[List[str]] = Field(default=None, description="Only reasoning.encrypted_content, which "
                                                                   "this server's answers never need.")
    truncation: Optional[Literal["auto", "disabled"]] = Field(default=None, description="Only disabled.")
    # Refused when given (server/responses.py says why).
    previous_response_id: Optional[str] = Field(default=None, description=_REFUSED)
    conversation: Optional[Any] = Field(default=None, description=_REFUSED)
    background: Optional[bool] = Field(default=None, description="Only false.")
    prompt: Optional[Any] = Field(default=None, description=_REFUSED)
    reasoning: Optional[Any] = Field(default=None, description=_REFUSED)
    top_logprobs: Optional[int] = Field(default=None, description="Only 0.")
    context_management: Optional[Any] = Field(default=None, description=_REFUSED)
    moderation: Optional[Any] = Field(default=None, description=_REFUSED)
    access_programs: Optional[Any] = Field(default=None, description=_REFUSED)
    image: Optional[Any] = Field(default=None, description=_REFUSED)
    background_options: Optional[Any] = Field(default=None, description=_REFUSED)
    # llama.cpp's sampling, as the chat route takes it.
    seed: Optional[int] = Field(default=None, description=_EXTENSION)
    stop: Optional[Union[str, List[str]]] = Field(default=None, description=_EXTENSION)
    top_k: Optional[int] = Field(default=None, description=_EXTENSION)
    min_p: Optional[float] = Field(default=None, description=_EXTENSION)


# --- the response, as /openapi.json documents it ------------------------------------------------

class OutputText(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["output_text"]
    text: str
    annotations: List[Any]


class OutputMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["message"]
    id: str
    role: Literal["assistant"]
    status: Literal["in_progress", "completed", "incomplete"]
    content: List[OutputText]


class OutputFunctionCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function_call"]
    id: str
    call_id: str
    name: str
    arguments: str
    status: Literal["in_progress", "completed", "incomplete"]


class Usage(BaseModel):
    model_config = ConfigDict(extra="allow")
    input_tokens: int
    input_tokens_details: Dict[str, int]
    output_tokens: int
    output_tokens_details: Dict[str, int]
    total_tokens: int


class ResponseObject(BaseModel):
    """OpenAI's ``Response``, plus ``timings`` and ``speculative`` as on the chat route."""
    model_config = ConfigDict(extra="allow")
    id: str
    object: Literal["response"]
    created_at: float
    status: Literal["completed", "incomplete", "failed", "in_progress"]
    model: str
    output: List[Annotated[Union[OutputMessage, OutputFunctionCall], Field(discriminator="type")]]
    usage: Optional[Usage] = None
    error: Optional[Dict[str, Any]] = None
    incomplete_details: Optional[Dict[str, Any]] = None
    instructions: Optional[str] = None
    max_output_tokens: Optional[int] = None
    parallel_tool_calls: bool
    tool_choice: Any
    tools: List[Any]
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    text: Optional[Dict[str, Any]] = None
    timings: Optional[Dict[str, Any]] = None
    speculative: Optional[Dict[str, Any]] = None
