"""What the NAT scripts share. Executed by NAT's venv (nvidia-nat-openpipe-art 1.9.0 with
openpipe-art 0.5.17), never by arthex's: it imports `nat` and `art`, not `arthex`.

The adapter is built from NAT's own config classes and used unmodified; trajectories are
NAT's `TrajectoryCollection` of `Trajectory` episodes, each assistant turn an `EpisodeItem`
whose logprobs are the OpenAI `ChoiceLogprobs` its LLM client recorded (tokens spelled
`token_id:N`), exactly what NAT's trajectory builder hands the adapter.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

logging.basicConfig(level=logging.INFO, stream=sys.stderr)


def read_payload() -> dict[str, Any]:
    payload: dict[str, Any] = json.loads(sys.stdin.read())
    return payload


def answer(payload: dict[str, Any], result: dict[str, Any]) -> None:
    with open(payload["out"], "w") as handle:
        json.dump(result, handle)


def adapter_config(
    ip: str,
    port: int,
    *,
    name: str,
    project: str,
    base_model: str,
    learning_rate: float,
    delete_old_checkpoints: bool,
) -> Any:
    """NAT's ARTTrainerAdapterConfig, with the GPU settings a NAT config usually carries (the
    server accepts and ignores them)."""
    from nat.plugins.openpipe.config import ARTBackendConfig, ARTTrainerAdapterConfig

    return ARTTrainerAdapterConfig(
        backend=ARTBackendConfig(
            ip=ip,
            port=port,
            name=name,
            project=project,
            base_model=base_model,
            api_key="default",
            delete_old_checkpoints=delete_old_checkpoints,
            init_args={"max_seq_length": 2048, "gpu_memory_utilization": 0.8},
            engine_args={"gpu_memory_utilization": 0.8, "tensor_parallel_size": 1},
        ),
        training={"learning_rate": learning_rate},
    )


def logprobs_of(tokens: list[int], values: list[float]) -> dict[str, Any]:
    """An OpenAI ChoiceLogprobs as vLLM returns it with return_tokens_as_token_ids."""
    return {
        "content": [
            {"token": f"token_id:{t}", "logprob": v, "bytes": None, "top_logprobs": []}
            for t, v in zip(tokens, values)
        ],
        "refusal": None,
    }


def episode(turns: list[dict[str, Any]], reward: float, item_id: str) -> Any:
    """A NAT Trajectory from turns {role, content[, logprobs]}."""
    from nat.data_models.finetuning import EpisodeItem, EpisodeItemRole, Trajectory

    items = [
        EpisodeItem(
            role=EpisodeItemRole(turn["role"]),
            content=turn["content"],
            logprobs=turn.get("logprobs"),
        )
        for turn in turns
    ]
    return Trajectory(episode=items, reward=reward, metadata={"id": item_id})


def collection(groups: list[list[Any]], run_id: str) -> Any:
    from nat.data_models.finetuning import TrajectoryCollection

    return TrajectoryCollection(trajectories=groups, run_id=run_id)


def finetune_config() -> Any:
    from nat.data_models.finetuning import FinetuneConfig

    return FinetuneConfig()


PROMPTS = ("Say hello.", "What is 2 + 2?")


async def sampled_collection(
    base_url: str, api_key: str, served_name: str, run_id: str, *, size: int = 2
) -> Any:
    """Two groups of `size` rollouts sampled from the server's inference endpoint, as NAT's
    trajectory builder hands them over: the assistant turn's text and the logprobs its LLM
    client recorded (the OpenAI ChoiceLogprobs, tokens `token_id:N`), nothing else of the
    response. Rewards alternate 1 and 0 so every group has something to learn."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url, api_key=api_key)
    groups = []
    try:
        for g, prompt in enumerate(PROMPTS):
            group = []
            for t in range(size):
                messages = [
                    {"role": "system", "content": "Answer briefly."},
                    {"role": "user", "content": prompt},
                ]
                response = await client.chat.completions.create(
                    model=served_name, messages=messages, max_tokens=6, logprobs=True,
                    temperature=1.0, seed=100 * g + t,
                )  # fmt: skip
                choice = response.choices[0]
                assert choice.logprobs is not None and choice.logprobs.content
                turns = [
                    *messages,
                    {
                        "role": "assistant",
                        "content": choice.message.content or "",
                        "logprobs": choice.logprobs.model_dump(mode="json"),
                    },
                ]
                group.append(episode(turns, float(t % 2 == 0), f"q{g}"))
            groups.append(group)
    finally:
        await client.close()
    return collection(groups, run_id)


def run_layout(base_path: str, project: str, name: str) -> dict[str, Any]:
    """What ART's Model wrote on the client side: history rows and trajectory files, read
    with ART's own readers."""
    import os

    import polars as pl

    from art.utils.trajectory_logging import read_trajectory_groups_parquet

    model_dir = os.path.join(base_path, project, "models", name)
    history = pl.read_ndjson(os.path.join(model_dir, "history.jsonl")).to_dicts()
    trajectories = {}
    train_dir = os.path.join(model_dir, "trajectories", "train")
    for file in sorted(os.listdir(train_dir)):
        groups = read_trajectory_groups_parquet(os.path.join(train_dir, file))
        trajectories[file] = [len(group.trajectories) for group in groups]
    return {
        "files": sorted(
            os.path.relpath(os.path.join(root, f), model_dir)
            for root, _, files in os.walk(model_dir)
            for f in files
        ),
        "history_steps": [row.get("step") for row in history],
        "history_learning_rates": [row.get("loss/learning_rate") for row in history],
        "history_keys": sorted({k for row in history for k in row}),
        "trajectories": trajectories,
    }
