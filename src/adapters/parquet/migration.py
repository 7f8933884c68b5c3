"""ART's trajectory files before parquet (`trajectories/{split}/{step:04d}.jsonl`, one group
per line; older still, YAML), with ART's names (`art.utils.trajectory_migration`): the groups
to and from those dicts, and each JSONL file rewritten as the parquet part beside it
(`0003.jsonl` -> `0003.parquet`, the store's own encoder, written atomically).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic
from openai.types.chat.chat_completion import Choice

from ...core.trajectories import History, Trajectory, TrajectoryGroup
from .decoding import _art_trajectory
from .single_file import write_groups_file

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

_LEADING = (
    "reward",
    "metrics",
    "metadata",
    "messages_and_choices",
    "tools",
    "additional_histories",
    "logs",
)


# -- groups as the JSONL dicts ------------------------------------------------------------------


def message_or_choice_to_dict(message_or_choice: Any) -> dict[str, Any]:
    """A Choice as the OpenAI SDK's `to_dict()`, a message as a plain dict (an iterator of
    content parts made a list)."""
    if isinstance(message_or_choice, Choice):
        return dict(message_or_choice.to_dict())
    item = dict(message_or_choice)
    if isinstance(item.get("content"), Iterator):
        item["content"] = list(item["content"])
    return item


def history_to_dict(history: History) -> dict[str, Any]:
    return {
        "messages_and_choices": [
            message_or_choice_to_dict(m) for m in history.messages_and_choices
        ],
        "tools": history.tools,
    }


def trajectory_to_dict(trajectory: Trajectory) -> dict[str, Any]:
    """The trajectory's conversation fields first, then the rest of its JSON dump."""
    histories = trajectory.additional_histories
    return {
        "reward": trajectory.reward,
        "metrics": trajectory.metrics,
        "metadata": trajectory.metadata,
        "messages_and_choices": [
            message_or_choice_to_dict(m) for m in trajectory.messages_and_choices
        ],
        "tools": trajectory.tools,
        "additional_histories": [history_to_dict(h) for h in histories] if histories else [],
        "logs": trajectory.logs,
        **trajectory.model_dump(mode="json", exclude=set(_LEADING), warnings="error"),
    }


def trajectory_group_to_dict(trajectory_group: TrajectoryGroup) -> dict[str, Any]:
    return {
        "trajectories": [trajectory_to_dict(t) for t in trajectory_group.trajectories],
        **trajectory_group.model_dump(mode="json", exclude={"trajectories"}, warnings="error"),
    }


def serialize_trajectory_groups(trajectory_groups: list[TrajectoryGroup]) -> str:
    """One JSON line per group."""
    return "\n".join(json.dumps(trajectory_group_to_dict(g)) for g in trajectory_groups)


def dict_to_message_or_choice(d: dict[str, Any]) -> Any:
    """A dict with a `message` that validates as a Choice is one; anything else a message."""
    if "message" in d:
        try:
            return Choice(**d)
        except pydantic.ValidationError:
            return d
    return d


def _conversation(d: Mapping[str, Any]) -> list[Any]:
    return [dict_to_message_or_choice(m) for m in d.get("messages_and_choices", [])]


def dict_to_history(d: dict[str, Any]) -> History:
    return History.model_validate({**d, "messages_and_choices": _conversation(d)})


def dict_to_trajectory(d: dict[str, Any]) -> Trajectory:
    histories = [dict_to_history(h) for h in d.get("additional_histories") or []]
    data = {**d, "messages_and_choices": _conversation(d), "additional_histories": histories}
    return Trajectory.model_validate(_art_trajectory(data))


def dict_to_trajectory_group(d: dict[str, Any]) -> TrajectoryGroup:
    return TrajectoryGroup.model_validate(
        {**d, "trajectories": [dict_to_trajectory(t) for t in d["trajectories"]]}
    )


def deserialize_trajectory_groups(serialized: str) -> list[TrajectoryGroup]:
    """The groups of a JSONL text, or of ART's older YAML one (PyYAML needed for that)."""
    try:
        loaded = [json.loads(line) for line in serialized.strip().split("\n") if line]
    except json.JSONDecodeError:
        try:
            import yaml
        except ImportError as error:
            raise ImportError(
                "reading ART's YAML trajectory files needs PyYAML: pip install pyyaml"
            ) from error
        loaded = yaml.safe_load(serialized)
    return [dict_to_trajectory_group(group) for group in loaded]


