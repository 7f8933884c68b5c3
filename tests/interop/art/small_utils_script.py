"""Run ART's small utilities (ART's, or arthex's under `arthex.art`: the first argument names
the package) on the cases read as JSON from stdin, and print what each gave, as JSON:
`format_message` on messages, `rewards_have_zero_variance` on reward lists, the path helpers
of `utils.output_dirs` on (project, name, art_path, step, split), and `get_step_from_dir` on
run folders that exist.

Run by ART's interpreter for ART; the interop test runs arthex's cases in its own process.
"""

import importlib
import json
import sys


def run(lib, cases):
    formatting = importlib.import_module(f"{lib}.utils.format_message")
    grpo = importlib.import_module(f"{lib}.utils.grpo")
    dirs = importlib.import_module(f"{lib}.utils.output_dirs")
    steps = sys.modules.get(f"{lib}.utils.get_model_step") or importlib.import_module(
        f"{lib}.utils.get_model_step"
    )
    out = {
        "format": [formatting.format_message(message) for message in cases["messages"]],
        "zero": [grpo.rewards_have_zero_variance(rewards) for rewards in cases["rewards"]],
        "paths": [],
        "steps": [steps.get_step_from_dir(folder) for folder in cases["run_folders"]],
    }
    for project, name, art_path, step, split in cases["paths"]:
        run_dir = dirs.get_output_dir_from_model_properties(project, name, art_path)
        out["paths"].append(
            [
                run_dir,
                dirs.get_models_dir(project, art_path),
                dirs.get_step_checkpoint_dir(run_dir, step),
                dirs.get_trajectories_dir(run_dir),
                dirs.get_trajectories_split_dir(run_dir, split),
            ]
        )
    return out


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], json.load(sys.stdin))))
