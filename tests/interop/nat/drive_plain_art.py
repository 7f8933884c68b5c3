"""ART 0.5.17's own TrainableModel with NAT's RemoteBackend as its backend, without NAT's
adapter: what a plain ART user pointing `art.TrainableModel` at a remote server does.
Executed by NAT's venv.

register -> sample from the served step -> TrainableModel.train -> delete_checkpoints, twice.

stdin: {"ip", "port", "base_model", "name", "project", "out"}
"""

from __future__ import annotations

import asyncio
from typing import Any

import nat_common as common


async def groups_from(model: Any, step: int) -> list[Any]:
    """Two groups of two rollouts sampled from the model's inference endpoint, each kept as
    the Choice the client returned (with whatever the server put on it). The client is built
    from the model's inference fields, as `model.openai_client()` builds it (that method of
    ART 0.5.17 passes an httpx Timeout the installed openai's transport does not take)."""
    from openai import AsyncOpenAI

    import art

    client = AsyncOpenAI(base_url=model.inference_base_url, api_key=model.inference_api_key)
    groups = []
    for g, prompt in enumerate(common.PROMPTS):
        trajectories = []
        for t in range(2):
            messages = [{"role": "user", "content": prompt}]
            response = await client.chat.completions.create(
                model=f"{model.name}@{step}", messages=messages, max_tokens=6, logprobs=True,
                seed=10 * g + t,
            )  # fmt: skip
            trajectories.append(
                art.Trajectory(
                    messages_and_choices=[*messages, response.choices[0]], reward=float(t)
                )
            )
        groups.append(art.TrajectoryGroup(trajectories))
    await client.close()
    return groups


async def main() -> None:
    from nat.plugins.openpipe.remote_backend import RemoteBackend

    import art

    payload = common.read_payload()
    backend = RemoteBackend(f"http://{payload['ip']}:{payload['port']}")
    model = art.TrainableModel(
        name=payload["name"], project=payload["project"], base_model=payload["base_model"]
    )
    await model.register(backend)
    steps = [await model.get_step()]
    for _ in range(2):
        groups = await groups_from(model, steps[-1])
        await model.train(groups, config=art.TrainConfig(learning_rate=2e-5))
        await model.delete_checkpoints()
        steps.append(await model.get_step())
    common.answer(
        payload,
        {
            "steps": steps,
            "inference_base_url": model.inference_base_url,
            "layout": common.run_layout(model.base_path, model.project, model.name),
        },
    )
    await backend.close()  # POST /close, as RemoteBackend does


if __name__ == "__main__":
    asyncio.run(main())
