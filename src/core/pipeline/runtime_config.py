"""The pipeline's runtime settings as one value (`PipelineTrainer(pipeline=...)`, the form ART
0.5.23 prefers to the separate keywords): rollout workers, batch bounds and queue size.

The two score references weigh a throughput score of ART's trainer, which arthex's pipeline
does not compute: they are checked and kept, and change nothing.

`PipelineTrainer(autotune=...)` takes a `PipelineTuning`: something that decides the settings
when the trainer is built (arthex.utils.pipeline_tuner's PipelineAutotuneConfig applies a saved
tuner profile). Given settings then come from it alone, as ART's autotuner owns them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import pydantic

if TYPE_CHECKING:
    from ..trainable import TrainableModel

__all__ = ["PipelineRuntimeConfig", "PipelineTuning", "runtime_settings", "tuned_settings"]

DEFAULTS: dict[str, Any] = {
    "num_rollout_workers": 16,
    "min_batch_size": 4,
    "max_batch_size": None,
    "queue_maxsize": None,
}


class PipelineRuntimeConfig(pydantic.BaseModel):
    """Rollout workers, batch bounds and queue size of a PipelineTrainer (see its docstring)."""

    model_config = pydantic.ConfigDict(extra="forbid")

    num_rollout_workers: int = pydantic.Field(default=16, ge=1)
    min_batch_size: int = pydantic.Field(default=4, ge=1)
    max_batch_size: int | None = pydantic.Field(default=None, ge=1)
    queue_maxsize: int | None = pydantic.Field(default=None, ge=1)
    score_reference_groups_per_step: float | None = pydantic.Field(default=8.0, gt=0.0)
    score_reference_rollouts_per_group: float | None = pydantic.Field(default=None, gt=0.0)

    @pydantic.model_validator(mode="after")
    def _bounds(self) -> PipelineRuntimeConfig:
        if self.max_batch_size is not None and self.max_batch_size < self.min_batch_size:
            raise ValueError("max_batch_size must be >= min_batch_size")
        return self


def runtime_settings(
    pipeline: PipelineRuntimeConfig | None, given: dict[str, Any]
) -> dict[str, Any]:
    """The four settings: from `pipeline` when given (then the separate keywords must be left
    at their defaults, or ValueError says to use one form), else the keywords."""
    if pipeline is None:
        return given
    if not isinstance(pipeline, PipelineRuntimeConfig):
        raise ValueError(f"pipeline must be a PipelineRuntimeConfig, got {type(pipeline).__name__}")
    changed = sorted(name for name, value in given.items() if value != DEFAULTS[name])
    if changed:
        raise ValueError(
            "use either pipeline=PipelineRuntimeConfig(...) or the separate settings "
            f"({', '.join(changed)}), not both"
        )
    return {name: getattr(pipeline, name) for name in DEFAULTS}


class PipelineTuning(Protocol):
    """Decides a pipeline's runtime settings when its trainer is built (`autotune=`)."""

    def pipeline_settings(
        self, model: TrainableModel, *, max_steps_off_policy: int | None
    ) -> PipelineRuntimeConfig | None:
        """The settings to run with, or None to leave them to `pipeline=` and the keywords.
        Raises ValueError (a clear line) when it cannot decide them."""
        ...


def tuned_settings(
    autotune: PipelineTuning | None,
    pipeline: PipelineRuntimeConfig | None,
    given: dict[str, Any],
    model: TrainableModel,
    max_steps_off_policy: int | None,
) -> PipelineRuntimeConfig | None:
    """`pipeline`, or the tuning's settings when it decides them: then `pipeline` and the
    separate keywords must not be given (ValueError)."""
    if autotune is None:
        return pipeline
    decide = getattr(autotune, "pipeline_settings", None)
    if not callable(decide):
        raise ValueError(
            "autotune must be a PipelineAutotuneConfig (arthex.art.PipelineAutotuneConfig), "
            f"got {type(autotune).__name__}"
        )
    tuned = decide(model, max_steps_off_policy=max_steps_off_policy)
    if tuned is None:
        return pipeline
    changed = sorted(name for name, value in given.items() if value != DEFAULTS[name])
    if pipeline is not None or changed:
        raise ValueError(
            "the pipeline's settings cannot be given while autotune decides them (it owns "
            "the workers, batch sizes and queue size): drop "
            + ", ".join(["pipeline=..."] * (pipeline is not None) + changed)
        )
    if not isinstance(tuned, PipelineRuntimeConfig):
        raise ValueError(f"autotune gave {type(tuned).__name__}, not a PipelineRuntimeConfig")
    return tuned
