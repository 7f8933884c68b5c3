"""The README's training loop, as written, run twice in one Python process without
`model.close()` or `backend.close()` (a notebook cell run again, or a script's `main()` called
twice): the second run registers (the first model, dropped, gave its run's lease back) and
trains on from the step the first reached. On the LocalBackend and the tiny model, on CPU."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

import polars as pl

import arthex

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
MAIN_GUARD = 'if __name__ == "__main__":'


def readme_loop() -> str:
    """The python program under "## A training loop" (a module whose `main()` trains up to
    `STEPS`, run only as `__main__`: the guard must be there, so a changed README fails here
    loudly)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## A training loop", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, "README.md has no python block under 'A training loop'"
    code = match.group(1)
    assert MAIN_GUARD in code and "STEPS = " in code and "async def main()" in code, code
    return code


def test_the_readme_loop_runs_twice_in_one_process_and_trains_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the README's models log under ./.art
    code = compile(readme_loop(), "README.md", "exec")
    backends: list[Any] = []

    async def main() -> list[int]:
        steps = []
        try:
            for target in (2, 4):
                namespace: dict[str, Any] = {"__name__": "readme"}  # its own module each time
                exec(code, namespace)  # the README's own code
                namespace["STEPS"] = target
                backends.append(namespace["backend"])  # closed at the end, not between runs
                await namespace["main"]()
                steps.append(await namespace["model"].get_step())
        finally:
            for backend in backends:
                await backend.close()
        return steps

    assert asyncio.run(main()) == [2, 4]
    history = arthex.load_history(arthex.Model(name="agent-001", project="support-bot"))
    trained = history.filter(pl.col("train/reward").is_not_null())["step"].to_list()
    assert trained == [0, 1, 2, 3], "the second run went on from step 2, not from 0"
    losses = history.filter(pl.col("loss/train").is_not_null())["step"].to_list()
    assert losses == [1, 2, 3, 4]
