"""One custom loss, one batch, one step: the TinkerBackend (on the tinker emulator) and the
LocalBackend make the same update, and both make the update computed here by hand.

The LocalBackend is given the emulator's LoRA setup (rank 8, alpha 32, the attention and MLP
projections and `lm_head`, peft's init under seed 0, AdamW without weight decay), and the
test first checks the two step-0 adapters are the same tensors, read from the files each side
wrote. The oracle is plain transformers + peft + autograd over the step-0 adapter: the custom
loss summed over the batch's sequences (their completion tokens), its gradient, and AdamW's
first step, which is w - lr·g/(|g| + eps) whatever the betas. The gradient's norm is also
checked against each backend's `loss/grad_norm`, since Adam's first step hides the
gradient's scale. The batch (tokens, sampled logprobs, advantages) is the Tinker backend's
datums, the same sequences both backends train on.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from arthex.core.config import TrainConfig
from arthex.core.errors import InvalidInputError
from arthex.core.identity import ModelSpec, RunRef
from arthex.testing.builders import synthetic_groups

pytest.importorskip("tinker")
pytest.importorskip("torch")
pytest.importorskip("peft")

import torch

from arthex.adapters.local import LocalBackend
from arthex.adapters.tinker import TinkerBackend
from arthex.adapters.tinker.datums import build_batch
from arthex.emulators.tinker import TinkerEmulator

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("error::FutureWarning:tinker"),
    pytest.mark.filterwarnings("error::DeprecationWarning:tinker"),
    pytest.mark.filterwarnings("ignore:Setting `save_embedding_layers`:UserWarning"),
]

KEY = "tml-portable"
TIMEOUT_S = 120.0
LR = 1e-2
EPS = 1e-8
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")
CONFIG = TrainConfig(learning_rate=LR, max_grad_norm=None)


def leashed(logprobs: Any, sampled: Any, advantages: Any) -> Any:
    """Advantage-weighted logprobs with a squared-log-ratio leash (not one of Tinker's)."""
    return -(logprobs * advantages).sum() + 0.05 * ((logprobs - sampled) ** 2).sum()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    from arthex.testing.tiny_model import tiny_model

    return tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tinker-state")


@pytest.fixture(scope="module")
def emulator(tiny: str, state_dir: Path) -> Iterator[TinkerEmulator]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TINKER_TELEMETRY", "0")
        with TinkerEmulator(tiny, api_key=KEY, state_dir=str(state_dir), torch_threads=1) as up:
            yield up


def train_one_step(backend: Any, spec: ModelSpec, config: TrainConfig = CONFIG) -> dict[str, float]:
    async def main() -> dict[str, float]:
        try:
            await backend.register(spec)
            out: dict[str, float] = {}
            async for metrics in backend.train_steps(spec.run, synthetic_groups(2), config):
                out = dict(metrics)
            return out
        finally:
            await backend.close()

    return asyncio.run(main())


def emulator_adapter(state_dir: Path, model_dir: Path, step: int) -> dict[str, Any]:
    """The adapter file the emulator wrote for the step's sampler weights."""
    from safetensors.torch import load_file

    record = json.loads((model_dir / "tinker-run.json").read_text())
    path = next(c for c in record["checkpoints"] if c["step"] == step)["sampler_path"]
    run_id, segment, name = path.removeprefix("tinker://").split("/")
    folder = state_dir / "runs" / quote(run_id, safe="") / segment / name
    return dict(load_file(str(folder / "adapter.safetensors")))


def local_adapter(model_dir: Path, step: int) -> dict[str, Any]:
    """The LoRA tensors of the step's checkpoint (peft also saves a tied head's base weight,
    which is not trained)."""
    from safetensors.torch import load_file

    folder = model_dir / "checkpoints" / f"{step:04d}"
    found = load_file(str(folder / "adapter_model.safetensors"))
    return {name: value for name, value in found.items() if ".lora_" in name}


def oracle(tiny: str, step0: Path) -> tuple[dict[str, Any], float]:
    """(the adapter after AdamW's first step, the gradient's norm), by hand."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, str(step0), is_trainable=True).eval()
    total = torch.zeros(())
    for part in build_batch(synthetic_groups(2), CONFIG).parts:
        ids = torch.tensor([list(part.tokens)])
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
        chosen = logp.gather(-1, ids[0, 1:].unsqueeze(-1)).squeeze(-1)[part.prompt_length - 1 :]
        sampled = torch.from_numpy(part.sampled_logprobs.astype("float32"))
        advantages = torch.from_numpy(part.advantages.astype("float32"))
        total = total + leashed(chosen, sampled, advantages)
    trained = {n.replace(".default", ""): p for n, p in model.named_parameters() if p.requires_grad}
    grads = dict(zip(trained, torch.autograd.grad(total, list(trained.values())), strict=True))
    norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads.values()))
    after = {n: (p - LR * grads[n] / (grads[n].abs() + EPS)).detach() for n, p in trained.items()}
    return after, norm


def test_a_custom_loss_makes_the_same_update_on_tinker_and_local(
    emulator: TinkerEmulator, tiny: str, state_dir: Path, tmp_path: Path
) -> None:
    tinker_spec = ModelSpec(RunRef("portable", "tinker"), base_model=tiny, base_path=str(tmp_path))
    local_spec = ModelSpec(RunRef("portable", "local"), base_model=tiny, base_path=str(tmp_path))
    tinker_dir = tmp_path / "portable" / "models" / "tinker"
    local_dir = tmp_path / "portable" / "models" / "local"
    remote = train_one_step(
        TinkerBackend(
            base_url=emulator.base_url,
            api_key=KEY,
            timeout_s=TIMEOUT_S,
            serve=False,
            lora_rank=8,
            seed=0,
            adam_eps=EPS,
            loss_fn=leashed,
        ),
        tinker_spec,
    )
    local = train_one_step(
        LocalBackend(
            engine="torch",
            device="cpu",
            full_finetune=False,
            lora_rank=8,
            lora_alpha=32,
            lora_target_modules=TARGETS,
            seed=0,
            weight_decay=0.0,
            adam_betas=(0.9, 0.95),
            loss_fn=leashed,
        ),
        local_spec,
    )

    start = emulator_adapter(state_dir, tinker_dir, 0)
    assert set(start) == set(local_adapter(local_dir, 0))
    for name, value in local_adapter(local_dir, 0).items():
        assert torch.equal(value, start[name]), f"step-0 adapters differ at {name}"

    expected, norm = oracle(tiny, local_dir / "checkpoints" / "0000")
    assert set(expected) == set(start)
    for side, after, metrics in (
        ("tinker", emulator_adapter(state_dir, tinker_dir, 1), remote),
        ("local", local_adapter(local_dir, 1), local),
    ):
        assert metrics["loss/grad_norm"] == pytest.approx(norm, rel=1e-4), side
        for name, value in after.items():
            moved = (value - start[name]).abs().max()
            assert torch.allclose(value, expected[name], atol=LR * 1e-3, rtol=0), (side, name)
            assert name.endswith("lora_A.weight") or moved > LR / 2, (side, name)
    assert local["loss/train"] == pytest.approx(remote["loss/train"], rel=1e-4)


def test_a_loss_named_in_the_config_wins_over_the_backends_custom_loss(
    tiny: str, tmp_path: Path
) -> None:
    """As on the TinkerBackend: `loss_fn="ppo"` in the TrainConfig is PPO, custom loss or not
    (with the batch's ratios outside PPO's interval, PPO clips tokens; the custom loss never
    does), while the default config runs the custom loss."""

    def local(name: str, config: TrainConfig) -> dict[str, float]:
        spec = ModelSpec(RunRef("precedence", name), base_model=tiny, base_path=str(tmp_path))
        backend = LocalBackend(engine="torch", device="cpu", full_finetune=False, loss_fn=leashed)
        return train_one_step(backend, spec, config)

    ppo = local("ppo", TrainConfig(learning_rate=LR, loss_fn="ppo"))
    custom = local("custom", TrainConfig(learning_rate=LR))
    assert ppo["loss/clipped_token_fraction"] > 0
    assert custom["loss/clipped_token_fraction"] == 0
    assert ppo["loss/train"] != pytest.approx(custom["loss/train"], rel=1e-3)


def test_the_local_backend_takes_a_callable_loss_only() -> None:
    with pytest.raises(InvalidInputError, match="loss_fn must be a callable"):
        LocalBackend(loss_fn="dro")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="one process only"):
        LocalBackend(loss_fn=leashed, world_size=2)
