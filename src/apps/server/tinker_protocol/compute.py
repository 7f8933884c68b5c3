"""The compute behind a tinker emulator's training run: its LoRA adapter and AdamW state.

Everything here runs on the emulator's single compute thread (one "device"), so nothing in this
module locks. The model is a LoRA copy of the base (base_model.py); the losses are losses.py's;
checkpoints are folders in store.py's layout.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import torch

from .base_model import BaseModel, LoraSettings
from .errors import UserError
from .losses import LOSSES, DatumIn, checked_inputs, datum_loss
from .store import ADAPTER_FILE, OPTIMIZER_FILE, load_adapter, publish_dir


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
        if loss_fn not in LOSSES:
            raise UserError(
                f"loss_fn {loss_fn!r} is not supported by the tinker emulator; use one of {LOSSES}"
            )
        checked = [
            checked_inputs(index, datum, loss_fn, self.base.vocab_size)
            for index, datum in enumerate(data)
        ]
        if not data:
            return [], 0.0
        # One right-padded batch: causal attention keeps padding out of the real positions.
        device = self.base.device
        width = max(len(datum.tokens) for datum in data)
        tokens = torch.zeros((len(data), width), dtype=torch.long)
        mask = torch.zeros((len(data), width), dtype=torch.long)
        for row, datum in enumerate(data):
            tokens[row, : len(datum.tokens)] = torch.tensor(datum.tokens)
            mask[row, : len(datum.tokens)] = 1
        outputs: list[torch.Tensor] = []
        with torch.set_grad_enabled(not forward_only):
            logits = self.model(
                input_ids=tokens.to(device), attention_mask=mask.to(device), use_cache=False
            ).logits.float()
            logp = torch.log_softmax(logits, dim=-1)
            losses = []
            for row, (datum, inputs) in enumerate(zip(data, checked)):
                n = len(datum.tokens)
                targets = inputs["target_tokens"].long().to(device)
                lp = logp[row, :n].gather(-1, targets.unsqueeze(-1)).squeeze(-1)
                losses.append(datum_loss(loss_fn, lp, inputs, config))
                outputs.append(lp.detach().float().cpu())
            loss = torch.stack(losses).sum()
            if not forward_only:
                torch.autograd.backward(loss)
        return outputs, float(loss.detach().item())

    def optim_step(self, adam: AdamSettings) -> dict[str, float]:
        if self.optimizer is None:
            self.optimizer = torch.optim.AdamW(
                self.params, lr=adam.learning_rate, foreach=False, betas=(adam.beta1, adam.beta2)
            )
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
        """Write the adapter (and optimizer state) into `directory`, all or nothing."""
        from safetensors.torch import save_file

        def write(temp: Path) -> None:
            save_file(self.adapter(), str(temp / ADAPTER_FILE))
            if with_optimizer:
                state = self.optimizer.state_dict() if self.optimizer is not None else None
                torch.save({"names": self.names, "state": state}, temp / OPTIMIZER_FILE)

        publish_dir(directory, write, {**meta, "lora": self.lora.to_json()})

    def load(self, directory: Path, *, with_optimizer: bool) -> None:
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(self.model, load_adapter(directory))
        if not with_optimizer:
            return
        path = directory / OPTIMIZER_FILE
        if not path.is_file():
            raise UserError(f"checkpoint {directory.name!r} holds no optimizer state")
        saved = torch.load(path, weights_only=True)
        if saved["names"] != self.names:
            raise UserError("the checkpoint's optimizer state does not fit this LoRA layout")
        if saved["state"] is not None:
            self.optimizer = torch.optim.AdamW(self.params, foreach=False)
            self.optimizer.load_state_dict(saved["state"])
