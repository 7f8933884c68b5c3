"""The `arthex` command.

Commands that look at a run take the model the same way: a model directory
(`arthex plot .art/demo/models/digits-1`), `PROJECT/NAME` under `--base-path`
(`arthex plot demo/digits-1`), `--project P --name N`, or nothing, which picks the most
recently updated model under `--base-path` (prune refuses to guess). A wrong path, a model
without history and similar mistakes end with one line on stderr and exit code 2.

polars, matplotlib and rich are imported inside the commands, so `arthex --help` is instant.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import secrets
import shutil
import sys
from collections.abc import Iterator, Mapping, Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypedDict

import typer

from ...core.errors import ArthexError, InvalidInputError
from ...core.identity import validate_name

if TYPE_CHECKING:
    import polars as pl
    from rich.console import Console

    from ...core.trajectories import Trajectory, TrajectoryGroup

app = typer.Typer(
    help="arthex: train LLM agents with RL from their own rollouts.",
    no_args_is_help=True,
    add_completion=False,
)


@app.command()
def demo(
    base_path: Path = typer.Option(Path(".art"), help="Where runs are written."),
    steps: int | None = typer.Option(None, help="Training steps (default: the demo's own)."),
    seed: int = typer.Option(0, help="Random seed."),
    pipeline: bool = typer.Option(
        False, "--pipeline", help="Sample the next steps' rollouts while a step trains."
    ),
    sft: bool = typer.Option(
        False,
        "--sft",
        help="The whole life instead: SFT warm start, a few RL steps (--steps), export, and a "
        "load of the export with plain transformers.",
    ),
) -> None:
    """Train the tiny local model with RL on CPU and show its reward improve."""
    from ..demo import SFT_RL_STEPS, run_demo, run_sft_demo

    if sft and pipeline:
        _fail("--sft and --pipeline are two different demos; pass one of them")
    if sft:
        rl_steps = SFT_RL_STEPS if steps is None else steps
        asyncio.run(run_sft_demo(base_path=str(base_path), seed=seed, rl_steps=rl_steps))
        return
    kwargs: dict[str, Any] = {} if steps is None else {"steps": steps}
    asyncio.run(  # prints its summary
        run_demo(base_path=str(base_path), seed=seed, pipeline=pipeline, **kwargs)
    )


@app.command()
def version() -> None:
    """Print the installed version."""
    from ... import __version__

    typer.echo(__version__)


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def serve(ctx: typer.Context) -> None:
    """Serve a training backend over HTTP, for ServerlessBackend clients.

    `arthex serve --help` lists the server's own options."""
    try:
        from ..server.main import main as serve_main
    except ImportError as error:
        _fail(f'the training server needs its extra: pip install "arthex[server]" ({error})')
    serve_main(list(ctx.args))


# --- addressing a model ---------------------------------------------------------------------

MODEL_ARG = typer.Argument(
    None,
    metavar="MODEL",
    help="A model directory, or PROJECT/NAME under --base-path. "
    "Default: the most recently updated model under --base-path.",
    show_default=False,
)
BASE_PATH_OPT = typer.Option(Path(".art"), "--base-path", help="Where runs live.")
PROJECT_OPT = typer.Option(None, "--project", help="The model's project (with --name).")
NAME_OPT = typer.Option(None, "--name", help="The model's name (with --project).")
_MARKERS = ("history.jsonl", "model.json", "trajectories", "checkpoints")
_TEMP_PREFIX = ".tmp-"  # arthex's writers publish by renaming from this prefix
_CHECKPOINT_STATE = "trainer_state.json"  # the LocalBackend's completeness marker
_ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")  # or ART's adapter


class UsageError(ArthexError):
    """A mistake on the command line: reported as one line, exit code 2."""


def _fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"arthex: error: {message}", err=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def _one_line_errors() -> Iterator[None]:
    """Input mistakes exit 2, damaged files and other arthex errors exit 1; both as one line
    that names the thing, instead of a traceback."""
    try:
        yield
    except (UsageError, InvalidInputError) as error:
        _fail(_first_line(error))
    except ArthexError as error:
        _fail(_first_line(error), code=1)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _is_model_dir(path: Path) -> bool:
    return path.is_dir() and any((path / marker).exists() for marker in _MARKERS)


