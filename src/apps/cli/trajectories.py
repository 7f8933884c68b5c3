"""`arthex trajectories`: the groups of one split and step, the model's own turns marked.

The step is the history's step: the trajectories logged at step N were sampled from the
policy of checkpoint N (the one that training step N -> N+1 starts from).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ...adapters.layout import TRAJECTORIES, run_label
from ...core.chat_types import content_text
from .common import (
    BASE_PATH_OPT,
    MODEL_ARG,
    NAME_OPT,
    PROJECT_OPT,
    UsageError,
    abbreviate,
    console,
    fail,
    fmt,
    one_line_errors,
    resolve_model,
    view_hint,
)

if TYPE_CHECKING:
    from rich.console import Console

    from ...core.trajectories import Trajectory, TrajectoryGroup


def trajectories(
    model: str | None = MODEL_ARG,
    base_path: Path = BASE_PATH_OPT,
    project: str | None = PROJECT_OPT,
    name: str | None = NAME_OPT,
    split: str | None = typer.Option(
        None, metavar="SPLIT", help="The split to show. Default: train if logged, else the first."
    ),
    step: int | None = typer.Option(
        None, min=0, metavar="STEP", help="The history's step. Default: the split's latest."
    ),
    group: int | None = typer.Option(
        None, min=0, metavar="G", help="Show only this group (0-based)."
    ),
    max_chars: int = typer.Option(
        500, min=20, metavar="N", help="Cut each message after this many characters."
    ),
) -> None:
    """Print the trajectories of a split and step.

    Shows each group's rewards, each trajectory's messages and tool calls, and marks the
    model's own turns (its Choices, the tokens training uses) as trainable."""
    from ..loaders import list_parts

    with one_line_errors():
        path = resolve_model(model, base_path, project, name)
        parts = list_parts(path)
        splits = sorted({s for s, _, _, _ in parts})
        if not splits:
            raise UsageError(f"model {run_label(path)} has no trajectories ({path / TRAJECTORIES})")
        if split is None:
            split = "train" if "train" in splits else splits[0]
        if split not in splits:
            raise UsageError(
                f"no trajectories for split {split!r}; logged splits: {', '.join(splits)}"
            )
        steps = sorted({st for s, st, _, _ in parts if s == split})
        chosen_step = steps[-1] if step is None else step
        if chosen_step not in steps:
            raise UsageError(
                f"no {split!r} trajectories at step {chosen_step}; logged steps: "
                f"{abbreviate(steps)}"
            )
        from ...adapters.parquet.store import read_part

        loaded = [
            (part, read_part(file))
            for s, st, part, file in parts
            if s == split and st == chosen_step
        ]
    from rich.text import Text

    out = console()
    total = sum(len(groups) for _, groups in loaded)
    out.print(
        Text(f"{run_label(path)}  split={split}  step={chosen_step}  groups={total}", style="bold")
    )
    index = 0
    for part, groups in loaded:
        if len(loaded) > 1:
            out.print(Text(f"== part {part}", style="bold"))
        for grp in groups:
            if group is None or group == index:
                _print_group(out, index, grp, max_chars)
            index += 1
    if group is not None and group >= index:
        fail(f"there are {index} groups at {split} step {chosen_step}; --group {group} is not one")
    view_hint(path)


def _print_group(out: Console, index: int, group: TrajectoryGroup, max_chars: int) -> None:
    from rich.text import Text

    rewards = [t.reward for t in group.trajectories]
    noun = "trajectory" if len(rewards) == 1 else "trajectories"
    header = Text(f"-- group {index}: {len(rewards)} {noun}", style="bold cyan")
    if rewards:
        header.append(f", rewards {', '.join(f'{r:.3g}' for r in rewards)}")
    if group.exceptions:
        header.append(f", {len(group.exceptions)} failed", style="red")
    out.print(header)
    for key, value in {**group.metadata, **group.metrics}.items():
        out.print(Text(f"   {key} = {value}", style="dim"))
    for t, trajectory in enumerate(group.trajectories):
        _print_trajectory(out, t, trajectory, max_chars)
    for error in group.exceptions:
        out.print(Text(f"   x {error.type}: {_cut(error.message, max_chars)}", style="red"))


