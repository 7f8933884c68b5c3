"""LocalBackend: trains on this machine's CPU or GPU and serves every kept step over HTTP.

One backend owns, per base model, one sampling engine and one OpenAI-compatible server on
127.0.0.1 (shared by the runs of that base model), and per run one trainer kept in memory
with its optimizer. Training runs on a worker thread, so the event loop that also runs the
inference server keeps answering while a step trains.

`full_finetune=None` fine-tunes fully below 50M parameters and uses LoRA above (see
trainer.py), except with the vLLM engine, which serves LoRA steps only: there it means LoRA.
Served steps: after each train call the new step is loaded as `{name}@{step}` and `{name}`
points at it; at register only the latest step is loaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import warnings
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs

from ...core.backend_train import BackendTrainEntry
from ...core.config import CustomLoss, TrainConfig
from ...core.conversations import Conversation
from ...core.errors import (
    ArthexError,
    BackendError,
    BaseModelChangedError,
    DiskFullError,
    InvalidInputError,
    MissingExtraError,
    require_extra,
)
from ...core.identity import ModelSpec, RunRef, step_name
from ...core.lease_book import release_leases
from ...core.sft import TrainSFTConfig
from ...core.trajectories import TrajectoryGroup
from ...ports.training_backend import (
    ALL_CAPABILITIES,
    BackendCapabilities,
    Capability,
    CheckpointServing,
    ExportFormat,
    InferenceEndpoint,
    ModelExporter,
    ServedCheckpoint,
    StepMetricsSource,
    SupervisedFineTuning,
    TrainingBackend,
)
from ...utils.loop_lock import LoopFreeLock
from ..inference.engine_pool import RunTable, Serving, ServingPool
from ..inference.vllm_args import SleepLevel
from ..layout import MODEL_SPEC, backend_run_dir
from ..train_results import LocalTrainResult

if TYPE_CHECKING:
    from torch import Tensor

    from ...core.model import TrainResult
    from ..inference.chat import ChatTokenizer
    from ..inference.engine import ServingEngine
    from ..inference.vllm_engine import VllmEngine
    from .trainer_protocol import Trainer

EngineKind = Literal["auto", "torch", "vllm"]
logger = logging.getLogger(__name__)


def _repointed_latest(model_dir: Path, spec: ModelSpec) -> int | None:
    """The run's latest step, after checking the base model its `model.json` records: a
    trained run keeps it (its checkpoints hold that model's weights); a run at step 0
    re-pointed to another base model drops its step-0 checkpoint, rebuilt from the new one."""
    from . import checkpoints as ckpt

    latest = ckpt.latest_step(model_dir)
    recorded = _recorded_base_model(model_dir)
    if latest is None or recorded is None or recorded == spec.base_model:
        return latest
    assert spec.base_model is not None
    if latest > 0:
        raise BaseModelChangedError(spec.run, recorded, spec.base_model)
    ckpt.delete_steps(model_dir, [0])
    return None


def _recorded_base_model(model_dir: Path) -> str | None:
    try:
        recorded = json.loads((model_dir / MODEL_SPEC).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # no record (or one the store reports on): nothing to compare with
    base = recorded.get("base_model") if isinstance(recorded, dict) else None
    return base if isinstance(base, str) and base else None


@attrs.define
class _Run:
    spec: ModelSpec
    model_dir: Path
    trainer: Trainer
    serving: Serving
    # a backend may serve a script's second asyncio.run: the lock is bound to no loop
    lock: LoopFreeLock = attrs.field(factory=LoopFreeLock)
    chat: ChatTokenizer | None = None  # the tokenizer SFT renders targets with, when used


# what the `local` extra brings that a run's trainer and engine import
LOCAL_PACKAGES = ("torch", "transformers", "tokenizers", "peft", "safetensors")


class LocalBackend(BackendTrainEntry):
    """Train with torch on this machine; serve `{name}` and `{name}@{step}` over HTTP.

    A run lives in one directory, `{base_path}/{project}/models/{name}`, and the model's
    `base_path` names it: its trajectories, ledger and trainer lease are there, so its
    checkpoints are too. `path` is ART's spelling of that place (ART moves the model's files
    under it); here it may only agree: a model whose `base_path` names another place is
    refused at `register`, before anything is written.
    `engine` picks the sampling engine ("auto": vLLM when importable with a GPU, else torch).

    The vLLM engine (docs/backends/local.md) serves LoRA steps only, on the GPU `device` names
    ("cuda:N"; a CPU device is refused), and takes: `gpu_memory_utilization` (its share of
    the GPU, kept for its whole life; the trainer gets the rest), `max_model_len` (prompt +
    completion; None: the model's), `enforce_eager` (no CUDA graphs), `max_num_seqs` (the
    most sequences decoded at once), `vllm_sleep_level` (1 or 2: vLLM frees its memory while
    each step trains; requests wait meanwhile) and `engine_args` (further
    `vllm.AsyncEngineArgs` fields; an unknown name is refused before anything starts). Its
    `max_lora_rank` follows `lora_rank`. The torch engine ignores these.
    `in_process` is accepted for ART scripts: this backend always trains and serves in the
    calling process (training on a worker thread); `in_process=False`, which asks ART for a
    separate service process, gets a warning.

    `world_size=N` trains each run on N rank processes with its model sharded by FSDP2 (GPUs
    0..N-1 when there are that many, else the CPU); `devices=[...]` names this machine's rank
    devices instead. A `world_size` above the local ranks adds ranks on other machines, which
    meet this one at `master_addr:master_port` (or MASTER_ADDR/MASTER_PORT): see
    docs/backends/local.md. Without either, training runs in this process.

    `loss_fn` takes a custom loss (core.config.CustomLoss), the same callable the
    TinkerBackend takes, under the same rule: it replaces the config's default loss (cispo),
    while `loss_fn="ppo"` or `"importance_sampling"` in the TrainConfig wins.
    """

    def __init__(
        self,
        path: str | None = None,
        *,
        engine: EngineKind = "auto",
        device: str | None = None,
        full_finetune: bool | None = None,
        lora_rank: int = 8,
        lora_alpha: int = 16,
        lora_target_modules: Sequence[str] | None = None,
        seed: int = 0,
        api_key: str | None = None,
        adam_betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.1,
        world_size: int | None = None,
        devices: Sequence[str] | None = None,
        master_addr: str | None = None,
        master_port: int | None = None,
        in_process: bool | None = None,
        gpu_memory_utilization: float = 0.5,
        max_model_len: int | None = None,
        enforce_eager: bool = False,
        max_num_seqs: int | None = None,
        vllm_sleep_level: SleepLevel = 0,
        engine_args: Mapping[str, Any] | None = None,
        micro_batch_tokens: int = 8192,
        logprob_calculation_chunk_size: int | None = None,
        gradient_checkpointing: bool | Literal["auto"] = "auto",
        loss_fn: CustomLoss | None = None,
    ) -> None:
        from ..inference.vllm_args import VllmSettings
        from .distributed.world import WorldRequest

        if loss_fn is not None and not callable(loss_fn):
            raise InvalidInputError(
                f"loss_fn must be a callable (a custom loss) or None, got {loss_fn!r}; "
                "the built-in losses are chosen with TrainConfig.loss_fn"
            )
        if loss_fn is not None and (world_size is not None or devices is not None):
            raise InvalidInputError(
                "a custom loss_fn trains in one process only: leave world_size and devices unset"
            )

        self._vllm = VllmSettings(
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            enforce_eager=enforce_eager,
            max_num_seqs=max_num_seqs,
            sleep_level=vllm_sleep_level,
            engine_args=engine_args or {},
        )
        if engine == "vllm":
            _check_vllm_choice(device, full_finetune, lora_rank)

        self._world = WorldRequest(world_size, devices, master_addr, master_port)
        if in_process is False:
            warnings.warn(
                "LocalBackend(in_process=False): arthex's LocalBackend always runs in this "
                "process (training on a worker thread, serving on this event loop); for a "
                "separate training process run `arthex serve` and use ServerlessBackend",
                UserWarning,
                stacklevel=2,
            )
        self._loss_fn = loss_fn
        self._path = path
        self._engine_kind: EngineKind = engine
        self._device = device
        self._full_finetune = full_finetune
        self._lora_rank = lora_rank
        self._lora_alpha = lora_alpha
        self._lora_targets = tuple(lora_target_modules) if lora_target_modules else None
        self._seed = seed
        self._api_key = api_key
        self._adam_betas = adam_betas
        self._weight_decay = weight_decay
        self._memory = _memory_settings(
            micro_batch_tokens, logprob_calculation_chunk_size, gradient_checkpointing
        )
        self._runs: RunTable[_Run] = RunTable("LocalBackend")
        self._pool = ServingPool("LocalBackend", api_key=api_key)
        self._pins: dict[RunRef, Counter[int]] = {}
        # runs served here without being trained: their engine, and the name they are served as
        self._readers: dict[RunRef, tuple[Serving, str]] = {}

    @property
    def capabilities(self) -> BackendCapabilities:
        if self._world.requested:  # sharded ranks run RL steps; SFT trains in one process
            return BackendCapabilities(ALL_CAPABILITIES.names - {Capability.SFT})
        return ALL_CAPABILITIES

    # --- lifecycle ----------------------------------------------------------------------

    async def register(self, model: ModelSpec) -> InferenceEndpoint | None:
        """Load (or create, as step 0 = the base weights) the run's latest checkpoint, start
        the engine and server if this base model has none yet, and serve the latest step."""
        self._runs.check_open()
        if not model.trainable:
            return None
        backend_run_dir(model, self._path, "LocalBackend")  # refused before anything starts
        require_extra("local", *LOCAL_PACKAGES)  # one line, not a trace from deep inside
        if not model.base_model:
            raise InvalidInputError(
                f"model {model.run} has no base_model; LocalBackend needs a Hugging Face causal "
                "LM directory or hub id"
            )
        run = await self._runs.open(model.run, lambda: self._open_run(model), self._discard)
        if run.spec.base_model != model.base_model:
            raise InvalidInputError(
                f"{model.run} is open on this LocalBackend with base model "
                f"{run.spec.base_model!r}, not {model.base_model!r}; close the backend before "
                "re-pointing the run, or start a new run under another name"
            )
        return self._pool.endpoint(run.serving, run.spec.served_name)

    async def _open_run(self, spec: ModelSpec) -> _Run:
        from . import checkpoints as ckpt
        from .trainer import DEFAULT_LORA_TARGETS, TrainerSettings
        from .trainer_protocol import make_trainer

        assert spec.base_model is not None
        kind = self._resolved_engine()
        full_finetune = training_mode(kind, self._full_finetune, self._device, self._lora_rank)
        if kind == "vllm":  # the installed vLLM's fields, checked before anything starts
            self._vllm_engine(spec.base_model).engine_args()
        model_dir = backend_run_dir(spec, self._path, "LocalBackend")
        model_dir.mkdir(parents=True, exist_ok=True)
        ckpt.remove_stale_temps(model_dir)
        settings = TrainerSettings(
            base_model=spec.base_model,
            device=self._device_name(),
            full_finetune=full_finetune,
            lora_rank=self._lora_rank,
            lora_alpha=self._lora_alpha,
            lora_target_modules=self._lora_targets or DEFAULT_LORA_TARGETS,
            seed=self._seed,
            adam_betas=self._adam_betas,
            weight_decay=self._weight_decay,
            **self._memory,
        )
        trainer = make_trainer(settings, self._world.plan(self._device), runs_open=len(self._runs))
        serving: Serving | None = None
        try:
            latest = await asyncio.to_thread(_repointed_latest, model_dir, spec)
            # The engine starts before the trainer touches CUDA, so vLLM can fork its engine
            # process (once CUDA is initialised it must spawn, which re-imports __main__).
            serving = self._reader_for(spec) or await self._serving_for(spec)
            source = ckpt.step_dir(model_dir, latest) if latest is not None else None
            await asyncio.to_thread(trainer.load, source)
            if trainer.fresh_optimizer_for is not None:
                logger.warning(
                    "%s continues from the LoRA adapter in %s, which holds no optimizer state "
                    "(ART does not save it): the weights are resumed, the optimizer starts fresh",
                    spec.run,
                    trainer.fresh_optimizer_for,
                )
            if latest is None:
                latest = 0
                await asyncio.to_thread(
                    ckpt.publish, model_dir, 0, trainer.write_checkpoint, trainer.trainer_state()
                )
            run = _Run(spec=spec, model_dir=model_dir, trainer=trainer, serving=serving)
            await self._serve(run, latest)
        except BaseException:
            if serving is not None:  # a retried register may take the name on it again
                self._pool.release(serving, spec.served_name)
            await asyncio.to_thread(trainer.close)
            raise
        return run

    async def _serving_for(self, spec: ModelSpec) -> Serving:
        assert spec.base_model is not None
        base_model = spec.base_model

        def make_engine() -> ServingEngine:
            if self._resolved_engine() == "vllm":
                return self._vllm_engine(base_model)
            try:
                from ..inference.torch_engine import TorchEngine
            except ImportError as exc:
                raise MissingExtraError(exc.name or "torch", "local") from exc
            return TorchEngine(base_model, device=self._device)

        return await self._pool.serving_for(base_model, spec.served_name, make_engine)

    def _resolved_engine(self) -> Literal["torch", "vllm"]:
        """The engine serving this backend's runs: "auto" is vLLM when it is installed with
        a GPU, unless the settings ask what only the torch engine does (a CPU device, full
        fine-tuning)."""
        from ..inference.select import pick_engine_kind

        if self._engine_kind == "auto" and (
            self._full_finetune is True or (self._device or "").startswith("cpu")
        ):
            return "torch"
        return pick_engine_kind(self._engine_kind)

    def _vllm_engine(self, base_model: str) -> VllmEngine:
        from ..inference.vllm_engine import VllmEngine

        return VllmEngine(base_model, self._vllm, device=self._device, lora_rank=self._lora_rank)

    async def close(self) -> None:
        """Stop every server and engine and drop the trainers (their rank processes with
        them); the files stay. A trainer that fails to close is logged and the rest are still
        closed. Then the models registered here give their run leases back."""
        try:
            for run in self._runs.close():
                await self._discard(run)
            self._readers.clear()
            await self._pool.close()
        finally:
            await release_leases(self)

    async def forget_run(self, run: RunRef) -> None:
        """Drop `run` (RunForgetting; the training server calls it when the run's model is
        deleted): its trainer is released and nothing of it is served any more, so the next
        `register` of the run opens it afresh from its files (a new step 0 when they are gone)
        instead of continuing from the weights in memory. A register of the run in flight is
        waited for and dropped too; a training call in flight ends first, and requests already
        sampling it finish. The files stay; a run not open here is a no-op."""
        if self._runs.closed:
            return  # `close` released everything already
        state = await self._runs.forget(run)
        if state is not None:
            async with state.lock:  # after any train, SFT or checkpoint delete on the run
                await self._pool.forget(state.serving, state.spec.served_name)
                await self._discard(state)
        reader = self._readers.pop(run, None)
        if reader is not None:
            await self._pool.forget(*reader)

    async def _discard(self, run: _Run) -> None:
        """Release a run's trainer (its rank processes, when it has them)."""
        try:
            await asyncio.to_thread(run.trainer.close)
        except Exception as exc:
            logger.warning("could not close the trainer of %s: %s", run.spec.run, exc)

    async def __aenter__(self) -> LocalBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- steps --------------------------------------------------------------------------

    async def get_step(self, run: RunRef) -> int:
        from . import checkpoints as ckpt

        return ckpt.latest_step(self._model_dir(run)) or 0

    async def checkpoint_steps(self, run: RunRef) -> list[int]:
        from . import checkpoints as ckpt

        return ckpt.complete_steps(self._model_dir(run))

    def train_result(self, run: RunRef, result: TrainResult) -> LocalTrainResult:
        """`backend.train`'s result with the new step's checkpoint folder (None without a
        complete checkpoint for it), as ART's LocalBackend returns it."""
        from . import checkpoints as ckpt

        model_dir = self._model_dir(run)
        kept = result.step in ckpt.complete_steps(model_dir)
        folder = str(ckpt.step_dir(model_dir, result.step)) if kept else None
        return LocalTrainResult(result.step, result.metrics, checkpoint_path=folder)

    # --- training -----------------------------------------------------------------------

    async def train_steps(
        self, run: RunRef, groups: Sequence[TrajectoryGroup], config: TrainConfig
    ) -> AsyncIterator[Mapping[str, float]]:
        """Pack, train (one metrics dict per optimizer step), save checkpoint N+1, serve it.

        A batch with nothing trainable copies checkpoint N to N+1 and yields one dict of zero
        counts. Two calls on one run are serialised; the second trains from the first's step.
        If training fails or the caller stops iterating early, the trainer is reloaded from
        the latest checkpoint, so memory never drifts from disk."""
        from . import checkpoints as ckpt
        from .packing import pack
        from .trainer_protocol import Update

        state = self._require(run)
        async with state.lock:
            step = ckpt.latest_step(state.model_dir) or 0
            reference = self._kl_reference(state, config)
            trainer = state.trainer
            batch = await asyncio.to_thread(
                pack,
                groups,
                config,
                max_length=trainer.max_length,
                pad_token_id=trainer.pad_token_id,
                shuffle_seed=self._seed * 1_000_003 + step,
            )
            counts = {
                "data/step_num_groups_trainable": float(batch.num_groups_trainable),
                "data/step_num_dropped_too_long": float(batch.num_dropped_too_long),
            }
            if batch.num_trainable_tokens == 0:
                nothing = {
                    **counts,
                    "data/step_num_gradient_steps": 0.0,
                    "data/step_num_tokens": 0.0,
                    "data/step_num_sequences": 0.0,
                }
                try:
                    await asyncio.to_thread(ckpt.check_room, state.model_dir, step + 1)
                    await asyncio.to_thread(self._copy_step, state, step, nothing)
                except OSError as exc:
                    raise _save_failed(run, step, state.model_dir, exc) from exc
                await self._serve(state, step + 1)
                yield nothing
                return
            pinned = config.kl_penalty_reference_step if config.kl_penalty_coef > 0 else None
            self._pin(run, pinned, +1)
            try:
                # as on the TinkerBackend: the backend's loss replaces the default (cispo) only
                custom = self._loss_fn if config.loss_fn == "cispo" else None
                steps = (
                    {**metrics, **counts}
                    for metrics in trainer.train(Update(batch, config, reference, custom))
                )
                async with contextlib.aclosing(self._update(state, step, steps)) as updates:
                    async for metrics in updates:
                        yield metrics
            finally:
                self._pin(run, pinned, -1)

    async def _update(
        self, state: _Run, step: int, steps: Iterator[dict[str, float]]
    ) -> AsyncGenerator[dict[str, float], None]:
        """Run the trainer's optimizer steps on the worker thread, yielding each one's metrics,
        then publish checkpoint `step + 1` and serve it. On a failure, or when the caller
        stops early, the trainer is reloaded from the latest checkpoint instead."""
        from . import checkpoints as ckpt

        trainer = state.trainer
        try:  # a disk without room for the checkpoint is refused before any optimizer step
            await asyncio.to_thread(ckpt.check_room, state.model_dir, step + 1)
        except DiskFullError as exc:
            raise _save_failed(state.spec.run, step, state.model_dir, exc) from exc
        finished = False
        sleeper = _sleeper(state.serving.engine)
        if sleeper is not None:
            await sleeper.sleep()
        try:
            samples: list[dict[str, float]] = []
            while True:
                metrics = await asyncio.to_thread(next, steps, None)
                if metrics is None:
                    break
                samples.append(dict(metrics))
                yield metrics
            try:
                await asyncio.to_thread(
                    ckpt.publish,
                    state.model_dir,
                    step + 1,
                    trainer.write_checkpoint,
                    {**trainer.trainer_state(), ckpt.METRICS_KEY: samples},
                )
            except OSError as exc:
                raise _save_failed(state.spec.run, step, state.model_dir, exc) from exc
            finished = True
        finally:
            try:
                if not finished:
                    latest = ckpt.latest_step(state.model_dir)
                    source = None if latest is None else ckpt.step_dir(state.model_dir, latest)
                    await asyncio.to_thread(trainer.load, source)
            finally:
                if sleeper is not None:
                    await sleeper.wake_up()
        await self._serve(state, step + 1)

    async def train_sft(
        self, run: RunRef, conversations: Sequence[Conversation], config: TrainSFTConfig
    ) -> AsyncIterator[Mapping[str, float]]:
        """Fine-tune on the conversations (local/sft.py), then save and serve step N+1 as
        `train` does; the same lock, so SFT and RL calls on one run never overlap."""
        from ..inference.sft_tokens import prepare
        from . import checkpoints as ckpt
        from .sft import sft_steps
        from .trainer import PolicyTrainer

        self.capabilities.require(
            Capability.SFT,
            "LocalBackend(world_size=...)",
            "supervised fine-tuning runs in one process: use a LocalBackend without "
            "world_size/devices for train_sft",
        )
        state = self._require(run)
        config.plan(len(conversations))  # bad input fails before the run's lock is awaited
        async with state.lock:
            step = ckpt.latest_step(state.model_dir) or 0
            chat = await self._training_chat(state)
            data = await asyncio.to_thread(
                prepare, chat, conversations, config, state.trainer.max_length
            )
            assert isinstance(state.trainer, PolicyTrainer)  # capabilities refused the others
            steps = sft_steps(state.trainer, data, config)
            async with contextlib.aclosing(self._update(state, step, steps)) as updates:
                async for metrics in updates:
                    yield metrics

    async def _training_chat(self, state: _Run) -> ChatTokenizer:
        """The base model's tokenizer for fine-tuning targets, loaded once per run."""
        if state.chat is None:
            from ..inference.chat import ChatTokenizer

            assert state.spec.base_model is not None
            state.chat = await asyncio.to_thread(ChatTokenizer.load, state.spec.base_model)
        return state.chat

    @staticmethod
    def _copy_step(state: _Run, step: int, metrics: Mapping[str, float]) -> None:
        """Checkpoint step + 1 as step's weights (nothing was trainable). A foreign adapter
        is not copied but saved from the trainer, which holds its weights: the new step is
        then a whole arthex checkpoint, optimizer state included."""
        from . import checkpoints as ckpt

        if not ckpt.foreign_adapter(ckpt.step_dir(state.model_dir, step)):
            ckpt.copy_step(state.model_dir, step, step + 1, [metrics])
            return
        trainer = state.trainer
        extra = {"copied_from": step, ckpt.METRICS_KEY: [dict(metrics)]}
        ckpt.publish(
            state.model_dir,
            step + 1,
            trainer.write_checkpoint,
            {**trainer.trainer_state(), **extra},
        )

    async def step_metrics(self, run: RunRef, step: int) -> list[dict[str, float]] | None:
        """The metrics `train` yielded for the update that made `step`, from its checkpoint
        (so the frontend can rebuild a history row a crash lost); None for a step arthex did
        not train (a foreign adapter keeps no metrics)."""
        from . import checkpoints as ckpt

        state = self._require(run)
        if step not in ckpt.complete_steps(state.model_dir):
            return None
        if ckpt.foreign_adapter(ckpt.step_dir(state.model_dir, step)):
            return None
        kept = ckpt.read_state(ckpt.step_dir(state.model_dir, step)).get(ckpt.METRICS_KEY)
        return None if not isinstance(kept, list) else [dict(sample) for sample in kept]

    def _kl_reference(self, state: _Run, config: TrainConfig) -> Path | None:
        from . import checkpoints as ckpt

        ref = config.kl_penalty_reference_step
        if config.kl_penalty_coef <= 0 or ref is None:
            return None
        if ref not in ckpt.complete_steps(state.model_dir):
            raise InvalidInputError(
                f"kl_penalty_reference_step={ref} has no checkpoint in {state.model_dir}; "
                f"available steps: {ckpt.complete_steps(state.model_dir)}"
            )
        return ckpt.step_dir(state.model_dir, ref)

    # --- deleting -----------------------------------------------------------------------

    async def delete_checkpoint_files(
        self, run: RunRef, steps_to_keep: Collection[int]
    ) -> list[int]:
        """Delete every step folder not kept, except the latest step and pinned steps, and
        stop serving the deleted steps. Returns the steps deleted, ascending.

        A step is unserved first, which waits for the requests already sampling it, and only
        then is its folder deleted: an engine that reads a step's adapter again while
        sampling (vLLM, after evicting it from its cache) never finds the folder gone."""
        from . import checkpoints as ckpt

        state = self._require(run)
        async with state.lock:
            protected = set(steps_to_keep) | set(self.pinned_steps(run))
            doomed = ckpt.unkept(state.model_dir, protected)
            await self._pool.unserve_steps(state.serving, state.spec.served_name, doomed)
            return await asyncio.to_thread(ckpt.delete_steps, state.model_dir, doomed)

    async def export(
        self, run: RunRef, out_dir: str, *, step: int | None = None, format: ExportFormat = "merged"
    ) -> str:
        """Write a step as a PEFT adapter or a merged Hugging Face model (export.py). The step
        is pinned meanwhile, so a concurrent `delete_checkpoint_files` keeps it."""
        from . import checkpoints as ckpt
        from .export import export_checkpoint

        state = self._require(run)
        chosen = step if step is not None else (ckpt.latest_step(state.model_dir) or 0)
        async with self.pin(run, chosen):
            path = await asyncio.to_thread(
                export_checkpoint, state.model_dir, out_dir, step=chosen, format=format
            )
        return str(path)

    @contextlib.asynccontextmanager
    async def serve_checkpoint(
        self, model: ModelSpec, step: int | None
    ) -> AsyncIterator[ServedCheckpoint]:
        """Serve a kept step as `{name}@{step}` while the block runs (CheckpointServing): on
        the run's own engine when it is registered here, else on an engine for its base model
        that trains nothing, writes nothing and takes no lease. The step is pinned meanwhile;
        it stays loaded until the backend closes or deletes it."""
        from . import checkpoints as ckpt

        self._runs.check_open()
        run = model.run
        opened = self._runs.get(run)
        model_dir = (
            opened.model_dir
            if opened is not None
            else backend_run_dir(model, self._path, "LocalBackend")
        )
        steps = await asyncio.to_thread(ckpt.complete_steps, model_dir)
        chosen = step if step is not None else (steps[-1] if steps else None)
        if chosen is None or chosen not in steps:
            have = ", ".join(map(str, steps)) if steps else "none"
            asked = "any step" if step is None else f"step {step}"
            raise InvalidInputError(
                f"{run} has no checkpoint at {asked} in {ckpt.checkpoints_dir(model_dir)} "
                f"(complete checkpoints: {have})"
            )
        async with self.pin(run, chosen):
            serving = opened.serving if opened is not None else await self._reader(model)
            served = opened.spec.served_name if opened is not None else model.served_name
            name = step_name(served, chosen)
            if not serving.engine.is_served(name):
                source = str(ckpt.step_dir(model_dir, chosen))
                await self._pool.serve_step(serving, run, served, chosen, source, latest=False)
            yield ServedCheckpoint(
                endpoint=self._pool.endpoint(serving, served), step=chosen, model_name=name
            )

    async def _reader(self, model: ModelSpec) -> Serving:
        """The engine serving `model`'s run without a trainer (started on first use)."""
        reader = self._readers.get(model.run)
        serving = reader[0] if reader is not None else None
        if serving is not None and serving.key == model.base_model:
            return serving
        if not model.base_model:
            raise InvalidInputError(
                f"model {model.run} has no base_model; LocalBackend serves a checkpoint on the "
                "base model it was trained from"
            )
        if serving is not None:  # the same run on another base model: a separate engine
            self._pool.release(serving, model.served_name)
        serving = await self._serving_for(model)
        self._readers[model.run] = (serving, model.served_name)
        return serving

    def _reader_for(self, spec: ModelSpec) -> Serving | None:
        """A run served here read-only and now registered: its engine serves it from now on."""
        reader = self._readers.get(spec.run)
        if reader is None or reader[0].key != spec.base_model:
            return None
        del self._readers[spec.run]
        return reader[0]

    def pinned_steps(self, run: RunRef) -> list[int]:
        """Steps that must not be deleted now: leased with `pin`, or a running KL reference."""
        return sorted(step for step, count in self._pins.get(run, Counter()).items() if count > 0)

    @contextlib.asynccontextmanager
    async def pin(self, run: RunRef, step: int) -> AsyncIterator[None]:
        """Keep `step` from being deleted while the block runs (e.g. an evaluation of it)."""
        self._pin(run, step, +1)
        try:
            yield
        finally:
            self._pin(run, step, -1)

    def training_tensors(self, run: RunRef) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """The run's live trainable weights and optimizer tensors, copied to the CPU and keyed
        like `model.safetensors` and `optimizer.safetensors`: a resumed run can then be checked
        against the checkpoint it claims to have loaded without reaching into private state."""
        return self._require(run).trainer.training_tensors()

    def rank_processes(self, run: RunRef) -> dict[int, int]:
        """This machine's trainer rank processes for the run (rank -> pid); empty when the run
        trains in this process or its ranks are not running (for monitoring, and for tests
        that stop a rank on purpose)."""
        trainer: Any = self._require(run).trainer
        supervisor = getattr(trainer, "supervisor", None)
        return supervisor.rank_pids() if supervisor is not None else {}

    def rank_stacks(self, run: RunRef) -> str | None:
        """The run's trainer ranks' thread stacks (the hang watchdog's report); None when the
        run trains in this process or has no ranks running."""
        try:
            trainer: Any = self._require(run).trainer
        except Exception:
            return None
        supervisor = getattr(trainer, "supervisor", None)
        return supervisor.rank_stacks() if supervisor is not None else None

    # --- internals ----------------------------------------------------------------------

    def _pin(self, run: RunRef, step: int | None, delta: int) -> None:
        if step is not None:
            self._pins.setdefault(run, Counter())[step] += delta

    async def _serve(self, run: _Run, step: int) -> None:
        from . import checkpoints as ckpt

        source = str(ckpt.step_dir(run.model_dir, step))
        await self._pool.serve_step(run.serving, run.spec.run, run.spec.served_name, step, source)

    def _require(self, run: RunRef) -> _Run:
        return self._runs.require(run)

    def _model_dir(self, run: RunRef) -> Path:
        return self._require(run).model_dir

    def _device_name(self) -> str:
        if self._device is not None:
            return self._device
        try:
            import torch
        except ImportError as exc:
            raise MissingExtraError("torch", "local") from exc
        return "cuda" if torch.cuda.is_available() else "cpu"


