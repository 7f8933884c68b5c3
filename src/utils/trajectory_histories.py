"""ART's `trajectory.histories()` and `trajectory.history()`: the histories of whichever API a
trajectory's selected calls used, as ART 0.5.23 picks them. A trajectory without recorded calls
gives its conversations as they are (arthex's `History`, ART's `LegacyHistory`); calls of two
APIs at once are refused (ask per API); legacy Completions calls give token histories where
every choice has exact ids, else text histories.

The Responses API's histories are not derived by arthex: a trajectory whose selected calls use
it is refused, saying so.
"""

from __future__ import annotations

import copy

from ..core.errors import UnsupportedCapability
from ..core.trajectories import History, Trajectory
from .anthropic_histories import anthropic_messages_histories
from .art_histories import chat_completions_histories
from .art_trajectories import (
    CompletionsExchange,
    MessagesExchange,
    ResponsesExchange,
    TrajectoryHistory,
)
from .completions_histories import completions_string_histories, completions_token_histories
from .history_branches import matches


def trajectory_histories(
    trajectory: Trajectory,
    *,
    model: str | None = None,
    reconcile_text_equivalent_tokenizations: bool = False,
) -> list[TrajectoryHistory]:
    """Every history of the API the selected calls used (`model` selects as for the chat
    histories)."""
    if not trajectory.exchanges:
        return [
            History(
                messages_and_choices=copy.deepcopy(trajectory.messages_and_choices),
                tools=copy.deepcopy(trajectory.tools),
            ),
            *copy.deepcopy(trajectory.additional_histories),
        ]
    exchanges = trajectory.exchanges
    completions = [CompletionsExchange.model_validate(r) for r in exchanges.completions]
    messages = [MessagesExchange.model_validate(r) for r in exchanges.messages]
    responses = [ResponsesExchange.model_validate(r) for r in exchanges.responses]
    served: list[str | None] = [e.model for e in exchanges.chat_completions]
    served += [e.model for e in (*completions, *messages, *responses)]
    exact = model is not None and model in served

    def selected(names: list[str | None]) -> bool:
        return any(
            model is None or (name == model if exact else matches(name, model)) for name in names
        )

    reconcile = reconcile_text_equivalent_tokenizations
    found: list[TrajectoryHistory] = []
    if selected([e.model for e in exchanges.chat_completions]):
        found += chat_completions_histories(
            trajectory, model=model, reconcile_text_equivalent_tokenizations=reconcile
        )
    if selected([e.model for e in completions]):
        try:
            found += completions_token_histories(trajectory, model=model)
        except ValueError as error:
            if "requires exact token IDs" not in str(error) and "echoed" not in str(error):
                raise
            found += completions_string_histories(
                trajectory, model=model, reconcile_text_equivalent_tokenizations=reconcile
            )
    if selected([e.model for e in responses]):
        raise UnsupportedCapability(
            "Responses histories",
            "arthex",
            "validate each record with arthex.utils.art_trajectories.ResponsesExchange",
        )
    if selected([e.model for e in messages]):
        found += anthropic_messages_histories(
            trajectory, model=model, reconcile_text_equivalent_tokenizations=reconcile
        )
    if not found:
        suffix = f" for model {model!r}" if model is not None else ""
        raise ValueError(f"Trajectory contains no exchanges{suffix}")
    if len({type(history) for history in found}) != 1:
        raise ValueError(
            "Trajectory resolves to multiple protocol histories; use a protocol-specific method"
        )
    return found


def trajectory_history(
    trajectory: Trajectory,
    *,
    model: str | None = None,
    reconcile_text_equivalent_tokenizations: bool = False,
) -> TrajectoryHistory:
    """The trajectory's one history."""
    histories = trajectory_histories(
        trajectory,
        model=model,
        reconcile_text_equivalent_tokenizations=reconcile_text_equivalent_tokenizations,
    )
    models = {h.model for h in histories if not isinstance(h, History)}
    if model is None and len(models) > 1:
        raise ValueError("Trajectory history requires exactly one model; pass model= to select one")
    if len(histories) != 1:
        raise ValueError(f"Trajectory history requires exactly one history; found {len(histories)}")
    return histories[0]
