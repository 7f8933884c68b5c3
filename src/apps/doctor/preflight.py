"""Every check `arthex doctor` runs, in order, from one value of its options."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Literal

import attrs

from ...adapters.layout import MODEL_SPEC
from ...core.errors import InvalidInputError
from .check import Check, fail, ok, warn
from .memory import ModelShape, PlanSettings, check_memory, free_memory, read_shape
from .reporting import check_wandb
from .run_dir import DEFAULT_MORE_CHECKPOINTS, check_run_dir, gib
from .shape_source import shape_without_weights
from .template import check_template, local_model_dir
from .versions import Backend, check_gpu, check_versions

Device = Literal["auto", "cpu", "cuda"]
EngineChoice = Literal["auto", "torch", "vllm"]


@attrs.frozen
class Options:
    backend: Backend = "local"
    base_model: str | None = None
    run_dir: Path | None = None
    device: Device = "auto"
    device_memory: int | None = None  # bytes, stated instead of measured
    engine: EngineChoice = "auto"
    plan: PlanSettings = attrs.field(factory=PlanSettings)
    more_checkpoints: int = DEFAULT_MORE_CHECKPOINTS


def recorded_base_model(run_dir: Path) -> str | None:
    """The base model a run's `model.json` records, if any."""
    try:
        found = json.loads((run_dir / MODEL_SPEC).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    base = found.get("base_model") if isinstance(found, dict) else None
    return base if isinstance(base, str) and base else None


def run_checks(options: Options) -> list[Check]:
    checks = check_versions(options.backend)
    checks.append(check_gpu(cpu_chosen=options.device == "cpu"))
    base = options.base_model
    if base is None and options.run_dir is not None:
        base = recorded_base_model(options.run_dir)
    if base is None:
        checks.append(
            ok("base model", "none named (--base-model): no memory plan, no template check")
        )
    else:
        checks.extend(_model_checks(base, options))
    checks.append(check_wandb())
    if options.run_dir is not None:
        checks.extend(check_run_dir(options.run_dir, options.more_checkpoints))
    return checks


def _model_checks(base: str, options: Options) -> list[Check]:
    try:
        folder = local_model_dir(base)
    except InvalidInputError as error:
        if options.backend == "serverless":
            return [ok("base model", f"{base!r} is not here: the training server loads it")]
        return _not_downloaded(base, str(error), options)
    cached = f" (cached in {folder})" if Path(base) != folder else ""
    checks = [ok("base model", f"{base}{cached}")]
    if options.backend == "local":
        try:
            shape = read_shape(folder)
        except InvalidInputError as error:
            checks.append(fail("memory", str(error), "pass the folder of a dense decoder model"))
        else:
            checks.append(_memory(shape, options))
    else:
        checks.append(_elsewhere(options))
    checks.append(check_template(folder))
    return checks


def _not_downloaded(base: str, why: str, options: Options) -> list[Check]:
    """A model that is not here: the memory plan from its config alone (shape_source.py); the
    chat template waits for the download."""
    if options.backend != "local":
        head = ok("base model", f"{why}; its chat template is checked once it is downloaded")
        return [head, _elsewhere(options)]
    try:
        shape, source = shape_without_weights(base)
    except InvalidInputError as error:
        return [fail("base model", f"{why}; {error}", f"hf download {base}, or pass its folder")]
    if base.endswith(".json") and os.path.isfile(base):
        head = ok("base model", f"{source}: the chat template needs the model's folder")
    else:
        head = warn(
            "base model",
            f"{base} is not downloaded here, {source}; its chat template is not checked",
            f"hf download {base}, then run doctor again to check the template",
        )
    return [head, _memory(shape, options)]


def _elsewhere(options: Options) -> Check:
    return ok("memory", f"the {options.backend} backend trains elsewhere: no plan here")


def _memory(shape: ModelShape, options: Options) -> Check:
    gpu = options.device == "cuda" or (options.device == "auto" and _torch_sees_gpu())
    engine = options.engine
    if engine == "auto":
        engine = "vllm" if gpu and importlib.util.find_spec("vllm") is not None else "torch"
    settings = attrs.evolve(options.plan, gpu=gpu, engine=engine)
    if options.device_memory is not None:
        available = total = options.device_memory
        where = "stated (--device-memory)"
    else:
        available, total = free_memory(gpu)
        where = f"free on {'cuda:0' if gpu else 'this machine'} (of {gib(total)})"
    return check_memory(shape, settings, available, total, where)


def _torch_sees_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())
