"""The trajectory store on parquet files in ART's v2 layout: `store` (the TrajectoryStore),
`codec` (groups <-> rows and columns), `parts` and `publish` (step files, their lock and the
atomic rewrite), `exchanges` (captured calls)."""

from .store import ParquetTrajectoryStore

__all__ = ["ParquetTrajectoryStore"]
