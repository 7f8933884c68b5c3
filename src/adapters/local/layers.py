"""The decoder layers of the trained model, and activation checkpointing over them.

Without checkpointing every layer keeps its intermediate activations for backward (about
`4H + 3(A+K)D + 4I` values a token: the norms, q/k/v, the attention output, the MLP's
gate/up/product), which at 24 layers and 8k tokens is tens of GB. With it a layer keeps only
its input (H values a token) and runs again, one layer at a time, during backward: one more
forward's worth of compute for a memory that no longer grows with depth beyond H per layer.

Transformers' own switch only checkpoints in training mode, and the trainer keeps the model in
eval mode (dropout off, so its logprobs are the sampler's); so the layers are wrapped here, the
same way for LoRA and full fine-tuning, before any FSDP2 sharding (so the recomputation runs
inside the sharded layer's hooks, its parameters gathered).

The rebuilt layer's largest part is its MLP (gate, up, activation and product: 4I values a
token, three quarters of a Qwen or Llama layer's activations). A checkpointed layer's MLP
therefore runs `MLP_CHUNK_TOKENS` tokens at a time, each chunk checkpointed in turn, so a
layer rebuilt in backward holds the MLP's intermediates of one chunk, never of the whole
micro-batch. The MLP acts on each token alone, so the chunks give the same values (the
weights' gradients are summed over chunks instead of in one product: float rounding); the
price is one more forward of the MLP in backward.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

AUTO_ABOVE_BYTES = 2**30
""""auto" checkpoints a micro-batch whose stored layer activations would pass 1 GiB."""
MLP_CHUNK_TOKENS = 1024
"""Tokens of a checkpointed layer's MLP run (and rebuilt) at a time."""


def decoder_layers(model: Any, *, full: bool) -> list[torch.nn.Module]:
    """The repeated blocks (the model's `_no_split_modules` classes), in order."""
    inner = model if full else model.get_base_model()
    blocks = set(getattr(inner, "_no_split_modules", None) or ())
    return [m for m in inner.modules() if type(m).__name__ in blocks]


def stored_layer_bytes(config: Any, tokens: int, dtype: torch.dtype) -> int:
    """Bytes the decoder layers keep for backward over `tokens` tokens, unchecked."""
    hidden = int(getattr(config, "hidden_size", 0) or 0)
    heads = int(getattr(config, "num_attention_heads", 0) or 1)
    kv_heads = int(getattr(config, "num_key_value_heads", 0) or heads)
    head_dim = int(getattr(config, "head_dim", 0) or hidden // heads)
    inner = int(getattr(config, "intermediate_size", 0) or 4 * hidden)
    layers = int(getattr(config, "num_hidden_layers", 0) or 0)
    values = 4 * hidden + 3 * (heads + kv_heads) * head_dim + 4 * inner
    return layers * tokens * values * torch.empty(0, dtype=dtype).element_size()


def wanted(choice: bool | str, config: Any, tokens: int, dtype: torch.dtype) -> bool:
    """True, False, or "auto": on when a micro-batch's stored activations pass 1 GiB."""
    if choice == "auto":
        return stored_layer_bytes(config, tokens, dtype) > AUTO_ABOVE_BYTES
    if isinstance(choice, bool):
        return choice
    raise ValueError(f"gradient_checkpointing must be True, False or 'auto', got {choice!r}")


class Recompute:
    """Whether the wrapped layers recompute in backward now: fixed by True, decided for each
    micro-batch by "auto" (from its own tokens: a row longer than `micro_batch_tokens` makes
    a micro-batch of its own, which may need it when the planned size did not)."""

    def __init__(self, choice: bool | str, config: Any, dtype: torch.dtype, tokens: int) -> None:
        self.mlp_chunk = MLP_CHUNK_TOKENS
        self.choice = choice
        self.config = config
        self.dtype = dtype
        self.on = wanted(choice, config, tokens, dtype)

    def set_for(self, tokens: int) -> None:
        if self.choice == "auto":
            self.on = wanted("auto", self.config, tokens, self.dtype)


def use_checkpointing(model: Any, settings: Any, *, full: bool) -> Recompute | None:
    """The decoder layers wrapped, unless the settings say never (None)."""
    choice = settings.gradient_checkpointing
    if choice is False:
        return None
    dtype = next(model.parameters()).dtype
    switch = Recompute(choice, model.config, dtype, settings.micro_batch_tokens)
    for layer in decoder_layers(model, full=full):
        checkpoint_layer(layer, switch)
    return switch


def checkpoint_layer(layer: torch.nn.Module, switch: Recompute) -> None:
    """The layer's forward, recomputed in backward instead of stored while `switch` is on
    (and only while a graph is being recorded: no-grad passes such as the KL reference's run
    it plainly). An instance attribute, so parameter names, hooks and the class stay the
    layer's own. A gated MLP inside it (`layer.mlp` with a `down_proj`: the dense decoders'
    kind; a mixture of experts routes tokens and is left whole) runs in token chunks."""
    layer.forward = functools.partial(_recomputed, switch, layer.forward)
    mlp = getattr(layer, "mlp", None)
    if isinstance(mlp, torch.nn.Module) and hasattr(mlp, "down_proj"):
        mlp.forward = functools.partial(_chunked_mlp, switch, mlp.forward)


def _recomputed(switch: Recompute, forward: Any, *args: Any, **kwargs: Any) -> Any:
    if not (switch.on and torch.is_grad_enabled()):
        return forward(*args, **kwargs)
    from torch.utils.checkpoint import checkpoint

    return checkpoint(forward, *args, use_reentrant=False, **kwargs)


def _chunked_mlp(switch: Recompute, forward: Any, hidden: torch.Tensor) -> Any:
    flat = hidden.reshape(-1, hidden.shape[-1])
    chunk = switch.mlp_chunk
    if not (switch.on and torch.is_grad_enabled()) or flat.shape[0] <= chunk:
        return forward(hidden)
    from torch.utils.checkpoint import checkpoint

    parts = [checkpoint(forward, part, use_reentrant=False) for part in torch.split(flat, chunk)]
    return torch.cat(parts).reshape(*hidden.shape[:-1], -1)
