"""Trajectory groups as the token sequences the local trainer trains, one result per sequence,
under ART's names and shapes (`art.preprocessing.tokenize`'s `tokenize_trajectory_groups` and
`TokenizedResult`), so a script can look at what a group becomes before training on it.

The sequences are the packer's own (`packing.build_sequences`): the sampler's token ids of each
Choice, grown while prompts extend, never re-tokenized; the advantages are
`core.advantages.group_advantages`. Around them this module adds what ART's results carry: a
per-trajectory `weight` (1 / its trained tokens), the group's `prompt_id` and shared
`prompt_length`, and ART's per-group shuffle (seeded by `prompt_id`), so for the same groups the
results come in ART's order. Where arthex differs (docs/migrating-from-art.md): a Choice without
logprobs is refused in one line unless `allow_training_without_logprobs` (ART leaves it out of
the sequence); each additional history starts its own sequence (ART continues the previous
history's when the prompt extends it); a non-finite logprob reads NaN; `extra_logprobs` is
empty and the MoE routing fields None (arthex's servers send neither).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import takewhile
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ...core.errors import InvalidInputError, require_extra
from ...core.trajectories import History, Trajectory, TrajectoryGroup

if TYPE_CHECKING:
    from .packing import TokenSequence

__all__ = [
    "ChatTemplateTool",
    "ChatTemplateToolSchemaFormat",
    "TokenizedResult",
    "assemble_vllm_training_sequences",
    "tokenize_trajectory",
    "tokenize_trajectory_groups",
]

ChatTemplateTool = dict[Any, Any] | Callable[..., Any]
ChatTemplateToolSchemaFormat = Literal["default", "vllm_openai"]
WEIGHT_EPSILON = 1e-6


class TokenDecoder(Protocol):
    def decode(self, token_ids: int, /) -> str | list[str]: ...


@dataclass
class TokenizedResult:
    """One sequence to train: `assistant_mask[i]` is 1 on a sampled token, `logprobs[i]` its
    sampling logprob (NaN on prompt tokens), `choice_offsets` where each Choice's tokens
    begin. `prompt_length` tokens open every sequence of the group `prompt_id`."""

    advantage: float
    chat: str
    token_ids: list[int]
    input_pos: list[int]
    assistant_mask: list[int]
    logprobs: list[float]
    pixel_values: Any
    image_grid_thw: Any
    trajectory: Trajectory
    choice_offsets: list[int]
    extra_logprobs: dict[str, list[float]]
    _tokenizer: TokenDecoder = field(repr=False, compare=False)
    moe_routed_experts: Any = None
    moe_routing_alignment_stats: Any = None
    weight: float = 0.0
    prompt_id: int = 0
    prompt_length: int = 0

    @cached_property
    def tokens(self) -> list[str]:
        """Each token id decoded alone."""
        decoded: list[str] = []
        for token_id in self.token_ids:
            token = self._tokenizer.decode(token_id)
            if not isinstance(token, str):
                raise TypeError("decoding one token id must give one string")
            decoded.append(token)
        return decoded

    def without_prompt(self) -> TokenizedResult:
        """The same result less the group's shared prompt."""
        n = self.prompt_length
        return TokenizedResult(
            advantage=self.advantage,
            chat=self.chat,
            token_ids=self.token_ids[n:],
            input_pos=self.input_pos[n:],
            assistant_mask=self.assistant_mask[n:],
            logprobs=self.logprobs[n:],
            pixel_values=None,
            image_grid_thw=None,
            trajectory=self.trajectory,
            choice_offsets=self.choice_offsets,
            extra_logprobs={key: values[n:] for key, values in self.extra_logprobs.items()},
            _tokenizer=self._tokenizer,
            moe_routed_experts=None,
            moe_routing_alignment_stats=self.moe_routing_alignment_stats,
            weight=self.weight,
            prompt_id=self.prompt_id,
            prompt_length=0,
        )


