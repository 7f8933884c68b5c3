"""`arthex demo`, `arthex export` and `arthex version` (also `arthex --version`)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import typer

from ...adapters.layout import CHECKPOINTS, MODEL_SPEC, TINKER_RUN, run_label
from ...adapters.serverless.export import KEY_ENV as SERVERLESS_KEY_ENV
from ...adapters.serverless.export import REMOTE_FIELDS, REMOTE_KEY
from ...core.errors import install_command, require_extra
from ...ports.training_backend import ExportFormat
from .common import (
    BASE_PATH_OPT,
    NAME_OPT,
    ONLY_ONE,
    PROJECT_OPT,
    UsageError,
    activate_hint,
    arthex_command,
    fail,
    model_argument,
    one_line_errors,
    option,
    resolve_model,
)


def demo(
    base_path: Path = typer.Option(
        Path(".art"), "--base-path", metavar="DIR", help="Where runs are written."
    ),
    # No `min=` here: Click would show one bound ([x>=1]) for two demos with different ones.
    steps: int | None = typer.Option(
        None,
        metavar="N",
        help="RL steps: at least 3 (the demo compares them), at least 1 with --sft. "
        "Default: 20 (5 with --sft).",
        show_default=False,
    ),
    seed: int = typer.Option(0, metavar="SEED", help="Random seed."),
    pipeline: bool = typer.Option(
        False, "--pipeline", help="Sample the next steps' rollouts while a step trains."
    ),
    sft: bool = typer.Option(
        False,
        "--sft",
        help="The whole life instead: SFT warm start, a few RL steps (--steps), export, and a "
        "load of the export with plain transformers.",
    ),
) -> None:
    """Train the tiny model with RL on CPU; watch its reward rise.

    Prints one line per step of the history: the reward of the rollouts logged at step N,
    then the loss of the update that made step N+1 (or why it had nothing to train)."""
    from ...adapters.local.backend import LOCAL_PACKAGES

    with one_line_errors():
        if sft and pipeline:
            raise UsageError("--sft and --pipeline are two different demos; pass one of them")
        if not sft and steps is not None and steps < 3:
            raise UsageError(f"the demo needs at least 3 steps to compare, got --steps {steps}")
        if sft and steps is not None and steps < 1:
            raise UsageError(f"the --sft demo needs at least 1 RL step, got --steps {steps}")
        require_extra("local", *LOCAL_PACKAGES)
    from ..demo.life import SFT_RL_STEPS, run_sft_demo
    from ..demo.rl import run_demo

    if sft:
        rl_steps = SFT_RL_STEPS if steps is None else steps
        asyncio.run(run_sft_demo(base_path=str(base_path), seed=seed, rl_steps=rl_steps))
    else:
        kwargs: dict[str, Any] = {} if steps is None else {"steps": steps}
        asyncio.run(  # prints its summary
            run_demo(base_path=str(base_path), seed=seed, pipeline=pipeline, **kwargs)
        )
    typer.echo(f"watch the run in a browser: {arthex_command()} view {base_path}")
    hint = activate_hint()
    if hint is not None:
        typer.echo(hint)


def export(
    model: str | None = model_argument(ONLY_ONE),
    out: Path = typer.Option(
        ..., "--out", metavar="DIR", help="The new (or empty) folder to write.", show_default=False
    ),
    export_format: str = typer.Option(
        "merged",
        "--format",
        metavar="merged|peft",
        help="merged: a Hugging Face model directory; peft: the LoRA adapter directory.",
    ),
    step: int | None = typer.Option(
        None,
        "--step",
        min=0,
        metavar="STEP",
        help="The history's step to export. Default: the latest.",
        show_default=False,
    ),
    dtype: str | None = option(
        "DTYPE",
        "float32, bfloat16 or float16 for merged weights. Default: the base model's.",
        shown=False,
    ),
    base_path: Path = BASE_PATH_OPT,
    project: str | None = PROJECT_OPT,
    name: str | None = NAME_OPT,
) -> None:
    """Export a step of a run (any backend's) in a standard format.

    The merged folder loads with plain transformers (AutoModelForCausalLM.from_pretrained) and
    holds the base model's tokenizer files, byte for byte, chat template included."""
    with one_line_errors():
        if export_format not in ("merged", "peft"):
            raise UsageError(f"--format must be merged or peft, got {export_format!r}")
        path = resolve_model(model, base_path, project, name, guess=False)
        try:
            from ...adapters.local.export import checkpoint_step, export_checkpoint
        except ImportError as error:
            fail(f"export needs its extra: {install_command('local')} ({error})")
        chosen: ExportFormat = "peft" if export_format == "peft" else "merged"
        remote = _trained_on_a_server(path)
        if remote is not None:
            written, step = _export_from_server(remote, out, step, chosen, dtype)
        elif (path / TINKER_RUN).is_file() and not (path / CHECKPOINTS).is_dir():
            written, step = _export_from_tinker(path, out, step, chosen, dtype)
        else:
            step = checkpoint_step(path, step)  # the latest one, named before it is written
            written = export_checkpoint(path, out, step=step, format=chosen, dtype=dtype)
    typer.echo(f"exported step {step} of {run_label(path)} ({export_format}) to {written}")


def _export_from_tinker(
    path: Path, out: Path, step: int | None, chosen: ExportFormat, dtype: str | None
) -> tuple[Path, int | None]:
    """A Tinker run's step (the latest when None), downloaded from the service
    (TINKER_API_KEY, TINKER_BASE_URL), and the step it was."""
    try:
        from ...adapters.tinker.download import export_run
        from ...adapters.tinker.record import read_record
    except ImportError as error:
        fail(f"exporting a Tinker run needs its extra: {install_command('tinker')} ({error})")
    if step is None:
        record = read_record(path)
        step = None if record is None else record.step
    return asyncio.run(export_run(path, out, step=step, format=chosen, dtype=dtype)), step


def _trained_on_a_server(path: Path) -> Mapping[str, str] | None:
    """The server and model id a client's run records (model.json's `remote`), when the run
    has no checkpoints of its own here."""
    if (path / CHECKPOINTS).is_dir():
        return None
    try:
        spec = json.loads((path / MODEL_SPEC).read_bytes())
    except (OSError, ValueError):
        return None
    remote = spec.get(REMOTE_KEY) if isinstance(spec, dict) else None
    if isinstance(remote, dict) and all(isinstance(remote.get(k), str) for k in REMOTE_FIELDS):
        return remote
    return None


def _export_from_server(
    remote: Mapping[str, str],
    out: Path,
    step: int | None,
    export_format: ExportFormat,
    dtype: str | None,
) -> tuple[Path, int]:
    from ...adapters.serverless.client import URL_ENV
    from ...adapters.serverless.export import export_remote, latest_step
    from ...adapters.serverless.wire import api_base

    # The key goes only to the server the user configured, never to one a run folder names.
    configured = os.environ.get(URL_ENV, "").rstrip("/")
    if not configured or api_base(configured) != api_base(remote["server"]):
        raise UsageError(
            f"this run was trained on the server {remote['server']!r}; to send your API key "
            f"there to fetch its checkpoint, set {URL_ENV} to that URL (it is now "
            f"{configured or 'unset'})"
        )
    key = os.environ.get(SERVERLESS_KEY_ENV)
    if not key:
        raise UsageError(
            f"this run was trained on the server {remote['server']} (model "
            f"{remote['model_id']}); set {SERVERLESS_KEY_ENV} to the API key it was trained "
            "with to fetch its checkpoint"
        )
    if step is None:
        step = latest_step(remote["server"], key, remote["model_id"])
    written = export_remote(
        remote["server"], key, remote["model_id"], out, step=step, format=export_format,
        dtype=dtype,
    )  # fmt: skip
    return written, step


def print_version() -> None:
    from ... import __version__

    typer.echo(__version__)


def version() -> None:
    """Print the installed version."""
    print_version()
