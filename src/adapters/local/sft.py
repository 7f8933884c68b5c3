"""Supervised fine-tuning on the local trainer: the gradient steps of one `train_sft` call.

Synchronous, for the worker thread, like trainer.py. Each planned batch (core/sft.py) is one
optimizer step whose loss is the mean token cross-entropy over the batch's target tokens (ART's
`num_items_in_batch` normalisation: a long reply weighs more than a short one), accumulated over
micro-batches of about `micro_batch_tokens` tokens, then clipped to `max_grad_norm`.

Choices where the reference was silent:
- Weight decay is 0 while fine-tuning (ART's SFT sets it so); RL keeps the backend's.
- Adam's moments are per objective: the trainer starts its optimizer state afresh when a run
  switches between RL and SFT (ART resets it the same way), and the checkpoint remembers
  which objective its state belongs to.
- The cross-entropy is read at the target positions only, chunk by chunk over the vocabulary
  (logprobs.py), as RL's loss is.
- Rows are right-padded, so no attention mask is passed: under causal attention a real token
  sees only earlier, real positions (see trainer._padding_mask).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

from ...core.sft import TrainSFTConfig, step_metrics
from ..inference.sft_tokens import SFTBatch, SFTData
from .logprobs import selected_logprobs
from .trainer import PolicyTrainer


def sft_steps(
    trainer: PolicyTrainer, data: SFTData, config: TrainSFTConfig
) -> Iterator[dict[str, float]]:
    """One optimizer step per batch, yielding its metrics as it finishes."""
    assert trainer.optimizer is not None and trainer.model is not None
    trainer.use_optimizer_for("sft")
    for group in trainer.optimizer.param_groups:
        group["weight_decay"] = 0.0
    params = [p for group in trainer.optimizer.param_groups for p in group["params"]]
    device = torch.device(trainer.settings.device)
    limit = config.max_grad_norm if config.max_grad_norm is not None else math.inf
    for batch in data.batches:
        for group in trainer.optimizer.param_groups:
            group["lr"] = batch.learning_rate
        normalizer = float(batch.num_targets)
        trainer.optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for tokens, targets in _micro_batches(batch, trainer, device):
            select = targets[:, 1:] != 0
            trainer.forward_of(tokens.numel())
            logprobs, _ = selected_logprobs(
                trainer.model,
                select,
                trainer.settings.logprob_calculation_chunk_size,
                input_ids=tokens,
            )
            loss = -(logprobs * targets[:, 1:][select]).sum() / normalizer
            loss.backward()  # type: ignore[no-untyped-call]
            loss_sum += float(loss.item())
            del logprobs, loss
        grad_norm = torch.nn.utils.clip_grad_norm_(params, limit)
        trainer.optimizer.step()
        yield step_metrics(
            loss=loss_sum,
            grad_norm=float(grad_norm.item()),
            learning_rate=batch.learning_rate,
            conversations=data.conversations,
            trainable_tokens=data.num_targets,
            dropped=data.dropped,
            gradient_steps=len(data.batches),
        )


def _micro_batches(
    batch: SFTBatch, trainer: PolicyTrainer, device: torch.device
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Right-padded (tokens, target mask) tensors of about `micro_batch_tokens` tokens each."""
    rows = sorted(batch.sequences, key=lambda s: len(s.tokens))
    budget = trainer.settings.micro_batch_tokens
    start = 0
    while start < len(rows):
        end = start + 1
        while end < len(rows) and (end + 1 - start) * len(rows[end].tokens) <= budget:
            end += 1
        part = rows[start:end]
        width = max(len(s.tokens) for s in part)
        tokens = torch.full((len(part), width), trainer.pad_token_id, dtype=torch.long)
        targets = torch.zeros((len(part), width), dtype=torch.float32)
        for row, sequence in enumerate(part):
            tokens[row, : len(sequence.tokens)] = torch.tensor(sequence.tokens)
            targets[row, : len(sequence.targets)] = torch.tensor(sequence.targets)
        yield tokens.to(device), targets.to(device)
        start = end
