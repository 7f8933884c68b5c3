"""Real verifiers environments (a single-turn and a multi-turn one, built from an in-memory
dataset) rolled out through `from_verifiers` against LocalBackend's served tiny model, then
trained: the rubric's rewards arrive unchanged, the ids trained are the ids sampled, training
advances the model, and the PipelineTrainer runs on the same environment.

The oracle for what was sampled is the harness's own record (`arthex_vf_arith.RECEIVED`): the raw
responses it got back from verifiers' interception server, which never pass through arthex's
capture. The oracle for the rewards is the rubric recomputed here from those replies.

These tests run in the venv that has verifiers (see envs_venv.py); the main suite runs them
there through test_in_envs_venv.py.
"""

from __future__ import annotations

import asyncio
import math
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import arthex_vf_arith as vf_arith
import attrs
import pytest

import arthex
from arthex.adapters.local import packing
from arthex.core.capture import token_samples
from arthex.core.environments import Environment
from arthex.core.model import Model
from arthex.core.trajectories import Trajectory, TrajectoryGroup
from arthex.environments import as_environment, from_verifiers, rollout_fn
from arthex.testing.contracts.environment import EnvironmentContract
from arthex.testing.serving import served_model
from arthex.testing.tiny_model import tiny_model

from .envs import MULTI_TURN, SINGLE_TURN, load

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SAMPLING: dict[str, Any] = {"max_tokens": 8, "temperature": 1.0}
ROLLOUTS = 3


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")


def served(
    tiny: str, root: Path, name: str = "solver"
) -> AbstractAsyncContextManager[arthex.TrainableModel]:
    return served_model(tiny, root, name=name, project="envs")


def received(trajectory: Trajectory) -> list[dict[str, Any]]:
    trace_id = trajectory.metadata["verifiers_trace_id"]
    assert isinstance(trace_id, str)
    responses: list[dict[str, Any]] = vf_arith.RECEIVED[trace_id]
    return responses


def sampled_ids(response: dict[str, Any]) -> list[int]:
    return list(response["choices"][0]["token_ids"])


def rubric(answer: str, reply: str) -> dict[str, float]:
    """The task's scoring, recomputed: verifiers strips the last reply."""
    reply = reply.strip()
    return {
        "correct": 1.0 if answer in reply else 0.0,
        "brevity": 1.0 / (1.0 + len(reply)),
        "reply_chars": float(len(reply)),
    }


@attrs.define
class World:
    single: list[TrajectoryGroup]
    multi: list[TrajectoryGroup]
    evaluated: list[Trajectory]
    steps: list[int]
    served_step: int
    greedy_before: list[float]
    greedy_after: list[float]
    packed: list[packing.PackedBatch]
    train_tasks: int
    val_tasks: int
    nested: Trajectory
    outer: Trajectory


async def greedy_logprobs(model: Model) -> list[float]:
    client = model.openai_client()
    question: Any = [{"role": "user", "content": "What is 2 plus 3?"}]
    response = await client.chat.completions.create(
        model=model.get_inference_name(), messages=question, max_tokens=6, temperature=0,
        logprobs=True,
    )  # fmt: skip
    logprobs = response.choices[0].logprobs
    assert logprobs is not None and logprobs.content is not None
    return [entry.logprob for entry in logprobs.content]


