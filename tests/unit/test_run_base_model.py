"""A run keeps the base model it was trained from: registering a trained run with another
`base_model` is refused in one line naming both and how to start a new run, and nothing in
the run directory changes (every file hashed before and after). A run with nothing trained
yet may be re-pointed. Real files in tmp_path, the in-memory backend (a verified fake) for the
training, with and without the run's lease."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import pytest

import arthex as art
from arthex.core.errors import BaseModelChangedError, InvalidInputError
from arthex.testing.fakes.backend import InMemoryBackend
from tests.unit.test_art_model_surface import groups, trainable


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under `root` (relative path -> sha256 of its bytes), and every folder."""
    digest: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        digest[key] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
    return digest


def run_dir(tmp_path: Path) -> Path:
    return tmp_path / "proj" / "models" / "agent"


async def trained_once(tmp_path: Path, one_trainer: bool) -> None:
    model = trainable(tmp_path, base_model="org/base-a")
    await model.register(InMemoryBackend(one_trainer=one_trainer))
    await model.train(groups())
    assert await model.get_step() == 1
    await model.close()


@pytest.mark.parametrize("one_trainer", [False, True], ids=["no lease", "with the lease"])
def test_a_trained_run_refuses_another_base_model_and_nothing_changes(
    tmp_path: Path, one_trainer: bool
) -> None:
    async def main() -> None:
        await trained_once(tmp_path, one_trainer)
        before = tree_digest(run_dir(tmp_path))
        assert "model.json" in before and "history.jsonl" in before
        other = trainable(tmp_path, base_model="org/base-b")
        backend = InMemoryBackend(one_trainer=one_trainer)
        with pytest.raises(BaseModelChangedError) as caught:
            await other.register(backend)
        message = str(caught.value)
        assert "\n" not in message
        assert "'org/base-a'" in message and "'org/base-b'" in message
        assert "proj/agent" in message and "run_name=" in message
        assert isinstance(caught.value, InvalidInputError)
        assert tree_digest(run_dir(tmp_path)) == before
        recorded = json.loads((run_dir(tmp_path) / "model.json").read_text())
        assert recorded["base_model"] == "org/base-a"
        # the same base model still resumes, at the step it reached
        same = trainable(tmp_path, base_model="org/base-a")
        await same.register(backend)
        await same.close()

    asyncio.run(main())


def test_a_run_with_nothing_trained_may_be_re_pointed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        first = trainable(tmp_path, base_model="org/base-a")
        await first.register(InMemoryBackend())
        await first.log(groups(), split="val")  # step 0 rows do not pin the base model
        await first.close()
        again = trainable(tmp_path, base_model="org/base-b")
        await again.register(InMemoryBackend())
        result = await again.train(groups())
        assert result.step == 1
        await again.close()

    asyncio.run(main())
    recorded = json.loads((run_dir(tmp_path) / "model.json").read_text())
    assert recorded["base_model"] == "org/base-b"
    assert any("'org/base-a' to 'org/base-b'" in r.getMessage() for r in caplog.records)


def test_the_refusal_holds_for_a_run_name_and_a_different_model_name(tmp_path: Path) -> None:
    async def main() -> None:
        model = trainable(tmp_path, run_name="r1", base_model="org/base-a")
        await model.register(InMemoryBackend())
        await model.train(groups())
        await model.close()
        renamed = art.TrainableModel(
            name="other-name",
            project="proj",
            run_name="r1",
            base_model="org/base-b",
            base_path=str(tmp_path),
            report_metrics=[],
        )
        with pytest.raises(BaseModelChangedError, match=r"run proj/r1 was trained from"):
            await renamed.register(InMemoryBackend())

    asyncio.run(main())