def _print_trajectory(out: Console, t: int, trajectory: Trajectory, max_chars: int) -> None:
    from rich.text import Text

    line = Text(f"  trajectory {t}  reward={trajectory.reward:.4g}", style="bold")
    if trajectory.metrics:
        line.append("  " + " ".join(f"{k}={fmt(v)}" for k, v in trajectory.metrics.items()))
    out.print(line)
    if trajectory.tools:
        names = [str((tool.get("function") or tool).get("name", "?")) for tool in trajectory.tools]
        out.print(Text(f"    tools: {', '.join(names)}", style="dim"))
    if trajectory.exchanges:
        _print_captured(out, trajectory, max_chars)
        return
    _print_messages(out, trajectory.messages_and_choices, max_chars, indent="    ")
    for h, extra in enumerate(trajectory.additional_histories):
        out.print(Text(f"    additional history {h}:", style="dim"))
        _print_messages(out, extra.messages_and_choices, max_chars, indent="      ")


def _print_captured(out: Console, trajectory: Trajectory, max_chars: int) -> None:
    """A captured trajectory: its recorded calls, as the conversations they form."""
    from rich.text import Text

    from ...core.capture.conversations import conversations

    calls = len(trajectory.exchanges)
    flag = ", incomplete" if trajectory.incomplete else ""
    out.print(Text(f"    captured: {calls} call{'' if calls == 1 else 's'}{flag}", style="dim"))
    for c, conversation in enumerate(conversations(trajectory)):
        if c:
            out.print(Text(f"    conversation {c}:", style="dim"))
        _print_messages(
            out,
            list(conversation.messages),
            max_chars,
            indent="    ",
            trainable=frozenset(conversation.trained_turns()),
        )


def _print_messages(
    out: Console,
    items: Sequence[Any],
    max_chars: int,
    *,
    indent: str,
    trainable: Collection[int] = (),
) -> None:
    """The messages, the model's own turns marked: Choices, and the plain messages whose
    indices are in `trainable` (a captured trajectory's replies)."""
    from openai.types.chat.chat_completion import Choice
    from rich.text import Text

    from ...core.chat_types import as_message

    for index, item in enumerate(items):
        if isinstance(item, Choice):
            _print_trainable(out, dict(as_message(item)), max_chars, indent)
            continue
        if index in trainable:
            _print_trainable(out, item, max_chars, indent)
            continue
        role = str(item.get("role", "?"))
        if item.get("tool_call_id"):
            role = f"{role}[{item['tool_call_id']}]"
        text = Text(f"{indent}{role}: ", style="blue" if role == "user" else "magenta")
        text.append(_cut(content_text(item.get("content"), " "), max_chars), style="default")
        out.print(text)
        for call in item.get("tool_calls") or []:
            function = call.get("function") or {}
            out.print(Text(f"{indent}  -> {function.get('name')}({function.get('arguments')})"))


def _print_trainable(out: Console, message: Mapping[str, Any], max_chars: int, indent: str) -> None:
    from rich.text import Text

    text = Text(indent)
    text.append("[trainable] ", style="bold green")
    text.append(f"{message.get('role', 'assistant')}: ", style="green")
    text.append(_cut(content_text(message.get("content"), " "), max_chars))
    out.print(text)
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            arguments = function.get("arguments")
            shown = arguments if isinstance(arguments, str) else json.dumps(arguments)
            out.print(
                Text(
                    f"{indent}  -> {function.get('name')}({_cut(shown, max_chars)})", style="green"
                )
            )


def _cut(text: str, limit: int) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."
