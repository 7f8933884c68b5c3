"""InMemoryBackend: a verified fake TrainingBackend (it passes TrainingBackendContract).

Its "weights" are a per-token preference table updated by the same group-relative advantages
a real backend uses, so tests can see a learning signal without torch. Its supervised
fine-tuning reads the trained assistant messages' characters as tokens and descends the loss
it reports, the batch's mean of `softplus(-SFT_LOGIT_SCALE * w)` over them, so the loss falls
as a real model's would on data it can memorise, at the learning rates a network takes (an
entry acts like a weight with a fan-in of SFT_LOGIT_SCALE).
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ...adapters.files import new_folder
from ...core.advantages import group_advantages
from ...core.backend_train import BackendTrainEntry
from ...core.config import TrainConfig
from ...core.conversations import Conversation
from ...core.errors import InvalidInputError, NotRegisteredError
from ...core.identity import ModelSpec, RunRef
from ...core.lease_book import release_leases
from ...core.sft import TrainSFTConfig
from ...core.sft import step_metrics as sft_metrics
from ...core.trajectories import TrajectoryGroup
from ...ports.training_backend import (
    BackendCapabilities,
    Capability,
    ExportFormat,
    InferenceEndpoint,
    ModelExporter,
    StepMetricsSource,
    SupervisedFineTuning,
    TrainingBackend,
)

Weights = dict[int, float]
SFT_LOGIT_SCALE = 100.0


class InMemoryBackend(BackendTrainEntry):
    """Checkpoints are dicts in memory; `train` yields one metrics dict per group it updates
    on (one "gradient step" each), or one zero dict when nothing is trainable."""

    def __init__(
        self,
        *,
        losses: Collection[str] = ("cispo", "ppo", "importance_sampling"),
        one_trainer: bool = False,
        sft: bool = True,
        export: bool = False,
    ) -> None:
        """`one_trainer=True` declares `Capability.ONE_TRAINER`, as a backend whose
        checkpoints other processes see does (so models take the run's lease); `sft=False`
        leaves out supervised fine-tuning; `export=True` declares `Capability.EXPORT`."""
        self._losses = frozenset(losses)
        self._one_trainer = one_trainer
        self._sft = sft
        self._export = export
        self._checkpoints: dict[RunRef, dict[int, Weights]] = {}
        self._metrics: dict[tuple[RunRef, int], list[dict[str, float]]] = {}
        self._locks: dict[RunRef, asyncio.Lock] = {}
        self.closed = False

    @property
    def capabilities(self) -> BackendCapabilities:
        names: set[str] = {Capability.TRAIN, Capability.DELETE_CHECKPOINTS}
        if self._one_trainer:
            names.add(Capability.ONE_TRAINER)
        if self._sft:
            names.add(Capability.SFT)
        if self._export:
            names.add(Capability.EXPORT)
        return BackendCapabilities(names | {f"loss:{name}" for name in self._losses})

    async def register(self, model: ModelSpec) -> InferenceEndpoint | None:
        self._checkpoints.setdefault(model.run, {0: {}})
        self._locks.setdefault(model.run, asyncio.Lock())
        return None

    def _run(self, run: RunRef) -> dict[int, Weights]:
        if run not in self._checkpoints:
            raise NotRegisteredError(f"{run} is not registered with this InMemoryBackend")
        return self._checkpoints[run]

    async def get_step(self, run: RunRef) -> int:
        return max(self._run(run))

    def weights(self, run: RunRef, step: int | None = None) -> Weights:
        """A copy of the preference table at `step` (latest when None)."""
        checkpoints = self._run(run)
        return dict(checkpoints[max(checkpoints) if step is None else step])

    async def train_steps(
        self, run: RunRef, groups: Sequence[TrajectoryGroup], config: TrainConfig
    ) -> AsyncIterator[Mapping[str, float]]:
        checkpoints = self._run(run)
        if not groups:
            raise InvalidInputError("train got no groups")
        async with self._locks[run]:
            step = max(checkpoints)
            weights = dict(checkpoints[step])
            samples: list[dict[str, float]] = []
            for group in groups:
                advantages = group_advantages(
                    [t.reward for t in group.trajectories], scale=config.scale_rewards
                )
                if not any(advantages):
                    continue
                total = 0.0
                for trajectory, advantage in zip(group.trajectories, advantages, strict=True):
                    for choice in trajectory.choices():
                        for token in (choice.model_extra or {}).get("token_ids", []):
                            weights[int(token)] = (
                                weights.get(int(token), 0.0) + config.learning_rate * advantage
                            )
                            total += abs(advantage)
                samples.append(
                    {
                        "loss": -total,
                        "grad_norm": math.sqrt(total),
                        "learning_rate": config.learning_rate,
                    }
                )
                await asyncio.sleep(0)
            if not samples:  # nothing trainable: no optimizer step, as a real backend says
                samples.append(
                    {
                        "loss": 0.0,
                        "grad_norm": 0.0,
                        "learning_rate": config.learning_rate,
                        "data/step_num_gradient_steps": 0.0,
                    }
                )
            checkpoints[step + 1] = weights
            self._metrics[(run, step + 1)] = [dict(sample) for sample in samples]
            for sample in samples:
                yield sample

    async def train_sft(
        self, run: RunRef, conversations: Sequence[Conversation], config: TrainSFTConfig
    ) -> AsyncIterator[Mapping[str, float]]:
        checkpoints = self._run(run)
        self.capabilities.require(Capability.SFT, type(self).__name__)
        plan = config.plan(len(conversations))
        targets = [
            [ord(c) for i in conv.trained_turns(config.assistant_turns) for c in _text(conv, i)]
            for conv in conversations
        ]
        if not any(targets):
            raise InvalidInputError("train_sft: no conversation has an assistant token to train")
        async with self._locks[run]:
            step = max(checkpoints)
            weights = dict(checkpoints[step])
            samples = []
            for batch in plan:
                tokens = [token for index in batch.items for token in targets[index]]
                if not tokens:
                    continue
                logits = {t: SFT_LOGIT_SCALE * weights.get(t, 0.0) for t in tokens}
                loss = sum(_softplus(-logits[t]) for t in tokens) / len(tokens)
                gradient: dict[int, float] = {}
                for token in tokens:  # d loss / d w, summed over the token's occurrences
                    pull = SFT_LOGIT_SCALE * _sigmoid(-logits[token]) / len(tokens)
                    gradient[token] = gradient.get(token, 0.0) + pull
                for token, pull in gradient.items():
                    weights[token] = weights.get(token, 0.0) + batch.learning_rate * pull
                norm = math.sqrt(sum(pull * pull for pull in gradient.values()))
                samples.append((loss, norm, batch.learning_rate))
                await asyncio.sleep(0)
            metrics = [
                sft_metrics(
                    loss=loss,
                    grad_norm=norm,
                    learning_rate=rate,
                    conversations=len(conversations),
                    trainable_tokens=sum(len(t) for t in targets) * config.epochs,
                    dropped=0,
                    gradient_steps=len(samples),
                )
                for loss, norm, rate in samples
            ]
            checkpoints[step + 1] = weights
            self._metrics[(run, step + 1)] = [dict(m) for m in metrics]
            for sample in metrics:
                yield sample

    async def step_metrics(self, run: RunRef, step: int) -> list[dict[str, float]] | None:
        """What `train` yielded for the update that made `step`, kept with the checkpoint."""
        self._run(run)
        samples = self._metrics.get((run, step))
        return None if samples is None else [dict(sample) for sample in samples]

    async def checkpoint_steps(self, run: RunRef) -> list[int]:
        return sorted(self._run(run))

    async def delete_checkpoint_files(
        self, run: RunRef, steps_to_keep: Collection[int]
    ) -> list[int]:
        checkpoints = self._run(run)
        latest = max(checkpoints)
        keep = set(steps_to_keep) | {latest}
        deleted = sorted(step for step in checkpoints if step not in keep)
        for step in deleted:
            del checkpoints[step]
        return deleted

    async def export(
        self, run: RunRef, out_dir: str, *, step: int | None = None, format: ExportFormat = "merged"
    ) -> str:
        """Write step `step` (latest when None) into the new folder `out_dir` as
        `weights.json`: the format asked, the step, and its preference table (keys are the
        token ids as strings, JSON's only key type). The folder is written as a sibling and
        renamed into place, so a refused or failed export leaves nothing behind."""
        checkpoints = self._run(run)
        self.capabilities.require(Capability.EXPORT, type(self).__name__)
        if format not in ("peft", "merged"):
            raise InvalidInputError(f"format must be 'peft' or 'merged', got {format!r}")
        chosen = max(checkpoints) if step is None else step
        if chosen not in checkpoints:
            raise InvalidInputError(
                f"{run} has no checkpoint of step {step}; its checkpoints: {sorted(checkpoints)}"
            )
        payload = {"format": format, "step": chosen, "weights": checkpoints[chosen]}
        await asyncio.to_thread(_write_export, out_dir, payload)
        return out_dir

    async def forget_run(self, run: RunRef) -> None:
        """RunForgetting: drop the run's checkpoints (they live only here, so this is what
        deleting a run's files is on a backend that keeps them on disk): registered again,
        the run starts at step 0. A training call in flight on it ends first."""
        lock = self._locks.get(run)
        if lock is None:
            return
        async with lock:
            self._checkpoints.pop(run, None)
            self._locks.pop(run, None)
            for key in [key for key in self._metrics if key[0] == run]:
                del self._metrics[key]

    async def close(self) -> None:
        self.closed = True
        await release_leases(self)  # the models registered here give their runs back


def _write_export(out_dir: str, payload: Mapping[str, object]) -> None:
    with new_folder(Path(out_dir)) as temp:
        (temp / "weights.json").write_text(json.dumps(payload), encoding="utf-8")


def _softplus(x: float) -> float:
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def _text(conversation: Conversation, index: int) -> str:
    content = conversation.messages[index].get("content") or ""
    if isinstance(content, list):
        return "".join(part["text"] for part in content)
    return str(content)


if TYPE_CHECKING:
    _fits: type[TrainingBackend] = InMemoryBackend
    _fine_tunes: type[SupervisedFineTuning] = InMemoryBackend
    _keeps_metrics: type[StepMetricsSource] = InMemoryBackend
    _exports: type[ModelExporter] = InMemoryBackend
