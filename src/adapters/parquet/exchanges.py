"""The `trajectory_json` of a captured trajectory: ART's `exchanges` representation.

ART writes a captured trajectory as `{"exchanges": {...}, "reward": ..., ...}`: per API only
the non-empty lists, each exchange as `start_time`, `end_time` (ISO-8601 UTC), the request
body and the full response dump (every field, `null`s included), and no
`messages_and_choices`, `tools` or `additional_histories`. This module writes the same; the
reader needs nothing special, as `Trajectory` validates the `exchanges` field itself.

Non-finite numbers (a `-inf` logprob) are written as `NaN`/`Infinity` tokens like everything
else in the part, so they read back as floats.
"""

from __future__ import annotations

from typing import Any

from pydantic_core import SchemaSerializer, to_json

from ...core.errors import InvalidInputError
from ...core.exchanges import ChatCompletionsExchange, TrajectoryExchanges
from ...core.trajectories import Trajectory

_TRAJECTORY_JSON = SchemaSerializer(
    Trajectory.__pydantic_core_schema__, {"ser_json_inf_nan": "constants"}
)
_CONVERSATION = {"exchanges", "messages_and_choices", "tools", "additional_histories"}
_RAW_KINDS = ("completions", "responses", "messages")


def exchanges_data(exchanges: TrajectoryExchanges) -> dict[str, list[Any]]:
    """The `exchanges` object as Python values, ready for JSON (non-empty lists only)."""
    data: dict[str, list[Any]] = {}
    if exchanges.chat_completions:
        data["chat_completions"] = [_chat(e) for e in exchanges.chat_completions]
    for kind in _RAW_KINDS:
        records = getattr(exchanges, kind)
        if records:
            data[kind] = list(records)
    return data


def _chat(exchange: ChatCompletionsExchange) -> dict[str, Any]:
    return {
        "start_time": exchange.start_time,
        "end_time": exchange.end_time,
        "request": exchange.request,
        "response": exchange.response.model_dump(mode="python"),
    }


def exchange_trajectory_json(trajectory: Trajectory) -> bytes:
    """`trajectory_json` of a trajectory with exchanges; defaulted fields left out as ART
    does (`reward` always written)."""
    if trajectory.is_legacy():
        raise InvalidInputError(
            "a trajectory holds both captured exchanges and messages_and_choices / tools / "
            "additional_histories; keep them in separate trajectories"
        )
    exclude = set(_CONVERSATION)
    for name in ("metrics", "metadata", "logs"):
        if not getattr(trajectory, name):
            exclude.add(name)
    tail = _TRAJECTORY_JSON.to_json(trajectory, exclude=exclude, warnings="error")
    head = to_json(exchanges_data(trajectory.exchanges), inf_nan_mode="constants")
    return b'{"exchanges":' + head + b"," + tail[1:]
