"""LangGraph rollouts: a LangChain chat model bound to the rollout's model, and a wrapper that
turns the calls it made into the rollout's trajectory.

```python
async def rollout(scenario) -> Trajectory:
    llm = init_chat_model()                       # ChatOpenAI on the model's endpoint
    agent = create_react_agent(llm, tools)
    await agent.ainvoke({"messages": [("user", scenario.question)]})
    return Trajectory(reward=grade(...))

trajectory = await wrap_rollout(model, rollout)(scenario)
```

The calls are recorded by arthex's capture (at the HTTP client, with the token ids the server
sampled), not rebuilt from LangChain's messages: the trajectory `wrap_rollout` returns holds
them as exchanges, which train exactly what was sampled. The chat model asks for logprobs by
default, as training needs them (`init_chat_model(logprobs=False)` turns that off).

Needs `langchain-openai` (the `langgraph` extra).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import attrs
from openai.types.chat import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionDeveloperMessageParam,
    ChatCompletionFunctionMessageParam,
    ChatCompletionMessageParam,
    ChatCompletionSystemMessageParam,
    ChatCompletionToolMessageParam,
    ChatCompletionUserMessageParam,
)

from ..core.errors import InvalidInputError, MissingExtraError
from ..core.trajectories import Trajectory
from .capture import capture

try:
    from langchain_core.messages import BaseMessage
    from langchain_core.runnables import Runnable
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langchain_openai import ChatOpenAI
except ImportError as error:
    raise MissingExtraError(error.name or "langchain-openai", "langgraph") from error

if TYPE_CHECKING:
    from openai.types.chat.chat_completion import Choice

    from ..core.model import Model

DEFAULT_INVOKE_TIMEOUT = 600.0
"""Seconds one call of the chat model may take before `ainvoke` gives up (None: no limit)."""

OPENAI_COMPATIBLE_PROVIDERS = frozenset({None, "openai", "openai-compatible", "openai_compatible"})
"""The `model_provider` values `init_chat_model` builds a ChatOpenAI for."""


@attrs.frozen
class _Endpoint:
    base_url: str
    api_key: str
    model: str


_ROLLOUT: contextvars.ContextVar[_Endpoint] = contextvars.ContextVar("arthex_langgraph_rollout")


def _endpoint_of(model: Model) -> _Endpoint:
    base_url = getattr(model, "inference_base_url", None)
    api_key = getattr(model, "inference_api_key", None)
    if not base_url or api_key is None:
        raise InvalidInputError(
            f"wrap_rollout: model {getattr(model, 'name', model)!r} has no inference endpoint; "
            "register it with a backend first (await model.register(backend)) or pass "
            "inference_base_url= and inference_api_key="
        )
    name = getattr(model, "inference_model_name", None) or model.get_inference_name()
    return _Endpoint(str(base_url), str(api_key), str(name))


def _current(what: str) -> _Endpoint:
    try:
        return _ROLLOUT.get()
    except LookupError:
        raise InvalidInputError(
            f"{what} is called inside a rollout run through wrap_rollout(model, rollout); "
            "none is running here"
        ) from None


def wrap_rollout(
    model: Model, rollout: Callable[..., Awaitable[Trajectory]]
) -> Callable[..., Awaitable[Trajectory]]:
    """`rollout`, run so that `init_chat_model()` inside it talks to `model`'s endpoint and
    every chat completion sent there is recorded into the trajectory `rollout` returns.

    The returned trajectory keeps its reward, metrics and metadata; the recorded calls replace
    its hand-built conversation (`messages_and_choices`, `tools`, `additional_histories`),
    as the conversation the model saw is what trains. A rollout that made no call to the model
    returns its trajectory unchanged. If the rollout raises, the error propagates."""

    @functools.wraps(rollout)
    async def run(*args: Any, **kwargs: Any) -> Trajectory:
        endpoint = _endpoint_of(model)
        token = _ROLLOUT.set(endpoint)
        try:
            async with capture(endpoints=[endpoint.base_url]) as recorded:
                trajectory = await rollout(*args, **kwargs)
        finally:
            _ROLLOUT.reset(token)
        if not isinstance(trajectory, Trajectory):
            raise InvalidInputError(
                f"wrap_rollout: the rollout returned {type(trajectory).__name__}, not a Trajectory"
            )
        calls = recorded.exchanges.chat_completions
        if calls:
            trajectory.messages_and_choices = []
            trajectory.tools = None
            trajectory.additional_histories = []
            trajectory.exchanges.chat_completions.extend(calls)
        return trajectory

    return run


def init_chat_model(
    model: Any = None,
    *,
    model_provider: str | None = None,
    configurable_fields: None = None,
    config_prefix: str | None = None,
    invoke_timeout: float | None = DEFAULT_INVOKE_TIMEOUT,
    **kwargs: Any,
) -> RolloutChatModel:
    """A LangChain chat model for the current `wrap_rollout`'s model.

    `model`: None (the rollout model's served name), another model name on the same
    endpoint, or a LangChain chat model instance to use as it is. Other keyword arguments go
    to ChatOpenAI (`temperature` defaults to 1.0, `logprobs` to True)."""
    if configurable_fields is not None:
        raise InvalidInputError("init_chat_model: configurable_fields is not supported")
    if config_prefix is not None:
        raise InvalidInputError("init_chat_model: config_prefix is not supported")
    if model is not None and not isinstance(model, str):
        return RolloutChatModel(model, invoke_timeout=invoke_timeout)
    if model_provider not in OPENAI_COMPATIBLE_PROVIDERS:
        raise InvalidInputError(
            f"init_chat_model builds OpenAI-compatible chat models only, not provider "
            f"{model_provider!r}; pass a LangChain chat model instance as `model` instead"
        )
    factory = functools.partial(_chat_openai, model, kwargs)
    return RolloutChatModel(
        factory(_current("init_chat_model")), invoke_timeout=invoke_timeout, factory=factory
    )


def _chat_openai(name: str | None, options: Mapping[str, Any], endpoint: _Endpoint) -> Any:
    settings: dict[str, Any] = {
        "base_url": endpoint.base_url,
        "api_key": endpoint.api_key,
        "model": name or endpoint.model,
        "temperature": 1.0,
        "logprobs": True,
    }
    settings.update(options)
    return ChatOpenAI(**settings)


class RolloutChatModel(Runnable[Any, Any]):
    """A chat model inside a LangGraph rollout: LangChain's Runnable, calling the wrapped model
    (a tool call's arguments parsed to a dict; with a structured-output schema, the first tool
    call validated into it), with a time limit on `ainvoke`."""

    def __init__(
        self,
        llm: Any,
        *,
        schema: Any = None,
        tools: Sequence[Any] | None = None,
        invoke_timeout: float | None = DEFAULT_INVOKE_TIMEOUT,
        factory: Callable[[_Endpoint], Any] | None = None,
    ) -> None:
        self.llm = llm
        self.schema = schema
        self.tools = [convert_to_openai_tool(t) for t in tools] if tools else None
        self.invoke_timeout = invoke_timeout
        self.factory = factory

    def _with(self, llm: Any, *, schema: Any = None, tools: Sequence[Any] | None) -> Any:
        return RolloutChatModel(
            llm, schema=schema, tools=tools, invoke_timeout=self.invoke_timeout,
            factory=self.factory,
        )  # fmt: skip

    def _finish(self, result: Any) -> Any:
        calls = getattr(result, "tool_calls", None) or []
        for call in calls:
            if isinstance(call.get("args"), str):
                call["args"] = json.loads(call["args"])
        if self.schema is None:
            return result
        if not calls:
            raise InvalidInputError(
                f"the model answered without calling {getattr(self.schema, '__name__', 'the')} "
                "tool, so there is no structured output to read"
            )
        return self.schema.model_validate(calls[0]["args"])

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        return self._finish(self.llm.invoke(input, config=config, **kwargs))

    async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        call = self.llm.ainvoke(input, config=config, **kwargs)
        if self.invoke_timeout is None:
            return self._finish(await call)
        return self._finish(await asyncio.wait_for(call, timeout=self.invoke_timeout))

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self._with(self.llm.bind_tools(tools, **kwargs), tools=tools)

    def with_structured_output(self, schema: Any, **kwargs: Any) -> Any:
        """Structured output through a tool named after `schema` (a pydantic model), as a
        tool-calling model answers it; the answer is validated into `schema`."""
        return self._with(self.llm.bind_tools([schema], **kwargs), schema=schema, tools=[schema])

    def with_retry(self, **kwargs: Any) -> Any:
        """The model itself: a failed call is the rollout's to handle (LangGraph's retry
        policies still apply)."""
        return self

    def with_config(self, config: Any = None, **kwargs: Any) -> Any:
        """Bound to the current rollout's endpoint again (a graph built once and run in
        several rollouts); a model given as an instance gets LangChain's `with_config`."""
        if self.factory is not None:
            fresh = self.factory(_current("with_config"))
            if hasattr(self.llm, "bound"):
                self.llm.bound = fresh
            else:
                self.llm = fresh
        elif hasattr(self.llm, "with_config"):
            self.llm = self.llm.with_config(config=config, **kwargs)
        return self


