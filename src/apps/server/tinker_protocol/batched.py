"""Several training runs' forward_backward requests in one pass over their shared base.

The runs' models are LoRA copies of one base module sharing its frozen weights
(base_model.py), so one padded batch of every run's datums goes through the first run's
model (the driver) with each LoRA projection swapped, for the pass and its backward, for one
that adds to each run's rows that run's own `B(A(x))·scaling`. Rows never mix (attention is
per row, every other layer per position), so each run's loss and gradient are those of its
datums alone. The output projection runs per run, on its rows' last hidden states, with its
own head (LoRA'd or not) through the LocalBackend's chunked logprobs, as alone.

A batch is made only of runs whose LoRA settings match apart from the seed (the same adapted
modules) on one base; anything else, and any request whose inputs fail the checks, runs
alone (the caller's fallback), so errors read as they do for a request on its own.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs
import torch

from ....adapters.local.logprobs import chunked_selected_logprobs
from .base_model import BaseModel, LoraSettings
from .compute import LOGPROB_CHUNK_TOKENS, TrainingRun, padded
from .losses import datum_loss


@attrs.frozen
class Request:
    run: TrainingRun
    data: Sequence[Any]  # DatumIn
    loss_fn: str
    config: Mapping[str, float]


def batch_key(base: BaseModel, lora: LoraSettings, forward_only: bool) -> tuple[Any, ...]:
    """Requests with equal keys may share a pass: one base, the same adapted modules."""
    return (id(base), forward_only, lora.rank, lora.train_attn, lora.train_mlp,
            lora.train_unembed)  # fmt: skip


def forward_backward_many(
    requests: Sequence[Request], *, forward_only: bool
) -> list[tuple[list[torch.Tensor], float]]:
    """Per request: per-datum target logprobs and the summed loss, as
    `TrainingRun.forward_backward` gives them; each run's gradient added unless forward_only.
    A UserError (inputs failing the checks) is raised before anything runs."""
    prepared = [padded(r.run, r.data, r.loss_fn) for r in requests]
    width = max(tokens.shape[1] for tokens, _, _, _ in prepared)
    tokens = torch.cat([_widen(p[0], width) for p in prepared])
    targets = torch.cat([_widen(p[1], width) for p in prepared])
    mask = torch.cat([_widen(p[2], width) for p in prepared])
    bounds = list(itertools.accumulate(p[0].shape[0] for p in prepared))
    rows = [slice(end - p[0].shape[0], end) for p, end in zip(prepared, bounds)]
    driver = requests[0].run
    device = driver.base.device
    driver.recompute.set_for(int(mask.sum()))
    mask_d, targets_d = mask.bool().to(device), targets.to(device)
    found: list[torch.Tensor] = []
    results: list[tuple[list[torch.Tensor], float]] = []
    with torch.set_grad_enabled(not forward_only), _per_row_lora(requests, rows):
        head = driver.model.get_output_embeddings()
        with _captured(head, found):
            driver.model(
                input_ids=tokens.to(device), attention_mask=mask.to(device), use_cache=False
            )
        if len(found) != 1:
            raise RuntimeError(f"the output projection ran {len(found)} times in one forward")
        hidden = found[0]
        total: list[torch.Tensor] = []
        for request, span, (_, _, _, checked) in zip(requests, rows, prepared):
            select = mask_d[span]
            scored, _entropy = chunked_selected_logprobs(
                request.run.model.get_output_embeddings(),
                hidden[span][select],
                targets_d[span][select],
                LOGPROB_CHUNK_TOKENS,
            )
            ends = list(itertools.accumulate(len(d.tokens) for d in request.data))
            per_datum = [scored[e - len(d.tokens) : e] for d, e in zip(request.data, ends)]
            losses = [
                datum_loss(request.loss_fn, lp, inputs, request.config)
                for lp, inputs in zip(per_datum, checked)
            ]
            loss = torch.stack(losses).sum()
            total.append(loss)
            outputs = [lp.detach().float().cpu() for lp in per_datum]
            results.append((outputs, float(loss.detach().item())))
        if not forward_only:
            # Each run's loss reads only its own adapter: the sum's gradient is each run's own.
            torch.autograd.backward(torch.stack(total).sum())
    return results


def _widen(values: torch.Tensor, width: int) -> torch.Tensor:
    return torch.nn.functional.pad(values, (0, width - values.shape[1]))


@contextlib.contextmanager
def _captured(head: torch.nn.Module, found: list[torch.Tensor]) -> Iterator[None]:
    """The driver's output projection swapped for one that keeps the hidden states."""

    def keep(hidden: torch.Tensor) -> torch.Tensor:
        found.append(hidden)
        return hidden.new_zeros(0)

    head.forward = keep
    try:
        yield
    finally:
        del head.forward


@contextlib.contextmanager
def _per_row_lora(requests: Sequence[Request], rows: Sequence[slice]) -> Iterator[None]:
    """Every LoRA projection of the driver's body (not its head) adds each run's own delta to
    that run's rows; held through backward, where checkpointed layers run again."""
    driver = requests[0].run.model
    head = driver.get_output_embeddings()
    named = [dict(r.run.model.named_modules()) for r in requests]
    swapped: list[torch.nn.Module] = []
    try:
        for name, module in driver.named_modules():
            if module is head or not hasattr(module, "lora_A") or not hasattr(module, "base_layer"):
                continue
            own = [modules[name] for modules in named]
            module.forward = _mixed_forward(module.base_layer, own, rows)
            swapped.append(module)
        yield
    finally:
        for module in swapped:
            del module.forward


def _mixed_forward(base: torch.nn.Module, own: Sequence[Any], rows: Sequence[slice]) -> Any:
    def forward(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        result = base(x, *args, **kwargs)
        pieces = []
        for layer, span in zip(own, rows):
            piece, part = result[span], x[span]
            for adapter in layer.active_adapters:
                if adapter not in layer.lora_A:
                    continue
                a, b = layer.lora_A[adapter], layer.lora_B[adapter]
                piece = piece + b(a(part.to(a.weight.dtype))) * layer.scaling[adapter]
            pieces.append(piece.to(result.dtype))
        return torch.cat(pieces)

    return forward
