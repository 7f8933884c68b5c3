"""The data model of ART's `art.trajectories` beyond a trajectory itself: the request bodies per
API, the recorded calls of the three APIs arthex does not train from (legacy completions, the
Responses API, Anthropic's Messages API), and the per-protocol histories with the sources that
say which recorded call each message came from.

The JSON shape is ART's, so a history or exchange ART dumped validates here and one dumped
here validates in ART. The chat-completion call is arthex's own record
(`core.exchanges.ChatCompletionsExchange`); a trajectory keeps the other three APIs' records
as the JSON it read (`TrajectoryExchanges`), and the classes below validate such a record when
a caller wants it typed (`CompletionsExchange.model_validate(trajectory.exchanges.completions[0])`).

Where ART skips validation (message lists, tools, request bodies) arthex asks for the JSON
container they always are (a list of objects, an object), so a wrong value is refused when
read instead of failing later.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import IntFlag
from typing import Any, Literal, Protocol, TypeAlias

from openai.types import Completion
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from openai.types.responses import Response, ResponseInputParam
from openai.types.responses import ToolParam as ResponsesToolParam
from openai.types.responses.response_create_params import Conversation as ResponsesConversation
from pydantic import (
    BaseModel,
    ConfigDict,
    JsonValue,
    SerializationInfo,
    StrictInt,
    computed_field,
    field_serializer,
    field_validator,
    model_validator,
)
from typing_extensions import TypedDict

from ..core.chat_types import Messages, MessagesAndChoices, as_message
from ..core.exchanges import ChatCompletionsExchange, SequenceHistory, TrajectoryExchanges
from ..core.trajectories import History as LegacyHistory
from ..core.trajectories import Trajectory, TrajectoryGroup

JsonObject: TypeAlias = dict[str, Any]

# -- request bodies ----------------------------------------------------------------------------


class ChatCompletionsRequest(TypedDict, total=False, extra_items=Any):  # type: ignore[call-arg]
    """The JSON body of a Chat Completions call; any other key the server takes is kept."""

    model: str
    messages: list[ChatCompletionMessageParam]
    stream: bool
    tools: list[ChatCompletionToolParam]
    max_completion_tokens: int
    max_tokens: int
    temperature: float
    top_p: float
    logprobs: bool
    top_logprobs: int
    chat_template: str
    chat_template_kwargs: dict[str, Any]


class CompletionsRequest(TypedDict, total=False, extra_items=Any):  # type: ignore[call-arg]
    """The JSON body of a legacy Completions call."""

    model: str
    prompt: str | list[str] | list[int] | list[list[int]]
    stream: bool
    max_tokens: int
    temperature: float
    top_p: float
    logprobs: int
    echo: bool
    stop: str | list[str]
    seed: int
    suffix: str


class ResponsesRequest(TypedDict, total=False, extra_items=Any):  # type: ignore[call-arg]
    """The JSON body of a Responses API call."""

    model: str
    input: str | ResponseInputParam
    instructions: str
    previous_response_id: str
    conversation: ResponsesConversation
    stream: bool
    tools: list[ResponsesToolParam]
    max_output_tokens: int
    temperature: float
    top_p: float
    chat_template: str
    chat_template_kwargs: dict[str, Any]


class MessagesRequest(TypedDict, total=False, extra_items=Any):  # type: ignore[call-arg]
    """The JSON body of an Anthropic Messages call (the anthropic SDK's param types are not
    a dependency of arthex: messages, system blocks, tools and thinking are JSON objects)."""

    model: str
    messages: list[JsonObject]
    max_tokens: int
    stream: bool
    system: str | list[JsonObject]
    tools: list[JsonObject]
    thinking: JsonObject
    temperature: float
    top_p: float
    top_k: int
    stop_sequences: list[str]
    chat_template: str
    chat_template_kwargs: dict[str, Any]


# -- the recorded calls of the other three APIs ------------------------------------------------


class _RecordedCall(BaseModel):
    """What the four exchange kinds share: times (UTC), the request body as sent, and the
    served model's name, which the request names (the response's, where it does not). ART
    writes that name into its dumps; it is derived, so it is dropped on read."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    start_time: datetime
    end_time: datetime
    request: JsonObject

    @model_validator(mode="before")
    @classmethod
    def _drop_derived_model(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "model" in data:
            return {key: value for key, value in data.items() if key != "model"}
        return data

    @field_validator("start_time", "end_time")
    @classmethod
    def _as_utc(cls, value: datetime) -> datetime:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    def _response_model(self) -> str | None:
        raise NotImplementedError

    @computed_field  # type: ignore[prop-decorator]
    @property
    def model(self) -> str | None:
        """The served model's name: the request's `model`, else the response's."""
        requested = self.request.get("model")
        return requested if isinstance(requested, str) else self._response_model()


class CompletionsExchange(_RecordedCall):
    """One legacy Completions call."""

    response: Completion

    def _response_model(self) -> str | None:
        return self.response.model


class ResponsesExchange(_RecordedCall):
    """One Responses API call; the response is written back with only the fields the
    provider sent (an omitted field and an explicit null both survive a round trip)."""

    response: Response

    @field_serializer("response")
    def _as_sent(self, response: Response, info: SerializationInfo) -> Any:
        return response.model_dump(mode=info.mode, exclude_unset=True, by_alias=info.by_alias)

    def _response_model(self) -> str | None:
        return self.response.model


# The fields every Anthropic Messages reply has, and their JSON types.
_MESSAGE_FIELDS: tuple[tuple[str, type], ...] = (
    ("id", str),
    ("type", str),
    ("role", str),
    ("model", str),
    ("content", list),
    ("usage", dict),
)
_JSON_NAMES: dict[type, str] = {str: "string", list: "array", dict: "object"}


class MessagesExchange(_RecordedCall):
    """One Anthropic Messages call. The response is kept as the JSON object it was read as
    (the anthropic SDK is not a dependency of arthex), checked for the fields every Messages
    reply has."""

    response: JsonObject

    @field_validator("response")
    @classmethod
    def _is_a_message(cls, response: JsonObject) -> JsonObject:
        for key, kind in _MESSAGE_FIELDS:
            if not isinstance(response.get(key), kind):
                raise ValueError(
                    f"an Anthropic Messages response needs {key!r} as a JSON "
                    f"{_JSON_NAMES[kind]}; got {response.get(key)!r}"
                )
        if response["type"] != "message" or response["role"] != "assistant":
            raise ValueError(
                "an Anthropic Messages response has type 'message' and role 'assistant'; got "
                f"type {response['type']!r}, role {response['role']!r}"
            )
        return response

    def _response_model(self) -> str | None:
        model = self.response.get("model")
        return model if isinstance(model, str) else None


# -- where a history's items came from ---------------------------------------------------------


class _Source(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ChatCompletionsMessageSource(_Source):
    """A chat message's origin: item `request_index` of the call's request, or the reply of
    choice `choice_index` (a Responses or Messages call converted to chat form names its
    `output_indices` and `generation_index`)."""

    exchange: ChatCompletionsExchange | MessagesExchange | ResponsesExchange
    request_index: StrictInt | None = None
    choice_index: StrictInt | None = None
    output_indices: tuple[StrictInt, ...] | None = None
    generation_index: StrictInt | None = None


class AnthropicMessageSource(_Source):
    """An Anthropic message's origin: item `request_index` of the request, or (None) the
    reply."""

    exchange: MessagesExchange
    request_index: StrictInt | None = None


class ResponsesItemSource(_Source):
    """A Responses input item's origin: item `request_index` of the request's input, or item
    `output_index` of the response's output (of generation `generation_index`)."""

    exchange: ResponsesExchange
    request_index: StrictInt | None = None
    output_index: StrictInt | None = None
    generation_index: StrictInt | None = None


class CompletionsSource(_Source):
    """A legacy completion's prompt `prompt_index`, or its choice `choice_index`."""

    exchange: CompletionsExchange
    prompt_index: StrictInt
    choice_index: StrictInt | None = None


class CompletionsTokenSourceSpan(_Source):
    """Tokens `start:end` of a token prompt, and where they came from (None: unknown)."""

    start: StrictInt
    end: StrictInt
    source: CompletionsSource | None


class CompletionsStringSourceSpan(_Source):
    """Characters `start:end` of a string prompt, and where they came from (None: unknown)."""

    start: StrictInt
    end: StrictInt
    source: CompletionsSource | None


# -- the per-protocol histories ----------------------------------------------------------------


def _not_chat(history: SequenceHistory) -> ValueError:
    return ValueError(f"{type(history).__name__} cannot be represented as Chat Completions")


class ChatCompletionsHistory(SequenceHistory):
    """One chat conversation as a model saw it: its messages, where each came from (None: not
    from a recorded call), and the tools and chat template it was rendered with."""

    model: str | None
    messages: list[JsonObject]
    message_sources: list[ChatCompletionsMessageSource | None]
    tools: list[JsonObject] | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    def as_chat_completions_history(self) -> ChatCompletionsHistory:
        return self


class AnthropicMessagesHistory(SequenceHistory):
    """One Anthropic Messages conversation with its system prompt and tools."""

    model: str
    messages: list[JsonObject]
    message_sources: list[AnthropicMessageSource | None]
    system: str | list[JsonObject] | None = None
    system_source: MessagesExchange | None = None
    tools: list[JsonObject] | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    def as_chat_completions_history(self) -> ChatCompletionsHistory:
        """This conversation in chat form (`as_chat_history`)."""
        return as_chat_history(self)


class ResponsesHistory(SequenceHistory):
    """One Responses API conversation: its input items, instructions and tools."""

    model: str
    input: list[JsonObject]
    input_sources: list[ResponsesItemSource | None]
    instructions: str | None = None
    instructions_source: ResponsesExchange | None = None
    tools: list[JsonObject] | None = None
    conversation: str | JsonObject | None = None
    previous_response_id: str | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    def as_chat_completions_history(self) -> ChatCompletionsHistory:
        raise _not_chat(self)


class CompletionsTokenHistory(SequenceHistory):
    """A legacy-completions token sequence: the prompt's token ids, their sources and the
    sampled `(start, end)` spans."""

    model: str
    prompt: list[int]
    prompt_sources: list[CompletionsTokenSourceSpan]
    sampled_spans: list[tuple[int, int]]

    def as_chat_completions_history(self) -> ChatCompletionsHistory:
        raise ValueError("Raw Completions history has no chat-message structure")


class CompletionsStringHistory(SequenceHistory):
    """A legacy-completions text sequence: the prompt string, its sources and the sampled
    `(start, end)` character spans."""

    model: str
    prompt: str
    prompt_sources: list[CompletionsStringSourceSpan]
    sampled_spans: list[tuple[int, int]]

    def as_chat_completions_history(self) -> ChatCompletionsHistory:
        raise ValueError("Raw Completions history has no chat-message structure")


TrajectoryHistory: TypeAlias = (
    LegacyHistory
    | ChatCompletionsHistory
    | AnthropicMessagesHistory
    | ResponsesHistory
    | CompletionsTokenHistory
    | CompletionsStringHistory
)

# -- tokens and the compact envelope -----------------------------------------------------------


class Tokenizer(Protocol):
    """What trajectory tokenization calls on a tokenizer (a transformers tokenizer fits)."""

    def __call__(self, *args: Any, **kwargs: Any) -> object: ...

    def apply_chat_template(self, *args: Any, **kwargs: Any) -> object: ...


class TokenFlag(IntFlag):
    """Facts about one token of a tokenized history; they combine.

    EXACT: the id came from the server, not from tokenizing text; SAMPLED: the server sampled
    it (so also EXACT and OUTPUT); ASSISTANT: inside a rendered assistant turn; STOP: part of
    a stop token or sequence; OUTPUT: taken from a response; RAW_LOGPROBS and
    PROCESSED_LOGPROBS: which logprobs the server reported (neither: unknown)."""

    EXACT = 1 << 0
    SAMPLED = 1 << 1
    ASSISTANT = 1 << 2
    STOP = 1 << 3
    OUTPUT = 1 << 4
    RAW_LOGPROBS = 1 << 5
    PROCESSED_LOGPROBS = 1 << 6


CompactTrajectoryKind: TypeAlias = Literal[
    "trajectory",
    "trajectories",
    "trajectory_group",
    "trajectory_groups",
    "tokenized_history",
    "tokenized_histories",
    "tokenized_trajectory",
    "tokenized_trajectories",
    "tokenized_multi_history_trajectory",
    "tokenized_multi_history_trajectories",
    "tokenized_trajectory_group",
    "tokenized_trajectory_groups",
    "tensorized_history",
    "tensorized_histories",
    "tensorized_trajectory",
    "tensorized_trajectories",
    "tensorized_multi_history_trajectory",
    "tensorized_multi_history_trajectories",
    "tensorized_trajectory_group",
    "tensorized_trajectory_groups",
]


class CompactTrajectoryPayload(TypedDict):
    """ART's versioned compact envelope: `data` is ordinary JSON in which strings worth
    sharing are replaced by references (`"$0"`) into `strings`."""

    format: Literal["art.trajectories"]
    version: Literal[1]
    kind: CompactTrajectoryKind
    strings: dict[str, str]
    data: JsonValue


def get_messages(messages_and_choices: MessagesAndChoices) -> Messages:
    """A legacy conversation as plain chat messages: a Choice becomes the assistant message an
    agent appends, and a missing content is ""."""
    return [as_message(item) for item in messages_and_choices]


CompactDumpable: TypeAlias = Trajectory | TrajectoryGroup
"""What ART's compact dump takes that arthex has: trajectories and groups (arthex has no
tokenized or tensorized trajectory types)."""

__all__ = [
    "AnthropicMessageSource",
    "AnthropicMessagesHistory",
    "ChatCompletionsExchange",
    "ChatCompletionsHistory",
    "ChatCompletionsMessageSource",
    "ChatCompletionsRequest",
    "CompactDumpable",
    "CompactTrajectoryKind",
    "CompactTrajectoryPayload",
    "CompletionsExchange",
    "CompletionsRequest",
    "CompletionsSource",
    "CompletionsStringHistory",
    "CompletionsStringSourceSpan",
    "CompletionsTokenHistory",
    "CompletionsTokenSourceSpan",
    "MessagesExchange",
    "MessagesRequest",
    "ResponsesExchange",
    "ResponsesHistory",
    "ResponsesItemSource",
    "ResponsesRequest",
    "TokenFlag",
    "Tokenizer",
    "TrajectoryExchanges",
    "TrajectoryHistory",
    "get_messages",
]


# -- an Anthropic Messages history in chat form ----------------------------------------------


def as_chat_history(history: AnthropicMessagesHistory) -> ChatCompletionsHistory:
    """An Anthropic Messages history in chat form, as ART converts it: the system prompt as a
    system message, each message's text blocks as its content, thinking as `reasoning`,
    tool_use blocks as tool calls and each tool_result as a tool message; every converted
    message keeps its message's source (a reply's as output 0). Tools become function tools."""
    messages: list[dict[str, Any]] = []
    sources: list[ChatCompletionsMessageSource | None] = []
    if history.system:
        messages.append({"role": "system", "content": _text(history.system)})
        source = history.system_source
        sources.append(None if source is None else ChatCompletionsMessageSource(exchange=source))
    for message, origin in zip(history.messages, history.message_sources, strict=True):
        converted = _as_chat_messages(message)
        messages.extend(converted)
        chat_source = (
            None
            if origin is None
            else ChatCompletionsMessageSource(
                exchange=origin.exchange,
                request_index=origin.request_index,
                output_indices=(0,) if origin.request_index is None else None,
            )
        )
        sources.extend([chat_source] * len(converted))
    return ChatCompletionsHistory(
        model=history.model,
        messages=messages,
        message_sources=sources,
        tools=_function_tools(history.tools),
        chat_template=history.chat_template,
        chat_template_kwargs=copy.deepcopy(history.chat_template_kwargs),
    )


def _text(content: object) -> str:
    """The text of a content value: a string, or its text blocks joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        block["text"]
        for block in content
        if isinstance(block, Mapping)
        and block.get("type") in ("input_text", "output_text", "text")
        and isinstance(block.get("text"), str)
    )


def _as_chat_messages(raw: Mapping[str, Any]) -> list[dict[str, Any]]:
    role = raw.get("role", "user")
    content = raw.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    out: list[dict[str, Any]] = []
    text = reasoning = ""
    calls: list[dict[str, Any]] = []
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text":
            text += str(block.get("text") or "")
        elif kind == "thinking":
            reasoning += str(block.get("thinking") or "")
        elif kind == "tool_use":
            arguments = json.dumps(block.get("input") or {})
            calls.append(
                {
                    "id": block.get("id"),
                    "type": "function",
                    "function": {"name": block.get("name"), "arguments": arguments},
                }
            )
        elif kind == "tool_result":
            if text:
                out.append({"role": role, "content": text})
                text = ""
            result = block.get("content", "")
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": block.get("tool_use_id", block.get("id")),
                    "content": result if isinstance(result, str) else _text(result),
                }
            )
        else:
            raise ValueError(f"Unsupported Anthropic content block type: {kind!r}")
    message: dict[str, Any] = {"role": role, "content": text}
    if reasoning:
        message["reasoning"] = reasoning
    if calls:
        message["tool_calls"] = calls
    if text or reasoning or calls or role == "assistant":
        out.append(message)
    return out


def _function_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Anthropic tools as chat function tools (a non-function tool is kept as it is)."""
    if tools is None:
        return None
    converted = []
    for tool in tools:
        if tool.get("type", "function") != "function":
            converted.append(tool)
            continue
        function = {
            "name": tool.get("name"),
            "description": tool.get("description"),
            "parameters": tool.get("input_schema", {}),
        }
        converted.append(
            {
                "type": "function",
                "function": {key: value for key, value in function.items() if value is not None},
            }
        )
    return converted
