"""`tinker-run.json`: what a Tinker run has on the service, kept in the model directory.

The service holds the weights; this file holds the only map from arthex steps to them: the
current training run id, the step, and per step the `tinker://` paths of its sampler weights
(`step_{n:06d}`, what serves the step) and of its full state (weights and optimizer, what a
restart resumes from). It is replaced atomically, so a crash leaves the old or the new map.
A restart creates a new training run from the newest saved state, so one arthex run may span
several Tinker training run ids; each checkpoint keeps its full path.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

from ...core.errors import CorruptDataError
from ..files import atomic_write_bytes
from ..layout import TINKER_RUN

FORMAT_VERSION = 1


def step_name(step: int) -> str:
    return f"step_{step:06d}"


def training_run_of(path: str) -> str:
    """`tinker://<run>/<kind>/<name>` -> `<run>`."""
    return path.removeprefix("tinker://").split("/", 1)[0]


@attrs.frozen
class Checkpoint:
    step: int
    sampler_path: str | None
    state_path: str | None


@attrs.frozen
class RunRecord:
    base_model: str
    lora_rank: int
    training_run_id: str
    step: int
    checkpoints: tuple[Checkpoint, ...] = ()
    # Paths dropped from `checkpoints` but maybe still on the service: written before they
    # are deleted there, cleared after, so a crash between the two is finished next time.
    deleting: tuple[str, ...] = ()
    # Steps whose sampler weights Tinker expired (a TTL): no longer served, shown as expired.
    expired: tuple[int, ...] = ()

    def checkpoint(self, step: int) -> Checkpoint | None:
        return next((c for c in self.checkpoints if c.step == step), None)

    def sampler_steps(self) -> list[int]:
        return sorted(c.step for c in self.checkpoints if c.sampler_path is not None)

    def resume_point(self) -> Checkpoint | None:
        """The newest checkpoint with a full state: where a restart resumes."""
        states = [c for c in self.checkpoints if c.state_path is not None]
        return max(states, key=lambda c: c.step) if states else None

    def with_checkpoint(self, checkpoint: Checkpoint) -> RunRecord:
        kept = [c for c in self.checkpoints if c.step != checkpoint.step]
        ordered = tuple(sorted([*kept, checkpoint], key=lambda c: c.step))
        return attrs.evolve(self, checkpoints=ordered, step=max(self.step, checkpoint.step))

    def replacing(self, checkpoints: Iterable[Checkpoint]) -> RunRecord:
        """Keep `checkpoints` (those with neither path are dropped)."""
        kept = tuple(
            sorted((c for c in checkpoints if c.sampler_path or c.state_path), key=lambda c: c.step)
        )
        return attrs.evolve(self, checkpoints=kept)

    def expiring(self, listed: set[str]) -> RunRecord:
        """The record once the service lists only `listed`: a checkpoint path it no longer
        has (and arthex is not deleting) is dropped, and a step whose sampler weights went so
        is recorded as expired."""
        gone = set(self.expired)
        kept = []
        for c in self.checkpoints:
            sampler = c.sampler_path if c.sampler_path in listed else None
            full = c.state_path if c.state_path in listed else None
            if c.sampler_path is not None and sampler is None:
                gone.add(c.step)
            kept.append(Checkpoint(c.step, sampler, full))
        return attrs.evolve(self.replacing(kept), expired=tuple(sorted(gone)))

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT_VERSION,
            "base_model": self.base_model,
            "lora_rank": self.lora_rank,
            "training_run_id": self.training_run_id,
            "step": self.step,
            "checkpoints": [attrs.asdict(c) for c in self.checkpoints],
            "deleting": list(self.deleting),
            "expired": list(self.expired),
        }

    @classmethod
    def from_json(cls, data: Any, source: str) -> RunRecord:
        try:
            if data["format"] != FORMAT_VERSION:
                raise CorruptDataError(
                    f"{source} has format {data['format']!r}; this arthex reads format "
                    f"{FORMAT_VERSION}"
                )
            return cls(
                base_model=str(data["base_model"]),
                lora_rank=int(data["lora_rank"]),
                training_run_id=str(data["training_run_id"]),
                step=int(data["step"]),
                checkpoints=tuple(
                    Checkpoint(
                        step=int(c["step"]),
                        sampler_path=c.get("sampler_path"),
                        state_path=c.get("state_path"),
                    )
                    for c in data["checkpoints"]
                ),
                deleting=tuple(str(p) for p in data.get("deleting", ())),
                expired=tuple(int(s) for s in data.get("expired", ())),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptDataError(f"{source} is not a Tinker run record: {exc!r}") from exc


def read_json(path: Path) -> tuple[Any] | None:
    """The JSON value in `path`, in a 1-tuple; None when there is no such file. CorruptDataError
    (naming the file) when it cannot be read or is not JSON."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CorruptDataError(f"cannot read {path}: {exc}") from exc
    try:
        return (json.loads(text),)
    except ValueError as exc:
        raise CorruptDataError(f"{path} is not JSON: {exc}") from exc


def read_record(model_dir: Path) -> RunRecord | None:
    path = model_dir / TINKER_RUN
    found = read_json(path)
    return None if found is None else RunRecord.from_json(found[0], str(path))


def write_record(model_dir: Path, record: RunRecord) -> None:
    payload = json.dumps(record.to_json(), indent=2, sort_keys=True).encode()
    atomic_write_bytes(model_dir / TINKER_RUN, payload)
