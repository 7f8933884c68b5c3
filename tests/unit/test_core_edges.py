"""Edges of the core that mutation testing found unguarded: each test pins a rule a plausible
slip would break (a boundary, a message, a field passed through)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

import arthex
from arthex.core.errors import (
    InvalidInputError,
    InvalidNameError,
    MissingExtraError,
    TooManyExceptionsError,
    UnsupportedCapability,
)
from arthex.core.gather import gather_trajectory_groups
from arthex.core.history_index import HistoryIndex
from arthex.core.identity import RunRef, validate_name
from arthex.core.metrics import MetricsRow, merge_metrics, qualify_key
from arthex.core.trajectories import (
    CapturedException,
    Trajectory,
    TrajectoryGroup,
    count_rollouts,
    trajectory_group,
)
from arthex.ports.training_backend import InferenceEndpoint
from arthex.testing.builders import make_choice, make_group, synthetic_groups
from arthex.testing.fakes import InMemoryBackend

# -- gather: the failure budget --------------------------------------------------------------


async def ready(ok: int, bad: int) -> TrajectoryGroup:
    return TrajectoryGroup([Trajectory(reward=1.0)] * ok + [ValueError(f"bad {bad}")] * bad)


def gather(*groups: tuple[int, int], **options: object) -> list[TrajectoryGroup]:
    async def go() -> list[TrajectoryGroup]:
        return await gather_trajectory_groups(
            (ready(ok, bad) for ok, bad in groups),
            **options,  # type: ignore[arg-type]
        )

    return asyncio.run(go())


def test_a_count_budget_allows_exactly_that_many_failures() -> None:
    assert len(gather((1, 1), (0, 1), max_exceptions=2)) == 2  # 2 failures: allowed
    with pytest.raises(TooManyExceptionsError, match=r"^3 rollouts failed.*=2; first: "):
        gather((1, 1), (0, 2), max_exceptions=2)
    assert len(gather((2, 0), max_exceptions=0)) == 1
    with pytest.raises(TooManyExceptionsError, match="ValueError: bad 1"):
        gather((2, 1), max_exceptions=0)


def test_a_fraction_budget_counts_over_all_rollouts() -> None:
    assert len(gather((3, 1), (4, 0), max_exceptions=0.125)) == 2  # 1 of 8: exactly allowed
    with pytest.raises(TooManyExceptionsError, match=r"^2 of 8 rollouts failed"):
        gather((2, 2), (4, 0), max_exceptions=0.125)
    assert len(gather((1, 0), max_exceptions=0.5)) == 1
    # 1.0 is a count (one failure), not "100%"
    with pytest.raises(TooManyExceptionsError):
        gather((0, 2), max_exceptions=1.0)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "1", None])
def test_a_bad_budget_is_refused_naming_it(bad: object) -> None:
    with pytest.raises(InvalidInputError, match="max_exceptions must be") as caught:
        gather((1, 0), max_exceptions=bad)
    assert repr(bad) in str(caught.value)


def test_the_progress_line_counts_groups_and_failures(capsys: pytest.CaptureFixture[str]) -> None:
    gather((1, 1), (2, 0), max_exceptions=1, progress=True, pbar_desc="rollouts")
    err = capsys.readouterr().err
    assert "rollouts [" in err
    assert "2/2 failed=1" in err
    assert "3/2" not in err


# -- trajectories ------------------------------------------------------------------------


def test_trajectory_group_passes_its_fields_and_refuses_non_trajectories() -> None:
    async def rollout() -> Trajectory:
        return Trajectory(reward=0.5)

    async def wrong() -> object:
        return "not a trajectory"

    group = asyncio.run(
        trajectory_group([rollout()], metadata={"scenario_id": "s1"}, metrics={"m": 2}, logs=["l"])
    )
    assert (group.metadata, group.metrics, group.logs) == ({"scenario_id": "s1"}, {"m": 2}, ["l"])
    with pytest.raises(TypeError, match="a rollout returned str, expected a Trajectory"):
        asyncio.run(trajectory_group([wrong()]))  # type: ignore[list-item]


def test_messages_turn_choices_into_assistant_messages() -> None:
    call = make_choice(None, tool_calls=[{"name": "f", "arguments": "{}"}])
    trajectory = Trajectory(
        messages_and_choices=[{"role": "tool", "content": None}, make_choice("hi"), call]
    )
    tool, answer, calling_message = trajectory.messages()
    calling: dict[str, Any] = dict(calling_message)
    assert tool == {"role": "tool", "content": ""}
    assert answer == {"role": "assistant", "content": "hi"}
    assert calling["content"] == ""
    assert calling["tool_calls"][0]["function"] == {"name": "f", "arguments": "{}"}
    assert calling["tool_calls"][0]["type"] == "function"


def test_captured_exceptions_name_the_class_and_keep_the_traceback() -> None:
    class Local(Exception):
        pass

    try:
        raise Local("boom")
    except Local as error:
        captured = CapturedException.from_exception(error)
    assert captured.type == f"{__name__}.{Local.__qualname__}"  # module and nesting
    assert captured.traceback.startswith("Traceback (most recent call last):\n")
    assert "Local: boom" in captured.traceback
    assert CapturedException.from_exception(KeyError("k")).type == "KeyError"


def test_count_rollouts_counts_both_kinds() -> None:
    assert count_rollouts(
        [make_group((0.0, 1.0), exceptions=[ValueError()]), make_group((1.0,))]
    ) == (3, 1)


# -- names, keys, rows -------------------------------------------------------------------


def test_bad_names_are_refused_naming_what_they_are() -> None:
    with pytest.raises(InvalidNameError, match="project"):
        RunRef("../x", "m")
    with pytest.raises(InvalidNameError, match="name"):
        RunRef("p", "a/b")
    with pytest.raises(InvalidNameError, match="split"):
        validate_name("..", "split")


def test_only_the_first_segment_decides_the_section() -> None:
    assert qualify_key("loss/a/b", "val") == "loss/a/b"
    assert qualify_key("custom/loss/b", "val") == "val/custom/loss/b"


def test_a_caller_value_that_is_not_a_number_clashes() -> None:
    with pytest.raises(InvalidInputError, match="'val/reward'"):
        merge_metrics({"val/reward": 0.5}, ("caller", {"val/reward": None}))
    with pytest.raises(InvalidInputError, match="'val/reward'"):
        merge_metrics({"val/reward": 0.5}, ("caller", {"val/reward": 0.5000001}))
    assert merge_metrics({"val/reward": 0.5}, ("caller", {"val/reward": 0.5})) == {
        "val/reward": 0.5
    }


def test_step_means_of_an_unknown_key_are_empty() -> None:
    index = HistoryIndex([MetricsRow(step=1, values={"a": 2.0})])
    assert index.step_means("b") == {}
    assert index.has("a") and not index.has("b")
    assert index.total("a") == 2.0 and index.total("b") == 0.0


# -- errors ------------------------------------------------------------------------------


def test_error_messages_say_what_and_what_to_do() -> None:
    plain = UnsupportedCapability("loss:ppo", "B")
    assert (plain.capability, plain.backend, str(plain)) == (
        "loss:ppo",
        "B",
        "B does not support 'loss:ppo'",
    )
    hinted = UnsupportedCapability("loss:ppo", "B", "use cispo")
    assert str(hinted) == "B does not support 'loss:ppo'. use cispo"
    missing = MissingExtraError("torch", "local")
    assert (missing.package, missing.extra) == ("torch", "local")
    assert str(missing).startswith("torch is not installed; install it with: pip install ")
    assert str(missing).endswith('[local]"')


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("epsilon", -0.1),
        ("max_grad_norm", 0.0),
        ("grad_accumulation_sequences", 0),
        ("packed_sequence_length", True),
        ("kl_penalty_reference_step", -1),
        ("lr_multiplier_window", 0),
    ],
)
def test_optional_config_values_are_checked_when_given(field: str, value: object) -> None:
    with pytest.raises(InvalidInputError, match=f"TrainConfig.{field}"):
        arthex.TrainConfig(**{field: value})  # type: ignore[arg-type]


def test_optional_config_values_accept_their_smallest_valid_value() -> None:
    config = arthex.TrainConfig(
        grad_accumulation_sequences=1, lr_multiplier_window=1, kl_penalty_reference_step=0
    )
    assert config.grad_accumulation_sequences == 1
    assert arthex.TrainConfig(epsilon=None).epsilon is None


# -- the model: serving and retention -----------------------------------------------------


class ServingBackend(InMemoryBackend):
    async def register(self, model: arthex.ModelSpec) -> InferenceEndpoint | None:
        await super().register(model)
        return InferenceEndpoint(base_url="http://127.0.0.1:9/v1", api_key="k", model_name="m")


def test_the_client_and_inference_names_follow_the_endpoint_and_the_step(tmp_path: Path) -> None:
    async def go() -> None:
        model = arthex.TrainableModel(
            name="m", project="p", base_model="tiny", base_path=str(tmp_path), report_metrics=[]
        )
        with pytest.raises(arthex.NotRegisteredError, match="register it with a backend"):
            model.openai_client()
        assert model.get_inference_name() == "m"  # unregistered: the name, as in ART
        await model.register(ServingBackend())
        client = model.openai_client()
        assert str(client.base_url) == "http://127.0.0.1:9/v1/"
        assert client.api_key == "k"
        assert client.timeout == 1200.0
        assert model.openai_client() is client  # cached
        await model.train(synthetic_groups())
        assert model.get_inference_name() == "m@1"
        assert model.get_inference_name(0) == "m@0"
        await model.close()
        assert model.openai_client() is not client  # closed, then a fresh one

    asyncio.run(go())


def test_retention_decisions_carry_every_argument(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def go() -> None:
        model = arthex.TrainableModel(
            name="m", project="p", base_model="tiny", base_path=str(tmp_path), report_metrics=[]
        )
        backend = InMemoryBackend()
        await model.register(backend)
        for offset, loss in enumerate((0.9, 0.2, 0.5, 0.7)):
            await model.log(metrics={"loss": loss}, split="val")
            await model.train(synthetic_groups(offset=offset))
        with caplog.at_level(logging.WARNING, logger="arthex"):
            unknown = await model.delete_checkpoints("val/nothing", dry_run=True)
        assert unknown.keep == {0, 1, 2, 3, 4} and unknown.metric == "val/nothing"
        assert unknown.dry_run and unknown.best_step is None and unknown.deleted == ()
        assert "nothing deleted" in unknown.reason
        assert any("val/nothing" in r.getMessage() for r in caplog.records)
        preview = await model.delete_checkpoints(
            "val/loss", direction="min", keep_last=2, dry_run=True
        )
        assert preview.metric == "val/loss" and preview.dry_run
        assert preview.best_step == 1  # the lowest loss
        assert preview.keep == {1, 3, 4} and preview.deleted == (0, 2)
        done = await model.delete_checkpoints("val/loss", direction="min", keep_last=2)
        assert not done.dry_run
        assert done.keep == {1, 3, 4} and done.deleted == (0, 2)
        assert await backend.checkpoint_steps(model.run) == [1, 3, 4]

    asyncio.run(go())


# -- what the mirrors are told ------------------------------------------------------------


class RecordingMirror:
    """A mirror that records every call, in order (a Startable, ConfigRecorder and
    SampleRecorder, like the wandb reporter)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    async def start(self, run: RunRef) -> None:
        self.calls.append(("start", run))

    async def report(self, run: RunRef, row: MetricsRow) -> None:
        self.calls.append(("report", (run, row.step, dict(row.values))))

    async def report_samples(
        self, run: RunRef, split: str, step: int, groups: list[TrajectoryGroup]
    ) -> None:
        self.calls.append(("samples", (run, split, step, len(groups))))

    def update_config(self, run: RunRef, config: dict[str, object]) -> None:
        self.calls.append(("config", (run, sorted(config))))

    async def close(self) -> None:
        self.calls.append(("close", None))