@pytest.fixture(scope="module")
def world(tiny: str, tmp_path_factory: pytest.TempPathFactory) -> World:
    packed: list[packing.PackedBatch] = []
    real_pack = packing.pack

    def spy(*args: Any, **kwargs: Any) -> packing.PackedBatch:
        batch = real_pack(*args, **kwargs)
        packed.append(batch)
        return batch

    async def main() -> World:
        single = from_verifiers(load(SINGLE_TURN), **SAMPLING)
        multi = from_verifiers(load(MULTI_TURN), **SAMPLING)
        both = from_verifiers(load(SINGLE_TURN), eval_env=load(MULTI_TURN), **SAMPLING)
        root = tmp_path_factory.mktemp("world")
        async with served(tiny, root) as model:
            before = await greedy_logprobs(model)

            async def groups(env: Any) -> list[TrajectoryGroup]:
                return [
                    TrajectoryGroup(
                        await asyncio.gather(*(env.rollout(model, task) for _ in range(ROLLOUTS)))
                    )
                    for task in env.scenarios("train")
                ]

            single_groups = await groups(single)
            multi_groups = await groups(multi)
            steps = []
            config = arthex.TrainConfig(learning_rate=1e-2)
            steps.append((await model.train(single_groups, config=config)).step)
            steps.append((await model.train(multi_groups, config=config)).step)
            after = await greedy_logprobs(model)
            val = both.scenarios("val")
            evaluated = [await both.rollout(model, task) for task in val[:2]]
            # a rollout inside the caller's own capture scope: the relayed calls are the
            # rollout's, the outer scope sees none of them
            async with arthex.capture() as outer:
                nested = await single.rollout(model, single.scenarios("train")[0])
            return World(
                single_groups, multi_groups, evaluated, steps, await model.get_step(),
                before, after, list(packed), len(both.scenarios("train")), len(val),
                nested, outer,
            )  # fmt: skip

    patch = pytest.MonkeyPatch()
    patch.setattr(packing, "pack", spy)
    try:
        return asyncio.run(main())
    finally:
        patch.undo()


def every(groups: list[TrajectoryGroup]) -> list[Trajectory]:
    assert all(not group.exceptions for group in groups), [g.exceptions for g in groups]
    return [t for group in groups for t in group.trajectories]


def test_the_single_turn_rubric_rewards_arrive_unchanged(world: World) -> None:
    trajectories = every(world.single)
    assert len(trajectories) == len(vf_arith.ROWS) * ROLLOUTS
    for trajectory in trajectories:
        (response,) = received(trajectory)
        index = trajectory.metadata["verifiers_task_idx"]
        assert isinstance(index, int)
        reply = response["choices"][0]["message"]["content"] or ""
        expected = rubric(vf_arith.ROWS[index]["answer"], reply)
        assert trajectory.reward == pytest.approx(expected["correct"] + 0.5 * expected["brevity"])
        for name, value in expected.items():
            assert trajectory.metrics[name] == pytest.approx(value)
        assert trajectory.metrics["num_turns"] == 1
        # the env's info, scalars as they are and the rest as JSON
        assert trajectory.metadata["reply"] == reply.strip()
        assert trajectory.metadata["turns"] == '{"count": 1}'
        assert trajectory.metadata["verifiers_stop_condition"] == "agent_completed"


def test_the_multi_turn_rubric_scores_the_last_turn(world: World) -> None:
    for trajectory in every(world.multi):
        first, last = received(trajectory)
        index = trajectory.metadata["verifiers_task_idx"]
        assert isinstance(index, int)
        expected = rubric(vf_arith.ROWS[index]["answer"], last["choices"][0]["message"]["content"])
        assert trajectory.reward == pytest.approx(expected["correct"] + 0.5 * expected["brevity"])
        assert trajectory.metrics["num_turns"] == 2
        assert trajectory.metadata["turns"] == '{"count": 2}'
        assert len(trajectory.exchanges.chat_completions) == 2
        # the second call's prompt holds the first answer and the follow-up question
        second = trajectory.exchanges.chat_completions[1].request["messages"]
        assert second[-1]["content"] == vf_arith.FOLLOW_UP
        assert second[-2]["content"] == first["choices"][0]["message"]["content"]


@pytest.mark.parametrize("kind", ["single", "multi"])
def test_the_trained_ids_are_the_sampled_ids(world: World, kind: str) -> None:
    groups = world.single if kind == "single" else world.multi
    for trajectory in every(groups):
        oracle = received(trajectory)
        samples = token_samples(trajectory, kind)
        assert [t for s in samples for t in s.sampled] == [
            t for r in oracle for t in sampled_ids(r)
        ]
        logprobs = [lp for s in samples for lp, on in zip(s.logprobs, s.trained) if on]
        assert logprobs == [
            e["logprob"] for r in oracle for e in r["choices"][0]["logprobs"]["content"]
        ]
        if len(samples) == 1:  # the usual case: the second prompt extends the first sample
            assert list(samples[0].tokens) == oracle[-1]["prompt_token_ids"] + sampled_ids(
                oracle[-1]
            )
    # What LocalBackend packed for the step: each row one of those samples, masked there.
    batch = world.packed[0 if kind == "single" else 1]
    samples_by_tokens = {s.tokens: s for t in every(groups) for s in token_samples(t, kind)}
    for row in range(batch.num_rows):
        tokens = tuple(batch.tokens[row][batch.segment_ids[row] == 0].tolist())
        if not tokens:
            continue
        expected = samples_by_tokens[tokens]
        assert batch.mask[row][: len(tokens)].tolist() == list(expected.trained)


