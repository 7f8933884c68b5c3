"""LocalBackend keeps serving step N while N -> N+1 trains, and moves `{name}` to N+1 only
once it is durable: no stop-the-world, which is what lets the pipeline overlap rollouts with
training.

The update is held at a barrier after its optimizer step and before its checkpoint is written
(the trainer's weights already changed, nothing published yet); requests made meanwhile must
be answered, by step N's weights. Greedy completions with logprobs tell the weights apart.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

import arthex
from arthex.adapters.local import LocalBackend
from arthex.adapters.local import checkpoints as checkpoints_module
from arthex.core.config import TrainConfig
from arthex.core.trajectories import Trajectory, TrajectoryGroup
from arthex.testing.tiny_model import tiny_model

pytestmark = pytest.mark.e2e

MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "Count from one to ten."}]
ANSWER_WITHIN_S = 60.0


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


async def greedy(client: Any, name: str) -> tuple[list[float], str]:
    response = await client.chat.completions.create(
        model=name, messages=MESSAGES, max_tokens=8, temperature=0.0, logprobs=True
    )
    choice = response.choices[0]
    return [t.logprob for t in choice.logprobs.content], response.model


def test_step_n_answers_while_the_next_step_trains_and_the_name_moves_when_it_is_durable(
    base_model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held, release = threading.Event(), threading.Event()
    publish = checkpoints_module.publish

    def publish_after_the_barrier(*args: Any, **kwargs: Any) -> Any:
        held.set()
        assert release.wait(120), "the test never released the update"
        return publish(*args, **kwargs)

    async def main() -> dict[str, Any]:
        model = arthex.TrainableModel(
            name="agent",
            project="serving",
            base_model=base_model,
            base_path=str(tmp_path),
            report_metrics=[],
        )
        backend = LocalBackend(engine="torch", full_finetune=True)
        try:
            await model.register(backend)
            client = model.openai_client()
            before = await greedy(client, "agent@0")
            groups = []
            for g in range(2):
                trajectories = []
                for r in range(4):
                    response = await client.chat.completions.create(
                        model="agent@0",
                        messages=MESSAGES,  # type: ignore[arg-type]
                        max_tokens=8,
                        logprobs=True,
                    )
                    trajectories.append(
                        Trajectory(
                            messages_and_choices=[*MESSAGES, response.choices[0]],
                            reward=float(r + g),
                        )
                    )
                groups.append(TrajectoryGroup(trajectories))
            monkeypatch.setattr(checkpoints_module, "publish", publish_after_the_barrier)
            training = asyncio.ensure_future(
                model.train(groups, TrainConfig(learning_rate=5e-2), progress=False)
            )
            assert await asyncio.to_thread(held.wait, 120), "the update never reached publish"
            # a server that waited for the update would time out here, not hang the test
            during = [
                await asyncio.wait_for(greedy(client, name), ANSWER_WITHIN_S)
                for name in ("agent", "agent@0")
            ]
            answered_while_held = not training.done()
            release.set()
            await training
            return {
                "before": before,
                "during": during,
                "answered_while_held": answered_while_held,
                "after": await greedy(client, "agent"),
                "step1": await greedy(client, "agent@1"),
                "step0": await greedy(client, "agent@0"),
            }
        finally:
            release.set()
            await backend.close()
            await model.close()

    seen = asyncio.run(main())
    assert seen["answered_while_held"], "requests waited for the update"
    for logprobs, _ in seen["during"]:
        assert logprobs == pytest.approx(seen["before"][0], abs=1e-5)
    assert seen["after"][0] == pytest.approx(seen["step1"][0], abs=1e-5)
    assert seen["step0"][0] == pytest.approx(seen["before"][0], abs=1e-5)
    assert max(abs(a - b) for a, b in zip(seen["after"][0], seen["before"][0])) > 1e-4
