"""Run inside the vLLM venv (see vllm_env.py), on a CPU: the vLLM engine adapter's calls,
made exactly as the adapter makes them, checked against the installed vLLM's own classes.

Reads {"workdir": ...} on stdin; prints one JSON object: check name -> {"ok", "detail"}.
Each check is independent, so one broken name does not hide the others.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

CHECKS: dict[str, Callable[[Path], Any]] = {}


def check(function: Callable[[Path], Any]) -> Callable[[Path], Any]:
    CHECKS[function.__name__] = function
    return function


def settings() -> Any:
    from arthex.adapters.inference.vllm_args import VllmSettings

    return VllmSettings(
        gpu_memory_utilization=0.3,
        max_model_len=512,
        enforce_eager=True,
        max_num_seqs=8,
        max_loras=2,
        sleep_level=1,
        engine_args={"dtype": "bfloat16", "seed": 1},
    )


@check
def engine_args_are_vllms(workdir: Path) -> Any:
    """The adapter's AsyncEngineArgs: built by the adapter, every field read back from vLLM's
    own object, the model config vLLM derives from them on the CPU (the model read, the
    context length and dtype checked), the LoRA and cache settings accepted by vLLM's config
    classes. (The whole engine config, and sleep mode, need a GPU platform.)"""
    import vllm
    from vllm.config import CacheConfig, LoRAConfig

    from arthex.adapters.inference.vllm_engine import VllmEngine
    from arthex.testing.tiny_model import tiny_model

    base = tiny_model(workdir / "base", size="3M")
    engine = VllmEngine(base, settings(), device="cuda:0", lora_rank=100)
    args = engine.engine_args()
    # sleep mode needs a GPU platform: the model config is derived without it
    awake = VllmEngine(base, attrs.evolve(settings(), sleep_level=0), device="cuda:0", lora_rank=8)
    model_config = awake.engine_args().create_model_config()
    assert model_config.max_model_len == 512, model_config.max_model_len
    assert str(model_config.dtype) == "torch.bfloat16", model_config.dtype
    assert model_config.logprobs_mode == "raw_logprobs", model_config.logprobs_mode
    assert model_config.enforce_eager is True
    assert isinstance(args, vllm.AsyncEngineArgs), type(args)
    fields = {field.name for field in dataclasses.fields(vllm.AsyncEngineArgs)}
    assert "device" not in fields, "vLLM has a `device` field again"
    expected = engine.engine_kwargs(fields)
    for name, value in expected.items():
        assert getattr(args, name) == value, (name, getattr(args, name), value)
    assert args.max_lora_rank == 128 and args.device_ids == [0]
    assert args.logprobs_mode == "raw_logprobs"
    lora = LoRAConfig(max_lora_rank=args.max_lora_rank, max_loras=args.max_loras)
    cache = CacheConfig(gpu_memory_utilization=args.gpu_memory_utilization)
    unknown = VllmEngine(
        "m", type(settings())(engine_args={"swap_spaace": 4}), device="cuda", lora_rank=8
    )
    try:
        unknown.engine_args()
    except Exception as exc:
        refused = str(exc)
    else:
        raise AssertionError("an unknown engine argument was accepted")
    assert "swap_spaace" in refused, refused
    return {
        "vllm": vllm.__version__,
        "max_lora_rank": lora.max_lora_rank,
        "max_model_len": model_config.max_model_len,
        "gpu_memory_utilization": cache.gpu_memory_utilization,
        "refused": refused,
    }


@check
def every_lora_slot_is_accepted_by_vllm(workdir: Path) -> Any:
    """Each max_lora_rank the adapter can derive is one vLLM's LoRAConfig accepts."""
    from vllm.config import LoRAConfig

    from arthex.adapters.inference.vllm_args import LORA_RANKS, lora_rank_slot

    slots = sorted({lora_rank_slot(rank) for rank in range(1, LORA_RANKS[-1] + 1)})
    for slot in slots:
        assert LoRAConfig(max_lora_rank=slot).max_lora_rank == slot
    return slots


