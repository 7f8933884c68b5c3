"""ART's `art.utils.trajectory_logging`: trajectory groups to one parquet file and back, with
the store's own encoder and decoder (arthex.adapters.parquet.single_file)."""

from __future__ import annotations

from pathlib import Path

from ...adapters.parquet.single_file import read_groups_file, write_groups_file
from ...core.errors import CorruptDataError
from ...core.trajectories import TrajectoryGroup

__all__ = ["read_trajectory_groups_parquet", "write_trajectory_groups_parquet"]


def write_trajectory_groups_parquet(
    trajectory_groups: list[TrajectoryGroup], path: str | Path
) -> None:
    """Write the groups, whole, to one zstd parquet file in ART's v2 layout (replacing a file
    at `path` atomically). A batch that cannot be stored raises InvalidInputError, a
    ValueError, before anything is written."""
    write_groups_file(path, trajectory_groups)


def read_trajectory_groups_parquet(path: str | Path) -> list[TrajectoryGroup]:
    """The groups of a v2 file exactly as written, or of an ART v1 file (plain messages, no
    exceptions). A file that is neither raises ValueError naming it, as ART's does."""
    try:
        return read_groups_file(path)
    except CorruptDataError as error:
        raise _FileError(str(error)) from error


class _FileError(CorruptDataError, ValueError):
    """A trajectory file that is not one: arthex's CorruptDataError, and the ValueError ART's
    callers catch."""
