"""A Tinker run that ART 0.5.23's `TinkerNativeBackend` left in a model directory, read so that
arthex's TinkerBackend continues it.

ART keeps no map of steps to paths on disk: its `state.json` holds the run's Tinker training run
ids (`tinker_run_ids`, one per time ART opened the run, oldest first) and the step it reached
(`latest_step`). At `register` ART lists each run id's checkpoints on the service and keeps
those named `step_{n:06d}`: a training checkpoint (`weights/step_N`, saved when ART trains with
`save_checkpoint=True`) is where it resumes, the newest one wins, and a later run id's
checkpoint of a step replaces an earlier one's. `adopted_record` does the same over the
listings, so arthex resumes from the step ART would, and also keeps the sampler weights ART
saved for each step (`sampler_weights/step_N`; ART's own pattern misses those ids, so ART saves
the resumed step's sampler weights again, where arthex serves the ones it already has).

ART's older `TinkerBackend` (`art.tinker`, a LocalBackend over Tinker) keeps its run in
`{model_dir}/checkpoints/{step:04d}/info.yaml` instead: per step the training run's `model_id`,
the full state (`state_with_optimizer_path`) and the sampler weights (`sampler_weights_path`),
saved at every step; it resumes from the newest folder. `read_art_checkpoint_folders` reads
those, and `adopted_record` makes the same record of them.

Both are ART's: arthex reads them and never writes them. They are checked before anything is
written; a malformed key is a CorruptDataError naming the file and the key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from ...core.errors import CorruptDataError, MissingExtraError
from ..layout import CHECKPOINTS, STATE
from .record import Checkpoint, RunRecord, read_json

STATE_KEY_RUN_IDS = "tinker_run_ids"  # ART's key: the run's Tinker training run ids, oldest first
STATE_KEY_LATEST_STEP = "latest_step"  # ART's key: the step ART's run reached

_TRAINING_ID = re.compile(r"(?:weights/)?step_(\d+)$")  # ART's pattern for a training checkpoint
_SAMPLER_ID = re.compile(r"sampler_weights/step_(\d+)$")
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")  # one segment of a tinker:// path
INFO = "info.yaml"  # ART's TinkerBackend: checkpoints/{step:04d}/info.yaml
INFO_STATE_KEY = "state_with_optimizer_path"
INFO_SAMPLER_KEY = "sampler_weights_path"


@attrs.frozen
class ArtTinkerState:
    """ART's Tinker keys of one `state.json`."""

    path: Path
    run_ids: tuple[str, ...]
    latest_step: int | None


def read_art_state(model_dir: Path) -> ArtTinkerState | None:
    """ART's Tinker keys in `{model_dir}/state.json`; None when there is no such file or it has
    no `tinker_run_ids`. CorruptDataError (naming the file and the key) for a file that is not
    a JSON object or a key of the wrong shape."""
    path = model_dir / STATE
    found = read_json(path)
    if found is None:
        return None
    data = found[0]
    if not isinstance(data, dict):
        raise CorruptDataError(f"{path} is not a JSON object (ART's model state)")
    latest = _latest_step(path, data)
    if STATE_KEY_RUN_IDS not in data:
        return None
    return ArtTinkerState(path=path, run_ids=_run_ids(path, data), latest_step=latest)


def _run_ids(path: Path, data: Mapping[str, Any]) -> tuple[str, ...]:
    raw = data[STATE_KEY_RUN_IDS]
    if not isinstance(raw, list):
        raise CorruptDataError(
            f"{path}: {STATE_KEY_RUN_IDS!r} must be a list of Tinker training run ids, got {raw!r}"
        )
    for item in raw:
        if not isinstance(item, str) or _RUN_ID.fullmatch(item) is None:
            raise CorruptDataError(
                f"{path}: {STATE_KEY_RUN_IDS!r} holds {item!r}, not a Tinker training run id "
                "(letters, digits, '.', '_', ':' and '-')"
            )
    return tuple(raw)


