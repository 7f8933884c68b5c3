"""ART 0.5.23's pipeline-RL metric catalogue (`art.metrics.PIPELINE_RL_METRIC_DEFINITIONS` and
the dashboard and score tuples built from it) beside arthex's under `arthex.art`: arthex's is
ART's, in ART's order, kept to the keys arthex writes (tests/e2e/test_pipeline_backends.py
reads each one back from a LocalBackend pipeline run's history), each with ART's title, kind,
unit, direction and flags; only the descriptions are arthex's own words for its measures."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .art_env import art_environment, art_python, checkout_pyroot

pytestmark = pytest.mark.interop

SCRIPT = """
import importlib, json, sys
metrics = importlib.import_module(sys.argv[1] + ".metrics")
top = importlib.import_module(sys.argv[1])
print(json.dumps({
    "definitions": [d.model_dump() for d in metrics.PIPELINE_RL_METRIC_DEFINITIONS],
    "dashboard": list(metrics.PIPELINE_RL_DASHBOARD_DEFAULT_METRICS),
    "score": list(metrics.PIPELINE_RL_SCORE_METRICS),
    "same_at_top": top.PIPELINE_RL_METRIC_DEFINITIONS is metrics.PIPELINE_RL_METRIC_DEFINITIONS,
}))
"""
# ART's keys that no arthex run writes: its Megatron packer's token accounting and the rates
# over it, vLLM's scheduler gauges, its autotuner's score and queue forecasts
NOT_WRITTEN = {
    "objective/score",
    "sample_efficiency/freshness_discount",
    "sample_efficiency/batch_factor",
    "data/step_trainable_assistant_tokens",  # arthex writes it for SFT steps only
    "data/step_nonpadding_logical_tokens",
    "data/step_loss_bearing_tokens",
    "data/step_executed_token_equivalents",
    "data/step_nominal_schedule_capacity_tokens",
    "data/step_dummy_executed_token_equivalents",
    "data/step_dummy_schedule_capacity_tokens",
    "data/step_unused_packed_capacity_tokens",
    "data/step_unused_and_dummy_ratio",
    "throughput/train_nonpadding_logical_tok_per_s",
    "throughput/train_loss_bearing_tok_per_s",
    "throughput/train_executed_tok_equiv_per_s",
    "throughput/train_nominal_capacity_tok_per_s",
    "queue/freshness_pressure",
    "queue/predicted_stale_fraction",
}


def catalogue(lib: str, tmp: Path) -> dict[str, Any]:
    env = art_environment()
    if lib != "art":
        env["PYTHONPATH"] = str(checkout_pyroot(tmp))
    done = subprocess.run(
        [str(art_python()), "-c", SCRIPT, lib],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_arthexs_catalogue_is_arts_kept_to_the_keys_arthex_writes(tmp_path: Path) -> None:
    art, ours = catalogue("art", tmp_path), catalogue("arthex.art", tmp_path)
    kept = [
        d
        for d in art["definitions"]
        if d["key"] not in NOT_WRITTEN and not d["key"].startswith("vllm/")
    ]
    assert [d["key"] for d in ours["definitions"]] == [d["key"] for d in kept]
    for theirs, mine in zip(kept, ours["definitions"], strict=True):
        assert {**mine, "description": None} == {**theirs, "description": None}
        assert mine["description"]
    keys = {d["key"] for d in kept}
    assert ours["dashboard"] == [key for key in art["dashboard"] if key in keys]
    assert ours["score"] == [key for key in art["score"] if key in keys]
    assert ours["same_at_top"] and art["same_at_top"]
    assert ours["dashboard"] and ours["score"]
