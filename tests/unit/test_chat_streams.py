"""`art.openai`'s stream consumers under arthex, on chunk sequences written out by hand: the
completion each must give is the non-streamed reply those chunks spell, also written by hand."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from arthex.art.openai import (
    IncompleteChatCompletionStreamError,
    consume_chat_completion_stream,
    consume_sync_chat_completion_stream,
)
from arthex.core.errors import InvalidInputError, NotInArthexError

HEAD = {"id": "c1", "object": "chat.completion.chunk", "created": 7, "model": "m"}


def chunk(*choices: dict[str, Any], **fields: Any) -> ChatCompletionChunk:
    return ChatCompletionChunk.model_validate({**HEAD, "choices": list(choices), **fields})


def delta(index: int = 0, finish: str | None = None, **parts: Any) -> dict[str, Any]:
    extra: dict[str, Any] = {k: parts.pop(k) for k in ("logprobs", "token_ids") if k in parts}
    return {"index": index, "delta": parts, "finish_reason": finish, **extra}


def top(token: str, logprob: float) -> dict[str, Any]:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode()), "top_logprobs": []}


class Recorded:
    """Chunks as an openai stream gives them, remembering whether it was closed."""

    def __init__(self, chunks: list[ChatCompletionChunk]) -> None:
        self.chunks = chunks
        self.closed = False

    def __iter__(self) -> Iterator[ChatCompletionChunk]:
        return iter(self.chunks)

    async def __aiter__(self) -> AsyncIterator[ChatCompletionChunk]:
        for item in self.chunks:
            yield item

    async def close(self) -> None:
        self.closed = True


def consume(chunks: list[ChatCompletionChunk], **options: Any) -> ChatCompletion:
    result: ChatCompletion = asyncio.run(
        consume_chat_completion_stream(Recorded(chunks), **options)
    )
    return result


USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}

TEXT = [
    chunk(
        delta(role="assistant", content="", logprobs={"content": []}), prompt_token_ids=[1, 2, 3]
    ),
    chunk(delta(content="Hel", logprobs={"content": [top("Hel", -0.5)]}, token_ids=[10])),
    chunk(
        delta(content="lo", finish="stop", logprobs={"content": [top("lo", -0.25)]}, token_ids=[11])
    ),
    chunk(usage=USAGE),
]


def test_a_text_stream_gives_the_reply_with_logprobs_token_ids_and_usage() -> None:
    completion = consume(TEXT, require_usage=True)
    assert completion.model_dump(mode="json", exclude_none=True) == {
        "id": "c1",
        "object": "chat.completion",
        "created": 7,
        "model": "m",
        "prompt_token_ids": [1, 2, 3],
        "usage": USAGE,
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "Hello"},
                "logprobs": {"content": [top("Hel", -0.5), top("lo", -0.25)]},
                "prompt_token_ids": [1, 2, 3],
                "token_ids": [10, 11],
            }
        ],
    }


def test_tool_calls_and_two_choices_are_joined_per_index_in_index_order() -> None:
    call = {
        "index": 0,
        "id": "call_",
        "type": "function",
        "function": {"name": "get_", "arguments": '{"ci'},
    }
    more = {"index": 0, "id": "9", "function": {"name": "weather", "arguments": 'ty": "Oslo"}'}}
    chunks = [
        chunk(delta(1, role="assistant", reasoning_content="think")),
        chunk(delta(0, role="assistant", tool_calls=[call])),
        chunk(
            delta(0, tool_calls=[more], finish="tool_calls"),
            delta(1, content="ok", finish="length"),
        ),
    ]
    completion = consume(chunks)
    first, second = completion.choices
    assert (first.index, first.finish_reason, second.index, second.finish_reason) == (
        0,
        "tool_calls",
        1,
        "length",
    )
    assert [c.model_dump() for c in first.message.tool_calls or []] == [
        {
            "id": "call_9",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
        }
    ]
    assert first.message.content is None
    assert (second.message.content, getattr(second.message, "reasoning_content", None)) == (
        "ok",
        "think",
    )


def test_an_empty_prologue_is_skipped_and_the_sync_stream_gives_the_same() -> None:
    prologue = ChatCompletionChunk.model_construct(
        id="",
        object="",  # type: ignore[arg-type]  # as a server's empty first chunk arrives
        created=0,
        model="",
        choices=[],
        usage=None,
    )
    streamed = [prologue, *TEXT]
    assert consume_sync_chat_completion_stream(streamed).model_dump() == consume(TEXT).model_dump()


@pytest.mark.parametrize(
    ("chunks", "options", "message"),
    [
        ([], {}, "ended without a choice"),
        (TEXT[:2], {}, r"before choices \[0\] finished"),
        (TEXT[:3], {"require_usage": True}, "ended without its usage"),
    ],
    ids=["empty", "unfinished", "no-usage"],
)
def test_a_stream_cut_short_is_refused_and_closed(
    chunks: list[ChatCompletionChunk], options: dict[str, Any], message: str
) -> None:
    stream = Recorded(chunks)
    with pytest.raises(IncompleteChatCompletionStreamError, match=message):
        asyncio.run(consume_chat_completion_stream(stream, **options))
    assert stream.closed
    assert issubclass(IncompleteChatCompletionStreamError, ValueError)


def test_on_chunk_sees_each_chunk_and_may_stop_the_stream_early() -> None:
    seen: list[str | None] = []

    def stop_after_hel(_: ChatCompletionChunk, so_far: ChatCompletion) -> None:
        seen.append(so_far.choices[0].message.content)
        if so_far.choices[0].message.content == "Hel":
            raise StopIteration

    stream = Recorded(TEXT)
    completion = asyncio.run(consume_chat_completion_stream(stream, stop_after_hel))
    assert seen == ["", "Hel"]
    assert (completion.choices[0].message.content, stream.closed) == ("Hel", True)


def test_a_negative_tool_call_index_is_refused() -> None:
    bad = {"index": -1, "function": {"name": "f"}}
    with pytest.raises(InvalidInputError, match="tool call's index must be >= 0, got -1"):
        consume([chunk(delta(tool_calls=[bad], finish="stop"))])


def test_the_moe_routing_key_stays_refused() -> None:
    with pytest.raises(NotInArthexError, match="does not replay MoE expert routing"):
        from arthex.art.openai import ART_MOE_ROUTING_METADATA_KEY  # type: ignore[attr-defined]  # noqa: F401
