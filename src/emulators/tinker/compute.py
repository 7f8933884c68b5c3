"""The compute behind the tinker emulator: LoRA training runs and samplers on one causal LM.

Everything here runs on the emulator's single compute thread (one "device"), so nothing in this
module locks. Each training run gets its own peft LoRA model over a copy of the base module
whose frozen parameters are *shared* with the base (deepcopy with a memo of the parameters), so
a run costs the adapter and the optimizer state, not another copy of the weights.

The losses follow Tinker's documented definitions: every tensor has one entry per input
position, position i predicts token i+1, and per-token terms are summed, never averaged
(normalisation is the caller's, inside the advantages or weights):

    cross_entropy        -Σ lp·w
    importance_sampling  -Σ exp(lp-q)·A
    ppo                  -Σ min(r·A, clip(r, lo, hi)·A)
    cispo                -Σ sg(clip(r, lo, hi))·lp·A
    dro                  -Σ (lp·A - ½β(lp-q)²)

with lp the learner's logprob of the target, q the sampler's, r = exp(lp-q) and lo/hi the
`clip_low_threshold`/`clip_high_threshold` ratios (default 0.8/1.2).

Choices where Tinker's documentation is silent: LoRA alpha is 32 whatever the rank; LoRA goes on
the attention and MLP projections (`train_attn`, `train_mlp`) and on `lm_head` (`train_unembed`),
also when the head is tied to the input embeddings: an unmerged adapter on the head changes the
output projection only, and without it a small model learns its outputs very slowly.
"""

from __future__ import annotations

import copy
import inspect
import json
import math
import os
import shutil
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import torch

from ...adapters._files import atomic_write_bytes, fsync_dir, temp_path_for

LORA_ALPHA = 32
ATTENTION_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_MODULES = ("gate_proj", "up_proj", "down_proj")
LOG_RATIO_LIMIT = 20.0
ADAPTER_FILE = "adapter.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
META_FILE = "meta.json"

LOSSES = ("cross_entropy", "importance_sampling", "ppo", "cispo", "dro")
REQUIRED_INPUTS: dict[str, tuple[str, ...]] = {
    "cross_entropy": ("target_tokens", "weights"),
    "importance_sampling": ("target_tokens", "logprobs", "advantages"),
    "ppo": ("target_tokens", "logprobs", "advantages"),
    "cispo": ("target_tokens", "logprobs", "advantages"),
    "dro": ("target_tokens", "logprobs", "advantages"),
}


class UserError(Exception):
    """The request was wrong (the SDK gets `category: user`); the message says how."""


@attrs.frozen
class LoraSettings:
    rank: int
    seed: int | None = None
    train_mlp: bool = True
    train_attn: bool = True
    train_unembed: bool = True

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LoraSettings:
        return cls(
            rank=int(data["rank"]),
            seed=data.get("seed"),
            train_mlp=bool(data.get("train_mlp", True)),
            train_attn=bool(data.get("train_attn", True)),
            train_unembed=bool(data.get("train_unembed", True)),
        )


@attrs.frozen
class AdamSettings:
    learning_rate: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-12
    weight_decay: float = 0.0
    grad_clip_norm: float = 0.0


@attrs.frozen
class DatumIn:
    """One datum as the wire carries it: input tokens and named 1-D loss inputs."""

    tokens: list[int]
    inputs: dict[str, torch.Tensor]


class BaseModel:
    """The base causal LM and its tokenizer, loaded once; runs and samplers derive from it."""

    def __init__(self, directory: str, *, device: str = "cpu") -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        quiet: Any = hf_logging  # untyped helpers
        quiet.disable_progress_bar()
        self.device = torch.device(device)
        try:
            model: Any = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
        except OSError as exc:
            raise UserError(f"cannot load base model {directory!r}: {exc}") from exc
        self.module: Any = model.to(self.device).eval()
        for parameter in self.module.parameters():
            parameter.requires_grad_(False)
        self.tokenizer: Any = AutoTokenizer.from_pretrained(directory)
        config = self.module.config
        self.context_length = int(getattr(config, "max_position_embeddings", 0) or 2048)
        self.vocab_size = int(config.vocab_size)
        eos = getattr(self.module.generation_config, "eos_token_id", None)
        if eos is None:
            eos = self.tokenizer.eos_token_id
        eos_ids = eos if isinstance(eos, list) else [eos]
        self.eos_token_ids = tuple(int(t) for t in eos_ids if t is not None)
        self._scratch: dict[LoraSettings, Any] = {}
        parameters = inspect.signature(type(self.module).forward).parameters
        self._cache_kwarg = "cache" if "cache" in parameters else "past_key_values"

    def new_cache(self) -> Any:
        from transformers import DynamicCache

        return DynamicCache(config=self.module.config)

    def forward(self, module: Any, input_ids: torch.Tensor, cache: Any) -> torch.Tensor:
        """Float32 logits of `module` for the new `input_ids`, extending the KV `cache`."""
        kwargs = {self._cache_kwarg: cache}
        logits: torch.Tensor = module(input_ids=input_ids, use_cache=True, **kwargs).logits
        return logits.float()

    def lora_model(self, lora: LoraSettings) -> Any:
        """A new peft model: an adapter over a copy of the module sharing its frozen weights."""
        from peft import LoraConfig, get_peft_model

        targets = [
            *(ATTENTION_MODULES if lora.train_attn else ()),
            *(MLP_MODULES if lora.train_mlp else ()),
        ]
        if lora.train_unembed:
            targets.append("lm_head")
        present = {name.rsplit(".", 1)[-1] for name, _ in self.module.named_modules()}
        targets = [name for name in targets if name in present]
        if not targets:
            raise UserError(
                f"no LoRA target modules in this model for {lora}; it has none of "
                f"{ATTENTION_MODULES + MLP_MODULES}"
            )
        config = LoraConfig(
            r=lora.rank,
            lora_alpha=LORA_ALPHA,
            target_modules=targets,
            lora_dropout=0.0,
            bias="none",
        )
        memo: dict[int, Any] = {id(p): p for p in self.module.parameters()}
        copied = copy.deepcopy(self.module, memo)
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # peft asks a deprecated HF property
            warnings.simplefilter("ignore", UserWarning)  # "a tied layer is part of the adapter"
            torch.manual_seed(lora.seed if lora.seed is not None else 0)
            model = get_peft_model(copied, config)
        return model.eval()

    def sampler_module(self, lora: LoraSettings | None, adapter: Mapping[str, torch.Tensor]) -> Any:
        """The module to sample from: the base, or a scratch adapter model loaded with weights."""
        if lora is None:
            return self.module
        from peft import set_peft_model_state_dict

        model = self._scratch.get(lora)
        if model is None:
            model = self._scratch[lora] = self.lora_model(lora)
        set_peft_model_state_dict(model, dict(adapter))
        return model


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
            _checked_inputs(index, datum, loss_fn, self.base.vocab_size)
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
                losses.append(_loss(loss_fn, lp, inputs, config))
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


