"""Properties of the pipeline over scripted latencies, batch settings and crashes (hypothesis):
no trained group is older than `max_steps_off_policy`, and every scenario of the stream is
trained exactly once or discarded, however the run was interrupted and resumed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import attrs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ._pipeline_world import Crash, Script, TurnsBackend, World, check_run, turns

CRASHES: dict[str, Callable[[World, int], None]] = {
    "record-save": lambda w, n: setattr(w.state, "crash_on_save", n),
    "train-write": lambda w, n: setattr(w.store, "crash_on_train_write", n),
    "summary-row": lambda w, n: setattr(w.history, "crash_on", ("data/step_num_scenarios", n)),
    "checkpoint": lambda w, n: setattr(w.backend, "crash_after_checkpoint", n),
    "training-row": lambda w, n: setattr(
        w.history, "crash_on", ("data/step_num_gradient_steps", n)
    ),
    "pipeline-row": lambda w, n: setattr(w.history, "crash_on", ("discarded/cum/stale_groups", n)),
}


@attrs.frozen
class Interruption:
    """A crash at the n-th pass of a named point, or a cancel after `turns` loop turns."""

    point: str
    count: int


interruptions = st.one_of(
    st.builds(Interruption, st.sampled_from(sorted(CRASHES)), st.integers(1, 6)),
    st.builds(Interruption, st.just("cancel"), st.integers(1, 400)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    scenarios=st.integers(4, 36),
    latencies=st.lists(st.integers(0, 60), min_size=1, max_size=8),
    group_size=st.integers(2, 4),
    workers=st.integers(1, 12),
    min_batch=st.integers(1, 5),
    extra_batch=st.integers(0, 5),
    bound=st.one_of(st.none(), st.integers(0, 3)),
    train_turns=st.integers(0, 80),
    zero_variance_every=st.sampled_from([0, 2, 3, 7]),
    crashes=st.lists(interruptions, max_size=3),
)
def test_no_group_trains_stale_and_every_scenario_is_accounted_for_once(
    scenarios: int,
    latencies: list[int],
    group_size: int,
    workers: int,
    min_batch: int,
    extra_batch: int,
    bound: int | None,
    train_turns: int,
    zero_variance_every: int,
    crashes: list[Interruption],
) -> None:
    world = World(backend=TurnsBackend(train_turns))
    script = Script(
        latencies=latencies, group_size=group_size, zero_variance_every=zero_variance_every
    )

    async def main() -> None:
        for interruption in [*crashes, None]:
            world.disarm()
            if interruption is not None and interruption.point != "cancel":
                CRASHES[interruption.point](world, interruption.count)
            trainer = world.trainer(
                script,
                range(scenarios),
                num_rollout_workers=workers,
                min_batch_size=min_batch,
                max_batch_size=min_batch + extra_batch,
                max_steps_off_policy=bound,
            )
            task = asyncio.ensure_future(trainer.train())
            if interruption is not None and interruption.point == "cancel":
                await turns(interruption.count)
                task.cancel()
            try:
                await task
            except (Crash, asyncio.CancelledError):
                continue

    asyncio.run(main())
    check_run(world, scenarios, bound)
