"""TinkerBackend: trains LoRA adapters on the Tinker service through its pinned SDK, and serves
rollouts through arthex's OpenAI-compatible server, sampling on Tinker.

One `train` call is one optimizer step: every trained Choice becomes a `Datum` (see datums.py),
`forward_backward` and `optim_step` are submitted together and both awaited, then the new step
`n` is saved as sampler weights `step_{n:06d}` (what serves it) and, every `save_state_every`
steps, as full state (weights and optimizer, what a restart resumes from). The map from steps
to `tinker://` paths lives in `{model_dir}/tinker-run.json` (record.py).

Choices where the reference was silent:
- Loss. `TrainConfig.loss_fn` defaults to "cispo" for every backend, but Tinker's own default is
  importance sampling. The backend's `loss_fn` (default "importance_sampling") is used when the
  config asks for "cispo" (its default, which cannot be told apart from an explicit choice);
  "ppo" and "importance_sampling" in the config always win. For CISPO on Tinker create
  `TinkerBackend(loss_fn="cispo")` (or `loss_fn=None`: always follow the config). Clip bounds
  map to Tinker's ratio thresholds: `[1 - clip_low, 1 + clip_high]`. "dro" (no TrainConfig
  name means it) and a custom loss (a callable, core.config.CustomLoss, run through
  `forward_backward_custom`) are chosen the same way, through the backend's `loss_fn`;
  the backend's `loss_fn_config` goes to Tinker over the thresholds (dro needs its `beta`).
- Tokens are summed by Tinker's losses; advantages are not normalised by length, as in
  Tinker's cookbook. `loss/train` is reported per completion token, like the local backend's.
- A restart (or a failed call that may have left the service ahead of the record) resumes from
  the newest saved state. With `save_state_every=1` (the default) that is the latest step; with
  k > 1 the run rewinds to the newest state's step, and the later steps' checkpoints are
  deleted (a warning says so). Deleting checkpoints never removes the newest state.
- Nothing trainable still advances the step: the unchanged weights are saved as the new step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import weakref
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ...core.backend_train import BackendTrainEntry
from ...core.config import CustomLoss, TrainConfig
from ...core.conversations import Conversation
from ...core.errors import (
    ArthexError,
    BackendError,
    CorruptDataError,
    InvalidInputError,
    MissingExtraError,
    UnsupportedCapability,
)
from ...core.identity import ModelSpec, RunRef
from ...core.identity import step_name as served_step_name
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
    SupervisedFineTuning,
    TrainingBackend,
)
from ..inference.engine_pool import RunTable, Serving, ServingPool
from ..layout import CHECKPOINTS, backend_run_dir
from .art_state import (
    ArtTinkerState,
    Listed,
    adopted_record,
    art_checkpoints,
    read_art_checkpoint_folders,
    read_art_state,
)
from .clients import (
    RestClientLike,
    SamplingClientLike,
    SdkClients,
    ServiceClientLike,
    TinkerClients,
    TinkerNotFound,
    TrainingClientLike,
    call,
    finish,
    release,
    submit,
)
from .record import Checkpoint, RunRecord, read_record, step_name, training_run_of, write_record
from .step import TinkerLoss, check_loss_config, kl_penalty, optimize

if TYPE_CHECKING:
    from tinker import types

    from ..inference.chat import ChatTokenizer
    from .datums import Batch
    from .engine import TinkerSamplingEngine

logger = logging.getLogger(__name__)

_LOSSES: tuple[str, ...] = ("importance_sampling", "ppo", "cispo", "dro")


@attrs.define
class _Run:
    spec: ModelSpec
    model_dir: Path
    record: RunRecord
    training: TrainingClientLike | None
    serving: Serving | None  # None when the backend serves nothing (serve=False)
    lock: asyncio.Lock = attrs.field(factory=asyncio.Lock)
    references: dict[str, SamplingClientLike] = attrs.field(factory=dict)


class TinkerBackend(BackendTrainEntry):
    """Train on Tinker; serve `{name}` and `{name}@{step}` from an OpenAI-compatible server.

    `base_url`/`api_key` default to the SDK's own lookup (`TINKER_BASE_URL`, `TINKER_API_KEY`).
    `path`, when given, must name the model's `base_path` (a run lives in one directory:
    `layout.backend_run_dir`). `tokenizer` is where the chat tokenizer is loaded
    from when the Tinker model name is not a loadable Hugging Face id or directory.
    `serve=False` trains without starting an inference server (`register` returns None).
    `clients` replaces the SDK (tests). `timeout_s` bounds every wait on the service.
    """

    def __init__(
        self,
        path: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        lora_rank: int = 8,
        seed: int | None = None,
        loss_fn: TinkerLoss | CustomLoss | None = "importance_sampling",
        loss_fn_config: Mapping[str, float] | None = None,
        save_state_every: int = 1,
        tokenizer: str | None = None,
        adam_betas: tuple[float, float] = (0.9, 0.95),
        adam_eps: float = 1e-8,
        weight_decay: float = 0.0,
        timeout_s: float | None = None,
        inference_api_key: str | None = None,
        serve: bool = True,
        clients: TinkerClients | None = None,
    ) -> None:
        if isinstance(lora_rank, bool) or not isinstance(lora_rank, int) or lora_rank < 1:
            raise InvalidInputError(f"lora_rank must be an integer >= 1, got {lora_rank!r}")
        if (
            isinstance(save_state_every, bool)
            or not isinstance(save_state_every, int)
            or save_state_every < 1
        ):
            raise InvalidInputError(
                f"save_state_every must be an integer >= 1, got {save_state_every!r}"
            )
        if isinstance(loss_fn, str) and loss_fn not in _LOSSES:
            raise InvalidInputError(
                f"loss_fn must be one of {_LOSSES}, a callable or None, got {loss_fn!r}"
            )
        if loss_fn is not None and not isinstance(loss_fn, str) and not callable(loss_fn):
            raise InvalidInputError(
                f"loss_fn must be one of {_LOSSES}, a callable or None, got {loss_fn!r}"
            )
        if isinstance(loss_fn, str):
            self._loss_fn_config = check_loss_config(loss_fn, loss_fn_config or {})
        elif loss_fn_config:
            raise InvalidInputError(
                "loss_fn_config is for one of Tinker's losses; give loss_fn one of "
                f"{_LOSSES}, not {'a callable' if loss_fn is not None else 'None'}"
            )
        else:
            self._loss_fn_config = {}
        if timeout_s is not None and not timeout_s > 0:
            raise InvalidInputError(f"timeout_s must be > 0 or None, got {timeout_s!r}")
        self._path = path
        self._clients = clients
        self._base_url = base_url
        self._api_key = api_key
        self._lora_rank = lora_rank
        self._seed = seed
        self._loss_fn = loss_fn
        self._save_state_every = save_state_every
        self._tokenizer = tokenizer
        self._adam_betas = adam_betas
        self._adam_eps = adam_eps
        self._weight_decay = weight_decay
        self._timeout_s = timeout_s
        self._serve = serve
        self._service_client: ServiceClientLike | None = None
        self._release_service: weakref.finalize[Any, Any] | None = None
        self._rest_client: RestClientLike | None = None
        self._runs: RunTable[_Run] = RunTable("TinkerBackend")
        self._pool = ServingPool("TinkerBackend", api_key=inference_api_key, extra="tinker")
        self._chats: dict[str, ChatTokenizer] = {}
        # runs served here without being trained: their engine, and the name they are served as
        self._readers: dict[RunRef, tuple[Serving, str]] = {}

    @property
    def capabilities(self) -> BackendCapabilities:
        lacking: set[str] = set()
        if not self._serve:
            lacking |= {str(Capability.INFERENCE), str(Capability.SERVE_CHECKPOINT)}
        return BackendCapabilities(ALL_CAPABILITIES.names - lacking)

    # --- lifecycle ----------------------------------------------------------------------

    async def register(self, model: ModelSpec) -> InferenceEndpoint | None:
        """Open the run on Tinker: resume it from its newest saved state when the model
        directory has a record, else continue the run ART's Tinker backends left there
        (art_state.py), else create a LoRA training client and save step 0; then serve the
        latest step."""
        self._runs.check_open()
        if not model.trainable:
            return None
        if not model.base_model:
            raise InvalidInputError(
                f"model {model.run} has no base_model; TinkerBackend needs a model Tinker serves"
            )
        backend_run_dir(model, self._path, "TinkerBackend")  # refused before anything starts
        run = await self._runs.open(model.run, lambda: self._open_run(model))
        if run.serving is None:
            return None
        return self._pool.endpoint(run.serving, run.spec.served_name)

    async def _open_run(self, spec: ModelSpec) -> _Run:
        assert spec.base_model is not None
        model_dir = backend_run_dir(spec, self._path, "TinkerBackend")
        record = await asyncio.to_thread(read_record, model_dir)
        art, folders = None, None
        if record is None:  # a run ART left here? (art_state.py)
            art = await asyncio.to_thread(read_art_state, model_dir)
            folders = await asyncio.to_thread(read_art_checkpoint_folders, model_dir)
        model_dir.mkdir(parents=True, exist_ok=True)
        adopted = None
        if art is not None or folders is not None:
            adopted = await self._adopt(spec, model_dir, art, folders)
        if adopted is not None:
            training, record = await self._resume(adopted, model_dir)
        elif record is None:
            training = await call(
                f"creating a LoRA training client for {spec.base_model!r}",
                self._timeout_s,
                self._service().create_lora_training_client,
                spec.base_model,
                rank=self._lora_rank,
                seed=self._seed,
            )
            first = await self._save(training, 0, with_state=True)
            record = RunRecord(
                base_model=spec.base_model,
                lora_rank=self._lora_rank,
                training_run_id=training.model_id,
                step=0,
                checkpoints=(first,),
            )
            await asyncio.to_thread(write_record, model_dir, record)
        else:
            self._check_record(spec, record, model_dir)
            training, record = await self._resume(record, model_dir)
        serving = await self._serving_for(spec) if self._serve else None
        run = _Run(
            spec=spec, model_dir=model_dir, record=record, training=training, serving=serving
        )
        try:  # a deletion a crash interrupted; else the next deletion finishes it
            await self._finish_deleting(run)
        except ArthexError as exc:
            logger.warning("%s: could not finish deleting %s: %s", model_dir, record.deleting, exc)
        try:
            await self._serve_step(run, record.step)
        except BaseException:
            if serving is not None:  # a retried register may take the name on it again
                self._pool.release(serving, spec.served_name)
            raise
        return run

    async def _adopt(
        self,
        spec: ModelSpec,
        model_dir: Path,
        art: ArtTinkerState | None,
        folders: tuple[dict[int, str], dict[int, str]] | None,
    ) -> RunRecord | None:
        """arthex's record of the run ART left (art_state.py), at the step ART would resume
        from: ART's TinkerNativeBackend's (state.json's run ids, listed on the service), else
        ART's TinkerBackend's (checkpoints/*/info.yaml). None when ART saved no training state
        to resume from (ART then starts over at step 0 too). Nothing is written here."""
        found: tuple[dict[int, str], dict[int, str], Path] | None = None
        if art is not None:
            training, sampler = await self._list_art_runs(art)
            if training:
                found = (training, sampler, art.path)
            elif folders is None:
                logger.warning(
                    "%s names Tinker runs %s but none has a training checkpoint (ART saves one "
                    "only when it trains with save_checkpoint=True): starting a new run at "
                    "step 0, as ART would",
                    art.path,
                    list(art.run_ids),
                )
        if found is None and folders is not None:
            found = (*folders, model_dir / CHECKPOINTS)
        if found is None:
            return None
        training, sampler, source = found
        step = max(training)
        run_id = training_run_of(training[step])
        info = await call(
            f"reading training run {run_id} ({source})",
            self._timeout_s,
            (await self._rest()).get_training_run,
            run_id,
        )
        if info.base_model != spec.base_model:
            raise InvalidInputError(
                f"{source}: ART trained Tinker run {run_id} from base model "
                f"{info.base_model!r}, not {spec.base_model!r}; use the same base_model"
            )
        if info.lora_rank != self._lora_rank:
            raise InvalidInputError(
                f"{source}: ART trained Tinker run {run_id} with LoRA rank {info.lora_rank}, "
                f"but the backend has lora_rank={self._lora_rank}; use "
                f"lora_rank={info.lora_rank} for it"
            )
        reached = art.latest_step if art is not None and source == art.path else None
        if reached is not None and reached != step:
            logger.warning(
                "%s: ART reached step %d but saved its newest training state at step %d; "
                "continuing from step %d, as ART would",
                source,
                reached,
                step,
                step,
            )
        logger.info("%s: continuing the Tinker run ART left at step %d", source, step)
        return adopted_record(
            training,
            sampler,
            base_model=spec.base_model or "",
            lora_rank=self._lora_rank,
            training_run_id=run_id,
        )

    async def _list_art_runs(self, art: ArtTinkerState) -> tuple[dict[int, str], dict[int, str]]:
        """The training and sampler checkpoints of ART's run ids, listed on the service."""
        rest = await self._rest()
        listings = []
        for run_id in art.run_ids:
            try:
                response = await call(
                    f"listing the checkpoints of training run {run_id} ({art.path})",
                    self._timeout_s,
                    rest.list_checkpoints,
                    run_id,
                )
            except TinkerNotFound:
                logger.warning("%s: Tinker has no training run %s; skipped", art.path, run_id)
                continue
            checkpoints = [
                Listed(c.checkpoint_id, c.checkpoint_type, c.tinker_path)
                for c in response.checkpoints
            ]
            listings.append((run_id, checkpoints))
        return art_checkpoints(listings)

    def _check_record(self, spec: ModelSpec, record: RunRecord, model_dir: Path) -> None:
        if record.base_model != spec.base_model:
            raise InvalidInputError(
                f"{model_dir} was trained from base model {record.base_model!r}, not "
                f"{spec.base_model!r}; use the same base_model or another model name"
            )
        if record.lora_rank != self._lora_rank:
            raise InvalidInputError(
                f"{model_dir} was trained with LoRA rank {record.lora_rank}, but the backend "
                f"has lora_rank={self._lora_rank}; use lora_rank={record.lora_rank} for it"
            )

    async def _resume(
        self, record: RunRecord, model_dir: Path
    ) -> tuple[TrainingClientLike, RunRecord]:
        """A new training client from the newest saved state; the record follows it."""
        point = record.resume_point()
        if point is None or point.state_path is None:
            raise CorruptDataError(
                f"{model_dir / 'tinker-run.json'} names no saved state to resume from"
            )
        training = await call(
            f"resuming from {point.state_path}",
            self._timeout_s,
            self._service().create_training_client_from_state_with_optimizer,
            point.state_path,
        )
        if point.step < record.step:
            later = [c for c in record.checkpoints if c.step > point.step]
            logger.warning(
                "%s: the newest saved state is step %d but the run reached step %d; resuming "
                "from step %d and deleting the checkpoints of steps %s",
                model_dir,
                point.step,
                record.step,
                point.step,
                [c.step for c in later],
            )
            for checkpoint in later:
                for path in (checkpoint.sampler_path, checkpoint.state_path):
                    if path is not None:
                        with contextlib.suppress(ArthexError):  # best effort: warned above
                            await self._delete_path(path)
            kept = [c for c in record.checkpoints if c.step <= point.step]
            record = attrs.evolve(record.replacing(kept), step=point.step)
        record = attrs.evolve(record, training_run_id=training.model_id)
        latest = record.checkpoint(record.step)
        if latest is None or latest.sampler_path is None:  # its sampler weights were deleted
            fresh = await self._save(training, record.step, with_state=False)
            record = record.with_checkpoint(
                attrs.evolve(fresh, state_path=latest.state_path if latest else None)
            )
        await asyncio.to_thread(write_record, model_dir, record)
        return training, record

    async def close(self) -> None:
        """Stop serving and finish the Tinker session; the records and checkpoints stay."""
        if self._runs.closed:
            return
        self._runs.close()
        self._readers.clear()
        try:
            await self._pool.close()
            service, self._service_client = self._service_client, None
            if service is not None:
                try:
                    await call("finishing the session", 30.0, service.close, "success")
                except BackendError as exc:
                    logger.warning("could not finish the Tinker session: %s", exc)
                finally:  # a session not finished still stops its heartbeat here
                    if self._release_service is not None:
                        self._release_service.detach()
                    await asyncio.to_thread(release, service, 10.0)
        finally:
            await release_leases(self)  # the models registered here give their runs back

    async def forget_run(self, run: RunRef) -> None:
        """Drop `run` (RunForgetting; the training server calls it when the run's model is
        deleted): nothing of it is served any more and its training client is let go, so the
        next `register` of the run opens it afresh from its record (a new Tinker run when the
        record is gone). A call in flight on the run ends first; the service's checkpoints
        and the record stay; a run not open here is a no-op."""
        if self._runs.closed:
            return
        state = await self._runs.forget(run)
        if state is not None:
            async with state.lock:
                if state.serving is not None:
                    await self._pool.forget(state.serving, state.spec.served_name)
                state.training = None
                state.references.clear()
        reader = self._readers.pop(run, None)
        if reader is not None:
            await self._pool.forget(*reader)

    async def __aenter__(self) -> TinkerBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- steps --------------------------------------------------------------------------

    async def get_step(self, run: RunRef) -> int:
        return self._require(run).record.step

    async def checkpoint_steps(self, run: RunRef) -> list[int]:
        """Steps whose sampler weights the service still lists; those it expired are recorded
        as expired (record.py)."""
        state = self._require(run)
        async with state.lock:
            await self._note_expired(state)
            return state.record.sampler_steps()

    async def _note_expired(self, state: _Run) -> list[int]:
        """Drop from the record what the service no longer lists (a TTL expired it), before
        anything is served or deleted by it; returns the steps newly expired."""
        record = state.record
        listed: set[str] = set()
        paths = {p for c in record.checkpoints for p in (c.sampler_path, c.state_path) if p}
        for run_id in sorted({training_run_of(p) for p in paths}):
            try:
                response = await call(
                    f"listing the checkpoints of training run {run_id}",
                    self._timeout_s,
                    (await self._rest()).list_checkpoints,
                    run_id,
                )
            except TinkerNotFound:
                continue
            listed.update(c.tinker_path for c in response.checkpoints)
            if response.cursor is not None:  # a partial page proves nothing gone: keep its paths
                listed.update(p for p in paths if training_run_of(p) == run_id)
        updated = record.expiring(listed)
        if updated == record:
            return []
        newly = sorted(set(updated.expired) - set(record.expired))
        state.record = updated
        await asyncio.to_thread(write_record, state.model_dir, updated)
        if newly:
            for path in (c.sampler_path for c in record.checkpoints if c.step in newly):
                state.references.pop(path or "", None)
            if state.serving is not None:
                await self._pool.unserve_steps(state.serving, state.spec.served_name, newly)
            logger.warning(
                "Tinker expired step(s) %s of %s (their TTL passed); recorded as expired",
                newly,
                state.spec.run,
            )
        return newly

    # --- training -----------------------------------------------------------------------

    async def train_steps(
        self, run: RunRef, groups: Sequence[TrajectoryGroup], config: TrainConfig
    ) -> AsyncIterator[Mapping[str, float]]:
        """One optimizer step on the trainable Choices, then step N+1 is saved and served.
        Yields one metrics dict, once N+1 is durable."""
        from .datums import build_batch

        state = self._require(run)
        loss = self._loss_for(config)
        batch = build_batch(groups, config)
        async with state.lock:
            metrics = await self._train_step(state, batch, config, loss)
        yield metrics

    def _loss_for(self, config: TrainConfig) -> TinkerLoss | CustomLoss:
        if self._loss_fn is not None and config.loss_fn == "cispo":
            return self._loss_fn
        return config.loss_fn

    async def _train_step(
        self, state: _Run, batch: Batch, config: TrainConfig, loss: TinkerLoss | CustomLoss
    ) -> dict[str, float]:
        training = await self._training_client(state)
        step = state.record.step
        metrics: dict[str, float] = {**batch.counts, "loss/learning_rate": config.learning_rate}
        if batch.parts and config.kl_penalty_coef > 0:
            reference = await self._reference(state, config.kl_penalty_reference_step)
            metrics["loss/kl_policy_ref"] = await kl_penalty(
                reference, batch, config.kl_penalty_coef, self._timeout_s
            )
        try:
            if batch.parts:
                adam = self._adam(config.learning_rate, config.max_grad_norm)
                extra = self._loss_fn_config if loss == self._loss_fn else None
                metrics.update(
                    await optimize(training, batch, loss, config, adam, self._timeout_s, extra)
                )
            else:
                metrics.update(
                    {
                        "data/step_num_gradient_steps": 0.0,
                        "data/step_num_tokens": 0.0,
                        "data/step_num_sequences": 0.0,
                    }
                )
            await self._save_next(state, training)
        except BaseException:
            # The service may now be ahead of the record: resume from the record next time.
            state.training = None
            raise
        await self._serve_step(state, step + 1)
        return metrics

    async def _save_next(self, state: _Run, training: TrainingClientLike) -> None:
        """Save the trained weights as the run's next step and record it."""
        new = state.record.step + 1
        checkpoint = await self._save(training, new, with_state=new % self._save_state_every == 0)
        record = state.record.with_checkpoint(checkpoint)
        await asyncio.to_thread(write_record, state.model_dir, record)
        state.record = record

    async def train_sft(
        self, run: RunRef, conversations: Sequence[Conversation], config: TrainSFTConfig
    ) -> AsyncIterator[Mapping[str, float]]:
        """Fine-tune with Tinker's cross_entropy loss (sft.py), then save and serve step N+1
        like `train`; a failure or an early stop resumes from the record next time."""
        from ..inference.sft_tokens import prepare
        from .sft import fine_tune

        state = self._require(run)
        config.plan(len(conversations))  # bad input fails before the tokenizer is loaded
        chat = await self._chat(state)
        limit = chat.context_limit or sys.maxsize
        data = await asyncio.to_thread(prepare, chat, conversations, config, limit)

        def adam(rate: float) -> types.AdamParams:
            return self._adam(rate, config.max_grad_norm)

        async with state.lock:
            training = await self._training_client(state)
            try:
                async for metrics in fine_tune(training, data, adam, self._timeout_s):
                    yield metrics
                await self._save_next(state, training)
            except BaseException:
                state.training = None
                raise
            await self._serve_step(state, state.record.step)

    async def _chat(self, state: _Run) -> ChatTokenizer:
        """The chat tokenizer SFT targets are rendered with (the one the server renders with)."""
        from ..inference.chat import ChatTokenizer

        assert state.spec.base_model is not None
        source = self._tokenizer or state.spec.base_model
        if source not in self._chats:
            self._chats[source] = await asyncio.to_thread(ChatTokenizer.load, source)
        return self._chats[source]

    def _adam(self, learning_rate: float, max_grad_norm: float | None) -> types.AdamParams:
        from tinker import types

        return types.AdamParams(
            learning_rate=learning_rate,
            beta1=self._adam_betas[0],
            beta2=self._adam_betas[1],
            eps=self._adam_eps,
            weight_decay=self._weight_decay,
            grad_clip_norm=max_grad_norm or 0.0,
        )

    async def _reference(self, state: _Run, step: int | None) -> SamplingClientLike:
        if step is None:
            key, what = "", f"base model {state.spec.base_model!r}"
            kwargs: dict[str, Any] = {"base_model": state.spec.base_model}
        else:
            checkpoint = state.record.checkpoint(step)
            if checkpoint is None or checkpoint.sampler_path is None:
                raise InvalidInputError(
                    f"kl_penalty_reference_step={step} has no checkpoint in {state.model_dir}; "
                    f"available steps: {state.record.sampler_steps()}"
                )
            key, what = checkpoint.sampler_path, checkpoint.sampler_path
            kwargs = {"model_path": checkpoint.sampler_path}
        client = state.references.get(key)
        if client is None:
            client = await call(
                f"creating a sampling client for {what}",
                self._timeout_s,
                self._service().create_sampling_client,
                **kwargs,
            )
            state.references[key] = client
        return client

    async def _training_client(self, state: _Run) -> TrainingClientLike:
        """The run's training client; after a failure, a new one from the newest state."""
        if state.training is None:
            state.training, state.record = await self._resume(state.record, state.model_dir)
            if state.serving is not None:  # a rewind drops the later steps
                for name in state.serving.engine.served_models():
                    step = name.rpartition("@")[2]
                    mine = name.startswith(f"{state.spec.served_name}@")
                    if mine and int(step) > state.record.step:
                        await state.serving.engine.unload(name)
                await self._serve_step(state, state.record.step)
        return state.training

    async def _save(
        self, training: TrainingClientLike, step: int, *, with_state: bool
    ) -> Checkpoint:
        """Save `step` as sampler weights (and full state), both submitted before either is
        awaited."""
        name = step_name(step)
        what_sampler, what_state = f"saving sampler weights {name}", f"saving state {name}"
        sampler = await submit(what_sampler, training.save_weights_for_sampler, name)
        full = await submit(what_state, training.save_state, name) if with_state else None
        sampler_path = (await finish(what_sampler, sampler, self._timeout_s)).path
        state_path = None
        if full is not None:
            state_path = (await finish(what_state, full, self._timeout_s)).path
        return Checkpoint(step=step, sampler_path=sampler_path, state_path=state_path)

    # --- export -------------------------------------------------------------------------

    async def export(
        self, run: RunRef, out_dir: str, *, step: int | None = None, format: ExportFormat = "merged"
    ) -> str:
        """Download a step's LoRA adapter from Tinker (download.py) and write it as a PEFT
        folder or a merged Hugging Face model with arthex's export code. The latest step comes
        from the run's training client; an earlier one from its saved state."""
        from .download import check_free, check_mergeable, export_from

        if format not in ("peft", "merged"):
            raise InvalidInputError(f"format must be 'peft' or 'merged', got {format!r}")
        target = Path(out_dir)
        state = self._require(run)
        await asyncio.to_thread(check_free, target)
        if format == "merged":
            await asyncio.to_thread(check_mergeable, state.record.base_model)
        async with state.lock:
            record = state.record
            chosen = record.step if step is None else step
            checkpoint = record.checkpoint(chosen)
            if chosen == record.step:
                training = await self._training_client(state)
            elif checkpoint is not None and checkpoint.state_path is not None:
                training = await call(
                    f"loading {checkpoint.state_path}",
                    self._timeout_s,
                    self._service().create_training_client_from_state,
                    checkpoint.state_path,
                )
            else:
                raise InvalidInputError(
                    f"{run} has no saved state of step {chosen} to export (steps with one: "
                    f"{[c.step for c in record.checkpoints if c.state_path]}, and the latest, "
                    f"{record.step})"
                )
            return str(
                await export_from(
                    training,
                    await self._rest(),
                    record,
                    chosen,
                    target,
                    format,
                    None,
                    self._timeout_s,
                )
            )

    # --- deleting -----------------------------------------------------------------------

    async def delete_checkpoint_files(
        self, run: RunRef, steps_to_keep: Collection[int]
    ) -> list[int]:
        """Delete the sampler weights and states of every step not kept, except the latest
        step and the newest saved state (needed to resume). Returns the steps deleted.

        The record drops them first, naming their paths as `deleting`; the service deletes
        them; the record then forgets the paths. A crash in between leaves a record that no
        longer serves those steps and finishes their deletion at the next register or
        deletion, so the service and the record agree again."""
        state = self._require(run)
        async with state.lock:
            await self._finish_deleting(state)
            await self._note_expired(state)
            record = state.record
            protected = {*steps_to_keep, record.step}
            resume = record.resume_point()
            updated: list[Checkpoint] = []
            doomed: list[str] = []
            deleted: list[int] = []
            for checkpoint in record.checkpoints:
                if checkpoint.step in protected:
                    updated.append(checkpoint)
                    continue
                sampler, full = checkpoint.sampler_path, checkpoint.state_path
                if sampler is not None:
                    doomed.append(sampler)
                    state.references.pop(sampler, None)
                    deleted.append(checkpoint.step)
                    sampler = None
                if full is not None and checkpoint != resume:
                    doomed.append(full)
                    full = None
                updated.append(Checkpoint(checkpoint.step, sampler, full))
            if not doomed:
                return []
            state.record = attrs.evolve(record.replacing(updated), deleting=tuple(doomed))
            await asyncio.to_thread(write_record, state.model_dir, state.record)
            if state.serving is not None:
                await self._pool.unserve_steps(state.serving, state.spec.served_name, deleted)
            await self._finish_deleting(state)
            return sorted(deleted)

    async def _finish_deleting(self, state: _Run) -> None:
        """Delete on the service what the record names as `deleting`, then clear it."""
        pending = state.record.deleting
        if not pending:
            return
        for index, path in enumerate(pending):
            try:
                await self._delete_path(path)
            except BaseException:
                state.record = attrs.evolve(state.record, deleting=pending[index:])
                await asyncio.to_thread(write_record, state.model_dir, state.record)
                raise
        state.record = attrs.evolve(state.record, deleting=())
        await asyncio.to_thread(write_record, state.model_dir, state.record)

    async def _delete_path(self, path: str) -> None:
        try:
            await call(
                f"deleting {path}",
                self._timeout_s,
                (await self._rest()).delete_checkpoint_from_tinker_path,
                path,
            )
        except TinkerNotFound:
            pass  # already gone

    # --- serving ------------------------------------------------------------------------

    async def _serving_for(self, spec: ModelSpec) -> Serving:
        assert spec.base_model is not None
        tokenizer = self._tokenizer or spec.base_model

        def make_engine() -> TinkerSamplingEngine:
            try:
                from .engine import TinkerSamplingEngine
            except ImportError as exc:
                raise MissingExtraError(exc.name or "fastapi", "tinker") from exc
            return TinkerSamplingEngine(
                tokenizer, timeout_s=self._timeout_s, open_sampler=self._open_sampler
            )

        return await self._pool.serving_for(tokenizer, spec.served_name, make_engine)

    async def _open_sampler(self, path: str) -> SamplingClientLike:
        return await call(
            f"creating a sampling client for {path}",
            self._timeout_s,
            self._service().create_sampling_client,
            model_path=path,
        )

    @contextlib.asynccontextmanager
    async def serve_checkpoint(
        self, model: ModelSpec, step: int | None
    ) -> AsyncIterator[ServedCheckpoint]:
        """Serve a kept step's sampler weights as `{name}@{step}` while the block runs
        (CheckpointServing): on the run's own server when it is registered here, else on one
        that opens no training client, writes nothing and takes no lease. The steps are those
        `tinker-run.json` records with sampler weights."""
        self._runs.check_open()
        if not self._serve:
            raise UnsupportedCapability(Capability.SERVE_CHECKPOINT, "TinkerBackend(serve=False)")
        run = model.run
        opened = self._runs.get(run)
        model_dir = (
            opened.model_dir
            if opened is not None
            else backend_run_dir(model, self._path, "TinkerBackend")
        )
        record = (
            opened.record if opened is not None else await asyncio.to_thread(read_record, model_dir)
        )
        steps = record.sampler_steps() if record is not None else []
        chosen = step if step is not None else (steps[-1] if steps else None)
        checkpoint = None if record is None or chosen is None else record.checkpoint(chosen)
        if checkpoint is None or checkpoint.sampler_path is None:
            have = ", ".join(map(str, steps)) if steps else "none"
            asked = "any step" if step is None else f"step {step}"
            raise InvalidInputError(
                f"{run} has no checkpoint at {asked} in {model_dir / 'tinker-run.json'} "
                f"(complete checkpoints: {have})"
            )
        assert chosen is not None and record is not None
        if opened is None and record.base_model != model.base_model:
            raise InvalidInputError(
                f"{model_dir} was trained from base model {record.base_model!r}, not "
                f"{model.base_model!r}: its checkpoints are served on the model they came from"
            )
        serving = opened.serving if opened is not None else await self._reader(model)
        assert serving is not None  # serve=True
        served = opened.spec.served_name if opened is not None else model.served_name
        name = served_step_name(served, chosen)
        if not serving.engine.is_served(name):
            await self._pool.serve_step(
                serving, run, served, chosen, checkpoint.sampler_path, latest=False
            )
        yield ServedCheckpoint(
            endpoint=self._pool.endpoint(serving, served), step=chosen, model_name=name
        )

    async def _reader(self, model: ModelSpec) -> Serving:
        reader = self._readers.get(model.run)
        if reader is not None:
            return reader[0]
        serving = await self._serving_for(model)
        self._readers[model.run] = (serving, model.served_name)
        return serving

    async def _serve_step(self, state: _Run, step: int) -> None:
        if state.serving is None:
            return
        checkpoint = state.record.checkpoint(step)
        assert checkpoint is not None and checkpoint.sampler_path is not None
        await self._pool.serve_step(
            state.serving, state.spec.run, state.spec.served_name, step, checkpoint.sampler_path
        )

    # --- internals ----------------------------------------------------------------------

    def _service(self) -> ServiceClientLike:
        if self._service_client is None:
            client = self._service_client = self._factory().service()
            # Collected unclosed (a script that never closes, a crash simulated in a test):
            # the session's heartbeat and connections end with the backend.
            self._release_service = weakref.finalize(self, release, client)
        return self._service_client

    async def _rest(self) -> RestClientLike:
        if self._rest_client is None:
            self._rest_client = await asyncio.to_thread(self._factory().rest)
        return self._rest_client

    def _factory(self) -> TinkerClients:
        if self._clients is None:
            try:
                import tinker  # noqa: F401
            except ImportError as exc:
                raise MissingExtraError("tinker", "tinker") from exc
            self._clients = SdkClients(self._base_url, self._api_key)
        return self._clients

    def _require(self, run: RunRef) -> _Run:
        return self._runs.require(run)


if TYPE_CHECKING:
    _fits: type[TrainingBackend] = TinkerBackend
    _fine_tunes: type[SupervisedFineTuning] = TinkerBackend
    _serves_checkpoints: type[CheckpointServing] = TinkerBackend
    _exports: type[ModelExporter] = TinkerBackend
