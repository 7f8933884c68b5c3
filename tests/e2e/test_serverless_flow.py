"""A TrainableModel trains on a remote training server (LocalBackend and the tiny model on CPU
behind it): rollouts go through the server's OpenAI-compatible proxy, the history and the
trajectories are written on the client side, and the checkpoints live on the server, where
they survive the server being killed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import arthex
from arthex.adapters.serverless import ServerlessBackend
from arthex.core.config import TrainConfig
from arthex.core.identity import ModelSpec, RunRef
from arthex.core.trajectories import Trajectory
from arthex.testing.builders import synthetic_groups
from tests._serverless import ServerProcess, launch_server, start_server

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ServerProcess]]:
    """A one-item list, so the restart test can swap in the restarted process."""
    pytest.importorskip("torch")
    from arthex.testing.tiny_model import tiny_model

    pending = launch_server(tmp_path_factory.mktemp("flow") / "state", backend="local")
    tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")  # while the server imports torch
    holder = [pending.wait()]
    try:
        yield holder
    finally:
        holder[0].stop()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, server: list[ServerProcess]) -> str:
    from arthex.testing.tiny_model import tiny_model

    return tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")


def model_id(server: ServerProcess, key: str, project: str, name: str) -> str:
    listing = httpx.get(
        server.url + "/preview/models", headers={"Authorization": f"Bearer {key}"}
    ).json()
    (record,) = [m for m in listing["data"] if (m["project"], m["name"]) == (project, name)]
    return str(record["id"])


def test_trainable_model_rolls_out_through_the_proxy_and_trains_three_steps(
    server: list[ServerProcess], tiny: str, tmp_path: Path
) -> None:
    current = server[0]
    tenant, key = current.fresh_tenant()
    base_path = tmp_path / "art"

    async def main() -> tuple[list[int], list[str], set[str]]:
        backend = ServerlessBackend(current.url, key)
        model = arthex.TrainableModel(
            name="agent",
            project="flow",
            base_model=tiny,
            base_path=str(base_path),
            report_metrics=[],
        )
        try:
            await model.register(backend)
            client = model.openai_client()
            served: list[str] = []

            async def rollout(prompt: str, i: int) -> Trajectory:
                messages = [{"role": "user", "content": prompt}]
                response = await client.chat.completions.create(
                    model=model.get_inference_name(),
                    messages=messages,  # type: ignore[arg-type]
                    logprobs=True,
                    max_tokens=6,
                )
                served.append(response.model)
                choice = response.choices[0]
                assert (choice.model_extra or {}).get("token_ids"), "token ids survive the proxy"
                return Trajectory(messages_and_choices=[*messages, choice], reward=float(i % 2))

            steps = []
            for _ in range(3):
                groups = [
                    await arthex.trajectory_group(rollout(prompt, i) for i in range(4))
                    for prompt in ("Hello!", "Count from one to ten:")
                ]
                result = await model.train(groups, config=TrainConfig(learning_rate=1e-3))
                steps.append(result.step)
            listed = {m.id for m in (await client.models.list()).data}
            return steps, served, listed
        finally:
            await model.close()
            await backend.close()

    steps, served, listed = asyncio.run(main())
    assert steps == [1, 2, 3]
    named = f"wandb-artifact:///{tenant}/flow/agent"  # the hosted service's names
    assert served[:8] == [f"{named}:step0"] * 8 and served[-8:] == [f"{named}:step2"] * 8
    assert {"agent", "agent@3", named, f"{named}:step3"} <= listed

    local = base_path / "flow" / "models" / "agent"
    rows = [json.loads(line) for line in (local / "history.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "train/reward" in r] == [0, 1, 2]
    assert [r["step"] for r in rows if "loss/train" in r] == [1, 2, 3]
    parquet = sorted(p.name for p in (local / "trajectories" / "train").glob("*.parquet"))
    assert parquet == ["0000.parquet", "0001.parquet", "0002.parquet"]
    assert not (local / "checkpoints").exists(), "checkpoints stay on the server"

    remote = (
        current.state_dir / "backend" / tenant / "models" / model_id(current, key, "flow", "agent")
    )
    assert sorted(p.name for p in (remote / "checkpoints").iterdir()) == [
        "0000",
        "0001",
        "0002",
        "0003",
    ]
    assert not (current.state_dir / "backend" / tenant / "models" / "agent").exists()


def test_finished_checkpoints_survive_a_server_kill(server: list[ServerProcess], tiny: str) -> None:
    before = server[0]
    tenant, key = before.fresh_tenant()
    run = RunRef("durable", "agent")
    spec = ModelSpec(run=run, base_model=tiny)

    async def train_once(url: str) -> tuple[int, list[int]]:
        backend = ServerlessBackend(url, key)
        try:
            await backend.register(spec)
            async for _ in backend.train_steps(
                run, synthetic_groups(), TrainConfig(learning_rate=1e-3)
            ):
                pass
            return await backend.get_step(run), await backend.checkpoint_steps(run)
        finally:
            await backend.close()

    assert asyncio.run(train_once(before.url)) == (1, [0, 1])
    before.stop(kill=True)  # SIGKILL: no shutdown hook runs
    after = start_server(before.state_dir, backend="local", keys=before.keys)
    server[0] = after

    async def reconnect() -> tuple[int, list[int]]:
        backend = ServerlessBackend(after.url, key)
        try:
            await backend.register(spec)
            return await backend.get_step(run), await backend.checkpoint_steps(run)
        finally:
            await backend.close()

    assert asyncio.run(reconnect()) == (1, [0, 1])
    assert asyncio.run(train_once(after.url)) == (2, [0, 1, 2])
    remote = (
        after.state_dir / "backend" / tenant / "models" / model_id(after, key, "durable", "agent")
    )
    assert sorted(p.name for p in (remote / "checkpoints").iterdir()) == ["0000", "0001", "0002"]
