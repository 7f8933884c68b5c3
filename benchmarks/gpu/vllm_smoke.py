"""The vLLM path on one CUDA GPU, end to end, in a few minutes: the checks the CPU suite
cannot make (tests/vllm_api checks the adapter's calls against vLLM without a GPU).

Needs: one CUDA GPU with 8 GB free, and arthex installed with its `vllm` extra at a tested
pair, e.g. `make setup-vllm` (vllm 0.33.0 with torch 2.14.0, transformers, peft), then

    .venv-vllm/bin/python benchmarks/gpu/vllm_smoke.py        # from the repository root

No hub download: the model is the tiny random Llama of `arthex.testing.tiny_model`, written
locally at its "3M" size (head dimension 64, which vLLM's attention kernels take). Prints one
line per check and a summary; the whole output also goes to `$OUT/vllm_smoke.log` (`$OUT`
defaults to ./vllm-smoke-out). Exit status 0 only when every check passed.

The checks, in order:
  engine-starts          the vLLM engine starts at a modest memory share (0.25)
  step0-equals-base      a LoRA step with B = 0 samples exactly what the base model samples
  step1-differs          a LoRA step with B != 0 samples other logprobs
  logprobs-match-peft    sampled logprobs match transformers + peft on the CPU (float32),
                         within bfloat16 tolerance
  logprobs-are-raw       at temperature 0.25 the logprobs are still the raw distribution's
                         (temperature 1), not the tempered one
  stop-keeps-token       a stop string ends the completion with the token that completed it
  unloaded-name-raises   a name that was unloaded raises UnknownModelError
  close-frees-gpu        closing the engine gives its GPU memory back
  backend-over-http      LocalBackend(engine="vllm"): register, train, serve over HTTP,
                         with vLLM asleep (level 1) while the step trains
  second-asyncio-run     an engine started and sampled under one asyncio.run samples the
                         same greedy tokens under the next (it follows the running loop)
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

GPU_SHARE = 0.25
MAX_MODEL_LEN = 512
PROMPT: Any = [{"role": "user", "content": "Count from one to ten, then say done."}]
# bfloat16 weights and activations in vLLM against float32 on the CPU: the tiny model's
# logits spread about 0.3, so a few thousandths is the expected error; 0.05 leaves margin
# while a tempered distribution (temperature 0.25) differs by far more.
BF16_TOLERANCE = 0.05


class Smoke:
    """Runs named checks, prints one line each, keeps the log."""

    def __init__(self, log: Path) -> None:
        self.log = log.open("w")
        self.results: list[tuple[str, bool, str]] = []

    def say(self, line: str) -> None:
        print(line, flush=True)
        self.log.write(line + "\n")
        self.log.flush()

    async def check(self, name: str, body: Callable[[], Awaitable[str]]) -> bool:
        started = time.monotonic()
        try:
            detail = await body()
            ok = True
        except Exception as exc:
            ok = False
            detail = f"{type(exc).__name__}: {exc}"
            self.log.write(traceback.format_exc())
        seconds = time.monotonic() - started
        self.results.append((name, ok, detail))
        self.say(f"{'PASS' if ok else 'FAIL'} {name:<22} {seconds:6.1f}s  {detail}")
        return ok


def gpu_free_bytes() -> int:
    """Free memory of the first visible GPU, asked in a child process so that this one
    never initialises CUDA before vLLM starts."""
    code = "import torch; print(torch.cuda.mem_get_info(0)[0])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"could not read the GPU's free memory: {done.stderr[-500:]}")
    return int(done.stdout.strip().splitlines()[-1])


def make_steps(base: str, root: Path) -> tuple[Path, Path]:
    """Step 0: a fresh LoRA adapter as arthex's trainer writes it (B = 0). Step 1: the same
    with every B drawn at random, so it changes the model."""
    import torch
    from safetensors.torch import load_file, save_file

    from arthex.adapters.local.trainer import PolicyTrainer, TrainerSettings

    trainer = PolicyTrainer(
        TrainerSettings(base_model=base, device="cpu", full_finetune=False, lora_rank=8)
    )
    trainer.load(None)
    step0, step1 = root / "step0", root / "step1"
    for step in (step0, step1):
        step.mkdir()
        trainer.write_checkpoint(step)
    weights = load_file(str(step1 / "adapter_model.safetensors"))
    generator = torch.Generator().manual_seed(0)
    b_keys = [key for key in weights if "lora_B" in key]
    if not b_keys:
        raise RuntimeError(f"no lora_B weights in {sorted(weights)[:5]}")
    for key in b_keys:
        assert torch.count_nonzero(weights[key]) == 0, f"{key} is not zero in a fresh adapter"
        weights[key] = 0.5 * torch.randn(weights[key].shape, generator=generator)
    save_file(weights, str(step1 / "adapter_model.safetensors"))
    return step0, step1


def reference_logprobs(
    base: str, step: Path, prompt: list[int], completion: tuple[int, ...], temperature: float
) -> list[float]:
    """The completion's token logprobs under transformers + peft, float32 on the CPU."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base_weights = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    model: Any = PeftModel.from_pretrained(base_weights, str(step)).eval()
    ids = torch.tensor([[*prompt, *completion]])
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0].float()
    rows = logits[len(prompt) - 1 : len(prompt) - 1 + len(completion)] / temperature
    picked = torch.log_softmax(rows, dim=-1).gather(1, torch.tensor(completion)[:, None])
    return [float(value) for value in picked[:, 0]]


