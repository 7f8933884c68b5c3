"""ART's training provenance on W&B (`art.utils.record_provenance`): the list of how a model
was trained ("local-rl", "serverless-sft", ...) kept in the metadata of its latest LoRA
artifact, under `wandb.provenance` (the key arthex's `deploy_wandb` writes too).

As in ART 0.5.23: the artifact is `{entity}/{project}/{name}:latest` of type `lora`, fetched
through W&B's public API; when W&B has none yet (its `CommError`), nothing is done; the new
entry is appended unless it is already the last one, and the artifact is saved. Where arthex
differs: an offline run (`WANDB_MODE=offline`) has no server to fetch the artifact from, so
`record_provenance` on one raises at once, naming the run (ART's call waits for a login that
cannot happen). Needs the wandb SDK (the `wandb` extra).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.errors import InvalidInputError
from . import wandb_sdk

__all__ = [
    "PROVENANCE_KEY",
    "provenance_after",
    "record_provenance",
    "record_provenance_for_artifact",
]

PROVENANCE_KEY = "wandb.provenance"
ARTIFACT_TYPE = "lora"


def provenance_after(existing: Sequence[str] | None, provenance: str) -> list[str]:
    """The provenance list once `provenance` is recorded: appended unless it is already last."""
    if existing is None:
        return [provenance]
    entries = list(existing)
    if not entries or entries[-1] != provenance:
        entries.append(provenance)
    return entries


def record_on(artifact: Any, provenance: str) -> None:
    """Record `provenance` in a wandb artifact's metadata (not saved)."""
    artifact.metadata[PROVENANCE_KEY] = provenance_after(
        artifact.metadata.get(PROVENANCE_KEY), provenance
    )


def record_provenance(run: Any, provenance: str) -> None:
    """Record `provenance` on the latest artifact of the wandb `run`'s name."""
    if getattr(run, "offline", False):
        raise InvalidInputError(
            f"record_provenance: the W&B run {run.name!r} is offline, so its artifacts on W&B "
            "cannot be fetched; record provenance from an online run (WANDB_MODE unset), or "
            "pass it to WandbDeploymentConfig(provenance=...) when deploying"
        )
    record_provenance_for_artifact(
        entity=str(run.entity), project=str(run.project), name=str(run.name), provenance=provenance
    )


def record_provenance_for_artifact(
    *, entity: str, project: str, name: str, provenance: str
) -> None:
    """Record `provenance` on `{entity}/{project}/{name}:latest` (type `lora`); nothing when
    W&B has no such artifact yet."""
    api = wandb_sdk.api()
    try:
        artifact = api.artifact(f"{entity}/{project}/{name}:latest", type=ARTIFACT_TYPE)
    except wandb_sdk.comm_error_type():
        return  # no artifact yet: nothing to record on
    record_on(artifact, provenance)
    artifact.save()