def list_models(base_path: Path) -> list[Path]:
    """Every model directory `{base_path}/{project}/models/{name}`, sorted by project, name."""
    if not base_path.is_dir():
        return []
    return sorted(p for p in base_path.glob("*/models/*") if _is_model_dir(p))


def _updated_at(model: Path) -> float:
    times = [(model / marker).stat().st_mtime for marker in _MARKERS if (model / marker).exists()]
    return max(times, default=model.stat().st_mtime)


def resolve_model(
    model: str | None,
    base_path: Path,
    project: str | None,
    name: str | None,
    *,
    guess: bool = True,
) -> Path:
    """The model directory the command line names; UsageError with what to do otherwise."""
    if (project is None) != (name is None):
        raise UsageError("pass both --project and --name, or neither")
    if project is not None and name is not None:
        if model is not None:
            raise UsageError("pass either MODEL or --project/--name, not both")
        path = base_path / validate_name(project, "project") / "models" / validate_name(name)
        if not _is_model_dir(path):
            raise UsageError(f"no model {project}/{name} under {base_path} ({path} not found)")
        return path
    if model is not None:
        path = Path(model)
        if path.is_dir():
            if not _is_model_dir(path):
                below = [str(p.relative_to(path)) for p in list_models(path)]
                hint = f"; models below it: {', '.join(below[:5])}" if below else ""
                raise UsageError(
                    f"{model} is not a model directory (no history.jsonl, model.json, "
                    f"trajectories/ or checkpoints/){hint}"
                )
            return path
        parts = model.split("/")
        if len(parts) == 2 and all(parts):
            candidate = base_path / parts[0] / "models" / parts[1]
            if _is_model_dir(candidate):
                return candidate
        raise UsageError(
            f"no model directory {model!r}; pass a path like "
            f"{base_path}/PROJECT/models/NAME or PROJECT/NAME under --base-path"
        )
    found = list_models(base_path)
    if not found:
        raise UsageError(
            f"no models under {base_path}; train one (e.g. `arthex demo`) or pass a model directory"
        )
    if len(found) == 1:
        return found[0]
    if not guess:
        names = ", ".join(_label(p) for p in found[:5]) + (", ..." if len(found) > 5 else "")
        raise UsageError(f"{len(found)} models under {base_path} ({names}): name one")
    chosen = max(found, key=_updated_at)
    typer.echo(
        f"using {_label(chosen)}, the most recently updated of {len(found)} models under "
        f"{base_path} (pass MODEL to choose)",
        err=True,
    )
    return chosen


def _label(model: Path) -> str:
    """`project/name` of a model directory in the standard layout, else its path."""
    if model.parent.name == "models":
        return f"{model.parent.parent.name}/{model.name}"
    return str(model)


def _console() -> Console:
    from rich.console import Console

    # Piped output has no width; a wide virtual one keeps tables whole instead of eliding.
    wide = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    # markup=False: paths, keys and model output are printed as they are, never as markup.
    return Console(highlight=False, markup=False, width=240 if wide else None, soft_wrap=False)


