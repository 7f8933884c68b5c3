"""The chosen tokens' log-probabilities, chunk by chunk over the vocabulary projection.

A causal LM's logits are `[tokens × vocabulary]`: 8,192 tokens of a 151,936-word vocabulary are
5 GB in float32, and the plain `log_softmax(logits.float())` keeps several such tensors for
backward (the float copy, the log-softmax, their gradients). Training only ever reads one number
per position (the next token's log-probability) plus the entropy for a metric, so this module
runs the model with its output projection (`lm_head`) swapped for one that keeps the last hidden
state of the positions the loss reads and projects them `chunk` rows at a time: each chunk's
logits exist only while its log-sum-exp, chosen logit and entropy are taken. For the gradient a
frozen head (LoRA's) keeps H values a position, taken in the same pass; a trained head's chunks
are computed again in backward (`softmax - onehot`, never stored whole).

The numbers are the plain path's: logits in the model's dtype, cast to float32 before the
reduction, exactly as `log_softmax(logits.float())`. Only the positions the loss reads are
projected at all (prompt and padding tokens cost no vocabulary pass).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

DEFAULT_CHUNK_TOKENS = 256
"""Rows of logits per chunk: at a 151,936-word vocabulary a float32 chunk is 156 MB and about
two are held at once. Measured on the CPU (docs/performance.md): 1024 rows take 17% less time
for 3.7x the memory, 64 rows 26% more time for a third of it."""

# Configs that transform the logits after the projection: those models take the plain path.
_AFTER_PROJECTION = ("final_logit_softcapping", "logit_scale", "output_multiplier_scale")


class _ChunkedSelected(torch.autograd.Function):
    """(log p(target), entropy) per row of `hidden` under `hidden @ weight.T + bias`."""

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        targets: torch.Tensor,
        chunk: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n = hidden.shape[0]
        chosen = torch.empty(n, dtype=torch.float32, device=hidden.device)
        entropy = torch.empty_like(chosen)
        lse = torch.empty_like(chosen)
        want_h, want_w, want_b = ctx.needs_input_grad[:3]
        # A frozen head (LoRA) needs only d chosen / d hidden = W[t] - softmax(z) @ W, H values
        # a row: taken here, from the probabilities at hand, backward needs no second
        # projection. A trained head needs the whole `softmax - onehot` for its own gradient,
        # so backward projects each chunk again instead.
        direct = want_h and not (want_w or want_b)
        jacobian = torch.empty(hidden.shape if direct else (0,), device=hidden.device)
        for start in range(0, n, chunk):
            end = min(start + chunk, n)
            z = _project(hidden[start:end], weight, bias)
            lse[start:end] = torch.logsumexp(z, dim=-1)
            chosen[start:end] = z.gather(-1, targets[start:end, None]).squeeze(-1) - lse[start:end]
            logp = z.sub_(lse[start:end, None])  # in place: the chunk's log-softmax
            p = logp.exp()
            if direct:
                expected = (p.to(weight.dtype) @ weight).float()
                jacobian[start:end] = weight[targets[start:end]].float() - expected
            entropy[start:end] = -p.mul_(logp).sum(-1)
            del z, logp, p
        if direct:  # nothing else is needed: the chunk's inputs go as soon as forward ends
            ctx.save_for_backward(None, None, None, None, None, jacobian)
        else:
            ctx.save_for_backward(hidden, weight, bias, targets, lse, None)
        ctx.chunk = chunk
        ctx.dtype = hidden.dtype
        ctx.mark_non_differentiable(entropy)
        return chosen, entropy

    @staticmethod
    def backward(
        ctx: Any, grad_chosen: torch.Tensor, _grad_entropy: torch.Tensor
    ) -> tuple[torch.Tensor | None, ...]:
        hidden, weight, bias, targets, lse, jacobian = ctx.saved_tensors
        if jacobian is not None:
            grad_h = (grad_chosen.float()[:, None] * jacobian).to(ctx.dtype)
            return grad_h, None, None, None, None
        want_h, want_w, want_b = ctx.needs_input_grad[:3]
        grad_h = torch.empty_like(hidden) if want_h else None
        acc = torch.float32 if weight.dtype != torch.float64 else torch.float64
        grad_w = torch.zeros(weight.shape, dtype=acc, device=weight.device) if want_w else None
        grad_b = torch.zeros(weight.shape[0], dtype=acc, device=weight.device) if want_b else None
        for start in range(0, hidden.shape[0], ctx.chunk):
            end = min(start + ctx.chunk, hidden.shape[0])
            g = grad_chosen[start:end].float()
            # d log p(t) / dz = onehot(t) - softmax(z), scaled by the incoming gradient
            dz = _project(hidden[start:end], weight, bias).sub_(lse[start:end, None]).exp_()
            dz.mul_(-g[:, None])
            rows = torch.arange(end - start, device=dz.device)
            dz[rows, targets[start:end]] += g
            if grad_h is not None:
                grad_h[start:end] = (dz.to(weight.dtype) @ weight).to(hidden.dtype)
            if grad_w is not None:
                grad_w += dz.T @ hidden[start:end].to(acc)
            if grad_b is not None:
                grad_b += dz.sum(0)
            del dz
        return (
            grad_h,
            grad_w.to(weight.dtype) if grad_w is not None else None,
            grad_b.to(bias.dtype) if grad_b is not None else None,
            None,
            None,
        )


def _project(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """One chunk's logits as the model makes them (its dtype), then float32."""
    logits = torch.nn.functional.linear(hidden, weight, bias)
    return logits.float()


