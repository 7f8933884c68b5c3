"""ART's `art.utils.output_dirs`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.utils.output_dirs import get_default_art_path as get_default_art_path
    from arthex.utils.output_dirs import get_model_dir as get_model_dir
    from arthex.utils.output_dirs import get_models_dir as get_models_dir
    from arthex.utils.output_dirs import (
        get_output_dir_from_model_properties as get_output_dir_from_model_properties,
    )
    from arthex.utils.output_dirs import get_step_checkpoint_dir as get_step_checkpoint_dir
    from arthex.utils.output_dirs import get_trajectories_dir as get_trajectories_dir
    from arthex.utils.output_dirs import get_trajectories_split_dir as get_trajectories_split_dir

    __all__ = [
        "get_default_art_path",
        "get_model_dir",
        "get_models_dir",
        "get_output_dir_from_model_properties",
        "get_step_checkpoint_dir",
        "get_trajectories_dir",
        "get_trajectories_split_dir",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
