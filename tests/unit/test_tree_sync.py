"""The folder sync under `art.utils.s3` (`adapters/tree_sync.py`) between two local folders:
`aws s3 sync`'s rules (copy what is missing or differs, `delete`, `exclude`), a checkpoint's
marker copied last, and nothing of a write in progress or a lock file copied. The same on S3 is
tests/e2e/test_s3_sync.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from arthex.adapters.tree_sync import Tree, TreeSyncError, sync_tree
from arthex.art.utils.s3 import s3_sync


def listing(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_syncing_two_local_folders_follows_the_same_rules(tmp_path: Path) -> None:
    source, target = tmp_path / "a", tmp_path / "b"
    write(source / "checkpoints" / "0001" / "model.safetensors", b"w")
    write(source / "checkpoints" / "0001" / "trainer_state.json", b"{}")
    (source / "trajectories").mkdir()
    (source / "trajectories" / "0001.parquet").write_bytes(b"rows")
    (source / "trajectories" / ".lock").write_bytes(b"")
    (source / "checkpoints" / ".tmp-0002.1.ab").mkdir()
    (source / "checkpoints" / ".tmp-0002.1.ab" / "model.safetensors").write_bytes(b"half")
    copied, deleted = sync_tree(Tree.of(str(source)), Tree.of(str(target)))
    assert copied == [  # the marker last
        "checkpoints/0001/model.safetensors",
        "trajectories/0001.parquet",
        "checkpoints/0001/trainer_state.json",
    ]
    assert deleted == [] and listing(target) == sorted(copied)
    (target / "extra.txt").write_text("only here")
    (target / "trajectories" / "theirs.parquet").write_bytes(b"excluded: left alone")
    asyncio.run(s3_sync(str(source), str(target), delete=True, exclude=["trajectories"]))
    assert not (target / "extra.txt").exists()
    assert (target / "trajectories" / "theirs.parquet").exists()
    (target / "trajectories" / "theirs.parquet").unlink()
    assert sync_tree(Tree.of(str(source)), Tree.of(str(target))) == ([], [])


def test_a_missing_or_empty_source_never_empties_the_destination(tmp_path: Path) -> None:
    write(tmp_path / "b" / "kept.txt", b"mine")
    with pytest.raises(TreeSyncError, match=r"syncing .*/nowhere failed: it is not a folder"):
        sync_tree(Tree.of(str(tmp_path / "nowhere")), Tree.of(str(tmp_path / "b")), delete=True)
    (tmp_path / "empty").mkdir()
    with pytest.raises(TreeSyncError, match=r"the source holds no files.*nothing was deleted"):
        sync_tree(Tree.of(str(tmp_path / "empty")), Tree.of(str(tmp_path / "b")), delete=True)
    assert listing(tmp_path / "b") == ["kept.txt"]
