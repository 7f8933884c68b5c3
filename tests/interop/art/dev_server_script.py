"""ART's `art.dev` enums, Literal aliases and `get_openai_server_config` (ART's `art.dev`, or
arthex's under `arthex.art`: the first argument names the package), printed as JSON: each
enum's members and values, each alias's strings, and for each case read from stdin
(`[model_name, base_model, log_file, lora_path, config]`) the server config built, or
"ValueError" when it raised one.

Run by ART's interpreter for ART; the interop test runs arthex's cases in its own process.
"""

import importlib
import json
import sys
import typing

ENUMS = (
    "DebugOption",
    "FSDPOption",
    "HubStrategy",
    "IntervalStrategy",
    "OptimizerNames",
    "SaveStrategy",
    "SchedulerType",
)
ALIASES = ("RolloutWeightUpdateMode", "VllmRuntimeMode")


def built(dev, case):
    try:
        return dev.get_openai_server_config(*case)
    except ValueError:
        return "ValueError"


def run(lib, cases):
    dev = importlib.import_module(f"{lib}.dev")
    model = importlib.import_module(f"{lib}.dev.model")
    return {
        "enums": {
            name: [
                [member.name, member.value, isinstance(member, str)]
                for member in getattr(model, name)
            ]
            for name in ENUMS
        },
        "save_is_interval": model.SaveStrategy is model.IntervalStrategy,
        "aliases": {name: list(typing.get_args(getattr(model, name))) for name in ALIASES},
        "same_alias": dev.RolloutWeightUpdateMode == model.RolloutWeightUpdateMode,
        "weight_transfer": sorted(
            importlib.import_module(f"{lib}.dev.engine").WeightTransferConfig.__required_keys__
        ),
        "configs": [built(dev, case) for case in cases],
    }


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], json.load(sys.stdin))))
