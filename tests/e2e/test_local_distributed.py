"""LocalBackend with `world_size=N`: real rank processes on CPU with gloo, the model sharded by
FSDP2, against the single-process trainer as the oracle.

- Equivalence: ten optimizer steps (several losses, clipping, gradient accumulation and a KL
  penalty) on two ranks give the single-process metrics and weights within 1e-5.
- Portability: checkpoints written by N ranks resume on M ranks (2 -> 1 -> 3), the live
  weights and AdamW state bit-for-bit those of the files, and a LoRA adapter written by ranks
  loads with peft.
- Ranks on "other machines": a rank started by hand from torch's standard variables, or by
  torchrun, joins the frontend and trains like a local one.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("fastapi")

from safetensors.torch import load_file  # noqa: E402

from arthex.adapters.local import LocalBackend  # noqa: E402
from arthex.core.config import TrainConfig  # noqa: E402
from arthex.core.conversations import conversation_from  # noqa: E402
from arthex.core.identity import ModelSpec, RunRef  # noqa: E402
from arthex.core.sft import TrainSFTConfig  # noqa: E402
from arthex.core.trajectories import TrajectoryGroup  # noqa: E402
from arthex.testing.builders import synthetic_groups  # noqa: E402
from arthex.testing.contracts.sft import SFT_DATA  # noqa: E402
from arthex.testing.tiny_model import tiny_model  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

T = TypeVar("T")
RUN = RunRef("proj", "sharded")
TOLERANCE = 1e-5

# Five calls of two optimizer steps each: ten steps over every loss, a tight clip and a KL
# penalty against step 0.
SETTINGS: list[dict[str, Any]] = [
    {},
    {"loss_fn": "ppo"},
    {"max_grad_norm": 0.05},
    {"kl_penalty_coef": 0.1, "kl_penalty_reference_step": 0},
    {"loss_fn": "importance_sampling"},
]
CALLS: list[tuple[list[TrajectoryGroup], TrainConfig]] = [
    (
        synthetic_groups(3, 4, offset=i),
        TrainConfig(learning_rate=1e-3, grad_accumulation_sequences=6, **extra),
    )
    for i, extra in enumerate(SETTINGS)
]


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def run_with(
    backend: LocalBackend, base_model: str, root: Path, body: Callable[[LocalBackend], Awaitable[T]]
) -> T:
    async def main() -> T:
        try:
            await backend.register(ModelSpec(run=RUN, base_model=base_model, base_path=str(root)))
            return await body(backend)
        finally:
            await backend.close()

    return asyncio.run(main())


async def train_all(
    b: LocalBackend, calls: Sequence[tuple[list[TrajectoryGroup], TrainConfig]]
) -> list[dict[str, float]]:
    out: list[dict[str, float]] = []
    for groups, config in calls:
        out += [dict(m) async for m in b.train_steps(RUN, groups, config)]
    return out


def step_dir(root: Path, step: int) -> Path:
    return root / RUN.project / "models" / RUN.name / "checkpoints" / f"{step:04d}"


def tensors(folder: Path) -> dict[str, Any]:
    """Every tensor of a checkpoint's safetensors files, keyed by file and name."""
    out: dict[str, Any] = {}
    for path in sorted(folder.glob("*.safetensors")):
        out.update({f"{path.name}:{k}": v for k, v in load_file(str(path)).items()})
    return out