def chunked_selected_logprobs(
    head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, chunk: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(target), entropy) per row of `hidden` [n, H] under the projection `head`.

    A plain `nn.Linear` head (tied to the embeddings or not) takes the custom function; any
    other head (a LoRA-wrapped one) is run chunk by chunk under activation checkpointing,
    which keeps one chunk's logits at a time too, with a little more held per chunk."""
    if chunk < 1:
        raise ValueError(f"logprob chunk size must be >= 1, got {chunk}")
    if type(head) is torch.nn.Linear:
        apply: Any = _ChunkedSelected.apply
        chosen, entropy = apply(hidden, head.weight, head.bias, targets, chunk)
        return chosen, entropy
    from torch.utils.checkpoint import checkpoint

    forward = type(head).forward
    parts: list[tuple[torch.Tensor, torch.Tensor]] = []
    for start in range(0, hidden.shape[0], chunk):
        piece = checkpoint(
            _head_piece, forward, head, hidden[start : start + chunk],
            targets[start : start + chunk], use_reentrant=False,
        )  # fmt: skip
        parts.append(piece)
    if not parts:  # still part of the graph: a sharded pass over nothing must reach backward
        empty = hidden.float().sum(-1)
        return empty, empty.detach()
    return torch.cat([c for c, _ in parts]), torch.cat([e for _, e in parts]).detach()


def _head_piece(
    forward: Any, head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    logp = torch.log_softmax(forward(head, hidden).float(), dim=-1)
    with torch.no_grad():
        entropy = -(logp.exp() * logp).sum(-1)
    return logp.gather(-1, targets[:, None]).squeeze(-1), entropy


def projects_plainly(model: Any) -> bool:
    """Whether the model's logits are its output projection's, untransformed (else the
    chunked path would miss a soft cap or scale, and the plain path runs instead)."""
    config = getattr(model, "config", None)
    return not any(getattr(config, name, None) for name in _AFTER_PROJECTION)


def selected_logprobs(
    model: Any,
    select: torch.Tensor,
    chunk: int,
    **inputs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(next token), entropy) at the positions `select` [rows, len-1] marks, [n] each
    in row-major order: position t of a row scores token t+1 of `inputs["input_ids"]`."""
    tokens: torch.Tensor = inputs["input_ids"]
    return _scored(model, select, tokens[:, 1:][select], chunk, shifted=True, inputs=inputs)


def target_logprobs(
    model: Any,
    select: torch.Tensor,
    targets: torch.Tensor,
    chunk: int,
    **inputs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(target), entropy) at the positions `select` [rows, len] marks, [n] each in
    row-major order: position t of a row scores `targets[row, t]` (Tinker's datums name the
    target of every input position themselves, the last one included)."""
    return _scored(model, select, targets[select], chunk, shifted=False, inputs=inputs)


def _scored(
    model: Any,
    select: torch.Tensor,
    targets: torch.Tensor,
    chunk: int,
    *,
    shifted: bool,
    inputs: dict[str, Any],
) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's forward runs whole (so sharding hooks and adapters see an ordinary call);
    only its output projection is swapped, for this call, for one that scores the selected
    positions chunk by chunk and returns no logits."""
    if not projects_plainly(model):
        logits = model(**inputs, use_cache=False).logits
        logits = logits[:, :-1] if shifted else logits
        logp = torch.log_softmax(logits[select].float(), dim=-1)
        entropy = -(logp.exp() * logp).sum(-1).detach()
        return logp.gather(-1, targets[:, None]).squeeze(-1), entropy
    head = model.get_output_embeddings()
    found: list[tuple[torch.Tensor, torch.Tensor]] = []

    def project(hidden: torch.Tensor) -> torch.Tensor:
        scored = hidden[:, :-1] if shifted else hidden
        found.append(chunked_selected_logprobs(head, scored[select], targets, chunk))
        return hidden.new_zeros(0)

    with _forward_swapped(head, project):
        model(**inputs, use_cache=False)
    if len(found) != 1:
        raise RuntimeError(f"the output projection ran {len(found)} times in one forward")
    return found[0]


@contextlib.contextmanager
def _forward_swapped(module: torch.nn.Module, forward: Any) -> Iterator[None]:
    """`module`'s forward replaced for the block (an instance attribute, so parameter names,
    hooks and the class are untouched)."""
    module.forward = forward
    try:
        yield
    finally:
        del module.forward


def scatter_rows(values: torch.Tensor, select: torch.Tensor) -> torch.Tensor:
    """`values` [n] back at the `select` positions of a zero [rows, len-1] tensor (the
    gradient flows through)."""
    out = torch.zeros(select.shape, dtype=values.dtype, device=values.device)
    return out.index_put((select,), values)
