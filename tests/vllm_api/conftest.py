"""The vLLM API suite installs a vLLM release, about 9.5 GB, into a cached venv on first use
(with uv: a few minutes); ARTHEX_VLLM_TESTS=0 skips it. Every test here carries the
`vllm_api` marker."""

from __future__ import annotations

from pathlib import Path

import pytest

from .vllm_env import ENABLE, enabled


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    skip = pytest.mark.skip(
        reason=f"{ENABLE}=0 skips the vLLM API suite (unset it to install vLLM in a cached venv)"
    )
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.vllm_api)
            if not enabled():
                item.add_marker(skip)
