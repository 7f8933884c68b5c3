"""RULER: an LLM judge that scores a group's trajectories relative to each other.

`ruler_score_group(group, judge_model, ...)` keeps ART's signature and meaning (a new group
whose rewards are the judge's scores, the old reward kept as `independent_reward`, None
instead of an error with `swallow_exceptions`), and calls the judge through the `openai`
client, so any OpenAI-compatible endpoint serves as judge. Where ART users hit trouble, it
does more:

- a reply that is not valid JSON, or that scores the wrong trajectories, gets one corrective
  retry, then a `JudgeError` (or, swallowed, a failure counted in `JudgeUsage`);
- a group whose trajectories the judge could not tell apart is scored without a call (they
  tie, at the group's mean reward);
- tokens (and, with a price table, dollars) go to the group's metrics as `costs/judge/*`;
- verdicts are cached by content hash (`JudgeCache`), so re-scoring costs nothing;
- additional histories (sub-agents) and every captured conversation are shown to the judge;
- `permutations=k` asks k times with the trajectories in different orders, averages the
  scores and reports how well the rankings agree (`judge/rank_agreement`, Kendall's tau-b).
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import random
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ..core.chat_types import content_text
from ..core.errors import ArthexError, InvalidInputError
from ..core.trajectories import Trajectory, TrajectoryGroup
from .cache import JudgeCache, Verdict, default_cache, verdict_key
from .prompt import (
    DEFAULT_RUBRIC,
    SCORES_SCHEMA,
    ReplyError,
    TrajectoryScore,
    View,
    correction,
    judge_messages,
    parse_scores,
)

if TYPE_CHECKING:
    from openai import AsyncOpenAI

logger = logging.getLogger("arthex.rewards")

ATTEMPTS = 2  # the first answer and one corrective retry
REPLY_EXCERPT = 300  # characters of the judge's reply an error quotes
RETRIES_KEY = "diagnostics/judge_retries"  # a group metric: corrective retries its judging took
_USE_DEFAULT: Any = object()


class JudgeError(ArthexError):
    """The judge's answer could not be used, even after one corrective retry."""


@attrs.frozen
class Price:
    """What the judge costs, in US dollars per million tokens."""

    input_per_million: float
    output_per_million: float


