"""docs/environments.md's `<!-- test: envs -->` blocks run, in order, as cells of one
namespace on one event loop (the main suite's test_docs.py runs its plain blocks and skips
these: they need verifiers)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from ..e2e.test_docs import DOCS, marked_blocks, run_cell

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_the_envs_blocks_of_the_environments_page_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = DOCS / "environments.md"
    blocks = [(line, code) for kind, line, code in marked_blocks(page) if kind == "envs"]
    assert len(blocks) >= 2
    monkeypatch.chdir(tmp_path)
    for key in [k for k in os.environ if k.startswith("WANDB_")]:
        monkeypatch.delenv(key)
    namespace: dict[str, Any] = {"__name__": "docs_environments"}
    loop = asyncio.new_event_loop()
    try:
        for line, code in blocks:
            run_cell(code, f"docs/environments.md:{line}", namespace, loop)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
