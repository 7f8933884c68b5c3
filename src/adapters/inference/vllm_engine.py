"""The fast engine on a GPU: vLLM's async engine with LoRA adapters hot-loaded per step.

vLLM batches concurrent requests itself (continuous batching), so `sample` simply submits.
Each served step is a `LoRARequest` on one base model; the base model itself is served with
no LoRA. Full-weight checkpoints would need a whole engine per step, so this engine refuses
them (UnsupportedCapability); LocalBackend trains LoRA when its engine is vLLM.

The engine's arguments come from `vllm_args.engine_arguments` (the knobs of `VllmSettings`,
the backend's device as `device_ids`, `max_lora_rank` from the LoRA rank in use); the
installed vLLM's field names are checked before anything starts. Tested with the vLLM
releases in `vllm_args.TESTED_VLLM`.

Logprobs: `logprobs_mode="raw_logprobs"` makes vLLM report the raw model distribution, the
convention of engine.py. vLLM's finish reasons beyond stop and length (abort, repetition)
reach the client as they are; a completion vLLM finished with "error" fails the request.

A step's adapter folder is read again whenever vLLM's adapter cache evicted it, so `unload`
waits until the step's requests finished before it removes the adapter: a backend that
unloads before deleting the folder never pulls it from under a request.

The prompt is rendered with the base model's Hugging Face tokenizer here, not inside vLLM,
so the ids returned as `prompt_token_ids` are exactly the ids vLLM sampled from.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import secrets
from collections import Counter
from collections.abc import Collection, Sequence
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
from .vllm_args import VllmSettings, engine_arguments
from .vllm_loop import follow_running_loop

__all__ = ["VllmEngine", "lora_request", "to_sample", "vllm_request"]

_PASSED_THROUGH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "abort": "abort",
    "repetition": "repetition",
}


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise MissingExtraError("vllm", "vllm") from exc
    return vllm


def engine_field_names(vllm: Any) -> frozenset[str]:
    """The field names of the installed vLLM's `AsyncEngineArgs`."""
    return frozenset(field.name for field in dataclasses.fields(vllm.AsyncEngineArgs))