@check
def sampling_params_and_prompt_are_vllms(workdir: Path) -> Any:
    """The adapter's SamplingParams and TokensPrompt, validated by vLLM's own constructors."""
    import vllm
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    from arthex.adapters.inference.engine import SamplingParams
    from arthex.adapters.inference.vllm_engine import vllm_request

    params = SamplingParams(
        max_tokens=40, temperature=0.7, top_p=0.9, seed=5, stop=("##", "END"), top_logprobs=3
    )
    prompt, sampling = vllm_request([1, 2, 3], 4, params, context_length=32)
    assert isinstance(sampling, vllm.SamplingParams)
    assert (sampling.n, sampling.max_tokens, sampling.seed) == (4, 29, 5)
    assert math.isclose(sampling.temperature, 0.7) and math.isclose(sampling.top_p, 0.9)
    assert sampling.stop == ["##", "END"] and sampling.logprobs == 3
    assert sampling.output_kind == RequestOutputKind.FINAL_ONLY
    assert not sampling.include_stop_str_in_output
    keys = set(TokensPrompt.__required_keys__) | set(TokensPrompt.__optional_keys__)
    assert set(prompt) <= keys and set(TokensPrompt.__required_keys__) <= set(prompt)
    assert prompt["prompt_token_ids"] == [1, 2, 3]
    greedy = vllm_request([1], 1, SamplingParams(temperature=0.0), context_length=8)[1]
    assert greedy.temperature == 0.0 and greedy.logprobs == 0
    return {"max_tokens": sampling.max_tokens, "prompt_keys": sorted(prompt)}


@check
def lora_request_is_vllms(workdir: Path) -> Any:
    from vllm.lora.request import LoRARequest

    from arthex.adapters.inference.vllm_engine import lora_request

    request = lora_request("agent@3", 7, str(workdir / "step"))
    assert isinstance(request, LoRARequest)
    assert (request.lora_name, request.lora_int_id) == ("agent@3", 7)
    assert request.lora_path == str(workdir / "step")
    return repr(request)


def _positions(flat: bool) -> Any:
    """vLLM's own logprob containers for two positions, filled by vLLM's own functions: the
    sampled token (rank 5, then rank 1) and the top 2."""
    from vllm.logprobs import append_logprobs_for_next_position, create_sample_logprobs

    container = create_sample_logprobs(flat)
    # each position: sampled token first, then the top-k, as vLLM's output processor passes
    append_logprobs_for_next_position(container, [9, 3, 4], [-4.0, -0.1, -2.0], [None] * 3, 5, 2)
    append_logprobs_for_next_position(container, [3, 3, 8], [-0.2, -0.2, -1.5], [None] * 3, 1, 2)
    return container


@check
def completion_outputs_become_samples(workdir: Path) -> Any:
    """vLLM's CompletionOutput, with FlatLogprobs and with the list form, through the
    adapter's conversion: the sampled token's logprob and the ranked top-k come out."""
    from vllm.logprobs import FlatLogprobs
    from vllm.outputs import CompletionOutput

    from arthex.adapters.inference.engine import Sample
    from arthex.adapters.inference.vllm_engine import to_sample

    seen = []
    for flat in (True, False):
        logprobs = _positions(flat)
        assert isinstance(logprobs, FlatLogprobs) == flat
        completion = CompletionOutput(
            index=0,
            text="",
            token_ids=[9, 3],
            cumulative_logprob=None,
            logprobs=logprobs,
            finish_reason="length",
        )
        sample = to_sample(completion, top_logprobs=2)
        assert sample == Sample(
            token_ids=(9, 3),
            logprobs=(-4.0, -0.2),
            top_logprobs=(((3, -0.1), (4, -2.0)), ((3, -0.2), (8, -1.5))),
            finish_reason="length",
        ), sample
        seen.append(type(logprobs).__name__)
    return seen


@check
def every_vllm_finish_reason_is_handled(workdir: Path) -> Any:
    """Each finish reason vLLM's engine can report is passed on as itself, or (error) fails
    the request; a reason vLLM adds later fails this check."""
    from vllm.outputs import CompletionOutput
    from vllm.v1.engine import FinishReason

    from arthex.adapters.inference.vllm_engine import to_sample
    from arthex.core.errors import BackendError

    outcome: dict[str, str] = {}
    for reason in FinishReason:
        completion = CompletionOutput(
            index=0,
            text="",
            token_ids=[9, 3],
            cumulative_logprob=None,
            logprobs=_positions(True),
            finish_reason=str(reason),
        )
        try:
            outcome[str(reason)] = to_sample(completion, top_logprobs=0).finish_reason
        except BackendError:
            outcome[str(reason)] = "failed"
    assert outcome == {
        "stop": "stop",
        "length": "length",
        "abort": "abort",
        "error": "failed",
        "repetition": "repetition",
    }, outcome
    return outcome


def _checkpoint(workdir: Path, rank: int) -> Path:
    """A LoRA step as arthex's trainer writes it, on the CPU, from the tiny model."""
    from arthex.adapters.local.trainer import PolicyTrainer, TrainerSettings
    from arthex.testing.tiny_model import tiny_model

    base = tiny_model(workdir / "base", size="3M")
    trainer = PolicyTrainer(
        TrainerSettings(base_model=base, device="cpu", full_finetune=False, lora_rank=rank)
    )
    trainer.load(None)
    out = workdir / f"step-r{rank}"
    out.mkdir(exist_ok=True)
    trainer.write_checkpoint(out)
    return out


