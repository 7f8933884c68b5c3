"""LocalBackend continues a run ART's LocalBackend left: LoRA adapters in `checkpoints/NNNN/`
with no optimizer state. arthex resumes from the newest adapter, keeps ART's step numbering,
serves the new steps under their names, and touches ART's folders only through retention.
(The interop suite does the same on a run whose history and trajectories ART itself wrote.)"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from safetensors.torch import load_file

import arthex
from arthex.adapters.local import LocalBackend
from arthex.core.config import TrainConfig
from arthex.core.identity import ModelSpec, RunRef
from arthex.core.trajectories import Trajectory, TrajectoryGroup
from arthex.testing.builders import synthetic_groups
from arthex.testing.tiny_model import tiny_model
from tests._art_run import snapshot as file_hashes
from tests._art_run import write_art_adapters

pytestmark = pytest.mark.e2e

PROMPT: list[Any] = [{"role": "user", "content": "Count to 3."}]


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def art_history(model_dir: Path, rewards: list[float]) -> None:
    """ART's rows: naive local `recorded_at`, `training_step` beside `step`."""
    lines = [
        json.dumps({"val/reward": reward, "training_step": step, "step": step,
                    "recorded_at": f"2024-05-01T12:0{step}:00"})
        for step, reward in enumerate(rewards)
    ]  # fmt: skip
    (model_dir / "history.jsonl").write_text("\n".join(lines) + "\n")


async def rollouts(model: arthex.TrainableModel, seed: int) -> list[TrajectoryGroup]:
    client = model.openai_client()
    groups = []
    for g in range(2):
        messages: list[Any] = [{"role": "user", "content": f"Count to {g + 3}."}]
        response = await client.chat.completions.create(
            model=model.get_inference_name(), messages=messages, n=4, max_tokens=5,
            logprobs=True, seed=seed + g,
        )  # fmt: skip
        groups.append(
            TrajectoryGroup(
                Trajectory(messages_and_choices=[*messages, choice], reward=float(i % 2))
                for i, choice in enumerate(response.choices)
            )
        )
    return groups


async def greedy_logprobs(model: arthex.TrainableModel, name: str) -> list[float]:
    response = await model.openai_client().chat.completions.create(
        model=name, messages=PROMPT, max_tokens=5, temperature=0, logprobs=True
    )
    content = response.choices[0].logprobs
    assert content is not None and content.content is not None
    return [token.logprob for token in content.content]