def test_mirrors_are_started_once_then_told_every_row_sample_and_config(tmp_path: Path) -> None:
    mirror = RecordingMirror()
    run = RunRef("p", "m")

    async def go() -> None:
        model = arthex.TrainableModel(
            name="m",
            project="p",
            base_model="tiny",
            base_path=str(tmp_path),
            mirrors=[mirror],
        )
        await model.register(InMemoryBackend())
        await model.log([make_group((0.0, 1.0))], split="val")
        await model.train(synthetic_groups(n_groups=3))
        await model.close()

    asyncio.run(go())
    kinds = [kind for kind, _ in mirror.calls]
    assert kinds == [
        "start",
        "samples",
        "config",
        "report",
        "config",
        "samples",
        "report",
        "report",
        "close",
    ]
    assert mirror.calls[0] == ("start", run)
    assert mirror.calls[1] == ("samples", (run, "val", 0, 1))
    assert mirror.calls[2] == ("config", (run, ["model"]))
    # the batch's samples and row reach the mirror once its update trained, before its metrics
    assert mirror.calls[4] == ("config", (run, ["model", "train"]))
    assert mirror.calls[5] == ("samples", (run, "train", 0, 3))
    training = mirror.calls[7][1]
    assert isinstance(training, tuple)
    assert training[:2] == (run, 1) and "loss/train" in training[2]


