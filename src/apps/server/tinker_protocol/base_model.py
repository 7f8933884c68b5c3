"""The tinker emulator's base model: one causal LM and its tokenizer, and LoRA copies of it.

Each training run and sampler gets its own peft LoRA model over a copy of the base module whose
frozen parameters are *shared* with the base (deepcopy with a memo of the parameters), so a run
costs the adapter and the optimizer state, not another copy of the weights.

Choices where Tinker's documentation is silent: LoRA alpha is 32 whatever the rank; LoRA goes on
the attention and MLP projections (`train_attn`, `train_mlp`) and on `lm_head` (`train_unembed`),
also when the head is tied to the input embeddings: an unmerged adapter on the head changes the
output projection only, and without it a small model learns its outputs very slowly.
"""

from __future__ import annotations

import copy
import inspect
import warnings
from collections.abc import Mapping
from typing import Any

import attrs
import torch

from .errors import UserError

LORA_ALPHA = 32
ATTENTION_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_MODULES = ("gate_proj", "up_proj", "down_proj")


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


class BaseModel:
    """The base causal LM and its tokenizer, loaded once; runs and samplers derive from it."""

    def __init__(
        self,
        directory: str,
        *,
        device: str = "cpu",
        gradient_checkpointing: bool | str = "auto",
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        quiet: Any = hf_logging  # untyped helpers
        quiet.disable_progress_bar()
        self.device = torch.device(device)
        # The training runs' layer checkpointing (True, False or "auto": on for a batch whose
        # stored activations would pass 1 GiB), as the LocalBackend's trainer decides it.
        self.gradient_checkpointing = gradient_checkpointing
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
