"""Legacy part files, as arthex wrote a second log at one step before the step file held them
all: `{step:04d}-{n}.parquet` beside `{step:04d}.parquet`. Runs written then must still read."""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from arthex.adapters.parquet.encoding import encode
from arthex.adapters.parquet.schema import WRITE_OPTIONS
from arthex.core.trajectories import TrajectoryGroup


def write_legacy_part(
    split_dir: str | Path,
    step: int,
    part: int,
    groups: list[TrajectoryGroup],
    filesystem: pafs.FileSystem | None = None,
) -> str:
    """Write `groups` as the legacy part `part` (>= 1) of `step` in a split directory."""
    assert part >= 1
    fs = filesystem or pafs.LocalFileSystem()
    if filesystem is None:
        Path(split_dir).mkdir(parents=True, exist_ok=True)
    path = f"{split_dir}/{step:04d}-{part}.parquet"
    with fs.open_output_stream(path) as out:
        pq.write_table(encode(groups), out, **WRITE_OPTIONS)
    return path
