"""A checkpointed decoder layer runs its MLP in token chunks, and that changes memory, never
the numbers: its output and every gradient (the input's, the weights' or the LoRA adapters')
equal those of a plain forward and backward of the same layer (the oracle), to 1e-5 in
float32 (relative to each tensor's largest entry where an entry is near zero), with a chunk
that does not divide the tokens."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from arthex.adapters.local.layers import Recompute, checkpoint_layer  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning")

CHUNK = 7
ROWS, SEQ = 2, 45  # 90 tokens: 13 chunks, the last of 6


def a_layer(lora: bool) -> tuple[Any, Any]:
    """The first decoder layer of a small random Qwen2 (q/k/v biases, 4 query and 2 key/value
    heads), plain or with LoRA adapters on every linear layer; and its rotary embedding."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=32, hidden_size=32, intermediate_size=96, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
    )  # fmt: skip
    model: Any = Qwen2ForCausalLM(config)
    if lora:
        from peft import LoraConfig, get_peft_model

        targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        model = get_peft_model(
            model, LoraConfig(r=4, target_modules=targets, init_lora_weights=False)
        )
        inner = model.get_base_model().model
    else:
        inner = model.model
    model.eval()
    return inner.layers[0], inner.rotary_emb


def step(layer: Any, rotary: Any) -> tuple[Any, dict[str, Any]]:
    """The layer's output and the gradients of a weighted sum of it."""
    gen = torch.Generator().manual_seed(1)
    hidden = torch.randn(ROWS, SEQ, 32, generator=gen, requires_grad=True)
    weights = torch.randn(ROWS, SEQ, 32, generator=gen)
    positions = torch.arange(SEQ)[None].expand(ROWS, -1)
    for param in layer.parameters():
        param.grad = None
    out = layer(hidden, position_embeddings=rotary(hidden, positions))
    out = out[0] if isinstance(out, tuple) else out
    (out * weights).sum().backward()
    grads = {"input": hidden.grad}
    grads |= {n: p.grad for n, p in layer.named_parameters() if p.requires_grad}
    return out.detach(), grads


def tokens_seen(module: Any) -> list[int]:
    """The tokens of each call of `module`, as it is called."""
    rows: list[int] = []
    module.register_forward_hook(lambda _m, _a, out: rows.append(out.shape[:-1].numel()))
    return rows


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_a_layer_with_its_mlp_in_chunks_gives_the_plain_gradients(lora: bool) -> None:
    layer, rotary = a_layer(lora)
    plain_out, plain = step(layer, rotary)
    rows: list[int] = []
    layer.mlp.gate_proj.register_forward_hook(
        lambda _m, _a, out: rows.append(out.shape[:-1].numel())
    )
    switch = Recompute(True, None, torch.float32, ROWS * SEQ)
    switch.mlp_chunk = CHUNK
    checkpoint_layer(layer, switch)
    out, chunked = step(layer, rotary)
    # the MLP ran 7 tokens at a time in the forward and again when the layer was rebuilt in
    # backward (torch also rebuilds each chunk for its own backward): no pass saw all 90
    assert rows[:13] == [CHUNK] * 12 + [6] and max(rows) == CHUNK and len(rows) >= 26
    torch.testing.assert_close(out, plain_out, rtol=1e-5, atol=1e-6)
    assert chunked.keys() == plain.keys() and len(plain) > (8 if lora else 1)
    for name, grad in plain.items():
        # a weight's gradient sums over tokens, by chunk here: an entry near zero can carry
        # the rounding of its larger neighbours, so the absolute floor follows the tensor
        scale = 1e-5 * float(grad.abs().max())
        torch.testing.assert_close(chunked[name], grad, rtol=1e-5, atol=scale, msg=name)


def test_a_layer_not_recording_a_graph_runs_its_mlp_whole() -> None:
    layer, rotary = a_layer(lora=False)
    rows: list[int] = []
    layer.mlp.gate_proj.register_forward_hook(
        lambda _m, _a, out: rows.append(out.shape[:-1].numel())
    )
    switch = Recompute(True, None, torch.float32, ROWS * SEQ)
    switch.mlp_chunk = CHUNK
    checkpoint_layer(layer, switch)
    hidden = torch.randn(1, SEQ, 32)
    with torch.no_grad():  # as the KL reference's pass runs
        layer(hidden, position_embeddings=rotary(hidden, torch.arange(SEQ)[None]))
    switch.on = False  # as "auto" leaves a small micro-batch
    layer(hidden, position_embeddings=rotary(hidden, torch.arange(SEQ)[None]))
    assert rows == [SEQ, SEQ]