def _fmt(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return f"{value:.4g}"
    return str(value)


def _local_time(value: Any, layout: str = "%Y-%m-%d %H:%M:%S") -> str:
    """A recorded time (UTC) as this machine's wall-clock time, as ART users read it."""
    return str(value.astimezone().strftime(layout))


def _load_history_or_fail(path: Path) -> pl.DataFrame:
    from ..loaders import load_history

    history = load_history(path)
    if history.height == 0:
        raise UsageError(f"model {_label(path)} has no history yet ({path / 'history.jsonl'})")
    return history


def _metric_keys(history: pl.DataFrame) -> list[str]:
    return [key for key in history.columns if key not in ("step", "recorded_at")]


# --- history --------------------------------------------------------------------------------

DEFAULT_HISTORY_KEYS = (
    "*/reward",
    "*/reward_std_dev",
    "*/exception_rate",
    "loss/train",
    "loss/grad_norm",
)


def choose_keys(available: Sequence[str], patterns: Sequence[str]) -> list[str]:
    """Keys matching the patterns (exact names or shell globs such as `val/*`), in the
    patterns' order; UsageError naming a pattern that matches nothing."""
    chosen: list[str] = []
    for pattern in patterns:
        matched = [key for key in available if fnmatchcase(key, pattern)]
        if not matched:
            close = [key for key in available if pattern.split("/")[-1] in key][:6]
            hint = f" (similar: {', '.join(close)})" if close else ""
            raise UsageError(f"no history key matches {pattern!r}{hint}; see --keys '*'")
        chosen.extend(key for key in matched if key not in chosen)
    return chosen


def _split_patterns(keys: Sequence[str] | None) -> list[str]:
    return [part.strip() for item in keys or () for part in item.split(",") if part.strip()]


@app.command()
def history(
    model: str | None = MODEL_ARG,
    base_path: Path = BASE_PATH_OPT,
    project: str | None = PROJECT_OPT,
    name: str | None = NAME_OPT,
    last: int = typer.Option(20, "--last", "-n", min=1, help="How many rows to show."),
    keys: list[str] | None = typer.Option(
        None,
        "--keys",
        "-k",
        help="Columns to show: names or globs (`val/*`), comma-separated or repeated. "
        "`recorded_at` is a key too. Default: rewards, std devs, exception rates, losses.",
    ),
    output: str = typer.Option("table", "--format", help="table, csv or json (JSON lines)."),
) -> None:
    """Show the last rows of a model's history as a table.

    Rows that have none of the chosen keys are skipped."""
    import polars as pl

    with _one_line_errors():
        if output not in ("table", "csv", "json"):
            raise UsageError(f"--format must be table, csv or json, got {output!r}")
        path = resolve_model(model, base_path, project, name)
        frame = _load_history_or_fail(path)
        available = [*_metric_keys(frame), "recorded_at"]
        patterns = _split_patterns(keys)
        if patterns:
            chosen = choose_keys(available, patterns)
        else:
            chosen = [k for k in available if any(fnmatchcase(k, p) for p in DEFAULT_HISTORY_KEYS)]
            chosen = chosen or _metric_keys(frame)[:6]
        metrics = [k for k in chosen if k != "recorded_at"]
        if metrics:
            frame = frame.filter(pl.any_horizontal(pl.col(metrics).is_not_null()))
        total = frame.height
        shown = frame.select(["step", *chosen]).tail(last)
    if output == "csv":
        typer.echo(shown.write_csv(), nl=False)
        return
    if output == "json":
        typer.echo(shown.write_ndjson(), nl=False)
        return
    from rich.table import Table

    console = _console()
    console.print(f"{_label(path)}: the last {shown.height} of {total} rows")
    table = Table()
    table.add_column("step", justify="right")
    for key in chosen:
        table.add_column(key, justify="left" if key == "recorded_at" else "right")
    for row in shown.iter_rows(named=True):
        cells = [str(row["step"])]
        for key in chosen:
            value = row[key]
            cells.append(_local_time(value) if key == "recorded_at" else _fmt(value))
        table.add_row(*cells)
    console.print(table)


# --- plot -----------------------------------------------------------------------------------

PANELS = ("reward", "reward_std_dev", "loss")


class Line(TypedDict):
    """One plotted line: the history key, and its per-step means."""

    key: str
    step: list[int]
    value: list[float]


Series = dict[str, dict[str, Line]]


def step_means(history: pl.DataFrame, key: str) -> tuple[list[int], list[float]]:
    """Per-step mean of `key` over the rows that logged it (nulls skipped), by step: the same
    reduction the retention and learning-rate policies use."""
    import polars as pl

    if key not in history.columns:
        return [], []
    means = (
        history.select("step", key)
        .drop_nulls(key)
        .group_by("step")
        .agg(pl.col(key).mean())
        .sort("step")
    )
    return means["step"].to_list(), means[key].to_list()


def plot_series(history: pl.DataFrame) -> Series:
    """What `arthex plot` draws: panel -> line -> {"key", "step", "value"}.

    `reward` and `reward_std_dev` get one line per split (`train/reward`, `val/reward`, ...);
    `loss` gets `loss/train`. Lines with no value are left out.
    """
    series: Series = {panel: {} for panel in PANELS}
    for key in _metric_keys(history):
        split, _, metric = key.partition("/")
        panel = metric if metric in ("reward", "reward_std_dev") else None
        if key == "loss/train":
            panel, split = "loss", "train"
        if panel is None:
            continue
        steps, values = step_means(history, key)
        if steps:
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
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(width / dpi, height / dpi), dpi=dpi, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(len(PANELS), 1, sharex=True)
    labels = {"reward": "reward", "reward_std_dev": "reward std dev", "loss": "loss"}
    splits = sorted({split for lines in series.values() for split in lines})
    colors = {split: f"C{i % 10}" for i, split in enumerate(splits)}  # one colour per split
    for ax, panel in zip(axes, PANELS, strict=True):
        lines = series.get(panel, {})
        for split, line in sorted(lines.items()):
            ax.plot(
                line["step"],
                line["value"],
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
    axes[-1].set_xlabel("step")
    figure.suptitle(title)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=dpi, format="png")


@app.command()
def plot(
    model: str | None = MODEL_ARG,
    base_path: Path = BASE_PATH_OPT,
    project: str | None = PROJECT_OPT,
    name: str | None = NAME_OPT,
    out: Path | None = typer.Option(
        None, "--out", "-o", help="The PNG to write. Default: ./{project}_{name}.png"
    ),
    data: Path | None = typer.Option(
        None, "--data", help="Also write the plotted series (per-step means) as JSON here."
    ),
    width: int = typer.Option(1200, min=200, help="Width in pixels."),
    height: int = typer.Option(900, min=200, help="Height in pixels."),
    dpi: int = typer.Option(100, min=10, help="Dots per inch."),
) -> None:
    """Plot reward, reward std dev and loss against step, one line per split, to a PNG."""
    with _one_line_errors():
        path = resolve_model(model, base_path, project, name)
        series = plot_series(_load_history_or_fail(path))
        if not any(series.values()):
            raise UsageError(
                f"model {_label(path)} has logged no */reward, */reward_std_dev or loss/train "
                "yet: nothing to plot"
            )
        target = out if out is not None else Path(f"{_label(path).replace('/', '_')}.png")
        render_plot(series, target, title=_label(path), width=width, height=height, dpi=dpi)
        if data is not None:
            data.parent.mkdir(parents=True, exist_ok=True)
            data.write_text(json.dumps(series, indent=1) + "\n")
    typer.echo(f"wrote {target}")


# --- trajectories ---------------------------------------------------------------------------


@app.command()
def trajectories(
    model: str | None = MODEL_ARG,
    base_path: Path = BASE_PATH_OPT,
    project: str | None = PROJECT_OPT,
    name: str | None = NAME_OPT,
    split: str | None = typer.Option(None, help="Default: train if logged, else the first."),
    step: int | None = typer.Option(None, min=0, help="Default: the split's latest step."),
    group: int | None = typer.Option(None, min=0, help="Show only this group (0-based)."),
    max_chars: int = typer.Option(500, min=20, help="Cut each message after this many characters."),
) -> None:
    """Print the trajectories of one split and step, trainable turns marked.

    Shows each group's rewards, each trajectory's messages and tool calls, and marks the
    model's own turns (its Choices, the tokens training uses) as trainable."""
    from ..loaders import list_parts

    with _one_line_errors():
        path = resolve_model(model, base_path, project, name)
        parts = list_parts(path)
        splits = sorted({s for s, _, _, _ in parts})
        if not splits:
            raise UsageError(f"model {_label(path)} has no trajectories ({path / 'trajectories'})")
        if split is None:
            split = "train" if "train" in splits else splits[0]
        if split not in splits:
            raise UsageError(f"no trajectories for split {split!r}; logged splits: {splits}")
        steps = sorted({st for s, st, _, _ in parts if s == split})
        chosen_step = steps[-1] if step is None else step
        if chosen_step not in steps:
            raise UsageError(
                f"no {split!r} trajectories at step {chosen_step}; logged steps: "
                f"{_abbreviate(steps)}"
            )
        from ...adapters.parquet.store import read_part

        loaded = [
            (part, read_part(file))
            for s, st, part, file in parts
            if s == split and st == chosen_step
        ]
    console = _console()
    from rich.text import Text

    total = sum(len(groups) for _, groups in loaded)
    console.print(
        Text(f"{_label(path)}  split={split}  step={chosen_step}  groups={total}", style="bold")
    )
    index = 0
    for part, groups in loaded:
        if len(loaded) > 1:
            console.print(Text(f"== part {part}", style="bold"))
        for grp in groups:
            if group is None or group == index:
                _print_group(console, index, grp, max_chars)
            index += 1
    if group is not None and group >= index:
        _fail(f"there are {index} groups at {split} step {chosen_step}; --group {group} is not one")


def _abbreviate(steps: Sequence[int]) -> str:
    if len(steps) <= 12:
        return ", ".join(map(str, steps))
    return f"{', '.join(map(str, steps[:5]))}, ..., {', '.join(map(str, steps[-5:]))}"


def _print_group(console: Console, index: int, group: TrajectoryGroup, max_chars: int) -> None:
    from rich.text import Text

    rewards = [t.reward for t in group.trajectories]
    noun = "trajectory" if len(rewards) == 1 else "trajectories"
    header = Text(f"-- group {index}: {len(rewards)} {noun}", style="bold cyan")
    if rewards:
        header.append(f", rewards {', '.join(f'{r:.3g}' for r in rewards)}")
    if group.exceptions:
        header.append(f", {len(group.exceptions)} failed", style="red")
    console.print(header)
    for key, value in {**group.metadata, **group.metrics}.items():
        console.print(Text(f"   {key} = {value}", style="dim"))
    for t, trajectory in enumerate(group.trajectories):
        _print_trajectory(console, t, trajectory, max_chars)
    for error in group.exceptions:
        console.print(Text(f"   x {error.type}: {_cut(error.message, max_chars)}", style="red"))


def _print_trajectory(console: Console, t: int, trajectory: Trajectory, max_chars: int) -> None:
    from rich.text import Text

    line = Text(f"  trajectory {t}  reward={trajectory.reward:.4g}", style="bold")
    if trajectory.metrics:
        line.append("  " + " ".join(f"{k}={_fmt(v)}" for k, v in trajectory.metrics.items()))
    console.print(line)
    if trajectory.tools:
        names = [str((tool.get("function") or tool).get("name", "?")) for tool in trajectory.tools]
        console.print(Text(f"    tools: {', '.join(names)}", style="dim"))
    if trajectory.exchanges:
        _print_captured(console, trajectory, max_chars)
        return
    _print_messages(console, trajectory.messages_and_choices, max_chars, indent="    ")
    for h, extra in enumerate(trajectory.additional_histories):
        console.print(Text(f"    additional history {h}:", style="dim"))
        _print_messages(console, extra.messages_and_choices, max_chars, indent="      ")


def _print_captured(console: Console, trajectory: Trajectory, max_chars: int) -> None:
    """A captured trajectory: its recorded calls, as the conversations they form."""
    from rich.text import Text

    from ...core.capture.conversations import conversations

    calls = len(trajectory.exchanges)
    flag = ", incomplete" if trajectory.incomplete else ""
    console.print(Text(f"    captured: {calls} call{'' if calls == 1 else 's'}{flag}", style="dim"))
    for c, conversation in enumerate(conversations(trajectory)):
        if c:
            console.print(Text(f"    conversation {c}:", style="dim"))
        _print_messages(console, list(conversation.messages), max_chars, indent="    ")


def _print_messages(console: Console, items: Sequence[Any], max_chars: int, *, indent: str) -> None:
    from openai.types.chat.chat_completion import Choice
    from rich.text import Text

    for item in items:
        if isinstance(item, Choice):
            message = item.message
            text = Text(indent)
            text.append("[trainable] ", style="bold green")
            text.append(f"{message.role}: ", style="green")
            text.append(_cut(message.content or "", max_chars))
            console.print(text)
            for call in message.tool_calls or []:
                function = getattr(call, "function", None)
                if function is not None:
                    console.print(
                        Text(
                            f"{indent}  -> {function.name}({_cut(function.arguments, max_chars)})",
                            style="green",
                        )
                    )
            continue
        role = str(item.get("role", "?"))
        if item.get("tool_call_id"):
            role = f"{role}[{item['tool_call_id']}]"
        text = Text(f"{indent}{role}: ", style="blue" if role == "user" else "magenta")
        text.append(_cut(_content_text(item.get("content")), max_chars), style="default")
        console.print(text)
        for call in item.get("tool_calls") or []:
            function = call.get("function") or {}
            console.print(Text(f"{indent}  -> {function.get('name')}({function.get('arguments')})"))


def _content_text(content: object) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(part.get("text", f"<{part.get('type', 'part')}>"))
            for part in content
            if isinstance(part, dict)
        )
    return str(content)