@attrs.define
class JudgeUsage:
    """Totals over every scoring call it is passed to, failures included: log
    `usage.metrics()` with `model.log(metrics=...)` to chart what judging cost."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usd: float = 0.0
    priced: bool = False
    cache_hits: int = 0
    failures: int = 0
    retries: int = 0

    def add(self, other: JudgeUsage) -> None:
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.usd += other.usd
        self.priced = self.priced or other.priced
        self.cache_hits += other.cache_hits
        self.failures += other.failures
        self.retries += other.retries

    def costs(self) -> dict[str, float]:
        values = {
            "costs/judge/calls": float(self.calls),
            "costs/judge/prompt_tokens": float(self.prompt_tokens),
            "costs/judge/completion_tokens": float(self.completion_tokens),
        }
        if self.priced:
            values["costs/judge/usd"] = self.usd
        return values

    def metrics(self) -> dict[str, float]:
        return {
            **self.costs(),
            "judge/cache_hits": float(self.cache_hits),
            "judge/failures": float(self.failures),
            "judge/retries": float(self.retries),
        }


async def ruler(
    views: Sequence[View],
    judge_model: str,
    *,
    client: AsyncOpenAI,
    rubric: str = DEFAULT_RUBRIC,
    params: Mapping[str, Any] | None = None,
    permutations: int = 1,
    prices: Mapping[str, Price] | None = None,
    usage: JudgeUsage | None = None,
    debug: bool = False,
) -> Verdict:
    """Scores for `views` in their order (ids "1".."n"), from `permutations` judgments.

    Raises JudgeError when a judgment stays unusable after its retry."""
    spent = usage if usage is not None else JudgeUsage()
    rounds: list[list[float]] = []
    explanations: list[str] = [""] * len(views)
    for order in _orders(views, permutations):
        shown = [views[i] for i in order]
        scores = await _judge_once(
            shown, judge_model, client, rubric, dict(params or {}), prices, spent, debug
        )
        values = [0.0] * len(views)
        for position, original in enumerate(order):
            values[original] = scores[position].score
            if not explanations[original]:
                explanations[original] = scores[position].explanation
        rounds.append(values)
    mean = [math.fsum(r[i] for r in rounds) / len(rounds) for i in range(len(views))]
    agreement = rank_agreement(rounds) if len(rounds) > 1 else None
    return Verdict(
        tuple(
            TrajectoryScore(trajectory_id=str(i + 1), explanation=explanations[i], score=mean[i])
            for i in range(len(views))
        ),
        agreement,
    )


async def _judge_once(
    views: Sequence[View],
    judge_model: str,
    client: AsyncOpenAI,
    rubric: str,
    params: dict[str, Any],
    prices: Mapping[str, Price] | None,
    usage: JudgeUsage,
    debug: bool,
) -> list[TrajectoryScore]:
    messages: list[Any] = list(judge_messages(views, rubric))
    request: dict[str, Any] = {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "ruler_scores", "schema": SCORES_SCHEMA},
        },
        **params,
    }
    if request.get("response_format") is None:
        request.pop("response_format")
    problem = ""
    content: str | None = None
    for attempt in range(ATTEMPTS):
        response = await client.chat.completions.create(
            model=judge_model, messages=messages, **request
        )
        _count(usage, response, judge_model, prices)
        content = response.choices[0].message.content if response.choices else None
        if debug:
            logger.info("judge %s answered: %s", judge_model, content)
        try:
            scores = parse_scores(content, len(views))
        except ReplyError as error:
            problem = str(error)
            if attempt + 1 < ATTEMPTS:
                logger.debug("judge %s: %s; asking again", judge_model, problem)
            messages = [
                *messages,
                {"role": "assistant", "content": content or ""},
                {"role": "user", "content": correction(problem, len(views))},
            ]
            usage.retries += 1
        else:
            return scores
    raise JudgeError(
        f"the judge {judge_model!r} gave no usable scores for {len(views)} trajectories after "
        f"{ATTEMPTS} attempts: {problem}; its last reply: {_excerpt(content)}"
    )


def _excerpt(content: str | None, limit: int = REPLY_EXCERPT) -> str:
    """The judge's reply for an error message: on one line, cut to `limit` characters."""
    if content is None:
        return "(none)"
    flat = " ".join(content.split())
    return repr(flat if len(flat) <= limit else flat[: limit - 3] + "...")


def group_label(group: TrajectoryGroup) -> str:
    """How an error names a group: its scenario (metadata `scenario_id` or `scenario`) when it
    has one, and its first user message."""
    named = [
        f"{key}={group.metadata[key]!r}"
        for key in ("scenario_id", "scenario")
        if group.metadata.get(key) is not None
    ]
    first = next(
        (
            content_text(item.get("content"))
            for t in group.trajectories
            for item in t.messages_and_choices
            if isinstance(item, dict) and item.get("role") == "user"
        ),
        None,
    )
    if first:
        flat = " ".join(first.split())
        named.append(f"first user message {flat[:60] + ('...' if len(flat) > 60 else '')!r}")
    what = f"the group of {len(group.trajectories)} trajectories"
    return f"{what} ({', '.join(named)})" if named else what


def _count(
    usage: JudgeUsage, response: Any, judge_model: str, prices: Mapping[str, Price] | None
) -> None:
    usage.calls += 1
    counted = getattr(response, "usage", None)
    prompt = int(getattr(counted, "prompt_tokens", 0) or 0)
    completion = int(getattr(counted, "completion_tokens", 0) or 0)
    usage.prompt_tokens += prompt
    usage.completion_tokens += completion
    price = (prices or {}).get(judge_model)
    if price is not None:
        usage.priced = True
        usage.usd += (
            prompt * price.input_per_million + completion * price.output_per_million
        ) / 1e6