def test_training_two_steps_advances_the_model(world: World) -> None:
    assert world.steps == [1, 2]
    assert world.served_step == 2
    assert world.greedy_after != world.greedy_before
    assert all(math.isfinite(lp) for lp in world.greedy_after)


def test_a_rollout_inside_a_capture_scope_keeps_its_calls(world: World) -> None:
    assert len(world.nested.exchanges.chat_completions) == 1
    assert not world.outer.exchanges.chat_completions


def test_eval_env_gives_the_splits_other_than_train(world: World) -> None:
    assert world.train_tasks == len(vf_arith.ROWS)
    assert world.val_tasks == len(vf_arith.ROWS)
    # val scenarios ran in the multi-turn eval env, at the trained step
    for trajectory in world.evaluated:
        assert trajectory.metrics["num_turns"] == 2
        assert trajectory.metadata["verifiers_env"] == MULTI_TURN
        request = trajectory.exchanges.chat_completions[0].request
        assert request["model"].endswith("@2")


def test_the_pipeline_trainer_trains_on_a_verifiers_environment(tiny: str, tmp_path: Path) -> None:
    async def main() -> tuple[int, list[Any]]:
        environment = from_verifiers(load(MULTI_TURN), **SAMPLING)
        async with served(tiny, tmp_path, name="piped") as model:
            backend = model.backend
            trainer = arthex.PipelineTrainer(
                model, backend, rollout_fn(environment, n=3), environment.scenarios("train"),
                None, num_rollout_workers=3, min_batch_size=1, max_batch_size=1,
                learning_rate=1e-3, max_steps=3, eval_fn=None,
            )  # fmt: skip
            await trainer.train()
            return await model.get_step(), list(await model.history())

    step, history = asyncio.run(main())
    assert step == 3
    trained = [row for row in history if "loss/train" in row.values]
    assert len(trained) == 3
    rewards = [row.values["train/reward"] for row in history if "train/reward" in row.values]
    assert rewards and all(math.isfinite(r) for r in rewards)


def test_as_environment_wraps_a_verifiers_environment() -> None:
    wrapped = as_environment(load(SINGLE_TURN))
    assert isinstance(wrapped, Environment)
    assert len(wrapped.scenarios("val")) == len(vf_arith.ROWS)


@pytest.mark.parametrize("bad", [{"temperature": "hot"}, {"max_tokens": [1]}])
def test_bad_sampling_is_refused_in_one_line(bad: dict[str, Any]) -> None:
    with pytest.raises(arthex.InvalidInputError, match="bad sampling") as caught:
        from_verifiers(load(SINGLE_TURN), **bad)
    assert "\n" not in str(caught.value)


def test_a_scenario_that_is_no_task_is_refused(tmp_path: Path) -> None:
    environment = from_verifiers(load(SINGLE_TURN))
    model = arthex.Model(
        name="m", project="p", base_path=str(tmp_path), report_metrics=[],
        inference_base_url="http://127.0.0.1:9/v1", inference_api_key="k",
    )  # fmt: skip
    with pytest.raises(arthex.InvalidInputError, match="a task of its taskset"):
        asyncio.run(environment.rollout(model, {"question": "?"}))


class _Served:
    tiny: str
    root: Path

    @pytest.fixture(autouse=True)
    def _where(self, tiny: str, tmp_path: Path) -> None:
        self.tiny, self.root = tiny, tmp_path

    def serve(self) -> AbstractAsyncContextManager[Model]:
        @asynccontextmanager
        async def serving() -> Any:
            async with served(self.tiny, self.root) as model:
                yield model

        return serving()


class TestSingleTurnContract(_Served, EnvironmentContract):
    def environment(self) -> Environment[Any]:
        return from_verifiers(load(SINGLE_TURN), **SAMPLING)


class TestMultiTurnContract(_Served, EnvironmentContract):
    split = "val"

    def environment(self) -> Environment[Any]:
        return from_verifiers(load(SINGLE_TURN), eval_env=load(MULTI_TURN), **SAMPLING)
