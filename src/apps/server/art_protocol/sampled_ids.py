"""Token ids for Choices that carry only their logprobs, as NVIDIA NeMo Agent Toolkit sends them.

arthex trains on the sampler's own ids: a Choice names the prompt it was sampled from
(`prompt_token_ids`) and what was sampled (`token_ids`). NAT's ART adapter rebuilds each
assistant turn as a Choice from the message text and the logprobs its LLM client recorded,
so neither list arrives. What does arrive is enough: an inference server asked for
`return_tokens_as_token_ids` (vLLM's flag, which ART sets; arthex's server always does)
spells every logprob token `token_id:N`, so the sampled ids are read off the logprobs one to
one, and the prompt is the chat template rendered over the conversation before the turn, with
the generation prompt, as the server rendered it to sample. Context messages stay untrained
(NAT sends tool results and other roles as plain assistant messages).

A Choice that already has either list is left alone; one without logprobs is left for the
backend to refuse (or to train with ratio 1 under `allow_training_without_logprobs`, which
still needs `token_ids`, so it is refused too, naming the missing list).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from openai.types.chat.chat_completion import Choice

from ....core.chat_types import as_message
from ....core.errors import InvalidInputError
from ....core.trajectories import MessageOrChoice, TrajectoryGroup

__all__ = ["Render", "fill_sampled_ids", "needs_ids"]

Render = Callable[[Sequence[dict[str, Any]], Sequence[dict[str, Any]] | None], list[int]]
"""(messages, tools) -> the chat template's token ids with the generation prompt."""

_TOKEN_ID = re.compile(r"token_id:([0-9]{1,10})")


def needs_ids(choice: Choice) -> bool:
    extra = choice.model_extra or {}
    return "prompt_token_ids" not in extra and "token_ids" not in extra


def _any_needs_ids(groups: Sequence[TrajectoryGroup]) -> bool:
    return any(
        needs_ids(choice) and choice.logprobs is not None and choice.logprobs.content
        for group in groups
        for trajectory in group.trajectories
        for choice in trajectory.choices()
    )


def fill_sampled_ids(
    groups: Sequence[TrajectoryGroup], render: Callable[[], Render], vocab_size: Callable[[], int]
) -> tuple[list[TrajectoryGroup], int]:
    """The groups with ids on every Choice that had logprobs but no ids, and how many Choices
    were filled. `render` and `vocab_size` are asked for only when a Choice needs them (the
    tokenizer is loaded then). InvalidInputError names a Choice whose logprob tokens are not
    spelled `token_id:N` or name an id outside the vocabulary."""
    if not _any_needs_ids(groups):
        return list(groups), 0
    renderer = render()
    vocab = vocab_size()
    filled = 0
    out = []
    for g, group in enumerate(groups):
        trajectories = []
        for t, trajectory in enumerate(group.trajectories):
            where = f"group {g}, trajectory {t}"
            items, count = _fill(
                trajectory.messages_and_choices, trajectory.tools, renderer, vocab, where
            )
            histories = []
            for h, history in enumerate(trajectory.additional_histories):
                found, more = _fill(
                    history.messages_and_choices,
                    history.tools,
                    renderer,
                    vocab,
                    f"{where}, additional_histories[{h}]",
                )
                count += more
                histories.append(history.model_copy(update={"messages_and_choices": found}))
            filled += count
            trajectories.append(
                trajectory
                if count == 0
                else trajectory.model_copy(
                    update={"messages_and_choices": items, "additional_histories": histories}
                )
            )
        out.append(group.model_copy(update={"trajectories": trajectories}))
    return out, filled


def _fill(
    items: Sequence[MessageOrChoice],
    tools: list[dict[str, Any]] | None,
    render: Render,
    vocab: int,
    where: str,
) -> tuple[list[MessageOrChoice], int]:
    out: list[MessageOrChoice] = []
    filled = 0
    c = 0
    for i, item in enumerate(items):
        if not isinstance(item, Choice):
            out.append(item)
            continue
        here = f"{where}, choice {c} (messages_and_choices[{i}])"
        c += 1
        content = item.logprobs.content if item.logprobs is not None else None
        if not needs_ids(item) or not content:
            out.append(item)
            continue
        sampled = [_token_id(entry.token, vocab, here) for entry in content]
        if i == 0:
            raise InvalidInputError(
                f"{here} is the first item: a sampled turn needs the messages it answered"
            )
        messages = [dict(as_message(previous)) for previous in items[:i]]
        prompt = render(messages, tools)
        choice = item.model_copy()
        choice.__pydantic_extra__ = {
            **(item.model_extra or {}),
            "prompt_token_ids": prompt,
            "token_ids": sampled,
        }
        out.append(choice)
        filled += 1
    return out, filled


def _token_id(token: str, vocab: int, where: str) -> int:
    match = _TOKEN_ID.fullmatch(token)
    if match is None:
        raise InvalidInputError(
            f"{where} has a logprob token {token[:40]!r} that is not spelled 'token_id:N', and "
            "no token_ids: sample with return_tokens_as_token_ids (arthex's inference server "
            "always spells tokens so) or send prompt_token_ids and token_ids on the Choice"
        )
    value = int(match.group(1))
    if value >= vocab:
        raise InvalidInputError(
            f"{where} names token id {value}, outside the base model's vocabulary of {vocab}"
        )
    return value
