"""The conversations of a trajectory as plain chat messages: what a judge (or a person) reads.

A hand-built trajectory has its main conversation and its additional histories. A captured one
is rebuilt from its calls (`TrajectoryExchanges.threads`: a later call whose request repeats an
earlier conversation continues it). Every message is spelled by `chat_types.as_message`.

`Conversation.trained_turns()` gives the model's own sampled turns, the ones training learns
from: the Choices of a hand-built trajectory, and in a captured one each call's reply,
wherever the conversation carries it; assistant messages the agent wrote itself (few-shot
examples) are context (`untrained`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from openai.types.chat.chat_completion import Choice

from ..chat_types import as_message
from ..conversations import Conversation
from ..trajectories import Trajectory


def conversations(trajectory: Trajectory) -> list[Conversation]:
    """The main conversation first, then the others (additional histories, other threads)."""
    if not trajectory.exchanges:
        main = tuple(cast("dict[str, Any]", message) for message in trajectory.messages())
        found = [_hand_built(main, trajectory.tools, trajectory.messages_and_choices)]
        for history in trajectory.additional_histories:
            messages = tuple(dict(as_message(item)) for item in history.messages_and_choices)
            found.append(_hand_built(messages, history.tools, history.messages_and_choices))
        return found
    return [
        Conversation(tuple(messages), _tools(tools), _context(messages, sampled))
        for messages, tools, sampled in trajectory.exchanges.threads()
    ]


def _hand_built(
    messages: tuple[dict[str, Any], ...], tools: object, items: Sequence[Any]
) -> Conversation:
    sampled = frozenset(i for i, item in enumerate(items) if isinstance(item, Choice))
    return Conversation(messages, _tools(tools), _context(messages, sampled))


def _context(messages: Sequence[Mapping[str, Any]], sampled: frozenset[int]) -> frozenset[int]:
    """The assistant messages the model did not sample: context, not trained."""
    return frozenset(
        i for i, m in enumerate(messages) if m.get("role") == "assistant" and i not in sampled
    )


def _tools(tools: object) -> tuple[dict[str, Any], ...] | None:
    if isinstance(tools, Sequence) and not isinstance(tools, str):
        return tuple(dict(tool) for tool in tools if isinstance(tool, Mapping))
    return None
