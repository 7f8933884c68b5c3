"""Two routes of the hosted API on a model as a whole: `DELETE /preview/models/{id}` (ART's
`backend.delete(model)`) and `POST /preview/models/{id}/log` (ART's client's `models.log`:
`{model_id, trajectory_groups, split}`, answered with nothing ART reads).

Delete takes the model's lease like any write (a model another client trains is refused), and
refuses a model that is training; it removes the model's folder under the backend's root
(checkpoints and logged groups), its lease, and its registry entry, so the id is unknown after;
the backend forgets the run first (what it holds in memory: a trainer, the steps it serves),
so the same names registered again are a fresh model at step 0 with the base weights.
Logged groups go to the model's own folder on the server, in the store's parquet layout, at the
model's current step.
"""

from __future__ import annotations

from typing import Any

from ...adapters.layout import RunLayout
from ...adapters.parquet import ParquetTrajectoryStore
from ...core.errors import InvalidInputError
from ...core.identity import validate_name
from .registry import ModelRecord
from .runner import parse_groups
from .service import TrainingService

__all__ = ["delete_model", "log_groups"]


async def delete_model(
    service: TrainingService, record: ModelRecord, lease: str | None
) -> dict[str, Any]:
    service.leases.require(record.id, lease, record.label)
    service.refuse_if_training(record)
    folder = RunLayout.of(service.backend_root, record.run).dir
    # the registry entry goes first: a crash after it leaves only unreachable files
    service.registry.remove(record.id)
    service.leases.release(record.id, lease)
    await service.forget(record, folder)  # the backend drops the run, then its folder goes
    return {"id": record.id, "object": "model", "deleted": True}


async def log_groups(
    service: TrainingService, record: ModelRecord, body: dict[str, Any]
) -> dict[str, Any]:
    if body.get("model_id") not in (None, record.id):
        raise InvalidInputError("'model_id' in the body must be the model id of the path")
    split = body.get("split")
    if not isinstance(split, str):
        raise InvalidInputError(f"'split' must be a name such as 'val', got {split!r:.40}")
    validate_name(split, "split")
    if body.get("trajectory_groups") == []:
        raise InvalidInputError("log got an empty list of trajectory_groups: nothing to log")
    groups = parse_groups(body.get("trajectory_groups"))
    async with service.holding(record):  # a delete waits: no write outlives the folder
        step = await service.backend.get_step(record.run)
        store = ParquetTrajectoryStore(service.backend_root)
        await store.write(record.run, split, step, groups)
    return {"logged": len(groups), "split": split, "step": step}
