"""ART's `tokenize_sft_batch` and `SFTBatch` (`art.preprocessing.tokenize`): one SFT batch's
trajectories as the tensors a fine-tuning step reads, from the same tokenizing code arthex's
`train_sft` uses (`inference.sft_tokens.conversation_sequences`: the prompt of each trained
assistant turn is the template's rendering with the generation prompt, and the target is what
the turn's rendering adds after it).

Where arthex differs (docs/migrating-from-art.md): `instruction_part` and `response_part` are
taken and unused (ART finds assistant turns by those markers; arthex's targets come from the
template's own renderings, so no marker per model family is needed, and a reply that contains
a marker's text is still trained whole); `chat_template_tool_schema_format` is taken and unused
(arthex passes tool specs as given); a template that rewrites earlier turns gives one tensor
set per trained turn, each with its own prompt (ART trains the full rendering once); a dropped
(too long) trajectory is counted and warned about with `warnings`, not printed.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Literal

import torch

from ...core.conversations import conversation_from
from ...core.errors import InvalidInputError
from ...core.trajectories import Trajectory
from ..inference.chat import ChatTokenizer
from ..inference.sft_tokens import conversation_sequences
from .tokenized import ChatTemplateToolSchemaFormat

__all__ = ["SFTBatch", "tokenize_sft_batch"]

IGNORE_INDEX = -100  # the label of a token that is not a target (PyTorch's cross-entropy skip)


@dataclass
class SFTBatch:
    """One batch for a fine-tuning step: per sequence, `input_ids`, `attention_mask` and
    `labels` ([1, length] int64; a label is the token where it is a target, else -100), the
    learning rate, and the counts."""

    trajectory_tensors: list[dict[str, torch.Tensor]]
    learning_rate: float
    num_trajectories: int
    num_tokens: int
    num_trainable_tokens: int
    num_dropped_trajectories: int = 0


def tokenize_sft_batch(
    trajectory_batch: list[Trajectory],
    learning_rate: float,
    tokenizer: Any,
    instruction_part: str,
    response_part: str,
    chat_template_kwargs: dict[str, Any] | None = None,
    chat_template_tool_schema_format: ChatTemplateToolSchemaFormat = "default",
    max_seq_length: int | None = None,
    assistant_turns: Literal["all", "last"] = "all",
) -> SFTBatch:
    """Tokenize one batch; a trajectory longer than `max_seq_length` tokens is dropped and
    counted. `tokenizer` is a Hugging Face tokenizer with a chat template."""
    del instruction_part, response_part, chat_template_tool_schema_format
    if chat_template_kwargs:
        raise InvalidInputError(
            "tokenize_sft_batch(chat_template_kwargs=...): arthex renders the template as its "
            "servers do, without extra arguments; leave it unset"
        )
    if max_seq_length is not None and max_seq_length < 1:
        raise InvalidInputError(f"max_seq_length must be positive, got {max_seq_length}")
    if assistant_turns not in ("all", "last"):
        raise InvalidInputError(f"assistant_turns must be 'all' or 'last', got {assistant_turns!r}")
    chat = ChatTokenizer(tokenizer, source=str(getattr(tokenizer, "name_or_path", "tokenizer")))
    tensors: list[dict[str, torch.Tensor]] = []
    kept = dropped = tokens = trainable = 0
    for index, trajectory in enumerate(trajectory_batch):
        where = f"trajectory_batch[{index}]"
        sequences = conversation_sequences(
            chat, conversation_from(trajectory, where), assistant_turns, where
        )
        if max_seq_length is not None and any(len(s.tokens) > max_seq_length for s in sequences):
            dropped += 1
            continue
        kept += 1
        for sequence in sequences:
            labels = [t if on else IGNORE_INDEX for t, on in zip(sequence.tokens, sequence.targets)]
            tensors.append(
                {
                    "input_ids": torch.tensor([sequence.tokens], dtype=torch.long),
                    "attention_mask": torch.ones((1, len(sequence.tokens)), dtype=torch.long),
                    "labels": torch.tensor([labels], dtype=torch.long),
                }
            )
            tokens += len(sequence.tokens)
            trainable += sum(sequence.targets)
    if dropped:
        warnings.warn(
            f"dropped {dropped}/{len(trajectory_batch)} SFT trajectories longer than "
            f"max_seq_length={max_seq_length}",
            stacklevel=2,
        )
    return SFTBatch(
        trajectory_tensors=tensors,
        learning_rate=learning_rate,
        num_trajectories=kept,
        num_tokens=tokens,
        num_trainable_tokens=trainable,
        num_dropped_trajectories=dropped,
    )