def max_gap(a: tuple[float, ...] | list[float], b: tuple[float, ...] | list[float]) -> float:
    assert len(a) == len(b), (len(a), len(b))
    return max((abs(x - y) for x, y in zip(a, b)), default=0.0)


async def engine_checks(smoke: Smoke, base: str, work: Path) -> None:
    from arthex.adapters.inference.engine import SamplingParams, UnknownModelError
    from arthex.adapters.inference.vllm_args import VllmSettings
    from arthex.adapters.inference.vllm_engine import VllmEngine

    step0, step1 = make_steps(base, work)
    settings = VllmSettings(
        gpu_memory_utilization=GPU_SHARE,
        max_model_len=MAX_MODEL_LEN,
        enforce_eager=True,
        engine_args={"dtype": "bfloat16"},
    )
    engine = VllmEngine(base, settings, device="cuda:0", lora_rank=8)
    free_before = gpu_free_bytes()
    state: dict[str, Any] = {}

    async def starts() -> str:
        await engine.start()
        await engine.load("base", None)
        await engine.load("step0", str(step0))
        await engine.load("step1", str(step1))
        state["prompt"] = engine.render_chat("base", PROMPT, None)
        taken = free_before - gpu_free_bytes()
        return f"serving {engine.served_models()}, took {taken / 2**30:.2f} GiB of the GPU"

    if not await smoke.check("engine-starts", starts):
        await engine.close()
        return
    prompt: list[int] = state["prompt"]
    greedy = SamplingParams(max_tokens=24, temperature=0.0)

    async def step0_equals_base() -> str:
        (base_sample,) = await engine.sample("base", prompt, 1, greedy)
        (step_sample,) = await engine.sample("step0", prompt, 1, greedy)
        assert step_sample.token_ids == base_sample.token_ids, "tokens differ"
        gap = max_gap(step_sample.logprobs, base_sample.logprobs)
        assert gap <= 1e-3, f"logprobs differ by {gap}"
        state["base"] = base_sample
        return f"{len(base_sample.token_ids)} tokens, logprob gap {gap:.2e}"

    async def step1_differs() -> str:
        (sample,) = await engine.sample("step1", prompt, 1, greedy)
        base_sample = state.get("base") or (await engine.sample("base", prompt, 1, greedy))[0]
        if sample.token_ids == base_sample.token_ids:
            gap = max_gap(sample.logprobs, base_sample.logprobs)
            assert gap > 0.01, f"step 1 samples like the base (logprob gap {gap})"
            return f"same tokens, logprob gap {gap:.3f}"
        return f"other tokens ({len(sample.token_ids)} sampled)"

    async def logprobs_match_peft() -> str:
        params = SamplingParams(max_tokens=32, temperature=1.0, seed=11)
        (sample,) = await engine.sample("step1", prompt, 1, params)
        reference = await asyncio.to_thread(
            reference_logprobs, base, step1, prompt, sample.token_ids, 1.0
        )
        gap = max_gap(sample.logprobs, reference)
        assert gap <= BF16_TOLERANCE, f"max gap {gap:.4f} above {BF16_TOLERANCE}"
        return f"{len(reference)} tokens, max gap {gap:.4f} (tolerance {BF16_TOLERANCE})"

    async def logprobs_are_raw() -> str:
        params = SamplingParams(max_tokens=32, temperature=0.25, seed=12)
        (sample,) = await engine.sample("step1", prompt, 1, params)
        raw = await asyncio.to_thread(
            reference_logprobs, base, step1, prompt, sample.token_ids, 1.0
        )
        tempered = await asyncio.to_thread(
            reference_logprobs, base, step1, prompt, sample.token_ids, 0.25
        )
        raw_gap, tempered_gap = max_gap(sample.logprobs, raw), max_gap(sample.logprobs, tempered)
        assert raw_gap <= BF16_TOLERANCE, f"not the raw distribution: gap {raw_gap:.4f}"
        assert tempered_gap > 2 * BF16_TOLERANCE, (
            f"the tempered distribution is as close ({tempered_gap:.4f}): no evidence either way"
        )
        return f"gap to raw {raw_gap:.4f}, to tempered {tempered_gap:.4f}"

    async def stop_keeps_token() -> str:
        # a seeded draw replays token for token, and rarely ends early on the random model
        drawn = SamplingParams(max_tokens=24, temperature=1.0, seed=21)
        (free,) = await engine.sample("step1", prompt, 1, drawn)
        tokens = free.token_ids
        for k in range(2, len(tokens)):
            piece = engine.decode("step1", [tokens[k]]).strip()
            before = engine.decode("step1", list(tokens[:k]))
            text = engine.decode("step1", list(tokens[: k + 1]))
            if piece and piece not in before and text.find(piece) + len(piece) > len(before):
                break
        else:
            raise AssertionError(f"no token to stop at in {engine.decode('step1', tokens)!r}")
        stop = SamplingParams(max_tokens=24, temperature=1.0, seed=21, stop=(piece,))
        (stopped,) = await engine.sample("step1", prompt, 1, stop)
        assert stopped.finish_reason == "stop", stopped.finish_reason
        assert stopped.token_ids == tokens[: k + 1], (stopped.token_ids, tokens[: k + 1])
        return f"stop {piece!r} ended at token {k} and kept it ({len(stopped.token_ids)} tokens)"

    async def unloaded_name_raises() -> str:
        await engine.unload("step0")
        try:
            await engine.sample("step0", prompt, 1, greedy)
        except UnknownModelError as exc:
            return f"UnknownModelError: {str(exc)[:60]}..."
        raise AssertionError("sampling an unloaded name did not raise")

    async def close_frees_gpu() -> str:
        held = gpu_free_bytes()
        taken = free_before - held
        # What may stay: this process's own CUDA context, if vLLM made one (under 1 GiB).
        allowance = max(2**30, taken // 20)
        await engine.close()
        deadline = time.monotonic() + 60
        while True:
            free = gpu_free_bytes()
            if free_before - free <= allowance or time.monotonic() > deadline:
                break
            await asyncio.sleep(2)
        assert free_before - free <= allowance, (
            f"{(free_before - free) / 2**30:.2f} GiB still taken after close "
            f"(the engine took {taken / 2**30:.2f} GiB)"
        )
        gib = 2**30
        before = free_before / gib
        return f"free {held / gib:.2f} -> {free / gib:.2f} GiB (before the start {before:.2f})"

    try:
        await smoke.check("step0-equals-base", step0_equals_base)
        await smoke.check("step1-differs", step1_differs)
        await smoke.check("logprobs-match-peft", logprobs_match_peft)
        await smoke.check("logprobs-are-raw", logprobs_are_raw)
        await smoke.check("stop-keeps-token", stop_keeps_token)
        await smoke.check("unloaded-name-raises", unloaded_name_raises)
    finally:
        await smoke.check("close-frees-gpu", close_frees_gpu)


async def backend_check(smoke: Smoke, base: str, work: Path) -> None:
    from arthex.adapters.local import LocalBackend
    from arthex.core.config import TrainConfig
    from arthex.core.identity import ModelSpec, RunRef
    from arthex.testing.builders import synthetic_groups
    from arthex.testing.contracts.scenario import openai_client_for

    run = RunRef("smoke", "agent")
    root = work / "runs"

    async def over_http() -> str:
        backend = LocalBackend(
            str(root),
            engine="vllm",
            device="cuda:0",
            gpu_memory_utilization=GPU_SHARE,
            max_model_len=MAX_MODEL_LEN,
            enforce_eager=True,
            vllm_sleep_level=1,
        )
        async with backend:
            endpoint = await backend.register(ModelSpec(run, base_model=base, base_path=str(root)))
            assert endpoint is not None
            async with openai_client_for(endpoint) as client:

                async def ask(model: str) -> list[float]:
                    response = await client.chat.completions.create(
                        model=model, messages=PROMPT, max_tokens=8, temperature=0, logprobs=True
                    )
                    content = response.choices[0].logprobs
                    assert content is not None and content.content, "no logprobs came back"
                    return [token.logprob for token in content.content]

                before = await ask("agent@0")
                config = TrainConfig(learning_rate=1e-2)
                metrics = [
                    dict(m) async for m in backend.train_steps(run, synthetic_groups(2, 4), config)
                ]
                after = await ask("agent@0")  # vLLM slept while the step trained
                trained = await ask("agent")
                names = {model.id async for model in client.models.list()}
        step = root / run.project / "models" / run.name / "checkpoints" / "0001"
        assert (step / "adapter_config.json").is_file(), "the step is not a LoRA adapter"
        assert {"agent", "agent@0", "agent@1"} <= names, names
        assert max_gap(before, after) <= 1e-3, "step 0 changed across vLLM's sleep"
        assert len(metrics) >= 1 and trained
        return f"{len(metrics)} optimizer step(s), served {sorted(names)}"

    await smoke.check("backend-over-http", over_http)


def second_run_check(smoke: Smoke, base: str) -> None:
    """Two `asyncio.run` calls in this (worker) thread, as a script makes them: the engine
    started under the first must answer under the second instead of waiting forever on an
    output handler left on the ended loop."""
    from arthex.adapters.inference.engine import SamplingParams
    from arthex.adapters.inference.vllm_args import VllmSettings
    from arthex.adapters.inference.vllm_engine import VllmEngine

    settings = VllmSettings(
        gpu_memory_utilization=GPU_SHARE,
        max_model_len=MAX_MODEL_LEN,
        enforce_eager=True,
        engine_args={"dtype": "bfloat16"},
    )
    engine = VllmEngine(base, settings, device="cuda:0", lora_rank=8)
    greedy = SamplingParams(max_tokens=16, temperature=0.0)
    state: dict[str, Any] = {}

    async def first() -> None:
        await engine.start()
        await engine.load("base", None)
        state["prompt"] = engine.render_chat("base", PROMPT, None)
        (sample,) = await engine.sample("base", state["prompt"], 1, greedy)
        state["tokens"] = sample.token_ids

    async def second() -> str:
        try:
            if "tokens" not in state:  # the first run failed: start here, to report why
                await asyncio.wait_for(first(), 600)
            (sample,) = await asyncio.wait_for(
                engine.sample("base", state["prompt"], 1, greedy), 120
            )
            assert sample.token_ids == state["tokens"], "other tokens under the second loop"
            return f"{len(sample.token_ids)} tokens, the same under both loops"
        finally:
            await engine.close()

    try:
        asyncio.run(first())
    except Exception:
        smoke.log.write(traceback.format_exc())  # the second run starts it again and reports
    asyncio.run(smoke.check("second-asyncio-run", second))


async def main_async(out: Path) -> int:
    smoke = Smoke(out / "vllm_smoke.log")
    started = time.monotonic()
    try:
        import peft  # noqa: F401
        import torch
        import vllm
    except ImportError as exc:
        smoke.say(f"FAIL setup: {exc}; install arthex with its vllm extra (make setup-vllm)")
        return 2
    try:
        gpu_free_bytes()
    except RuntimeError as exc:
        smoke.say(f"FAIL setup: needs a CUDA GPU ({exc})")
        return 2

    from arthex.testing.tiny_model import tiny_model

    smoke.say(
        f"vllm {vllm.__version__}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
        f"python {sys.version.split()[0]}"
    )
    with tempfile.TemporaryDirectory(prefix="vllm-smoke-") as temp:
        work = Path(temp)
        base = tiny_model(work / "base", size="3M")
        await engine_checks(smoke, base, work)
        await backend_check(smoke, base, work)
        await asyncio.to_thread(second_run_check, smoke, base)
    failed = [name for name, ok, _ in smoke.results if not ok]
    smoke.say(
        f"SUMMARY {len(smoke.results) - len(failed)}/{len(smoke.results)} passed in "
        f"{time.monotonic() - started:.0f}s" + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    (out / "vllm_smoke.json").write_text(
        json.dumps([{"check": n, "ok": ok, "detail": d} for n, ok, d in smoke.results], indent=1)
    )
    return 1 if failed else 0


def main() -> int:
    out = Path(os.environ.get("OUT") or "vllm-smoke-out")
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    return asyncio.run(main_async(out))


if __name__ == "__main__":  # vLLM may spawn processes that import this module again
    sys.exit(main())
