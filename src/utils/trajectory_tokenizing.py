"""Trajectories to ART's tokenized ones (`art.trajectories.tokenize`, `tensorize`): each of a
trajectory's histories as the token ids the sampler returned.

The ids come from arthex's one encoder of sampled Choices (`core.capture.samples.choice_tokens`,
the packer's): each Choice's `prompt_token_ids` and `token_ids`, never re-tokenized, so no
tokenizer is needed. As in ART, a history is one append-only sequence: every later prompt must
extend the tokens so far, else the history is refused. Prompt tokens are EXACT; sampled tokens
EXACT | SAMPLED | ASSISTANT | OUTPUT, with RAW_LOGPROBS or PROCESSED_LOGPROBS where the Choice
says its `logprobs_mode`; the last sampled token is STOP where the Choice stopped on it (its
`stop_reason` is that token id).

Where arthex differs (docs/migrating-from-art.md): a trajectory of recorded calls
(`exchanges`) is refused in one line (ART renders their chat templates to tokenize them;
arthex trains those calls from their token ids, which `tokenize_trajectory_groups` shows);
a logprob that is not finite reads NaN and a Choice whose logprobs do not match its token ids
one to one is refused (ART keeps -inf, and NaN-fills the mismatch); `top_k` and
`routed_experts` stay None (arthex's servers send neither), though both validate when given.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Mapping
from typing import Any, cast

from openai.types.chat.chat_completion import Choice

from ..core.capture.samples import choice_tokens
from ..core.errors import InvalidInputError, UnsupportedCapability
from ..core.trajectories import History, Trajectory, TrajectoryGroup
from .art_trajectories import TokenFlag
from .tokenized_common import HISTORY_KINDS
from .tokenized_trajectories import (
    TokenizedHistory,
    TokenizedMultiHistoryTrajectory,
    TokenizedTrajectory,
    TokenizedTrajectoryGroup,
)
from .trajectory_histories import trajectory_histories

__all__ = ["tensorize", "tokenize"]

_SAMPLED = TokenFlag.EXACT | TokenFlag.SAMPLED | TokenFlag.ASSISTANT | TokenFlag.OUTPUT
_MODES = {
    "raw_logprobs": TokenFlag.RAW_LOGPROBS,
    "processed_logprobs": TokenFlag.PROCESSED_LOGPROBS,
}
_STOPPED = {"stop", "tool_calls", "function_call"}
_RECORDED_CALLS = (
    "tokenizing recorded calls (ART renders their chat templates)",
    "arthex",
    "arthex trains a captured trajectory's calls from their token ids: "
    "arthex.art.preprocessing.tokenize.tokenize_trajectory_groups shows those sequences",
)


def tokenize_history(history: object, *, model: str | None) -> TokenizedHistory:
    """One history's tokens (see the module docstring); `model` names the model that sampled
    it (ART asks for it on a trajectory's own conversations)."""
    if not isinstance(history, History):
        if isinstance(history, tuple(HISTORY_KINDS)):
            raise UnsupportedCapability(*_RECORDED_CALLS)
        raise TypeError(f"unsupported history type: {type(history).__name__}")
    if model is None:
        raise InvalidInputError("Legacy history tokenization requires model=")
    tokens: list[int] = []
    logprobs: list[float] = []
    flags: list[TokenFlag] = []
    for c, item in enumerate(i for i in history.messages_and_choices if isinstance(i, Choice)):
        prompt, sampled, sampled_logprobs = choice_tokens(
            item, f"choice {c}", allow_without_logprobs=True
        )
        if not prompt or not sampled:
            raise InvalidInputError(
                f"choice {c} has no {'prompt_token_ids' if not prompt else 'token_ids'}: "
                "tokenizing reads the ids the server returned"
            )
        if prompt[: len(tokens)] != tokens:
            raise InvalidInputError(
                f"choice {c}'s prompt does not extend the tokens before it: a history is one "
                "append-only sequence (put a rewritten conversation in its own history)"
            )
        suffix = prompt[len(tokens) :]
        tokens += suffix + sampled
        logprobs += [math.nan] * len(suffix) + sampled_logprobs
        extra: Mapping[str, Any] = item.model_extra or {}
        mode = extra.get("logprobs_mode")
        if mode is not None and mode not in _MODES:
            raise InvalidInputError(f"choice {c}: unsupported logprobs_mode {mode!r}")
        flag = _SAMPLED | _MODES[mode] if mode is not None else _SAMPLED
        flags += [TokenFlag.EXACT] * len(suffix) + [flag] * len(sampled)
        stop = extra.get("stop_reason")
        if (
            item.finish_reason in _STOPPED
            and isinstance(stop, int)
            and not isinstance(stop, bool)
            and sampled[-1] == stop
        ):
            flags[-1] |= TokenFlag.STOP
    if not tokens:
        raise InvalidInputError("Trajectory contains no trainable choices")
    return TokenizedHistory(
        history=history, model=model, tokens=tokens, logprobs=logprobs, flags=flags
    )


def tokenize_trajectory(
    trajectory: Trajectory, *, multi_history: bool = False, model: str | None = None
) -> TokenizedTrajectory | TokenizedMultiHistoryTrajectory:
    """The trajectory's one history tokenized (all of them, with `multi_history`)."""
    if trajectory.exchanges:
        raise UnsupportedCapability(*_RECORDED_CALLS)
    histories = trajectory_histories(trajectory, model=model)
    if not multi_history and len(histories) != 1:
        raise InvalidInputError(
            f"Trajectory tokenization requires exactly one history; found {len(histories)} "
            "(pass multi_history=True for all of them)"
        )
    tokenized = [tokenize_history(history, model=model) for history in histories]
    if multi_history:
        return TokenizedMultiHistoryTrajectory(trajectory=trajectory, histories=tokenized)
    only = tokenized[0]
    return TokenizedTrajectory(
        history=only.history,
        model=only.model,
        tokens=only.tokens,
        logprobs=only.logprobs,
        flags=only.flags,
        trajectory=trajectory,
    )


def tokenize_group(
    group: TrajectoryGroup, *, multi_history: bool = False, model: str | None = None
) -> TokenizedTrajectoryGroup[Any]:
    trajectories = [
        tokenize_trajectory(t, multi_history=multi_history, model=model) for t in group.trajectories
    ]
    kind = TokenizedMultiHistoryTrajectory if multi_history else TokenizedTrajectory
    return TokenizedTrajectoryGroup[kind](  # type: ignore[valid-type]
        trajectory_group=group, trajectories=trajectories
    )


def _unsupported_options(
    reconcile: bool, base_model: str | None, chat_template: str | None, kwargs: object
) -> None:
    """The options ART uses to render recorded calls; they do nothing to sampled Choices,
    which is all arthex tokenizes, so they are accepted (base_model, tokenizer) or refused."""
    del base_model
    if reconcile or chat_template is not None or kwargs is not None:
        raise InvalidInputError(
            "reconcile_text_equivalent_tokenizations, chat_template and chat_template_kwargs "
            "apply to rendering recorded calls, which arthex does not tokenize; leave them unset"
        )


async def tokenize(
    items: Iterable[Trajectory] | Iterable[TrajectoryGroup],
    *,
    multi_history: bool = False,
    reconcile_text_equivalent_tokenizations: bool = False,
    model: str | None = None,
    base_model: str | None = None,
    tokenizer: object = None,
    chat_template: str | None = None,
    chat_template_kwargs: Mapping[str, object] | None = None,
) -> list[Any]:
    """Each trajectory (or group) tokenized, in order; all trajectories or all groups. Runs in
    a worker thread so the event loop stays free. `tokenizer` is not needed: the ids are the
    sampler's."""
    del tokenizer
    _unsupported_options(
        reconcile_text_equivalent_tokenizations, base_model, chat_template, chat_template_kwargs
    )
    values: list[Any] = list(items)
    if all(isinstance(v, TrajectoryGroup) for v in values):
        groups = cast(list[TrajectoryGroup], values)
        return await asyncio.to_thread(
            lambda: [tokenize_group(g, multi_history=multi_history, model=model) for g in groups]
        )
    if all(isinstance(v, Trajectory) for v in values):
        return await asyncio.to_thread(
            lambda: [
                tokenize_trajectory(t, multi_history=multi_history, model=model) for t in values
            ]
        )
    raise TypeError("items must be all Trajectory or all TrajectoryGroup")


async def tensorize(
    items: Iterable[Trajectory] | Iterable[TrajectoryGroup],
    *,
    multi_history: bool = False,
    reconcile_text_equivalent_tokenizations: bool = False,
    model: str | None = None,
    base_model: str | None = None,
    tokenizer: object = None,
    chat_template: str | None = None,
    chat_template_kwargs: Mapping[str, object] | None = None,
    device: Any = None,
) -> list[Any]:
    """`tokenize`, then each result as tensors on `device` (CPU by default)."""
    tokenized = await tokenize(
        items,
        multi_history=multi_history,
        reconcile_text_equivalent_tokenizations=reconcile_text_equivalent_tokenizations,
        model=model,
        base_model=base_model,
        tokenizer=tokenizer,
        chat_template=chat_template,
        chat_template_kwargs=chat_template_kwargs,
    )
    return [value.tensorize(device=device) for value in tokenized]
