"""The served name is the model's `name`, its files the `run_name`'s (ART 0.5.23's rule):
on LocalBackend (the tiny model on CPU) a model is served as `{name}@{step}` and its files
live under `{project}/models/{run_name}`; two runs of one name on one backend serve the same
names from two endpoints, each answering from its own run, as ART's LocalBackend gives each
run a server of its own. Unregistered, `get_inference_name()` is the name, as in ART."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

import arthex as art
from arthex.core.errors import InvalidNameError
from arthex.testing.builders import synthetic_groups
from arthex.testing.tiny_model import tiny_model

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_model(tmp_path_factory.mktemp("base") / "tiny", seed=0)


def model(tmp_path: Path, base: str, run_name: str) -> art.TrainableModel:
    return art.TrainableModel(
        name="agent",
        run_name=run_name,
        project="proj",
        base_model=base,
        base_path=str(tmp_path),
        report_metrics=[],
    )


async def served(m: art.TrainableModel) -> list[str]:
    return sorted(entry.id for entry in (await m.openai_client().models.list()).data)


async def reply(m: art.TrainableModel, name: str) -> str:
    completion = await m.openai_client().chat.completions.create(
        model=name, messages=[{"role": "user", "content": "hi"}], max_tokens=2, temperature=0
    )
    return completion.model


def test_two_runs_of_one_name_are_served_as_name_at_step_by_two_endpoints(
    tmp_path: Path, base: str
) -> None:
    first, second = model(tmp_path, base, "agent-1"), model(tmp_path, base, "agent-2")
    assert first.get_inference_name() == "agent" and first.get_inference_name(3) == "agent@3"

    async def main() -> None:
        backend = art.LocalBackend(path=str(tmp_path))
        try:
            await first.register(backend)
            await second.register(backend)
            assert first.get_inference_name() == second.get_inference_name() == "agent@0"
            assert first.inference_base_url != second.inference_base_url
            await first.train(synthetic_groups(), art.TrainConfig(learning_rate=1e-3))
            assert first.get_inference_name() == "agent@1"
            assert second.get_inference_name() == "agent@0"
            assert await served(first) == ["agent", "agent@0", "agent@1"]
            assert await served(second) == ["agent", "agent@0"]
            assert await reply(first, "agent@1") == "agent@1"
            assert await reply(second, first.get_inference_name(0)) == "agent@0"
        finally:
            await first.close()
            await second.close()
            await backend.close()

    asyncio.run(main())
    runs = tmp_path / "proj" / "models"
    assert sorted(p.name for p in runs.iterdir()) == ["agent-1", "agent-2"]
    assert (runs / "agent-1" / "checkpoints" / "0001").is_dir()
    assert not (runs / "agent-2" / "checkpoints" / "0001").exists()


def test_a_served_name_that_is_not_one_path_segment_is_refused(tmp_path: Path, base: str) -> None:
    with pytest.raises(InvalidNameError, match="name 'my agent'"):
        art.TrainableModel(
            name="my agent", run_name="r1", project="proj", base_model=base, base_path=str(tmp_path)
        )
