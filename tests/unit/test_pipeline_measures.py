"""The pipeline's per-step measures, each against a worked example computed by hand."""

from __future__ import annotations

import pytest
from openai.types.chat import ChatCompletionMessage, ChatCompletionTokenLogprob
from openai.types.chat.chat_completion import Choice, ChoiceLogprobs

from arthex.core.pipeline.measures import (
    INITIAL_STEP_KEY,
    STREAM_INDEX_KEY,
    RolloutClock,
    after_update,
    before_update,
    completion_tokens,
    policy_age_metrics,
    stream_index,
    weighted_percentile,
)
from arthex.core.trajectories import History, Trajectory, TrajectoryGroup


def _choice(logprob_tokens: int | None = None, token_ids: list[int] | None = None) -> Choice:
    logprobs = None
    if logprob_tokens is not None:
        logprobs = ChoiceLogprobs(
            content=[
                ChatCompletionTokenLogprob(token=f"t{i}", logprob=-0.5, bytes=None, top_logprobs=[])
                for i in range(logprob_tokens)
            ]
        )
    extra = {} if token_ids is None else {"token_ids": token_ids}
    return Choice(
        finish_reason="stop",
        index=0,
        message=ChatCompletionMessage(role="assistant", content="ok"),
        logprobs=logprobs,
        **extra,
    )


def _trajectory(tokens: int) -> Trajectory:
    return Trajectory(
        messages_and_choices=[{"role": "user", "content": "hi"}, _choice(logprob_tokens=tokens)],
        reward=0.0,
    )


def _group(sampled_at: int, *tokens: int) -> TrajectoryGroup:
    return TrajectoryGroup(
        [_trajectory(n) for n in tokens], metadata={INITIAL_STEP_KEY: sampled_at}
    )


def test_completion_tokens_count_logprob_entries_or_else_the_token_ids_of_every_choice() -> None:
    trajectory = Trajectory(
        messages_and_choices=[
            {"role": "user", "content": "hi"},
            _choice(logprob_tokens=3, token_ids=[9] * 7),  # logprobs win: 3
            _choice(token_ids=[1, 2]),  # no logprobs: its 2 token ids
            _choice(logprob_tokens=0, token_ids=[5, 6, 7, 8]),  # empty logprobs: 4 token ids
            _choice(),  # neither: 0
        ],
        additional_histories=[History(messages_and_choices=[_choice(logprob_tokens=5)])],
        reward=0.0,
    )
    assert completion_tokens(trajectory) == 3 + 2 + 4 + 0 + 5


def test_a_stream_index_is_an_int_and_nothing_else_counts_as_one() -> None:
    def index_of(value: int | str) -> int | None:
        return stream_index(TrajectoryGroup([], metadata={STREAM_INDEX_KEY: value}))

    assert index_of(3) == 3
    assert index_of(0) == 0
    assert index_of(True) is None  # a bool is an int to Python, not an index
    assert index_of("3") is None
    assert stream_index(TrajectoryGroup([], metadata={})) is None


def test_the_weighted_percentile_is_the_smallest_value_whose_cumulative_weight_reaches_it() -> None:
    points = [(10.0, 1.0), (1.0, 1.0), (5.0, 2.0)]  # sorted: 1 (w1), 5 (w2), 10 (w1); total 4
    assert weighted_percentile(points, 0.25) == 1.0  # cumulative 1 reaches 1 exactly
    assert weighted_percentile(points, 0.26) == 5.0
    assert weighted_percentile(points, 0.75) == 5.0  # cumulative 3 reaches 3 exactly
    assert weighted_percentile(points, 0.76) == 10.0
    assert weighted_percentile(points, 1.0) == 10.0
    past_the_total = [(2.0, 1.0), (7.0, 1.0), (4.0, 3.0)]
    assert weighted_percentile(past_the_total, 1.5) == 7.0  # the largest value


def test_policy_age_is_weighted_by_completion_tokens() -> None:
    # update from step 5: a group sampled at 3 (age 2) with 1 and 3 tokens, one sampled at 5
    # (age 0) with 4 tokens: mean (2*1 + 2*3 + 0*4) / 8 = 1; p95 (7.6 of 8): cumulative 4, 5, 8 -> 2
    metrics = policy_age_metrics(5, [_group(3, 1, 3), _group(5, 4)])
    assert metrics == {
        "offpolicy/token_weighted_policy_age_steps": pytest.approx(1.0),
        "offpolicy/token_weighted_policy_age_p95_steps": 2.0,
        "offpolicy/max_policy_age_steps": 2.0,
    }


