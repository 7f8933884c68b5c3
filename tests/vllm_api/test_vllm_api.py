"""The vLLM engine adapter against a real vLLM (see vllm_env.py; opt-in, no GPU needed): the
engine arguments, SamplingParams, LoRARequest and TokensPrompt are built exactly as the
adapter builds them and validated by vLLM's own classes; vLLM's CompletionOutput and
FlatLogprobs are read through the adapter's conversion; an arthex LoRA step passes vLLM's
PEFT checks. It fails the day vLLM renames something the adapter uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .checks import CHECKS
from .vllm_env import run_checks, vllm_python

SCRIPT = Path(__file__).parent / "checks.py"


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    workdir = tmp_path_factory.mktemp("vllm-api")
    found: dict[str, Any] = run_checks(vllm_python(), SCRIPT, {"workdir": str(workdir)}, workdir)
    return found


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_the_adapter_matches_the_installed_vllm(name: str, results: dict[str, Any]) -> None:
    assert name in results, f"the check {name} did not run"
    outcome = results[name]
    assert outcome["ok"], f"{name} failed in the vLLM venv:\n{outcome['detail']}"
