"""Conversations -> token sequences with a target mask, for supervised fine-tuning.

It lives beside ChatTokenizer because the targets must be the very tokens the inference server
samples: the prompt of assistant message i is the template's rendering of messages[:i] with
the generation prompt, exactly as the server renders a chat request, and the target is what
the rendering of messages[:i+1] adds after it (the reply and the template's end-of-turn
tokens, so the model also learns where to stop). That works with any chat template, without
markers per model family.

A whole conversation is one sequence when every trained turn's rendering is a token prefix of
the full rendering (true of most templates); a template that rewrites earlier turns (one that
drops past reasoning, say) gets one sequence per trained turn instead, each with its own
prompt. A prompt that is not a token prefix of its own turn's rendering cannot be trained
faithfully and is an InvalidInputError naming the conversation.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ...core.conversations import AssistantTurns, Conversation
from ...core.errors import InvalidInputError
from ...core.sft import TrainSFTConfig
from .chat import ChatTokenizer


@attrs.frozen
class SFTSequence:
    """`tokens` and, per position, whether that token is a target (predicted from the one
    before it). Position 0 is never a target."""

    tokens: tuple[int, ...]
    targets: tuple[bool, ...]

    @property
    def num_targets(self) -> int:
        return sum(self.targets[1:])


@attrs.frozen
class TokenizedData:
    """The sequences of each conversation (None where it was dropped as too long)."""

    sequences: list[list[SFTSequence] | None]
    dropped: int


@attrs.frozen
class SFTBatch:
    """One gradient step's sequences and learning rate."""

    sequences: tuple[SFTSequence, ...]
    learning_rate: float

    @property
    def num_targets(self) -> int:
        return sum(s.num_targets for s in self.sequences)


@attrs.frozen
class SFTData:
    """An SFT call, tokenized and batched as its config plans it."""

    batches: list[SFTBatch]
    conversations: int
    dropped: int

    @property
    def num_targets(self) -> int:
        return sum(batch.num_targets for batch in self.batches)


def prepare(
    chat: ChatTokenizer,
    conversations: Sequence[Conversation],
    config: TrainSFTConfig,
    max_length: int,
) -> SFTData:
    """Tokenize the conversations and lay them out in the config's batches; a batch left
    without targets (all of its conversations dropped) is skipped, as ART skips it."""
    plan = config.plan(len(conversations))
    data = tokenize_conversations(chat, conversations, config.assistant_turns, max_length)
    batches = []
    for planned in plan:
        sequences = tuple(s for i in planned.items for s in (data.sequences[i] or ()))
        batch = SFTBatch(sequences, planned.learning_rate)
        if batch.num_targets:
            batches.append(batch)
    return SFTData(batches, len(conversations), data.dropped)


def tokenize_conversations(
    chat: ChatTokenizer,
    conversations: Sequence[Conversation],
    assistant_turns: AssistantTurns,
    max_length: int,
) -> TokenizedData:
    """Tokenize every conversation; one longer than `max_length` tokens is dropped and counted
    (ART's rule). Raises InvalidInputError when no conversation has a target left."""
    out: list[list[SFTSequence] | None] = []
    dropped = 0
    for index, conversation in enumerate(conversations):
        sequences = conversation_sequences(chat, conversation, assistant_turns, f"item {index}")
        if any(len(s.tokens) > max_length for s in sequences):
            out.append(None)
            dropped += 1
        else:
            out.append(sequences)
    if not any(s.num_targets for seqs in out if seqs for s in seqs):
        raise InvalidInputError(
            f"train_sft: no conversation has a token to train on ({dropped} of "
            f"{len(conversations)} are longer than the model's {max_length} tokens)"
        )
    return TokenizedData(out, dropped)


def conversation_sequences(
    chat: ChatTokenizer, conversation: Conversation, assistant_turns: AssistantTurns, where: str
) -> list[SFTSequence]:
    messages, tools = conversation.messages, conversation.tools
    spans: list[tuple[list[int], int, int]] = []  # (rendering through the turn, start, end)
    for turn in conversation.trained_turns(assistant_turns):
        prompt = chat.render(messages[:turn], tools, add_generation_prompt=True)
        through = chat.render(messages[: turn + 1], tools, add_generation_prompt=False)
        if through[: len(prompt)] != prompt or len(through) <= len(prompt):
            raise InvalidInputError(
                f"{where}: the chat template of {chat.source!r} does not render assistant "
                f"message {turn} as a continuation of its prompt, so its tokens cannot be "
                "told apart from the prompt's; fix the template or the message"
            )
        spans.append((through, len(prompt), len(through)))
    full = chat.render(messages, tools, add_generation_prompt=False)
    if all(full[: len(through)] == through for through, _, _ in spans):
        targets = [False] * len(full)
        for _, start, end in spans:
            targets[start:end] = [True] * (end - start)
        return [SFTSequence(tuple(full), tuple(targets))]
    return [
        SFTSequence(tuple(through), tuple([False] * start + [True] * (end - start)))
        for through, start, end in spans
    ]