# -- migrating files -------------------------------------------------------------------------


@dataclass
class MigrationResult:
    """What a migration did: files rewritten and skipped, bytes before and after, errors."""

    files_migrated: int = 0
    files_skipped: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def compression_ratio(self) -> float:
        return self.bytes_before / self.bytes_after if self.bytes_after else 0.0

    @property
    def space_saved(self) -> int:
        return self.bytes_before - self.bytes_after

    def __add__(self, other: MigrationResult) -> MigrationResult:
        return MigrationResult(
            self.files_migrated + other.files_migrated,
            self.files_skipped + other.files_skipped,
            self.bytes_before + other.bytes_before,
            self.bytes_after + other.bytes_after,
            self.errors + other.errors,
        )


def migrate_jsonl_to_parquet(
    jsonl_path: Path | str, delete_original: bool = True, dry_run: bool = False
) -> MigrationResult:
    """Rewrite one JSONL file as the parquet file beside it (then delete it, by default). A
    file that cannot be read is an error in the result and leaves no parquet file; a dry run
    estimates the size at a 25th, as ART's does."""
    path = Path(jsonl_path)
    result = MigrationResult()
    if not path.exists():
        result.errors.append(f"File not found: {path}")
        return result
    if path.suffix != ".jsonl":
        result.files_skipped += 1
        return result
    result.bytes_before = path.stat().st_size
    if dry_run:
        result.files_migrated = 1
        result.bytes_after = result.bytes_before // 25
        return result
    target = path.with_suffix(".parquet")
    try:
        with open(path, encoding="utf-8") as file:
            groups = [dict_to_trajectory_group(json.loads(line)) for line in file if line.strip()]
        write_groups_file(target, groups)
    except Exception as error:  # one bad file is reported, and the others still migrate
        result.errors.append(f"Error migrating {path}: {error}")
        return result
    result.bytes_after = target.stat().st_size
    result.files_migrated = 1
    if delete_original:
        path.unlink()
    return result


def migrate_trajectories_dir(
    trajectories_dir: Path | str,
    delete_originals: bool = True,
    dry_run: bool = False,
    progress_callback: Callable[[str], None] | None = None,
) -> MigrationResult:
    """Every `.jsonl` file below the directory."""
    directory = Path(trajectories_dir)
    if not directory.exists():
        return MigrationResult(errors=[f"Directory not found: {directory}"])
    result = MigrationResult()
    for path in sorted(directory.rglob("*.jsonl")):
        if progress_callback is not None:
            progress_callback(str(path))
        result = result + migrate_jsonl_to_parquet(path, delete_originals, dry_run)
    return result


def migrate_model_dir(
    model_dir: Path | str,
    delete_originals: bool = True,
    dry_run: bool = False,
    progress_callback: Callable[[str], None] | None = None,
) -> MigrationResult:
    """The run's `trajectories/` (nothing to do without one)."""
    directory = Path(model_dir) / "trajectories"
    if not directory.exists():
        return MigrationResult()
    return migrate_trajectories_dir(directory, delete_originals, dry_run, progress_callback)


def migrate_all_models(
    art_path: Path | str,
    project_name: str,
    delete_originals: bool = True,
    dry_run: bool = False,
    progress_callback: Callable[[str], None] | None = None,
) -> MigrationResult:
    """Every run of `{art_path}/{project_name}/models/`."""
    models = Path(art_path) / project_name / "models"
    if not models.exists():
        return MigrationResult(errors=[f"Models directory not found: {models}"])
    result = MigrationResult()
    for model_dir in sorted(models.iterdir()):
        if model_dir.is_dir():
            if progress_callback is not None:
                progress_callback(f"Processing model: {model_dir.name}")
            result = result + migrate_model_dir(
                model_dir, delete_originals, dry_run, progress_callback
            )
    return result


def auto_migrate_on_register(model_dir: Path | str) -> MigrationResult:
    """Migrate a run's JSONL files in place, saying what was saved and warning of errors."""
    result = migrate_model_dir(model_dir)
    if result.files_migrated:
        print(
            f"Migrated {result.files_migrated} trajectory files to Parquet "
            f"(saved {result.space_saved / 1024 / 1024:.1f} MB)"
        )
    if result.errors:
        warnings.warn("\n".join(result.errors), RuntimeWarning, stacklevel=2)
    return result
