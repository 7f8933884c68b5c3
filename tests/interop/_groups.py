"""What arthex logs in the interop suite: every shape ART must read back. A second log at
one step, tool calls with their tool replies and tool specs, sub-agent histories, failed
rollouts beside successful ones and a group in which every rollout failed."""

from __future__ import annotations

from typing import Any, NamedTuple

from arthex.core.trajectories import History, Trajectory, TrajectoryGroup
from arthex.testing.builders import WEATHER_TOOL, make_choice, make_exception, make_trajectory


class Batch(NamedTuple):
    split: str
    step: int
    groups: list[TrajectoryGroup]


def _tool_rollout(reward: float, seed: int) -> Trajectory:
    call = make_choice(
        None, tool_calls=[{"id": f"call_{seed}", "name": "get_weather",
                           "arguments": f'{{"city": "city-{seed}"}}'}],
    )  # fmt: skip
    return make_trajectory(
        reward,
        messages=[
            {"role": "system", "content": "Use the tools."},
            {"role": "user", "content": f"Weather in city-{seed}?"},
            call,
            {"role": "tool", "tool_call_id": f"call_{seed}", "content": "sunny, 21 degrees"},
            make_choice(f"It is sunny in city-{seed}."),
        ],
        tools=[WEATHER_TOOL],
        metrics={"acc": reward > 0.5, "turns": 2},
        metadata={"city": f"city-{seed}"},
        logs=[f"rollout {seed}"],
    )


def _sub_agent_rollout(reward: float, seed: int) -> Trajectory:
    helper = History(
        messages_and_choices=[
            {"role": "user", "content": f"Summarise document {seed}."},
            make_choice(f"Summary {seed}."),
        ],
        tools=[WEATHER_TOOL],
    )
    return make_trajectory(
        reward, prompt=f"Answer from document {seed}.", completion=f"Answer {seed}.",
        additional_histories=[helper], metrics={"acc": reward > 0.5, "helper_calls": 1},
    )  # fmt: skip


def batches() -> list[Batch]:
    """The batches, in logging order; val step 0 is logged twice."""
    tools = TrajectoryGroup(
        [_tool_rollout(0.0, 1), _tool_rollout(1.0, 2), make_exception("tool timed out")],
        metadata={"scenario_id": "weather"}, metrics={"difficulty": 2},
    )  # fmt: skip
    all_failed = TrajectoryGroup(
        [make_exception("model down"), make_exception("slow", TimeoutError)],
        metadata={"scenario_id": "down"}, logs=["every rollout failed"],
    )  # fmt: skip
    sub_agents = TrajectoryGroup(
        [_sub_agent_rollout(0.25, 3), _sub_agent_rollout(0.75, 4)],
        metadata={"scenario_id": "docs"},
    )
    plain = TrajectoryGroup(
        [make_trajectory(r, prompt=f"{r} + 1?", completion=str(r + 1)) for r in (0.5, 0.5, 1.0)],
        metadata={"scenario_id": "sums"},
    )

    def train_groups(step: int) -> list[TrajectoryGroup]:
        return [
            TrajectoryGroup([_tool_rollout(0.2 * step, 10 + step), _tool_rollout(1.0, 20 + step)],
                            metadata={"scenario_id": f"weather-{step}"}),
            TrajectoryGroup([make_trajectory(0.5), make_trajectory(0.5), make_exception()],
                            metadata={"scenario_id": "same"}),
        ]  # fmt: skip

    return [
        Batch("val", 0, [tools, all_failed]),
        Batch("val", 0, [sub_agents, plain]),
        Batch("train", 0, train_groups(0)),
        Batch("train", 1, train_groups(1)),
        Batch("val", 1, [plain]),
    ]


def dumped(groups: list[TrajectoryGroup]) -> list[dict[str, Any]]:
    return [group.model_dump(mode="json") for group in groups]
