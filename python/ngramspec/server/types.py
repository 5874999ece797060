"""Request types: llama-cpp-python's (``llama_cpp.server.types``), plus OpenAI fields
it drops or checks loosely."""
# Pydantic evaluates these annotations at run time, where Python 3.9 has no
# `X | None`: this module keeps typing's Optional / List throughout.
# ruff: noqa: UP006, UP007, UP035, UP045
from __future__ import annotations

from typing import List, Literal, Optional, Union

from llama_cpp.server.types import CreateChatCompletionRequest, CreateCompletionRequest
from pydantic import BaseModel, ConfigDict, Field

from ngramspec.server.messages import ChatMessage, ResponseFormat

__all__ = ["NOT_KWARGS", "ChatCompletionRequest", "CompletionRequest", "Prediction", "PredictionText",
           "StreamOptions"]


class PredictionText(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]
    text: str


class Prediction(BaseModel):
    """OpenAI predicted outputs: ``{"type": "content", "content": str | [{"type": "text", "text": str}]}``."""
    model_config = ConfigDict(extra="forbid")
    type: Literal["content"]
    content: Union[str, List[PredictionText]]


class StreamOptions(BaseModel):
    include_usage: bool = False


# Every field of llama-cpp-python's request types keeps its default there (repeat_penalty's
# 1.1 included): the same request gives the same text from both servers
# (tests/server/test_request_defaults.py fails on any drift).
# llama-cpp-python's request types have no typical_p (their create_completion does):
# without the field, a request's typical_p was dropped without a word.
_TYPICAL_P = "Locally typical sampling (llama.cpp's typical_p), in (0, 1]; 1.0 = off."


class CompletionRequest(CreateCompletionRequest):
    max_tokens: Optional[int] = Field(default=16, ge=1, description="The maximum number of tokens to generate.")
    typical_p: float = Field(default=1.0, gt=0.0, le=1.0, description=_TYPICAL_P)
    prediction: Optional[Prediction] = None
    stream_options: Optional[StreamOptions] = None


class ChatCompletionRequest(CreateChatCompletionRequest):
    # OpenAI's message shapes (content parts, null content with tool_calls, tool messages),
    # which llama-cpp-python's types refuse: server/messages.py makes them renderable.
    messages: List[ChatMessage] = Field(  # type: ignore[assignment]
        min_length=1, description="A list of messages to generate completions for.")
    response_format: Optional[ResponseFormat] = Field(  # type: ignore[assignment]
        default=None, description="OpenAI's text, json_object or json_schema format (llama-cpp-python's json_object "
                                  "with a schema too).")
    max_tokens: Optional[int] = Field(default=None, ge=1, description="OpenAI's older name of max_completion_tokens.")
    max_completion_tokens: Optional[int] = Field(default=None, ge=1)
    typical_p: float = Field(default=1.0, gt=0.0, le=1.0, description=_TYPICAL_P)
    prediction: Optional[Prediction] = None
    stream_options: Optional[StreamOptions] = None


# Fields of the request that are not keyword arguments of create_completion /
# create_chat_completion.
NOT_KWARGS = {"n", "best_of", "logit_bias_type", "user", "min_tokens", "prediction", "stream_options",
              "max_completion_tokens"}
