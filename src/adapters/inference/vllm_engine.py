"""The fast engine on a GPU: vLLM's async engine with LoRA adapters hot-loaded per step.

vLLM batches concurrent requests itself (continuous batching), so `sample` simply submits.
Each served step is a `LoRARequest` on one base model; the base model itself is served with
no LoRA. Full-weight checkpoints would need a whole engine per step, so this engine refuses
them (UnsupportedCapability) and the torch engine serves those.

Logprobs: vLLM reports the raw model distribution by default (`logprobs_mode=raw_logprobs`
where that option exists, and before it existed V1 already did), which is the convention
of engine.py; we pass the option explicitly when the installed vLLM knows it.

The prompt is rendered with the base model's Hugging Face tokenizer here, not inside vLLM,
so the ids returned as `prompt_token_ids` are exactly the ids vLLM sampled from.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...core.errors import (
    BackendError,
    InvalidInputError,
    MissingExtraError,
    UnsupportedCapability,
)
from .chat import ChatTokenizer
from .engine import FinishReason, Sample, SamplingParams, ServingEngine, UnknownModelError
from .served_names import ServedNames

__all__ = ["VllmEngine"]


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise MissingExtraError("vllm", "vllm") from exc
    return vllm


class VllmEngine(ServedNames[Any]):
    """A SamplingEngine on vLLM. Construction stores arguments only; `start()` (or the first
    `load`) creates the vLLM engine, which takes the GPU memory share given by
    `gpu_memory_utilization` (leave room for the trainer on the same GPU).

    Extra keyword arguments go to `vllm.AsyncEngineArgs` unchanged.
    """

    def __init__(
        self,
        base_model: str,
        *,
        max_lora_rank: int = 64,
        max_loras: int = 4,
        gpu_memory_utilization: float = 0.5,
        max_model_len: int | None = None,
        dtype: str | None = None,
        max_batch_size: int | None = None,
        **engine_kwargs: Any,
    ) -> None:
        if not 0.0 < gpu_memory_utilization <= 1.0:
            raise InvalidInputError(
                f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}"
            )
        self.base_model = str(base_model)
        self.max_lora_rank = max_lora_rank
        self.max_loras = max_loras
        self.gpu_memory_utilization = gpu_memory_utilization
        self.max_model_len = max_model_len
        self.dtype = dtype
        self.max_batch_size = max_batch_size
        self.engine_kwargs = dict(engine_kwargs)
        self._engine: Any = None
        self._chat: ChatTokenizer | None = None
        self._context_length = 0
        self._served: dict[str, Any] = {}  # served name -> LoRARequest, or None for the base
        self._aliases: dict[str, str] = {}
        self._lora_ids = itertools.count(1)
        self._start_lock: asyncio.Lock | None = None
        self._closed = False

    # lifecycle ---------------------------------------------------------------------------

    def engine_args(self) -> Any:
        """The `AsyncEngineArgs` this engine starts with (imports vLLM, starts nothing)."""
        vllm = _import_vllm()
        fields = {field.name for field in dataclasses.fields(vllm.AsyncEngineArgs)}
        arguments: dict[str, Any] = {
            "model": self.base_model,
            "enable_lora": True,
            "max_lora_rank": self.max_lora_rank,
            "max_loras": self.max_loras,
            "gpu_memory_utilization": self.gpu_memory_utilization,
        }
        if self.max_model_len is not None:
            arguments["max_model_len"] = self.max_model_len
        if self.dtype is not None:
            arguments["dtype"] = self.dtype
        if self.max_batch_size is not None:
            arguments["max_num_seqs"] = self.max_batch_size
        if "logprobs_mode" in fields:
            arguments["logprobs_mode"] = "raw_logprobs"
        if "disable_log_stats" in fields:
            arguments["disable_log_stats"] = True
        arguments.update(self.engine_kwargs)
        unknown = sorted(set(arguments) - fields)
        if unknown:
            raise InvalidInputError(
                f"this vLLM's AsyncEngineArgs has no field(s) {unknown}; check the vLLM version"
            )
        return vllm.AsyncEngineArgs(**arguments)

    async def start(self) -> None:
        if self._closed:
            raise BackendError("this VllmEngine is closed; create a new one")
        if self._started():
            return
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._started():  # another caller finished starting while we waited
                return
            args = self.engine_args()
            from vllm.engine.async_llm_engine import AsyncLLMEngine

            chat = await asyncio.to_thread(ChatTokenizer.load, self.base_model)
            engine = AsyncLLMEngine.from_engine_args(args)
            self._context_length = int(_model_len(engine) or 0) or 4096
            self._chat = chat
            self._engine = engine

    def _started(self) -> bool:
        return self._engine is not None

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        engine, self._engine = self._engine, None
        self._served.clear()
        self._aliases.clear()
        if engine is not None:
            shutdown = getattr(engine, "shutdown", None)
            if shutdown is not None:
                await asyncio.to_thread(shutdown)

    # serving names -----------------------------------------------------------------------

    async def load(self, name: str, checkpoint_dir: str | None) -> None:
        """Serve `name` from the base model (None) or a LoRA adapter directory."""
        if not isinstance(name, str) or not name:
            raise InvalidInputError(f"a served model name must be a non-empty string: {name!r}")
        await self.start()
        lora = None
        if checkpoint_dir is not None:
            path = Path(checkpoint_dir)
            if not (path / "adapter_config.json").is_file():
                raise UnsupportedCapability(
                    "serving full-weight checkpoints",
                    "VllmEngine",
                    f"{path} holds no LoRA adapter; train with LoRA, or use the torch engine "
                    '(engine="torch") for full fine-tuning',
                )
            from vllm.lora.request import LoRARequest

            lora = LoRARequest(
                lora_name=name, lora_int_id=next(self._lora_ids), lora_path=str(path)
            )
            # Load now, so a bad adapter fails here rather than in the first rollout.
            await self._engine.add_lora(lora)
        previous = self._served.get(name)
        self._aliases.pop(name, None)
        self._served[name] = lora
        if previous is not None:
            await self._engine.remove_lora(previous.lora_int_id)

    async def unload(self, name: str) -> None:
        if name in self._aliases:
            del self._aliases[name]
            return
        if name not in self._served:
            raise UnknownModelError(name, self.served_models())
        lora = self._served.pop(name)
        self._forget_aliases_of(name)
        if lora is not None and self._engine is not None:
            await self._engine.remove_lora(lora.lora_int_id)

    # sampling ----------------------------------------------------------------------------

    async def sample(
        self, model: str, prompt_token_ids: Sequence[int], n: int, params: SamplingParams
    ) -> list[Sample]:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InvalidInputError(f"n must be a positive integer, got {n!r}")
        lora = self._resolve(model)
        chat = self._chat_for(model)
        prompt = chat.check_prompt(prompt_token_ids, self._context_length)
        vllm = _import_vllm()
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        vllm_params = vllm.SamplingParams(
            n=n,
            max_tokens=min(params.max_tokens, self._context_length - len(prompt)),
            temperature=params.temperature,
            top_p=params.top_p,
            seed=params.seed,
            stop=list(params.stop) or None,
            logprobs=params.top_logprobs,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )
        final = None
        async for output in self._engine.generate(
            TokensPrompt(prompt_token_ids=prompt),
            vllm_params,
            f"arthex-{secrets.token_hex(8)}",
            lora_request=lora,
        ):
            final = output
        if final is None:
            raise BackendError("vLLM returned no output for the request")
        completions = sorted(final.outputs, key=lambda completion: completion.index)
        return [_to_sample(completion, params.top_logprobs) for completion in completions]

    # internals ---------------------------------------------------------------------------


def _model_len(engine: Any) -> int | None:
    """The context length vLLM settled on (it may be smaller than the model's own)."""
    config = getattr(engine, "model_config", None)
    if config is None:
        config = getattr(getattr(engine, "vllm_config", None), "model_config", None)
    value = getattr(config, "max_model_len", None)
    return value if isinstance(value, int) else None


def _to_sample(completion: Any, top_logprobs: int) -> Sample:
    """A vLLM CompletionOutput to a Sample. Each position's logprob mapping holds the sampled
    token and the top-k (ranked); the sampled token is always present."""
    token_ids = tuple(int(token) for token in completion.token_ids)
    positions = completion.logprobs
    if positions is None or len(positions) != len(token_ids):
        raise BackendError(
            "vLLM returned no per-token logprobs; the engine requests them, so this vLLM "
            "version is not supported"
        )
    logprobs: list[float] = []
    tops: list[tuple[tuple[int, float], ...]] = []
    for token, position in zip(token_ids, positions):
        entries = {int(other): value for other, value in position.items()}
        logprobs.append(float(entries[token].logprob))
        ranked = sorted(entries.items(), key=lambda item: -float(item[1].logprob))
        tops.append(tuple((other, float(value.logprob)) for other, value in ranked[:top_logprobs]))
    finish: FinishReason = "length" if completion.finish_reason == "length" else "stop"
    return Sample(
        token_ids=token_ids,
        logprobs=tuple(logprobs),
        top_logprobs=tuple(tops),
        finish_reason=finish,
    )


if TYPE_CHECKING:
    _fits: type[ServingEngine] = VllmEngine
