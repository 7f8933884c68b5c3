"""In-run diagnostics (core/diagnostics.py): each test plants one cause in a real training run
on the in-memory backend and checks the one-line warning (once per run), the `diagnostics/*`
key of the step's history row, and that a healthy run produces none of them. The expected
counts are the ones the test planted, never what the diagnostics computed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import pytest

from arthex.core import diagnostics
from arthex.core.errors import InvalidInputError
from arthex.core.identity import RunRef
from arthex.core.metrics import MetricsRow
from arthex.core.model import ModelPorts
from arthex.core.pipeline import PipelineTrainer, make_group_rollout_fn
from arthex.core.trainable import TrainableModel
from arthex.core.trajectories import Trajectory, TrajectoryGroup
from arthex.testing.builders import make_choice
from arthex.testing.fakes.backend import InMemoryBackend
from arthex.testing.fakes.history import InMemoryHistory
from arthex.testing.fakes.pipeline_state import InMemoryPipelineStateStore
from arthex.testing.fakes.stores import InMemoryTrajectoryStore

DIAGNOSTIC_KEYS = (
    diagnostics.UNTRAINABLE_KEY,
    diagnostics.DICT_MESSAGES_KEY,
    diagnostics.NO_TOKEN_IDS_KEY,
    diagnostics.MASKED_KEY,
    diagnostics.EQUAL_REWARDS_KEY,
    diagnostics.REWARD_OUTLIERS_KEY,
    diagnostics.TRUNCATED_KEY,
    diagnostics.EMPTY_KEY,
)
PROMPT = {"role": "user", "content": "What is 2 + 2?"}


class Run:
    """A TrainableModel on the in-memory ports and backend."""

    def __init__(self, name: str = "agent") -> None:
        self.store = InMemoryTrajectoryStore()
        self.history = InMemoryHistory()
        self.backend = InMemoryBackend()
        self.model = TrainableModel(
            name=name,
            project="diag",
            base_model="in-memory",
            ports=ModelPorts(store=self.store, reporter=self.history),
        )

    async def train(self, groups: Sequence[TrajectoryGroup]) -> dict[str, float | None]:
        if self.model._backend is None:
            await self.model.register(self.backend)
        result = await self.model.train(groups, {"learning_rate": 0.1})
        return dict(result.metrics)

    async def rows(self) -> list[MetricsRow]:
        return list(await self.history.rows(self.model.run))


def sampled(reward: float, content: str = "4", **choice: Any) -> Trajectory:
    return Trajectory(messages_and_choices=[PROMPT, make_choice(content, **choice)], reward=reward)


def as_dicts(reward: float) -> Trajectory:
    """The model's turn copied as a dict, without logprobs or token ids (ART issue #127)."""
    return Trajectory(
        messages_and_choices=[PROMPT, {"role": "assistant", "content": "4"}], reward=reward
    )


def healthy(step: int) -> list[TrajectoryGroup]:
    """Groups whose rewards differ, in [0, 1], with short finished answers."""
    return [
        TrajectoryGroup([sampled(0.0, f"a{step}{g}"), sampled(1.0, f"b{step}{g}")])
        for g in range(3)
    ]


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_healthy_run_logs_no_diagnostic_and_charts_zeros(
    caplog: pytest.LogCaptureFixture,
) -> None:
    run = Run()

    async def main() -> list[dict[str, float | None]]:
        return [await run.train(healthy(step)) for step in range(4)]

    with caplog.at_level(logging.WARNING, logger="arthex"):
        metrics = asyncio.run(main())
    assert warnings_of(caplog) == []
    for row in metrics:
        assert {key: row[key] for key in DIAGNOSTIC_KEYS} == dict.fromkeys(DIAGNOSTIC_KEYS, 0.0)
    assert run.model.run_diagnostics.warned == set()


