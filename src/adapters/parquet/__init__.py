"""The trajectory store on parquet files in ART's v2 layout: `store` (the TrajectoryStore);
the format: `schema` (columns, version, write options), `encoding` (groups to rows),
`json_cells` (the JSON cells, spliced fast), `exchanges` (captured calls), `decoding` (rows to
groups); the files: `parts` (names, listing, legacy parts), `step_file` (a write's new part
and the atomic rewrite), `local_disk` and `object_store` (publishing, and serializing
writers)."""

from .store import ParquetTrajectoryStore

__all__ = ["ParquetTrajectoryStore"]
