"""LocalBackend: trains on this machine's CPU or GPU and serves every kept step over HTTP.

One backend owns, per base model, one sampling engine and one OpenAI-compatible server on
127.0.0.1 (shared by the runs of that base model), and per run one trainer kept in memory
with its optimizer. Training runs on a worker thread, so the event loop that also runs the
inference server keeps answering while a step trains.

`full_finetune=None` fine-tunes fully below 50M parameters and uses LoRA above (see
trainer.py). Served steps: after each train call the new step is loaded as `{name}@{step}`
and `{name}` points at it; at register only the latest step is loaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections import Counter
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs

from ...core.config import TrainConfig
from ...core.errors import (
    BackendError,
    InvalidInputError,
    MissingExtraError,
    NotRegisteredError,
)
from ...core.identity import ModelSpec, RunRef
from ...core.trajectories import TrajectoryGroup
from ...core.validation import check_training_groups
from ...ports.training_backend import (
    ALL_CAPABILITIES,
    BackendCapabilities,
    Capability,
    InferenceEndpoint,
    StepMetricsSource,
    TrainingBackend,
)

if TYPE_CHECKING:
    from torch import Tensor

    from ..inference.engine import SamplingEngine
    from ..inference.server import InferenceServer
    from .trainer_protocol import Trainer

EngineKind = Literal["auto", "torch", "vllm"]


@attrs.define
class _Serving:
    """One engine and the server in front of it, shared by runs of one base model."""

    base_model: str
    engine: SamplingEngine
    server: InferenceServer
    base_url: str
    names: set[str] = attrs.field(factory=set)


@attrs.define
class _Run:
    spec: ModelSpec
    model_dir: Path
    trainer: Trainer
    serving: _Serving
    lock: asyncio.Lock = attrs.field(factory=asyncio.Lock)


class LocalBackend:
    """Train with torch on this machine; serve `{name}` and `{name}@{step}` over HTTP.

    `path` overrides the model's `base_path` (runs live in `{base}/{project}/models/{name}`).
    `engine` picks the sampling engine ("auto": vLLM when importable with a GPU, else torch).

    `world_size=N` trains each run on N rank processes with its model sharded by FSDP2 (GPUs
    0..N-1 when there are that many, else the CPU); `devices=[...]` names this machine's rank
    devices instead. A `world_size` above the local ranks adds ranks on other machines, which
    meet this one at `master_addr:master_port` (or MASTER_ADDR/MASTER_PORT): see
    docs/backends/local.md. Without either, training runs in this process.
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
    ) -> None:
        from .distributed.world import WorldRequest

        self._world = WorldRequest(world_size, devices, master_addr, master_port)
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
        self._runs: dict[RunRef, _Run] = {}
        self._servings: list[_Serving] = []
        self._pins: dict[RunRef, Counter[int]] = {}
        self._register_lock: asyncio.Lock | None = None
        self._closed = False

    @property
    def capabilities(self) -> BackendCapabilities:
        return ALL_CAPABILITIES

    # --- lifecycle ----------------------------------------------------------------------

    async def register(self, model: ModelSpec) -> InferenceEndpoint | None:
        """Load (or create, as step 0 = the base weights) the run's latest checkpoint, start
        the engine and server if this base model has none yet, and serve the latest step."""
        if self._closed:
            raise BackendError("this LocalBackend is closed; create a new one")
        if not model.trainable:
            return None
        if not model.base_model:
            raise InvalidInputError(
                f"model {model.run} has no base_model; LocalBackend needs a Hugging Face causal "
                "LM directory or hub id"
            )
        if self._register_lock is None:
            self._register_lock = asyncio.Lock()
        async with self._register_lock:
            run = self._runs.get(model.run)
            if run is None:
                run = await self._open_run(model)
                self._runs[model.run] = run
            return InferenceEndpoint(
                base_url=run.serving.base_url, api_key=self._key(), model_name=model.run.name
            )

    async def _open_run(self, spec: ModelSpec) -> _Run:
        from . import checkpoints as ckpt
        from .trainer import DEFAULT_LORA_TARGETS, TrainerSettings
        from .trainer_protocol import make_trainer

        assert spec.base_model is not None
        model_dir = Path(self._path or spec.base_path) / spec.run.project / "models" / spec.run.name
        model_dir.mkdir(parents=True, exist_ok=True)
        ckpt.remove_stale_temps(model_dir)
        settings = TrainerSettings(
            base_model=spec.base_model,
            device=self._device_name(),
            full_finetune=self._full_finetune,
            lora_rank=self._lora_rank,
            lora_alpha=self._lora_alpha,
            lora_target_modules=self._lora_targets or DEFAULT_LORA_TARGETS,
            seed=self._seed,
            adam_betas=self._adam_betas,
            weight_decay=self._weight_decay,
        )
        trainer = make_trainer(settings, self._world.plan(self._device), runs_open=len(self._runs))
        try:
            latest = ckpt.latest_step(model_dir)
            source = ckpt.step_dir(model_dir, latest) if latest is not None else None
            await asyncio.to_thread(trainer.load, source)
            if latest is None:
                latest = 0
                await asyncio.to_thread(
                    ckpt.publish, model_dir, 0, trainer.write_checkpoint, trainer.trainer_state()
                )
            serving = await self._serving_for(spec)
        except BaseException:
            await asyncio.to_thread(trainer.close)
            raise
        run = _Run(spec=spec, model_dir=model_dir, trainer=trainer, serving=serving)
        await self._serve(run, latest)
        return run

    async def _serving_for(self, spec: ModelSpec) -> _Serving:
        """The engine of this base model, unless another run of the same name already uses
        it (names are the engine's keys): then a second one."""
        assert spec.base_model is not None
        name = spec.run.name
        for serving in self._servings:
            if serving.base_model == spec.base_model and name not in serving.names:
                serving.names.add(name)
                return serving
        try:
            from ..inference.select import make_engine
            from ..inference.server import InferenceServer
        except ImportError as exc:
            raise MissingExtraError(exc.name or "torch", "local") from exc
        engine = make_engine(spec.base_model, kind=self._engine_kind, device=self._device)
        await engine.start()
        server = InferenceServer(engine, api_key=self._key())
        try:
            base_url = await server.start()
        except BaseException:
            await engine.close()
            raise
        serving = _Serving(
            base_model=spec.base_model, engine=engine, server=server, base_url=base_url
        )
        serving.names.add(name)
        self._servings.append(serving)
        return serving

    async def close(self) -> None:
        """Stop every server and engine and drop the trainers; the files stay."""
        self._closed = True
        servings, self._servings = self._servings, []
        runs = list(self._runs.values())
        self._runs.clear()
        for run in runs:
            await asyncio.to_thread(run.trainer.close)
        for serving in servings:
            with contextlib.suppress(Exception):
                await serving.server.stop()
            await serving.engine.close()

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

    # --- training -----------------------------------------------------------------------

    async def train(
        self, run: RunRef, groups: Sequence[TrajectoryGroup], config: TrainConfig
    ) -> AsyncIterator[Mapping[str, float]]:
        """Pack, train (one metrics dict per optimizer step), save checkpoint N+1, serve it.

        A batch with nothing trainable copies checkpoint N to N+1 and yields one dict of zero
        counts. Two calls on one run are serialised; the second trains from the first's step.
        If training fails or the caller stops iterating early, the trainer is reloaded from
        the latest checkpoint, so memory never drifts from disk."""
        from . import checkpoints as ckpt
        from .packing import pack

        state = self._require(run)
        groups = check_training_groups(groups, config)
        self.capabilities.require(f"loss:{config.loss_fn}", "LocalBackend")
        if config.kl_penalty_coef > 0:
            self.capabilities.require(Capability.KL_PENALTY, "LocalBackend")
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
                    await asyncio.to_thread(
                        ckpt.copy_step, state.model_dir, step, step + 1, [nothing]
                    )
                except OSError as exc:
                    raise _save_failed(run, step, state.model_dir, exc) from exc
                await self._serve(state, step + 1)
                yield nothing
                return
            finished = False
            pinned = config.kl_penalty_reference_step if config.kl_penalty_coef > 0 else None
            self._pin(run, pinned, +1)
            try:
                steps = trainer.train(batch, config, reference=reference, extra_metrics=counts)
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
                    raise _save_failed(run, step, state.model_dir, exc) from exc
                finished = True
            finally:
                self._pin(run, pinned, -1)
                if not finished:
                    latest = ckpt.latest_step(state.model_dir)
                    source = ckpt.step_dir(state.model_dir, latest) if latest is not None else None
                    await asyncio.to_thread(trainer.load, source)
            await self._serve(state, step + 1)

    async def step_metrics(self, run: RunRef, step: int) -> list[dict[str, float]] | None:
        """The metrics `train` yielded for the update that made `step`, from its checkpoint
        (so the frontend can rebuild a history row a crash lost)."""
        from . import checkpoints as ckpt

        state = self._require(run)
        if step not in ckpt.complete_steps(state.model_dir):
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
        stop serving the deleted steps. Returns the steps deleted, ascending."""
        from . import checkpoints as ckpt

        state = self._require(run)
        async with state.lock:
            latest = ckpt.latest_step(state.model_dir)
            protected = set(steps_to_keep) | set(self.pinned_steps(run))
            if latest is not None:
                protected.add(latest)
            doomed = [s for s in ckpt.step_folders(state.model_dir) if s not in protected]
            deleted = await asyncio.to_thread(ckpt.delete_steps, state.model_dir, doomed)
            engine: Any = state.serving.engine
            for step in deleted:
                name = run.inference_name(step)
                if engine.is_served(name):
                    await engine.unload(name)
            return deleted

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

    # --- internals ----------------------------------------------------------------------

    def _pin(self, run: RunRef, step: int | None, delta: int) -> None:
        if step is not None:
            self._pins.setdefault(run, Counter())[step] += delta

    async def _serve(self, run: _Run, step: int) -> None:
        from . import checkpoints as ckpt

        engine: Any = run.serving.engine
        name = run.spec.run.inference_name(step)
        try:
            await engine.load(name, str(ckpt.step_dir(run.model_dir, step)))
            engine.alias(run.spec.run.name, name)
        except Exception as exc:
            raise BackendError(
                f"checkpoint {step} of {run.spec.run} is saved but could not be served: {exc}"
            ) from exc

    def _require(self, run: RunRef) -> _Run:
        if self._closed:
            # close() forgets every run; "not registered" would send the caller to register,
            # which a closed backend refuses
            raise BackendError(
                f"this LocalBackend is closed, so it no longer trains or serves {run}; create a "
                "new LocalBackend and `await model.register(backend)` to continue from the "
                "latest checkpoint"
            )
        state = self._runs.get(run)
        if state is None:
            raise NotRegisteredError(
                f"model {run} is not registered with this LocalBackend; call "
                "`await model.register(backend)` first"
            )
        return state

    def _model_dir(self, run: RunRef) -> Path:
        return self._require(run).model_dir

    def _key(self) -> str:
        if self._api_key is None:
            # A loopback server is still reachable by every local user: never leave it open.
            self._api_key = secrets.token_urlsafe(24)
        return self._api_key

    def _device_name(self) -> str:
        if self._device is not None:
            return self._device
        try:
            import torch
        except ImportError as exc:
            raise MissingExtraError("torch", "local") from exc
        return "cuda" if torch.cuda.is_available() else "cpu"


def _save_failed(run: RunRef, step: int, model_dir: Path, exc: OSError) -> BackendError:
    """A full or failing disk while saving: say which step was lost and where the run stands
    (publish removed its temp folder, and the trainer is reloaded from the latest files)."""
    return BackendError(
        f"could not save checkpoint {step + 1} of {run} under {model_dir}: {exc}. The run stays "
        f"at step {step} with its files intact and this update discarded; free disk space (or "
        "fix the disk) and train again"
    )


if TYPE_CHECKING:
    _fits: type[TrainingBackend] = LocalBackend
    _keeps_metrics: type[StepMetricsSource] = LocalBackend
