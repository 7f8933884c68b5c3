"""`arthex demo --sft`: a model's whole life on CPU: SFT warm start, RL, export, and a load of
the export by plain transformers in a process without arthex (load_export.py)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import attrs

from ...adapters.layout import RunLayout
from ...core.config import TrainConfig
from ...core.metrics import is_trainable_group
from .task import (
    PROMPTS,
    SYSTEM,
    demo_run,
    digit_share,
    gather_step,
    mean_reward,
    step_line,
)

SFT_ANSWERS: tuple[str, ...] = ("4", "1 2 3 4 5 6 7 8 9 10", "42", "7")
SFT_LEARNING_RATE = 1e-2
SFT_EPOCHS = 40
SFT_RL_STEPS = 5
SFT_RL_LEARNING_RATE = 1e-3
LOAD_EXPORT = Path(__file__).with_name("load_export.py")


@attrs.frozen
class LifeResult:
    """Greedy reward at each stage, where the export is, and the first prompt's greedy reply
    from the served model and from the export loaded by plain transformers."""

    base_reward: float
    sft_reward: float
    rl_reward: float
    export_dir: str
    served_reply: str
    exported_reply: str
    seconds: float


async def run_sft_demo(
    base_path: str = ".art",
    seed: int = 0,
    *,
    rl_steps: int = SFT_RL_STEPS,
    stream: TextIO | None = None,
    quiet: bool = False,
) -> LifeResult:
    """A model's whole life on CPU: supervised warm start on digit answers, a few RL steps,
    export as a merged Hugging Face model, and a load of that export by plain transformers in
    a process without arthex, whose greedy reply must be the served one."""
    from ...core.sft import TrainSFTConfig

    out = stream if stream is not None else sys.stdout
    started = time.monotonic()

    def say(line: str) -> None:
        if not quiet:
            out.write(line + "\n")
            out.flush()

    model, backend = demo_run(base_path, "life", seed)
    client: Any = None
    try:
        await model.register(backend)
        client = model.openai_client()
        base_reward = await _greedy_reward(model, client)
        say(f"step 0 (base model): greedy reward {base_reward:.3f}")
        data = [
            [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": prompt},
                {"role": "assistant", "content": answer},
            ]
            for prompt, answer in zip(PROMPTS, SFT_ANSWERS, strict=True)
        ]
        sft = TrainSFTConfig(
            learning_rate=SFT_LEARNING_RATE, epochs=SFT_EPOCHS, batch_size=len(data)
        )
        result = await model.train_sft(data, sft, progress=False)
        sft_reward = await _greedy_reward(model, client)
        loss = result.metrics.get("loss/train")
        shown = "n/a" if loss is None else f"{loss:+.3f}"
        say(
            f"step 0 -> {result.step}: SFT ({SFT_EPOCHS} epochs), loss {shown}; "
            f"step {result.step} (after SFT): greedy reward {sft_reward:.3f}"
        )
        config = TrainConfig(learning_rate=SFT_RL_LEARNING_RATE)
        for step in range(rl_steps):
            policy = model.get_inference_name()
            groups = await gather_step(client, policy, seed, step, progress=False)
            trained = await model.train(groups, config=config, progress=False)
            trainable = sum(is_trainable_group(g) for g in groups)
            reward = mean_reward(groups)
            say(f"{step_line(trained.step - 1, reward, trained.metrics, trainable)} (RL)")
        rl_reward = await _greedy_reward(model, client)
        say(f"step {await model.get_step()} (after RL): greedy reward {rl_reward:.3f}")
        export_dir = await model.export(str(RunLayout.of(base_path, model.run).file("export")))
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPTS[0]}]
        served = await _greedy_reply(model, client, messages)
    finally:
        if client is not None:
            await client.close()
        await backend.close()
        await model.close()
    exported = await asyncio.to_thread(_reply_without_arthex, export_dir, messages)
    say(f"exported to {export_dir}")
    say(f"{PROMPTS[0]!r}: served {served!r}, loaded by plain transformers {exported!r}")
    life = LifeResult(
        base_reward=base_reward,
        sft_reward=sft_reward,
        rl_reward=rl_reward,
        export_dir=export_dir,
        served_reply=served,
        exported_reply=exported,
        seconds=time.monotonic() - started,
    )
    say(f"done in {life.seconds:.0f}s")
    return life


async def _greedy_reply(model: Any, client: Any, messages: list[dict[str, Any]]) -> str:
    response = await client.chat.completions.create(
        model=model.get_inference_name(), messages=messages, max_tokens=16, temperature=0
    )
    return str(response.choices[0].message.content or "")


async def _greedy_reward(model: Any, client: Any) -> float:
    replies = [
        await _greedy_reply(
            model, client, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": p}]
        )
        for p in PROMPTS
    ]
    return sum(digit_share(reply) for reply in replies) / len(replies)


def _reply_without_arthex(folder: str, messages: list[dict[str, Any]]) -> str:
    result = subprocess.run(
        [sys.executable, "-I", str(LOAD_EXPORT), folder, json.dumps(messages)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"loading the export with transformers failed:\n{result.stderr[-2000:]}")
    reply: str = json.loads(result.stdout.strip().splitlines()[-1])
    return reply