class VllmEngine(ServedNames[Any]):
    """A SamplingEngine on vLLM. Construction stores arguments only; `start()` (or the first
    `load`) creates the vLLM engine, which takes the GPU memory share given by
    `settings.gpu_memory_utilization` (leave room for the trainer on the same GPU).

    `device` is "cuda", "cuda:N" or None (the first visible GPU); `lora_rank` is the rank of
    the adapters it will serve (vLLM sizes its LoRA slots by it).
    """

    def __init__(
        self,
        base_model: str,
        settings: VllmSettings | None = None,
        *,
        device: str | None = None,
        lora_rank: int = 8,
    ) -> None:
        self.base_model = str(base_model)
        self.settings = settings if settings is not None else VllmSettings()
        self.device = device
        self.lora_rank = lora_rank
        # Refused here (no vLLM needed): a CPU device, a rank vLLM cannot serve, managed names.
        engine_arguments(self.base_model, self.settings, device=device, lora_rank=lora_rank)
        self._engine: Any = None
        self._chat: ChatTokenizer | None = None
        self._context_length = 0
        self._served: dict[str, Any] = {}  # served name -> LoRARequest, or None for the base
        self._aliases: dict[str, str] = {}
        self._lora_ids = itertools.count(1)
        self._inflight: Counter[int] = Counter()  # LoRA id -> requests in flight
        self._drained: dict[int, asyncio.Event] = {}
        self._awake: asyncio.Event | None = None
        self._sleepers = 0
        self._asleep: asyncio.Future[None] | None = None  # set once the first sleep is done
        self._start_lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop it last served on
        self._closed = False

    # lifecycle ---------------------------------------------------------------------------

    def engine_kwargs(self, known: Collection[str] | None = None) -> dict[str, Any]:
        """The keyword arguments of `AsyncEngineArgs` (checked against `known` field names)."""
        return engine_arguments(
            self.base_model,
            self.settings,
            device=self.device,
            lora_rank=self.lora_rank,
            known=known,
        )

    def engine_args(self) -> Any:
        """The `AsyncEngineArgs` this engine starts with (imports vLLM, starts nothing)."""
        vllm = _import_vllm()
        return vllm.AsyncEngineArgs(**self.engine_kwargs(engine_field_names(vllm)))

    async def start(self) -> None:
        if self._closed:
            raise BackendError("this VllmEngine is closed; create a new one")
        self._follow_loop()
        if self._started():
            return
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._started():  # another caller finished starting while we waited
                return
            args = self.engine_args()
            from vllm.v1.engine.async_llm import AsyncLLM

            chat = await asyncio.to_thread(ChatTokenizer.load, self.base_model)
            if self._closed:  # closed while the tokenizer loaded: start no engine
                raise BackendError("this VllmEngine was closed while it started")
            self._attach(AsyncLLM.from_engine_args(args), chat)

    def _attach(self, engine: Any, chat: ChatTokenizer) -> None:
        """Serve through `engine` (a started vLLM AsyncLLM) with the base model's tokenizer."""
        self._context_length = int(_model_len(engine) or 0) or 4096
        self._chat = chat
        self._awake = asyncio.Event()
        self._awake.set()
        self._engine = engine

    def _started(self) -> bool:
        return self._engine is not None

    def _follow_loop(self) -> None:
        """Serve from the running loop once the loop this engine last served on has ended (a
        script's second `asyncio.run`), as the torch engine moves its batching: vLLM's
        pieces bound to the ended loop are dropped so vLLM makes them again on this one
        (`follow_running_loop`), and so are this engine's own waiting primitives. A loop
        still open (another thread's) is left alone."""
        loop = asyncio.get_running_loop()
        old, self._loop = self._loop, loop
        if old is None or old is loop or not old.is_closed():
            return
        self._start_lock = None
        if self._awake is not None:
            awake, self._awake = self._awake, asyncio.Event()
            if awake.is_set():
                self._awake.set()
        self._drained.clear()  # their waiters ended with the old loop
        if self._asleep is not None and self._asleep.get_loop() is old:
            self._asleep = None
        if self._engine is not None:
            follow_running_loop(self._engine, old)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        engine, self._engine = self._engine, None
        self._served.clear()
        self._aliases.clear()
        for event in self._drained.values():
            event.set()
        if self._awake is not None:
            self._awake.set()
        if engine is not None:
            shutdown = getattr(engine, "shutdown", None)
            if shutdown is not None:
                await asyncio.to_thread(shutdown)

    # memory between training and serving ---------------------------------------------------

    async def sleep(self) -> None:
        """Free vLLM's GPU memory for a training step (`settings.sleep_level` 1 or 2; 0 does
        nothing). Requests in flight finish first; new ones wait for `wake_up`. Calls nest:
        the engine wakes when every `sleep` had its `wake_up`."""
        level = self.settings.sleep_level
        if not level or self._engine is None or self._awake is None:
            return
        self._follow_loop()
        self._sleepers += 1
        if self._sleepers > 1:  # another run is putting it to sleep: train once it is asleep
            if self._asleep is not None:
                try:
                    await asyncio.shield(self._asleep)
                except BaseException:
                    self._sleepers -= 1
                    raise
            return
        self._awake.clear()
        self._asleep = asyncio.get_running_loop().create_future()
        try:
            await self._engine.sleep(level, mode="wait")
        except BaseException as error:
            self._sleepers -= 1
            self._awake.set()
            self._asleep.set_exception(BackendError(f"vLLM could not sleep: {error}"))
            self._asleep.exception()  # retrieved here: no "never retrieved" warning
            self._asleep = None
            raise
        self._asleep.set_result(None)

    async def wake_up(self) -> None:
        """Take the memory back after `sleep`; at level 2 the base weights are read again
        from disk and the served adapters loaded again from their folders."""
        if not self._sleepers:
            return
        self._follow_loop()
        self._sleepers -= 1
        if self._sleepers or self._engine is None or self._awake is None:
            return
        self._asleep = None
        try:
            await self._engine.wake_up()
            if self.settings.sleep_level == 2:
                await self._engine.collective_rpc("reload_weights")
                await self._engine.reset_prefix_cache()
                for lora in {id(v): v for v in self._served.values() if v is not None}.values():
                    await self._engine.remove_lora(lora.lora_int_id)
                    await self._engine.add_lora(lora)
        finally:
            self._awake.set()

    # serving names -----------------------------------------------------------------------

    async def load(self, name: str, checkpoint_dir: str | None) -> None:
        """Serve `name` from the base model (None) or a LoRA adapter directory."""
        if not isinstance(name, str) or not name:
            raise InvalidInputError(f"a served model name must be a non-empty string: {name!r}")
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
        await self.start()
        if checkpoint_dir is not None:
            lora = lora_request(name, next(self._lora_ids), checkpoint_dir)
            await self._until_awake()
            # Load now, so a bad adapter fails here rather than in the first rollout.
            await self._engine.add_lora(lora)
        previous = self._served.get(name)
        self._aliases.pop(name, None)
        self._served[name] = lora
        if previous is not None:
            await self._retire(previous)

    async def unload(self, name: str) -> None:
        """Stop serving `name`: new requests get UnknownModelError at once; the adapter is
        removed once the requests already accepted on it finished (its folder must stay
        until this returns)."""
        self._follow_loop()
        if name in self._aliases:
            del self._aliases[name]
            return
        if name not in self._served:
            raise UnknownModelError(name, self.served_models())
        lora = self._served.pop(name)
        self._forget_aliases_of(name)
        if lora is not None:
            await self._retire(lora)

    async def _retire(self, lora: Any) -> None:
        lora_id = int(lora.lora_int_id)
        if self._inflight[lora_id] > 0:
            event = self._drained.setdefault(lora_id, asyncio.Event())
            await event.wait()
        if self._engine is not None:
            await self._engine.remove_lora(lora_id)

    async def _until_awake(self) -> None:
        if self._awake is not None:
            await self._awake.wait()

    # sampling ----------------------------------------------------------------------------

    async def sample(
        self, model: str, prompt_token_ids: Sequence[int], n: int, params: SamplingParams
    ) -> list[Sample]:
        self._admit(n)
        self._follow_loop()
        lora = self._resolve(model)
        chat = self._chat_for(model)
        prompt = chat.check_prompt(prompt_token_ids, self._context_length)
        token_prompt, vllm_params = vllm_request(prompt, n, params, self._context_length)
        lora_id = None if lora is None else int(lora.lora_int_id)
        if lora_id is not None:
            self._inflight[lora_id] += 1
        try:
            await self._until_awake()
            if self._engine is None:
                raise BackendError("the VllmEngine was closed")
            final = None
            async for output in self._engine.generate(
                token_prompt, vllm_params, f"arthex-{secrets.token_hex(8)}", lora_request=lora
            ):
                final = output
        finally:
            if lora_id is not None:
                self._inflight[lora_id] -= 1
                if self._inflight[lora_id] <= 0:
                    del self._inflight[lora_id]
                    drained = self._drained.pop(lora_id, None)
                    if drained is not None:
                        drained.set()
        if final is None:
            raise BackendError("vLLM returned no output for the request")
        completions = sorted(final.outputs, key=lambda completion: completion.index)
        return [to_sample(completion, params.top_logprobs) for completion in completions]