def bitwise(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Names whose tensors differ in any bit (or exist on one side only)."""
    return sorted(
        k for k in a.keys() | b.keys() if k not in a or k not in b or not torch.equal(a[k], b[k])
    )


# --- equivalence ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "full_finetune",
    [pytest.param(True, marks=pytest.mark.extended), False],  # CI: the adapter's sharding
    ids=["full", "lora"],
)
def test_two_ranks_train_like_one_process_for_ten_steps(
    base_model: str, tmp_path: Path, full_finetune: bool
) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    solo = run_with(
        LocalBackend(full_finetune=full_finetune), base_model, one, lambda b: train_all(b, CALLS)
    )
    ranks = run_with(
        LocalBackend(full_finetune=full_finetune, world_size=2),
        base_model,
        two,
        lambda b: train_all(b, CALLS),
    )
    assert len(solo) == len(ranks) == 10
    for step, (a, b) in enumerate(zip(solo, ranks, strict=True)):
        assert a.keys() == b.keys()
        far = {k: (a[k], b[k]) for k in a if abs(a[k] - b[k]) > TOLERANCE}
        assert not far, f"optimizer step {step}: {far}"
    final_one, final_two = tensors(step_dir(one, 5)), tensors(step_dir(two, 5))
    assert final_one.keys() == final_two.keys() and final_one
    worst = max(float((final_one[k] - final_two[k]).abs().max()) for k in final_one)
    assert worst <= TOLERANCE, f"final weights and optimizer state differ by up to {worst}"
    kind = "model.safetensors" if full_finetune else "adapter_model.safetensors"
    assert any(k.startswith(kind) for k in final_two)


# --- portability ---------------------------------------------------------------------------


def live_matches_files(b: LocalBackend, folder: Path) -> list[str]:
    """What differs between the run's live state and the checkpoint it was loaded from."""
    weights, optimizer = b.training_tensors(RUN)
    files = tensors(folder)
    if "model.safetensors:" + next(iter(weights)) in files:
        saved = {k: files["model.safetensors:" + k] for k in weights}
    else:  # peft's adapter file names parameters without the adapter's name
        saved = {
            k: files["adapter_model.safetensors:" + k.replace(".default.", ".")] for k in weights
        }
    saved_opt = {k.split(":", 1)[1]: v for k, v in files.items() if k.startswith("optimizer.")}
    return bitwise(weights, saved) + bitwise(optimizer, saved_opt)


@pytest.mark.parametrize(
    "full_finetune",
    [True, pytest.param(False, marks=pytest.mark.extended)],  # CI: every weight and its Adam
    ids=["full", "lora"],
)
def test_checkpoints_move_between_rank_counts_bit_for_bit(
    base_model: str, tmp_path: Path, full_finetune: bool
) -> None:
    async def two_steps(b: LocalBackend) -> None:
        await train_all(b, CALLS[:2])

    async def resume(b: LocalBackend) -> tuple[int, list[str]]:
        step = await b.get_step(RUN)
        differing = live_matches_files(b, step_dir(tmp_path, step))
        await train_all(b, CALLS[2:3])
        return step, differing

    run_with(
        LocalBackend(full_finetune=full_finetune, world_size=2), base_model, tmp_path, two_steps
    )
    step, differing = run_with(LocalBackend(), base_model, tmp_path, resume)
    assert (step, differing) == (2, [])
    step, differing = run_with(LocalBackend(world_size=3), base_model, tmp_path, resume)
    assert (step, differing) == (3, [])
    assert sorted(p.name for p in step_dir(tmp_path, 4).parent.iterdir()) == [
        "0000",
        "0001",
        "0002",
        "0003",
        "0004",
    ]


def test_an_adapter_written_by_ranks_loads_with_peft(base_model: str, tmp_path: Path) -> None:
    from peft import PeftModel, get_peft_model_state_dict
    from transformers import AutoModelForCausalLM

    async def one_step(b: LocalBackend) -> None:
        await train_all(b, CALLS[:1])

    run_with(LocalBackend(full_finetune=False, world_size=2), base_model, tmp_path, one_step)
    folder = step_dir(tmp_path, 1)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_model), str(folder))
    loaded = get_peft_model_state_dict(model)
    saved = load_file(str(folder / "adapter_model.safetensors"))
    assert loaded.keys() == saved.keys() and bitwise(dict(loaded), saved) == []
    assert any(float(v.abs().max()) > 0 for k, v in saved.items() if "lora_B" in k), (
        "a trained adapter's B matrices are no longer zero"
    )