def tokenize_trajectory_groups(
    tokenizer: TokenDecoder,
    trajectory_groups: Sequence[TrajectoryGroup],
    allow_training_without_logprobs: bool,
    scale_rewards: bool,
    shuffle_group_trajectories: bool = True,
    drop_zero_advantage_trajectories: bool = True,
    image_processor: object = None,
    chat_template_kwargs: dict[str, Any] | None = None,
    chat_template_tool_schema_format: ChatTemplateToolSchemaFormat = "default",
    model: str | None = None,
    _max_sequence_length: int | None = None,
) -> Generator[TokenizedResult, None, None]:
    """The results of every group, a group at a time. The template arguments (and the image
    processor) are taken and unused, as in ART for sampled Choices: nothing is rendered."""
    del image_processor, chat_template_kwargs, chat_template_tool_schema_format
    del _max_sequence_length
    require_extra("local", "torch")
    from ...core.config import TrainConfig
    from .packing import build_sequences

    if model is not None and any(t.exchanges for g in trajectory_groups for t in g.trajectories):
        raise InvalidInputError(
            f"tokenize_trajectory_groups(model={model!r}): arthex trains every chat completion "
            "a trajectory recorded; leave model= unset"
        )
    config = TrainConfig(
        scale_rewards=scale_rewards,
        allow_training_without_logprobs=allow_training_without_logprobs,
    )
    sequences, _ = build_sequences(
        trajectory_groups, config, keep_zero_advantage=not drop_zero_advantage_trajectories
    )
    by_group: dict[int, list[TokenSequence]] = {}
    for sequence in sequences:
        by_group.setdefault(sequence.group_index, []).append(sequence)
    for prompt_id, group in enumerate(trajectory_groups):
        if not group.trajectories:
            continue
        found = by_group.get(prompt_id, [])
        results = [
            _result(tokenizer, s, group.trajectories[s.trajectory_index], prompt_id) for s in found
        ]
        _weigh(results, [s.trajectory_index for s in found])
        prompt_length = _shared_prompt_length(results)
        for result in results:
            result.prompt_length = prompt_length
        if shuffle_group_trajectories:
            random.Random(prompt_id).shuffle(results)
        yield from results


def tokenize_trajectory(
    tokenizer: TokenDecoder,
    image_processor: object,
    history: History,
    advantage: float,
    allow_training_without_logprobs: bool,
    trajectory: Trajectory,
    chat_template_kwargs: dict[str, Any] | None = None,
    chat_template_tool_schema_format: ChatTemplateToolSchemaFormat = "default",
) -> TokenizedResult | None:
    """One history's sequence, None when it sampled nothing; an error when its prompts do
    not extend one another (it makes several sequences)."""
    del image_processor, chat_template_kwargs, chat_template_tool_schema_format
    results = assemble_vllm_training_sequences(
        tokenizer=tokenizer,
        histories=[history],
        advantage=advantage,
        allow_training_without_logprobs=allow_training_without_logprobs,
        trajectory=trajectory,
    )
    if len(results) > 1:
        raise InvalidInputError(
            f"the history makes {len(results)} sequences (a later prompt does not extend the "
            "earlier ones); use assemble_vllm_training_sequences to get each"
        )
    return results[0] if results else None


def assemble_vllm_training_sequences(
    *,
    tokenizer: TokenDecoder,
    histories: Iterable[History],
    advantage: float,
    allow_training_without_logprobs: bool,
    trajectory: Trajectory,
) -> list[TokenizedResult]:
    """The sequences of each history in turn, as training builds them."""
    require_extra("local", "torch")
    from ...core.capture.samples import conversation_tokens
    from .packing import TokenSequence

    results: list[TokenizedResult] = []
    for h, history in enumerate(histories):
        for tokens, completion, logprobs, offsets in conversation_tokens(
            history.messages_and_choices,
            "trajectory",
            f"histories[{h}].messages_and_choices",
            allow_without_logprobs=allow_training_without_logprobs,
        ):
            sequence = TokenSequence(
                tokens=tuple(tokens),
                completion=tuple(completion),
                logprobs=tuple(logprobs),
                advantage=advantage,
                group_index=0,
                trajectory_index=0,
                choice_offsets=tuple(offsets),
            )
            results.append(_result(tokenizer, sequence, trajectory, 0))
    return results


def _result(
    tokenizer: TokenDecoder, sequence: TokenSequence, trajectory: Trajectory, prompt_id: int
) -> TokenizedResult:
    return TokenizedResult(
        advantage=sequence.advantage,
        chat="",
        token_ids=list(sequence.tokens),
        input_pos=list(range(len(sequence.tokens))),
        assistant_mask=[int(c) for c in sequence.completion],
        logprobs=list(sequence.logprobs),
        pixel_values=None,
        image_grid_thw=None,
        trajectory=trajectory,
        choice_offsets=list(sequence.choice_offsets),
        extra_logprobs={},
        _tokenizer=tokenizer,
        prompt_id=prompt_id,
    )


def _weigh(results: list[TokenizedResult], trajectories: list[int]) -> None:
    """Each trajectory's results weigh 1 / (its trained tokens), so trajectories count alike."""
    trained: dict[int, int] = {}
    for result, t in zip(results, trajectories, strict=True):
        trained[t] = trained.get(t, 0) + sum(result.assistant_mask)
    for result, t in zip(results, trajectories, strict=True):
        result.weight = 1 / (trained[t] + WEIGHT_EPSILON)


def _shared_prompt_length(results: list[TokenizedResult]) -> int:
    """Tokens every result opens with, stopping one short of the first trained token (whose
    logprob needs the token before it)."""
    shared = sum(1 for _ in takewhile(lambda ids: len(set(ids)) == 1,
                                      zip(*(r.token_ids for r in results))))  # fmt: skip
    first_trained = min(
        (next((i for i, m in enumerate(r.assistant_mask) if m), len(r.assistant_mask))
         for r in results),
        default=0,
    )  # fmt: skip
    return max(min(shared, first_trained) - 1, 0)
