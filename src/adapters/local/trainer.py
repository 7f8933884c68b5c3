"""The policy trainer: a Hugging Face causal LM (LoRA via peft, or fully fine-tuned) and AdamW.

Everything here is synchronous and meant to run on a worker thread: the backend drives it
with `asyncio.to_thread`, so the event loop that also runs the inference server stays free.

Choices where the reference was silent:
- `grad_accumulation_sequences=None` puts every row of a batch into ONE optimizer step (the
  batch is one on-policy sample; several steps over it would be off-policy); `k` makes one
  optimizer step per k rows, so a train call is always at least one optimizer step. Rows are
  also split into micro-batches of about `micro_batch_tokens` tokens to bound memory; the
  gradient is the same either way, because the loss is normalised by the optimizer step's
  completion tokens, not the micro-batch's.
- Dropout is off while training (the model stays in eval mode): the policy's logprobs must
  match the sampler's, or the importance ratios would be noise.
- Weight decay applies to matrices only (not to norms and biases).
- `full_finetune=None` fine-tunes fully below 50M parameters and uses LoRA above: small
  models gain little from LoRA and tests want their exact weights; big ones need LoRA to fit.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import torch

from ...core.errors import CorruptDataError, InvalidInputError
from ..hf_quiet import quiet_hf
from ..hub import one_line, resolve_base_model
from . import checkpoint_io
from . import checkpoints as ckpt
from .layers import Recompute, use_checkpointing
from .logprobs import DEFAULT_CHUNK_TOKENS, scatter_rows, selected_logprobs
from .loss import LossSettings, LossStats, custom_token_loss, token_policy_loss
from .packing import PackedBatch
from .step_plan import WholeBatch, part_of
from .update import Update

DEFAULT_LORA_TARGETS: tuple[str, ...] = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
)
FULL_FINETUNE_BELOW_PARAMS = 50_000_000
ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"


@attrs.frozen
class TrainerSettings:
    base_model: str
    device: str = "cpu"
    full_finetune: bool | None = None
    lora_rank: int = 8
    lora_alpha: int = 16
    lora_target_modules: tuple[str, ...] = DEFAULT_LORA_TARGETS
    seed: int = 0
    adam_betas: tuple[float, float] = (0.9, 0.99)
    adam_eps: float = 1e-8
    weight_decay: float = 0.1
    micro_batch_tokens: int = 8192
    logprob_calculation_chunk_size: int = DEFAULT_CHUNK_TOKENS
    gradient_checkpointing: bool | str = "auto"  # True, False or "auto" (layers.py)


class PolicyTrainer:
    """One run's trainable model and optimizer, kept in memory between train calls."""

    def __init__(self, settings: TrainerSettings) -> None:
        self.settings = settings
        self.model: Any = None
        self.optimizer: torch.optim.AdamW | None = None
        self.param_names: list[str] = []
        self.full_finetune = False
        self.max_length = 0
        self.pad_token_id = 0
        self.fresh_optimizer_for: Path | None = None
        """The checkpoint loaded without optimizer state (a foreign adapter), if any."""
        self.optimizer_mode: str | None = None  # "rl" or "sft": whose moments Adam holds
        self.split: WholeBatch = WholeBatch()
        self.recompute: Recompute | None = None  # decoder layers recomputed in backward

    # --- building -----------------------------------------------------------------------

    def load(self, checkpoint: Path | None) -> None:
        """Build the model from the base weights, then the checkpoint's weights and optimizer
        state when there is one (a restart resumes exactly where the run stopped). A foreign
        LoRA adapter (ART's) gives the weights only: the optimizer starts fresh, and
        `fresh_optimizer_for` says so."""
        foreign = checkpoint is not None and ckpt.foreign_adapter(checkpoint)
        state = ckpt.read_state(checkpoint) if checkpoint is not None and not foreign else None
        self._note_source(checkpoint, state, foreign=foreign)
        base = self._base_model()
        full = self._choose_mode(state, base, checkpoint, foreign=foreign)
        self.full_finetune = full
        if full and base.dtype != torch.float32:
            base = base.float()  # full fine-tuning keeps float32 master weights
        if full:
            if checkpoint is not None:
                base.load_state_dict(checkpoint_io.load_weights(checkpoint / ckpt.WEIGHTS_FILE))
            self.model = base
        else:
            self.model = self._lora(base, checkpoint)
        self.model.eval()
        self.recompute = use_checkpointing(self.model, self.settings, full=full)
        self._build_optimizer()
        if checkpoint is not None and (checkpoint / ckpt.OPTIMIZER_META_FILE).is_file():
            assert self.optimizer is not None
            checkpoint_io.load_optimizer(self.optimizer, self.param_names, checkpoint)

    def _note_source(
        self, checkpoint: Path | None, state: dict[str, Any] | None, *, foreign: bool
    ) -> None:
        """What the loaded checkpoint says about the optimizer: whose moments it holds (an
        older checkpoint without the field holds RL's), or none at all (a foreign adapter)."""
        self.fresh_optimizer_for = checkpoint if foreign else None
        self.optimizer_mode = state.get("optimizer_mode", "rl") if state is not None else None

    def _choose_mode(
        self, state: dict[str, Any] | None, base: Any, where: Path | None, *, foreign: bool
    ) -> bool:
        """Full fine-tuning (True) or LoRA: the checkpoint's mode, which the settings may not
        contradict (a foreign adapter is LoRA); without a checkpoint, the settings' or the size
        rule's."""
        if foreign:
            if self.settings.full_finetune is True:
                raise InvalidInputError(
                    f"the run's newest checkpoint {where} is a LoRA adapter, but the backend "
                    "was created with full_finetune=True; use full_finetune=None (or False) to "
                    "continue this run"
                )
            return False
        if state is not None:
            full = state.get("mode") == "full"
            wanted = self.settings.full_finetune
            if wanted is not None and wanted != full:
                raise InvalidInputError(
                    f"the run's checkpoints in {where} were trained with "
                    f"{'full fine-tuning' if full else 'LoRA'}, but the backend was created with "
                    f"full_finetune={wanted}; use full_finetune={full} (or None) for this run"
                )
            return full
        if self.settings.full_finetune is not None:
            return self.settings.full_finetune
        return bool(sum(p.numel() for p in base.parameters()) < FULL_FINETUNE_BELOW_PARAMS)

    def _base_model(self) -> Any:
        from transformers import AutoModelForCausalLM

        quiet_hf()
        device = torch.device(self.settings.device)
        dtype = torch.float32
        if device.type == "cuda" and self.settings.full_finetune is not True:
            dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
        base = self.settings.base_model
        source = resolve_base_model(base)  # a hub id that cannot be had is refused here, at once
        try:
            model: Any = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
        except OSError as exc:
            raise InvalidInputError(
                f"cannot load base model {base!r}: {one_line(exc)}. Pass a Hugging Face causal "
                "LM directory or hub id"
            ) from None
        config = model.config
        self.max_length = int(getattr(config, "max_position_embeddings", 0) or 2048)
        pad = getattr(config, "pad_token_id", None)
        if pad is None:
            eos = getattr(config, "eos_token_id", None)
            pad = eos[0] if isinstance(eos, list) else eos
        self.pad_token_id = int(pad) if pad is not None else 0
        return model.to(device)

    def _lora(self, base: Any, checkpoint: Path | None) -> Any:
        from peft import LoraConfig, PeftModel, get_peft_model

        with warnings.catch_warnings():
            # peft asks transformers a deprecated question; nothing for the user to act on
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
            return self._wrap_lora(base, checkpoint, LoraConfig, PeftModel, get_peft_model)

    def _wrap_lora(
        self, base: Any, checkpoint: Path | None, lora_config: Any, peft_model: Any, get: Any
    ) -> Any:
        if checkpoint is not None:
            try:
                return peft_model.from_pretrained(base, str(checkpoint), is_trainable=True)
            except (ValueError, KeyError) as exc:
                raise InvalidInputError(
                    f"the LoRA adapter in {checkpoint} does not fit {self.settings.base_model!r}: "
                    f"{exc}. Was the run trained on another base model?"
                ) from exc
        config = lora_config(
            r=self.settings.lora_rank,
            lora_alpha=self.settings.lora_alpha,
            target_modules=list(self.settings.lora_target_modules),
            lora_dropout=0.0,
            bias="none",
            task_type="CAUSAL_LM",
        )
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.settings.seed)
                return get(base, config)
        except ValueError as exc:
            raise InvalidInputError(
                f"LoRA target modules {list(self.settings.lora_target_modules)} do not fit "
                f"{self.settings.base_model!r}: {exc}. Pass lora_target_modules naming its "
                "linear layers, or full_finetune=True"
            ) from exc

    def _build_optimizer(self) -> None:
        named = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        decay = [(n, p) for n, p in named if p.ndim >= 2]
        no_decay = [(n, p) for n, p in named if p.ndim < 2]
        self.param_names = [n for n, _ in decay] + [n for n, _ in no_decay]
        groups = [
            {"params": [p for _, p in decay], "weight_decay": self.settings.weight_decay},
            {"params": [p for _, p in no_decay], "weight_decay": 0.0},
        ]
        self.optimizer = torch.optim.AdamW(
            groups,
            lr=1e-6,
            betas=self.settings.adam_betas,
            eps=self.settings.adam_eps,
            foreach=False,
        )

    def use_optimizer_for(self, mode: str) -> None:
        """Adam's moments of one objective mislead the other: switching between RL and SFT
        starts the optimizer state afresh (see sft.py)."""
        if self.optimizer_mode is not None and self.optimizer_mode != mode:
            self._build_optimizer()
        self.optimizer_mode = mode

    # --- saving -------------------------------------------------------------------------

    def trainer_state(self) -> dict[str, Any]:
        lora = None
        if not self.full_finetune:
            # the adapter's own settings: a run continued from an adapter keeps its shape
            config = getattr(self.model, "peft_config", {}).get("default")
            if config is not None:
                targets = config.target_modules or self.settings.lora_target_modules
                lora = {
                    "rank": config.r,
                    "alpha": config.lora_alpha,
                    "targets": sorted(targets) if isinstance(targets, set) else list(targets),
                }
        return trainer_state(
            self.settings, self.full_finetune, lora=lora, optimizer_mode=self.optimizer_mode
        )

    def write_checkpoint(self, directory: Path) -> None:
        """The weights (or adapter) and the optimizer state, into an empty folder."""
        assert self.optimizer is not None
        if self.full_finetune:
            checkpoint_io.save_weights(self.model.state_dict(), directory / ckpt.WEIGHTS_FILE)
        else:
            self.model.save_pretrained(str(directory))
            readme = directory / "README.md"
            if readme.exists():
                readme.unlink()
        checkpoint_io.save_optimizer(self.optimizer, self.param_names, directory)

    def training_tensors(self) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """The live trainable weights and optimizer tensors on the CPU, keyed like the
        checkpoint files (see `trainable_state` and `optimizer_tensors`)."""
        weights = {name: value.cpu() for name, value in trainable_state(self).items()}
        return weights, optimizer_tensors(self)

    def close(self) -> None:
        """Nothing to release beyond memory (the sharded trainer's handle stops processes)."""

    # --- training -----------------------------------------------------------------------

    def train(self, update: Update) -> Iterator[dict[str, float]]:
        """Optimizer steps over the update's batch, yielding each one's metrics as it
        finishes. The row order is the batch's (the backend shuffles it with a seed derived
        from the run's seed and step)."""
        batch, config, custom_loss = update.batch, update.config, update.custom_loss
        assert self.optimizer is not None and self.model is not None
        self.use_optimizer_for("rl")
        settings = LossSettings.from_config(config)
        kl_on = settings.kl_coef > 0
        rows = batch.num_rows
        per_step = config.grad_accumulation_sequences or rows
        chunks = [list(range(i, min(i + per_step, rows))) for i in range(0, rows, per_step)]
        ref = self._reference_logprobs(batch, chunks, update.reference) if kl_on else None
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        device = torch.device(self.settings.device)
        for group in self.optimizer.param_groups:
            group["lr"] = config.learning_rate
        for chunk_rows in chunks:
            normalizer = float(batch.rows(chunk_rows).num_trainable_tokens)
            self.optimizer.zero_grad(set_to_none=True)
            parts: list[LossStats] = []
            plan = self.split.plan(
                chunk_rows, self._micro_rows(batch.seq_len), whole_micro_batches=kl_on
            )
            for micro in plan:
                part = part_of(batch, micro, chunk_rows).to(device)
                new, entropy = self.token_logprobs(part)
                ref_part = None
                if ref is not None:
                    ref_part = ref[micro or chunk_rows[:1]].to(device)
                if custom_loss is not None:
                    loss, stats = custom_token_loss(
                        new,
                        entropy,
                        part,
                        custom_loss,
                        normalizer=normalizer,
                        ref_logprobs=ref_part,
                        kl_coef=settings.kl_coef,
                    )
                else:
                    loss, stats = token_policy_loss(
                        new, entropy, part, settings, normalizer=normalizer, ref_logprobs=ref_part
                    )
                loss.backward()  # type: ignore[no-untyped-call]
                parts.append(stats)
                del new, loss
            limit = config.max_grad_norm if config.max_grad_norm is not None else math.inf
            grad_norm = self.split.clip_grad_norm(params, limit)
            self.optimizer.step()
            metrics = self.split.reduce(LossStats.combine(parts)).metrics(kl_on)
            metrics.update(
                {
                    "loss/grad_norm": grad_norm,
                    "loss/learning_rate": config.learning_rate,
                    "data/step_num_tokens": normalizer,
                    "data/step_num_sequences": float(len(chunk_rows)),
                    "data/step_num_gradient_steps": float(len(chunks)),
                }
            )
            yield metrics

    def _micro_rows(self, seq_len: int) -> int:
        return max(1, self.settings.micro_batch_tokens // max(seq_len, 1))

    @property
    def checkpointing(self) -> bool:
        """Whether the next micro-batch's layers are recomputed in backward."""
        return self.recompute is not None and self.recompute.on

    def forward_of(self, tokens: int) -> None:
        """Before a micro-batch of `tokens` tokens: "auto" checkpointing decides for it."""
        if self.recompute is not None:
            self.recompute.set_for(tokens)

    def token_logprobs(self, batch: PackedBatch) -> tuple[torch.Tensor, float]:
        """(the policy's logprob of each next token [rows, len-1], zero where the completion
        mask is off; the entropy summed over the masked positions), chunked (logprobs.py)."""
        select = batch.mask[:, 1:]
        self.forward_of(batch.tokens.numel())
        chosen, entropy = selected_logprobs(
            self.model,
            select,
            self.settings.logprob_calculation_chunk_size,
            input_ids=batch.tokens,
            attention_mask=_padding_mask(batch),
            position_ids=batch.position_ids,
        )
        return scatter_rows(chosen, select), float(entropy.sum().item())

    def _reference_logprobs(
        self, batch: PackedBatch, chunks: list[list[int]], reference: Path | None
    ) -> torch.Tensor:
        """Reference logprobs for the rows this process trains (zeros elsewhere), computed
        once before any update: the reference weights are swapped in, used, and the trained
        weights put back."""
        out = torch.zeros((batch.num_rows, max(batch.seq_len - 1, 0)))
        with torch.no_grad(), self._reference_weights(reference):
            for chunk_rows in chunks:
                plan = self.split.plan(
                    chunk_rows, self._micro_rows(batch.seq_len), whole_micro_batches=True
                )
                for micro in plan:
                    part = part_of(batch, micro, chunk_rows).to(torch.device(self.settings.device))
                    new, _ = self.token_logprobs(part)  # only the masked positions are read
                    if micro:
                        out[micro] = new.float().cpu()
        return out

    @contextlib.contextmanager
    def _reference_weights(self, reference: Path | None) -> Iterator[None]:
        if reference is None and not self.full_finetune:
            with self.model.disable_adapter():
                yield
            return
        saved = {n: p.detach().clone() for n, p in self.model.named_parameters() if p.requires_grad}
        try:
            self._load_reference(reference)
            yield
        finally:
            self._restore(saved)

    def _load_reference(self, reference: Path | None) -> None:
        """The KL reference's trainable weights into the model (the base weights when None)."""
        if self.full_finetune:
            if reference is None:
                weights = self._base_model().state_dict()
            else:
                weights = checkpoint_io.load_weights(reference / ckpt.WEIGHTS_FILE)
            self.model.load_state_dict(weights)
        else:
            from peft.utils import set_peft_model_state_dict

            assert reference is not None
            adapter = reference / ADAPTER_WEIGHTS_FILE
            if not adapter.is_file():
                raise CorruptDataError(f"the KL reference {reference} has no {adapter.name}")
            set_peft_model_state_dict(self.model, checkpoint_io.load_weights(adapter))

    def _restore(self, saved: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for name, param in self.model.named_parameters():
                if name in saved:
                    param.copy_(saved[name])


def trainer_state(
    settings: TrainerSettings,
    full_finetune: bool,
    *,
    lora: dict[str, Any] | None = None,
    optimizer_mode: str | None = None,
) -> dict[str, Any]:
    """What `trainer_state.json` records about how the run trains (`lora`: the adapter's own
    shape when it differs from the settings', as for an adapter continued from elsewhere)."""
    if not full_finetune and lora is None:
        lora = {
            "rank": settings.lora_rank,
            "alpha": settings.lora_alpha,
            "targets": list(settings.lora_target_modules),
        }
    return {
        "base_model": settings.base_model,
        "mode": "full" if full_finetune else "lora",
        "lora": lora,
        "seed": settings.seed,
        "optimizer_mode": optimizer_mode,
    }


def _padding_mask(batch: PackedBatch) -> torch.Tensor | None:
    """The attention mask, or None when every row is right-padded (what `pack` builds).

    Under causal attention a real token only sees earlier positions, which are all real when
    the padding comes last, so the mask changes nothing the loss reads; leaving it out lets
    attention take its causal kernels (no mask tensor, masked blocks skipped), measurably
    faster forward and backward. A pad before a real token keeps the mask."""
    real = batch.segment_ids >= 0
    if bool((real[:, 1:] & ~real[:, :-1]).any()):
        return real.long()
    return None


def trainable_state(trainer: PolicyTrainer) -> dict[str, torch.Tensor]:
    """The trainable parameters by name (what tests compare across runs)."""
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}


def optimizer_tensors(trainer: PolicyTrainer) -> dict[str, torch.Tensor]:
    """The optimizer's tensor state keyed like `optimizer.safetensors`."""
    assert trainer.optimizer is not None
    state = trainer.optimizer.state_dict()["state"]
    out: dict[str, torch.Tensor] = {}
    for index, values in state.items():
        for key, value in values.items():
            if isinstance(value, torch.Tensor):
                out[f"state.{trainer.param_names[int(index)]}.{key}"] = value.detach().cpu()
    return out


__all__: Sequence[str] = (
    "PolicyTrainer",
    "TrainerSettings",
    "optimizer_tensors",
    "trainable_state",
)