# --- ranks on other machines ---------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def second_node(launcher: str, port: int) -> subprocess.Popen[bytes]:
    """Rank 1 of 2, started the way another machine would start it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ARTHEX_", "MASTER_"))}
    worker = ["-m", "arthex.adapters.local.distributed.worker"]
    if launcher == "env":
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", RANK="1")
        command = [sys.executable, *worker]
    else:  # torchrun numbers its own ranks from 0 and points MASTER_* at its own store
        env.update(
            ARTHEX_MASTER_ADDR="127.0.0.1",
            ARTHEX_MASTER_PORT=str(port),
            ARTHEX_WORLD_SIZE="2",
            ARTHEX_RANK_OFFSET="1",
        )
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=1",
            *worker,
        ]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.mark.parametrize("launcher", [pytest.param("env", marks=pytest.mark.extended), "torchrun"])
def test_a_rank_started_elsewhere_joins_and_trains_like_a_local_one(
    base_model: str, tmp_path: Path, launcher: str
) -> None:
    port = free_port()
    node = second_node(launcher, port)
    try:
        backend = LocalBackend(
            full_finetune=True,
            world_size=2,
            devices=["cpu"],
            master_addr="127.0.0.1",
            master_port=port,
        )
        remote = run_with(
            backend, base_model, tmp_path / "remote", lambda b: train_all(b, CALLS[:2])
        )
        _, err = node.communicate(timeout=120)
    finally:
        if node.poll() is None:
            node.kill()
            node.wait()
    assert node.returncode == 0, err.decode(errors="replace")[-2000:]
    local = run_with(
        LocalBackend(full_finetune=True, world_size=2),
        base_model,
        tmp_path / "local",
        lambda b: train_all(b, CALLS[:2]),
    )
    assert len(remote) == len(local) == 4
    for a, b in zip(remote, local, strict=True):
        assert all(abs(a[k] - b[k]) <= TOLERANCE for k in a)
    here, there = (
        tensors(step_dir(tmp_path / "local", 2)),
        tensors(step_dir(tmp_path / "remote", 2)),
    )
    assert here.keys() == there.keys()
    assert all(float((here[k] - there[k]).abs().max()) <= TOLERANCE for k in here)


def test_a_caller_that_stops_reading_leaves_the_ranks_on_the_checkpoint(
    base_model: str, tmp_path: Path
) -> None:
    """The backend reloads the trainer after an abandoned call; the ranks finish the steps
    nobody reads, then load the newest checkpoint, so memory never drifts from disk."""

    async def body(b: LocalBackend) -> tuple[int, list[str], int]:
        steps = b.train_steps(
            RUN,
            synthetic_groups(2, 4),
            TrainConfig(learning_rate=1e-3, grad_accumulation_sequences=1),
        )
        await steps.__anext__()
        assert isinstance(steps, AsyncGenerator)
        await steps.aclose()
        step = await b.get_step(RUN)
        differing = live_matches_files(b, step_dir(tmp_path, step))
        await train_all(b, CALLS[:1])
        return step, differing, await b.get_step(RUN)

    result = run_with(LocalBackend(full_finetune=True, world_size=2), base_model, tmp_path, body)
    assert result == (0, [], 1)


@pytest.mark.extended
def test_ranks_resolve_a_relative_model_path_from_the_frontends_directory(
    base_model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ranks forked by a helper started elsewhere still work where the frontend works now."""
    (tmp_path / "first").mkdir()
    monkeypatch.chdir(tmp_path / "first")
    run_with(LocalBackend(world_size=2, full_finetune=True), base_model, tmp_path / "a", train_one)
    (tmp_path / "second").mkdir()
    monkeypatch.chdir(tmp_path / "second")
    tiny_model("here")
    step = run_with(
        LocalBackend(world_size=2, full_finetune=True), "here", tmp_path / "b", train_one
    )
    assert step == 1


async def train_one(b: LocalBackend) -> int:
    await train_all(b, CALLS[:1])
    return await b.get_step(RUN)


# --- what a run carries in from the single-process trainer ----------------------------------


def state_file(root: Path, step: int) -> dict[str, Any]:
    return dict(json.loads((step_dir(root, step) / "trainer_state.json").read_text()))


def adam_steps(folder: Path) -> set[float]:
    moments = load_file(str(folder / "optimizer.safetensors"))
    return {float(v.item()) for k, v in moments.items() if k.endswith(".step")}


