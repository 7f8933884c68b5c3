"""A tool-calling agent trained with RL on the LocalBackend, small enough for a laptop CPU.

The agent is asked for the weather in a city and is given one tool, `get_weather(city)`. The
tools go to the chat completion exactly as with any OpenAI-compatible API; the inference
server renders them into the prompt with the model's chat template and turns a
`<tool_call>{"name": ..., "arguments": ...}</tool_call>` block in the reply into
`message.tool_calls`. When the agent calls the tool, the example runs it and appends the
result, so the stored trajectory is the whole exchange.

Reward:
  1.0   a `get_weather` call whose `city` argument is the city asked about
  0.5   a call to the right tool with another argument (or none)
  < 0.5 otherwise: half the share of the reply's visible characters that are JSON punctuation,
        a "format" signal that moves a random model towards emitting tool-call JSON

The model is arthex's tiny test model (random weights, made on the spot, nothing is
downloaded), so do not expect it to master the tool in a few steps: the point is the loop.
Swap `base_model` for a real instruct model (e.g. "Qwen/Qwen2.5-0.5B-Instruct") on a GPU and
the same code learns the tool within a few dozen steps.

    python examples/tool_agent.py --steps 4
    arthex plot tools/weather-agent       # then look at the curves
    arthex trajectories tools/weather-agent --split train

Settings can also come from the environment: ARTHEX_EXAMPLE_STEPS, ARTHEX_EXAMPLE_BASE_PATH.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import arthex
from arthex.testing.tiny_model import tiny_model

CITIES = ("Paris", "Oslo", "Lima")
ROLLOUTS_PER_CITY = 4
MAX_TOKENS = 24
PUNCTUATION = set('{}[]":,')

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def get_weather(city: str) -> str:
    """The tool itself: deterministic, so rewards depend only on what the agent did."""
    return json.dumps({"city": city, "sky": "sunny" if len(city) % 2 else "cloudy", "c": 21})


def parse_arguments(text: str | None) -> dict[str, Any]:
    """A tool call's arguments; the model wrote them, so they may not be a JSON object."""
    try:
        arguments = json.loads(text or "{}")
    except json.JSONDecodeError:
        return {}
    return arguments if isinstance(arguments, dict) else {}


def score(choice: Any, city: str) -> tuple[float, bool]:
    """(reward, whether the right tool was called)."""
    for call in choice.message.tool_calls or []:
        if call.type != "function" or call.function.name != "get_weather":
            continue
        right_city = parse_arguments(call.function.arguments).get("city") == city
        return (1.0 if right_city else 0.5), True
    visible = [c for c in choice.message.content or "" if not c.isspace()]
    share = sum(c in PUNCTUATION for c in visible) / len(visible) if visible else 0.0
    return 0.5 * share, False


async def rollout(model: arthex.TrainableModel, city: str, seed: int) -> arthex.Trajectory:
    client = model.openai_client()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Use the get_weather tool to answer."},
        {"role": "user", "content": f"What is the weather in {city}?"},
    ]
    response = await client.chat.completions.create(
        model=model.get_inference_name(),
        messages=messages,  # type: ignore[arg-type]
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
        max_tokens=MAX_TOKENS,
        temperature=1.0,
        logprobs=True,
        seed=seed,
    )
    choice = response.choices[0]
    reward, called = score(choice, city)
    trajectory = arthex.Trajectory(
        messages_and_choices=[*messages, choice],
        tools=[WEATHER_TOOL],
        reward=reward,
        metrics={"called_tool": called},
        metadata={"city": city},
    )
    for call in choice.message.tool_calls or []:  # run the tool; its result is context
        if call.type != "function":
            continue
        arguments = parse_arguments(call.function.arguments)
        trajectory.messages_and_choices.append(
            {
                "role": "tool",
                "tool_call_id": call.id,
                "content": get_weather(str(arguments.get("city", ""))),
            }
        )
    return trajectory


async def main(steps: int, base_path: str, seed: int = 0) -> list[float]:
    """Train for `steps` steps; return the mean train reward of each step."""
    started = time.monotonic()
    quiet_transformers()
    base_model = tiny_model(Path(base_path) / "_tiny_model")
    model = arthex.TrainableModel(
        name="weather-agent",
        project="tools",
        base_model=base_model,
        base_path=base_path,
        report_metrics=[],
    )
    backend = arthex.LocalBackend(engine="torch", full_finetune=True, seed=seed)
    rewards: list[float] = []
    try:
        await model.register(backend)
        start = await model.get_step()
        for step in range(start, start + steps):
            # Lists, not generators, for the rollouts: each coroutine is made now, with this
            # loop's `city`, not when the group is finally awaited.
            groups = await arthex.gather_trajectory_groups(
                [
                    arthex.trajectory_group(
                        [
                            rollout(model, city, seed=step * 1000 + c * 100 + r)
                            for r in range(ROLLOUTS_PER_CITY)
                        ]
                    )
                    for c, city in enumerate(CITIES)
                ],
                pbar_desc=f"step {step} rollouts",
            )
            result = await model.train(groups, config=arthex.TrainConfig(learning_rate=3e-3))
            await model.delete_checkpoints(best_checkpoint_metric="train/reward")
            batch = [t.reward for g in groups for t in g.trajectories]
            called = sum(bool(t.metrics["called_tool"]) for g in groups for t in g.trajectories)
            rewards.append(sum(batch) / len(batch))
            loss = result.metrics.get("loss/train")  # recorded at the step the update made
            update = "nothing to train" if loss is None else f"loss {loss:+.4f}"
            print(
                f"step {step}: reward {rewards[-1]:.3f}  tool calls {called}/{len(batch)}  "
                f"-> step {result.step}: {update}  ({time.monotonic() - started:.0f}s)",
                flush=True,
            )
    finally:
        await backend.close()
        await model.close()
    print(f"files in {Path(base_path) / 'tools' / 'models' / 'weather-agent'}")
    return rewards


def quiet_transformers() -> None:
    """The backend loads a checkpoint every step; keep transformers' progress bars out."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--steps", type=int, default=int(os.environ.get("ARTHEX_EXAMPLE_STEPS", "4"))
    )
    parser.add_argument("--base-path", default=os.environ.get("ARTHEX_EXAMPLE_BASE_PATH", ".art"))
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


if __name__ == "__main__":
    args = parse_args()
    asyncio.run(main(args.steps, args.base_path, args.seed))
