"""ART's model methods on arthex's models: cost metrics from the step builder and the caller
land in the history with ART's roll-ups (`costs/train`, `costs/all`) and running totals
(`costs/cum/...`); a cost calculator prices the completions of `openai_client()`;
`update_wandb_config` refuses a conflicting value; `litellm_completion_params`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx2
import pytest
from openai import AsyncOpenAI

import arthex
from arthex.accounting.pricing import ModelPricing, build_cost_calculator
from arthex.art.metrics import MetricsBuilder
from arthex.core.identity import RunRef
from arthex.core.metrics import MetricsRow
from tests._chat_script import ChatScript


def history(tmp_path: Path, project: str, name: str) -> list[dict[str, Any]]:
    path = tmp_path / project / "models" / name / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_costs_land_in_the_history_rolled_up_and_totalled(tmp_path: Path) -> None:
    model = arthex.Model(name="m", project="p", base_path=str(tmp_path), report_metrics=[])

    async def main() -> None:
        builder = model.metrics_builder("train")
        builder.add_cost("train/judge", 0.25)
        await model.log(metrics={"costs/train/api": 1.0}, split="train", step=1)
        model.metrics_builder("eval").add_cost("eval/judge", 2.0)
        await model.log(metrics={"costs/train/api": 0.5}, split="val", step=2)

    asyncio.run(main())
    first, second = history(tmp_path, "p", "m")
    assert first["costs/train/judge"] == 0.25 and first["costs/train/api"] == 1.0
    assert first["costs/train"] == 1.25 and first["costs/all"] == 1.25
    assert first["costs/cum/all"] == 1.25 and first["costs/cum/train/judge"] == 0.25
    # the val log takes the eval builder's costs, not the train builder's (drained already)
    assert second["costs/eval/judge"] == 2.0 and second["costs/all"] == 2.5
    assert second["costs/cum/all"] == 3.75 and second["costs/cum/train/api"] == 1.5
    assert "costs/train/judge" not in second


def test_a_cost_that_is_also_a_parent_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    model = arthex.Model(name="m", project="p", base_path=str(tmp_path), report_metrics=[])
    model.metrics_builder("train").add_cost("train/judge", 0.5)
    for metrics in ({"costs/train": 1.0, "costs/train/api": 1.0}, {"costs/all": 2.0}):
        with pytest.raises(arthex.InvalidInputError, match="cannot log 'costs/"):
            asyncio.run(model.log(metrics=metrics, split="train", step=1))
    assert not (tmp_path / "p" / "models" / "m" / "history.jsonl").exists()
    assert model.metrics_builder("train").pending() == {"costs/train/judge": 0.5}  # kept


def test_a_cost_calculator_prices_each_completion_while_a_builder_is_active() -> None:
    script = ChatScript(lambda request: ("ok", []))
    client = AsyncOpenAI(
        base_url="http://scripted.invalid/v1",
        api_key="k",
        http_client=httpx2.AsyncClient(transport=script.transport()),
    )
    model = arthex.TrainableModel(
        name="t", project="p", base_model="b", report_metrics=[], base_path="/nonexistent-unused"
    )
    model.set_cost_calculator(build_cost_calculator(ModelPricing(prefill=1e6, sample=1e6, train=0)))
    wrapped = model._art_wrap_client(client)
    assert model._art_wrap_client(wrapped) is client  # wrapped once

    async def main() -> tuple[dict[str, float], int]:
        ask: Any = [{"role": "user", "content": "hi"}]
        await wrapped.chat.completions.create(model="x", messages=ask)  # no builder: not priced
        builder = MetricsBuilder(cost_context="train")
        with builder.activate_context():
            reply = await wrapped.chat.completions.create(model="x", messages=ask, n=1)
        assert reply.usage is not None
        return await builder.drain_pending(), reply.usage.prompt_tokens

    pending, prompt = asyncio.run(main())
    # $1 per token: the prompt's tokens, and the one completion token the script returns
    assert pending == {
        "costs/train/tinker_prefill": float(prompt),
        "costs/train/tinker_sample": 1.0,
    }
    model.set_cost_calculator(None)
    assert model.cost_calculator(10, 10, "train") == {}


class ConfigMirror:
    """A mirror that records what the model sends as run config."""

    def __init__(self) -> None:
        self.configs: list[dict[str, Any]] = []

    async def report(self, run: RunRef, row: MetricsRow) -> None:
        return None

    async def close(self) -> None:
        return None

    def update_config(self, run: RunRef, config: Mapping[str, Any]) -> None:
        self.configs.append(dict(config))


def test_update_wandb_config_merges_and_refuses_a_conflicting_value(tmp_path: Path) -> None:
    mirror = ConfigMirror()
    model = arthex.Model(name="m", project="p", base_path=str(tmp_path), mirrors=[mirror])
    model.update_wandb_config({"lr": 1e-5, "opt": {"beta": 0.9}})
    model.update_wandb_config({"lr": 1e-5, "opt": {"eps": 1e-8}})
    assert mirror.configs[-1] == {
        "model": mirror.configs[-1]["model"],
        "lr": 1e-5,
        "opt": {"eps": 1e-8},
    }
    with pytest.raises(ValueError, match=r"Conflicting value for 'opt\.beta'"):
        model.update_wandb_config({"opt": {"beta": 0.5}})
    with pytest.raises(TypeError):
        model.update_wandb_config([("lr", 1)])  # type: ignore[arg-type]
    assert len(mirror.configs) == 2  # nothing sent for the refused ones


def test_litellm_completion_params_name_the_served_model(tmp_path: Path) -> None:
    model = arthex.Model(
        name="gpt",
        project="p",
        base_path=str(tmp_path),
        report_metrics=[],
        inference_base_url="http://h/v1",
        inference_api_key="k",
    )
    assert model.litellm_completion_params() == {
        "model": "gpt",
        "base_url": "http://h/v1",
        "api_key": "k",
        "temperature": 1,
    }
    trainable = arthex.TrainableModel(
        name="t", project="p", base_model="b", base_path=str(tmp_path), report_metrics=[]
    )
    params = trainable.litellm_completion_params(step=3)
    assert params["model"] == f"hosted_vllm/{trainable.get_inference_name(3)}"