def _cut(text: str, limit: int) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- prune ----------------------------------------------------------------------------------


def checkpoint_folders(path: Path) -> dict[int, Path]:
    """Digit-named folders in `checkpoints/` (LocalBackend layout), by step."""
    root = path / "checkpoints"
    if not root.is_dir():
        return {}
    return {
        int(entry.name): entry
        for entry in sorted(root.iterdir())
        if entry.name.isdigit() and entry.is_dir()
    }


def _latest(folders: Mapping[int, Path]) -> int | None:
    """The newest complete checkpoint (its state file, or ART's LoRA adapter files), as the
    LocalBackend counts."""
    complete = [
        step
        for step, folder in folders.items()
        if (folder / _CHECKPOINT_STATE).is_file()
        or all((folder / name).is_file() for name in _ADAPTER_FILES)
    ]
    return max(complete or folders, default=None)


def disk_use(path: Path) -> int:
    """Bytes of the regular files below `path` (links are not followed)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for file in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, file)).st_size
    return total


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1024 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _delete_folder(folder: Path) -> None:
    """Rename out of the digit namespace first, so a crash mid-delete never leaves a
    half-deleted folder that still looks like a checkpoint (as the LocalBackend deletes)."""
    doomed = folder.with_name(f"{_TEMP_PREFIX}deleted-{folder.name}.{secrets.token_hex(4)}")
    os.rename(folder, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


@app.command()
def export(
    model: str | None = MODEL_ARG,
    out: Path = typer.Option(..., "--out", help="The new (or empty) folder to write."),
    export_format: str = typer.Option(
        "merged",
        "--format",
        help="merged: a Hugging Face model directory; peft: the LoRA adapter directory.",
    ),
    step: int | None = typer.Option(None, "--step", min=0, help="Default: the latest step."),
    dtype: str | None = typer.Option(
        None, help="float32, bfloat16 or float16 for merged weights (default: the base's)."
    ),
    base_path: Path = BASE_PATH_OPT,
    project: str | None = PROJECT_OPT,
    name: str | None = NAME_OPT,
) -> None:
    """Export a step of a LocalBackend run in a standard format.

    The merged folder loads with plain transformers (AutoModelForCausalLM.from_pretrained) and
    holds the base model's tokenizer files, byte for byte, chat template included."""
    with _one_line_errors():
        if export_format not in ("merged", "peft"):
            raise UsageError(f"--format must be merged or peft, got {export_format!r}")
        path = resolve_model(model, base_path, project, name, guess=False)
        try:
            from ...adapters.local.export import export_checkpoint
        except ImportError as error:
            _fail(f'export needs its extra: pip install "arthex[local]" ({error})')
        written = export_checkpoint(
            path,
            out,
            step=step,
            format="peft" if export_format == "peft" else "merged",
            dtype=dtype,
        )
    typer.echo(f"exported {_label(path)} ({export_format}) to {written}")