def test_local_backend_continues_an_art_run_from_its_newest_adapter(
    base_model: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model_dir = tmp_path / "proj" / "models" / "agent"
    art_folders = write_art_adapters(model_dir, base_model, steps=3)
    art_history(model_dir, [0.1, 0.9, 0.3])  # ART's best step is 1
    before = file_hashes(art_folders)
    checkpoints = model_dir / "checkpoints"
    newest = load_file(str(art_folders[2] / "adapter_model.safetensors"))

    async def main() -> dict[str, Any]:
        backend = LocalBackend()
        model = arthex.TrainableModel(
            name="agent", project="proj", base_model=base_model, base_path=str(tmp_path),
            report_metrics=[],
        )  # fmt: skip
        try:
            with caplog.at_level(logging.WARNING):
                await model.register(backend)
            out: dict[str, Any] = {"registered_at": await model.get_step()}
            client = model.openai_client()
            live, optimizer = backend.training_tensors(model.run)
            out["live"], out["optimizer"] = live, optimizer
            out["served_at_register"] = {m.id async for m in await client.models.list()}
            out["at"] = {"agent@2": await greedy_logprobs(model, "agent@2")}
            for seed in (0, 10):
                await model.train(
                    await rollouts(model, seed), config=TrainConfig(learning_rate=1e-2)
                )
            out["step"] = await model.get_step()
            out["served"] = {m.id async for m in await client.models.list()}
            out["at"]["agent@4"] = await greedy_logprobs(model, "agent@4")
            out["at"]["agent"] = await greedy_logprobs(model, "agent")
            out["saved"] = {
                step: (
                    json.loads((checkpoints / f"{step:04d}" / "trainer_state.json").read_text()),
                    sorted(p.name for p in (checkpoints / f"{step:04d}").iterdir()),
                    load_file(str(checkpoints / f"{step:04d}" / "adapter_model.safetensors")),
                )
                for step in (3, 4)
            }
            out["decision"] = await model.delete_checkpoints("val/reward")
            return out
        finally:
            await model.close()
            await backend.close()

    out = asyncio.run(main())
    # resumed from ART's step 2: its weights, a fresh optimizer, said once
    assert out["registered_at"] == 2
    assert {name.replace(".default", ""): value for name, value in out["live"].items()}.keys() == (
        newest.keys()
    )
    for name, value in out["live"].items():
        assert value.equal(newest[name.replace(".default", "")]), name
    assert out["optimizer"] == {}
    fresh = [r for r in caplog.records if "optimizer starts fresh" in r.getMessage()]
    assert len(fresh) == 1 and "0002" in fresh[0].getMessage()
    assert {"agent", "agent@2"} <= out["served_at_register"]
    # two steps on: ART's numbering kept, the new steps served under their names
    assert out["step"] == 4
    assert {"agent", "agent@3", "agent@4"} <= out["served"]
    assert out["at"]["agent"] == out["at"]["agent@4"] != out["at"]["agent@2"]
    for step, (state, files, _) in out["saved"].items():
        assert state["step"] == step and state["mode"] == "lora"
        assert state["lora"]["rank"] == 8 and state["lora"]["alpha"] == 16
        assert {"optimizer.safetensors", "optimizer.json", "adapter_config.json"} <= set(files)
    three = out["saved"][3][2]
    assert three.keys() == newest.keys()
    assert any(not three[k].equal(newest[k]) for k in newest)
    # retention is the only thing that touched ART's folders: best (1) and latest (4) kept
    decision = out["decision"]
    assert decision.best_step == 1 and decision.deleted == (0, 2, 3)
    assert sorted(p.name for p in checkpoints.iterdir()) == ["0001", "0004"]
    assert file_hashes([checkpoints / "0001"]) == {
        path: digest for path, digest in before.items() if "/0001/" in path
    }
    rows = [json.loads(line) for line in (model_dir / "history.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows[:3]] == [0, 1, 2]  # ART's rows kept as they were
    assert {row["step"] for row in rows[3:]} == {2, 3, 4}


def test_an_art_adapter_refuses_full_fine_tuning_with_a_clear_error(
    base_model: str, tmp_path: Path
) -> None:
    model_dir = tmp_path / "proj" / "models" / "agent"
    folders = write_art_adapters(model_dir, base_model, steps=1)
    before = file_hashes(folders)

    async def main() -> None:
        backend = LocalBackend(full_finetune=True)
        model = arthex.TrainableModel(
            name="agent", project="proj", base_model=base_model, base_path=str(tmp_path),
            report_metrics=[],
        )  # fmt: skip
        try:
            await model.register(backend)
        finally:
            await backend.close()

    with pytest.raises(arthex.InvalidInputError, match=r"LoRA adapter.*full_finetune=None"):
        asyncio.run(main())
    assert file_hashes(folders) == before
    assert sorted(p.name for p in (model_dir / "checkpoints").iterdir()) == ["0000"]


def test_a_step_with_nothing_to_train_after_an_art_adapter_is_a_whole_arthex_checkpoint(
    base_model: str, tmp_path: Path
) -> None:
    model_dir = tmp_path / "proj" / "models" / "agent"
    (art,) = write_art_adapters(model_dir, base_model, steps=1)
    run = RunRef("proj", "agent")

    async def main() -> int:
        backend = LocalBackend()
        try:
            await backend.register(ModelSpec(run, base_model=base_model, base_path=str(tmp_path)))
            config = TrainConfig(learning_rate=1e-2)
            async for _ in backend.train(run, synthetic_groups(2, 2, equal=True), config):
                pass
            return await backend.get_step(run)
        finally:
            await backend.close()

    assert asyncio.run(main()) == 1
    one = model_dir / "checkpoints" / "0001"
    state = json.loads((one / "trainer_state.json").read_text())
    assert state["copied_from"] == 0 and state["mode"] == "lora"
    assert (one / "optimizer.json").is_file()
    copied = load_file(str(one / "adapter_model.safetensors"))
    original = load_file(str(art / "adapter_model.safetensors"))
    assert copied.keys() == original.keys()
    assert all(copied[k].equal(original[k]) for k in original)
