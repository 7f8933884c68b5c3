"""The compute behind a tinker emulator's training run: its LoRA adapter and AdamW state.

Everything here runs on the emulator's single compute thread (one "device"), so nothing in this
module locks. The model is a LoRA copy of the base (base_model.py); checkpoints are folders in
store.py's layout. The numerics are the LocalBackend trainer's own parts: target logprobs
chunk by chunk over the vocabulary (adapters/local/logprobs.py), its layer checkpointing
(layers.py), its per-token loss terms (token_losses.py, summed per datum by losses.py) and its
optimizer-state files (checkpoint_io.py). Its PolicyTrainer itself is not used: that one
packs ART trajectory groups and normalises per optimizer step, where a Tinker request brings
its own datums and per-token loss inputs and sums.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import torch

from ....adapters.local.layers import Recompute, checkpoint_layer, decoder_layers
from ....adapters.local.logprobs import DEFAULT_CHUNK_TOKENS, target_logprobs
from .base_model import BaseModel, LoraSettings
from .errors import UserError
from .losses import LOSSES, DatumIn, checked_inputs, datum_loss
from .store import ADAPTER_FILE, load_adapter, publish_dir

LOGPROB_CHUNK_TOKENS = DEFAULT_CHUNK_TOKENS


@attrs.frozen
class AdamSettings:
    learning_rate: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-12
    weight_decay: float = 0.0
    grad_clip_norm: float = 0.0


class TrainingRun:
    """One training run's adapter and AdamW state; gradients accumulate until `optim_step`."""

    def __init__(self, base: BaseModel, lora: LoraSettings) -> None:
        self.base = base
        self.lora = lora
        self.model: Any = base.lora_model(lora)
        self.names = sorted(n for n, p in self.model.named_parameters() if p.requires_grad)
        named = dict(self.model.named_parameters())
        self.params = [named[n] for n in self.names]
        self.optimizer: torch.optim.AdamW | None = None
        # The LocalBackend's layer checkpointing, decided per batch from its token count.
        dtype = next(self.model.parameters()).dtype
        self._recompute = Recompute(base.gradient_checkpointing, self.model.config, dtype, 0)
        for layer in decoder_layers(self.model, full=False):
            checkpoint_layer(layer, self._recompute)

    @property
    def recompute(self) -> Recompute:
        """Whether the run's layers recompute in backward (set per batch from its tokens)."""
        return self._recompute

    # training ----------------------------------------------------------------------------

    def forward_backward(
        self,
        data: Sequence[DatumIn],
        loss_fn: str,
        config: Mapping[str, float],
        *,
        forward_only: bool,
    ) -> tuple[list[torch.Tensor], float]:
        """Per-datum target logprobs and the summed loss; adds the gradient unless forward_only."""
        tokens, targets, mask, checked = padded(self, data, loss_fn)
        if not data:
            return [], 0.0
        device = self.base.device
        self._recompute.set_for(int(mask.sum()))
        with torch.set_grad_enabled(not forward_only):
            scored, _entropy = target_logprobs(
                self.model,
                mask.bool().to(device),
                targets.to(device),
                LOGPROB_CHUNK_TOKENS,
                input_ids=tokens.to(device),
                attention_mask=mask.to(device),
            )
            ends = list(itertools.accumulate(len(datum.tokens) for datum in data))
            rows = [scored[end - len(datum.tokens) : end] for datum, end in zip(data, ends)]
            losses = [datum_loss(loss_fn, lp, inputs, config) for lp, inputs in zip(rows, checked)]
            loss = torch.stack(losses).sum()
            if not forward_only:
                torch.autograd.backward(loss)
        outputs = [lp.detach().float().cpu() for lp in rows]
        return outputs, float(loss.detach().item())

    def optim_step(self, adam: AdamSettings) -> dict[str, float]:
        if self.optimizer is None:
            self.optimizer = self._new_optimizer(adam)
        for group in self.optimizer.param_groups:
            group["lr"] = adam.learning_rate
            group["betas"] = (adam.beta1, adam.beta2)
            group["eps"] = adam.eps
            group["weight_decay"] = adam.weight_decay
        limit = adam.grad_clip_norm if adam.grad_clip_norm > 0 else math.inf
        with_grad = [p for p in self.params if p.grad is not None]
        norm = float(torch.nn.utils.clip_grad_norm_(with_grad, limit).item()) if with_grad else 0.0
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"grad_norm": norm, "learning_rate": adam.learning_rate}

    # weights -----------------------------------------------------------------------------

    def adapter(self) -> dict[str, torch.Tensor]:
        from peft import get_peft_model_state_dict

        state = get_peft_model_state_dict(self.model, save_embedding_layers=False)
        return {k: v.detach().cpu().clone().contiguous() for k, v in state.items()}

    def save(self, directory: Path, *, meta: Mapping[str, Any], with_optimizer: bool) -> None:
        """Write the adapter (and optimizer state) into `directory`, all or nothing. The
        optimizer state is in the LocalBackend's checkpoint format (checkpoint_io)."""
        from safetensors.torch import save_file

        from ....adapters.local.checkpoint_io import save_optimizer

        def write(temp: Path) -> None:
            save_file(self.adapter(), str(temp / ADAPTER_FILE))
            if with_optimizer:
                # A run not stepped yet saves an empty state (its next step starts fresh).
                save_optimizer(self.optimizer or self._new_optimizer(), self.names, temp)

        publish_dir(directory, write, {**meta, "lora": self.lora.to_json()})

    def load(self, directory: Path, *, with_optimizer: bool) -> None:
        from peft import set_peft_model_state_dict

        from ....adapters.local.checkpoint_io import read_optimizer_state
        from ....adapters.local.checkpoints import OPTIMIZER_FILE
        from ....core.errors import CorruptDataError

        set_peft_model_state_dict(self.model, load_adapter(directory))
        if not with_optimizer:
            return
        if not (directory / OPTIMIZER_FILE).is_file():
            raise UserError(f"checkpoint {directory.name!r} holds no optimizer state")
        try:
            state = read_optimizer_state(self.names, directory)
        except CorruptDataError as exc:
            raise UserError(
                f"the checkpoint's optimizer state does not fit this run: {exc}"
            ) from exc
        optimizer = self._new_optimizer()
        optimizer.load_state_dict(state)
        self.optimizer = optimizer

    def _new_optimizer(self, adam: AdamSettings | None = None) -> torch.optim.AdamW:
        adam = adam or AdamSettings()
        return torch.optim.AdamW(
            self.params, lr=adam.learning_rate, foreach=False, betas=(adam.beta1, adam.beta2)
        )


def padded(
    run: TrainingRun, data: Sequence[DatumIn], loss_fn: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[dict[str, torch.Tensor]]]:
    """The datums checked, as one right-padded batch: (tokens, targets, mask, inputs).
    Causal attention keeps padding out of the real positions, and only the real positions
    are scored (chunk by chunk, no [tokens x vocab] logits)."""
    if loss_fn not in LOSSES:
        raise UserError(
            f"loss_fn {loss_fn!r} is not supported by the tinker emulator; use one of {LOSSES}"
        )
    checked = [
        checked_inputs(index, datum, loss_fn, run.base.vocab_size)
        for index, datum in enumerate(data)
    ]
    width = max((len(datum.tokens) for datum in data), default=0)
    tokens = torch.zeros((len(data), width), dtype=torch.long)
    targets = torch.zeros((len(data), width), dtype=torch.long)
    mask = torch.zeros((len(data), width), dtype=torch.long)
    for row, (datum, inputs) in enumerate(zip(data, checked)):
        n = len(datum.tokens)
        tokens[row, :n] = torch.tensor(datum.tokens)
        targets[row, :n] = inputs["target_tokens"].long()
        mask[row, :n] = 1
    return tokens, targets, mask, checked