def test_dict_messages_in_part_of_a_batch_are_warned_once_with_count_and_which(
    caplog: pytest.LogCaptureFixture,
) -> None:
    run = Run()
    batch = [
        TrajectoryGroup([sampled(0.0), sampled(1.0)]),
        TrajectoryGroup([as_dicts(0.0), sampled(1.0), as_dicts(0.5)]),
    ]

    async def main() -> list[dict[str, float | None]]:
        return [await run.train(batch) for _ in range(2)]

    with caplog.at_level(logging.WARNING, logger="arthex"):
        first, second = asyncio.run(main())
    assert warnings_of(caplog) == [
        "diag/agent: 2 of 5 trajectories cannot be trained as sampled (none of their tokens is "
        "trained): 2 with dict messages where Choices were expected (group 1 trajectory 0, "
        "group 1 trajectory 2): append the response's choices[0] to messages_and_choices, not "
        "a dict copy of its message"
    ]  # once, though both steps had them
    for row in (first, second):
        assert row[diagnostics.DICT_MESSAGES_KEY] == 2.0
        assert row[diagnostics.UNTRAINABLE_KEY] == 2.0
    rows = asyncio.run(run.rows())
    trained = [row for row in rows if diagnostics.UNTRAINABLE_KEY in row.values]
    assert [row.step for row in trained] == [1, 2]  # in the ledger, at the step each made


def test_a_batch_with_nothing_trainable_is_refused_before_the_backend_is_called() -> None:
    run = Run()
    ids_dropped = make_choice("4")
    ids_dropped.__pydantic_extra__ = {}  # as a client that drops the sampler's extras returns it
    no_ids = Trajectory(messages_and_choices=[PROMPT, ids_dropped], reward=1.0)
    batch = [TrajectoryGroup([as_dicts(0.0), no_ids])]
    with pytest.raises(InvalidInputError) as refused:
        asyncio.run(run.train(batch))
    assert str(refused.value) == (
        "nothing in this batch can be trained: of 2 trajectories, 1 with dict messages where "
        "Choices were expected (group 0 trajectory 0); 1 with Choices lacking the sampler's "
        "token ids (group 0 trajectory 1): append the response's choices[0] to "
        "messages_and_choices, not a dict copy of its message; sample through the backend's "
        "endpoint (model.openai_client()) or ask vLLM for return_token_ids"
    )
    assert asyncio.run(run.backend.get_step(run.model.run)) == 0  # the backend never trained
    assert asyncio.run(run.store.steps(run.model.run, "train")) == []  # nothing was written
    assert asyncio.run(run.rows()) == []


