"""In-run diagnostics: the rules that tell a user, early and in one line each, why a run is not
learning. Pure values and rules (no port, no I/O): the model feeds each batch and each update
to one `RunDiagnostics` per run, which keeps what it needs across steps (the reward range seen
so far, the recent share of equal-reward groups, the causes already warned about) and answers
with `Finding`s (a cause, a one-line message with the count and the fix) and the
`diagnostics/*` values of the step's history row.

Each cause is warned about once per run (`RunDiagnostics.first_time`); the history values are
written every step, so the viewer and wandb chart them whether or not a warning was logged.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence

import attrs
from openai.types.chat.chat_completion import Choice

from .errors import InvalidInputError
from .metrics import ZERO_VARIANCE_TOLERANCE
from .trajectories import Trajectory, TrajectoryGroup

DIAGNOSTICS_ENV = "ARTHEX_DIAGNOSTICS"

# history keys (the `diagnostics` section of a row)
UNTRAINABLE_KEY = "diagnostics/untrainable_trajectories"
DICT_MESSAGES_KEY = "diagnostics/dict_message_trajectories"
NO_TOKEN_IDS_KEY = "diagnostics/no_token_id_trajectories"
MASKED_KEY = "diagnostics/masked_trajectories"
EQUAL_REWARDS_KEY = "diagnostics/equal_reward_group_share"
REWARD_OUTLIERS_KEY = "diagnostics/reward_outliers"
TRUNCATED_KEY = "diagnostics/truncated_share"
EMPTY_KEY = "diagnostics/empty_completions"
SERVED_LAG_KEY = "diagnostics/served_step_lag"
STALENESS_KEY = "diagnostics/staleness_at_bound_steps"

EQUAL_SHARE_THRESHOLD = 0.5  # a step "has no spread" when at least this share of groups ties
EQUAL_STEPS = 3  # ...for this many steps in a row, not falling
OUTLIER_FACTOR = 10.0  # an order of magnitude
TRUNCATED_SHARE_THRESHOLD = 0.5  # "most" trajectories
STALENESS_STEPS = 3
WHICH_LIMIT = 5  # how many places a message names before "and N more"


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """`ARTHEX_DIAGNOSTICS`: on unless set to 0 (or false/off); anything else is refused."""
    text = (os.environ if environ is None else environ).get(DIAGNOSTICS_ENV, "1")
    value = text.strip().lower()
    if value in ("1", "true", "on", "yes", ""):
        return True
    if value in ("0", "false", "off", "no"):
        return False
    raise InvalidInputError(
        f"{DIAGNOSTICS_ENV} must be 1 (in-run diagnostics on, the default) or 0 (off), got {text!r}"
    )


@attrs.frozen
class Finding:
    """One cause found in a batch or an update: `cause` names it (warned once per run),
    `message` is the one line the log shows, with the count and the fix."""

    cause: str
    message: str


# --- (a) trajectories that cannot be trained as sampled -------------------------------------


def _has_ids(choice: Choice) -> bool:
    extra = choice.model_extra or {}
    return extra.get("token_ids") is not None and extra.get("prompt_token_ids") is not None


def _sampled_nothing(choice: Choice) -> bool:
    ids = (choice.model_extra or {}).get("token_ids")
    return isinstance(ids, list | tuple) and len(ids) == 0


def untrainable_reason(trajectory: Trajectory) -> str | None:
    """Why the loss would see no token of `trajectory` (None: something is trainable).

    "dict_messages": it holds messages but no Choice (dict copies of the model's turns);
    "no_token_ids": its Choices lack the sampler's token ids; "masked": every Choice sampled
    nothing, so its trained-token mask is all zero."""
    choices = list(trajectory.choices())
    if not choices:
        return "dict_messages"
    with_ids = [c for c in choices if _has_ids(c)]
    if not with_ids:
        return "no_token_ids"
    if all(_sampled_nothing(c) for c in with_ids):
        return "masked"
    return None


@attrs.frozen
class Trainability:
    """Which trajectories of a batch cannot be trained as sampled, by reason: `places[reason]`
    lists `(group, trajectory)` indices."""

    total: int
    places: dict[str, list[tuple[int, int]]]

    @property
    def untrainable(self) -> int:
        return sum(len(p) for p in self.places.values())

    @property
    def nothing_trainable(self) -> bool:
        return self.total > 0 and self.untrainable == self.total

    def values(self) -> dict[str, float]:
        return {
            UNTRAINABLE_KEY: float(self.untrainable),
            DICT_MESSAGES_KEY: float(len(self.places.get("dict_messages", ()))),
            NO_TOKEN_IDS_KEY: float(len(self.places.get("no_token_ids", ()))),
            MASKED_KEY: float(len(self.places.get("masked", ()))),
        }

    def describe(self) -> str:
        parts = [
            f"{len(places)} {_REASONS[reason]} ({which(places)})"
            for reason, places in self.places.items()
            if places
        ]
        fixes = [_FIXES[reason] for reason, places in self.places.items() if places]
        return f"{'; '.join(parts)}: {'; '.join(fixes)}"


_REASONS = {
    "dict_messages": "with dict messages where Choices were expected",
    "no_token_ids": "with Choices lacking the sampler's token ids",
    "masked": "with nothing sampled, so their trained-token mask is all zero",
}
_FIXES = {
    "dict_messages": (
        "append the response's choices[0] to messages_and_choices, not a dict copy of its message"
    ),
    "no_token_ids": (
        "sample through the backend's endpoint (model.openai_client()) or ask vLLM for "
        "return_token_ids"
    ),
    "masked": (
        "check the chat template's generation prompt and max_tokens: the model ended its turn "
        "before sampling anything"
    ),
}


def which(places: Sequence[tuple[int, int]]) -> str:
    """`group 0 trajectory 1, group 2 trajectory 0, ...` (the first few)."""
    named = ", ".join(f"group {g} trajectory {t}" for g, t in places[:WHICH_LIMIT])
    return named + (f" and {len(places) - WHICH_LIMIT} more" if len(places) > WHICH_LIMIT else "")


def trainability(groups: Sequence[TrajectoryGroup]) -> Trainability:
    places: dict[str, list[tuple[int, int]]] = {}
    total = 0
    for g, group in enumerate(groups):
        for t, trajectory in enumerate(group.trajectories):
            total += 1
            reason = untrainable_reason(trajectory)
            if reason is not None:
                places.setdefault(reason, []).append((g, t))
    return Trainability(total, places)


def check_trainable(groups: Sequence[TrajectoryGroup]) -> Trainability:
    """The batch's trainability; InvalidInputError, before the backend is called, when no
    trajectory in it can be trained."""
    found = trainability(groups)
    if found.nothing_trainable:
        raise InvalidInputError(
            f"nothing in this batch can be trained: of {found.total} trajectories, "
            f"{found.describe()}"
        )
    return found


# --- (b), (c), (e): the batch's rewards and completions -------------------------------------


def equal_reward_counts(groups: Sequence[TrajectoryGroup]) -> tuple[int, int]:
    """(groups whose rewards are all equal, groups of two or more trajectories)."""
    sized = [g for g in groups if len(g.trajectories) >= 2]
    equal = 0
    for group in sized:
        rewards = [t.reward for t in group.trajectories]
        if all(abs(r - rewards[0]) <= ZERO_VARIANCE_TOLERANCE for r in rewards[1:]):
            equal += 1
    return equal, len(sized)


def reward_outliers(rewards: Iterable[float], low: float, high: float) -> list[float]:
    """Rewards an order of magnitude outside [low, high]: further from the range than ten
    times its scale (the larger of its width and its largest magnitude)."""
    scale = max(high - low, abs(low), abs(high))
    if scale <= 0:
        return []
    margin = OUTLIER_FACTOR * scale
    return [r for r in rewards if r > high + margin or r < low - margin]


@attrs.frozen
class Completions:
    """Sampled turns of a batch: how many trajectories have one cut at max_tokens, and how many
    Choices are empty (no text, no tool call, no token)."""

    trajectories: int
    truncated: int
    choices: int
    empty: int

    @property
    def truncated_share(self) -> float:
        return self.truncated / self.trajectories if self.trajectories else 0.0


def _empty(choice: Choice) -> bool:
    if _sampled_nothing(choice):
        return True
    message = choice.message
    return not (message.content or "").strip() and not message.tool_calls


def completions(groups: Sequence[TrajectoryGroup]) -> Completions:
    trajectories = truncated = n_choices = empty = 0
    for group in groups:
        for trajectory in group.trajectories:
            choices = list(trajectory.choices())
            if not choices:
                continue
            trajectories += 1
            truncated += any(c.finish_reason == "length" for c in choices)
            n_choices += len(choices)
            empty += sum(_empty(c) for c in choices)
    return Completions(trajectories, truncated, n_choices, empty)


# --- (f) the served step ---------------------------------------------------------------------


def served_step(names: Iterable[str], run_name: str) -> int | None:
    """The newest step of `run_name` among the served model names (`{name}@{step}`, or
    `{project}/{name}@{step}` where a server qualifies them); -1 when the run's name is
    served but no step of it is, None when the names do not mention the run at all."""
    newest: int | None = None
    for name in names:
        base, at, step = name.rpartition("@")
        if not at:
            base, step = name, ""
        if base != run_name and not base.endswith(f"/{run_name}"):
            continue
        newest = max(newest if newest is not None else -1, int(step) if step.isdigit() else -1)
    return newest


# --- the run's memory ----------------------------------------------------------------------


@attrs.define
class RunDiagnostics:
    """What one run's diagnostics remember between steps. One per model (a run): nothing is
    shared across runs, so a cause warned about in one run is warned about again in the next."""

    warned: set[str] = attrs.field(factory=set)
    expected: set[str] = attrs.field(factory=set)  # causes the caller chose (see expect)
    reward_low: float | None = None
    reward_high: float | None = None
    equal_shares: list[float] = attrs.field(factory=list)
    equal_at_top: list[bool] = attrs.field(factory=list)
    stale_steps: int = 0
    discarded_equal: int = 0  # equal-reward groups dropped before the next batch (a pipeline)

    def expect(self, *causes: str) -> None:
        """Causes the caller chose knowingly (the demo's replies cut at a few tokens): their
        values are still recorded, but they are never warned about."""
        self.warned.update(causes)
        self.expected.update(causes)

    def first_time(self, cause: str) -> bool:
        """True the first time `cause` is seen in this run (then it is warned about)."""
        if cause in self.warned:
            return False
        self.warned.add(cause)
        return True

    def batch(
        self, groups: Sequence[TrajectoryGroup], found: Trainability | None = None
    ) -> tuple[dict[str, float], list[Finding]]:
        """The `diagnostics/*` values of a training batch and what it finds wrong with it;
        remembers the batch's rewards and spread for the steps to come."""
        found = trainability(groups) if found is None else found
        values = found.values()
        findings: list[Finding] = []
        if found.untrainable:
            findings.append(
                Finding(
                    "untrainable",
                    f"{found.untrainable} of {found.total} trajectories cannot be trained as "
                    f"sampled (none of their tokens is trained): {found.describe()}",
                )
            )
        equal, sized = equal_reward_counts(groups)
        equal, sized = equal + self.discarded_equal, sized + self.discarded_equal
        self.discarded_equal = 0
        rewards = [t.reward for g in groups for t in g.trajectories]
        if sized:
            values[EQUAL_REWARDS_KEY] = equal / sized
            findings.extend(self._spread(equal / sized, self._tied_at_top(groups, rewards)))
        values[REWARD_OUTLIERS_KEY] = 0.0
        if rewards:
            findings.extend(self._range(rewards, values))
        seen = completions(groups)
        values[TRUNCATED_KEY] = seen.truncated_share
        values[EMPTY_KEY] = float(seen.empty)
        if seen.trajectories and seen.truncated_share > TRUNCATED_SHARE_THRESHOLD:
            findings.append(
                Finding(
                    "truncated",
                    f"{seen.truncated} of {seen.trajectories} trajectories were cut at max_tokens "
                    "(finish_reason 'length'): raise max_tokens, or ask for shorter answers, "
                    "or the model learns from unfinished turns",
                )
            )
        if seen.empty:
            findings.append(
                Finding(
                    "empty",
                    f"{seen.empty} of {seen.choices} sampled turns are empty (no text, no tool "
                    "call): check the prompt, the chat template and stop sequences",
                )
            )
        return values, findings

    def discarded(self, equal_groups: int) -> None:
        """Groups with equal rewards that were dropped before training (the pipeline's
        `zero_variance` discards): they count in the next batch's share."""
        self.discarded_equal += equal_groups

    def _tied_at_top(self, groups: Sequence[TrajectoryGroup], rewards: list[float]) -> bool:
        """Every group of this batch whose rewards tie ties at the highest reward seen so
        far (this batch's included): what a solved task looks like."""
        if not rewards:
            return False
        top = max(rewards) if self.reward_high is None else max(self.reward_high, *rewards)
        tied = [
            g.trajectories[0].reward
            for g in groups
            if len(g.trajectories) >= 2 and equal_reward_counts([g])[0]
        ]
        return bool(tied) and all(abs(r - top) <= ZERO_VARIANCE_TOLERANCE for r in tied)

    def _spread(self, share: float, at_top: bool) -> list[Finding]:
        self.equal_shares.append(share)
        self.equal_at_top.append(at_top)
        recent = self.equal_shares[-EQUAL_STEPS:]
        if len(recent) < EQUAL_STEPS or min(recent) < EQUAL_SHARE_THRESHOLD:
            return []
        if recent[-1] < recent[0]:
            return []  # falling: the run is finding spread
        percent = round(100 * math.fsum(recent) / len(recent))
        if all(self.equal_at_top[-EQUAL_STEPS:]):
            return [
                Finding(
                    "equal_rewards",
                    f"{percent}% of groups had equal rewards for {EQUAL_STEPS} steps, all at the "
                    "highest reward seen: the task looks solved; stop here, or make the task "
                    "harder (a group whose rewards tie teaches nothing)",
                )
            ]
        return [
            Finding(
                "equal_rewards",
                f"{percent}% of groups had equal rewards for {EQUAL_STEPS} steps: check the "
                "reward function or raise the group size (a group whose rewards tie teaches "
                "nothing)",
            )
        ]

    def _range(self, rewards: list[float], values: dict[str, float]) -> list[Finding]:
        findings: list[Finding] = []
        low, high = self.reward_low, self.reward_high
        if low is not None and high is not None:
            outliers = reward_outliers(rewards, low, high)
            values[REWARD_OUTLIERS_KEY] = float(len(outliers))
            if outliers:
                worst = max(outliers, key=lambda r: abs(r))
                findings.append(
                    Finding(
                        "reward_range",
                        f"{len(outliers)} of {len(rewards)} rewards (e.g. {worst:.4g}) lie an "
                        f"order of magnitude outside the range seen so far [{low:.4g}, "
                        f"{high:.4g}]: check the reward function's scale and units",
                    )
                )
        self.reward_low = min(rewards) if low is None else min(low, *rewards)
        self.reward_high = max(rewards) if high is None else max(high, *rewards)
        return findings

    def served(self, trained: int, served: int | None, where: str) -> tuple[float, list[Finding]]:
        """The lag of the served step behind the trained one (`served` None or -1: no step of
        the run is served)."""
        if served is not None and served >= trained:
            return 0.0, []
        newest = served if served is not None and served >= 0 else None
        lag = float(trained - newest) if newest is not None else float(trained)
        return lag, [
            Finding(
                "served_lag",
                f"the inference server at {where} does not serve step {trained}, the step just "
                f"trained (newest served: {'none' if newest is None else newest}): rollouts "
                "sample an old policy; the server was not reloaded (restart it, or check the "
                "backend's serving errors)",
            )
        ]

    def staleness(self, max_age: float | None, bound: int | None) -> tuple[float, list[Finding]]:
        """How many updates in a row trained on groups as old as the pipeline allows."""
        if bound is None or bound <= 0 or max_age is None or max_age < bound:
            self.stale_steps = 0
            return 0.0, []
        self.stale_steps += 1
        if self.stale_steps < STALENESS_STEPS:
            return float(self.stale_steps), []
        return float(self.stale_steps), [
            Finding(
                "staleness",
                f"the pipeline trained on groups {bound} steps old, its bound "
                f"(max_steps_off_policy={bound}), for {self.stale_steps} updates in a row: "
                "rollouts run as far ahead of training as allowed, so every update is that "
                "off-policy; lower max_steps_off_policy (or num_rollout_workers) for fresher "
                "groups, or raise max_batch_size so training keeps up",
            )
        ]
