"""`arthex doctor`: a preflight, one line per check, exit 0 (ok), 1 (warnings) or 2 (failures).

The checks are `arthex.apps.doctor`'s functions; this module parses the options, refuses a
bad one in one line (exit 2) before any check runs, and prints what the checks return.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import typer

from .common import BASE_PATH_OPT, UsageError, one_line_errors, option, resolve_model

# each the choices an option's help shows and the values it accepts
MODES = ("auto", "lora", "full")
DEVICES = ("auto", "cpu", "cuda")
ENGINES = ("auto", "torch", "vllm")


def doctor(
    run_dir: str | None = typer.Argument(
        None,
        metavar="RUN_DIR",
        help="A model directory (or PROJECT/NAME under --base-path) to check too.",
        show_default=False,
    ),
    base_model: str | None = option(
        "ID_OR_DIR",
        "The base model: a folder, a hub id, or a config.json. One that is not here is "
        "planned from its config alone (the hub's, or the shape arthex ships for common "
        "models). Default: the one RUN_DIR records.",
        shown=False,
    ),
    backend: str = option("local|tinker|serverless", "The backend to train with.", default="local"),
    base_path: Path = BASE_PATH_OPT,
    max_seq_len: int | None = option(
        "N",
        "Tokens per training row (prompt + completion). Default: min(4096, the context).",
        shown=False,
        at_least=1,
    ),
    batch: int = option(
        "N", "Sequences per training step (groups x rollouts).", default=16, at_least=1
    ),
    mode: str = option(
        "|".join(MODES),
        "LoRA or full fine-tuning; auto: full below 50M parameters, as the backend does.",
        default="auto",
    ),
    lora_rank: int = option("R", "The LoRA rank.", default=8, at_least=1),
    device: str = option("|".join(DEVICES), "Plan for this device kind.", default="auto"),
    device_memory: str | None = option(
        "SIZE",
        "Plan against this much memory (24GiB, 80GB) instead of what is free here.",
        shown=False,
    ),
    engine: str = option(
        "|".join(ENGINES),
        "The sampling engine; auto: vLLM when installed and on a GPU.",
        default="auto",
    ),
    gpu_memory_utilization: float = option(
        "F", "vLLM's share of the GPU, above 0 and at most 1 (LocalBackend's option).", default=0.5
    ),
    checkpoints: int = option(
        "N", "Free disk needed for N more checkpoints.", default=5, at_least=1
    ),
) -> None:
    """Check this machine, a base model and a run before training.

    One line per check: ok, warn or fail, with what to do. Versions against the supported
    ranges, the GPU, a memory plan for the base model, its chat template against the
    trainer's tokenization, wandb, and with RUN_DIR its history, trajectory files,
    checkpoints, lease and free disk. Exit code 0 when all is ok, 1 with warnings, 2 with
    failures. Nothing is written, and nothing downloaded but the config.json (a few KB) of
    a hub model that is not here."""
    from ..doctor import exit_code
    from ..doctor.memory import PlanSettings, parse_size
    from ..doctor.preflight import Device, EngineChoice, Options, run_checks
    from ..doctor.versions import BACKENDS, Backend

    with one_line_errors():
        for value, name, choices in (
            (backend, "--backend", BACKENDS),
            (mode, "--mode", MODES),
            (device, "--device", DEVICES),
            (engine, "--engine", ENGINES),
        ):
            if value not in choices:
                raise UsageError(f"{name} must be one of {'|'.join(choices)}, got {value!r}")
        if not 0 < gpu_memory_utilization <= 1:
            raise UsageError(
                f"--gpu-memory-utilization must be above 0 and at most 1, got "
                f"{gpu_memory_utilization}"
            )
        stated = parse_size(device_memory) if device_memory is not None else None
        if device == "cuda" and stated is None and not _sees_gpu():
            raise UsageError("--device cuda needs --device-memory here: no GPU is visible")
        path = resolve_model(run_dir, base_path, None, None) if run_dir is not None else None
        if base_model is not None and not base_model.strip():
            raise UsageError("--base-model must not be empty")
        options = Options(
            backend=cast(Backend, backend),
            base_model=base_model,
            run_dir=path,
            device=cast(Device, device),
            device_memory=stated,
            engine=cast(EngineChoice, engine),
            plan=PlanSettings(
                mode="full" if mode == "full" else "lora" if mode == "lora" else "auto",
                lora_rank=lora_rank,
                max_seq_len=max_seq_len,
                batch=batch,
                gpu_memory_utilization=gpu_memory_utilization,
            ),
            more_checkpoints=checkpoints,
        )
    checks = run_checks(options)
    for check in checks:
        typer.echo(check.line())
    raise typer.Exit(exit_code(checks))


def _sees_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())