def test_an_all_masked_chat_template_is_refused_and_a_partly_masked_batch_warned(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Choices built the way a client without token ids gets them from the server: the prompt
    is the chat template's rendering of the conversation before the turn, the sampled tokens
    what the rendering through the turn adds. A template that drops the assistant's content
    (and closes the turn inside the generation prompt) adds nothing: the mask is all zero."""
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    from arthex.testing.tiny_model import tiny_model

    tokenizer = AutoTokenizer.from_pretrained(tiny_model(tmp_path / "tiny"))
    tokenizer.chat_template = (
        "{% for m in messages %}{% if m['role'] != 'assistant' %}<|im_start|>{{ m['role'] }}\n"
        "{{ m['content'] }}<|eos|>\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n<|eos|>\n{% endif %}"
    )

    def choice_of(answer: str) -> Any:
        messages = [PROMPT, {"role": "assistant", "content": answer}]
        prompt: list[int] = list(
            tokenizer.apply_chat_template(messages[:1], add_generation_prompt=True)  # type: ignore[arg-type]
        )
        through: list[int] = list(
            tokenizer.apply_chat_template(messages, add_generation_prompt=True)  # type: ignore[arg-type]
        )
        return make_choice(answer, prompt_token_ids=prompt, token_ids=through[len(prompt) :])

    masked = [Trajectory(messages_and_choices=[PROMPT, choice_of(a)], reward=r) for a, r in (
        ("4", 1.0), ("5", 0.0))]  # fmt: skip
    assert all(not (c.model_extra or {})["token_ids"] for t in masked for c in t.choices())
    run = Run()
    with pytest.raises(
        InvalidInputError,
        match=r"^nothing in this batch can be trained: of 2 trajectories, 2 with nothing",
    ):
        asyncio.run(run.train([TrajectoryGroup(masked)]))
    assert asyncio.run(run.backend.get_step(run.model.run)) == 0

    with caplog.at_level(logging.WARNING, logger="arthex"):
        row = asyncio.run(run.train([TrajectoryGroup([*masked, sampled(0.5)])]))
    assert row[diagnostics.MASKED_KEY] == 2.0
    (warning,) = [w for w in warnings_of(caplog) if "cannot be trained" in w]
    assert warning.startswith(
        "diag/agent: 2 of 3 trajectories cannot be trained as sampled (none of their tokens is "
        "trained): 2 with nothing sampled, so their trained-token mask is all zero (group 0 "
        "trajectory 0, group 0 trajectory 1): check the chat template's generation prompt"
    )


def test_equal_rewards_for_three_steps_are_called_out_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    run = Run()

    def batch(step: int) -> list[TrajectoryGroup]:  # 5 of 6 groups tie: 83%
        ties = [TrajectoryGroup([sampled(0.5, f"t{step}{g}"), sampled(0.5)]) for g in range(5)]
        return [*ties, TrajectoryGroup([sampled(0.0), sampled(1.0)])]

    async def main() -> list[tuple[dict[str, float | None], list[str]]]:
        seen = []
        for step in range(4):
            row = await run.train(batch(step))
            seen.append((row, warnings_of(caplog)))
        return seen

    with caplog.at_level(logging.WARNING, logger="arthex"):
        seen = asyncio.run(main())
    message = (
        "diag/agent: 83% of groups had equal rewards for 3 steps: check the reward function or "
        "raise the group size (a group whose rewards tie teaches nothing)"
    )
    assert [logged for _, logged in seen] == [[], [], [message], [message]]
    for row, _ in seen:
        assert row[diagnostics.EQUAL_REWARDS_KEY] == pytest.approx(5 / 6)


def test_rewards_tied_at_the_top_for_three_steps_say_the_task_looks_solved(
    caplog: pytest.LogCaptureFixture,
) -> None:
    run = Run()

    def batch(step: int) -> list[TrajectoryGroup]:  # 5 of 6 groups tie at the best reward, 1.0
        ties = [TrajectoryGroup([sampled(1.0, f"t{step}{g}"), sampled(1.0)]) for g in range(5)]
        return [*ties, TrajectoryGroup([sampled(0.0), sampled(1.0)])]

    async def main() -> list[list[str]]:
        seen = []
        for step in range(3):
            await run.train(batch(step))
            seen.append(warnings_of(caplog))
        return seen

    with caplog.at_level(logging.WARNING, logger="arthex"):
        seen = asyncio.run(main())
    message = (
        "diag/agent: 83% of groups had equal rewards for 3 steps, all at the highest reward "
        "seen: the task looks solved; stop here, or make the task harder (a group whose "
        "rewards tie teaches nothing)"
    )
    assert seen == [[], [], [message]]


def test_a_falling_share_of_equal_rewards_is_not_called_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    run = Run()

    def batch(ties: int) -> list[TrajectoryGroup]:
        return [
            TrajectoryGroup([sampled(0.5), sampled(0.5 if g < ties else 0.0)]) for g in range(4)
        ]

    async def main() -> None:
        for ties in (4, 3, 2):  # 100%, 75%, 50%: the run is finding spread
            await run.train(batch(ties))

    with caplog.at_level(logging.WARNING, logger="arthex"):
        asyncio.run(main())
    assert not [w for w in warnings_of(caplog) if "equal rewards" in w]


def test_rewards_an_order_of_magnitude_outside_the_range_seen_are_warned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    run = Run()

    async def main() -> list[dict[str, float | None]]:
        rows = [await run.train(healthy(0))]  # rewards 0 and 1 so far
        rows.append(await run.train([TrajectoryGroup([sampled(0.0), sampled(250.0)])]))
        rows.append(await run.train([TrajectoryGroup([sampled(-300.0), sampled(9.0)])]))
        return rows

    with caplog.at_level(logging.WARNING, logger="arthex"):
        first, second, third = asyncio.run(main())
    assert [first, second, third][0][diagnostics.REWARD_OUTLIERS_KEY] == 0.0
    assert second[diagnostics.REWARD_OUTLIERS_KEY] == 1.0
    # the range now spans [0, 250]: -300 is within ten widths of it, so nothing more to say
    assert third[diagnostics.REWARD_OUTLIERS_KEY] == 0.0
    assert [w for w in warnings_of(caplog) if "order of magnitude" in w] == [
        "diag/agent: 1 of 2 rewards (e.g. 250) lie an order of magnitude outside the range seen "
        "so far [0, 1]: check the reward function's scale and units"
    ]


def test_truncated_and_empty_completions_are_warned(caplog: pytest.LogCaptureFixture) -> None:
    run = Run()
    cut = [sampled(float(i), f"long answer {i}", finish_reason="length") for i in range(3)]
    empty = sampled(0.5, "", token_ids=[2])  # the model ended its turn at once: no text
    with caplog.at_level(logging.WARNING, logger="arthex"):
        row = asyncio.run(run.train([TrajectoryGroup([*cut, empty])]))
    assert row[diagnostics.TRUNCATED_KEY] == 0.75
    assert row[diagnostics.EMPTY_KEY] == 1.0
    assert warnings_of(caplog) == [
        "diag/agent: 3 of 4 trajectories were cut at max_tokens (finish_reason 'length'): raise "
        "max_tokens, or ask for shorter answers, or the model learns from unfinished turns",
        "diag/agent: 1 of 4 sampled turns are empty (no text, no tool call): check the prompt, "
        "the chat template and stop sequences",
    ]


def test_the_once_per_cause_memory_belongs_to_one_run(caplog: pytest.LogCaptureFixture) -> None:
    batch = [TrajectoryGroup([as_dicts(0.0), sampled(1.0)])]

    async def main() -> None:
        for name in ("first", "second"):
            run = Run(name)
            await run.train(batch)
            await run.train(batch)

    with caplog.at_level(logging.WARNING, logger="arthex"):
        asyncio.run(main())
    warned = [w.split(":")[0] for w in warnings_of(caplog) if "cannot be trained" in w]
    assert warned == ["diag/first", "diag/second"]


def test_diagnostics_turn_off_with_the_environment_and_a_bad_value_is_one_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("ARTHEX_DIAGNOSTICS", "0")
    run = Run()
    with caplog.at_level(logging.WARNING, logger="arthex"):
        row = asyncio.run(run.train([TrajectoryGroup([as_dicts(0.0), sampled(1.0)])]))
    assert not any(key.startswith("diagnostics/") for key in row)
    assert warnings_of(caplog) == []

    monkeypatch.setenv("ARTHEX_DIAGNOSTICS", "sometimes")
    with pytest.raises(InvalidInputError) as refused:
        asyncio.run(Run("other").train(healthy(0)))
    assert str(refused.value) == (
        "ARTHEX_DIAGNOSTICS must be 1 (in-run diagnostics on, the default) or 0 (off), got "
        "'sometimes'"
    )


def test_the_pipeline_calls_out_staleness_at_its_bound_for_many_steps(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Rollouts far faster than training: they run as far ahead as the bound allows
    (max_steps_off_policy=1), so every update trains on groups that old. Slow rollouts with
    room in the bound are healthy."""
    latency = {"turns": 1}

    async def single(model: TrainableModel, scenario: int, config: Any) -> Trajectory:
        for _ in range(latency["turns"]):
            await asyncio.sleep(0)
        choice = make_choice("ab", token_ids=[10 + scenario % 40, 11])
        return Trajectory(messages_and_choices=[PROMPT, choice], reward=0.0)

    rollout = make_group_rollout_fn(single, 2)

    async def varied(model: TrainableModel, scenario: int, config: Any) -> TrajectoryGroup:
        group = await rollout(model, scenario, config)
        for i, trajectory in enumerate(group.trajectories):
            trajectory.reward = float(i)
        return group

    def pipeline(run: Run, bound: int, workers: int) -> None:
        trainer = PipelineTrainer(
            run.model,
            run.backend,
            varied,
            list(range(24)),
            None,
            state_store=InMemoryPipelineStateStore(),
            learning_rate=1e-2,
            num_rollout_workers=workers,
            min_batch_size=2,
            max_batch_size=2,
            max_steps_off_policy=bound,
        )
        asyncio.run(trainer.train())

    roomy = Run("roomy")  # slow rollouts, room in the bound: nothing to say
    latency["turns"] = 200
    with caplog.at_level(logging.WARNING, logger="arthex"):
        pipeline(roomy, 4, 2)
    assert warnings_of(caplog) == []
    roomy_rows = asyncio.run(roomy.rows())
    assert sum("offpolicy/max_policy_age_steps" in r.values for r in roomy_rows) >= 3
    assert {r.values.get(diagnostics.STALENESS_KEY) for r in roomy_rows} <= {
        None,
        0.0,
    }

    run = Run("pipe")
    latency["turns"] = 1
    with caplog.at_level(logging.WARNING, logger="arthex"):
        pipeline(run, 1, 6)
    rows = asyncio.run(run.rows())
    ages = [r.values.get("offpolicy/max_policy_age_steps") for r in rows]
    streaks = [r.values.get(diagnostics.STALENESS_KEY) for r in rows]
    assert ages and streaks
    # the oracle: the longest run of updates at age 1 in the ledger's own age column
    longest = best = 0
    for age in ages:
        if age is None:
            continue
        best = best + 1 if age >= 1 else 0
        longest = max(longest, best)
    assert longest >= 3, ages
    assert max(s for s in streaks if s is not None) == float(longest)
    called = [w for w in warnings_of(caplog) if "its bound" in w]
    assert called == [
        "diag/pipe: the pipeline trained on groups 1 steps old, its bound "
        "(max_steps_off_policy=1), for 3 updates in a row: rollouts run as far ahead of "
        "training as allowed, so every update is that off-policy; lower max_steps_off_policy "
        "(or num_rollout_workers) for fresher groups, or raise max_batch_size so training "
        "keeps up"
    ]


def test_the_served_step_check_names_the_lag() -> None:
    """The rule alone (the end-to-end check against a real server is in
    tests/e2e/test_run_diagnostics.py)."""
    memory = diagnostics.RunDiagnostics()
    assert memory.served(3, 3, "http://x/v1") == (0.0, [])
    lag, (finding,) = memory.served(3, 1, "http://x/v1")
    assert lag == 2.0 and finding.cause == "served_lag"
    assert finding.message.startswith(
        "the inference server at http://x/v1 does not serve step 3, the step just trained "
        "(newest served: 1)"
    )


def test_the_run_ref_used_in_messages_is_the_run() -> None:
    assert str(RunRef("diag", "agent")) == "diag/agent"


@pytest.mark.parametrize(
    ("names", "newest"),
    [
        (["agent", "agent@0", "agent@2", "other@9"], 2),
        (["proj/agent@3", "proj/agent"], 3),  # a server that qualifies names
        (["agent"], -1),  # the run is served, none of its steps
        (["other@4", "agent-b@5"], None),  # nothing of this run: cannot tell
    ],
)
def test_the_served_step_is_read_off_the_served_names(names: list[str], newest: int | None) -> None:
    assert diagnostics.served_step(names, "agent") == newest


def test_choices_without_logprobs_are_refused_with_how_many() -> None:
    """Refused outright (not warned): a Choice without logprobs names the fix, and the count
    says whether it was one stray request or the whole sampler."""
    run = Run()
    batch = [
        TrajectoryGroup([sampled(0.0, logprobs=None), sampled(1.0)]),
        TrajectoryGroup([sampled(0.0, logprobs=None), sampled(1.0, logprobs=None)]),
    ]
    with pytest.raises(InvalidInputError) as refused:
        asyncio.run(run.train(batch))
    assert str(refused.value) == (
        "group 0, trajectory 0, choice 0 (and 2 more of 4 choices) has no token logprobs "
        "(arthex's servers return them unless a request says logprobs=False); sample without "
        "logprobs=False, or set allow_training_without_logprobs"
    )
    assert asyncio.run(run.backend.get_step(run.model.run)) == 0


def test_callers_of_the_port_get_the_same_refusal_before_any_step() -> None:
    """The training servers call the port through `checked_train_steps`: a batch with
    nothing trainable is refused there too, and the backend never steps."""
    from arthex.core.backend_train import checked_train_steps
    from arthex.core.config import TrainConfig
    from arthex.core.identity import ModelSpec

    backend = InMemoryBackend()
    run = RunRef("diag", "served")
    empty = Trajectory(messages_and_choices=[PROMPT, make_choice("", token_ids=[])], reward=1.0)

    async def main() -> int:
        await backend.register(ModelSpec(run=run, base_model="in-memory"))
        with pytest.raises(
            InvalidInputError,
            match=r"^nothing in this batch can be trained: of 2 trajectories, 1 with dict",
        ):
            checked_train_steps(
                backend, run, [TrajectoryGroup([as_dicts(0.0), empty])], TrainConfig()
            )
        return await backend.get_step(run)

    assert asyncio.run(main()) == 0
