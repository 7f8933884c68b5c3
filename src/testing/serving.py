"""A model that answers on a local endpoint for the length of a block: what an environment's
or an agent's test rolls out against (the environment contract's `serve()` hook)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from ..composition.api import TrainableModel


@asynccontextmanager
async def served_model(
    base_model: str, base_path: str | Path, *, name: str, project: str
) -> AsyncIterator[TrainableModel]:
    """A TrainableModel of `base_model` (a local directory, e.g. `tiny_model(...)`) registered
    on a LocalBackend under `base_path`: it serves and trains in the block, and the model and
    its backend are closed after it, on error too. The backend is `model.backend`."""
    from ..adapters.local import LocalBackend

    backend = LocalBackend(str(base_path))
    model = TrainableModel(
        name=name, project=project, base_model=base_model, base_path=str(base_path),
        report_metrics=[],
    )  # fmt: skip
    try:
        await model.register(backend)
        yield model
    finally:
        await model.close()
        await backend.close()
