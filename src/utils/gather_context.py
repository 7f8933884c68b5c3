"""The tally a gather keeps while rollouts run, under ART's names (`art.gather`).

`get_gather_context()` inside `arthex.gather_trajectory_groups` is a view of that gather's
running metrics: what a rollout records with `record_metrics(get_gather_context(), t)` is in
the means the progress line shows. Outside a gather (or inside `set_gather_context(...)`)
it is the context set last, else one shared default, as in ART. `wrap_group_awaitable` and
`wrap_trajectories_awaitable` are the steps of a hand-written gather loop: await one group
(or rollout), record its trajectories' metrics, count a failure against `max_exceptions`.

`record_trajectory_completion_tokens(t)` sets ART's `completion_tokens` metric: the sum of
the recorded calls' usage for a captured trajectory (nothing when a call lacks usage), else
the sum of its Choices' counts (`COMPLETION_TOKENS_KEY`; nothing unless every Choice has a
positive one). arthex's own gather leaves the rollouts' metrics as they set them; ART's adds
`completion_tokens` to each gathered trajectory (docs/migrating-from-art.md).

One difference from ART, deliberate: the wrappers count an `Exception`; a cancellation (or
another `BaseException`) propagates instead of being counted as a failed rollout.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections import Counter
from collections.abc import Awaitable, Iterable, Iterator, Mapping
from typing import Any

import attrs
from openai.types.chat.chat_completion import Choice

from ..core.gather import RunningMetrics, outside_gather, running_metrics
from ..core.progress import ProgressLine
from ..core.trajectories import Trajectory, TrajectoryGroup
from .vllm_tokens import choice_completion_tokens

__all__ = [
    "GatherContext",
    "gather_context_var",
    "get_gather_context",
    "record_metrics",
    "record_trajectory_completion_tokens",
    "set_gather_context",
    "wrap_group_awaitable",
    "wrap_trajectories_awaitable",
]

EXCEPTIONS = "exceptions"


@attrs.define
class GatherContext:
    """Metric sums and divisors of one gather, its failure budget and its progress line
    (`pbar`: an arthex `ProgressLine`, or None to show nothing)."""

    pbar: ProgressLine | None = None
    metric_sums: Counter[str] = attrs.field(factory=Counter)
    metric_divisors: Counter[str] = attrs.field(factory=Counter)
    max_metrics: int | None = None
    max_exceptions: int | float = 0
    increment_pbar: bool = True

    def means(self) -> dict[str, float]:
        """Each metric's sum over its divisor (at least 1), the first `max_metrics` of them,
        `completion_tokens` last."""
        keys = list(self.metric_sums)[: self.max_metrics]
        means = {key: self.metric_sums[key] / max(1, self.metric_divisors[key]) for key in keys}
        if "completion_tokens" in means:
            means["completion_tokens"] = means.pop("completion_tokens")
        return means

    def update_pbar(self, n: int) -> None:
        """Advance the progress line by `n` (when `increment_pbar`) and show the means."""
        if self.pbar is None:
            return
        note = " ".join(f"{key}={mean:.3g}" for key, mean in self.means().items())
        self.pbar.advance(n if self.increment_pbar else 0, note=note)

    def too_many_exceptions(self) -> bool:
        """Past the budget: more failures than `max_exceptions`, or, for a fraction, more
        than that share of the progress line's total."""
        failed = self.metric_sums[EXCEPTIONS]
        if failed <= self.max_exceptions:
            return False
        if 0 < self.max_exceptions < 1 and self.pbar is not None and self.pbar.total:
            return failed / self.pbar.total > self.max_exceptions
        return True

    def reset(self) -> None:
        """Forget the progress line, the sums and the budget (for the next batch)."""
        self.pbar = None
        self.metric_sums = Counter()
        self.metric_divisors = Counter()
        self.max_exceptions = 0


# ART's shape: one shared context outside any gather, so `get()` never fails
gather_context_var: contextvars.ContextVar[GatherContext] = contextvars.ContextVar(
    "gather_context",
    default=GatherContext(),  # noqa: B039
)

# One view per running gather, so what a rollout adds to it is seen by the next caller.
_views: contextvars.ContextVar[tuple[RunningMetrics, GatherContext] | None] = (
    contextvars.ContextVar("arthex_gather_view", default=None)
)


def _view(running: RunningMetrics) -> GatherContext:
    cached = _views.get()
    if cached is not None and cached[0] is running:
        return cached[1]
    view = GatherContext(
        metric_sums=running.sums,
        metric_divisors=running.counts,
        max_metrics=running.max_metrics,
        max_exceptions=running.max_exceptions,
    )
    _views.set((running, view))
    return view


