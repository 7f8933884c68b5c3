"""What `backend.train(model, groups)` returns on the backends that know more of the new step
than its number and metrics: `LocalTrainResult` (LocalBackend: the step's checkpoint folder)
and `ServerlessTrainResult` (ServerlessBackend: the name the server keeps the step under).

Both are `arthex.TrainResult`s (ART's `LocalTrainResult` and `ServerlessTrainResult` have the
same fields); `model.train(...)` keeps returning the plain one.
"""

from __future__ import annotations

from collections.abc import Awaitable

import attrs

from ..core.model import TrainResult

__all__ = ["LocalTrainResult", "ServerlessTrainResult"]


@attrs.frozen
class LocalTrainResult(TrainResult):
    """`checkpoint_path`: the new step's checkpoint folder, complete when `train` returns
    (`{base_path}/{project}/models/{name}/checkpoints/{step:04d}`), None when the step has
    none. `checkpoint_ready` is always None: arthex writes the checkpoint before it returns
    (ART gives an awaitable where its checkpoint is still being written)."""

    checkpoint_path: str | None = None
    checkpoint_ready: Awaitable[None] | None = attrs.field(default=None, eq=False, repr=False)


@attrs.frozen
class ServerlessTrainResult(TrainResult):
    """`artifact_name`: the new step as the server stores it, `{entity}/{project}/{name}:step{N}`
    (the hosted service's W&B artifact; `arthex serve` names its steps the same way), None
    when the server did not say whose model it is."""

    artifact_name: str | None = None
