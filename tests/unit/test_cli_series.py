"""What `arthex plot` draws, from ledger rows written out by hand: per-step means (the
policies' reduction), and gaps where a step recorded the event but no value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arthex.adapters.jsonl_history import encode_row
from arthex.apps.cli.ledger import Ledger
from arthex.apps.cli.plot import plot_series, render_plot
from arthex.core.metrics import MetricsRow

ROWS = [
    MetricsRow(0, {"train/reward": 0.2, "train/exception_rate": 0.0}),
    MetricsRow(0, {"train/reward": 0.4, "train/exception_rate": 0.0}),  # a second batch at 0
    MetricsRow(1, {"loss/train": 0.5, "data/step_num_gradient_steps": 2.0}),
    MetricsRow(1, {"train/reward": 0.6, "train/exception_rate": 0.0}),
    # the update from 1 had nothing to train; a fake backend still reports a loss of 0.0
    MetricsRow(2, {"loss/train": 0.0, "data/step_num_gradient_steps": 0.0}),
    MetricsRow(2, {"train/exception_rate": 1.0}),  # every rollout of step 2 failed: no reward
    MetricsRow(3, {"loss/train": 0.25, "data/step_num_gradient_steps": 1.0}),
    MetricsRow(3, {"train/reward": 0.9, "train/exception_rate": 0.0}),
    MetricsRow(4, {"val/reward": 0.7}),  # a split without exception rates: no gap markers
]


def ledger(tmp_path: Path) -> Ledger:
    (tmp_path / "history.jsonl").write_bytes(b"".join(encode_row(row) for row in ROWS))
    return Ledger.of(tmp_path)


def test_lines_are_per_step_means_with_gaps_where_nothing_was_recorded(tmp_path: Path) -> None:
    series = plot_series(ledger(tmp_path))
    reward = series["reward"]["train"]
    assert reward["key"] == "train/reward"
    assert reward["step"] == [0, 1, 2, 3]
    assert reward["value"] == pytest.approx([0.3, 0.6, None, 0.9])  # (0.2 + 0.4) / 2 at 0
    loss = series["loss"]["train"]
    assert loss["step"] == [1, 2, 3] and loss["value"] == [0.5, None, 0.25]
    assert series["reward"]["val"] == {"key": "val/reward", "step": [4], "value": [0.7]}
    assert series["reward_std_dev"] == {}
    assert json.loads(json.dumps(series))["loss"]["train"]["value"][1] is None  # JSON null


def test_a_gap_renders_to_a_png_of_the_asked_size(tmp_path: Path) -> None:
    import matplotlib.image

    out = tmp_path / "deep" / "plot.png"
    render_plot(plot_series(ledger(tmp_path)), out, title="p/n", width=400, height=300)
    assert matplotlib.image.imread(out).shape == (300, 400, 4)
