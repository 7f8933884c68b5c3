"""The conversations of a trajectory as plain chat messages: what a judge (or a person) reads.

A hand-built trajectory has its main conversation and its additional histories. A captured one
is rebuilt from its calls (`TrajectoryExchanges.threads`: a later call whose request repeats an
earlier conversation continues it). Every message is spelled by `chat_types.as_message`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from ..chat_types import as_message
from ..conversations import Conversation
from ..trajectories import Trajectory


def conversations(trajectory: Trajectory) -> list[Conversation]:
    """The main conversation first, then the others (additional histories, other threads)."""
    if not trajectory.exchanges:
        main = tuple(cast("dict[str, Any]", message) for message in trajectory.messages())
        found = [Conversation(main, _tools(trajectory.tools))]
        for history in trajectory.additional_histories:
            found.append(
                Conversation(
                    tuple(dict(as_message(item)) for item in history.messages_and_choices),
                    _tools(history.tools),
                )
            )
        return found
    return [
        Conversation(tuple(messages), _tools(tools))
        for messages, tools in trajectory.exchanges.threads()
    ]


def _tools(tools: object) -> tuple[dict[str, Any], ...] | None:
    if isinstance(tools, Sequence) and not isinstance(tools, str):
        return tuple(dict(tool) for tool in tools if isinstance(tool, Mapping))
    return None
