"""The vLLM API suite is opt-in (ARTHEX_VLLM_TESTS=1): it installs a vLLM release, several GB,
into a cached venv on first use. Every test here carries the `vllm_api` marker."""

from __future__ import annotations

from pathlib import Path

import pytest

from .vllm_env import ENABLE, enabled


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    skip = pytest.mark.skip(
        reason=f"opt-in: set {ENABLE}=1 to install vLLM in a cached venv and run these"
    )
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.vllm_api)
            if not enabled():
                item.add_marker(skip)