def training_mode(
    kind: Literal["torch", "vllm"], full_finetune: bool | None, device: str | None, lora_rank: int
) -> bool | None:
    """The trainer's `full_finetune` for the engine that serves the run: the vLLM engine serves
    LoRA steps only, so there the size rule (full fine-tuning below 50M parameters) gives way
    to LoRA, and `full_finetune=True` is refused."""
    if kind != "vllm":
        return full_finetune
    _check_vllm_choice(device, full_finetune, lora_rank)
    return False


def _check_vllm_choice(device: str | None, full_finetune: bool | None, lora_rank: int) -> None:
    """What the vLLM engine cannot do, refused in one line: a CPU device, full fine-tuning
    (vLLM serves LoRA steps only), a LoRA rank above vLLM's largest."""
    from ..inference.vllm_args import device_ids, lora_rank_slot

    device_ids(device)
    if full_finetune is True:
        raise InvalidInputError(
            'full_finetune=True with engine="vllm": vLLM serves LoRA steps only; leave '
            'full_finetune unset (LoRA is used) or use engine="torch" for full fine-tuning'
        )
    lora_rank_slot(lora_rank)


def _memory_settings(
    micro_batch_tokens: int, chunk: int | None, checkpointing: object
) -> dict[str, Any]:
    """The trainer's memory knobs, or a one-line error naming the bad one."""
    for name, value in (
        ("micro_batch_tokens", micro_batch_tokens),
        ("logprob_calculation_chunk_size", chunk),
    ):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise InvalidInputError(
                f"LocalBackend({name}=...) must be a whole number >= 1, got {value!r}"
            )
    if not (isinstance(checkpointing, bool) or checkpointing == "auto"):
        raise InvalidInputError(
            f"LocalBackend(gradient_checkpointing=...) must be True, False or 'auto', got "
            f"{checkpointing!r}"
        )
    found: dict[str, Any] = {
        "micro_batch_tokens": micro_batch_tokens,
        "gradient_checkpointing": checkpointing,
    }
    if chunk is not None:
        found["logprob_calculation_chunk_size"] = chunk
    return found