def test_a_mirror_that_fails_to_start_is_retried_on_the_next_call(tmp_path: Path) -> None:
    class FlakyStart(RecordingMirror):
        async def start(self, run: RunRef) -> None:
            await super().start(run)
            if len(self.calls) == 1:
                raise ConnectionError("injected")

    mirror = FlakyStart()

    async def go() -> None:
        model = arthex.Model(name="m", project="p", base_path=str(tmp_path), mirrors=[mirror])
        with pytest.raises(ConnectionError):
            await model.log(metrics={"x": 1.0})
        await model.log(metrics={"x": 2.0})
        await model.log(metrics={"x": 3.0})

    asyncio.run(go())
    assert [kind for kind, _ in mirror.calls].count("start") == 2


# -- log's own checks ----------------------------------------------------------------------


def test_log_refuses_bad_splits_steps_and_inputs_naming_them(tmp_path: Path) -> None:
    async def go() -> None:
        model = arthex.Model(name="m", project="p", base_path=str(tmp_path), report_metrics=[])
        with pytest.raises(InvalidNameError, match="split"):
            await model.log(metrics={"x": 1.0}, split="../x")
        for step in (-1, True, 1.5):
            with pytest.raises(
                InvalidInputError, match=f"step must be an integer >= 0, got {step!r}"
            ):
                await model.log(metrics={"x": 1.0}, step=step)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="got str"):
            await model.log("not trajectories")  # type: ignore[arg-type]
        one = Trajectory(reward=0.25)
        row = await model.log(one, split="val")  # type: ignore[arg-type]  # ART accepts it too
        assert row is not None and row.values["val/reward"] == 0.25
        assert row.values["val/data/step_num_scenarios"] == 1.0

    asyncio.run(go())
    assert not (tmp_path / "p" / "models" / "m" / "trajectories" / "x").exists()


