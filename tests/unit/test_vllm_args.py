"""The vLLM engine's arguments, worked out from LocalBackend's settings without vLLM: the
device mapping, the knobs, max_lora_rank from the LoRA rank, and every refusal made before
anything starts. tests/vllm_api checks the same arguments against a real vLLM."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest

from arthex.adapters.inference.vllm_args import (
    MANAGED,
    VllmSettings,
    device_ids,
    engine_arguments,
    lora_rank_slot,
)
from arthex.adapters.inference.vllm_engine import VllmEngine
from arthex.adapters.local import LocalBackend
from arthex.core.errors import InvalidInputError, MissingExtraError
from arthex.core.identity import ModelSpec, RunRef

# vLLM 0.26.0 and 0.33.0 both declare `MaxLoRARanks = Literal[1, 8, 16, 32, 64, 128, 256, 320,
# 512]` (vllm/config/lora.py): the slot is the smallest of these that holds the rank.
VLLM_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
HAS_VLLM = importlib.util.find_spec("vllm") is not None


def test_a_cuda_device_becomes_vllms_device_ids_and_no_device_field() -> None:
    assert device_ids("cuda:1") == [1]
    assert device_ids("cuda:0") == [0]
    assert device_ids("cuda") is None
    assert device_ids(None) is None
    arguments = engine_arguments("m", VllmSettings(), device="cuda:3", lora_rank=8)
    assert arguments["device_ids"] == [3]
    assert "device" not in arguments
    assert "device_ids" not in engine_arguments("m", VllmSettings(), device=None, lora_rank=8)


@pytest.mark.parametrize("device", ["cpu", "mps", "cuda:x", "cuda:-1", "gpu"])
def test_a_device_vllm_cannot_serve_on_is_refused_in_one_line(device: str) -> None:
    with pytest.raises(InvalidInputError, match="vLLM serving needs a CUDA GPU") as raised:
        device_ids(device)
    assert 'engine="torch"' in str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("rank", [1, 2, 8, 9, 16, 33, 64, 100, 128, 129, 300, 320, 400, 512])
def test_max_lora_rank_is_the_smallest_vllm_slot_that_holds_the_rank(rank: int) -> None:
    expected = min(slot for slot in VLLM_RANKS if slot >= rank)
    assert lora_rank_slot(rank) == expected
    arguments = engine_arguments("m", VllmSettings(), device=None, lora_rank=rank)
    assert arguments["max_lora_rank"] == expected


def test_a_rank_above_vllms_largest_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="lora_rank=513"):
        lora_rank_slot(513)
    with pytest.raises(InvalidInputError, match="lora_rank"):
        lora_rank_slot(0)


def test_the_knobs_reach_the_arguments_and_the_defaults_are_explicit() -> None:
    settings = VllmSettings(
        gpu_memory_utilization=0.3,
        max_model_len=1024,
        enforce_eager=True,
        max_num_seqs=16,
        max_loras=2,
        sleep_level=1,
        engine_args={"dtype": "bfloat16", "seed": 7},
    )
    arguments = engine_arguments("base/dir", settings, device="cuda:0", lora_rank=32)
    assert arguments == {
        "model": "base/dir",
        "enable_lora": True,
        "max_lora_rank": 32,
        "max_loras": 2,
        "gpu_memory_utilization": 0.3,
        "enforce_eager": True,
        "logprobs_mode": "raw_logprobs",
        "disable_log_stats": True,
        "device_ids": [0],
        "max_model_len": 1024,
        "max_num_seqs": 16,
        "enable_sleep_mode": True,
        "dtype": "bfloat16",
        "seed": 7,
    }
    plain = engine_arguments("base/dir", VllmSettings(), device=None, lora_rank=8)
    assert plain["gpu_memory_utilization"] == 0.5
    assert plain["enforce_eager"] is False
    assert not {"max_model_len", "max_num_seqs", "enable_sleep_mode"} & set(plain)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("gpu_memory_utilization", 0.0),
        ("gpu_memory_utilization", 1.5),
        ("max_model_len", 0),
        ("max_num_seqs", -1),
        ("max_loras", 0),
        ("sleep_level", 3),
        ("sleep_level", True),
        ("enforce_eager", "false"),
        ("enforce_eager", 1),
    ],
)
def test_bad_knobs_are_refused_naming_the_knob(field: str, value: object) -> None:
    with pytest.raises(InvalidInputError, match=field):
        VllmSettings(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(MANAGED))
def test_engine_args_arthex_sets_itself_are_refused_naming_the_setting(name: str) -> None:
    with pytest.raises(InvalidInputError, match=rf"engine_args\['{name}'\] is set by"):
        VllmSettings(engine_args={name: 1})


def test_engine_args_the_installed_vllm_lacks_are_refused_by_name() -> None:
    known = {*engine_arguments("m", VllmSettings(), device="cuda:0", lora_rank=8), "dtype"}
    settings = VllmSettings(engine_args={"dtype": "half", "swap_spaace": 4, "blocksize": 8})
    with pytest.raises(InvalidInputError, match=r"\['blocksize', 'swap_spaace'\]"):
        engine_arguments("m", settings, device="cuda:0", lora_rank=8, known=known)
    with pytest.raises(InvalidInputError, match="lacks \\['device_ids'\\]"):
        engine_arguments(
            "m", VllmSettings(), device="cuda:0", lora_rank=8, known=known - {"device_ids"}
        )
    allowed = engine_arguments(
        "m", VllmSettings(engine_args={"dtype": "half"}), device="cuda:0", lora_rank=8, known=known
    )
    assert allowed["dtype"] == "half"


def test_local_backend_refuses_what_vllm_cannot_do_when_constructed() -> None:
    with pytest.raises(InvalidInputError, match="vLLM serving needs a CUDA GPU"):
        LocalBackend(engine="vllm", device="cpu")
    with pytest.raises(InvalidInputError, match='full_finetune=True with engine="vllm"'):
        LocalBackend(engine="vllm", full_finetune=True)
    with pytest.raises(InvalidInputError, match="lora_rank=1024"):
        LocalBackend(engine="vllm", lora_rank=1024)
    with pytest.raises(InvalidInputError, match=r"engine_args\['device'\]"):
        LocalBackend(engine="vllm", engine_args={"device": "cuda"})
    with pytest.raises(InvalidInputError, match="gpu_memory_utilization"):
        LocalBackend(gpu_memory_utilization=0)
    # The torch engine serves on the CPU and full fine-tunes: nothing to refuse there.
    LocalBackend(engine="torch", device="cpu", full_finetune=True, lora_rank=1024)


def test_the_vllm_engine_takes_the_backends_settings() -> None:
    backend = LocalBackend(
        engine="vllm",
        device="cuda:1",
        lora_rank=100,
        gpu_memory_utilization=0.25,
        max_model_len=512,
        enforce_eager=True,
        max_num_seqs=8,
        vllm_sleep_level=2,
    )
    engine = backend._vllm_engine("base/dir")
    assert isinstance(engine, VllmEngine)
    arguments = engine.engine_kwargs()
    assert arguments["device_ids"] == [1]
    assert arguments["max_lora_rank"] == 128
    assert (arguments["gpu_memory_utilization"], arguments["max_model_len"]) == (0.25, 512)
    assert (arguments["enforce_eager"], arguments["max_num_seqs"]) == (True, 8)
    assert arguments["enable_sleep_mode"] is True


@pytest.mark.skipif(HAS_VLLM, reason="checks the refusal shown when vllm is missing")
def test_register_with_vllm_missing_fails_before_a_file_is_written(tmp_path: Path) -> None:
    backend = LocalBackend(str(tmp_path), engine="vllm")
    model = ModelSpec(RunRef("p", "agent"), base_model="some/model", base_path=str(tmp_path))

    async def register() -> None:
        async with backend:
            await backend.register(model)

    with pytest.raises(MissingExtraError, match=r"\[vllm\]\"?$"):
        asyncio.run(register())
    assert list(tmp_path.iterdir()) == []


def test_with_vllm_the_trainer_uses_lora_whatever_the_model_size() -> None:
    from arthex.adapters.local.backend import training_mode

    assert training_mode("vllm", None, "cuda", 8) is False
    assert training_mode("vllm", False, None, 8) is False
    assert training_mode("torch", None, "cpu", 8) is None  # the size rule decides
    assert training_mode("torch", True, "cpu", 8) is True
    with pytest.raises(InvalidInputError, match="vLLM serves LoRA steps only"):
        training_mode("vllm", True, "cuda", 8)
    with pytest.raises(InvalidInputError, match="vLLM serving needs a CUDA GPU"):
        training_mode("vllm", None, "cpu", 8)


def test_auto_keeps_the_torch_engine_for_what_only_it_does() -> None:
    # Whether or not vLLM and a GPU are here, these settings need the torch engine.
    assert LocalBackend(device="cpu")._resolved_engine() == "torch"
    assert LocalBackend(full_finetune=True)._resolved_engine() == "torch"
    assert LocalBackend(engine="vllm")._resolved_engine() == "vllm"


def test_a_second_sleeper_trains_only_once_the_engine_is_asleep() -> None:
    """Two runs on one engine: the second `sleep` returns only when the first one's
    `engine.sleep` has finished, and the engine wakes once both woke up."""
    from typing import Any

    from arthex.adapters.inference.vllm_args import VllmSettings
    from arthex.adapters.inference.vllm_engine import VllmEngine

    events: list[str] = []

    class SleepyEngine:
        def __init__(self) -> None:
            self.asleep = asyncio.Event()
            self.release = asyncio.Event()

        async def sleep(self, level: int, mode: str) -> None:
            events.append("sleep starts")
            await self.release.wait()
            events.append("asleep")

        async def wake_up(self) -> None:
            events.append("wake")

    async def main() -> None:
        engine = VllmEngine("m", VllmSettings(sleep_level=1))
        fake: Any = SleepyEngine()
        engine._attach(fake, chat=None)  # type: ignore[arg-type]
        first = asyncio.create_task(engine.sleep())
        await asyncio.sleep(0)
        second = asyncio.create_task(engine.sleep())
        await asyncio.sleep(0)
        assert not second.done(), "the second run must wait until vLLM is asleep"
        fake.release.set()
        await asyncio.gather(first, second)
        events.append("both train")
        await engine.wake_up()
        await engine.wake_up()

    asyncio.run(main())
    assert events == ["sleep starts", "asleep", "both train", "wake"]
