"""ART's pre-parquet trajectory files (`art.utils.trajectory_migration`): groups to the JSONL
dicts and back, and a run's JSONL files rewritten as the store's parquet parts. ART's own code
reads and migrates the same files in tests/interop/test_art_frontend.py."""

from __future__ import annotations

import json
from pathlib import Path

from arthex.adapters.parquet.store import read_part
from arthex.art.utils.trajectory_migration import (
    deserialize_trajectory_groups,
    migrate_all_models,
    migrate_jsonl_to_parquet,
    serialize_trajectory_groups,
)
from arthex.testing.builders import rich_groups


def test_groups_survive_the_jsonl_dicts() -> None:
    groups = rich_groups()
    text = serialize_trajectory_groups(groups)
    assert len(text.splitlines()) == len(groups)
    back = deserialize_trajectory_groups(text)
    assert [g.model_dump(mode="json") for g in back] == [g.model_dump(mode="json") for g in groups]


def test_art_yaml_files_are_read_too() -> None:
    text = (
        "- trajectories:\n  - reward: 0.5\n    messages_and_choices:\n"
        "    - role: user\n      content: hi\n"
    )
    [group] = deserialize_trajectory_groups(text)
    assert group.trajectories[0].reward == 0.5
    assert group.trajectories[0].messages_and_choices == [{"role": "user", "content": "hi"}]


def test_a_runs_jsonl_files_become_its_parquet_parts(tmp_path: Path) -> None:
    split = tmp_path / "proj" / "models" / "run" / "trajectories" / "val"
    split.mkdir(parents=True)
    groups = rich_groups()
    (split / "0003.jsonl").write_text(serialize_trajectory_groups(groups))
    (split / "0004.jsonl").write_text('{"trajectories": [{"reward": "high"}]}\n')
    dry = migrate_jsonl_to_parquet(split / "0003.jsonl", dry_run=True)
    assert (dry.files_migrated, dry.bytes_after) == (1, dry.bytes_before // 25)
    result = migrate_all_models(tmp_path, "proj")
    assert (result.files_migrated, len(result.errors)) == (1, 1)
    assert "0004.jsonl" in result.errors[0]
    assert sorted(p.name for p in split.iterdir()) == ["0003.parquet", "0004.jsonl"]
    assert read_part(split / "0003.parquet") == groups  # the store reads it as its own part
    assert result.bytes_after == (split / "0003.parquet").stat().st_size
    assert json.loads(json.dumps(result.errors))  # plain strings, one per failed file
