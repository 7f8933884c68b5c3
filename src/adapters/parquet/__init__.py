"""The trajectory store on parquet files in ART's v2 layout: `store` (the TrajectoryStore);
the format: `schema` (columns, version, write options), `encoding` (groups to rows),
`json_cells` (the JSON cells, spliced fast), `exchanges` (captured calls), `decoding` (rows to
groups); the files: `parts` and `publish` (step files, their lock and the atomic rewrite)."""

from .store import ParquetTrajectoryStore

__all__ = ["ParquetTrajectoryStore"]
