"""Runs ART's own code for the interop suite. Executed by ART's venv (Python >= 3.12 with
openpipe-art 0.5.23), never by arthex's: it imports `art`, not `arthex`.

Reads {"tasks": [...], "out": path} on stdin, runs each task, and writes the list of their
results as JSON to `out` (ART prints to stdout, so results do not go there).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any


def dump_groups(groups: list[Any]) -> list[dict[str, Any]]:
    return [group.model_dump(mode="json") for group in groups]


def read_parquet(task: dict[str, Any]) -> Any:
    from art.utils.trajectory_logging import read_trajectory_groups_parquet

    return dump_groups(read_trajectory_groups_parquet(task["path"]))


def frame_rows(frame: Any) -> list[dict[str, Any]]:
    return json.loads(json.dumps(frame.to_dicts(), default=str))


async def load_trajectories(task: dict[str, Any]) -> Any:
    from art.utils.benchmarking.load_trajectories import load_trajectories as load

    return frame_rows(await load(task["project"], art_path=task["art_path"]))


async def load_aggregated(task: dict[str, Any]) -> Any:
    from art.utils.benchmarking.aggregate_trajectories import load_aggregated_trajectories

    frame = await load_aggregated_trajectories(
        task["project"], art_path=task["art_path"], include_history=True
    )
    return frame_rows(frame)


def history_lines(model_dir: str) -> list[dict[str, Any]]:
    path = Path(model_dir) / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def log(task: dict[str, Any]) -> Any:
    """ART's Model.log of batches read (by ART's reader) from parquet files."""
    import art
    from art.utils.trajectory_logging import read_trajectory_groups_parquet

    model = art.Model(name=task["name"], project=task["project"], base_path=task["art_path"])
    for batch in task["batches"]:
        groups = read_trajectory_groups_parquet(batch["source"])
        await model.log(groups, split=batch["split"], step=batch["step"])
    return history_lines(model._get_output_dir())


def _choice(content: str | None, seed: int, tool_calls: list[Any] | None = None) -> Any:
    from openai.types.chat.chat_completion import Choice

    tokens = [100 + seed + k for k in range(3)]
    return Choice.model_validate(
        {
            "finish_reason": "tool_calls" if tool_calls else "stop",
            "index": 0,
            "message": {"role": "assistant", "content": content, "tool_calls": tool_calls},
            "logprobs": {
                "content": [
                    {
                        "token": f"token_id:{t}",
                        "logprob": -0.25 * (k + 1),
                        "bytes": None,
                        "top_logprobs": [],
                    }
                    for k, t in enumerate(tokens)
                ]
            },
            "token_ids": tokens,
            "prompt_token_ids": [1, 2, 3 + seed],
        }
    )


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def _tool_trajectory(reward: float, seed: int) -> Any:
    import art
    from art.trajectories import LegacyHistory

    call = {
        "id": f"call_{seed}",
        "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})},
    }
    sub_agent = LegacyHistory(
        messages_and_choices=[
            {"role": "user", "content": f"summarise {seed}"},
            _choice(f"summary {seed}", seed + 50),
        ],
        tools=[WEATHER],
    )
    return art.Trajectory(
        messages_and_choices=[
            {"role": "system", "content": "You answer with tools."},
            {"role": "user", "content": f"Weather in Paris? ({seed})"},
            _choice(None, seed, [call]),
            {"role": "tool", "tool_call_id": f"call_{seed}", "content": "sunny"},
            _choice(f"It is sunny ({seed}).", seed + 10),
        ],
        tools=[WEATHER],
        additional_histories=[sub_agent],
        reward=reward,
        metrics={"acc": reward > 0.5, "turns": 2},
        metadata={"city": "Paris", "seed": seed},
        logs=[f"rollout {seed}"],
    )


def _plain_trajectory(reward: float, seed: int) -> Any:
    import art

    return art.Trajectory(
        messages_and_choices=[
            {"role": "user", "content": f"2 + {seed}?"},
            _choice(str(2 + seed), seed),
        ],
        reward=reward,
        metrics={"acc": reward > 0.5},
    )


async def write_native(task: dict[str, Any]) -> Any:
    """An ART run written the way ART writes one: TrainableModel.log at explicit steps, with
    tool calls, sub-agent histories, failed rollouts and a second log at one step (which ART
    overwrites). Returns what ART's own reader reads back from every step file."""
    import art

    model = art.TrainableModel(
        name=task["name"], run_name=task["run_name"], project=task["project"],
        base_model=task["base_model"], base_path=task["art_path"],
    )  # fmt: skip

    def tool_group(step: int, rewards: list[float]) -> Any:
        rollouts: list[Any] = [_tool_trajectory(r, 10 * step + i) for i, r in enumerate(rewards)]
        rollouts.append(ValueError(f"rollout {step} failed"))
        return art.TrajectoryGroup(
            rollouts, metadata={"scenario_id": f"weather-{step}"}, metrics={"difficulty": step + 1}
        )

    def plain_group(step: int, rewards: list[float]) -> Any:
        return art.TrajectoryGroup(
            [_plain_trajectory(r, 10 * step + i) for i, r in enumerate(rewards)],
            metadata={"scenario_id": f"sum-{step}"},
            logs=[f"group at {step}"],
        )

    all_failed = art.TrajectoryGroup([RuntimeError("model down"), TimeoutError("too slow")])
    await model.log([plain_group(0, [0.2, 0.4])], split="val", step=0)
    await model.log([tool_group(0, [0.0, 1.0]), all_failed], split="val", step=0)  # overwrites
    for step, reward in ((1, 0.9), (2, 0.3)):
        await model.log([plain_group(step, [reward, reward])], split="val", step=step)
    for step in range(3):
        groups = [tool_group(step, [0.0, 1.0]), plain_group(step, [0.5, 0.25 * step])]
        await model.log(groups, split="train", step=step, metrics={"loss/train": 0.5 - 0.1 * step})
    out_dir = Path(model._get_output_dir())
    return {
        "model_dir": str(out_dir),
        "files": {
            str(path.relative_to(out_dir)): read_parquet({"path": str(path)})
            for path in sorted((out_dir / "trajectories").glob("*/*.parquet"))
        },
        "history": history_lines(str(out_dir)),
    }