# -- LangChain messages as OpenAI chat messages --------------------------------------------------

_ROLES = {
    "HumanMessage": "user",
    "AIMessage": "assistant",
    "SystemMessage": "system",
    "ToolMessage": "tool",
    "FunctionMessage": "function",
}
Message: TypeAlias = ChatCompletionMessageParam
"""An OpenAI chat message (the OpenAI SDK's type)."""

MESSAGE_PARAMS: Mapping[str, Callable[..., ChatCompletionMessageParam]] = {
    "user": ChatCompletionUserMessageParam,
    "assistant": ChatCompletionAssistantMessageParam,
    "system": ChatCompletionSystemMessageParam,
    "tool": ChatCompletionToolMessageParam,
    "function": ChatCompletionFunctionMessageParam,
    "developer": ChatCompletionDeveloperMessageParam,
}
"""Each chat role's message type in the OpenAI SDK (a TypedDict: calling it builds the dict)."""

MESSAGE_ROLES = frozenset(MESSAGE_PARAMS)


def make_message_param(role: str, **fields: Any) -> dict[str, Any]:
    """An OpenAI chat message of `role` with `fields`."""
    if role not in MESSAGE_ROLES:
        raise InvalidInputError(
            f"unsupported message role {role!r}; one of {', '.join(sorted(MESSAGE_ROLES))}"
        )
    return {"role": role, **fields}


