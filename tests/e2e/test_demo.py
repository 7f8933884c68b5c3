"""The demo really learns: the reward of its last steps is well above its first step's."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

from arthex.apps.demo.life import LifeResult, run_sft_demo
from arthex.apps.demo.rl import DemoResult, run_demo
from arthex.apps.demo.task import digit_share
from arthex.core.metrics import RESERVED_KEYS

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def printed_steps(text: str) -> list[tuple[int, int]]:
    """(step, the step its update made) of every demo line."""
    found = re.findall(r"\] step +(\d+)  reward [0-9.]+  -> step (\d+): ", text)
    return [(int(a), int(b)) for a, b in found]


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The warnings the demo logged. The demo never uses the tinker SDK; a tinker session an
    earlier test of this worker left open logs from the SDK's own thread (its heartbeat) into
    whichever test runs then, so the SDK's records are not the demo's."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and not r.name.startswith("tinker.")
    ]


def test_digit_share_counts_visible_characters() -> None:
    assert digit_share("12 ab") == 0.5
    assert digit_share("   ") == 0.0
    assert digit_share("") == 0.0


def test_demo_improves_the_reward(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    out = io.StringIO()
    with caplog.at_level(logging.WARNING):
        result: DemoResult = asyncio.run(run_demo(str(tmp_path), steps=15, seed=0, stream=out))
    assert warnings_of(caplog) == []  # its replies are cut at 8 tokens by its own choice
    assert len(result.rewards) == 15
    assert result.first_reward < 0.2, "a random model should rarely earn the reward"
    assert result.last3_mean > 2 * result.first_reward
    assert result.last3_mean >= result.first_reward + 0.2, result.rewards
    text = out.getvalue()
    assert "mean of the last three steps (12-14)" in text
    # the real loop left its files: history rows per step, and only the kept checkpoints
    model_dir = Path(result.model_dir)
    rows = [json.loads(line) for line in (model_dir / "history.jsonl").read_text().splitlines()]
    assert {r["step"] for r in rows if "train/reward" in r} == set(range(15))
    # each line names the history's steps: the batch's, then the one its update made
    assert printed_steps(text) == [(step, step + 1) for step in range(15)]
    assert "step   0  reward " in text.splitlines()[0]
    kept = sorted(p.name for p in (model_dir / "checkpoints").iterdir())
    assert "0015" in kept and len(kept) <= 2


def test_demo_through_the_pipeline_improves_the_reward(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = io.StringIO()
    with caplog.at_level(logging.WARNING):
        result = asyncio.run(run_demo(str(tmp_path), steps=12, seed=0, stream=out, pipeline=True))
    assert warnings_of(caplog) == []  # nor is it told to lower its own max_steps_off_policy
    assert len(result.rewards) >= 6, "the stream holds twice the scenarios of 12 steps"
    bars = [line for line in out.getvalue().splitlines() if line.startswith("[")]
    assert bars[-1].startswith("[" + "#" * 20 + "]")  # the progress bar ends at its total
    if len(result.rewards) < 12:  # and says why it ended early
        assert f"done after {len(result.rewards)} of 12 steps" in bars[-1]
    assert result.first_reward < 0.2
    assert max(result.rewards[-3:]) >= result.first_reward + 0.2, result.rewards
    model_dir = Path(result.model_dir)
    record = json.loads((model_dir / "pipeline_state.json").read_text())
    assert record["step"] == len(result.rewards) and record["in_flight"] is None
    rows = [json.loads(line) for line in (model_dir / "history.jsonl").read_text().splitlines()]
    logged = sorted(r["step"] for r in rows if "train/reward" in r)
    assert printed_steps(out.getvalue()) == [(step, step + 1) for step in logged]
    # each update's row carries its discards and its policy age; a stream that ends on
    # discards adds one row of discard counters alone (docs/pipeline.md), and nothing else
    update_rows = [r for r in rows if "discarded/cum/stale_groups" in r]
    ending = [
        r for r in update_rows if all(k.startswith("discarded/") or k in RESERVED_KEYS for k in r)
    ]
    assert len(ending) <= 1 and all(r["step"] == record["step"] for r in ending)
    ages = [r["offpolicy/token_weighted_policy_age_steps"] for r in update_rows if r not in ending]
    assert len(ages) == len(result.rewards) and max(ages) <= 1.0


def test_the_sft_demo_warm_starts_trains_exports_and_loads_without_arthex(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        result: LifeResult = asyncio.run(run_sft_demo(str(tmp_path), rl_steps=2, quiet=True))
    assert warnings_of(caplog) == []
    assert result.base_reward < 0.2, "the random base model rarely answers in digits"
    assert result.sft_reward >= result.base_reward + 0.4, result
    assert result.exported_reply == result.served_reply
    export = Path(result.export_dir)
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"} <= {
        p.name for p in export.iterdir()
    }
    rows = [json.loads(line) for line in (export.parent / "history.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "sft/gradient_step" in r] == [1] * 40
    assert {r["step"] for r in rows if "train/reward" in r} == {1, 2}
