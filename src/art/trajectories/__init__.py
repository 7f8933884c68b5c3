"""ART's `art.trajectories`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.composition.capture import capture_calls as trajectory
    from arthex.composition.capture import current_trajectory as current_trajectory
    from arthex.composition.capture import no_capture as no_capture
    from arthex.core.exchanges import ChatCompletionsExchange as ChatCompletionsExchange
    from arthex.core.exchanges import SequenceHistory as History
    from arthex.core.exchanges import TrajectoryExchanges as TrajectoryExchanges
    from arthex.core.trajectories import CapturedException as PydanticException
    from arthex.core.trajectories import History as LegacyHistory
    from arthex.core.trajectories import MetadataValue as MetadataValue
    from arthex.core.trajectories import Trajectory as Trajectory
    from arthex.core.trajectories import TrajectoryGroup as TrajectoryGroup
    from arthex.core.trajectories import trajectory_group as trajectory_group
    from arthex.utils.art_trajectories import AnthropicMessagesHistory as AnthropicMessagesHistory
    from arthex.utils.art_trajectories import AnthropicMessageSource as AnthropicMessageSource
    from arthex.utils.art_trajectories import ChatCompletionsHistory as ChatCompletionsHistory
    from arthex.utils.art_trajectories import (
        ChatCompletionsMessageSource as ChatCompletionsMessageSource,
    )
    from arthex.utils.art_trajectories import ChatCompletionsRequest as ChatCompletionsRequest
    from arthex.utils.art_trajectories import CompactDumpable as CompactDumpable
    from arthex.utils.art_trajectories import CompactTrajectoryKind as CompactTrajectoryKind
    from arthex.utils.art_trajectories import CompactTrajectoryPayload as CompactTrajectoryPayload
    from arthex.utils.art_trajectories import CompletionsExchange as CompletionsExchange
    from arthex.utils.art_trajectories import CompletionsRequest as CompletionsRequest
    from arthex.utils.art_trajectories import CompletionsSource as CompletionsSource
    from arthex.utils.art_trajectories import CompletionsStringHistory as CompletionsStringHistory
    from arthex.utils.art_trajectories import (
        CompletionsStringSourceSpan as CompletionsStringSourceSpan,
    )
    from arthex.utils.art_trajectories import CompletionsTokenHistory as CompletionsTokenHistory
    from arthex.utils.art_trajectories import (
        CompletionsTokenSourceSpan as CompletionsTokenSourceSpan,
    )
    from arthex.utils.art_trajectories import MessagesExchange as MessagesExchange
    from arthex.utils.art_trajectories import MessagesRequest as MessagesRequest
    from arthex.utils.art_trajectories import ResponsesExchange as ResponsesExchange
    from arthex.utils.art_trajectories import ResponsesHistory as ResponsesHistory
    from arthex.utils.art_trajectories import ResponsesItemSource as ResponsesItemSource
    from arthex.utils.art_trajectories import ResponsesRequest as ResponsesRequest
    from arthex.utils.art_trajectories import TokenFlag as TokenFlag
    from arthex.utils.art_trajectories import Tokenizer as Tokenizer
    from arthex.utils.art_trajectories import TrajectoryHistory as TrajectoryHistory
    from arthex.utils.art_trajectories import get_messages as get_messages
    from arthex.utils.compact_trajectories import compact_dump as compact_dump
    from arthex.utils.compact_trajectories import compact_memory as compact_memory
    from arthex.utils.compact_trajectories import compact_validate as compact_validate
    from arthex.utils.compact_trajectories import compact_validate_json as compact_validate_json
    from arthex.utils.tensorized_trajectories import TensorizedHistory as TensorizedHistory
    from arthex.utils.tensorized_trajectories import (
        TensorizedMultiHistoryTrajectory as TensorizedMultiHistoryTrajectory,
    )
    from arthex.utils.tensorized_trajectories import TensorizedTopK as TensorizedTopK
    from arthex.utils.tensorized_trajectories import TensorizedTrajectory as TensorizedTrajectory
    from arthex.utils.tensorized_trajectories import (
        TensorizedTrajectoryGroup as TensorizedTrajectoryGroup,
    )
    from arthex.utils.tokenized_trajectories import TokenizedHistory as TokenizedHistory
    from arthex.utils.tokenized_trajectories import (
        TokenizedMultiHistoryTrajectory as TokenizedMultiHistoryTrajectory,
    )
    from arthex.utils.tokenized_trajectories import TokenizedTopK as TokenizedTopK
    from arthex.utils.tokenized_trajectories import TokenizedTrajectory as TokenizedTrajectory
    from arthex.utils.tokenized_trajectories import (
        TokenizedTrajectoryGroup as TokenizedTrajectoryGroup,
    )
    from arthex.utils.tokenized_trajectories import first_occurrence_masks as first_occurrence_masks
    from arthex.utils.trajectory_tokenizing import tensorize as tensorize
    from arthex.utils.trajectory_tokenizing import tokenize as tokenize

    __all__ = [
        "AnthropicMessageSource",
        "AnthropicMessagesHistory",
        "ChatCompletionsExchange",
        "ChatCompletionsHistory",
        "ChatCompletionsMessageSource",
        "ChatCompletionsRequest",
        "CompactDumpable",
        "CompactTrajectoryKind",
        "CompactTrajectoryPayload",
        "CompletionsExchange",
        "CompletionsRequest",
        "CompletionsSource",
        "CompletionsStringHistory",
        "CompletionsStringSourceSpan",
        "CompletionsTokenHistory",
        "CompletionsTokenSourceSpan",
        "History",
        "LegacyHistory",
        "MessagesExchange",
        "MessagesRequest",
        "MetadataValue",
        "PydanticException",
        "ResponsesExchange",
        "ResponsesHistory",
        "ResponsesItemSource",
        "ResponsesRequest",
        "TensorizedHistory",
        "TensorizedMultiHistoryTrajectory",
        "TensorizedTopK",
        "TensorizedTrajectory",
        "TensorizedTrajectoryGroup",
        "TokenFlag",
        "TokenizedHistory",
        "TokenizedMultiHistoryTrajectory",
        "TokenizedTopK",
        "TokenizedTrajectory",
        "TokenizedTrajectoryGroup",
        "Tokenizer",
        "Trajectory",
        "TrajectoryExchanges",
        "TrajectoryGroup",
        "TrajectoryHistory",
        "compact_dump",
        "compact_memory",
        "compact_validate",
        "compact_validate_json",
        "current_trajectory",
        "first_occurrence_masks",
        "get_messages",
        "no_capture",
        "tensorize",
        "tokenize",
        "trajectory",
        "trajectory_group",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
