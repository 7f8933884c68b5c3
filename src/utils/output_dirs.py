"""Where a run's folders are, as ART's `art.utils.output_dirs` and `art.utils.get_model_step`
name them, spelled by arthex's one layout (`adapters/layout.py`):
`{art_path}/{project}/models/{run_name}/checkpoints/{step:04d}` and `.../trajectories/{split}`.

Two differences from ART, both deliberate: without `art_path` a model's folder is under the
model's own `base_path` (where arthex writes its run), not under a `.art` found from where ART
is installed; and every name that becomes a path segment (project, run name, split) is
checked first, so `get_trajectories_split_dir(dir, "../x")` is refused, not joined."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..adapters.layout import CHECKPOINTS, MODELS, TRAJECTORIES, RunLayout, step_name
from ..adapters.local.checkpoints import latest_step
from ..core.identity import RunRef, validate_name

if TYPE_CHECKING:
    from ..core.model import Model

__all__ = [
    "DEFAULT_ART_PATH",
    "get_default_art_path",
    "get_model_dir",
    "get_model_step",
    "get_models_dir",
    "get_output_dir_from_model_properties",
    "get_step_checkpoint_dir",
    "get_step_from_dir",
    "get_trajectories_dir",
    "get_trajectories_split_dir",
]

DEFAULT_ART_PATH = ".art"  # a Model's default base_path


def get_default_art_path() -> str:
    """`.art`, the folder (relative to the working directory) where models keep their runs
    unless given another `base_path`."""
    return DEFAULT_ART_PATH


def get_models_dir(project_name: str, art_path: str | None = None) -> str:
    """`{art_path}/{project}/models`: every run of `project_name`."""
    base = DEFAULT_ART_PATH if art_path is None else art_path
    return f"{base.rstrip('/')}/{validate_name(project_name, 'project')}/{MODELS}"


def get_output_dir_from_model_properties(
    project: str, name: str, art_path: str | None = None
) -> str:
    """`{art_path}/{project}/models/{name}`: the folder of the run `project/name`."""
    base = DEFAULT_ART_PATH if art_path is None else art_path
    return RunLayout.of(base, RunRef(project=project, name=name)).uri


def get_model_dir(model: Model, art_path: str | None = None) -> str:
    """The folder of `model`'s run: under `art_path`, or the model's own `base_path`."""
    base = model.base_path if art_path is None else art_path
    return RunLayout.of(base, model.run).uri


def get_step_checkpoint_dir(model_output_dir: str, step: int) -> str:
    """`{run folder}/checkpoints/{step:04d}`."""
    return f"{model_output_dir}/{CHECKPOINTS}/{step_name(step)}"


def get_trajectories_dir(model_output_dir: str) -> str:
    return f"{model_output_dir}/{TRAJECTORIES}"


def get_trajectories_split_dir(model_output_dir: str, split: str) -> str:
    return f"{model_output_dir}/{TRAJECTORIES}/{validate_name(split, 'split')}"


def get_step_from_dir(output_dir: str) -> int:
    """The newest step with a whole checkpoint in the run folder `output_dir`, 0 when it has
    none (or does not exist). It only looks: ART's version also creates the folder."""
    return latest_step(Path(output_dir)) or 0


def get_model_step(model: Model, art_path: str | None = None) -> int:
    """`get_step_from_dir` of `model`'s run folder."""
    return get_step_from_dir(get_model_dir(model, art_path))