def test_policy_age_counts_each_trajectory_once_when_no_tokens_were_sampled() -> None:
    # update from step 4: ages 1, 3, 3 with no tokens: plain mean 7/3, p95 3, max 3
    metrics = policy_age_metrics(4, [_group(3, 0), _group(1, 0, 0)])
    assert metrics == {
        "offpolicy/token_weighted_policy_age_steps": pytest.approx(7 / 3),
        "offpolicy/token_weighted_policy_age_p95_steps": 3.0,
        "offpolicy/max_policy_age_steps": 3.0,
    }
    assert policy_age_metrics(4, []) == {}
    assert policy_age_metrics(4, [TrajectoryGroup([], metadata={INITIAL_STEP_KEY: 1})]) == {}


def test_a_single_sampled_token_still_weighs_the_policy_age() -> None:
    # ages 2 (1 token) and 0 (no tokens): the token-weighted mean is 2, not the plain mean 1
    metrics = policy_age_metrics(2, [_group(0, 1), _group(2, 0)])
    assert metrics["offpolicy/token_weighted_policy_age_steps"] == pytest.approx(2.0)


def test_the_p95_policy_age_leaves_out_the_oldest_five_percent_of_tokens() -> None:
    # update from step 3: 96 tokens sampled at 3 (age 0), 4 at 0 (age 3): 96 of 100 reach 95
    metrics = policy_age_metrics(3, [_group(3, 96), _group(0, 4)])
    assert metrics == {
        "offpolicy/token_weighted_policy_age_steps": pytest.approx(12 / 100),
        "offpolicy/token_weighted_policy_age_p95_steps": 0.0,
        "offpolicy/max_policy_age_steps": 3.0,
    }


def test_taking_the_rollout_clock_hands_over_its_readings_and_starts_it_again() -> None:
    clock = RolloutClock(rollout_s=3.0, idle_s=0.5, put_wait_s=1.0, tokens=40)
    assert clock.take() == RolloutClock(rollout_s=3.0, idle_s=0.5, put_wait_s=1.0, tokens=40)
    assert clock == RolloutClock()
    assert clock.take() == RolloutClock()


def test_the_row_before_an_update_holds_discards_queue_and_rollout_time() -> None:
    # 12 trained and 5 + 3 discarded so far: 20 seen; this step dequeued 8, 2 of them stale
    metrics = before_update(
        collect_s=2.0,
        rollouts=RolloutClock(rollout_s=3.0, idle_s=0.5, put_wait_s=1.0, tokens=40),
        discarded_step={"stale": 2, "failed": 1},
        discarded_cum={"stale": 5, "failed": 3},
        trained_cum=12,
        dequeued=8,
        queue_depth=3,
    )
    assert metrics == {
        "discarded/step/stale_groups": 2.0,
        "discarded/cum/stale_groups": 5.0,
        "discarded/rate/stale_groups": pytest.approx(5 / 20),
        "discarded/step/failed_groups": 1.0,
        "discarded/cum/failed_groups": 3.0,
        "discarded/rate/failed_groups": pytest.approx(3 / 20),
        "queue/actual_stale_fraction": pytest.approx(2 / 8),
        "queue/groups_depth": 3.0,
        "queue/put_wait_s": 1.0,
        "queue/put_wait_frac": pytest.approx(1.0 / (1.0 + 3.0)),
        "time/step_collect_batch_s": 2.0,
        "time/step_trainer_idle_s": 2.0,
        "time/step_rollout_s": 3.0,
        "time/step_rollout_idle_s": 0.5,
    }


def test_the_row_before_the_first_update_is_all_zeros_rather_than_a_division_error() -> None:
    metrics = before_update(
        collect_s=0.0,
        rollouts=RolloutClock(),
        discarded_step={"stale": 0},
        discarded_cum={"stale": 0},
        trained_cum=0,
        dequeued=0,
        queue_depth=0,
    )
    assert metrics["discarded/rate/stale_groups"] == 0.0
    assert metrics["queue/actual_stale_fraction"] == 0.0
    assert metrics["queue/put_wait_frac"] == 0.0


