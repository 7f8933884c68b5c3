"""`arthex migrate PATH`: rewrite an old run's JSONL trajectory files as parquet.

ART's `art migrate`, with its options and its report: PATH is a model directory (it has
`trajectories/`), a trajectories directory (named so, or holding `SPLIT/STEP.jsonl` files) or a
project directory (it has `models/`: every model in it). Each file is converted by
`arthex.adapters.parquet.migration` (its JSONL removed unless --keep-jsonl); a file that cannot
be read is listed as an error at the end (exit 1) and the others still migrate.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from .common import UsageError, one_line_errors

if TYPE_CHECKING:
    from ...adapters.parquet.migration import MigrationResult

_MIB = 1024 * 1024
_ERRORS_SHOWN = 10


def migrate(
    path: Path = typer.Argument(
        ..., metavar="PATH", help="A model, project or trajectories directory."
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", "-n", help="Show what would be migrated; change nothing."
    ),
    keep_jsonl: bool = typer.Option(
        False, "--keep-jsonl", help="Keep each JSONL file beside its parquet file."
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Print each file as it goes."),
) -> None:
    """Rewrite old runs' JSONL trajectory files as parquet.

    PATH is a model directory, a project directory (every model under its models/) or a
    trajectories directory. The JSONL files are deleted once converted, unless --keep-jsonl."""
    from ...adapters.parquet.migration import (
        MigrationResult,
        migrate_model_dir,
        migrate_trajectories_dir,
    )

    with one_line_errors():
        if not path.exists():
            raise UsageError(f"{path} does not exist; pass a model, project or trajectories dir")
        delete = not keep_jsonl

        def shown(indent: str) -> Callable[[str], None] | None:
            return (lambda file: typer.echo(f"{indent}{file}")) if verbose else None

        if (path / "trajectories").exists():
            typer.echo(f"Migrating model directory: {path}")
            result = migrate_model_dir(path, delete, dry_run, shown("  "))
        elif path.name == "trajectories" or any(path.glob("*/[0-9]*.jsonl")):
            typer.echo(f"Migrating trajectories directory: {path}")
            result = migrate_trajectories_dir(path, delete, dry_run, shown("  "))
        elif (path / "models").exists():
            typer.echo(f"Migrating project directory: {path}")
            result = MigrationResult()
            for model_dir in sorted((path / "models").iterdir()):
                if not model_dir.is_dir():
                    continue
                if verbose:
                    typer.echo(f"Processing model: {model_dir.name}")
                result = result + migrate_model_dir(model_dir, delete, dry_run, shown("    "))
        else:
            raise UsageError(
                f"{path} is not a model, project or trajectories directory "
                "(no trajectories/, no models/, no SPLIT/STEP.jsonl files)"
            )
    _report(result, dry_run)


def _report(result: MigrationResult, dry_run: bool) -> None:
    if dry_run:
        typer.echo(f"\n[DRY RUN] Would migrate {result.files_migrated} files")
        if result.bytes_before > 0:
            typer.echo(f"  Estimated space savings: {result.space_saved / _MIB:.1f} MB")
    else:
        typer.echo(f"\nMigrated {result.files_migrated} files")
        if result.files_skipped > 0:
            typer.echo(f"Skipped {result.files_skipped} files")
        if result.bytes_before > 0 and result.bytes_after > 0:
            typer.echo(
                f"Space saved: {result.space_saved / _MIB:.1f} MB "
                f"({result.compression_ratio:.1f}x compression)"
            )
    if result.errors:
        typer.echo(f"\nErrors ({len(result.errors)}):", err=True)
        for error in result.errors[:_ERRORS_SHOWN]:
            typer.echo(f"  {error}", err=True)
        if len(result.errors) > _ERRORS_SHOWN:
            typer.echo(f"  ... and {len(result.errors) - _ERRORS_SHOWN} more errors", err=True)
        raise typer.Exit(1)
