"""`art.adapter_leases` under arthex: inside a pin, a registered trainable model names the
pinned step (or the pinned exact name) instead of its latest, per model and per task, and the
pin is gone after the block; worked examples on a model trained to step 2."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import arthex
from arthex.art.adapter_leases import (
    InferenceTarget,
    pin_inference_step,
    pin_inference_target,
    pinned_inference_name,
    pinned_inference_step,
)
from arthex.core.errors import InvalidInputError, NotInArthexError
from arthex.ports.training_backend import InferenceEndpoint
from arthex.testing.builders import synthetic_groups
from arthex.testing.fakes import InMemoryBackend


class ServingBackend(InMemoryBackend):
    async def register(self, model: arthex.ModelSpec) -> InferenceEndpoint | None:
        await super().register(model)
        return InferenceEndpoint(base_url="http://127.0.0.1:9/v1", api_key="k", model_name="m")


def test_the_pin_reads_back_as_art_reads_it() -> None:
    async def go() -> list[object]:
        seen: list[object] = [pinned_inference_step("m"), pinned_inference_name("m")]
        async with pin_inference_step("m", 3):
            seen += [
                pinned_inference_step("m"),
                pinned_inference_name("m"),
                pinned_inference_step("x"),
            ]
            async with pin_inference_target("m", step=4, inference_name="m:exact"):
                seen += [
                    pinned_inference_step("m"),
                    pinned_inference_name("m"),
                    pinned_inference_name("m", 4),
                    pinned_inference_name("m", 3),  # another step: no exact name
                ]
            seen.append(pinned_inference_step("m"))  # the outer pin again
        seen.append(pinned_inference_step("m"))
        return seen

    assert asyncio.run(go()) == [None, None, 3, None, None, 4, "m:exact", "m:exact", None, 3, None]
    assert InferenceTarget(step=2).served_name is None


def test_a_registered_model_names_the_pinned_step_inside_the_block(tmp_path: Path) -> None:
    async def go() -> list[str]:
        model = arthex.TrainableModel(
            name="m", project="p", base_model="tiny", base_path=str(tmp_path), report_metrics=[]
        )
        await model.register(ServingBackend())
        await model.train(synthetic_groups())
        await model.train(synthetic_groups())
        names = [model.get_inference_name()]  # the latest: step 2
        async with pin_inference_step("m", 1):
            names += [model.get_inference_name(), model.get_inference_name(2)]
            async with pin_inference_target("m", step=1, inference_name="m-exact"):
                names += [model.get_inference_name(), model.get_inference_name(1)]
                names.append(model.get_inference_name(2))  # not the pinned step
        names.append(model.get_inference_name())
        await model.close()
        return names

    assert asyncio.run(go()) == ["m@2", "m@1", "m@2", "m-exact", "m-exact", "m@2", "m@2"]


def test_a_pin_holds_in_its_own_task_and_the_tasks_it_starts() -> None:
    async def go() -> tuple[int | None, int | None, int | None]:
        async def step_seen() -> int | None:
            await asyncio.sleep(0)
            return pinned_inference_step("m")

        async with pin_inference_step("m", 5):
            inside = await asyncio.create_task(step_seen())
            elsewhere = asyncio.create_task(step_seen())
        # a task made inside the block keeps the pin it was made with; one made after has none
        after = await asyncio.create_task(step_seen())
        return inside, await elsewhere, after

    assert asyncio.run(go()) == (5, 5, None)


@pytest.mark.parametrize(
    ("step", "name", "message"),
    [(-1, None, "int >= 0, got -1"), (True, None, "got True"), (1, "", "non-empty str")],
    ids=["negative", "bool", "empty-name"],
)
def test_a_bad_pin_is_refused(step: int, name: str | None, message: str) -> None:
    async def go() -> None:
        async with pin_inference_target("m", step=step, inference_name=name):
            pass

    with pytest.raises(InvalidInputError, match=message):
        asyncio.run(go())


def test_the_in_flight_adapter_name_and_the_lease_manager_stay_refused() -> None:
    with pytest.raises(NotInArthexError, match="no in-flight adapter name"):
        from arthex.art.adapter_leases import in_flight_lora_name  # type: ignore[attr-defined]  # noqa: F401
    with pytest.raises(NotInArthexError, match="arthex keeps no adapter leases"):
        import arthex.art.local.adapter_leases  # noqa: F401
