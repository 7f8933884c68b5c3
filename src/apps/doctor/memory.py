"""The memory plan: what training a base model with the LocalBackend takes on this device.

The sizes follow what the LocalBackend's trainer does (adapters/local/trainer.py) and are
stated with a worked example in docs/troubleshooting.md:

- the trainer's weights: P parameters in bfloat16 for LoRA on a GPU, float32 otherwise (full
  fine-tuning keeps float32 master weights; the CPU trains in float32);
- LoRA: T adapter parameters in float32, plus their gradients and AdamW's two moments:
  16 T bytes. Full fine-tuning: gradients and AdamW's two moments of every parameter in
  float32: 12 P bytes;
- activations for one micro-batch: the trainer splits a step's rows into micro-batches of
  `micro_batch_tokens` (8192, a LocalBackend setting) tokens, so a micro-batch holds
  `min(batch, max(1, micro_batch_tokens // S)) * S` tokens for rows of S tokens. Unchecked,
  each token keeps, per layer, `4H + 3(A + K)D + 4I` values in the weights' dtype of b bytes
  (norm inputs and outputs, q/k before and after rotary, v, the attention output, the MLP's
  gate, up, activation and product), and for LoRA in bfloat16 `4(2H + AD + I)` more bytes for
  the float32 copies of the adapted layers' inputs (peft runs adapters in float32). With
  activation checkpointing (on when that would pass 1 GiB, or as LocalBackend's
  `gradient_checkpointing` says) each layer keeps only its input, `H b` a token, and one
  layer is rebuilt at a time in backward: its attention part (`4H + 3(A + K)D` values, and
  for LoRA in bfloat16 `4(H + AD)` bytes) for every token of the micro-batch, its MLP part
  (`4I` values, and `4(H + I)` bytes) for `MLP_CHUNK_TOKENS` (1024) tokens only, the
  checkpointed layer's MLP running that many tokens at a time. Measured against the bytes
  torch saves for backward (tests/unit/test_doctor_memory.py): within 15%. Besides what is
  saved, the layer being differentiated holds gradients. Unchecked, as many bytes as its
  attention part, `(4H + 3(A + K)D) b` a token. Checkpointed, backward's peak is the larger
  of two moments of the rebuilt layer (torch's profiler shows which): its MLP's backward,
  which holds the MLP chunk, the chunk's gradients (gate, up, activation and the chunk's
  output, `(3I + H) b` a token of the chunk) and the layer output's gradient (`H b` for
  every token); or its attention part's backward, after the MLP chunk is freed, with that
  part's gradients, `(4H + 3(A + K)D) b` for every token. (Counting the MLP chunk and the
  attention gradients at once overstated a LoRA step's peak by a fifth.) The trainer's
  measured peak on the CPU (tests/e2e/test_memory_plan_measured.py): within 15%;
- one chunk of log-probs: the trainer projects `logprob_calculation_chunk_size` (256)
  positions at a time onto the vocabulary, `V (b + 8)` bytes a position (the projection, its
  float32 copy turned log-softmax in place, and the probabilities); no `[tokens x V]` tensor;
- the sampling engine: vLLM keeps `gpu_memory_utilization` of the device's total memory for
  its whole life; the torch engine keeps its own copy of the base weights (bfloat16 on a GPU,
  float32 on the CPU), one more copy of the served step under full fine-tuning, and a KV
  cache of `batch * S * 2 L K D` values;
- 1 GiB for the CUDA context and the allocator's slack on a GPU.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import attrs

from ...core.errors import InvalidInputError
from .check import Check, fail, ok
from .run_dir import gib

Mode = Literal["auto", "lora", "full"]
Engine = Literal["torch", "vllm"]

# The trainer's own constants (adapters/local/trainer.py), without importing torch here;
# tests/unit/test_doctor_memory.py holds them equal.
LORA_TARGETS: tuple[str, ...] = (
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
)  # fmt: skip
FULL_FINETUNE_BELOW_PARAMS = 50_000_000
MICRO_BATCH_TOKENS = 8192
LOGPROB_CHUNK_TOKENS = 256
CHECKPOINT_ABOVE_BYTES = 2**30  # "auto" checkpoints past this much stored layer activations
MLP_CHUNK_TOKENS = 1024  # a checkpointed layer's MLP runs this many tokens at a time
CUDA_OVERHEAD = 2**30
ROW_MULTIPLE = 128
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_UNITS |= {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_size(text: str) -> int:
    """`24GiB`, `80 GB`, `512MiB`, `1000000` (bytes) as bytes; InvalidInputError otherwise."""
    match = _SIZE.match(text)
    if match is None or float(match.group(1)) <= 0:
        raise InvalidInputError(
            f"--device-memory must be a size such as 24GiB, 80GB or 512MiB, got {text!r}"
        )
    return int(float(match.group(1)) * _UNITS[(match.group(2) or "B").upper()])


@attrs.frozen
class ModelShape:
    """What the plan needs from a dense decoder's config.json."""

    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    tied: bool
    context: int
    qkv_bias: bool = False
    experts: int = 0

    @property
    def params(self) -> int:
        """P: embeddings (and an untied head), per layer q/k/v/o, the gated MLP and two
        norms, and the final norm."""
        h, d = self.hidden, self.head_dim
        attention = 2 * h * self.heads * d + 2 * h * self.kv_heads * d
        if self.qkv_bias:
            attention += (self.heads + 2 * self.kv_heads) * d
        layer = attention + 3 * h * self.intermediate + 2 * h
        embeddings = self.vocab * h * (1 if self.tied else 2)
        return embeddings + self.layers * layer + h

    def lora_params(self, rank: int, targets: Sequence[str] = LORA_TARGETS) -> int:
        """T: `rank * (inputs + outputs)` for each targeted linear layer of each layer."""
        h, i = self.hidden, self.intermediate
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        sides = {
            "q_proj": h + q, "k_proj": h + kv, "v_proj": h + kv, "o_proj": q + h,
            "gate_proj": h + i, "up_proj": h + i, "down_proj": i + h,
        }  # fmt: skip
        return self.layers * rank * sum(sides.get(target, 0) for target in targets)