def _orders(views: Sequence[View], permutations: int) -> list[list[int]]:
    """The given order first, then distinct shuffles seeded by the content (so a re-run asks
    the same questions, and the cache key covers them)."""
    n = len(views)
    orders = [list(range(n))]
    seed = int(hashlib.sha256("".join(v.key() for v in views).encode()).hexdigest()[:16], 16)
    rng = random.Random(seed)
    tries = 0
    while len(orders) < permutations and tries < 100 * permutations:
        tries += 1
        order = list(range(n))
        rng.shuffle(order)
        if order not in orders or math.factorial(n) < permutations:
            orders.append(order)
    return orders


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b of two score vectors (None when either is constant)."""
    concordant = discordant = ties_x = ties_y = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    denominator = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    if denominator == 0:
        return None
    return (concordant - discordant) / denominator


def rank_agreement(rounds: Sequence[Sequence[float]]) -> float | None:
    """Mean Kendall tau-b over every pair of judgments (1.0: same ranking every time)."""
    taus = [
        tau
        for i in range(len(rounds))
        for j in range(i + 1, len(rounds))
        if (tau := kendall_tau_b(rounds[i], rounds[j])) is not None
    ]
    return math.fsum(taus) / len(taus) if taus else None


def _judge_client(judge_model: str, client: AsyncOpenAI | None) -> tuple[AsyncOpenAI, str]:
    """The client and the model name it is asked for. Without a client, `judge_model` may
    carry ART's `openai/` provider prefix (dropped); other providers need a client."""
    if client is not None:
        return client, judge_model
    provider, slash, name = judge_model.partition("/")
    if slash and provider != "openai":
        raise InvalidInputError(
            f"judge_model {judge_model!r} names the provider {provider!r}; pass client= "
            "(an openai.AsyncOpenAI for that provider's OpenAI-compatible endpoint) and the "
            "model name it serves"
        )
    if not os.environ.get("OPENAI_API_KEY"):
        raise InvalidInputError(
            f"the judge {judge_model!r} needs OpenAI credentials: set OPENAI_API_KEY, or pass "
            "client= (an openai.AsyncOpenAI with its api_key and base_url)"
        )
    from openai import AsyncOpenAI

    return AsyncOpenAI(), name if slash else judge_model


async def ruler_score_group(
    group: TrajectoryGroup,
    judge_model: str = "openai/o3",
    extra_params: Mapping[str, Any] | None = None,
    rubric: str = DEFAULT_RUBRIC,
    *,
    client: AsyncOpenAI | None = None,
    swallow_exceptions: bool = False,
    debug: bool = False,
    cache: JudgeCache | None = _USE_DEFAULT,
    prices: Mapping[str, Price] | None = None,
    permutations: int = 1,
    usage: JudgeUsage | None = None,
    extra_litellm_params: Mapping[str, Any] | None = None,
) -> TrajectoryGroup | None:
    """A copy of `group` whose rewards are the judge's scores (0..1).

    Each trajectory keeps its old reward as `metrics["independent_reward"]`, gets
    `metrics["ruler_score"]` and the judge's explanation in its logs. The group keeps its
    exceptions, metadata and logs, and gains `costs/judge/*` metrics (plus `judge/cache_hit`,
    and `judge/rank_agreement` with permutations). `extra_params` go into the judge request
    (temperature, max_tokens, `response_format=None` for servers without structured output;
    `extra_litellm_params` is accepted as ART's name for them). `cache=None` turns caching
    off; the default is one in-memory cache per process.

    With `swallow_exceptions`, any failure returns None (counted in `usage.failures`)."""
    if cache is _USE_DEFAULT:
        cache = default_cache
    if not isinstance(group, TrajectoryGroup):
        raise InvalidInputError(f"group must be a TrajectoryGroup, got {type(group).__name__}")
    if isinstance(permutations, bool) or not isinstance(permutations, int) or permutations < 1:
        raise InvalidInputError(f"permutations must be an integer >= 1, got {permutations!r}")
    if extra_params is not None and extra_litellm_params is not None:
        raise InvalidInputError("pass extra_params or extra_litellm_params, not both")
    params = dict(extra_params or extra_litellm_params or {})
    spent = JudgeUsage()
    try:
        scored = await _score(
            group, judge_model, params, rubric, client, debug, cache, prices, permutations, spent
        )
    except JudgeError as error:
        named = JudgeError(f"judging {group_label(group)} failed: {error}")
        _failed(named, spent, usage, swallow_exceptions, cause=error)
        return None
    except Exception as error:
        _failed(error, spent, usage, swallow_exceptions, cause=None)
        return None
    if usage is not None:
        usage.add(spent)
    return scored


