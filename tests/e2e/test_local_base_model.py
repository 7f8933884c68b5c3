"""LocalBackend keeps a run on the base model it was trained from (the tiny model on CPU):
another `base_model` for a trained run is refused before anything in the run directory
changes, by the model's register and, when the history cannot tell (it was lost), by the
backend from `model.json` and its checkpoints; a run at step 0 is re-pointed, its step-0
checkpoint rebuilt from the new base model (here one of another size)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

from safetensors.torch import load_file

import arthex as art
from arthex.core.errors import BaseModelChangedError, InvalidInputError
from arthex.testing.builders import synthetic_groups
from arthex.testing.tiny_model import tiny_model
from tests.unit.test_run_base_model import tree_digest

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    root = tmp_path_factory.mktemp("bases")
    return tiny_model(root / "a", seed=0), tiny_model(root / "b", seed=1)


def model_on(tmp_path: Path, base_model: str) -> art.TrainableModel:
    return art.TrainableModel(
        name="agent",
        project="proj",
        base_model=base_model,
        base_path=str(tmp_path),
        report_metrics=[],
    )


def run_dir(tmp_path: Path) -> Path:
    return tmp_path / "proj" / "models" / "agent"


async def train_once(tmp_path: Path, base_model: str) -> None:
    backend = art.LocalBackend(path=str(tmp_path))
    model = model_on(tmp_path, base_model)
    try:
        await model.register(backend)
        await model.train(synthetic_groups(), art.TrainConfig(learning_rate=1e-3), progress=False)
        assert await model.get_step() == 1
    finally:
        await model.close()
        await backend.close()


async def refused(tmp_path: Path, base_model: str) -> BaseModelChangedError:
    backend = art.LocalBackend(path=str(tmp_path))
    model = model_on(tmp_path, base_model)
    try:
        with pytest.raises(BaseModelChangedError) as caught:
            await model.register(backend)
        return caught.value
    finally:
        await model.close()
        await backend.close()


def test_a_trained_local_run_refuses_another_base_model_and_its_files_stay(
    tmp_path: Path, bases: tuple[str, str]
) -> None:
    first, second = bases

    async def main() -> None:
        await train_once(tmp_path, first)
        before = tree_digest(run_dir(tmp_path))
        assert "checkpoints/0001" in before
        error = await refused(tmp_path, second)
        assert str(error) == (
            f"run proj/agent was trained from base model {first!r}, not {second!r}: a trained "
            f"run keeps its base model; to train {second!r}, start a new run under another "
            "name (TrainableModel(..., run_name='<new name>'))"
        )
        assert tree_digest(run_dir(tmp_path)) == before
        # the history gone, the backend still knows from model.json and the checkpoints
        (run_dir(tmp_path) / "history.jsonl").unlink()
        before = tree_digest(run_dir(tmp_path))
        await refused(tmp_path, second)
        after = tree_digest(run_dir(tmp_path))
        assert {k: v for k, v in after.items() if k != "trainer.lease"} == {
            k: v for k, v in before.items() if k != "trainer.lease"
        }

    asyncio.run(main())


def test_a_local_run_at_step_0_is_re_pointed_with_a_new_step_0(
    tmp_path: Path, bases: tuple[str, str]
) -> None:
    first, _ = bases
    wider = tiny_model(tmp_path / "wider", size="3M")

    async def main() -> None:
        backend = art.LocalBackend(path=str(tmp_path))
        model = model_on(tmp_path, first)
        await model.register(backend)
        await model.close()
        await backend.close()
        step0 = run_dir(tmp_path) / "checkpoints" / "0000" / "model.safetensors"
        narrow = {k: tuple(v.shape) for k, v in load_file(str(step0)).items()}
        backend = art.LocalBackend(path=str(tmp_path))
        model = model_on(tmp_path, wider)
        try:
            await model.register(backend)
            rebuilt = {k: tuple(v.shape) for k, v in load_file(str(step0)).items()}
            assert len(rebuilt) > len(narrow)  # the wider model has more layers
            await model.train(
                synthetic_groups(), art.TrainConfig(learning_rate=1e-3), progress=False
            )
            assert await model.get_step() == 1
        finally:
            await model.close()
            await backend.close()

    asyncio.run(main())


def test_a_run_open_on_a_backend_is_not_re_pointed_under_it(
    tmp_path: Path, bases: tuple[str, str]
) -> None:
    """Its trainer and engine hold the first base model: re-pointing needs a new backend."""
    first, second = bases

    async def main() -> None:
        backend = art.LocalBackend(path=str(tmp_path))
        model = model_on(tmp_path, first)
        other = model_on(tmp_path, second)
        try:
            await model.register(backend)
            await model.close()
            with pytest.raises(InvalidInputError) as caught:
                await other.register(backend)
            assert str(caught.value) == (
                f"proj/agent is open on this LocalBackend with base model {first!r}, not "
                f"{second!r}; close the backend before re-pointing the run, or start a new run "
                "under another name"
            )
        finally:
            await other.close()
            await backend.close()

    asyncio.run(main())