def _role(message: BaseMessage) -> str:
    for kind in type(message).__mro__:
        if kind.__name__ in _ROLES:
            return _ROLES[kind.__name__]
    raise InvalidInputError(f"unsupported LangChain message type {type(message).__name__}")


def _openai_tool_calls(calls: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "id": call.get("id"),
            "type": "function",
            "function": {"name": call["name"], "arguments": json.dumps(call["args"])},
        }
        for call in calls
    ]


def langchain_msg_to_openai(message: BaseMessage) -> dict[str, Any]:
    """One LangChain message as an OpenAI chat message dict (an empty content as ""; tool
    calls in OpenAI's form, their arguments as JSON text)."""
    result: dict[str, Any] = {"role": _role(message), "content": message.content or ""}
    calls = getattr(message, "tool_calls", None)
    if calls:
        result["tool_calls"] = _openai_tool_calls(calls)
    for field in ("tool_call_id", "function_call"):
        value = getattr(message, field, None) or message.additional_kwargs.get(field)
        if value:
            result[field] = value
    return result


def convert_langgraph_messages(messages: Sequence[object]) -> list[dict[str, Any] | Choice]:
    """A LangGraph state's messages as `messages_and_choices`: an assistant message that
    carries logprobs (the model's answer) becomes a Choice with them, other LangChain messages
    chat message dicts, dicts stay as they are."""
    from openai.types.chat.chat_completion import Choice

    converted: list[dict[str, Any] | Choice] = []
    for message in messages:
        metadata = getattr(message, "response_metadata", None) or {}
        if isinstance(message, BaseMessage) and "logprobs" in metadata:
            calls = getattr(message, "tool_calls", None) or []
            converted.append(
                Choice.model_validate(
                    {
                        **metadata,
                        "index": 0,
                        "finish_reason": metadata.get("finish_reason") or "stop",
                        "message": {
                            "role": "assistant",
                            "content": message.content,
                            "tool_calls": _openai_tool_calls(calls) or None,
                        },
                    }
                )
            )
        elif isinstance(message, BaseMessage):
            converted.append(langchain_msg_to_openai(message))
        elif isinstance(message, dict):
            converted.append(message)
        else:
            raise InvalidInputError(f"unsupported message type {type(message).__name__}")
    return converted
