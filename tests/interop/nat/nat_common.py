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
