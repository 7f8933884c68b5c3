"""Training samples from recorded calls, on the sampler's own token ids (never re-tokenized).

Every recorded choice carries the prompt it was sampled from (`prompt_token_ids`) and what was
sampled (`token_ids`, with one logprob each). Calls are taken in the order they started; a
choice extends the sample whose tokens are a prefix of its prompt (the longest such), and the
prompt tokens past that prefix (tool results, the next user turn, template glue) join the
sample untrained. When no sample is a prefix, because the agent or the chat template rewrote
the history, the choice starts a new sample, its whole prompt untrained: a sample never
mixes two versions of a conversation, and every sampled token is trained exactly once, in
exactly the context it was sampled in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs
from openai.types.chat.chat_completion import Choice

from ..errors import InvalidInputError
from ..trajectories import MessageOrChoice, Trajectory


@attrs.frozen
class TokenSample:
    """One sequence to train: `trained[i]` marks a sampled token, `logprobs[i]` its sampling
    logprob (NaN on untrained tokens, and where unknown). `choices` counts the recorded
    choices merged into it."""

    tokens: tuple[int, ...]
    trained: tuple[bool, ...]
    logprobs: tuple[float, ...]
    choices: int

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def sampled(self) -> tuple[int, ...]:
        """The trained tokens, in order: the concatenation of the merged choices' token_ids."""
        return tuple(t for t, trained in zip(self.tokens, self.trained) if trained)


@attrs.define
class _Growing:
    tokens: list[int]
    trained: list[bool]
    logprobs: list[float]
    choices: int = 0


def token_samples(
    trajectory: Trajectory, where: str, *, allow_without_logprobs: bool = False
) -> list[TokenSample]:
    """The samples of a captured trajectory (see the module docstring). `where` names the
    trajectory in errors ("group 0, trajectory 3")."""
    exchanges = trajectory.exchanges
    others = [name for name in ("completions", "responses", "messages") if getattr(exchanges, name)]
    if others:
        raise InvalidInputError(
            f"{where} holds calls recorded through the {', '.join(others)} API; arthex trains "
            "chat completions only (record the agent against /chat/completions)"
        )
    ordered = sorted(
        enumerate(exchanges.chat_completions), key=lambda item: (item[1].start_time, item[0])
    )
    growing: list[_Growing] = []
    for call, exchange in ordered:
        shared_prompt = (exchange.response.model_extra or {}).get("prompt_token_ids")
        for c, choice in enumerate(exchange.response.choices):
            here = f"{where}, call {call}, choice {c}"
            prompt, sampled, logprobs = choice_tokens(
                choice, here, allow_without_logprobs=allow_without_logprobs,
                shared_prompt=shared_prompt,
            )  # fmt: skip
            target = _longest_prefix(growing, prompt)
            if target is None:
                target = _Growing([], [], [])
                growing.append(target)
            suffix = prompt[len(target.tokens) :]
            target.tokens += suffix + sampled
            target.trained += [False] * len(suffix) + [True] * len(sampled)
            target.logprobs += [math.nan] * len(suffix) + logprobs
            target.choices += 1
    return [
        TokenSample(tuple(g.tokens), tuple(g.trained), tuple(g.logprobs), g.choices)
        for g in growing
        if g.tokens
    ]


def _longest_prefix(samples: list[_Growing], prompt: list[int]) -> _Growing | None:
    best: _Growing | None = None
    for sample in samples:
        n = len(sample.tokens)
        longer = best is None or n > len(best.tokens)
        if n <= len(prompt) and longer and prompt[:n] == sample.tokens:
            best = sample
    return best


def choice_tokens(
    choice: Choice, where: str, *, allow_without_logprobs: bool, shared_prompt: object = None
) -> tuple[list[int], list[int], list[float]]:
    """(prompt ids, sampled ids, one logprob per sampled id) of a Choice, checked; NaN where a
    logprob is unknown or not finite. `shared_prompt` is the response's `prompt_token_ids`,
    used when the choice has none of its own (vLLM puts them on the response)."""
    extra: dict[str, Any] = choice.model_extra or {}
    prompt = extra.get("prompt_token_ids", shared_prompt)
    sampled = extra.get("token_ids")
    if prompt is None or sampled is None:
        missing = [
            name for name, value in (("prompt_token_ids", prompt), ("token_ids", sampled))
            if value is None
        ]  # fmt: skip
        raise InvalidInputError(
            f"{where} lacks {' and '.join(missing)}: training uses the sampler's token ids. "
            "Sample through an arthex backend's endpoint (model.openai_client(), or any client "
            "built from its base_url), or ask vLLM for them with return_token_ids"
        )
    prompt_ids = _ids(prompt, where, "prompt_token_ids")
    sampled_ids = _ids(sampled, where, "token_ids")
    content = choice.logprobs.content if choice.logprobs is not None else None
    if content is None or (not content and sampled_ids):
        if not allow_without_logprobs:
            raise InvalidInputError(
                f"{where} has no token logprobs; request them with logprobs=True, or set "
                "TrainConfig(allow_training_without_logprobs=True) to train with ratio 1"
            )
        return prompt_ids, sampled_ids, [math.nan] * len(sampled_ids)
    if len(content) != len(sampled_ids):
        raise InvalidInputError(
            f"{where} has {len(content)} token logprobs for {len(sampled_ids)} token_ids; they "
            "must match one to one (was the Choice edited after sampling?)"
        )
    values = [float(entry.logprob) for entry in content]
    return prompt_ids, sampled_ids, [v if math.isfinite(v) else math.nan for v in values]


def _ids(value: object, where: str, key: str) -> list[int]:
    if not isinstance(value, list | tuple) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        raise InvalidInputError(f"{where}: {key} must be a list of token ids (ints >= 0)")
    return list(value)


Built = tuple[list[int], list[bool], list[float], list[int]]


def conversation_tokens(
    items: Sequence[MessageOrChoice], where: str, field: str, *, allow_without_logprobs: bool
) -> list[Built]:
    """One conversation's sequences, each (tokens, completion mask, logprobs, choice offsets):
    a Choice whose prompt extends the current sequence grows it, any other starts a new one."""
    built: list[Built] = []
    current: Built | None = None
    c = 0
    for i, item in enumerate(items):
        if not isinstance(item, Choice):
            continue
        here = f"{where}, choice {c} ({field}[{i}])"
        c += 1
        prompt, sampled, sampled_logprobs = choice_tokens(
            item, here, allow_without_logprobs=allow_without_logprobs
        )
        so_far = current[0] if current is not None else []
        if current is None or prompt[: len(so_far)] != so_far or len(prompt) < len(so_far):
            current = ([], [], [], [])
            built.append(current)
        tokens, completion, logprobs, offsets = current
        suffix = prompt[len(tokens) :]
        tokens += suffix
        offsets.append(len(tokens))
        tokens += sampled
        completion += [False] * len(suffix) + [True] * len(sampled)
        logprobs += [math.nan] * len(suffix) + sampled_logprobs
    return [b for b in built if b[0]]
