"""`arthex doctor`'s memory plan against the trainer's measured peak on the CPU.

The oracle is the kernel: each case trains real optimizer steps of the LocalBackend's
trainer in a child process and reads the peak resident memory of the second (`VmHWM`, reset
with `/proc/self/clear_refs` before it). The second step is the steady one: AdamW's moments
exist from the first step's end. What is counted is anonymous memory, the tensors' kind:
the peak less the file-backed pages resident at the step's end (`RssFile`, `RssShmem`), less
the anonymous pages resident before the first step (`RssAnon`: the model, the interpreter).
File-backed pages are library code (a LoRA step first touches ~11 MiB of libtorch_cpu.so's)
that the kernel maps in and drops as it likes: pages that other processes' memory pressure
evicted before the baseline fault in again inside the measured step (the likely reason a
freshly made venv once measured ~25 MiB more), and no plan of tensors can follow them. The
allocator's residue is kept out too: glibc returns large freed blocks at once
(`MALLOC_MMAP_THRESHOLD_`), keeps one arena (`MALLOC_ARENA_MAX=1`: freed blocks are not
scattered over several) and hands back freed heap (`malloc_trim(0)`) before the baseline and
before the peak is reset, so the peak follows the live tensors. The peak so counted, plus
the weights' bytes as torch counts them, is held within 15% of the plan's trainer parts: the
weights, the gradients and AdamW state (or LoRA's), one micro-batch's activations and one
log-prob chunk. (What the model's loading leaves besides its tensors, Python objects and
thread pools, ~13 MiB here, is no part of any plan.) The model is the 3M-parameter random
Llama of `tiny_model` (hidden 256, MLP 688, 4 layers), on two rows of 1,024 tokens: large
enough that tensors, not Python objects, make the peak; small enough for a step of a few
seconds.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

ROWS, SEQ, PROMPT = 2, 1024, 64
PARTS = ("weights", "gradients+AdamW", "LoRA+AdamW", "activations", "log-prob chunk")


def _rss(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _child(spec: dict[str, Any]) -> int:
    """Two steps in this process: the second's peak anonymous bytes above those resident
    before the first (the model loaded), plus the weights' bytes."""
    import peft  # noqa: F401  (the libraries are part of the baseline, not of the step)
    import torch
    import transformers  # noqa: F401

    from arthex.adapters.local.packing import pack
    from arthex.adapters.local.trainer import PolicyTrainer, TrainerSettings
    from arthex.adapters.local.update import Update
    from arthex.core.config import TrainConfig
    from arthex.core.trajectories import Trajectory, TrajectoryGroup
    from arthex.testing.builders import make_choice

    torch.set_num_threads(1)
    rng = random.Random(0)
    prompt = [rng.randrange(4, spec["vocab"]) for _ in range(PROMPT)]
    rollouts = []
    for reward in (0.0, 1.0):  # two rows of SEQ tokens, mostly completion
        completion = [rng.randrange(4, spec["vocab"]) for _ in range(SEQ - PROMPT)]
        choice = make_choice("x", token_ids=completion, prompt_token_ids=prompt, logprobs=-1.0)
        messages = [{"role": "user", "content": "q"}, choice]
        rollouts.append(Trajectory(messages_and_choices=messages, reward=reward))
    trainer = PolicyTrainer(
        TrainerSettings(
            base_model=spec["model"],
            full_finetune=spec["full"],
            gradient_checkpointing=spec["checkpointed"],
        )
    )
    trainer.load(None)
    with torch.no_grad():  # weights mapped from the file become resident now
        for param in trainer.model.parameters():
            param.sum()
    weights = sum(int(p.numel() * p.element_size()) for p in trainer.model.parameters())
    config = TrainConfig(learning_rate=1e-5)
    batch = pack([TrajectoryGroup(rollouts)], config, max_length=SEQ, pad_token_id=0)
    assert tuple(batch.tokens.shape) == (ROWS, SEQ)
    trim = ctypes.CDLL(None).malloc_trim
    trim(0)
    before = _rss("RssAnon")
    for _ in trainer.train(Update(batch, config, None)):
        pass
    trim(0)
    Path("/proc/self/clear_refs").write_text("5")
    for _ in trainer.train(Update(batch, config, None)):
        pass
    files = _rss("RssFile") + _rss("RssShmem")  # library code and mapped files, at the end
    return _rss("VmHWM") - files - before + weights


def measured_peak(spec: dict[str, Any]) -> int:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_ARENA_MAX": "1"}
    found = subprocess.run(
        [sys.executable, __file__, json.dumps(spec)],
        check=False,
        capture_output=True,
        text=True,
        env=env,
    )
    assert found.returncode == 0, found.stderr[-3000:]
    return int(found.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def model_3m(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from arthex.testing.tiny_model import tiny_model

    return Path(tiny_model(tmp_path_factory.mktemp("3m") / "model", size="3M"))


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc")
@pytest.mark.parametrize(
    ("full", "checkpointed"),
    [
        (True, False),
        pytest.param(True, True, marks=pytest.mark.extended),
        pytest.param(False, False, marks=pytest.mark.extended),
        (False, True),
    ],
    ids=["full", "full-checkpointed", "lora", "lora-checkpointed"],
)
def test_the_plan_is_within_15_percent_of_the_measured_peak(
    model_3m: Path, full: bool, checkpointed: bool
) -> None:
    from arthex.apps.doctor.memory import PlanSettings, plan, read_shape

    shape = read_shape(model_3m)
    settings = PlanSettings(
        mode="full" if full else "lora",
        max_seq_len=SEQ,
        batch=ROWS,
        gradient_checkpointing=checkpointed,
    )
    planned = plan(shape, settings, 0, 0)
    assert planned.micro_tokens == ROWS * SEQ and planned.checkpointed is checkpointed
    trainer_bytes = sum(size for name, size in planned.parts if name in PARTS)
    spec = {"model": str(model_3m), "vocab": shape.vocab, "full": full}
    peak = measured_peak({**spec, "checkpointed": checkpointed})
    assert 0.85 <= trainer_bytes / peak <= 1.15, (trainer_bytes, peak, trainer_bytes / peak)


if __name__ == "__main__":
    print(_child(json.loads(sys.argv[1])))
