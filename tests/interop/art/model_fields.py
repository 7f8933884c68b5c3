"""Print, as JSON, the public fields of ART's data-model classes and one group as ART dumps it.

Run by ART's own interpreter. `fields` maps each class to its public pydantic fields (name ->
default as JSON, or null when it has a factory or is required); `group` is a TrajectoryGroup
that sets every field of Trajectory and TrajectoryGroup, dumped with `model_dump(mode="json")`
(what ART's ServerlessBackend sends), so arthex can be checked to read it with ART's meaning.
"""

import importlib.metadata
import json

from openai.types.chat.chat_completion import Choice

import art
from art.trajectories import (
    History,
    LegacyHistory,
    PydanticException,
    Trajectory,
    TrajectoryGroup,
)

CLASSES = {
    "Trajectory": Trajectory,
    "TrajectoryGroup": TrajectoryGroup,
    "LegacyHistory": LegacyHistory,
    "History": History,
    "TrainConfig": art.TrainConfig,
    "TrainSFTConfig": art.TrainSFTConfig,
}


def default(field):
    if field.default_factory is not None or field.is_required():
        return None
    try:
        json.dumps(field.default)
    except TypeError:
        return None
    return field.default


def example_group():
    choice = Choice.model_validate(
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": "4"},
            "logprobs": {"content": [{"token": "4", "logprob": -0.25, "bytes": [52],
                                      "top_logprobs": []}]},
        }
    )  # fmt: skip
    trajectory = Trajectory(
        messages_and_choices=[{"role": "user", "content": "2+2?"}, choice],
        tools=[{"type": "function", "function": {"name": "add", "parameters": {}}}],
        additional_histories=[
            LegacyHistory(messages_and_choices=[{"role": "user", "content": "aside"}])
        ],
        reward=1.0,
        initial_policy_version=3,
        final_policy_version=4,
        metrics={"correct": True, "tokens": 7},
        metadata={"scenario": "sum"},
        logs=["ok"],
    )
    error = PydanticException(type="ValueError", message="bad", traceback="tb")
    group = TrajectoryGroup(
        trajectories=[trajectory],
        exceptions=[error],
        metadata={"batch": 1},
        metrics={"pass": 0.5},
        logs=["group"],
    )
    return group.model_dump(mode="json")


fields = {
    name: {
        key: default(field) for key, field in cls.model_fields.items() if not key.startswith("_")
    }
    for name, cls in CLASSES.items()
}
print(
    json.dumps(
        {"version": importlib.metadata.version("openpipe-art"), "fields": fields,
         "group": example_group()},
        indent=1, sort_keys=True,
    )
)  # fmt: skip
