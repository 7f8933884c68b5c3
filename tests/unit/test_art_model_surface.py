"""ART 0.5.23's model surface on arthex: `run_name`, the inference fields, per-run state,
`backend.train(model, groups, ...)` with `model.log(..., metrics=result.metrics, ...)`, and
both training styles on one run without a duplicate row or part. Real files in tmp_path, the
in-memory backend (a verified fake) for the training."""

from __future__ import annotations

import asyncio
import json
import logging
import math
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pydantic import BaseModel

import arthex as art
from arthex.core.errors import InvalidInputError, InvalidNameError, UnsupportedCapability
from arthex.core.training_row import GRADIENT_STEPS_KEY
from arthex.testing.builders import make_group
from arthex.testing.fakes.backend import InMemoryBackend


def trainable(tmp_path: Path, **kwargs: Any) -> art.TrainableModel:
    options: dict[str, Any] = {
        "name": "agent",
        "project": "proj",
        "base_model": "tiny",
        "base_path": str(tmp_path),
        "report_metrics": [],
        **kwargs,
    }
    return art.TrainableModel(**options)


def history(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "history.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def parts(run_dir: Path, split: str = "train") -> list[str]:
    folder = run_dir / "trajectories" / split
    return sorted(p.name for p in folder.glob("*.parquet")) if folder.exists() else []


def groups() -> list[art.TrajectoryGroup]:
    return [make_group((0.0, 1.0), prompt="a"), make_group((1.0, 0.5, 0.0), prompt="b")]


# -- run_name ---------------------------------------------------------------------------------


def test_run_name_names_the_run_directory_and_name_the_inference_alias(tmp_path: Path) -> None:
    async def main() -> None:
        model = trainable(tmp_path, run_name="agent-run-2")
        assert model.get_inference_name() == "agent"  # unregistered: the name, as in ART
        await model.register(InMemoryBackend())
        assert model.name == "agent" and model.run_name == "agent-run-2"
        assert model.get_inference_name() == "agent@0"
        assert model.get_inference_name(2) == "agent@2"
        assert model.spec().served_name == "agent"
        await model.log(groups(), split="val")

    asyncio.run(main())
    run_dir = tmp_path / "proj" / "models" / "agent-run-2"
    assert parts(run_dir, "val") == ["0000.parquet"]
    assert json.loads((run_dir / "model.json").read_text())["name"] == "agent-run-2"
    assert not (tmp_path / "proj" / "models" / "agent").exists()


def test_without_run_name_the_run_is_called_by_its_name(tmp_path: Path) -> None:
    model = trainable(tmp_path)
    assert model.run_name == model.name == "agent"
    assert isinstance(model, art.Model)  # as in ART: rollout(model: art.Model) takes it
    with pytest.raises(InvalidNameError):
        trainable(tmp_path, run_name="../escape")


def test_a_pydantic_config_is_kept_as_given_and_recorded_as_json(tmp_path: Path) -> None:
    class Policy(BaseModel):
        max_turns: int = 3

    model = trainable(tmp_path, config=Policy(max_turns=5))
    assert model.config.max_turns == 5  # ART scripts read model.config.<field>
    assert model.spec().config == {"max_turns": 5}
    with pytest.raises(InvalidInputError, match="config"):
        trainable(tmp_path, config=[1, 2])


def test_arts_model_side_backend_settings_are_named_where_arthex_keeps_them(
    tmp_path: Path,
) -> None:
    with pytest.warns(UserWarning, match=r"LocalBackend\(lora_rank"):
        trainable(tmp_path, lora_config={"r": 16})
    with pytest.warns(UserWarning, match="_internal_config is ignored"):
        trainable(tmp_path, _internal_config={"engine_args": {}})
    with pytest.warns(UserWarning, match="in_process=False"):
        art.LocalBackend(in_process=False)


# -- inference fields -------------------------------------------------------------------------


def test_a_prompted_model_gets_its_client_and_name_from_the_inference_fields(
    tmp_path: Path,
) -> None:
    model = art.Model(
        name="gpt-4.1",
        project="proj",
        base_path=str(tmp_path),
        report_metrics=[],
        inference_base_url="http://127.0.0.1:9/v1",
        inference_api_key="sk-test",
        inference_model_name="openai/gpt-4.1",
    )
    client = model.openai_client()
    assert str(client.base_url) == "http://127.0.0.1:9/v1/"
    assert client.api_key == "sk-test"
    assert model.openai_client() is client
    assert model.get_inference_name() == "openai/gpt-4.1"
    assert model.get_inference_name(step=3) == "openai/gpt-4.1@3"
    bare = art.Model(name="m", project="proj", base_path=str(tmp_path), report_metrics=[])
    assert bare.get_inference_name() == "m" and bare.inference_model_name is None
    with pytest.raises(InvalidInputError, match="inference_base_url"):
        bare.openai_client()
    asyncio.run(model.close())


# -- state ------------------------------------------------------------------------------------


def test_state_is_read_merged_and_overwritten_in_the_run_directory(tmp_path: Path) -> None:
    model = trainable(tmp_path, run_name="run-1")
    path = tmp_path / "proj" / "models" / "run-1" / "state.json"
    assert model.read_state() is None
    model.overwrite_state({"cursor": {"epoch": 0, "offset": 4}, "best": 0.5})
    merged = model.merge_state({"cursor": {"offset": 8}, "notes": ["a"]})
    # ART's deep merge: nested dicts merge key by key, other values replace
    assert merged == {"cursor": {"epoch": 0, "offset": 8}, "best": 0.5, "notes": ["a"]}
    assert json.loads(path.read_text()) == merged == model.read_state()
    with pytest.warns(DeprecationWarning, match="overwrite_state"):
        model.write_state({"only": 1})
    assert model.read_state() == {"only": 1}
    # another model object on the same run (a restarted script) sees the same state
    assert trainable(tmp_path, run_name="run-1").read_state() == {"only": 1}


def test_bad_state_is_refused_before_the_file_changes(tmp_path: Path) -> None:
    model = trainable(tmp_path)
    model.overwrite_state({"ok": True})
    path = tmp_path / "proj" / "models" / "agent" / "state.json"
    before = path.read_bytes()
    for bad in ({"x": math.nan}, {"x": object()}, {1.5: "key"}, {"a": [{None: 1}]}):
        with pytest.raises(InvalidInputError, match="JSON"):
            model.merge_state(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="dict"):
        model.overwrite_state([1])  # type: ignore[arg-type]
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["state.json", "state.json.lock"]


def test_a_corrupt_state_file_is_reported_with_its_path(tmp_path: Path) -> None:
    model = trainable(tmp_path)
    path = tmp_path / "proj" / "models" / "agent" / "state.json"
    path.parent.mkdir(parents=True)
    path.write_text("[1, 2]")
    with pytest.raises(art.CorruptDataError, match=r"state\.json"):
        model.read_state()


# -- backend.train and the two training styles -----------------------------------------------


def test_backend_train_records_the_update_and_log_adds_only_the_groups(tmp_path: Path) -> None:
    async def main() -> art.TrainResult:
        backend = InMemoryBackend()
        model = trainable(tmp_path)
        await model.register(backend)
        batch = groups()
        result = await backend.train(model, batch, learning_rate=1e-3)
        await model.log(batch, metrics=result.metrics, step=result.step, split="train")
        return result

    result = asyncio.run(main())
    run_dir = tmp_path / "proj" / "models" / "agent"
    assert result.step == 1
    assert result.metrics["loss/learning_rate"] == pytest.approx(1e-3)
    rows = history(run_dir)
    # the training row (written when the update was durable), then the groups' summary row
    assert [row["step"] for row in rows] == [1, 1]
    assert rows[0][GRADIENT_STEPS_KEY] == result.metrics[GRADIENT_STEPS_KEY]
    assert "train/reward" in rows[1] and "loss/learning_rate" not in rows[1]
    assert rows[1]["train/reward"] == pytest.approx((0.0 + 1.0 + 1.0 + 0.5 + 0.0) / 5)
    assert parts(run_dir) == ["0001.parquet"]  # ART files a backend.train batch at N+1
    assert pq.read_table(run_dir / "trajectories/train/0001.parquet").num_rows == 5


def test_backend_train_without_a_log_still_keeps_the_training_metrics(tmp_path: Path) -> None:
    async def main() -> None:
        backend = InMemoryBackend()
        model = trainable(tmp_path)
        await model.register(backend)
        await backend.train(model, groups())
        await backend.train(model, groups())

    asyncio.run(main())
    rows = history(tmp_path / "proj" / "models" / "agent")
    assert [row["step"] for row in rows] == [1, 2]
    assert all(GRADIENT_STEPS_KEY in row for row in rows)


def test_both_training_styles_on_one_run_write_each_row_and_part_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        backend = InMemoryBackend()
        model = trainable(tmp_path)
        await model.register(backend)
        art_batch, arthex_batch = groups(), groups()
        result = await backend.train(model, art_batch, learning_rate=1e-4)  # 0 -> 1
        await model.log(art_batch, metrics=result.metrics, step=result.step, split="train")
        again = await model.train(arthex_batch, config=art.TrainConfig())  # 1 -> 2
        # an ART habit after model.train: neither the groups nor the metrics are new
        with caplog.at_level(logging.WARNING, logger="arthex"):
            row = await model.log(
                arthex_batch, metrics=again.metrics, step=again.step, split="train"
            )
        assert row is None
        assert "already logged by model.train at step 1" in caplog.text
        # a copy of the result's metrics with one new key adds only that key
        extra = await model.log(metrics={**again.metrics, "custom": 2.0}, step=again.step)
        assert extra is not None and dict(extra.values) == {"val/custom": 2.0}

    asyncio.run(main())
    run_dir = tmp_path / "proj" / "models" / "agent"
    rows = history(run_dir)
    training_rows = [row["step"] for row in rows if GRADIENT_STEPS_KEY in row]
    assert training_rows == [1, 2]  # one training row per update
    summaries = [row["step"] for row in rows if "train/reward" in row]
    assert summaries == [1, 1]  # the ART-style batch at 1, model.train's batch at its step 1
    assert len(rows) == 5
    train_rows = pq.read_table(run_dir / "trajectories" / "train").num_rows
    assert train_rows == 2 * 5  # each batch stored once


def test_backend_train_takes_arts_options_and_names_the_arthex_way_for_the_rest(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        backend = InMemoryBackend(losses=("cispo",))
        model = trainable(tmp_path)
        await model.register(backend)
        with pytest.raises(InvalidInputError, match=r"LocalBackend\(adam_betas"):
            await backend.train(model, groups(), adam_params={"beta1": 0.8})
        with pytest.raises(InvalidInputError, match="kl_penalty_reference_step"):
            await backend.train(model, groups(), kl_ref_adapter_path="/tmp/adapter")
        with pytest.raises(InvalidInputError, match="delete_checkpoints"):
            await backend.train(model, groups(), save_checkpoint=False)
        with pytest.raises(TypeError, match="unexpected keyword argument 'learning_rat'"):
            await backend.train(model, groups(), learning_rat=1e-5)  # type: ignore[call-arg]
        with pytest.raises(UnsupportedCapability):  # the option reached the backend
            await backend.train(model, groups(), loss_fn="ppo")
        with pytest.raises(InvalidInputError, match="registered with InMemoryBackend"):
            await InMemoryBackend().train(model, groups())
        assert await model.get_step() == 0  # nothing refused was trained
        result = await backend.train(
            model,
            groups(),
            learning_rate=2e-5,
            normalize_advantages=False,
            logprob_calculation_chunk_size=8,  # a memory knob: accepted, no effect
            optimizer_save_interval=5,
            verbose=True,
        )
        assert result.step == 1 and result.metrics["loss/learning_rate"] == pytest.approx(2e-5)
        # the port call still works on the same method
        run_steps = [m async for m in backend.train_steps(model.run, groups(), art.TrainConfig())]
        assert len(run_steps) >= 1

    asyncio.run(main())
    assert [r["step"] for r in history(tmp_path / "proj" / "models" / "agent")] == [1]


def test_arts_train_options_map_onto_train_config() -> None:
    from arthex.core.backend_train import train_config_from_options

    config = train_config_from_options(
        {
            "learning_rate": 3e-6,
            "loss_fn": "ppo",
            "epsilon": 0.1,
            "epsilon_high": 0.3,
            "kl_penalty_coef": 0.05,
            "kl_penalty_reference_step": 2,
            "normalize_advantages": False,
            "allow_training_without_logprobs": True,
            "scale_learning_rate_by_reward_std_dev": True,
            "packed_sequence_length": 512,
            "grad_accumulation_sequences": 4,
            "importance_sampling_level": "token",
            "kl_penalty_source": "current_learner",
        }
    )
    assert config == art.TrainConfig(
        learning_rate=3e-6,
        loss_fn="ppo",
        epsilon=0.1,
        epsilon_high=0.3,
        kl_penalty_coef=0.05,
        kl_penalty_reference_step=2,
        scale_rewards=False,
        allow_training_without_logprobs=True,
        scale_learning_rate_by_reward_std_dev=True,
        packed_sequence_length=512,
        grad_accumulation_sequences=4,
    )
    assert train_config_from_options({}) == art.TrainConfig()  # ART's defaults are arthex's
    assert train_config_from_options({"ppo": True}).loss_fn == "ppo"  # ServerlessBackend's
    assert train_config_from_options({"ppo": True, "loss_fn": "cispo"}).loss_fn == "cispo"
    with pytest.raises(InvalidInputError, match="importance_sampling_level"):
        train_config_from_options({"importance_sampling_level": "sequence"})
