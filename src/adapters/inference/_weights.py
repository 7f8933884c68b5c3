"""The torch engine's weights: one base module, plus peft adapters or full copies per step.

Everything here runs on the engine's single worker thread, so loading, releasing and
switching adapters never race with a batch in flight.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from ...core.errors import CorruptDataError, InvalidInputError, MissingExtraError
from ..hf_quiet import quiet_hf
from ..hub import resolve_base_model
from .chat import ChatTokenizer

DTYPES = ("float32", "float16", "bfloat16")


@attrs.define(eq=False)
class Weights:
    """What one served name samples from. `adapter` is the internal peft adapter name (served
    names may hold characters peft does not allow). `inflight`/`drained` are event-loop side:
    they let an unload wait for accepted requests."""

    kind: str  # "base" | "full" | "lora"
    source: str | None
    module: Any = None
    adapter: str | None = None
    loaded: bool = True
    inflight: int = 0
    drained: Any = None  # asyncio.Event while an unload waits


class ModelWeights:
    """The base model and what is layered on it. Construct, then `load_base()`."""

    def __init__(self, base_model: str, *, device: str | None, dtype: str | None) -> None:
        if dtype is not None and dtype not in (*DTYPES, "auto"):
            raise InvalidInputError(f"dtype must be one of {DTYPES} or 'auto', got {dtype!r}")
        self.base_model = base_model
        self._device_name = device
        self._dtype_name = dtype
        self.device: Any = None
        self.context_length = 0
        self.cache_kwarg = "past_key_values"
        self._base: Any = None
        self._peft: Any = None
        self._adapter_names = (f"a{index}" for index in itertools.count())
        self._spare_adapter: str | None = None

    def load_base(self) -> ChatTokenizer:
        try:
            import torch
            from transformers import AutoModelForCausalLM
        except ImportError as exc:
            raise MissingExtraError("torch", "local") from exc
        self.device = torch.device(
            self._device_name or ("cuda" if torch.cuda.is_available() else "cpu")
        )
        chat = ChatTokenizer.load(self.base_model)
        quiet_hf()
        base = AutoModelForCausalLM.from_pretrained(
            resolve_base_model(self.base_model), dtype=self._torch_dtype()
        )
        base.to(self.device).eval()
        base.requires_grad_(False)
        chat.add_eos_token_ids(getattr(base.generation_config, "eos_token_id", None))
        self.context_length = int(getattr(base.config, "max_position_embeddings", 0) or 4096)
        # transformers 5 renamed the cache argument; older versions only know the old name.
        parameters = inspect.signature(type(base).forward).parameters
        self.cache_kwarg = "cache" if "cache" in parameters else "past_key_values"
        self._base = base
        return chat

    def release_all(self) -> None:
        self._base = self._peft = None

    def load(self, checkpoint_dir: str | None) -> Weights:
        if checkpoint_dir is None:
            return Weights("base", None)
        path = Path(checkpoint_dir)
        if (path / "adapter_config.json").is_file():
            return self._load_lora(path)
        shards = sorted([*path.glob("model.safetensors"), *path.glob("model-*-of-*.safetensors")])
        if shards:
            return self._load_full(path, shards)
        raise InvalidInputError(
            f"{path} holds neither a LoRA adapter (adapter_config.json + "
            "adapter_model.safetensors) nor full weights (model.safetensors)"
        )

    def release(self, weights: Weights) -> None:
        if weights.kind == "lora" and weights.adapter is not None:
            live = [name for name in self._peft.peft_config if name != weights.adapter]
            if live:
                self._delete_adapter(weights.adapter, keep=live[0])
            else:
                # peft cannot run with zero adapters; keep this one until the next arrives.
                self._spare_adapter = weights.adapter
        weights.module = None

    @contextlib.contextmanager
    def module_for(self, weights: Weights) -> Iterator[Any]:
        """The module that computes `weights`, set up for it for the duration."""
        if weights.kind == "full":
            yield weights.module
        elif weights.kind == "lora":
            self._peft.set_adapter(weights.adapter)
            yield self._peft
        elif self._peft is not None:
            with self._peft.disable_adapter():
                yield self._peft
        else:
            yield self._base

    def _torch_dtype(self) -> Any:
        import torch

        if self._dtype_name == "auto":
            return "auto"
        if self._dtype_name is None:
            on_gpu = (self._device_name or "").startswith("cuda") or (
                self._device_name is None and torch.cuda.is_available()
            )
            return torch.bfloat16 if on_gpu else torch.float32
        return getattr(torch, self._dtype_name)

    def _load_lora(self, path: Path) -> Weights:
        try:
            from peft import PeftModel
        except ImportError as exc:
            raise MissingExtraError("peft", "local") from exc
        adapter = next(self._adapter_names)
        quiet_hf()
        try:
            if self._peft is None:
                self._peft = PeftModel.from_pretrained(
                    self._base, str(path), adapter_name=adapter, is_trainable=False
                )
                self._peft.eval()
            else:
                self._peft.load_adapter(str(path), adapter_name=adapter, is_trainable=False)
        except Exception as exc:  # peft raises many kinds; all mean the same to the caller
            raise CorruptDataError(f"cannot load the LoRA adapter in {path}: {exc}") from exc
        if self._spare_adapter is not None:
            self._delete_adapter(self._spare_adapter, keep=adapter)
            self._spare_adapter = None
        return Weights("lora", str(path), adapter=adapter)

    def _load_full(self, path: Path, shards: list[Path]) -> Weights:
        from safetensors.torch import load_file

        state: dict[str, Any] = {}
        try:
            for shard in shards:
                state.update(load_file(str(shard), device=str(self.device)))
        except Exception as exc:
            raise CorruptDataError(f"cannot read the weights in {path}: {exc}") from exc
        module = self._fresh_module()
        missing, unexpected = module.load_state_dict(state, strict=False)
        really_missing = _missing_untied(module, set(missing))
        if unexpected or really_missing:
            raise CorruptDataError(
                f"the weights in {path} do not fit {self.base_model}: missing "
                f"{really_missing[:5]}, unexpected {list(unexpected)[:5]}"
            )
        module.eval()
        return Weights("full", str(path), module=module)

    def _fresh_module(self) -> Any:
        """A copy of the base architecture to overwrite. Once peft has wrapped the base its
        modules carry adapters, so then the copy comes from disk instead."""
        if self._peft is None:
            return copy.deepcopy(self._base)
        from transformers import AutoModelForCausalLM

        quiet_hf()
        module = AutoModelForCausalLM.from_pretrained(
            resolve_base_model(self.base_model), dtype=self._torch_dtype()
        )
        module.to(self.device)
        module.requires_grad_(False)
        return module

    def _delete_adapter(self, adapter: str, *, keep: str) -> None:
        self._peft.set_adapter(keep)
        self._peft.delete_adapter(adapter)


def _missing_untied(module: Any, missing: set[str]) -> list[str]:
    """The missing keys that matter: a tied parameter (shared embeddings) may be left out of
    a saved state dict as long as one of the names sharing its storage was loaded."""
    groups: dict[int, list[str]] = {}
    for name, tensor in module.state_dict(keep_vars=True).items():
        groups.setdefault(tensor.data_ptr(), []).append(name)
    return sorted(
        name
        for names in groups.values()
        if all(name in missing for name in names)
        for name in names
    )