def test_the_rows_after_two_updates_carry_step_and_cumulative_ratios_and_throughputs() -> None:
    totals: dict[str, float] = {}
    before_1 = {
        "time/step_collect_batch_s": 2.0,
        "time/step_rollout_s": 3.0,
        "time/step_rollout_idle_s": 1.0,
        "queue/groups_depth": 4.0,
    }
    first = after_update(
        before_1,
        wall_s=4.0,
        train_s=1.0,
        workers=2,
        batch_tokens=100,
        rollout_tokens=300,
        totals=totals,
    )
    assert first == {
        **before_1,
        "time/step_wall_s": 4.0,
        "time/step_backend_train_s": 1.0,
        "time/cum/wall_s": 4.0,
        "time/cum/backend_train_s": 1.0,
        "time/step_trainer_idle_ratio": pytest.approx(2.0 / 4.0),
        "time/cum/trainer_idle_ratio": pytest.approx(2.0 / 4.0),
        "time/step_rollout_idle_ratio": pytest.approx(1.0 / (2 * 4.0)),
        "time/cum/rollout_idle_ratio": pytest.approx(1.0 / (2 * 4.0)),
        "throughput/accepted_train_tok_per_s": pytest.approx(100 / 4.0),
        "throughput/avg_trainer_tok_per_s": pytest.approx(100 / 1.0),
        "throughput/avg_rollout_tok_per_s": pytest.approx(300 / 3.0),
    }
    before_2 = {
        "time/step_collect_batch_s": 1.0,
        "time/step_rollout_s": 5.0,
        "time/step_rollout_idle_s": 3.0,
    }
    second = after_update(
        before_2,
        wall_s=6.0,
        train_s=3.0,
        workers=2,
        batch_tokens=200,
        rollout_tokens=700,
        totals=totals,
    )
    assert second == {
        **before_2,
        "time/step_wall_s": 6.0,
        "time/step_backend_train_s": 3.0,
        "time/cum/wall_s": 10.0,
        "time/cum/backend_train_s": 4.0,
        "time/step_trainer_idle_ratio": pytest.approx(1.0 / 6.0),
        "time/cum/trainer_idle_ratio": pytest.approx(3.0 / 10.0),
        "time/step_rollout_idle_ratio": pytest.approx(3.0 / 12.0),
        "time/cum/rollout_idle_ratio": pytest.approx(4.0 / 20.0),
        "throughput/accepted_train_tok_per_s": pytest.approx(200 / 6.0),
        "throughput/avg_trainer_tok_per_s": pytest.approx(300 / 4.0),
        "throughput/avg_rollout_tok_per_s": pytest.approx(1000 / 8.0),
    }
    # the running sums live in the step record, so a restart continues them
    assert totals == {
        "wall_s": 10.0,
        "backend_train_s": 4.0,
        "trainer_idle_s": 3.0,
        "rollout_s": 8.0,
        "rollout_idle_s": 4.0,
        "worker_s": 20.0,
        "trained_tokens": 300.0,
        "rollout_tokens": 1000.0,
    }


def test_a_row_after_an_instant_update_with_nothing_measured_is_all_zeros() -> None:
    totals: dict[str, float] = {}
    row = after_update(
        {}, wall_s=0.0, train_s=0.0, workers=0, batch_tokens=0, rollout_tokens=0, totals=totals
    )
    assert set(row.values()) == {0.0}
    assert len(row) == 11
    assert set(totals.values()) == {0.0}


def test_a_first_discard_and_a_sub_second_rollout_give_exact_rates() -> None:
    # one group seen and discarded as stale, from a queue of one; 0.1 s waiting of 0.4 s
    metrics = before_update(
        collect_s=0.2,
        rollouts=RolloutClock(rollout_s=0.3, idle_s=0.0, put_wait_s=0.1),
        discarded_step={"stale": 1},
        discarded_cum={"stale": 1},
        trained_cum=0,
        dequeued=1,
        queue_depth=0,
    )
    assert metrics["discarded/rate/stale_groups"] == 1.0
    assert metrics["queue/actual_stale_fraction"] == 1.0
    assert metrics["queue/put_wait_frac"] == pytest.approx(0.1 / 0.4)


def test_sub_second_steps_give_their_true_ratios_and_throughputs() -> None:
    totals: dict[str, float] = {}
    before = {
        "time/step_collect_batch_s": 0.25,
        "time/step_rollout_s": 0.5,
        "time/step_rollout_idle_s": 0.1,
    }
    row = after_update(
        before,
        wall_s=0.5,
        train_s=0.2,
        workers=1,
        batch_tokens=10,
        rollout_tokens=40,
        totals=totals,
    )
    assert row["time/step_trainer_idle_ratio"] == pytest.approx(0.25 / 0.5)
    assert row["time/cum/trainer_idle_ratio"] == pytest.approx(0.25 / 0.5)
    assert row["time/step_rollout_idle_ratio"] == pytest.approx(0.1 / 0.5)
    assert row["time/cum/rollout_idle_ratio"] == pytest.approx(0.1 / 0.5)
    assert row["throughput/accepted_train_tok_per_s"] == pytest.approx(10 / 0.5)
    assert row["throughput/avg_trainer_tok_per_s"] == pytest.approx(10 / 0.2)
    assert row["throughput/avg_rollout_tok_per_s"] == pytest.approx(40 / 0.5)
