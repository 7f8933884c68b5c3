"""The tinker emulator's base model: one causal LM and its tokenizer, and LoRA copies of it.

Each training run gets its own peft LoRA model over a copy of the base module whose frozen
parameters are *shared* with the base (deepcopy with a memo of the parameters), so a run costs
the adapter and the optimizer state, not another copy of the weights. The samplers share one
more such copy, each sampler's adapter a named adapter in it (peft's multi-adapter model).

Choices where Tinker's documentation is silent: LoRA alpha is 32 whatever the rank; LoRA goes on
the attention and MLP projections (`train_attn`, `train_mlp`) and on `lm_head` (`train_unembed`),
also when the head is tied to the input embeddings: an unmerged adapter on the head changes the
output projection only, and without it a small model learns its outputs very slowly.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import itertools
import warnings
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs
import torch

from .errors import UserError

LORA_ALPHA = 32
ATTENTION_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_MODULES = ("gate_proj", "up_proj", "down_proj")
MAX_SAMPLER_ADAPTERS = 16
"""Sampler adapters kept loaded in the samplers' peft model; the least recently sampled goes."""


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
        # One peft model for every sampler: each sampler's adapter is a named adapter in it,
        # all over one copy of the module sharing the base's frozen weights (sampler_module).
        self._sampler: Any = None
        self._sampler_adapters: OrderedDict[int, tuple[str, Mapping[str, torch.Tensor]]] = (
            OrderedDict()
        )
        self._adapter_names = (f"s{index}" for index in itertools.count())
        parameters = inspect.signature(type(self.module).forward).parameters
        self.cache_kwarg = "cache" if "cache" in parameters else "past_key_values"
        pad = self.tokenizer.pad_token_id
        self.decode_tokens = DecodeTokens(
            self.tokenizer,
            frozenset(self.eos_token_ids),
            int(pad if pad is not None else (self.eos_token_ids or (0,))[0]),
        )

    def lora_config(self, lora: LoraSettings) -> Any:
        from peft import LoraConfig

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
        return LoraConfig(
            r=lora.rank,
            lora_alpha=LORA_ALPHA,
            target_modules=targets,
            lora_dropout=0.0,
            bias="none",
        )

    def lora_model(self, lora: LoraSettings, *, adapter_name: str = "default") -> Any:
        """A new peft model: an adapter over a copy of the module sharing its frozen weights."""
        from peft import get_peft_model

        config = self.lora_config(lora)
        memo: dict[int, Any] = {id(p): p for p in self.module.parameters()}
        copied = copy.deepcopy(self.module, memo)
        with _quiet_seeded(lora.seed):
            model = get_peft_model(copied, config, adapter_name=adapter_name)
        return model.eval()

    def sampler_module(self, lora: LoraSettings | None, adapter: Mapping[str, torch.Tensor]) -> Any:
        """The module to sample from: the base, or the samplers' peft model with `adapter`
        active."""
        if lora is None:
            return self.module
        name = self.sampler_adapter(lora, adapter)
        self._sampler.set_adapter(name)
        return self._sampler

    @property
    def sampler_model(self) -> Any:
        """The samplers' peft model (None until a sampler with an adapter first samples)."""
        return self._sampler

    def sampler_adapter(self, lora: LoraSettings, adapter: Mapping[str, torch.Tensor]) -> str:
        """The name of `adapter` in the samplers' peft model, loaded there on first use (one
        adapter a sampler, all over one copy of the module sharing the base's weights)."""
        from peft import set_peft_model_state_dict

        known = self._sampler_adapters.get(id(adapter))
        if known is not None and known[1] is adapter:
            self._sampler_adapters.move_to_end(id(adapter))
            return known[0]
        name = next(self._adapter_names)
        if self._sampler is None:
            self._sampler = self.lora_model(lora, adapter_name=name)
        else:
            with _quiet_seeded(lora.seed):
                self._sampler.add_adapter(name, self.lora_config(lora))
        set_peft_model_state_dict(self._sampler, dict(adapter), adapter_name=name)
        # The entry keeps the mapping alive, so its id is not reused while cached.
        self._sampler_adapters[id(adapter)] = (name, adapter)
        while len(self._sampler_adapters) > MAX_SAMPLER_ADAPTERS:
            _, (oldest, _) = self._sampler_adapters.popitem(last=False)
            self._sampler.delete_adapter(oldest)
        return name


@attrs.frozen
class DecodeTokens:
    """The tokenizer as the inference engine's decode code reads it; stop strings are
    matched in the text with special tokens kept, as Tinker's sampler matches them."""

    tokenizer: Any
    eos_token_ids: frozenset[int]
    pad_token_id: int

    def decode(self, token_ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(token_ids), skip_special_tokens=False))


@contextlib.contextmanager
def _quiet_seeded(seed: int | None) -> Iterator[None]:
    """A new adapter's random init from `seed`, leaving the global generator as it was."""
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # peft asks a deprecated HF property
        warnings.simplefilter("ignore", UserWarning)  # "a tied layer is part of the adapter"
        torch.manual_seed(seed if seed is not None else 0)
        yield
