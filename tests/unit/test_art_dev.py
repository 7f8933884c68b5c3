"""`arthex.art.dev`: ART's settings TypedDicts with ART's keys, `get_model_config` and
`get_openai_server_config` giving the LocalBackend's settings in their shape (worked
examples), ART's trainer enums (against transformers' where installed) and ART's config
checks.

ART's keys were read from ART 0.5.23's classes by its own interpreter (tests/interop/art/
dev_shapes.py) into tests/unit/data/art_0_5_23_dev_shapes.json; the interop suite re-reads the
wheel, and compares the checks' outcomes with ART's own (tests/interop/test_art_dev.py).
"""

from __future__ import annotations

import enum
import inspect
import json
import typing
from pathlib import Path
from typing import Any

import pytest

import arthex
import arthex.art.dev as dev
import arthex.art.dev.engine as dev_engine
import arthex.art.dev.model as dev_model
from arthex.art.dev.get_model_config import default_target_modules, get_model_config
from arthex.core.errors import InvalidInputError

RECORDED: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "art_0_5_23_dev_shapes.json").read_text()
)
SHAPES: dict[str, dict[str, list[str]]] = RECORDED["shapes"]


def test_the_recording_is_the_wheels() -> None:
    assert RECORDED["version"] == "0.5.23" and len(SHAPES) == 14


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_each_shape_has_arts_keys_and_required_keys(name: str) -> None:
    shape = getattr(dev, name)
    assert sorted(shape.__annotations__) == SHAPES[name]["keys"]
    assert sorted(shape.__required_keys__) == SHAPES[name]["required"]
    assert shape.__total__ is False


def test_a_shape_builds_a_plain_dict_and_peft_args_says_where_lora_went() -> None:
    config = dev.InternalModelConfig(
        init_args=dev.InitArgs(max_seq_length=2048),
        vllm_runtime=dev.VllmRuntimeArgs(mode="external", server_url="http://h"),
    )
    assert type(config) is dict
    with pytest.raises(InvalidInputError, match=r"peft_args.*LocalBackend\(lora_rank="):
        dev.PeftArgs(r=8)


def backend_default(name: str) -> Any:
    return inspect.signature(arthex.LocalBackend.__init__).parameters[name].default


def test_get_model_config_gives_the_local_backends_defaults_in_arts_shape() -> None:
    found = get_model_config("org/model", "/nowhere/run", None)
    assert found["lora_config"] == {
        "rank": backend_default("lora_rank"),
        "alpha": backend_default("lora_alpha"),
        "target_modules": default_target_modules("org/model"),
    }
    assert set(default_target_modules("x")) >= {"q_proj", "v_proj"}
    beta1, beta2 = backend_default("adam_betas")
    trainer = found["trainer_args"]
    assert (trainer["adam_beta1"], trainer["adam_beta2"]) == (beta1, beta2)
    assert trainer["weight_decay"] == backend_default("weight_decay")
    assert trainer["learning_rate"] == arthex.TrainConfig().learning_rate
    assert trainer["max_grad_norm"] == arthex.TrainConfig().max_grad_norm
    assert found["engine_args"] == {
        "model": "org/model",
        "gpu_memory_utilization": backend_default("gpu_memory_utilization"),
    }
    assert found["init_args"] == {"model_name": "org/model"}
    assert (found["rollout_weight_update_mode"], found["tinker_args"]) == ("step_lora", None)
    # every key is one of ART's, at every level
    assert set(found) <= set(SHAPES["BackendModelConfig"]["keys"])
    for key, shape in (("init_args", "InitArgs"), ("engine_args", "EngineArgs"),
                       ("lora_config", "LoRAConfig"), ("trainer_args", "TrainerArgs")):  # fmt: skip
        assert set(found[key]) <= set(SHAPES[shape]["keys"]), key  # type: ignore[literal-required]