def lora_request(name: str, lora_id: int, checkpoint_dir: str) -> Any:
    """vLLM's `LoRARequest` for a served step: its name, a fresh id, the adapter folder."""
    _import_vllm()
    from vllm.lora.request import LoRARequest

    return LoRARequest(lora_name=name, lora_int_id=lora_id, lora_path=str(checkpoint_dir))


def vllm_request(
    prompt: Sequence[int], n: int, params: SamplingParams, context_length: int
) -> tuple[Any, Any]:
    """vLLM's `TokensPrompt` and `SamplingParams` for one request: raw logprobs of the sampled
    token (and the top-k asked for), the final output only, the token that completed a stop
    string kept in `token_ids` (the text is cut at the stop by the server)."""
    vllm = _import_vllm()
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    sampling = vllm.SamplingParams(
        n=n,
        max_tokens=max(1, min(params.max_tokens, context_length - len(prompt))),
        temperature=params.temperature,
        top_p=params.top_p,
        seed=params.seed,
        stop=list(params.stop) or None,
        logprobs=params.top_logprobs,
        output_kind=RequestOutputKind.FINAL_ONLY,
    )
    return TokensPrompt(prompt_token_ids=list(prompt)), sampling


def _model_len(engine: Any) -> int | None:
    """The context length vLLM settled on (it may be smaller than the model's own)."""
    config = getattr(engine, "model_config", None)
    if config is None:
        config = getattr(getattr(engine, "vllm_config", None), "model_config", None)
    value = getattr(config, "max_model_len", None)
    return value if isinstance(value, int) else None


def to_sample(completion: Any, top_logprobs: int) -> Sample:
    """A vLLM CompletionOutput to a Sample. Each position's logprob mapping (a dict, or a
    position of `FlatLogprobs`) holds the sampled token and the top-k; the sampled token is
    always present. vLLM's "error" finish fails the request (vLLM's own server answers it
    with a 500); "abort" and "repetition" are passed on as they are."""
    token_ids = tuple(int(token) for token in completion.token_ids)
    reason = str(completion.finish_reason) if completion.finish_reason is not None else "stop"
    if reason not in _PASSED_THROUGH:
        raise BackendError(
            f"vLLM finished completion {completion.index} with {reason!r} after "
            f"{len(token_ids)} tokens; the request failed, retry it"
        )
    positions = completion.logprobs
    if positions is None or len(positions) != len(token_ids):
        raise BackendError(
            "vLLM returned no per-token logprobs; the engine requests them, so this vLLM "
            "version is not supported"
        )
    logprobs: list[float] = []
    tops: list[tuple[tuple[int, float], ...]] = []
    for token, position in zip(token_ids, positions):
        entries = {int(other): float(value.logprob) for other, value in position.items()}
        logprobs.append(entries[token])
        ranked = sorted(entries.items(), key=lambda item: -item[1])
        tops.append(tuple(ranked[:top_logprobs]))
    return Sample(
        token_ids=token_ids,
        logprobs=tuple(logprobs),
        top_logprobs=tuple(tops),
        finish_reason=_PASSED_THROUGH[reason],
    )


if TYPE_CHECKING:
    _fits: type[ServingEngine] = VllmEngine
