"""`arthex plot`: reward, reward std dev and loss against the history's step, as a PNG.

Each point is a per-step mean from the policies' own index (ledger.py). A step at which the
run recorded the event a line measures but no value leaves a gap instead of a straight line
across it: an update that took no gradient step (nothing to train, e.g. all rewards equal in
every group), or a batch whose rollouts all failed (an exception rate, no reward).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TypedDict

import typer

from ...adapters.layout import run_label
from ...core.errors import MissingExtraError
from ...core.training_row import GRADIENT_STEPS_KEY
from .common import (
    BASE_PATH_OPT,
    MODEL_ARG,
    NAME_OPT,
    PROJECT_OPT,
    UsageError,
    one_line_errors,
    resolve_model,
)
from .ledger import Ledger

PANELS = ("reward", "reward_std_dev", "loss")
DEFAULT_FILE = "plot.png"  # in the run directory


class Line(TypedDict):
    """One plotted line: the history key, its steps, and the per-step mean at each (None: a
    gap, the step recorded the event without a value)."""

    key: str
    step: list[int]
    value: list[float | None]


Series = dict[str, dict[str, Line]]


def _line_of(key: str) -> tuple[str, str, str] | None:
    """(panel, split, the key whose presence at a step says this line should have a value)."""
    split, _, metric = key.partition("/")
    if key == "loss/train":
        return "loss", "train", GRADIENT_STEPS_KEY
    if metric in ("reward", "reward_std_dev"):
        return metric, split, f"{split}/exception_rate"
    return None


def plot_series(ledger: Ledger) -> Series:
    """What `arthex plot` draws: panel -> split -> line.

    `reward` and `reward_std_dev` get one line per split (`train/reward`, `val/reward`, ...);
    `loss` gets `loss/train`. Lines with no value are left out.
    """
    series: Series = {panel: {} for panel in PANELS}
    # an update that took no gradient step has no loss to show, whatever its row says
    untrained = ledger.nothing_trained()
    for key in ledger.metric_keys():
        found = _line_of(key)
        if found is None:
            continue
        panel, split, marker = found
        means = ledger.step_means(key)
        if not means:
            continue
        steps = sorted({*means, *ledger.index.step_means(marker)})
        values = [None if s in untrained and panel == "loss" else means.get(s) for s in steps]
        series[panel][split] = Line(key=key, step=steps, value=values)
    return series


def render_plot(
    series: Series,
    out: Path,
    *,
    title: str,
    width: int = 1200,
    height: int = 900,
    dpi: int = 100,
) -> None:
    """Write the series as a PNG of exactly `width` x `height` pixels, without touching
    pyplot's global state (so it is safe inside a notebook with another backend)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError as error:  # matplotlib comes with the `cli` extra
        raise MissingExtraError(error.name or "matplotlib", "cli") from error

    figure = Figure(figsize=(width / dpi, height / dpi), dpi=dpi, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(len(PANELS), 1, sharex=True)
    labels = {"reward": "reward", "reward_std_dev": "reward std dev", "loss": "loss"}
    splits = sorted({split for lines in series.values() for split in lines})
    colors = {split: f"C{i % 10}" for i, split in enumerate(splits)}  # one colour per split
    for ax, panel in zip(axes, PANELS, strict=True):
        lines = series.get(panel, {})
        for split, line in sorted(lines.items()):
            values = [math.nan if v is None else v for v in line["value"]]  # NaN breaks a line
            ax.plot(
                line["step"],
                values,
                marker="o",
                markersize=3,
                color=colors[split],
                label=line["key"],
            )
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(labels[panel])
        ax.grid(True, alpha=0.3)
        if lines:
            ax.legend(loc="best", fontsize="small")
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
    axes[-1].set_xlabel("step (the history's step)")
    figure.suptitle(title)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=dpi, format="png")


def plot(
    model: str | None = MODEL_ARG,
    base_path: Path = BASE_PATH_OPT,
    project: str | None = PROJECT_OPT,
    name: str | None = NAME_OPT,
    out: Path | None = typer.Option(
        None,
        "--out",
        "-o",
        metavar="FILE",
        help=f"The PNG to write. Default: {DEFAULT_FILE} in the model directory.",
        show_default=False,
    ),
    data: Path | None = typer.Option(
        None,
        "--data",
        metavar="FILE",
        help="Also write the plotted series (per-step means, null at a gap) as JSON here.",
    ),
    width: int = typer.Option(1200, min=200, metavar="PIXELS", help="Width in pixels."),
    height: int = typer.Option(900, min=200, metavar="PIXELS", help="Height in pixels."),
    dpi: int = typer.Option(100, min=10, metavar="DPI", help="Dots per inch."),
) -> None:
    """Plot reward, reward std dev and loss against step to a PNG.

    One line per split.

    Prints the path it wrote. A step whose update took no gradient step (nothing to train)
    is a gap in the loss line."""
    with one_line_errors():
        path = resolve_model(model, base_path, project, name)
        series = plot_series(Ledger.required(path))
        if not any(series.values()):
            raise UsageError(
                f"model {run_label(path)} has logged no */reward, */reward_std_dev or loss/train "
                "yet: nothing to plot"
            )
        target = out if out is not None else path / DEFAULT_FILE
        try:
            render_plot(series, target, title=run_label(path), width=width, height=height, dpi=dpi)
            if data is not None:
                data.parent.mkdir(parents=True, exist_ok=True)
                data.write_text(json.dumps(series, indent=1) + "\n")
        except OSError as error:
            raise UsageError(
                f"cannot write {error.filename or target}: {error.strerror}; "
                "pass --out FILE.png somewhere writable"
            ) from error
    typer.echo(f"wrote {target}")