def _failed(
    error: Exception,
    spent: JudgeUsage,
    usage: JudgeUsage | None,
    swallow: bool,
    *,
    cause: Exception | None,
) -> None:
    """Count a failed judging; raise it, or (swallowed) log it in one line."""
    spent.failures += 1
    if usage is not None:
        usage.add(spent)
    if not swallow:
        if cause is None:
            raise error
        raise error from None
    logger.warning("judging a group failed and was skipped: %s: %s", type(error).__name__, error)


async def _score(
    group: TrajectoryGroup,
    judge_model: str,
    params: dict[str, Any],
    rubric: str,
    client: AsyncOpenAI | None,
    debug: bool,
    cache: JudgeCache | None,
    prices: Mapping[str, Price] | None,
    permutations: int,
    spent: JudgeUsage,
) -> TrajectoryGroup:
    trajectories = [t.model_copy(deep=True) for t in group.trajectories]
    for trajectory in trajectories:
        trajectory.metrics["independent_reward"] = trajectory.reward
    group_metrics: dict[str, float | int | bool] = dict(group.metrics)
    views = [View.of(t) for t in trajectories]
    if len(views) >= 2 and len({v.key() for v in views}) == 1:
        tie = math.fsum(t.reward for t in trajectories) / len(trajectories)
        for trajectory in trajectories:
            trajectory.reward = tie
            trajectory.log("RULER: every trajectory of the group is the same; scored as a tie")
        group_metrics["judge/identical_group"] = 1.0
        return _rebuilt(group, trajectories, group_metrics, spent)
    if not views:
        return _rebuilt(group, trajectories, group_metrics, spent)
    openai, model_name = _judge_client(judge_model, client)
    key = verdict_key(model_name, rubric, params, permutations, views)
    verdict = cache.get(key) if cache is not None else None
    group_metrics["judge/cache_hit"] = float(verdict is not None)
    if verdict is None:
        verdict = await ruler(
            views,
            model_name,
            client=openai,
            rubric=rubric,
            params=params,
            permutations=permutations,
            prices=prices,
            usage=spent,
            debug=debug,
        )
        if cache is not None:
            cache.put(key, verdict)
    else:
        spent.cache_hits += 1
    for trajectory, score in zip(trajectories, verdict.scores):
        trajectory.metrics["ruler_score"] = score.score
        trajectory.reward = score.score
        trajectory.log(f"RULER explanation: {score.explanation}")
    if verdict.rank_agreement is not None:
        group_metrics["judge/rank_agreement"] = verdict.rank_agreement
    return _rebuilt(group, trajectories, group_metrics, spent)


def _rebuilt(
    group: TrajectoryGroup,
    trajectories: list[Trajectory],
    metrics: dict[str, float | int | bool],
    spent: JudgeUsage,
) -> TrajectoryGroup:
    metrics.update(spent.costs())
    metrics[RETRIES_KEY] = float(spent.retries)
    return TrajectoryGroup(
        trajectories,
        exceptions=list(group.exceptions),
        metadata=dict(group.metadata),
        metrics=metrics,
        logs=list(group.logs),
    )