def _checked_inputs(
    index: int, datum: DatumIn, loss_fn: str, vocab_size: int
) -> dict[str, torch.Tensor]:
    n = len(datum.tokens)
    if n == 0:
        raise UserError(f"datum {index} has an empty model_input")
    for token in datum.tokens:
        if not 0 <= token < vocab_size:
            raise UserError(f"datum {index}: token {token} is outside the vocabulary")
    missing = [k for k in REQUIRED_INPUTS[loss_fn] if k not in datum.inputs]
    if missing:
        raise UserError(f"datum {index}: loss_fn {loss_fn!r} needs loss_fn_inputs {missing}")
    for key, value in datum.inputs.items():
        if value.ndim != 1 or value.shape[0] != n:
            raise UserError(
                f"datum {index}: loss_fn_inputs[{key!r}] has shape {list(value.shape)}, but "
                f"model_input has {n} tokens; every input needs exactly one entry per token"
            )
    targets = datum.inputs["target_tokens"]
    if bool(((targets < 0) | (targets >= vocab_size)).any()):
        raise UserError(f"datum {index}: a target token is outside the vocabulary")
    return datum.inputs


def _loss(
    loss_fn: str, lp: torch.Tensor, inputs: Mapping[str, torch.Tensor], config: Mapping[str, float]
) -> torch.Tensor:
    device = lp.device
    if loss_fn == "cross_entropy":
        return -(lp * inputs["weights"].float().to(device)).sum()
    q = inputs["logprobs"].float().to(device)
    advantages = inputs["advantages"].float().to(device)
    if loss_fn == "dro":
        if "beta" not in config:
            raise UserError("loss_fn 'dro' needs loss_fn_config {'beta': ...}")
        beta = float(config["beta"])
        return -(lp * advantages - 0.5 * beta * (lp - q) ** 2).sum()
    ratio = torch.exp(torch.clamp(lp - q, -LOG_RATIO_LIMIT, LOG_RATIO_LIMIT))
    if loss_fn == "importance_sampling":
        return -(ratio * advantages).sum()
    low = float(config.get("clip_low_threshold", 0.8))
    high = float(config.get("clip_high_threshold", 1.2))
    if not low <= high:
        raise UserError(f"clip_low_threshold {low} is above clip_high_threshold {high}")
    clipped = torch.clamp(ratio, low, high)
    if loss_fn == "ppo":
        return -torch.minimum(ratio * advantages, clipped * advantages).sum()
    return -(clipped.detach() * lp * advantages).sum()  # cispo


# --- checkpoint folders -----------------------------------------------------------------


def publish_dir(directory: Path, write: Any, meta: Mapping[str, Any]) -> None:
    """Fill a temp folder with `write(temp)` plus `meta.json`, then rename it into place."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    temp = temp_path_for(directory)
    temp.mkdir()
    try:
        write(temp)
        atomic_write_bytes(temp / META_FILE, json.dumps(dict(meta), sort_keys=True).encode())
        if directory.exists():
            shutil.rmtree(directory)
        os.replace(temp, directory)
        fsync_dir(directory.parent)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def read_meta(directory: Path) -> dict[str, Any]:
    try:
        meta = json.loads((directory / META_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"checkpoint {directory.name!r} cannot be read: {exc}") from exc
    if not isinstance(meta, dict):
        raise UserError(f"checkpoint {directory.name!r} has a malformed {META_FILE}")
    return meta


def load_adapter(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    path = directory / ADAPTER_FILE
    if not path.is_file():
        raise UserError(f"checkpoint {directory.name!r} holds no adapter weights")
    return dict(load_file(str(path)))


def save_adapter(
    directory: Path, adapter: Mapping[str, torch.Tensor], meta: Mapping[str, Any]
) -> None:
    from safetensors.torch import save_file

    def write(temp: Path) -> None:
        save_file(dict(adapter), str(temp / ADAPTER_FILE))

    publish_dir(directory, write, meta)


def folder_size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir() if p.is_file())
