"""TinkerBackend at its own edge: fake tinker clients that answer with real `tinker.types`
objects in completed SDK futures, and record what the backend sent. No sockets, no torch.

The fake service checks what the real one checks for the losses used here (required
`loss_fn_inputs`, one entry per input token), so a wrong layout fails loudly.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytest.importorskip("tinker")

import numpy as np
from tinker import RequestFailedError, types
from tinker.lib.public_interfaces.api_future import AwaitableConcurrentFuture
from tinker.types import RequestErrorCategory

from arthex.adapters.tinker import TinkerBackend
from arthex.adapters.tinker.clients import (
    RestClientLike,
    SamplingClientLike,
    ServiceClientLike,
    TinkerClients,
    TrainingClientLike,
)
from arthex.core.config import TrainConfig
from arthex.core.errors import BackendError, InvalidInputError
from arthex.core.identity import ModelSpec, RunRef
from arthex.core.trajectories import History, Trajectory, TrajectoryGroup
from arthex.testing.builders import sampled_choice

T = TypeVar("T")
RUN = RunRef("unit", "agent")
REQUIRED = {
    "importance_sampling": {"target_tokens", "logprobs", "advantages"},
    "ppo": {"target_tokens", "logprobs", "advantages"},
    "cispo": {"target_tokens", "logprobs", "advantages"},
}


def done(value: T) -> AwaitableConcurrentFuture[T]:
    future: Future[T] = Future()
    future.set_result(value)
    return AwaitableConcurrentFuture(future)


def failed(error: Exception) -> AwaitableConcurrentFuture[Any]:
    future: Future[Any] = Future()
    future.set_exception(error)
    return AwaitableConcurrentFuture(future)


class FakeTinker:
    """One fake service: training runs, their checkpoints, and everything the backend sent."""

    def __init__(self) -> None:
        self.runs = 0
        self.checkpoints: dict[str, set[str]] = {}  # run id -> tinker paths
        self.sent: list[tuple[str, Any]] = []  # (call, payload), in order
        self.fail_next_forward_backward = False
        self.reference_logprobs: dict[int, float] = {}  # token id -> logprob under the reference

    def calls(self, name: str) -> list[Any]:
        return [payload for call, payload in self.sent if call == name]


class FakeTraining:
    def __init__(self, fake: FakeTinker) -> None:
        fake.runs += 1
        self.fake = fake
        self._id = f"run-{fake.runs}"
        fake.checkpoints[self._id] = set()

    @property
    def model_id(self) -> str:
        return self._id

    def forward_backward(
        self,
        data: list[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> Awaitable[types.ForwardBackwardOutput]:
        self.fake.sent.append(("forward_backward", (data, loss_fn, loss_fn_config)))
        if self.fake.fail_next_forward_backward:
            self.fake.fail_next_forward_backward = False
            return failed(RequestFailedError("boom", "r-1", RequestErrorCategory.Server))
        outputs = []
        for datum in data:
            assert set(datum.loss_fn_inputs) == REQUIRED[loss_fn], datum.loss_fn_inputs
            for value in datum.loss_fn_inputs.values():
                assert value.shape == [datum.model_input.length]
            outputs.append(
                {
                    "logprobs": types.TensorData.from_numpy(
                        np.full(datum.model_input.length, -1.0, np.float32)
                    )
                }
            )
        return done(
            types.ForwardBackwardOutput(
                loss_fn_output_type="ArrayRecord",
                loss_fn_outputs=outputs,
                metrics={"loss:sum": 2.0},
            )
        )

    def optim_step(
        self, optim_params: types.AdamParams | None = None
    ) -> Awaitable[types.OptimStepResponse]:
        self.fake.sent.append(("optim_step", optim_params))
        return done(types.OptimStepResponse(metrics={"grad_norm": 0.25}))

    def save_state(self, name: str) -> Awaitable[types.SaveWeightsResponse]:
        path = f"tinker://{self._id}/weights/{name}"
        self.fake.sent.append(("save_state", path))
        self.fake.checkpoints[self._id].add(path)
        return done(types.SaveWeightsResponse(path=path))

    def save_weights_for_sampler(self, name: str) -> Awaitable[types.SaveWeightsForSamplerResponse]:
        path = f"tinker://{self._id}/sampler_weights/{name}"
        self.fake.sent.append(("save_weights_for_sampler", path))
        self.fake.checkpoints[self._id].add(path)
        return done(types.SaveWeightsForSamplerResponse(path=path))


class FakeSampling:
    def __init__(self, fake: FakeTinker) -> None:
        self.fake = fake

    def sample(
        self,
        prompt: types.ModelInput,
        num_samples: int,
        sampling_params: types.SamplingParams,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        topk_sample_logprobs: int = 0,
    ) -> Awaitable[types.SampleResponse]:
        raise AssertionError("training never samples")

    def compute_logprobs(self, prompt: types.ModelInput) -> Awaitable[list[float | None]]:
        tokens = prompt.to_ints()
        return done([None, *(self.fake.reference_logprobs.get(t, -2.0) for t in tokens[1:])])


class FakeService:
    def __init__(self, fake: FakeTinker) -> None:
        self.fake = fake

    def create_lora_training_client(
        self, base_model: str, rank: int = 32, seed: int | None = None
    ) -> Awaitable[TrainingClientLike]:
        self.fake.sent.append(("create_lora_training_client", (base_model, rank)))
        return done(FakeTraining(self.fake))

    def create_training_client_from_state_with_optimizer(
        self, path: str
    ) -> Awaitable[TrainingClientLike]:
        self.fake.sent.append(("create_training_client_from_state_with_optimizer", path))
        return done(FakeTraining(self.fake))

    def create_training_client_from_state(self, path: str) -> Awaitable[TrainingClientLike]:
        self.fake.sent.append(("create_training_client_from_state", path))
        return done(FakeTraining(self.fake))

    def create_sampling_client(
        self, model_path: str | None = None, base_model: str | None = None
    ) -> Awaitable[SamplingClientLike]:
        self.fake.sent.append(("create_sampling_client", model_path or base_model))
        return done(FakeSampling(self.fake))

    def close(self, status: Any) -> Awaitable[None]:
        self.fake.sent.append(("close", status))
        return done(None)


class FakeRest:
    def __init__(self, fake: FakeTinker) -> None:
        self.fake = fake

    def list_checkpoints(self, training_run_id: str) -> Awaitable[types.CheckpointsListResponse]:
        paths = sorted(self.fake.checkpoints.get(training_run_id, ()))
        listed = [
            types.Checkpoint(
                checkpoint_id=p.split("/", 3)[3],
                checkpoint_type="sampler" if "/sampler_weights/" in p else "training",
                time="2026-01-01T00:00:00Z",
                tinker_path=p,
            )
            for p in paths
        ]
        return done(types.CheckpointsListResponse(checkpoints=listed))

    def get_training_run(self, training_run_id: str) -> Awaitable[types.TrainingRun]:
        # adopting ART's runs: against the emulator (tests/interop/test_art_tinker_resume.py)
        raise AssertionError(f"these tests adopt no ART run, yet {training_run_id} was asked for")

    def delete_checkpoint_from_tinker_path(self, tinker_path: str) -> Awaitable[None]:
        self.fake.sent.append(("delete", tinker_path))
        run_id = tinker_path.removeprefix("tinker://").split("/", 1)[0]
        self.fake.checkpoints[run_id].discard(tinker_path)
        return done(None)

    def get_external_weights_urls(
        self, tinker_path: str
    ) -> Awaitable[types.ExternalWeightsUrlsResponse]:
        # export is tested against the emulator (tests/e2e/test_tinker_export.py)
        raise AssertionError(f"these tests export nothing, yet {tinker_path} was asked for")


class FakeClients:
    def __init__(self, fake: FakeTinker) -> None:
        self.fake = fake

    def service(self) -> ServiceClientLike:
        return FakeService(self.fake)

    def rest(self) -> RestClientLike:
        return FakeRest(self.fake)


_fits: type[TinkerClients] = FakeClients


# --- helpers ----------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the model's base_path (spec) is where the backend's path is


def make_backend(fake: FakeTinker, tmp_path: Path, **options: Any) -> TinkerBackend:
    return TinkerBackend(str(tmp_path), serve=False, clients=FakeClients(fake), **options)


def spec() -> ModelSpec:
    return ModelSpec(run=RUN, base_model="tiny-base", base_path=str(Path.cwd()))


def choice(prompt: list[int], completion: list[int], logprobs: list[float]) -> Any:
    return sampled_choice("c", prompt_token_ids=prompt, token_ids=completion, logprobs=logprobs)


def trajectory(reward: float, *items: Any, histories: list[History] | None = None) -> Trajectory:
    return Trajectory(
        messages_and_choices=[{"role": "user", "content": "q"}, *items],
        reward=reward,
        additional_histories=histories or [],
    )


def pair() -> TrajectoryGroup:
    """Two one-token answers, the first rewarded: A = +1 and -1 (scaled), or +-0.5."""
    return TrajectoryGroup(
        [trajectory(1.0, choice([1], [2], [-0.1])), trajectory(0.0, choice([1], [3], [-0.1]))]
    )


def train(
    backend: TinkerBackend, groups: list[TrajectoryGroup], config: TrainConfig | None = None
) -> list[dict[str, float]]:
    async def main() -> list[dict[str, float]]:
        await backend.register(spec())
        try:
            return [
                dict(m) async for m in backend.train_steps(RUN, groups, config or TrainConfig())
            ]
        finally:
            await backend.close()

    return asyncio.run(main())


def sent_datums(fake: FakeTinker) -> list[types.Datum]:
    (data, _loss, _config), *_ = fake.calls("forward_backward")
    return list(data)


def layout(datum: types.Datum) -> dict[str, list[Any]]:
    return {
        "model_input": datum.model_input.to_ints(),
        **{key: value.tolist() for key, value in datum.loss_fn_inputs.items()},
    }


# --- the datum layout -------------------------------------------------------------------


def test_datums_for_a_known_trajectory_have_exact_tokens_logprobs_and_advantages(
    tmp_path: Path,
) -> None:
    fake = FakeTinker()
    group = TrajectoryGroup(
        [
            trajectory(1.0, choice([1, 2, 3], [7, 8], [-0.5, -1.25])),
            trajectory(0.0, choice([1, 2, 3], [9], [-0.75])),
        ]
    )
    metrics = train(make_backend(fake, tmp_path), [group], TrainConfig(scale_rewards=False))

    first, second = sent_datums(fake)
    assert layout(first) == {
        "model_input": [1, 2, 3, 7],
        "target_tokens": [2, 3, 7, 8],
        "logprobs": [0.0, 0.0, -0.5, -1.25],
        "advantages": [0.0, 0.0, 0.5, 0.5],
    }
    assert layout(second) == {
        "model_input": [1, 2, 3],
        "target_tokens": [2, 3, 9],
        "logprobs": [0.0, 0.0, -0.75],
        "advantages": [0.0, 0.0, -0.5],
    }
    assert first.loss_fn_inputs["target_tokens"].dtype == "int64"
    assert first.loss_fn_inputs["advantages"].dtype == "float32"
    (_data, loss, loss_config), *_ = fake.calls("forward_backward")
    assert (loss, loss_config) == ("importance_sampling", None)
    (adam,) = fake.calls("optim_step")
    assert adam == types.AdamParams(
        learning_rate=5e-6, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.0, grad_clip_norm=1.0
    )
    (row,) = metrics
    assert row["data/step_num_tokens"] == 3.0
    assert row["data/step_num_datums"] == 2.0
    assert row["loss/train"] == pytest.approx(2.0 / 3)
    assert row["loss/grad_norm"] == 0.25
    # sampled -0.5, -1.25, -0.75 against the fake learner's -1.0 everywhere
    assert row["loss/importance_ratio_max"] == pytest.approx(np.exp(0.25))
    ratios = np.exp([-0.5, 0.25, -0.25])
    assert row["loss/importance_ratio_mean"] == pytest.approx(ratios.mean())
    # linear interpolation between order statistics, as the LocalBackend's: 0.95 of the way
    # from the 2nd (e^-0.25) to the 3rd (e^0.25) ratio
    p95 = np.exp(-0.25) + 0.9 * (np.exp(0.25) - np.exp(-0.25))
    assert row["loss/importance_ratio_p95"] == pytest.approx(p95)
    assert row["loss/clipped_token_fraction"] == 0.0  # importance sampling has no clip


@pytest.mark.parametrize(
    ("loss", "clipped"),
    [
        # ratios e^-0.5 (A 0.5), e^0.25 (A 0.5), e^-0.25 (A -0.5) against [0.8, 1.2]: all three
        # are outside; PPO's clip acts on the second (above, A > 0) and third (below, A < 0)
        ("cispo", 3 / 3),
        ("ppo", 2 / 3),
    ],
)
def test_the_clipped_token_fraction_counts_where_the_clip_acts(
    tmp_path: Path, loss: str, clipped: float
) -> None:
    fake = FakeTinker()
    group = TrajectoryGroup(
        [
            trajectory(1.0, choice([1, 2, 3], [7, 8], [-0.5, -1.25])),
            trajectory(0.0, choice([1, 2, 3], [9], [-0.75])),
        ]
    )
    config = TrainConfig(loss_fn=loss, epsilon=0.2, epsilon_high=0.2, scale_rewards=False)  # type: ignore[arg-type]
    (row,) = train(make_backend(fake, tmp_path, loss_fn=None), [group], config)
    (_data, sent_loss, loss_config), *_ = fake.calls("forward_backward")
    assert sent_loss == loss
    assert loss_config == pytest.approx({"clip_low_threshold": 0.8, "clip_high_threshold": 1.2})
    assert row["loss/clipped_token_fraction"] == pytest.approx(clipped)


def test_group_std_scaling_and_one_datum_per_choice_including_sub_agents(tmp_path: Path) -> None:
    fake = FakeTinker()
    sub_agent = History(
        messages_and_choices=[{"role": "user", "content": "s"}, choice([5], [6], [-0.1])]
    )
    group = TrajectoryGroup(
        [
            trajectory(
                2.0,
                choice([1], [2], [-0.2]),
                {"role": "tool", "content": "r"},
                choice([1, 2, 3], [4], [-0.3]),
                histories=[sub_agent],
            ),
            trajectory(0.0, choice([1], [3], [-0.4])),
        ]
    )
    train(make_backend(fake, tmp_path), [group])

    datums = [layout(d) for d in sent_datums(fake)]
    scaled = np.float32(1.0 / (1.0 + 1e-6))  # (r - mean) / (population std + 1e-6)
    assert [d["model_input"] for d in datums] == [[1], [1, 2, 3], [5], [1]]
    assert [d["advantages"][-1] for d in datums] == [scaled, scaled, scaled, -scaled]
    assert datums[1]["advantages"] == [0.0, 0.0, scaled]


def test_zero_advantage_trajectories_send_nothing(tmp_path: Path) -> None:
    fake = FakeTinker()
    group = TrajectoryGroup(
        [
            trajectory(1.0, choice([1], [2], [-0.1])),
            trajectory(0.5, choice([1], [3], [-0.1])),
            trajectory(0.0, choice([1], [4], [-0.1])),
        ]
    )
    train(make_backend(fake, tmp_path), [group])
    assert [layout(d)["target_tokens"] for d in sent_datums(fake)] == [[2], [4]]


# --- loss mapping -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend_loss", "config_loss", "sent_loss", "sent_config"),
    [
        ("importance_sampling", "cispo", "importance_sampling", None),
        ("cispo", "cispo", "cispo", {"clip_low_threshold": 0.0, "clip_high_threshold": 5.0}),
        (None, "cispo", "cispo", {"clip_low_threshold": 0.0, "clip_high_threshold": 5.0}),
        (
            "importance_sampling",
            "ppo",
            "ppo",
            {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
        ),
        ("ppo", "cispo", "ppo", {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}),
        ("cispo", "importance_sampling", "importance_sampling", None),
    ],
)
def test_the_loss_sent_follows_backend_default_and_explicit_config(
    tmp_path: Path,
    backend_loss: Any,
    config_loss: Any,
    sent_loss: str,
    sent_config: dict[str, float] | None,
) -> None:
    fake = FakeTinker()
    group = pair()
    train(
        make_backend(fake, tmp_path, loss_fn=backend_loss),
        [group],
        TrainConfig(loss_fn=config_loss),
    )
    (_data, loss, loss_config), *_ = fake.calls("forward_backward")
    assert loss == sent_loss
    assert loss_config == (pytest.approx(sent_config) if sent_config else None)


def test_epsilon_overrides_the_clip_thresholds(tmp_path: Path) -> None:
    fake = FakeTinker()
    group = pair()
    config = TrainConfig(loss_fn="ppo", epsilon=0.1, epsilon_high=0.3)
    train(make_backend(fake, tmp_path), [group], config)
    (_data, _loss, loss_config), *_ = fake.calls("forward_backward")
    assert loss_config == pytest.approx({"clip_low_threshold": 0.9, "clip_high_threshold": 1.3})


# --- bad input: clear errors or counted skips -------------------------------------------


def refused(
    backend: TinkerBackend, groups: list[TrajectoryGroup], config: TrainConfig
) -> tuple[int, str]:
    """Register and train, which must raise InvalidInputError: (step afterwards, message)."""

    async def main() -> tuple[int, str]:
        await backend.register(spec())
        try:
            with pytest.raises(InvalidInputError) as raised:
                async for _m in backend.train_steps(RUN, groups, config):
                    pass
            return await backend.get_step(RUN), str(raised.value)
        finally:
            await backend.close()

    return asyncio.run(main())


def test_no_choice_to_train_is_a_clear_error_and_nothing_is_sent(tmp_path: Path) -> None:
    fake = FakeTinker()
    groups = [
        TrajectoryGroup([trajectory(1.0, {"role": "assistant", "content": "a"}), trajectory(0.0)])
    ]
    step, message = refused(make_backend(fake, tmp_path), groups, TrainConfig())
    assert step == 0
    assert "no trajectory holds a Choice" in message
    assert fake.calls("forward_backward") == []
    assert fake.calls("save_weights_for_sampler") == ["tinker://run-1/sampler_weights/step_000000"]


def test_missing_logprobs_is_an_error_naming_the_choice(tmp_path: Path) -> None:
    fake = FakeTinker()
    bare = choice([1], [2], [-0.1]).model_copy(update={"logprobs": None})
    groups = [TrajectoryGroup([trajectory(1.0, choice([1], [3], [-0.1])), trajectory(0.0, bare)])]
    step, message = refused(make_backend(fake, tmp_path), groups, TrainConfig())
    assert step == 0
    assert "group 0, trajectory 1, Choice 0" in message
    assert "logprobs=True" in message
    assert fake.calls("forward_backward") == []


def test_missing_logprobs_is_a_counted_skip_when_allowed(tmp_path: Path) -> None:
    fake = FakeTinker()
    bare = choice([1], [2], [-0.1]).model_copy(update={"logprobs": None})
    groups = [TrajectoryGroup([trajectory(1.0, choice([1], [3], [-0.1])), trajectory(0.0, bare)])]
    (row,) = train(
        make_backend(fake, tmp_path), groups, TrainConfig(allow_training_without_logprobs=True)
    )
    assert row["data/step_num_choices_without_logprobs"] == 1.0
    assert [layout(d)["target_tokens"] for d in sent_datums(fake)] == [[3]]


def test_logprob_count_mismatch_is_an_error(tmp_path: Path) -> None:
    fake = FakeTinker()
    short = choice([1], [2], [-0.1]).model_copy(update={"token_ids": [2, 3]})
    groups = [TrajectoryGroup([trajectory(1.0, short), trajectory(0.0, choice([1], [3], [-0.1]))])]
    step, message = refused(make_backend(fake, tmp_path), groups, TrainConfig())
    assert step == 0
    assert "group 0, trajectory 0, Choice 0: 1 logprobs for 2 completion tokens" in message


def test_missing_token_ids_is_an_error_pointing_at_the_inference_endpoint(tmp_path: Path) -> None:
    fake = FakeTinker()
    plain = choice([1], [2], [-0.1])
    plain = type(plain).model_validate(
        {k: v for k, v in plain.model_dump().items() if k != "prompt_token_ids"}
    )
    groups = [TrajectoryGroup([trajectory(1.0, plain), trajectory(0.0, choice([1], [3], [-0.1]))])]
    step, message = refused(make_backend(fake, tmp_path), groups, TrainConfig())
    assert step == 0
    assert "no prompt_token_ids" in message and "openai_client" in message


def test_a_trajectory_without_choice_among_others_is_counted(tmp_path: Path) -> None:
    fake = FakeTinker()
    groups = [
        TrajectoryGroup(
            [
                trajectory(1.0, choice([1], [2], [-0.1])),
                trajectory(0.5),
                trajectory(0.0, choice([1], [3], [-0.1])),
            ]
        )
    ]
    (row,) = train(make_backend(fake, tmp_path), groups)
    assert row["data/step_num_trajectories_without_choice"] == 1.0
    assert len(sent_datums(fake)) == 2


# --- steps, saving and resuming ---------------------------------------------------------


def test_nothing_trainable_saves_the_unchanged_weights_as_the_next_step(tmp_path: Path) -> None:
    fake = FakeTinker()
    group = TrajectoryGroup(
        [trajectory(1.0, choice([1], [2], [-0.1])), trajectory(1.0, choice([1], [3], [-0.1]))]
    )
    (row,) = train(make_backend(fake, tmp_path), [group])
    assert fake.calls("forward_backward") == [] and fake.calls("optim_step") == []
    assert (
        fake.calls("save_weights_for_sampler")[-1] == "tinker://run-1/sampler_weights/step_000001"
    )
    assert row["data/step_num_gradient_steps"] == 0.0
    record = json.loads((tmp_path / "unit/models/agent/tinker-run.json").read_text())
    assert record["step"] == 1


def test_record_and_restart_resume_from_the_newest_state(tmp_path: Path) -> None:
    fake = FakeTinker()
    group = pair()
    train(make_backend(fake, tmp_path), [group])
    record = json.loads((tmp_path / "unit/models/agent/tinker-run.json").read_text())
    assert record["step"] == 1 and record["training_run_id"] == "run-1"
    assert record["checkpoints"][1] == {
        "step": 1,
        "sampler_path": "tinker://run-1/sampler_weights/step_000001",
        "state_path": "tinker://run-1/weights/step_000001",
    }

    async def restart() -> tuple[int, list[int]]:
        backend = make_backend(fake, tmp_path)
        await backend.register(spec())
        try:
            return await backend.get_step(RUN), await backend.checkpoint_steps(RUN)
        finally:
            await backend.close()

    assert asyncio.run(restart()) == (1, [0, 1])
    assert fake.calls("create_training_client_from_state_with_optimizer") == [
        "tinker://run-1/weights/step_000001"
    ]
    record = json.loads((tmp_path / "unit/models/agent/tinker-run.json").read_text())
    assert record["training_run_id"] == "run-2"


def test_state_every_k_steps_and_a_restart_rewinds_to_the_newest_state(tmp_path: Path) -> None:
    fake = FakeTinker()
    group = pair()

    async def three_steps() -> None:
        backend = make_backend(fake, tmp_path, save_state_every=2)
        await backend.register(spec())
        try:
            for _ in range(3):
                async for _m in backend.train_steps(RUN, [group], TrainConfig()):
                    pass
        finally:
            await backend.close()

    asyncio.run(three_steps())
    assert fake.calls("save_state") == [
        "tinker://run-1/weights/step_000000",
        "tinker://run-1/weights/step_000002",
    ]

    async def restart() -> tuple[int, list[int]]:
        backend = make_backend(fake, tmp_path, save_state_every=2)
        await backend.register(spec())
        try:
            return await backend.get_step(RUN), await backend.checkpoint_steps(RUN)
        finally:
            await backend.close()

    assert asyncio.run(restart()) == (2, [0, 1, 2])
    assert "tinker://run-1/sampler_weights/step_000003" in fake.calls("delete")


def test_a_failed_step_keeps_the_step_and_the_next_call_resumes_from_state(tmp_path: Path) -> None:
    fake = FakeTinker()
    group = pair()

    async def main() -> tuple[int, int]:
        backend = make_backend(fake, tmp_path)
        await backend.register(spec())
        try:
            fake.fail_next_forward_backward = True
            with pytest.raises(BackendError, match="forward_backward"):
                async for _m in backend.train_steps(RUN, [group], TrainConfig()):
                    pass
            failed_step = await backend.get_step(RUN)
            async for _m in backend.train_steps(RUN, [group], TrainConfig()):
                pass
            return failed_step, await backend.get_step(RUN)
        finally:
            await backend.close()

    assert asyncio.run(main()) == (0, 1)
    assert fake.calls("create_training_client_from_state_with_optimizer") == [
        "tinker://run-1/weights/step_000000"
    ]
    assert (
        fake.calls("save_weights_for_sampler")[-1] == "tinker://run-2/sampler_weights/step_000001"
    )


def test_delete_removes_both_paths_and_keeps_the_latest(tmp_path: Path) -> None:
    fake = FakeTinker()
    group = pair()

    async def main() -> tuple[list[int], list[int]]:
        backend = make_backend(fake, tmp_path)
        await backend.register(spec())
        try:
            for _ in range(2):
                async for _m in backend.train_steps(RUN, [group], TrainConfig()):
                    pass
            deleted = await backend.delete_checkpoint_files(RUN, {0})
            return deleted, await backend.checkpoint_steps(RUN)
        finally:
            await backend.close()

    assert asyncio.run(main()) == ([1], [0, 2])
    assert fake.calls("delete") == [
        "tinker://run-1/sampler_weights/step_000001",
        "tinker://run-1/weights/step_000001",
    ]


# --- KL penalty -------------------------------------------------------------------------


def test_kl_penalty_shapes_advantages_by_the_reference_logprobs(tmp_path: Path) -> None:
    fake = FakeTinker()
    fake.reference_logprobs = {2: -0.5, 3: -0.1}
    group = pair()
    config = TrainConfig(scale_rewards=False, kl_penalty_coef=0.5, kl_penalty_reference_step=0)
    (row,) = train(make_backend(fake, tmp_path, loss_fn=None), [group], config)
    # d = sampled - reference = [0.4, 0.0]; mean 0.2; A += 0.5 * (0.2 - d)
    first, second = sent_datums(fake)
    assert layout(first)["advantages"] == [pytest.approx(0.5 + 0.5 * (0.2 - 0.4))]
    assert layout(second)["advantages"] == [pytest.approx(-0.5 + 0.5 * 0.2)]
    assert row["loss/kl_policy_ref"] == pytest.approx(0.2)
    assert "tinker://run-1/sampler_weights/step_000000" in fake.calls("create_sampling_client")


def test_kl_reference_step_without_checkpoint_is_refused_before_training(tmp_path: Path) -> None:
    fake = FakeTinker()
    group = pair()
    config = TrainConfig(kl_penalty_coef=0.5, kl_penalty_reference_step=7)
    step, message = refused(make_backend(fake, tmp_path), [group], config)
    assert step == 0
    assert "kl_penalty_reference_step=7" in message
    assert fake.calls("forward_backward") == []
