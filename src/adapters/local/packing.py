"""From trajectory groups to fixed-length training rows, using the sampler's own token ids.

Training never re-tokenizes: each Choice carries the prompt and completion token ids the
inference server returned (`prompt_token_ids`, `token_ids` in `choice.model_extra`), so the
tokens trained are exactly the tokens sampled, and their logprobs line up one to one. A
captured trajectory's recorded calls become sequences the same way (`core.capture.samples`).

Layout: ONE sequence per row, right-padded. Several sequences per row would need
block-diagonal attention (position resets plus a segment-aware mask) to stay correct, which
plain Hugging Face attention does not offer for every model; one per row is always correct,
and rows are sized to the longest sequence rounded up to 128 tokens, so little is wasted on
short rollouts. `segment_ids` is 0 on a row's real tokens and -1 on padding, which is also the
attention mask.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import attrs
import torch

from ...core.advantages import group_advantages
from ...core.capture.samples import conversation_tokens, token_samples
from ...core.config import TrainConfig
from ...core.errors import InvalidInputError
from ...core.metrics import ZERO_VARIANCE_TOLERANCE
from ...core.trajectories import MessageOrChoice, Trajectory, TrajectoryGroup

ROW_MULTIPLE = 128


@attrs.frozen
class TokenSequence:
    """One conversation's tokens; `completion[i]` marks a sampled (trained) token and
    `logprobs[i]` is its sampling logprob (NaN on prompt tokens and where unknown).
    `choice_offsets` are where each Choice's sampled tokens begin (for recorded calls, where
    each run of sampled tokens begins: calls merged with nothing between them count once)."""

    tokens: tuple[int, ...]
    completion: tuple[bool, ...]
    logprobs: tuple[float, ...]
    advantage: float
    group_index: int
    trajectory_index: int
    choice_offsets: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def num_completion_tokens(self) -> int:
        return sum(self.completion)


@attrs.frozen
class PackedBatch:
    """Tensors of shape [rows, seq_len] plus the counts the metrics report.

    `mask[r, t]` is True when token t is a completion token. `old_logprobs` is NaN where the
    sampling logprob is unknown (ratio 1). `advantages` and `weights` are 0 outside the mask;
    weights give each trajectory the same total weight (a per-trajectory token mean) and are
    rescaled to mean 1 over the batch's completion tokens.
    """

    tokens: torch.Tensor
    mask: torch.Tensor
    old_logprobs: torch.Tensor
    advantages: torch.Tensor
    weights: torch.Tensor
    position_ids: torch.Tensor
    segment_ids: torch.Tensor
    num_groups: int
    num_groups_trainable: int
    num_trajectories_trainable: int
    num_dropped_too_long: int

    @property
    def num_rows(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def seq_len(self) -> int:
        return int(self.tokens.shape[1]) if self.tokens.ndim == 2 else 0

    @property
    def num_trainable_tokens(self) -> int:
        """Completion tokens the loss can see: position 0 predicts nothing, so it never counts."""
        if self.num_rows == 0:
            return 0
        return int(self.mask[:, 1:].sum().item())

    def to(self, device: torch.device) -> PackedBatch:
        if self.tokens.device == device:
            return self
        return attrs.evolve(
            self,
            tokens=self.tokens.to(device),
            mask=self.mask.to(device),
            old_logprobs=self.old_logprobs.to(device),
            advantages=self.advantages.to(device),
            weights=self.weights.to(device),
            position_ids=self.position_ids.to(device),
            segment_ids=self.segment_ids.to(device),
        )

    def rows(self, index: torch.Tensor | slice | list[int]) -> PackedBatch:
        """The same batch restricted to some rows (micro-batches and optimizer steps)."""
        return attrs.evolve(
            self,
            tokens=self.tokens[index],
            mask=self.mask[index],
            old_logprobs=self.old_logprobs[index],
            advantages=self.advantages[index],
            weights=self.weights[index],
            position_ids=self.position_ids[index],
            segment_ids=self.segment_ids[index],
        )


def build_sequences(
    groups: Sequence[TrajectoryGroup], config: TrainConfig, *, keep_zero_advantage: bool = False
) -> tuple[list[TokenSequence], int]:
    """Sequences of every trajectory with a non-zero advantage (of every trajectory with
    `keep_zero_advantage`), and the number of groups whose rewards differ. Every Choice of
    every trajectory is checked, trainable or not, so bad input fails the same way whatever
    the rewards are."""
    sequences: list[TokenSequence] = []
    trainable_groups = 0
    for g, group in enumerate(groups):
        rewards = [t.reward for t in group.trajectories]
        if len(rewards) >= 2 and any(
            abs(r - rewards[0]) > ZERO_VARIANCE_TOLERANCE for r in rewards
        ):
            trainable_groups += 1
        advantages = group_advantages(rewards, scale=config.scale_rewards)
        for t, (trajectory, advantage) in enumerate(zip(group.trajectories, advantages)):
            found = _trajectory_sequences(trajectory, g, t, advantage, config)
            if advantage != 0.0 or keep_zero_advantage:
                sequences.extend(found)
    return sequences, trainable_groups


def pack(
    groups: Sequence[TrajectoryGroup],
    config: TrainConfig,
    *,
    max_length: int,
    pad_token_id: int,
    shuffle_seed: int | None = None,
) -> PackedBatch:
    """Build and pack the batch. Rows are `config.packed_sequence_length` long, or the
    smallest multiple of 128 that holds the longest sequence, capped at `max_length` (the
    model's context). Longer sequences are dropped and counted, never silently."""
    if config.packed_sequence_length is not None and config.packed_sequence_length > max_length:
        raise InvalidInputError(
            f"TrainConfig.packed_sequence_length={config.packed_sequence_length} is longer than "
            f"the model's context of {max_length} tokens; use at most {max_length}"
        )
    sequences, trainable_groups = build_sequences(groups, config)
    sequences = [s for s in sequences if s.num_completion_tokens > 0]
    cap = config.packed_sequence_length or max_length
    kept = [s for s in sequences if len(s) <= cap]
    dropped = len(sequences) - len(kept)
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(kept)
    if config.packed_sequence_length is not None:
        seq_len = config.packed_sequence_length
    else:
        longest = max((len(s) for s in kept), default=0)
        seq_len = min(max_length, math.ceil(longest / ROW_MULTIPLE) * ROW_MULTIPLE)
    return _tensors(
        kept,
        seq_len=seq_len,
        pad_token_id=pad_token_id,
        num_groups=len(groups),
        num_groups_trainable=trainable_groups,
        num_dropped_too_long=dropped,
    )


def _tensors(
    sequences: list[TokenSequence],
    *,
    seq_len: int,
    pad_token_id: int,
    num_groups: int,
    num_groups_trainable: int,
    num_dropped_too_long: int,
) -> PackedBatch:
    rows = len(sequences)
    per_trajectory: dict[tuple[int, int], int] = {}
    for s in sequences:
        key = (s.group_index, s.trajectory_index)
        per_trajectory[key] = per_trajectory.get(key, 0) + s.num_completion_tokens
    total_tokens = sum(per_trajectory.values())
    # Each trajectory gets total weight total_tokens / n_trajectories, spread evenly over its
    # completion tokens: mean 1 per token over the batch, equal say per trajectory.
    row_weights = [
        total_tokens / (len(per_trajectory) * per_trajectory[(s.group_index, s.trajectory_index)])
        for s in sequences
    ]
    # Every row's values at once: a boolean index fills the real (left) part of each row in
    # row-major order, which is the order of the concatenated sequences.
    lengths = torch.tensor([len(s) for s in sequences], dtype=torch.int64)
    real = torch.arange(seq_len).unsqueeze(0) < lengths.unsqueeze(1)
    tokens = torch.full((rows, seq_len), pad_token_id, dtype=torch.int64)
    tokens[real] = torch.tensor([t for s in sequences for t in s.tokens], dtype=torch.int64)
    mask = torch.zeros((rows, seq_len), dtype=torch.bool)
    mask[real] = torch.tensor([c for s in sequences for c in s.completion], dtype=torch.bool)
    old = torch.full((rows, seq_len), math.nan, dtype=torch.float32)
    old[real] = torch.tensor([x for s in sequences for x in s.logprobs], dtype=torch.float32)
    per_row = torch.tensor([s.advantage for s in sequences], dtype=torch.float32).unsqueeze(1)
    advantages = torch.where(mask, per_row, 0.0)
    per_row = torch.tensor(row_weights, dtype=torch.float32).unsqueeze(1)
    weights = torch.where(mask, per_row, 0.0)
    position_ids = torch.arange(seq_len, dtype=torch.int64).repeat(rows, 1)
    segment_ids = torch.where(real, 0, -1).to(torch.int64)
    return PackedBatch(
        tokens=tokens,
        mask=mask,
        old_logprobs=old,
        advantages=advantages,
        weights=weights,
        position_ids=position_ids,
        segment_ids=segment_ids,
        num_groups=num_groups,
        num_groups_trainable=num_groups_trainable,
        num_trajectories_trainable=len(per_trajectory),
        num_dropped_too_long=num_dropped_too_long,
    )


def _trajectory_sequences(
    trajectory: Trajectory, g: int, t: int, advantage: float, config: TrainConfig
) -> list[TokenSequence]:
    if trajectory.exchanges:  # captured: the recorded calls, merged where prompts extend
        return [
            TokenSequence(
                tokens=sample.tokens,
                completion=sample.trained,
                logprobs=sample.logprobs,
                advantage=advantage,
                group_index=g,
                trajectory_index=t,
                choice_offsets=_run_starts(sample.trained),
            )
            for sample in token_samples(
                trajectory,
                f"group {g}, trajectory {t}",
                allow_without_logprobs=config.allow_training_without_logprobs,
            )
        ]
    conversations: list[tuple[str, Sequence[MessageOrChoice]]] = [
        ("messages_and_choices", trajectory.messages_and_choices)
    ]
    conversations += [
        (f"additional_histories[{h}].messages_and_choices", history.messages_and_choices)
        for h, history in enumerate(trajectory.additional_histories)
    ]
    return [
        TokenSequence(
            tokens=tuple(tokens),
            completion=tuple(completion),
            logprobs=tuple(logprobs),
            advantage=advantage,
            group_index=g,
            trajectory_index=t,
            choice_offsets=tuple(offsets),
        )
        for field, items in conversations
        for tokens, completion, logprobs, offsets in conversation_tokens(
            items,
            f"group {g}, trajectory {t}",
            field,
            allow_without_logprobs=config.allow_training_without_logprobs,
        )
    ]


def _run_starts(trained: Sequence[bool]) -> tuple[int, ...]:
    return tuple(i for i, on in enumerate(trained) if on and (i == 0 or not trained[i - 1]))