def _latest_step(path: Path, data: Mapping[str, Any]) -> int | None:
    if STATE_KEY_LATEST_STEP not in data:
        return None
    raw = data[STATE_KEY_LATEST_STEP]
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise CorruptDataError(
            f"{path}: {STATE_KEY_LATEST_STEP!r} must be a step (an integer >= 0), got {raw!r}"
        )
    return raw


@attrs.frozen
class Listed:
    """One checkpoint a run id lists: its id (`weights/step_000003`), kind and path."""

    checkpoint_id: str
    checkpoint_type: str
    tinker_path: str


def art_checkpoints(
    listings: Iterable[tuple[str, Iterable[Listed]]],
) -> tuple[dict[int, str], dict[int, str]]:
    """Per step, the training and sampler paths ART's run has, from each run id's listing in
    `state.json`'s order (a later run id's checkpoint of a step wins, as in ART)."""
    training: dict[int, str] = {}
    sampler: dict[int, str] = {}
    for _run_id, checkpoints in listings:
        for checkpoint in checkpoints:
            if checkpoint.checkpoint_type == "training":
                found = _TRAINING_ID.match(checkpoint.checkpoint_id)
                if found is not None:
                    training[int(found.group(1))] = checkpoint.tinker_path
            elif checkpoint.checkpoint_type == "sampler":
                found = _SAMPLER_ID.fullmatch(checkpoint.checkpoint_id)
                if found is not None:
                    sampler[int(found.group(1))] = checkpoint.tinker_path
    return training, sampler


def adopted_record(
    training: Mapping[int, str],
    sampler: Mapping[int, str],
    *,
    base_model: str,
    lora_rank: int,
    training_run_id: str,
) -> RunRecord:
    """arthex's record of ART's run at its newest training checkpoint: that step, and every
    step up to it with its paths. Later steps (sampler weights only, saved without
    `save_checkpoint`) are left alone: ART resumes from the same step and serves none of them."""
    step = max(training)
    steps = sorted(s for s in {*training, *sampler} if s <= step)
    checkpoints = tuple(Checkpoint(s, sampler.get(s), training.get(s)) for s in steps)
    return RunRecord(
        base_model=base_model,
        lora_rank=lora_rank,
        training_run_id=training_run_id,
        step=step,
        checkpoints=checkpoints,
    )


def read_art_checkpoint_folders(model_dir: Path) -> tuple[dict[int, str], dict[int, str]] | None:
    """Per step, the full state and sampler paths ART's TinkerBackend recorded in
    `checkpoints/{step:04d}/info.yaml`; None when no step folder has an `info.yaml` (a
    LocalBackend's checkpoints have none). CorruptDataError naming the file (and the key) for
    an `info.yaml` that is not a mapping of its keys to `tinker://` paths."""
    folder = model_dir / CHECKPOINTS
    try:
        entries = sorted(folder.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise CorruptDataError(f"cannot read {folder}: {exc}") from exc
    infos = [
        e / INFO for e in entries if e.name.isascii() and e.name.isdigit() and (e / INFO).is_file()
    ]
    if not infos:
        return None
    try:
        import yaml
    except ImportError as exc:  # PyYAML is a dependency of the tinker extra
        raise MissingExtraError("pyyaml", "tinker") from exc
    training: dict[int, str] = {}
    sampler: dict[int, str] = {}
    for path in infos:
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise CorruptDataError(f"{path} is not ART's checkpoint info (YAML): {exc}") from exc
        if not isinstance(data, dict):
            raise CorruptDataError(f"{path} is not a YAML mapping (ART's checkpoint info)")
        step = int(path.parent.name)
        training[step] = _tinker_path(path, data, INFO_STATE_KEY)
        sampler[step] = _tinker_path(path, data, INFO_SAMPLER_KEY)
    return training, sampler


def _tinker_path(path: Path, data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if (
        not isinstance(value, str)
        or not value.startswith("tinker://")
        or _RUN_ID.fullmatch(value.removeprefix("tinker://").split("/", 1)[0]) is None
    ):
        raise CorruptDataError(f"{path}: {key!r} must be a tinker:// path, got {value!r}")
    return value