def test_get_model_config_merges_a_config_as_art_does(tmp_path: Path) -> None:
    for step in ("0003", "0012", "0020"):  # ART's layout; 0020 is not complete
        (tmp_path / "checkpoints" / step).mkdir(parents=True)
        if step != "0020":
            for name in ("adapter_config.json", "adapter_model.safetensors"):
                (tmp_path / "checkpoints" / step / name).write_text("{}")
    config = dev.InternalModelConfig(
        init_args=dev.InitArgs(max_seq_length=4096, model_name="given"),
        engine_args={"gpu_memory_utilization": 0.8, "enforce_eager": True},
        trainer_args={"learning_rate": 1e-5},
        trainer_gpu_ids=[0],
        inference_gpu_ids=[1],
        tinker_args=dev.TinkerArgs(renderer_name="qwen3"),
    )
    found = get_model_config("org/model", str(tmp_path), config, {"rank": 32, "dropout": 0.1})
    # the latest checkpoint wins over the configured name, as ART resumes a run
    assert found["init_args"] == {
        "model_name": str(tmp_path / "checkpoints" / "0012"),
        "max_seq_length": 4096,
    }
    assert found["engine_args"]["gpu_memory_utilization"] == 0.8
    assert found["engine_args"]["enforce_eager"] is True
    assert found["trainer_args"]["learning_rate"] == 1e-5
    assert found["lora_config"]["rank"] == 32 and found["lora_config"]["dropout"] == 0.1
    assert found["lora_config"]["alpha"] == backend_default("lora_alpha")
    assert (found["trainer_gpu_ids"], found["inference_gpu_ids"]) == ([0], [1])
    assert found["tinker_args"] == {"renderer_name": "qwen3"}
    assert config["engine_args"] == {"gpu_memory_utilization": 0.8, "enforce_eager": True}
    with pytest.raises(InvalidInputError, match="peft_args"):
        get_model_config("m", str(tmp_path), {"peft_args": {}})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"trainer_gpu_ids": [0]}, "both trainer_gpu_ids and inference_gpu_ids"),
        ({"trainer_gpu_ids": [0, 1], "inference_gpu_ids": [1]}, r"share GPUs \[1\]"),
        ({"trainer_gpu_ids": [0], "inference_gpu_ids": [1, 2]}, "tensor_parallel_size=2"),
        ({"vllm_runtime": {"mode": "external"}}, "server_url"),
        ({"vllm_runtime": {"mode": "remote"}}, "'managed' or 'external'"),
        ({"rollout_weight_update_mode": "live"}, "rollout_weight_update_mode"),
    ],
)
def test_validate_dedicated_config_names_what_cannot_hold(
    config: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        dev.validate_dedicated_config(config)  # type: ignore[arg-type]


def test_the_predicates_read_the_dict() -> None:
    split = dev.InternalModelConfig(trainer_gpu_ids=[0], inference_gpu_ids=[1])
    external = dev.InternalModelConfig(
        vllm_runtime=dev.VllmRuntimeArgs(mode="external", server_url="http://h")
    )
    assert (dev.is_dedicated_mode(split), dev.is_external_vllm_mode(split)) == (True, False)
    assert (dev.is_dedicated_mode(external), dev.is_external_vllm_mode(external)) == (True, True)
    assert not dev.is_dedicated_mode(dev.InternalModelConfig())
    dev.validate_dedicated_config(split)
    dev.validate_dedicated_config(external)


def test_arts_trainer_enums_are_str_enums_with_transformers_values() -> None:
    """ART keeps copies of transformers' enums (tests/interop/test_art_dev.py checks arthex's
    against ART's, member for member); each member transformers still has by that name has
    the value transformers gives it."""
    transformers = pytest.importorskip("transformers")
    del transformers
    from transformers.debug_utils import DebugOption
    from transformers.trainer_utils import (
        FSDPOption,
        HubStrategy,
        IntervalStrategy,
        SchedulerType,
    )
    from transformers.training_args import OptimizerNames

    pairs: list[tuple[type[enum.Enum], type[enum.Enum]]] = [
        (dev_model.DebugOption, DebugOption),
        (dev_model.FSDPOption, FSDPOption),
        (dev_model.HubStrategy, HubStrategy),
        (dev_model.IntervalStrategy, IntervalStrategy),
        (dev_model.OptimizerNames, OptimizerNames),
        (dev_model.SchedulerType, SchedulerType),
    ]
    for ours, theirs in pairs:
        shared = [member.name for member in ours if member.name in theirs.__members__]
        assert len(shared) >= len(ours) - 1, ours  # one name at most left transformers
        for name in shared:
            assert ours[name].value == theirs[name].value, (ours, name)
    assert dev_model.SaveStrategy is dev_model.IntervalStrategy


def test_a_trainer_enum_is_its_string_in_arts_trainer_args() -> None:
    args = dev.TrainerArgs(
        optim=dev_model.OptimizerNames.ADAMW_TORCH_FUSED,
        lr_scheduler_type=dev_model.SchedulerType.COSINE,
        save_strategy=dev_model.SaveStrategy.STEPS,
        fsdp=[dev_model.FSDPOption.FULL_SHARD],
    )
    assert args["optim"] == "adamw_torch_fused" and args["lr_scheduler_type"] == "cosine"
    assert dev_model.IntervalStrategy("steps") is args["save_strategy"]
    assert json.loads(json.dumps(args)) == {
        "optim": "adamw_torch_fused",
        "lr_scheduler_type": "cosine",
        "save_strategy": "steps",
        "fsdp": ["full_shard"],
    }
    assert typing.get_args(dev.RolloutWeightUpdateMode) == ("step_lora", "in_flight_lora")
    assert typing.get_args(dev_model.VllmRuntimeMode) == ("managed", "external")
    assert dev_engine.WeightTransferConfig(backend="nccl") == {"backend": "nccl"}


def test_get_openai_server_config_describes_arthexs_server() -> None:
    """A worked example: the LocalBackend's server for step 3 of "agent" (see the module text of
    arthex/art/dev/openai_server.py for each key)."""
    found = dev.get_openai_server_config(
        "agent", "org/base", "/runs/agent/logs/vllm.log", "/runs/agent/checkpoints/0003"
    )
    assert found == {
        "log_file": "/runs/agent/logs/vllm.log",
        "server_args": {
            "host": "127.0.0.1",
            "port": 0,
            "lora_modules": ['{"name": "agent@3", "path": "/runs/agent/checkpoints/0003"}'],
            "return_tokens_as_token_ids": True,
            "enable_auto_tool_choice": True,
            "tool_call_parser": "hermes",
        },
        "engine_args": {
            "model": "org/base",
            "served_model_name": "agent",
            "enable_lora": True,
            "max_lora_rank": 8,
            "max_loras": 4,
            "gpu_memory_utilization": backend_default("gpu_memory_utilization"),
            "enforce_eager": False,
            "logprobs_mode": "raw_logprobs",
            "disable_log_stats": True,
        },
    }
    bare = dev.get_openai_server_config("agent", "org/base", "x.log")
    assert bare["server_args"]["lora_modules"] is None


def test_get_openai_server_config_lays_a_config_over_it_and_refuses_a_non_step_folder() -> None:
    config = dev.OpenAIServerConfig(
        log_file="/elsewhere.log",
        server_args=dev.ServerArgs(port=8001, api_key="k"),
        engine_args=dev.EngineArgs(max_model_len=4096, served_model_name="mine"),
    )
    found = dev.get_openai_server_config("agent", "org/base", "x.log", "ck/0012", config)
    assert found["log_file"] == "/elsewhere.log"
    assert found["server_args"]["port"] == 8001 and found["server_args"]["api_key"] == "k"
    assert found["server_args"]["lora_modules"] == ['{"name": "agent@12", "path": "ck/0012"}']
    assert found["engine_args"]["served_model_name"] == "mine"
    assert found["engine_args"]["max_model_len"] == 4096
    assert config["server_args"] == {"port": 8001, "api_key": "k"}  # the config is not changed
    for bad in ("ck/latest", "ck/0003/", "ck/-1", "ck/٣"):
        with pytest.raises(InvalidInputError, match=r"lora_path must be a checkpoint's step"):
            dev.get_openai_server_config("agent", "org/base", "x.log", bad)
    quoted = dev.get_openai_server_config("agent", "org/base", "x.log", 'ck "a"/0001')
    modules = quoted["server_args"].get("lora_modules") or []
    assert [json.loads(module)["path"] for module in modules] == ['ck "a"/0001']
