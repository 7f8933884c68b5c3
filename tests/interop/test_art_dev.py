"""`arthex.art.dev` against ART 0.5.23's own `art.dev`: the recording of ART's settings
TypedDicts (tests/unit/data/art_0_5_23_dev_shapes.json, which the unit tests check arthex's
against) is what the wheel holds, and ART's config checks (`validate_dedicated_config`,
`is_dedicated_mode`, `is_external_vllm_mode`) give what arthex's give on the same configs: the
same answer, or both refusing the config (ART with a ValueError, arthex with
InvalidInputError, which is one). ART's copies of transformers' trainer enums, its Literal
aliases and `WeightTransferConfig` are arthex's member for member, and
`get_openai_server_config` gives ART's config on several cases but for what arthex's server
does differently, each difference named (art/dev_server_script.py, one script for both)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import arthex.art.dev as dev

from .art_env import SCRIPTS, art_environment, art_python, both_outcomes

RECORDED = Path(__file__).parents[1] / "unit" / "data" / "art_0_5_23_dev_shapes.json"

CONFIGS: list[dict[str, Any]] = [
    {},
    {"init_args": {"max_seq_length": 4096}},
    {"trainer_gpu_ids": [0]},
    {"inference_gpu_ids": [1]},
    {"trainer_gpu_ids": [0], "inference_gpu_ids": [1]},
    {"trainer_gpu_ids": [], "inference_gpu_ids": [1]},
    {"trainer_gpu_ids": [0], "inference_gpu_ids": []},
    {"trainer_gpu_ids": [0, 1], "inference_gpu_ids": [1, 2]},
    {"trainer_gpu_ids": [0], "inference_gpu_ids": [1, 2]},
    {"trainer_gpu_ids": [0], "inference_gpu_ids": [1, 2],
     "engine_args": {"tensor_parallel_size": 2}},
    {"trainer_gpu_ids": [0], "inference_gpu_ids": [1], "engine_args": {"enable_sleep_mode": True}},
    {"trainer_gpu_ids": [0], "inference_gpu_ids": [1], "init_args": {"fast_inference": True}},
    {"init_args": {"fast_inference": False}},
    {"vllm_runtime": {"mode": "external", "server_url": "http://127.0.0.1:8000"}},
    {"vllm_runtime": {"mode": "external"}},
    {"vllm_runtime": {"mode": "external", "server_url": "http://h"}, "trainer_gpu_ids": []},
    {"vllm_runtime": {"mode": "external", "server_url": "http://h"}, "trainer_gpu_ids": [0]},
    {"vllm_runtime": {"mode": "managed"}, "trainer_gpu_ids": [0], "inference_gpu_ids": [1]},
    {"vllm_runtime": {"mode": "remote"}},
    {"vllm_runtime": "external"},
    {"rollout_weight_update_mode": "in_flight_lora"},
    {"rollout_weight_update_mode": "live"},
    {"rollout_weights_mode": "lora"},
]  # fmt: skip


def outcome(check: Callable[[Any], Any], config: dict[str, Any]) -> Any:
    try:
        return check(config)
    except ValueError:
        return "ValueError"


def test_the_recorded_shapes_are_the_wheels() -> None:
    done = subprocess.run(
        [str(art_python()), str(SCRIPTS / "dev_shapes.py")],
        capture_output=True, text=True, env=art_environment(), timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == json.loads(RECORDED.read_text())


def test_the_config_checks_answer_as_arts() -> None:
    done = subprocess.run(
        [str(art_python()), str(SCRIPTS / "dev_validate.py")],
        input=json.dumps(CONFIGS), capture_output=True, text=True, env=art_environment(),
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    art = json.loads(done.stdout)
    checks = (dev.is_external_vllm_mode, dev.is_dedicated_mode, dev.validate_dedicated_config)
    ours = [[outcome(check, config) for check in checks] for config in CONFIGS]
    for config, art_one, our_one in zip(CONFIGS, art, ours, strict=True):
        assert our_one == art_one, config
    assert sum(row[2] == "ValueError" for row in art) >= 10  # the refusals are exercised


# `get_openai_server_config`: [model_name, base_model, log_file, lora_path, config]
SERVER_CASES: list[list[Any]] = [
    ["agent", "Qwen/Qwen2.5-0.5B-Instruct", "/runs/agent/logs/vllm.log", None, None],
    ["agent", "Qwen/Qwen2.5-0.5B-Instruct", "/runs/agent/logs/vllm.log",
     "/runs/agent/checkpoints/0003", None],
    ["email-agent", "org/base", "vllm.log", "ckpt/12", {"log_file": "/elsewhere.log"}],
    ["agent", "org/base", "vllm.log", "/runs/agent/checkpoints/0000",
     {"server_args": {"port": 8001, "tool_call_parser": None, "api_key": "k"},
      "engine_args": {"max_model_len": 4096, "served_model_name": "mine",
                      "generation_config": "auto"}}],
    ["agent", "org/base", "vllm.log", None, {"server_args": {}, "engine_args": {}}],
    ["agent", "org/base", "vllm.log", "/runs/agent/checkpoints/latest", None],
    ["agent", "org/base", "vllm.log", "/runs/agent/checkpoints/0003/", None],
]  # fmt: skip

# What arthex's server does differently, laid over ART's config where the case's own config
# does not set the key (the module text of arthex/art/dev/openai_server.py says why).
OURS_ADDED = {"host": "127.0.0.1", "port": 0}
OURS_DROPPED_SERVER = ("api_key",)
OURS_DROPPED_ENGINE = ("generation_config",)


def arthex_vllm_arguments() -> dict[str, Any]:
    """The engine arguments LocalBackend(engine="vllm") starts vLLM with, by default."""
    from arthex.adapters.inference.vllm_args import VllmSettings, engine_arguments

    return engine_arguments("org/base", VllmSettings(), device=None, lora_rank=8)


def expected_from_arts(art: dict[str, Any], case: list[Any]) -> dict[str, Any]:
    model_name, base_model, _log, _lora, config = case
    given = config or {}
    server_given = given.get("server_args", {})
    engine_given = given.get("engine_args", {})
    server = {k: v for k, v in art["server_args"].items() if k not in OURS_DROPPED_SERVER}
    server |= {k: v for k, v in OURS_ADDED.items() if k not in server_given}
    server |= {k: v for k, v in server_given.items() if k in OURS_DROPPED_SERVER}
    engine = {k: v for k, v in art["engine_args"].items() if k not in OURS_DROPPED_ENGINE}
    engine |= {**arthex_vllm_arguments(), "model": base_model, "served_model_name": model_name}
    engine |= engine_given
    return {"log_file": art["log_file"], "server_args": server, "engine_args": engine}


def test_the_enums_aliases_and_server_config_are_arts() -> None:
    art, ours = both_outcomes("dev_server_script", SERVER_CASES)
    assert ours["enums"] == art["enums"] and len(art["enums"]["OptimizerNames"]) == 41
    assert (
        ours["aliases"]
        == art["aliases"]
        == {
            "RolloutWeightUpdateMode": ["step_lora", "in_flight_lora"],
            "VllmRuntimeMode": ["managed", "external"],
        }
    )
    assert ours["save_is_interval"] and art["save_is_interval"]
    assert ours["same_alias"] and art["same_alias"]
    assert ours["weight_transfer"] == art["weight_transfer"] == ["backend"]
    configs = zip(SERVER_CASES, art["configs"], ours["configs"], strict=True)
    for case, art_one, our_one in configs:
        if art_one == "ValueError":
            assert our_one == "ValueError", case
            continue
        # the keys both servers agree on are ART's values as they are
        for key in ("lora_modules", "return_tokens_as_token_ids", "enable_auto_tool_choice"):
            assert our_one["server_args"][key] == art_one["server_args"][key], case
        assert our_one == expected_from_arts(art_one, case), case
    assert sum(c == "ValueError" for c in art["configs"]) == 2
    assert art["configs"][1]["server_args"]["lora_modules"] == [
        '{"name": "agent@3", "path": "/runs/agent/checkpoints/0003"}'
    ]
