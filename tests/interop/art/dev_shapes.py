"""Print, as JSON, the keys of ART's settings TypedDicts in `art.dev` (each with the keys it
requires), read from the classes' own `__annotations__` and `__required_keys__`.

Run by ART's own interpreter; tests/unit/data/art_0_5_23_dev_shapes.json is its output.
"""

import importlib.metadata
import json

import art.dev

NAMES = (
    "BackendModelConfig",
    "EngineArgs",
    "InitArgs",
    "InternalModelConfig",
    "LoRAConfig",
    "OpenAIServerConfig",
    "ServerArgs",
    "TinkerArgs",
    "TinkerNativeArgs",
    "TinkerTrainingClientArgs",
    "TrainConfig",
    "TrainSFTConfig",
    "TrainerArgs",
    "VllmRuntimeArgs",
)


def keys(cls: type) -> dict[str, list[str]]:
    every: set[str] = set()
    for klass in reversed(cls.__mro__):  # a subclass's annotations omit its bases'
        every |= set(getattr(klass, "__annotations__", {}))
    return {"keys": sorted(every), "required": sorted(cls.__required_keys__)}


print(
    json.dumps(
        {
            "version": importlib.metadata.version("openpipe-art"),
            "shapes": {name: keys(getattr(art.dev, name)) for name in NAMES},
        },
        indent=1,
        sort_keys=True,
    )
)