def get_gather_context() -> GatherContext:
    """The context of the gather this code runs in (see the module's docstring)."""
    running = running_metrics()
    return _view(running) if running is not None else gather_context_var.get()


@contextlib.contextmanager
def set_gather_context(context: GatherContext) -> Iterator[None]:
    """Within the block, `get_gather_context()` is `context` (also inside an arthex gather)."""
    if not isinstance(context, GatherContext):
        raise TypeError(f"set_gather_context takes a GatherContext, got {type(context).__name__}")
    token = gather_context_var.set(context)
    try:
        with outside_gather():
            yield
    finally:
        gather_context_var.reset(token)


def _usage_count(response: Any, key: str) -> int | None:
    usage = response.get("usage") if isinstance(response, Mapping) else None
    value = usage.get(key) if isinstance(usage, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _recorded_tokens(trajectory: Trajectory) -> int | None:
    exchanges = trajectory.exchanges
    counts: list[int | None] = [
        None if e.response.usage is None else e.response.usage.completion_tokens
        for e in exchanges.chat_completions
    ]
    counts += [_usage_count(e.get("response"), "completion_tokens") for e in exchanges.completions]
    for others in (exchanges.responses, exchanges.messages):
        counts += [_usage_count(e.get("response"), "output_tokens") for e in others]
    if not counts or None in counts:
        return None
    return sum(count for count in counts if count is not None)


def _choice_tokens(trajectory: Trajectory) -> int | None:
    histories = [trajectory.messages_and_choices]
    histories += [history.messages_and_choices for history in trajectory.additional_histories]
    counts = [
        choice_completion_tokens(item)
        for history in histories
        for item in history
        if isinstance(item, Choice)
    ]
    if not counts or any(count is None or count <= 0 for count in counts):
        return None
    return sum(count for count in counts if count is not None)


def record_trajectory_completion_tokens(trajectory: Trajectory) -> None:
    """Set `trajectory.metrics["completion_tokens"]` when every call's count is known."""
    if not isinstance(trajectory, Trajectory):
        raise TypeError(f"expected a Trajectory, got {type(trajectory).__name__}")
    found = _recorded_tokens(trajectory) if trajectory.exchanges else _choice_tokens(trajectory)
    if found is not None:
        trajectory.metrics["completion_tokens"] = found


def record_metrics(context: GatherContext, trajectory: Trajectory) -> None:
    """Add the trajectory's reward and metrics (completion tokens recorded first) to
    `context`'s sums, one divisor each."""
    record_trajectory_completion_tokens(trajectory)
    # a Counter adds floats at runtime (ART's sums are one); typeshed types its counts as int
    context.metric_sums["reward"] += trajectory.reward  # type: ignore[assignment]
    context.metric_divisors["reward"] += 1
    context.metric_sums.update(trajectory.metrics)
    context.metric_divisors.update(trajectory.metrics.keys())


async def wrap_group_awaitable(awaitable: Awaitable[TrajectoryGroup]) -> TrajectoryGroup | None:
    """Await one group and record its trajectories in the current context; a group that
    raised is counted under "exceptions" and gives None while within the budget, past it
    the error propagates."""
    context = get_gather_context()
    try:
        group = await awaitable
    except Exception:
        if _past_budget(context):
            raise
        return None
    for trajectory in group.trajectories:
        record_metrics(context, trajectory)
    context.update_pbar(n=len(group.trajectories))
    return group


async def wrap_trajectories_awaitable(
    awaitable: Awaitable[Trajectory] | Awaitable[Iterable[Trajectory]],
) -> Trajectory | list[Trajectory] | BaseException:
    """Await one rollout (a Trajectory, or several) and record it in the current context; a
    rollout that raised is counted and returned as its exception within the budget."""
    context = get_gather_context()
    try:
        result = await awaitable
    except Exception as error:
        if _past_budget(context):
            raise
        return error
    if isinstance(result, Trajectory):
        record_metrics(context, result)
        context.update_pbar(n=1)
        return result
    trajectories = list(result)
    for trajectory in trajectories:
        record_metrics(context, trajectory)
    context.update_pbar(n=1)
    return trajectories


def _past_budget(context: GatherContext) -> bool:
    """Count one failure; True when it is one too many."""
    context.metric_sums[EXCEPTIONS] += 1
    context.update_pbar(n=0)
    return context.too_many_exceptions()