def read_shape(model_dir: Path) -> ModelShape:
    """The shape from `config.json` in a local model folder, or that file itself (a
    multimodal config's text part). Transformers, when installed, fills the fields a config
    leaves at its class's default; nothing is fetched. InvalidInputError naming what is
    missing."""
    file = model_dir if model_dir.is_file() else model_dir / "config.json"
    try:
        raw: Any = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise InvalidInputError(f"cannot read {file}: {error}") from None
    if not isinstance(raw, dict):
        raise InvalidInputError(f"{file} is not a JSON object")
    values: dict[str, Any] = dict(raw.get("text_config") or raw)
    values = {**_class_defaults(file), **values}
    try:
        hidden = int(values["hidden_size"])
        heads = int(values["num_attention_heads"])
        return ModelShape(
            vocab=int(values["vocab_size"]),
            hidden=hidden,
            intermediate=int(values["intermediate_size"]),
            layers=int(values["num_hidden_layers"]),
            heads=heads,
            kv_heads=int(values.get("num_key_value_heads") or heads),
            head_dim=int(values.get("head_dim") or hidden // heads),
            tied=bool(values.get("tie_word_embeddings", False)),
            context=int(values.get("max_position_embeddings") or 2048),
            qkv_bias=bool(values.get("attention_bias")) or values.get("model_type") == "qwen2",
            experts=int(values.get("num_experts") or values.get("num_local_experts") or 0),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise InvalidInputError(
            f"{file} lacks what the memory plan needs ({error}): it plans dense decoder "
            "models (Llama, Qwen, Mistral and their kin)"
        ) from None


def _class_defaults(file: Path) -> dict[str, Any]:
    try:
        from transformers import AutoConfig

        from ...adapters.hf_quiet import quiet_hf

        quiet_hf()
        config: Any = AutoConfig.from_pretrained(str(file), local_files_only=True)
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        found: dict[str, Any] = text.to_dict()
        return found
    except Exception:  # not installed, or a model transformers does not know: the raw file
        return {}


@attrs.frozen
class PlanSettings:
    """How the model would be trained: the LocalBackend's options the plan depends on."""

    mode: Mode = "auto"
    lora_rank: int = 8
    max_seq_len: int | None = None  # None: min(4096, the model's context)
    batch: int = 16  # sequences per optimizer step (groups x rollouts per group)
    gpu: bool = False
    engine: Engine = "torch"
    gpu_memory_utilization: float = 0.5
    micro_batch_tokens: int = MICRO_BATCH_TOKENS
    gradient_checkpointing: bool | Literal["auto"] = "auto"
    logprob_chunk: int = LOGPROB_CHUNK_TOKENS


@attrs.frozen
class MemoryPlan:
    """Bytes per component (`parts`, in print order) against what the device has."""

    full: bool
    seq_len: int
    micro_tokens: int
    parts: tuple[tuple[str, int], ...]
    available: int
    total: int  # the device's total memory (vLLM's share is a fraction of it)
    checkpointed: bool = False  # the decoder layers recompute their activations

    @property
    def needed(self) -> int:
        return sum(size for _, size in self.parts)

    @property
    def fits(self) -> bool:
        return self.needed <= self.available

    def part(self, name: str) -> int:
        return dict(self.parts)[name]


def layer_values(shape: ModelShape) -> int:
    """Values one token keeps per layer for backward, unchecked (see the module docstring)."""
    h, i = shape.hidden, shape.intermediate
    return 4 * h + 3 * (shape.heads + shape.kv_heads) * shape.head_dim + 4 * i


def mlp_token_bytes(shape: ModelShape, weight_bytes: int, *, lora: bool) -> int:
    """Bytes one token of a layer's MLP saves for backward: `4I` values, and for LoRA in
    bfloat16 peft's float32 copies of the adapted inputs, `4(H + I)` bytes."""
    h, i = shape.hidden, shape.intermediate
    return 4 * i * weight_bytes + (4 * (h + i) if weight_bytes != 4 and lora else 0)


def activation_bytes(
    shape: ModelShape, weight_bytes: int, *, lora: bool, tokens: int, checkpointed: bool = False
) -> int:
    """Bytes a micro-batch of `tokens` tokens takes at the peak of backward (module
    docstring): unchecked, every layer's values for every token; checkpointed, the layers'
    inputs and one layer rebuilt, its MLP part for one chunk of tokens."""
    h, i = shape.hidden, shape.intermediate
    per_layer = layer_values(shape) * weight_bytes
    mlp = mlp_token_bytes(shape, weight_bytes, lora=lora)
    if weight_bytes != 4 and lora:  # peft's float32 copies of each adapted input
        per_layer += 4 * (2 * h + shape.heads * shape.head_dim + i)
    if checkpointed:
        inputs = shape.layers * h * weight_bytes
        return tokens * (inputs + per_layer - mlp) + min(tokens, MLP_CHUNK_TOKENS) * mlp
    return tokens * shape.layers * per_layer


def gradient_bytes(shape: ModelShape, weight_bytes: int, tokens: int) -> int:
    """Bytes of the gradients one layer's backward holds at once over `tokens` tokens (the
    gradients of its norms, q, k, v and attention output: module docstring)."""
    attention = 4 * shape.hidden + 3 * (shape.heads + shape.kv_heads) * shape.head_dim
    return tokens * attention * weight_bytes


def backward_peak_bytes(
    shape: ModelShape, weight_bytes: int, *, lora: bool, tokens: int, checkpointed: bool
) -> int:
    """The activations part: what a micro-batch saves for backward plus the gradients held
    beside it at backward's peak (module docstring). Unchecked, the gradients of one layer's
    attention part for every token. Checkpointed, the rebuilt layer's MLP chunk is freed
    before its attention part is differentiated, so the peak is the larger of two moments:
    the MLP's backward (its chunk of intermediates, their gradients, `(3I + H) b` for each of
    the chunk's tokens, and the layer output's gradient, `H b` for every token) or the
    attention part's (its gradients for every token)."""
    saved = activation_bytes(
        shape, weight_bytes, lora=lora, tokens=tokens, checkpointed=checkpointed
    )
    attention = gradient_bytes(shape, weight_bytes, tokens)
    if not checkpointed:
        return saved + attention
    h, i = shape.hidden, shape.intermediate
    chunk = min(tokens, MLP_CHUNK_TOKENS)
    mlp = mlp_token_bytes(shape, weight_bytes, lora=lora)
    mlp_backward = chunk * (mlp + (3 * i + h) * weight_bytes) + tokens * h * weight_bytes
    return saved - chunk * mlp + max(mlp_backward, attention)


def checkpointing_on(shape: ModelShape, settings: PlanSettings, tokens: int, b: int) -> bool:
    """The trainer's rule (adapters/local/layers.py): True, False, or "auto" past 1 GiB."""
    if settings.gradient_checkpointing == "auto":
        return shape.layers * tokens * layer_values(shape) * b > CHECKPOINT_ABOVE_BYTES
    return bool(settings.gradient_checkpointing)


def plan(shape: ModelShape, settings: PlanSettings, available: int, total: int) -> MemoryPlan:
    """The plan of `shape` trained as `settings` say, against `available` bytes."""
    params = shape.params
    full = settings.mode == "full" or (
        settings.mode == "auto" and params < FULL_FINETUNE_BELOW_PARAMS
    )
    if settings.engine == "vllm":
        full = False  # the vLLM engine serves LoRA steps only: the LocalBackend trains LoRA
    weight_bytes = 2 if settings.gpu and not full else 4
    seq_len = settings.max_seq_len or min(4096, shape.context)
    rows = min(settings.batch, max(1, settings.micro_batch_tokens // seq_len))
    tokens = rows * seq_len
    d = shape.head_dim
    checkpointed = checkpointing_on(shape, settings, tokens, weight_bytes)
    activations = backward_peak_bytes(
        shape, weight_bytes, lora=not full, tokens=tokens, checkpointed=checkpointed
    )
    parts: list[tuple[str, int]] = [("weights", params * weight_bytes)]
    if full:
        parts.append(("gradients+AdamW", 12 * params))
    else:
        parts.append(("LoRA+AdamW", 16 * shape.lora_params(settings.lora_rank)))
    parts.append(("activations", activations))
    chunk = min(settings.logprob_chunk, tokens)
    parts.append(("log-prob chunk", chunk * shape.vocab * (weight_bytes + 8)))
    if settings.engine == "vllm":
        parts.append(("vLLM", math.floor(settings.gpu_memory_utilization * total)))
    else:
        engine_bytes = 2 if settings.gpu else 4
        copies = 2 if full else 1
        cache = settings.batch * seq_len * 2 * shape.layers * shape.kv_heads * d * engine_bytes
        parts.append(("torch engine", copies * params * engine_bytes + cache))
    if settings.gpu:
        parts.append(("CUDA", CUDA_OVERHEAD))
    return MemoryPlan(full, seq_len, tokens, tuple(parts), available, total, checkpointed)


def knobs(shape: ModelShape, settings: PlanSettings, current: MemoryPlan) -> list[str]:
    """The single changes that make a plan that does not fit, fit; a smaller model when none
    does."""
    found: list[str] = []
    budget = (current.available, current.total)
    smaller = settings.micro_batch_tokens // 2
    while smaller >= current.seq_len:
        if plan(shape, attrs.evolve(settings, micro_batch_tokens=smaller), *budget).fits:
            found.append(
                f"a smaller micro-batch (LocalBackend(micro_batch_tokens={smaller}), from "
                f"{settings.micro_batch_tokens}: the same gradient, more passes)"
            )
            break
        smaller //= 2
    if not current.checkpointed:
        checked = plan(shape, attrs.evolve(settings, gradient_checkpointing=True), *budget)
        if checked.fits:
            found.append(
                "activation checkpointing (LocalBackend(gradient_checkpointing=True): "
                f"{gib(checked.needed)}, about a third more compute)"
            )
    if current.full:
        lora = plan(shape, attrs.evolve(settings, mode="lora"), *budget)
        if lora.fits:
            found.append(
                f"LoRA instead of full fine-tuning (full_finetune=False: {gib(lora.needed)})"
            )
    if settings.engine == "vllm" and current.total > 0:
        rest = current.needed - current.part("vLLM")
        share = math.floor((current.available - rest) / current.total * 100) / 100
        floor = 1.2 * shape.params * 2  # vLLM's bfloat16 weights and a little KV cache
        if share > 0 and share * current.total >= floor:
            found.append(
                f"lower gpu_memory_utilization from {settings.gpu_memory_utilization} to {share}"
            )
    shorter = current.seq_len - ROW_MULTIPLE
    while shorter >= ROW_MULTIPLE:
        if plan(shape, attrs.evolve(settings, max_seq_len=shorter), *budget).fits:
            found.append(
                f"lower --max-seq-len from {current.seq_len} to {shorter} (shorter rollouts, "
                "or TrainConfig.packed_sequence_length)"
            )
            break
        shorter -= ROW_MULTIPLE
    if not found:
        found.append(
            f"a smaller base model (this one has {shape.params / 1e9:.2f}B parameters), or a "
            "device with more memory"
        )
    return found


def check_memory(
    shape: ModelShape, settings: PlanSettings, available: int, total: int, where: str
) -> Check:
    """The plan as one line; when it does not fit, the knobs to turn."""
    if settings.max_seq_len is not None and settings.max_seq_len > shape.context:
        return fail(
            "memory",
            f"--max-seq-len {settings.max_seq_len} is longer than the model's context of "
            f"{shape.context} tokens",
            f"use at most {shape.context}",
        )
    if settings.mode == "full" and settings.engine == "vllm":
        return fail(
            "memory",
            "the vLLM engine serves LoRA steps only, so the LocalBackend refuses full "
            "fine-tuning with it",
            "--mode lora, or --engine torch (LocalBackend(engine='torch'))",
        )
    planned = plan(shape, settings, available, total)
    mode = "full fine-tuning" if planned.full else f"LoRA rank {settings.lora_rank}"
    if planned.checkpointed:
        mode += ", checkpointed layers"
    breakdown = ", ".join(f"{name} {gib(size)}" for name, size in planned.parts)
    head = (
        f"{shape.params / 1e6:.1f}M params, {mode}, rows of {planned.seq_len} tokens "
        f"({planned.micro_tokens} per micro-batch): needs {gib(planned.needed)} "
        f"({breakdown}) of {gib(planned.available)} {where}"
    )
    moe = " (a mixture of experts: the plan counts one expert per layer)" if shape.experts else ""
    if planned.fits:
        return ok("memory", head + moe)
    return fail(
        "memory", f"does not fit: {head}{moe}", "; or ".join(knobs(shape, settings, planned))
    )


def free_memory(gpu: bool) -> tuple[int, int]:
    """(available, total) bytes: the first GPU's free and total memory when `gpu`, else the
    system's available and total memory."""
    if gpu:
        import torch

        free, total = torch.cuda.mem_get_info(0)
        return int(free), int(total)
    try:
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        available = int(info["MemAvailable"].split()[0]) * 1024
        total = int(info["MemTotal"].split()[0]) * 1024
        return available, total
    except (OSError, KeyError, ValueError):
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return int(free), int(pages)
