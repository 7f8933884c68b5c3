"""A whole ChatCompletion from a streamed one, under ART's names (`art.openai`).

`consume_chat_completion_stream(stream)` reads `client.chat.completions.create(...,
stream=True)` to its end and returns the ChatCompletion the same call without `stream` would
have returned: each choice's text, refusal, reasoning, tool calls and logprobs joined in
order, its last finish reason, the usage trailer (with `stream_options={"include_usage":
True}`), and the token ids a vLLM-style server streams (`prompt_token_ids` once, `token_ids`
per choice, as arthex's servers and vLLM with `return_token_ids` send them), so the result
trains like a recorded completion. A stream that ends before every choice finished, or with
no choice at all, raises `IncompleteChatCompletionStreamError`; `on_chunk(chunk, so_far)`
sees each chunk and may raise `StopIteration` to stop early (the stream is closed, the part
read is returned).

Not carried: the extras of ART's own serving stack (Dynamo's `nvext`, MoE routing, ART's
compact logprobs and policy spans): arthex's servers send none of them.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable, Iterable
from typing import Any, cast

from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice, ChoiceLogprobs
from openai.types.chat.chat_completion_chunk import Choice as ChunkChoice
from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall
from openai.types.chat.chat_completion_message import FunctionCall
from openai.types.chat.chat_completion_message_function_tool_call import (
    ChatCompletionMessageFunctionToolCall,
    Function,
)

from ..core.errors import ArthexError, InvalidInputError

__all__ = [
    "IncompleteChatCompletionStreamError",
    "consume_chat_completion_stream",
    "consume_sync_chat_completion_stream",
    "finalize_chat_completion",
    "init_chat_completion",
    "update_chat_completion",
]

OnChunk = Callable[[ChatCompletionChunk, ChatCompletion], Any]

PROMPT_TOKEN_IDS = "prompt_token_ids"
TOKEN_IDS = "token_ids"
REASONING_FIELDS = ("reasoning", "reasoning_content")


class IncompleteChatCompletionStreamError(ArthexError, ValueError):
    """A chat-completion stream ended before it held a whole completion."""


def _extra(model: Any) -> dict[str, Any]:
    # openai's models keep unknown fields; a completion built here always has the dict
    return cast(dict[str, Any], model.model_extra)


def _new_choice(streamed: ChunkChoice) -> Choice:
    return Choice(
        index=streamed.index,
        finish_reason=streamed.finish_reason or "stop",
        logprobs=ChoiceLogprobs() if streamed.logprobs else None,
        message=ChatCompletionMessage(role="assistant"),
    )


def init_chat_completion(chunk: ChatCompletionChunk) -> ChatCompletion:
    """An empty completion shaped by the stream's first chunk: its id, model, creation time
    and one empty assistant choice per choice in it (fill it with `update_chat_completion`)."""
    return ChatCompletion(
        id=chunk.id,
        created=chunk.created,
        model=chunk.model,
        object="chat.completion",
        choices=[_new_choice(choice) for choice in chunk.choices],
    )


def _joined(current: str | None, piece: str | None) -> str | None:
    return current if piece is None else (current or "") + piece


def _add_tool_calls(message: ChatCompletionMessage, deltas: list[ChoiceDeltaToolCall]) -> None:
    calls = message.tool_calls if message.tool_calls is not None else []
    message.tool_calls = calls
    for delta in deltas:
        if delta.index < 0:
            raise InvalidInputError(f"a streamed tool call's index must be >= 0, got {delta.index}")
        while len(calls) <= delta.index:
            calls.append(
                ChatCompletionMessageFunctionToolCall(
                    id="", type="function", function=Function(name="", arguments="")
                )
            )
        call = calls[delta.index]
        if not isinstance(call, ChatCompletionMessageFunctionToolCall):
            raise InvalidInputError(f"tool call {delta.index} is not a function call")
        call.id += delta.id or ""
        if delta.function is not None:
            call.function.name += delta.function.name or ""
            call.function.arguments += delta.function.arguments or ""


def _add_choice(choice: Choice, streamed: ChunkChoice) -> None:
    extra = _extra(choice)
    sampled = getattr(streamed, TOKEN_IDS, None)
    if sampled:
        extra[TOKEN_IDS] = [*extra.get(TOKEN_IDS, []), *sampled]
    if streamed.finish_reason is not None:
        choice.finish_reason = streamed.finish_reason
    if streamed.logprobs:
        logprobs = choice.logprobs = choice.logprobs or ChoiceLogprobs()
        if streamed.logprobs.content:
            logprobs.content = [*(logprobs.content or []), *streamed.logprobs.content]
        if streamed.logprobs.refusal:
            logprobs.refusal = [*(logprobs.refusal or []), *streamed.logprobs.refusal]
    delta, message = streamed.delta, choice.message
    message.content = _joined(message.content, delta.content)
    message.refusal = _joined(message.refusal, delta.refusal)
    if delta.function_call:
        call = message.function_call = message.function_call or FunctionCall(name="", arguments="")
        call.name += delta.function_call.name or ""
        call.arguments += delta.function_call.arguments or ""
    if delta.tool_calls:
        _add_tool_calls(message, delta.tool_calls)
    for field in REASONING_FIELDS:
        piece = getattr(delta, field, None)
        if isinstance(piece, str):
            setattr(message, field, (getattr(message, field, None) or "") + piece)


def update_chat_completion(completion: ChatCompletion, chunk: ChatCompletionChunk) -> None:
    """Add one chunk to `completion` in place: each choice's deltas are appended (a choice
    first seen now is added, the choices kept in index order), and the chunk's usage,
    service tier, system fingerprint and prompt token ids replace what was there."""
    extra = _extra(completion)
    prompt_ids = getattr(chunk, PROMPT_TOKEN_IDS, None)
    if prompt_ids is not None:
        extra[PROMPT_TOKEN_IDS] = prompt_ids
    prompt_logprobs = getattr(chunk, "prompt_logprobs", None)
    if prompt_logprobs is not None:
        extra["prompt_logprobs"] = prompt_logprobs
    known = extra.get(PROMPT_TOKEN_IDS)
    choices = {choice.index: choice for choice in completion.choices}
    for streamed in chunk.choices:
        choice = choices.get(streamed.index)
        if choice is None:
            choice = choices[streamed.index] = _new_choice(streamed)
            completion.choices.append(choice)
        _add_choice(choice, streamed)
    if known is not None:
        for choice in completion.choices:
            _extra(choice)[PROMPT_TOKEN_IDS] = known
    completion.choices.sort(key=lambda choice: choice.index)
    if chunk.service_tier is not None:
        completion.service_tier = chunk.service_tier
    if chunk.system_fingerprint is not None:
        completion.system_fingerprint = chunk.system_fingerprint
    if chunk.usage is not None:
        completion.usage = chunk.usage


def finalize_chat_completion(completion: ChatCompletion) -> ChatCompletion:
    """The completion as a non-streamed call returns it: the prompt's token ids, sent once
    for the whole response, on each choice too (where arthex's training reads them)."""
    prompt_ids = _extra(completion).get(PROMPT_TOKEN_IDS)
    if prompt_ids is not None:
        for choice in completion.choices:
            _extra(choice)[PROMPT_TOKEN_IDS] = prompt_ids
    return completion


def _is_prologue(chunk: ChatCompletionChunk) -> bool:
    """An empty chunk some servers send before the first real one (no id, no model)."""
    return (
        not chunk.choices
        and not chunk.id
        and str(chunk.object) == ""  # constructed unchecked from the wire
        and not chunk.model
        and chunk.usage is None
    )


class _Assembly:
    """The completion read so far and which choices have finished."""

    def __init__(self) -> None:
        self.completion: ChatCompletion | None = None
        self.finished: set[int] = set()

    def add(self, chunk: ChatCompletionChunk) -> ChatCompletion | None:
        if _is_prologue(chunk):
            return None
        if self.completion is None:
            self.completion = init_chat_completion(chunk)
        update_chat_completion(self.completion, chunk)
        self.finished.update(c.index for c in chunk.choices if c.finish_reason is not None)
        return self.completion

    def result(self, *, stopped_early: bool = False, require_usage: bool = False) -> ChatCompletion:
        completion = self.completion
        if completion is None or not completion.choices:
            raise IncompleteChatCompletionStreamError(
                "the chat-completion stream ended without a choice"
            )
        unfinished = sorted({c.index for c in completion.choices} - self.finished)
        if unfinished and not stopped_early:
            raise IncompleteChatCompletionStreamError(
                f"the chat-completion stream ended before choices {unfinished} finished"
            )
        if require_usage and completion.usage is None:
            raise IncompleteChatCompletionStreamError(
                "the chat-completion stream ended without its usage; request it with "
                'stream_options={"include_usage": True}'
            )
        return finalize_chat_completion(completion)


async def _aclose(stream: object) -> None:
    close = getattr(stream, "close", None) or getattr(stream, "aclose", None)
    if close is not None:
        await close()


async def consume_chat_completion_stream(
    stream: AsyncIterable[ChatCompletionChunk],
    on_chunk: OnChunk | None = None,
    *,
    require_usage: bool = False,
) -> ChatCompletion:
    """Read an async chat-completion stream to its end (see the module's docstring); the
    stream is closed when this stops early or fails."""
    assembly = _Assembly()
    try:
        async for chunk in stream:
            so_far = assembly.add(chunk)
            if so_far is None or on_chunk is None:
                continue
            try:
                on_chunk(chunk, so_far)
            except StopIteration:
                await _aclose(stream)
                return assembly.result(stopped_early=True, require_usage=require_usage)
        return assembly.result(require_usage=require_usage)
    except BaseException:
        await _aclose(stream)
        raise


def consume_sync_chat_completion_stream(stream: Iterable[ChatCompletionChunk]) -> ChatCompletion:
    """`consume_chat_completion_stream` for the synchronous client's stream."""
    assembly = _Assembly()
    try:
        for chunk in stream:
            assembly.add(chunk)
        return assembly.result()
    except BaseException:
        close = getattr(stream, "close", None)
        if close is not None:
            close()
        raise