def test_training_metrics_keep_non_finite_keys_and_name_bare_keys_under_loss() -> None:
    from arthex.core.metrics import aggregate_training_metrics

    averaged = aggregate_training_metrics([{"kl": float("nan"), "extra": 1.0}, {"extra": 3.0}])
    assert set(averaged) == {"loss/kl", "loss/extra"}
    assert averaged["loss/extra"] == 2.0
    assert averaged["loss/kl"] != averaged["loss/kl"]  # NaN: the key is kept, as a gap


def test_retention_reasons_and_bad_keep_last() -> None:
    from arthex.core.retention import decide

    decision = decide(2, latest=5, metric="val/reward", direction="max", keep_last=2, pinned=[0])
    assert decision is not None
    assert decision.metric == "val/reward"
    assert decision.reason == (
        "keep the last 2 step(s) up to 5, the best step 2 by max val/reward, and pinned steps [0]"
    )
    assert decide(2, latest=5, metric="m").keep == {2, 5}  # type: ignore[union-attr]
    for bad in (0, True, 1.0):
        with pytest.raises(
            InvalidInputError, match=f"keep_last must be an integer >= 1, got {bad!r}"
        ):
            decide(1, latest=1, metric="m", keep_last=bad)  # type: ignore[arg-type]


def test_running_totals_skip_keys_already_totals_or_outside_the_sections() -> None:
    from arthex.core.metrics import cumulative_key

    assert cumulative_key("data/cum/x") is None
    assert cumulative_key("data") is None
    assert cumulative_key("time/cum/step_x") is None
    assert cumulative_key("costs/cum/x") is None


def test_every_trajectory_is_checked_and_logprobs_only_for_training(tmp_path: Path) -> None:
    groups = synthetic_groups()
    second = groups[1].trajectories[2]
    groups[1].trajectories[2] = second.model_copy(update={"reward": float("inf")})
    clean = synthetic_groups()
    choice = next(clean[0].trajectories[0].choices())
    assert choice.logprobs is not None and choice.logprobs.content
    choice.logprobs.content[0].logprob = float("nan")

    async def go() -> None:
        model = arthex.TrainableModel(
            name="m", project="p", base_model="tiny", base_path=str(tmp_path), report_metrics=[]
        )
        await model.register(InMemoryBackend())
        with pytest.raises(InvalidInputError, match="group 1, trajectory 2 has reward inf"):
            await model.log(groups)
        await model.log(clean, split="val")  # a NaN logprob is no tensor when only logged
        with pytest.raises(InvalidInputError, match="logprob nan"):
            await model.train(clean)

    asyncio.run(go())


def test_train_refuses_a_single_group_and_a_model_needs_a_base_model(tmp_path: Path) -> None:
    async def go() -> None:
        model = arthex.TrainableModel(
            name="m", project="p", base_model="tiny", base_path=str(tmp_path), report_metrics=[]
        )
        await model.register(InMemoryBackend())
        with pytest.raises(InvalidInputError, match="train takes a list of TrajectoryGroup"):
            await model.train(make_group((0.0, 1.0)))  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="train got an empty list"):
            await model.train([])

    asyncio.run(go())
    with pytest.raises(InvalidInputError, match="base_model must be a model id or directory"):
        arthex.TrainableModel(name="m", project="p", base_model="", base_path=str(tmp_path))


def test_choice_shaped_items_become_choices_and_others_are_refused() -> None:
    choice = make_choice("hi")
    trajectory = Trajectory(
        messages_and_choices=[
            {"role": "user", "content": "q", "message": "not a choice"},
            choice.model_dump(),
            choice,
        ]
    )
    first, second, third = trajectory.messages_and_choices
    assert isinstance(first, dict)
    assert type(second) is type(choice) and second == choice
    assert third is choice or third == choice
    with pytest.raises(TypeError, match="got int"):
        Trajectory(messages_and_choices=[3])
