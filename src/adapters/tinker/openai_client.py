"""The client of the Tinker OpenAI-compatible server (ART 0.5.23's `art.tinker.client` names):
an `openai.AsyncOpenAI` whose `models` can also `put` an alias, and whose
`messages_and_choices.with_logprobs(...)` scores an existing conversation's choices. Each has
the SDK's `with_raw_response` and `with_streaming_response` wrappers, built from the openai
SDK's own (so their behaviour is the SDK's)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cached_property
from typing import Any, TypeAlias, cast

from openai import AsyncOpenAI, BaseModel, Timeout, _legacy_response
from openai._base_client import make_request_options
from openai._resource import AsyncAPIResource
from openai._response import async_to_streamed_response_wrapper
from openai._types import Body, Headers, NotGiven, Query, not_given
from openai._utils import path_template
from openai.resources.models import (
    AsyncModels,
    AsyncModelsWithRawResponse,
    AsyncModelsWithStreamingResponse,
)
from openai.types import Model
from openai.types.chat.chat_completion import Choice
from openai.types.completion_usage import CompletionUsage
from pydantic import ValidationError

from ...core.chat_types import Message, MessageOrChoice, Tools
from ...core.errors import InvalidInputError
from .openai_wire import WireMessageOrChoice

__all__ = [
    "MessagesAndChoicesWithLogprobs",
    "ParsedMessageOrChoice",
    "ParsedMessagesAndChoices",
    "TinkerAsyncMessagesAndChoices",
    "TinkerAsyncMessagesAndChoicesWithRawResponse",
    "TinkerAsyncMessagesAndChoicesWithStreamingResponse",
    "TinkerAsyncModels",
    "TinkerAsyncModelsWithRawResponse",
    "TinkerAsyncModelsWithStreamingResponse",
    "TinkerAsyncOpenAI",
]

ParsedMessageOrChoice: TypeAlias = Choice | Message
ParsedMessagesAndChoices: TypeAlias = list[ParsedMessageOrChoice]


def _wire(item: MessageOrChoice | Any) -> dict[str, Any]:
    """A message as it is (the server validates it) or a Choice (every field, the extra ones
    such as `token_ids` included) as JSON."""
    if isinstance(item, dict):
        if not isinstance(item.get("role"), str):
            raise InvalidInputError(f"a message needs a role, got {item!r}")
        return dict(item)
    to_dict = getattr(item, "to_dict", None)
    if not callable(to_dict):
        raise InvalidInputError(
            f"messages_and_choices holds a {type(item).__name__}; each item must be a message "
            "dict or an OpenAI Choice"
        )
    return cast(dict[str, Any], to_dict())


class MessagesAndChoicesWithLogprobs(BaseModel):
    """The scored conversation: each choice's token logprob entries carry
    `extra_logprobs[{model}]`; one usage per model. Messages come back as plain dicts."""

    messages_and_choices: list[WireMessageOrChoice]
    usages: list[CompletionUsage]

    @classmethod
    def construct(  # openai's own signature
        cls, _fields_set: set[str] | None = None, **values: object
    ) -> MessagesAndChoicesWithLogprobs:
        """The openai client builds a response with `construct`, whose union handling
        validates a message dict as OpenAI's TypedDicts (one-shot iterators in its iterable
        fields); validating the answer keeps each message the dict it came as."""
        try:
            return cls.model_validate(values)
        except ValidationError:  # not the expected shape: build it loosely, as openai does
            return super().construct(_fields_set, **values)


class TinkerAsyncModels(AsyncModels):
    """`client.models`, plus `put(name, target=path)`: add or re-point an alias."""

    @cached_property
    def with_raw_response(self) -> TinkerAsyncModelsWithRawResponse:
        return TinkerAsyncModelsWithRawResponse(self)

    @cached_property
    def with_streaming_response(self) -> TinkerAsyncModelsWithStreamingResponse:
        return TinkerAsyncModelsWithStreamingResponse(self)

    async def put(
        self,
        model: str,
        *,
        target: str,
        extra_headers: Headers | None = None,
        extra_query: Query | None = None,
        extra_body: Body | None = None,
        timeout: float | Timeout | NotGiven | None = not_given,  # noqa: ASYNC109 (openai's)
    ) -> Model:
        if not model:
            raise InvalidInputError(f"model must be a non-empty alias, got {model!r}")
        options = make_request_options(
            extra_headers=extra_headers,
            extra_query=extra_query,
            extra_body=extra_body,
            timeout=timeout,
        )
        return await self._put(  # the alias percent-encoded, as retrieve and delete do it
            path_template("/models/{model}", model=model),
            body={"target": target},
            options=options,
            cast_to=Model,
        )


class TinkerAsyncModelsWithRawResponse(AsyncModelsWithRawResponse):
    """The SDK's raw-response models (retrieve, list, delete), and `put`."""

    def __init__(self, models: TinkerAsyncModels) -> None:
        super().__init__(models)
        self.put = _legacy_response.async_to_raw_response_wrapper(models.put)


