"""ART's benchmarking charts on a hand-written frame: what each draws, checked on the
matplotlib artists against the frame's values averaged with numpy."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

pytest.importorskip("matplotlib")

from arthex.apps.benchmarking import percentage_comparison_bar_chart, training_progress_chart
from arthex.art.utils.benchmarking.types import BenchmarkModelKey
from arthex.core.errors import InvalidInputError

# (model, split, step, reward): "trained" over 3 steps, two single-step baselines that tie
ROWS = [
    ("trained", "val", 1, 0.2), ("trained", "val", 1, 0.4),
    ("trained", "val", 2, 0.5), ("trained", "val", 2, 0.7), ("trained", "val", 2, 0.6),
    ("trained", "val", 3, 0.9),
    ("trained", "train", 1, 0.0),
    ("gpt", "val", 1, 0.5), ("gpt", "val", 1, 0.7),
    ("claude", "val", 1, 0.6),
]  # fmt: skip
FRAME = pl.DataFrame(ROWS, schema=["model", "split", "step", "metric_reward"], orient="row")


def mean(model: str, step: int, split: str | None = None) -> float:
    return float(np.mean([r for m, s, t, r in ROWS if m == model and t == step
                          and (split is None or s == split)]))  # fmt: skip


def test_the_progress_chart_draws_each_models_mean_per_step() -> None:
    fig = training_progress_chart(FRAME, "reward", perfect_score=1.0, y_label="accuracy")
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    trained = lines["trained"]
    assert list(trained.get_xdata()) == [1, 2, 3]
    assert np.allclose(trained.get_ydata(), [mean("trained", s) for s in (1, 2, 3)])
    # the baselines span the steps; the second one at the same score is dotted
    for name in ("claude", "gpt"):
        assert list(lines[name].get_xdata()) == [1, 3]
        assert np.allclose(lines[name].get_ydata(), [mean(name, 1)] * 2)
    assert mean("claude", 1) == pytest.approx(mean("gpt", 1))
    assert [lines["claude"].get_linestyle(), lines["gpt"].get_linestyle()] == ["--", ":"]
    assert list(lines["_nolegend_"].get_ydata()) == [1.0, 1.0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["trained", "claude", "gpt"]
    assert "Perfect score" in [t.get_text() for t in ax.texts]
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == ("reward", "Step", "accuracy")


def test_the_progress_chart_takes_models_as_given_and_renamed() -> None:
    keys: list[str | BenchmarkModelKey] = [BenchmarkModelKey("trained", "RL", "train"), "gpt"]
    fig = training_progress_chart(FRAME, "metric_reward", models=keys, title="t", x_label="")
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"RL", "gpt"}
    # one step of the train split: a baseline now, drawn across gpt's single step
    assert np.allclose(lines["RL"].get_ydata(), [mean("trained", 1, "train")] * 2)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["RL", "gpt"]
    with pytest.raises(InvalidInputError, match="Column 'metric_score' not found"):
        training_progress_chart(FRAME, "score")
    with pytest.raises(InvalidInputError, match="no rows left to chart"):
        training_progress_chart(FRAME, "reward", models=["nobody"])


def test_the_bar_chart_stacks_the_change_from_the_first_to_the_last_step() -> None:
    fig = percentage_comparison_bar_chart(FRAME, "reward", perfect_score=1.0, num_decimals=1)
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_xticklabels()] == ["trained", "claude", "gpt"]
    heights = [round(bar.get_height(), 9) for bar in ax.patches]
    first, last = mean("trained", 1), mean("trained", 3)
    expected = [first * 100, (last - first) * 100, mean("claude", 1) * 100, mean("gpt", 1) * 100]
    assert np.allclose(heights, expected)
    texts = [t.get_text() for t in ax.texts]
    assert f"RL +{(last - first) * 100:.1f}%" in texts
    assert f"{last * 100:.1f}%" in texts and "Perfect score" in texts
    # values above 1.01 are charted as they are
    scores = FRAME.with_columns(pl.col("metric_reward") * 10)
    ax = percentage_comparison_bar_chart(scores, "reward").axes[0]
    assert np.isclose(ax.patches[0].get_height(), first * 10)
    assert f"{last * 10:.0f}" in [t.get_text() for t in ax.texts]