@check
def arthex_lora_checkpoints_pass_vllms_peft_checks(workdir: Path) -> Any:
    """vLLM's PEFTHelper reads an arthex LoRA step and accepts it for the max_lora_rank the
    adapter derives from its rank; one slot smaller is refused (the check bites)."""
    from vllm.config import LoRAConfig
    from vllm.lora.peft_helper import PEFTHelper

    from arthex.adapters.inference.vllm_args import LORA_RANKS, lora_rank_slot

    results = {}
    for rank in (8, 100):
        step = _checkpoint(workdir, rank)
        helper = PEFTHelper.from_local_dir(str(step), max_position_embeddings=2048)
        slot = lora_rank_slot(rank)
        helper.validate_legal(LoRAConfig(max_lora_rank=slot, max_loras=2))
        smaller = LORA_RANKS[LORA_RANKS.index(slot) - 1]
        try:
            helper.validate_legal(LoRAConfig(max_lora_rank=smaller, max_loras=2))
        except ValueError:
            pass
        else:
            raise AssertionError(f"rank {rank} passed vLLM's check at max_lora_rank {smaller}")
        results[rank] = {"r": helper.r, "slot": slot, "targets": sorted(helper.target_modules)}
    return results


class RecordingEngine:
    """Stands in for vLLM's AsyncLLM, which needs a GPU: it records the calls the adapter
    makes and answers `generate` with vLLM's own CompletionOutput once `release` is set.
    `async_llm_has_the_methods_the_adapter_calls` holds its methods to AsyncLLM's."""

    def __init__(self) -> None:
        import asyncio

        self.calls: list[tuple[Any, ...]] = []
        self.release = asyncio.Event()
        self.generating = asyncio.Event()
        self.model_config = type("ModelConfig", (), {"max_model_len": 512})()

    async def add_lora(self, lora_request: Any) -> bool:
        self.calls.append(("add_lora", lora_request.lora_int_id, lora_request.lora_path))
        return True

    async def remove_lora(self, lora_id: int) -> bool:
        self.calls.append(("remove_lora", lora_id))
        return True

    async def sleep(self, level: int = 1, mode: str = "abort") -> None:
        self.calls.append(("sleep", level, mode))

    async def wake_up(self, tags: list[str] | None = None) -> None:
        self.calls.append(("wake_up",))

    async def collective_rpc(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        self.calls.append(("collective_rpc", method))
        return []

    async def reset_prefix_cache(self) -> bool:
        self.calls.append(("reset_prefix_cache",))
        return True

    async def generate(
        self, prompt: Any, sampling_params: Any, request_id: str, lora_request: Any = None
    ) -> Any:
        from vllm.outputs import CompletionOutput

        lora = None if lora_request is None else lora_request.lora_int_id
        self.calls.append(("generate", lora, tuple(prompt["prompt_token_ids"])))
        self.generating.set()
        await self.release.wait()
        outputs = [
            CompletionOutput(
                index=i,
                text="",
                token_ids=[9, 3],
                cumulative_logprob=None,
                logprobs=_positions(True),
                finish_reason="stop",
            )
            for i in range(sampling_params.n)
        ]
        yield type("RequestOutput", (), {"outputs": outputs})()

    def shutdown(self) -> None:
        self.calls.append(("shutdown",))


# The arguments the adapter passes by keyword; the others it passes by position.
BY_KEYWORD = {"generate": {"lora_request"}, "sleep": {"mode"}}


@check
def async_llm_has_the_methods_the_adapter_calls(workdir: Path) -> Any:
    """The stand-in's methods exist on vLLM's AsyncLLM and take the same arguments."""
    import inspect
    import typing

    from vllm.v1.engine import PauseMode
    from vllm.v1.engine.async_llm import AsyncLLM

    shapes = {}
    for name in (
        "add_lora",
        "remove_lora",
        "sleep",
        "wake_up",
        "collective_rpc",
        "reset_prefix_cache",
        "generate",
        "shutdown",
    ):
        real = list(inspect.signature(getattr(AsyncLLM, name)).parameters)[1:]
        ours = list(inspect.signature(getattr(RecordingEngine, name)).parameters)[1:]
        by_name = BY_KEYWORD.get(name, set())
        positional = [p for p in ours if p not in ("args", "kwargs") and p not in by_name]
        assert real[: len(positional)] == positional, (name, real, positional)
        assert by_name <= set(real), (name, real, by_name)
        shapes[name] = real
    assert "wait" in typing.get_args(PauseMode), PauseMode
    assert list(inspect.signature(AsyncLLM.from_engine_args).parameters)[:1] == ["engine_args"]
    return shapes


@check
def the_loop_bound_parts_follow_runs_rely_on_are_vllms(workdir: Path) -> Any:
    """vllm_loop.follow_running_loop replaces, by name, what AsyncLLM and its multiprocess
    core client bind to the loop that first used them; those names must still be vLLM's,
    started lazily only when unset (else a second asyncio.run would still wait forever)."""
    import inspect

    from vllm.v1.engine.async_llm import AsyncLLM
    from vllm.v1.engine.core_client import AsyncMPClient

    handler = inspect.getsource(AsyncLLM._run_output_handler)
    assert "self.output_handler" in handler and "create_task" in handler, handler[:300]
    reader = inspect.getsource(AsyncMPClient._ensure_output_queue_task)
    assert "output_queue_task" in reader and "outputs_queue" in reader, reader[:300]
    assert "outputs_queue" in inspect.getsource(AsyncMPClient.__init__)
    return "output_handler, resources.output_queue_task and outputs_queue as the adapter uses"


def _engine(workdir: Path, sleep_level: int) -> tuple[Any, RecordingEngine]:
    import attrs as attrs_

    from arthex.adapters.inference.chat import ChatTokenizer
    from arthex.adapters.inference.vllm_engine import VllmEngine
    from arthex.testing.tiny_model import tiny_model

    base = tiny_model(workdir / "base", size="3M")
    engine = VllmEngine(base, attrs_.evolve(settings(), sleep_level=sleep_level), lora_rank=8)
    recorder = RecordingEngine()
    engine._attach(recorder, ChatTokenizer.load(base))
    return engine, recorder


@check
def unloading_a_step_waits_for_its_requests(workdir: Path) -> Any:
    """A step's adapter is removed from vLLM only once its requests ended (vLLM may read
    the folder again until then); new requests for it are refused at once."""
    import asyncio

    from arthex.adapters.inference.engine import SamplingParams, UnknownModelError

    async def run() -> Any:
        engine, recorder = _engine(workdir, 0)
        step = _checkpoint(workdir, 8)
        await engine.load("agent@0", str(step))
        await engine.load("agent@1", str(step))
        added = [call for call in recorder.calls if call[0] == "add_lora"]
        assert [call[1] for call in added] == [1, 2] and added[0][2] == str(step), added
        sampling = asyncio.create_task(engine.sample("agent@0", [5, 6], 2, SamplingParams()))
        await recorder.generating.wait()
        unloading = asyncio.create_task(engine.unload("agent@0"))
        for _ in range(20):
            await asyncio.sleep(0)
        assert ("remove_lora", 1) not in recorder.calls, "removed while being sampled"
        assert not unloading.done()
        try:
            await engine.sample("agent@0", [5], 1, SamplingParams())
        except UnknownModelError:
            pass
        else:
            raise AssertionError("an unloaded step still took a request")
        recorder.release.set()
        samples = await sampling
        await unloading
        assert recorder.calls[-1] == ("remove_lora", 1), recorder.calls[-1]
        assert [s.token_ids for s in samples] == [(9, 3), (9, 3)]
        await engine.close()
        return recorder.calls

    return asyncio.run(run())


@check
def sleeping_holds_requests_and_waking_restores_the_weights(workdir: Path) -> Any:
    """Level 2: vLLM sleeps after its requests finish ("wait"); a request that arrives
    meanwhile starts only after wake_up, which reloads the base weights and the adapters."""
    import asyncio

    from arthex.adapters.inference.engine import SamplingParams

    async def run() -> Any:
        engine, recorder = _engine(workdir, 2)
        step = _checkpoint(workdir, 8)
        await engine.load("agent@0", str(step))
        recorder.release.set()
        await engine.sleep()
        assert recorder.calls[-1] == ("sleep", 2, "wait"), recorder.calls[-1]
        sampling = asyncio.create_task(engine.sample("agent@0", [5], 1, SamplingParams()))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not any(call[0] == "generate" for call in recorder.calls), "sampled asleep"
        await engine.wake_up()
        await sampling
        after = recorder.calls[recorder.calls.index(("sleep", 2, "wait")) + 1 :]
        assert after == [
            ("wake_up",),
            ("collective_rpc", "reload_weights"),
            ("reset_prefix_cache",),
            ("remove_lora", 1),
            ("add_lora", 1, str(step)),
            ("generate", 1, (5,)),
        ], after
        await engine.close()
        return after

    return asyncio.run(run())


def main() -> None:
    payload = json.loads(sys.stdin.read())
    workdir = Path(payload["workdir"])
    only = payload.get("only")
    results: dict[str, Any] = {}
    for name, function in CHECKS.items():
        if only and name not in only:
            continue
        try:
            results[name] = {"ok": True, "detail": function(workdir)}
        except BaseException:
            results[name] = {"ok": False, "detail": traceback.format_exc()[-3000:]}
    print(json.dumps(results, default=str))


if __name__ == "__main__":
    main()