class TinkerAsyncModelsWithStreamingResponse(AsyncModelsWithStreamingResponse):
    """The SDK's streaming-response models (retrieve, list, delete), and `put`."""

    def __init__(self, models: TinkerAsyncModels) -> None:
        super().__init__(models)
        self.put = async_to_streamed_response_wrapper(models.put)


class TinkerAsyncMessagesAndChoices(AsyncAPIResource):
    """`client.messages_and_choices.with_logprobs(conversation, models=[...], tools=...)`."""

    @cached_property
    def with_raw_response(self) -> TinkerAsyncMessagesAndChoicesWithRawResponse:
        return TinkerAsyncMessagesAndChoicesWithRawResponse(self)

    @cached_property
    def with_streaming_response(self) -> TinkerAsyncMessagesAndChoicesWithStreamingResponse:
        return TinkerAsyncMessagesAndChoicesWithStreamingResponse(self)

    async def with_logprobs(
        self,
        messages_and_choices: Iterable[MessageOrChoice],
        *,
        models: Iterable[str],
        model_aliases: Mapping[str, str] | None = None,
        tools: Tools | None,
        extra_headers: Headers | None = None,
        extra_query: Query | None = None,
        extra_body: Body | None = None,
        timeout: float | Timeout | NotGiven | None = not_given,  # noqa: ASYNC109 (openai's)
    ) -> MessagesAndChoicesWithLogprobs:
        body = {
            "messages_and_choices": [_wire(item) for item in messages_and_choices],
            "models": list(models),
            "model_aliases": dict(model_aliases or {}),
            "tools": tools,
        }
        options = make_request_options(
            extra_headers=extra_headers,
            extra_query=extra_query,
            extra_body=extra_body,
            timeout=timeout,
        )
        return await self._post(
            "/messages_and_choices/with_logprobs",
            body=body,
            options=options,
            cast_to=MessagesAndChoicesWithLogprobs,
        )


class TinkerAsyncMessagesAndChoicesWithRawResponse:
    def __init__(self, messages_and_choices: TinkerAsyncMessagesAndChoices) -> None:
        self._messages_and_choices = messages_and_choices
        self.with_logprobs = _legacy_response.async_to_raw_response_wrapper(
            messages_and_choices.with_logprobs
        )


class TinkerAsyncMessagesAndChoicesWithStreamingResponse:
    def __init__(self, messages_and_choices: TinkerAsyncMessagesAndChoices) -> None:
        self._messages_and_choices = messages_and_choices
        self.with_logprobs = async_to_streamed_response_wrapper(messages_and_choices.with_logprobs)


class TinkerAsyncOpenAI(AsyncOpenAI):
    """An AsyncOpenAI for the Tinker server: `api_key` is your Tinker API key, `base_url`
    the server's `http://host:port/v1`."""

    @cached_property
    def models(self) -> TinkerAsyncModels:
        return TinkerAsyncModels(self)

    @cached_property
    def messages_and_choices(self) -> TinkerAsyncMessagesAndChoices:
        return TinkerAsyncMessagesAndChoices(self)