def _sleeper(engine: object) -> VllmEngine | None:
    """The engine, when it frees its GPU memory while a step trains (vLLM's sleep mode)."""
    from ..inference.vllm_engine import VllmEngine

    if isinstance(engine, VllmEngine) and engine.settings.sleep_level > 0:
        return engine
    return None


def _save_failed(run: RunRef, step: int, model_dir: Path, exc: OSError) -> ArthexError:
    """A full or failing disk while saving: say which step was lost and where the run stands
    (publish removed its temp folder, and the trainer is reloaded from the latest files)."""
    if isinstance(exc, DiskFullError):
        return DiskFullError(f"{exc} (the run stays at step {step}; this update is discarded)")
    return BackendError(
        f"could not save checkpoint {step + 1} of {run} under {model_dir}: {exc}. The run stays "
        f"at step {step} with its files intact and this update discarded; free disk space (or "
        "fix the disk) and train again"
    )


if TYPE_CHECKING:
    _fits: type[TrainingBackend] = LocalBackend
    _keeps_metrics: type[StepMetricsSource] = LocalBackend
    _fine_tunes: type[SupervisedFineTuning] = LocalBackend
    _exports: type[ModelExporter] = LocalBackend
    _serves_checkpoints: type[CheckpointServing] = LocalBackend