def test_ranks_continuing_a_fine_tuned_run_start_adam_afresh_like_one_process(
    base_model: str, tmp_path: Path
) -> None:
    """SFT leaves its own moments (and weight decay 0) in the checkpoint; RL on ranks starts
    the optimizer afresh, as one process does, so both give the same step."""
    data = [
        conversation_from([{"role": "user", "content": q}, {"role": "assistant", "content": a}])
        for q, a in SFT_DATA
    ]

    async def fine_tune(b: LocalBackend) -> None:
        async for _m in b.train_sft(RUN, data, TrainSFTConfig(learning_rate=1e-3, batch_size=3)):
            pass

    run_with(LocalBackend(full_finetune=True), base_model, tmp_path / "one", fine_tune)
    shutil.copytree(tmp_path / "one", tmp_path / "two")
    assert state_file(tmp_path / "two", 1)["optimizer_mode"] == "sft"
    for root, backend in [
        (tmp_path / "one", LocalBackend(full_finetune=True)),
        (tmp_path / "two", LocalBackend(full_finetune=True, world_size=2)),
    ]:
        run_with(backend, base_model, root, lambda b: train_all(b, CALLS[:1]))
    solo, ranks = step_dir(tmp_path / "one", 2), step_dir(tmp_path / "two", 2)
    assert adam_steps(solo) == adam_steps(ranks) == {2.0}  # one RL call: two fresh Adam steps
    assert state_file(tmp_path / "two", 2)["optimizer_mode"] == "rl"
    decay = [
        g["weight_decay"]
        for g in json.loads((ranks / "optimizer.json").read_text())["param_groups"]
    ]
    assert decay == [0.1, 0.0]  # the backend's weight decay is back on the matrices
    a, b = tensors(solo), tensors(ranks)
    assert a.keys() == b.keys()
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert worst <= TOLERANCE, f"weights and optimizer state differ by up to {worst}"


def test_ranks_record_the_shape_of_the_adapter_they_continue(
    base_model: str, tmp_path: Path
) -> None:
    """A LoRA run keeps its adapter's rank and alpha when a backend with other LoRA settings
    continues it; trainer_state.json says what the adapter files say."""

    async def nothing(b: LocalBackend) -> None:
        return None

    run_with(
        LocalBackend(full_finetune=False, lora_rank=4, lora_alpha=8), base_model, tmp_path, nothing
    )
    run_with(
        LocalBackend(full_finetune=False, world_size=2),
        base_model,
        tmp_path,
        lambda b: train_all(b, CALLS[:1]),
    )
    adapter = json.loads((step_dir(tmp_path, 1) / "adapter_config.json").read_text())
    lora = state_file(tmp_path, 1)["lora"]
    assert (adapter["r"], adapter["lora_alpha"]) == (4, 8)
    assert (lora["rank"], lora["alpha"]) == (4, 8)
    assert sorted(lora["targets"]) == sorted(adapter["target_modules"])


# --- an SFT warm start, then ranks ----------------------------------------------------------


def test_an_sft_checkpoint_continues_on_ranks_like_in_one_process(
    base_model: str, tmp_path: Path
) -> None:
    """SFT runs in one process; ranks refuse it before writing anything, and continue its
    checkpoint as one process does: Adam starts afresh when the objective turns to RL."""
    from arthex.core.conversations import conversation_from
    from arthex.core.errors import UnsupportedCapability
    from arthex.core.sft import TrainSFTConfig
    from arthex.testing.contracts.sft import SFT_DATA

    data = [
        conversation_from([{"role": "user", "content": q}, {"role": "assistant", "content": a}])
        for q, a in SFT_DATA
    ]

    async def sft(b: LocalBackend) -> None:
        config = TrainSFTConfig(learning_rate=1e-3, batch_size=3, epochs=1)
        async for _ in b.train_sft(RUN, data, config):
            pass

    async def refused(b: LocalBackend) -> None:
        before = sorted(p.name for p in step_dir(two, 0).parent.iterdir())
        with pytest.raises(UnsupportedCapability, match="sft"):
            await sft(b)
        assert sorted(p.name for p in step_dir(two, 0).parent.iterdir()) == before

    async def rl(b: LocalBackend) -> list[dict[str, float]]:
        return await train_all(b, CALLS[:1])

    one, two = tmp_path / "one", tmp_path / "two"
    for root in (one, two):
        run_with(LocalBackend(full_finetune=True), base_model, root, sft)
    solo = run_with(LocalBackend(full_finetune=True), base_model, one, rl)
    run_with(LocalBackend(full_finetune=True, world_size=2), base_model, two, refused)
    ranks = run_with(LocalBackend(full_finetune=True, world_size=2), base_model, two, rl)
    for step, (a, b) in enumerate(zip(solo, ranks, strict=True)):
        far = {k: (a[k], b[k]) for k in a if abs(a[k] - b[k]) > TOLERANCE}
        assert not far, f"optimizer step {step}: {far}"
    final_one, final_two = tensors(step_dir(one, 2)), tensors(step_dir(two, 2))
    assert final_one.keys() == final_two.keys() and final_one
    worst = max(float((final_one[k] - final_two[k]).abs().max()) for k in final_one)
    assert worst <= TOLERANCE, f"weights and optimizer state differ by up to {worst}"