@app.command()
def prune(
    model: str | None = MODEL_ARG,
    base_path: Path = BASE_PATH_OPT,
    project: str | None = PROJECT_OPT,
    name: str | None = NAME_OPT,
    metric: str = typer.Option("val/reward", help="The metric that picks the best step."),
    direction: str = typer.Option("max", help="max (higher is better) or min (e.g. a loss)."),
    keep_last: int = typer.Option(1, min=1, help="Keep this many most recent steps."),
    pin: list[int] | None = typer.Option(None, "--pin", help="Also keep this step (repeat)."),
    dry_run: bool = typer.Option(
        True, "--dry-run/--yes", help="Only show the decision (default), or delete (--yes)."
    ),
) -> None:
    """Delete the checkpoints a run no longer needs (a dry run unless --yes).

    Keeps the latest step(s), the best step by --metric and pinned steps; nothing is deleted
    when the metric was never logged. Do not prune a run that a live process is serving."""
    from ...core.retention import Direction, best_step, decide

    with _one_line_errors():
        if direction not in ("max", "min"):
            raise UsageError(f"--direction must be max or min, got {direction!r}")
        path = resolve_model(model, base_path, project, name, guess=False)
        folders = checkpoint_folders(path)
        if not folders:
            raise UsageError(
                f"model {_label(path)} has no checkpoints in {path / 'checkpoints'} "
                "(prune works on LocalBackend runs)"
            )
        history = _load_history_or_fail(path)
        steps, values = step_means(history, metric)
        latest = _latest(folders)
        assert latest is not None
        sense: Direction = "max" if direction == "max" else "min"
        decision = decide(
            best_step(dict(zip(steps, values)), sense),
            latest=latest,
            metric=metric,
            direction=sense,
            keep_last=keep_last,
            pinned=set(pin or ()),
        )
        if decision is None:
            logged = ", ".join(k for k in _metric_keys(history) if k.endswith(("reward", "loss")))
            raise UsageError(
                f"{metric!r} was never logged for {_label(path)}, so the best checkpoint is "
                f"unknown: nothing deleted (logged: {logged or 'no rewards or losses'})"
            )
    means = dict(zip(steps, values))
    keep = set(decision.keep) | {latest}
    recent = set(range(latest - keep_last + 1, latest + 1))
    doomed = [step for step in folders if step not in keep]
    sizes = {step: disk_use(folder) for step, folder in folders.items()}
    from rich.table import Table

    console = _console()
    console.print(f"{_label(path)}: {len(folders)} checkpoint(s), latest {latest}")
    table = Table()
    for column, justify in (("step", "right"), (metric, "right"), ("size", "right"), ("", "left")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for step in folders:
        why = [
            reason
            for reason, applies in (
                ("latest", step == latest),
                (f"best {direction}", step == decision.best_step),
                (f"last {keep_last}", keep_last > 1 and step in recent),
                ("pinned", step in set(pin or ())),
            )
            if applies
        ]
        action = "keep (" + ", ".join(why) + ")" if step in keep else "delete"
        table.add_row(str(step), _fmt(means.get(step)), _size(sizes[step]), action)
    console.print(table)
    freed = _size(sum(sizes[s] for s in doomed))
    if not doomed:
        console.print("nothing to delete")
    elif dry_run:
        console.print(
            f"dry run: would delete {len(doomed)} checkpoint(s) ({freed}): "
            f"{_abbreviate(doomed)}; run again with --yes to delete them"
        )
    else:
        for step in doomed:
            _delete_folder(folders[step])
        console.print(f"deleted {len(doomed)} checkpoint(s) ({freed}): {_abbreviate(doomed)}")


# --- runs -----------------------------------------------------------------------------------


@app.command()
def runs(
    base_path: Path = BASE_PATH_OPT,
    metric: str | None = typer.Option(
        None, help="The metric for 'best'. Default: val/reward, else train/reward."
    ),
    direction: str = typer.Option("max", help="max or min."),
) -> None:
    """List the models under --base-path: step, best metric, checkpoints and disk use."""
    with _one_line_errors():
        if direction not in ("max", "min"):
            raise UsageError(f"--direction must be max or min, got {direction!r}")
        if not base_path.is_dir():
            raise UsageError(f"{base_path} is not a directory; pass --base-path where runs live")
        models = list_models(base_path)
        rows = [_run_row(path, metric, direction) for path in models]
    console = _console()
    if not rows:
        console.print(f"no models under {base_path}")
        return
    from rich.table import Table

    console.print(f"{len(rows)} model(s) under {base_path}")
    table = Table()
    for column, justify in (
        ("project", "left"),
        ("name", "left"),
        ("step", "right"),
        ("best", "left"),
        ("checkpoints", "right"),
        ("disk", "right"),
        ("updated", "left"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _run_row(path: Path, metric: str | None, direction: str) -> list[str]:
    from ...core.retention import best_step
    from ..loaders import load_history

    history = load_history(path)
    folders = checkpoint_folders(path)
    latest = _latest(folders)
    if latest is None and history.height:
        latest = int(history["step"].max())  # type: ignore[arg-type]
    candidates = [metric] if metric else ["val/reward", "train/reward"]
    best = ""
    for key in candidates:
        steps, values = step_means(history, key)
        if steps:
            means = dict(zip(steps, values))
            at = best_step(means, "max" if direction == "max" else "min")
            assert at is not None
            best = f"{key} {_fmt(means[at])} @ {at}"
            break
    updated = ""
    if history.height:
        newest: Any = history["recorded_at"].max()
        updated = _local_time(newest, "%Y-%m-%d %H:%M")
    project = path.parent.parent.name if path.parent.name == "models" else ""
    return [
        project,
        path.name,
        "" if latest is None else str(latest),
        best,
        str(len(folders)),
        _size(disk_use(path)),
        updated,
    ]


def main() -> None:
    app()


if __name__ == "__main__":
    main()