class RecordingBackend:
    """The part of a Backend `TrainableModel.delete_checkpoints` uses, doing what ART's
    LocalBackend does: the step from the checkpoint folders, deletion by ART's own function."""

    def __init__(self) -> None:
        self.kept: list[int] | None = None

    async def register(self, model: Any) -> None:
        return None

    async def _get_step(self, model: Any) -> int:
        from art.utils.get_model_step import get_step_from_dir

        return get_step_from_dir(model._get_output_dir())

    async def _delete_checkpoint_files(self, model: Any, steps_to_keep: list[int]) -> None:
        self.kept = sorted(steps_to_keep)
        _art_local_checkpoints().delete_checkpoints(model._get_output_dir(), steps_to_keep)


def _art_local_checkpoints() -> Any:
    """`art/local/checkpoints.py`, loaded by itself: importing the `art.local` package pulls
    in torch (its LocalBackend), which this venv does not need."""
    import importlib.util

    import art

    path = Path(art.__file__).parent / "local" / "checkpoints.py"
    spec = importlib.util.spec_from_file_location("art_local_checkpoints", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def delete_checkpoints(task: dict[str, Any]) -> Any:
    import art

    model = art.TrainableModel(
        name=task["name"], run_name=task["name"], project=task["project"],
        base_model="unused", base_path=task["art_path"],
    )  # fmt: skip
    backend = RecordingBackend()
    await art.Model.register(model, backend)  # type: ignore[arg-type]
    await model.delete_checkpoints(best_checkpoint_metric=task["metric"])
    folders = Path(model._get_output_dir()) / "checkpoints"
    return {"kept": backend.kept, "left": sorted(p.name for p in folders.iterdir())}


def get_step(task: dict[str, Any]) -> Any:
    from art.utils.get_model_step import get_step_from_dir

    return get_step_from_dir(task["model_dir"])


TASKS: dict[str, Any] = {
    "read_parquet": read_parquet,
    "load_trajectories": load_trajectories,
    "load_aggregated": load_aggregated,
    "log": log,
    "write_native": write_native,
    "delete_checkpoints": delete_checkpoints,
    "get_step": get_step,
}


async def main() -> None:
    request = json.loads(sys.stdin.read())
    results = []
    for task in request["tasks"]:
        result = TASKS[task["op"]](task)
        if asyncio.iscoroutine(result):
            result = await result
        results.append(result)
    await asyncio.to_thread(Path(request["out"]).write_text, json.dumps(results, default=str))


if __name__ == "__main__":
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    asyncio.run(main())
