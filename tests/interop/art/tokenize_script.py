"""Runs ART 0.5.23's `art.preprocessing.tokenize` on groups written by the interop test
(`python tokenize_script.py TASK OUT`) and writes what each call gave, as JSON, to OUT.

TASK holds the groups (as `model_dump(mode="json")` writes them), the tokenizer's
tokenizer.json, and the option sets to call `tokenize_trajectory_groups` with. ART's module
imports torch and transformers at its top but, on sampled Choices, uses neither (it reads the
token ids the server put on each Choice); the test puts stand-ins for the two imports on
PYTHONPATH, which carry the imported names and nothing else, so any real use fails here.
The tokenizer only decodes ids (`TokenizedResult.tokens`): the tokenizers library's own
decoder of the same tokenizer.json does that.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from openai.types.chat.chat_completion import Choice
from tokenizers import Tokenizer

from art.preprocessing.tokenize import tokenize_trajectory, tokenize_trajectory_groups
from art.trajectories import LegacyHistory, TrajectoryGroup


class Decoder:
    def __init__(self, path: str) -> None:
        self.tokenizer = Tokenizer.from_file(path)

    def decode(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id], skip_special_tokens=False)


def plain(values: list[float]) -> list[float | None]:
    return [None if math.isnan(v) else v for v in values]


def result(r: Any) -> dict[str, Any]:
    return {
        "trajectory": r.trajectory.metadata["id"],
        "advantage": r.advantage,
        "chat": r.chat,
        "token_ids": r.token_ids,
        "input_pos": r.input_pos,
        "assistant_mask": r.assistant_mask,
        "logprobs": plain(r.logprobs),
        "choice_offsets": r.choice_offsets,
        "extra_logprobs": r.extra_logprobs,
        "weight": r.weight,
        "prompt_id": r.prompt_id,
        "prompt_length": r.prompt_length,
        "tokens": r.tokens,
        "without_prompt": r.without_prompt().token_ids,
        "pixel_values": r.pixel_values,
    }


def with_choices(items: list[Any]) -> list[Any]:
    """ART validates a dumped Choice as a message dict; its own readers rebuild the Choice."""
    return [Choice.model_validate(item) if "finish_reason" in item else item for item in items]


def read_group(dumped: dict[str, Any]) -> TrajectoryGroup:
    for trajectory in dumped["trajectories"]:
        trajectory["messages_and_choices"] = with_choices(trajectory["messages_and_choices"])
        for history in trajectory["additional_histories"]:
            history["messages_and_choices"] = with_choices(history["messages_and_choices"])
    return TrajectoryGroup.model_validate(dumped)


def main() -> None:
    task = json.loads(Path(sys.argv[1]).read_text())
    groups = [read_group(group) for group in task["groups"]]
    decoder = Decoder(task["tokenizer"])
    out: dict[str, Any] = {"groups": [], "single": []}
    for options in task["options"]:
        out["groups"].append(
            [result(r) for r in tokenize_trajectory_groups(decoder, groups, **options)]
        )
    for group in groups:
        for trajectory in group.trajectories:
            history = LegacyHistory(
                messages_and_choices=trajectory.messages_and_choices, tools=trajectory.tools
            )
            try:
                one = tokenize_trajectory(decoder, None, history, 0.5, False, trajectory)
            except RuntimeError:
                out["single"].append("several sequences")
                continue
            out["single"].append(None if one is None else result(one))
    Path(sys.argv[2]).write_text(json.dumps(out))


main()
