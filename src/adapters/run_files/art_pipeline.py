"""A pipeline run that ART 0.5.23's `PipelineTrainer` left, read so that arthex's continues it.

ART keeps its pipeline's place in the run's `state.json`, under `PIPELINE_STATE_KEY`
(`_pipeline_trainer`), merged into the file after each update and each finished evaluation:

- `scenario_offset`: scenarios taken from the stream; a resumed ART run skips that many (the
  scenarios it had in flight are not sampled again), and so does arthex;
- `total_scenarios_consumed`: the same count (ART sets it to the skipped count on resume);
- `training_step`: the step it saved at (ART warns and goes on from the backend's step where
  they differ; arthex does too when the backend is ahead, and refuses a backend behind it, as
  for its own record);
- `accepted_trainable_groups`, `discarded_stale_groups`, `discarded_zero_variance_groups`: the
  running counts its history rows' `discarded/*` values are made of, carried on by arthex's;
- `last_eval_step`: the last step scheduled for evaluation (0 when none), from which the next
  one is counted; `completed_eval_steps`: those whose evaluation finished (retention counts them
  as evaluated checkpoints). A scheduled step that did not finish is evaluated again, unless
  its `time/step_eval_s` row is in the history (ART logs one as arthex does);
- `pipeline_tuner_profile`: the tuner profile the run used, which ART does not read on resume.

ART reads the record leniently (`int(value or 0)`); arthex accepts what ART writes (integers
>= 0; a missing or null count is 0, as for ART) and refuses anything else, naming the file and
the field, before the pipeline writes anything. The record is ART's: arthex reads it and never
writes it; its own record goes to `pipeline_state.json` from then on.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...core.errors import CorruptDataError
from ...core.pipeline_record import PipelineRecord

PIPELINE_STATE_KEY = "_pipeline_trainer"  # ART's key in state.json

_COUNTS = (
    "scenario_offset",
    "total_scenarios_consumed",
    "training_step",
    "last_eval_step",
    "accepted_trainable_groups",
    "discarded_stale_groups",
    "discarded_zero_variance_groups",
)


def art_pipeline_record(state: Mapping[str, Any], path: Path) -> PipelineRecord | None:
    """The record arthex continues from ART's key in the run state `state` (read from `path`);
    None when the state has no such key. CorruptDataError naming `path` and the field for a
    value ART's trainer would not have written."""
    if PIPELINE_STATE_KEY not in state:
        return None
    value = state[PIPELINE_STATE_KEY]
    where = f"{path}: ART's pipeline record {PIPELINE_STATE_KEY!r}"
    if not isinstance(value, dict):
        raise CorruptDataError(f"{where} is a {type(value).__name__}, not a JSON object")
    counts = {field: _count(value, field, where) for field in _COUNTS}
    completed = value.get("completed_eval_steps")
    if completed is None:
        completed = []
    if not isinstance(completed, list):
        raise CorruptDataError(
            f"{where}: 'completed_eval_steps' must be a list of steps, got {completed!r}"
        )
    evaluated = [_step(step, where) for step in completed]
    profile = value.get("pipeline_tuner_profile")
    if profile is not None and not isinstance(profile, str):
        raise CorruptDataError(
            f"{where}: 'pipeline_tuner_profile' must be a profile name, got {profile!r}"
        )
    last = counts["last_eval_step"]
    return PipelineRecord(
        step=counts["training_step"],
        offset=counts["scenario_offset"],
        trained_groups=counts["accepted_trainable_groups"],
        discarded_unlisted={
            "stale": counts["discarded_stale_groups"],
            "zero_variance": counts["discarded_zero_variance_groups"],
        },
        # ART's 0 is also "none scheduled yet": only a finished evaluation tells them apart
        last_eval_step=last if last > 0 or last in evaluated else None,
        evaluations_due=(last,) if last > 0 and last not in evaluated else (),
        evaluated=evaluated,
    )


def _count(record: Mapping[str, Any], field: str, where: str) -> int:
    value = record.get(field)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CorruptDataError(f"{where}: {field!r} must be an integer >= 0, got {value!r}")
    return value


def _step(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CorruptDataError(
            f"{where}: 'completed_eval_steps' must hold steps (integers >= 0), got {value!r}"
        )
    return value
