"""A LoRA adapter logged as a Weights & Biases artifact, the way ART 0.5.23's W&B deployment
logs one: a run named `{run} (deployment)` in the model's entity and project, an artifact of
type `lora` named after the run, with the base model (and the training provenance) in its
metadata, stored in the `coreweave-us` region, aliased `step{N}` and `latest`; W&B serves it
as `wandb-artifact:///{entity}/{project}/{run}:step{N}`.

The wandb SDK (the `wandb` extra) is imported inside the calls. With `WANDB_MODE=offline` the
artifact is staged in the offline run (`wandb sync` uploads it later) and the call does not
wait for an upload that cannot happen.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.errors import BackendError, MissingExtraError

ARTIFACT_TYPE = "lora"
STORAGE_REGION = "coreweave-us"
RUN_SUFFIX = " (deployment)"
# wandb would otherwise wrap this process's stdout/stderr for the run's lifetime
SETTINGS: Mapping[str, Any] = {"console": "off"}
# a logged artifact the server has not indexed yet: the upload itself succeeded (ART's rule)
_NOT_YET_FETCHABLE = "Unable to fetch artifact with id"


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise MissingExtraError("wandb", "wandb") from error


def default_entity(api_key: str) -> str:
    """The entity W&B files the key's runs under when none is named."""
    public = _module("wandb.apis.public")
    entity = public.Api(api_key=api_key).default_entity
    if not isinstance(entity, str) or not entity:
        raise BackendError("W&B named no default entity for this API key; set model.entity")
    return entity


def log_lora_artifact(
    *,
    run_name: str,
    entity: str,
    project: str,
    api_key: str,
    files: Mapping[str, Path],
    metadata: Mapping[str, object],
    aliases: Sequence[str],
    verbose: bool = False,
) -> None:
    """Log `files` (artifact path -> local file) as the artifact `run_name` of type `lora`."""
    wandb_init = _module("wandb.sdk.wandb_init")
    wandb_settings = _module("wandb.sdk.wandb_settings")
    artifacts = _module("wandb.sdk.artifacts.artifact")
    settings = wandb_settings.Settings(api_key=api_key, **SETTINGS)
    # a run of its own: `reinit="create_new"`, so an open training run of this process (the
    # W&B mirror's) is neither logged into nor finished here
    run = wandb_init.init(
        name=run_name + RUN_SUFFIX,
        entity=entity,
        project=project,
        settings=settings,
        reinit="create_new",
    )
    failed = True
    try:
        artifact = artifacts.Artifact(
            run_name, type=ARTIFACT_TYPE, metadata=dict(metadata), storage_region=STORAGE_REGION
        )
        for name, path in sorted(files.items()):
            artifact.add_file(str(path), name=name)
        logged = run.log_artifact(artifact, aliases=list(aliases))
        if not run.offline:
            try:
                logged.wait()
            except ValueError as error:
                if _NOT_YET_FETCHABLE not in str(error):
                    raise
                if verbose:
                    print(f"Warning: {error}")
        failed = False
    finally:
        run.finish(exit_code=1 if failed else 0)
