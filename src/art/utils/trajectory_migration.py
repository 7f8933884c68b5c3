"""ART's `art.utils.trajectory_migration`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.adapters.parquet.migration import MigrationResult as MigrationResult
    from arthex.adapters.parquet.migration import (
        auto_migrate_on_register as auto_migrate_on_register,
    )
    from arthex.adapters.parquet.migration import (
        deserialize_trajectory_groups as deserialize_trajectory_groups,
    )
    from arthex.adapters.parquet.migration import dict_to_history as dict_to_history
    from arthex.adapters.parquet.migration import (
        dict_to_message_or_choice as dict_to_message_or_choice,
    )
    from arthex.adapters.parquet.migration import dict_to_trajectory as dict_to_trajectory
    from arthex.adapters.parquet.migration import (
        dict_to_trajectory_group as dict_to_trajectory_group,
    )
    from arthex.adapters.parquet.migration import history_to_dict as history_to_dict
    from arthex.adapters.parquet.migration import (
        message_or_choice_to_dict as message_or_choice_to_dict,
    )
    from arthex.adapters.parquet.migration import migrate_all_models as migrate_all_models
    from arthex.adapters.parquet.migration import (
        migrate_jsonl_to_parquet as migrate_jsonl_to_parquet,
    )
    from arthex.adapters.parquet.migration import migrate_model_dir as migrate_model_dir
    from arthex.adapters.parquet.migration import (
        migrate_trajectories_dir as migrate_trajectories_dir,
    )
    from arthex.adapters.parquet.migration import (
        serialize_trajectory_groups as serialize_trajectory_groups,
    )
    from arthex.adapters.parquet.migration import (
        trajectory_group_to_dict as trajectory_group_to_dict,
    )
    from arthex.adapters.parquet.migration import trajectory_to_dict as trajectory_to_dict

    __all__ = [
        "MigrationResult",
        "auto_migrate_on_register",
        "deserialize_trajectory_groups",
        "dict_to_history",
        "dict_to_message_or_choice",
        "dict_to_trajectory",
        "dict_to_trajectory_group",
        "history_to_dict",
        "message_or_choice_to_dict",
        "migrate_all_models",
        "migrate_jsonl_to_parquet",
        "migrate_model_dir",
        "migrate_trajectories_dir",
        "serialize_trajectory_groups",
        "trajectory_group_to_dict",
        "trajectory_to_dict",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
