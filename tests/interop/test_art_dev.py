"""`arthex.art.dev` against ART 0.5.23's own `art.dev`: the recording of ART's settings
TypedDicts (tests/unit/data/art_0_5_23_dev_shapes.json, which the unit tests check arthex's
against) is what the wheel holds, and ART's config checks (`validate_dedicated_config`,
`is_dedicated_mode`, `is_external_vllm_mode`) give what arthex's give on the same configs: the
same answer, or both refusing the config (ART with a ValueError, arthex with
InvalidInputError, which is one)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import arthex.art.dev as dev

from .art_env import SCRIPTS, art_environment, art_python

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
