"""Every `arthex` command as a subprocess, on a run written by the real frontend.

The run: `proj/agent`, a TrainableModel trained three steps by the InMemoryBackend with val
evaluations at each step, plus checkpoint folders in the LocalBackend layout; and
`other/evals`, a Model that logged one test metric. Outputs are checked against the files.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import pytest

import arthex
from arthex.adapters.parquet.store import ParquetTrajectoryStore
from arthex.core.identity import RunRef
from arthex.testing.builders import make_choice, make_exception, make_trajectory, synthetic_groups
from arthex.testing.fakes.backend import InMemoryBackend

pytestmark = pytest.mark.e2e

VAL_REWARDS = [0.2, 0.9, 0.4, 0.5]  # step 1 is the best, step 3 the latest
CHECKPOINT_BYTES = 1000


def tool_group(step: int) -> arthex.TrajectoryGroup:
    """Two rollouts that call a tool, then answer; one that failed."""
    trajectories = []
    for i, reward in enumerate((VAL_REWARDS[step] - 0.05, VAL_REWARDS[step] + 0.05)):
        call = make_choice(
            None, tool_calls=[{"name": "get_weather", "arguments": f'{{"city": "city-{i}"}}'}]
        )
        trajectories.append(
            make_trajectory(
                reward,
                messages=[
                    {"role": "user", "content": f"Weather at step {step}?"},
                    call,
                    {"role": "tool", "tool_call_id": "call_0", "content": "sunny"},
                    make_choice(f"It is sunny ({i})."),
                ],
                metrics={"called_tool": True},
            )
        )
    return arthex.TrajectoryGroup([*trajectories, make_exception("rollout timed out")])


async def build_runs(base: Path) -> None:
    model = arthex.TrainableModel(
        name="agent", project="proj", base_model="tiny", base_path=str(base), report_metrics=[]
    )
    evals = arthex.Model(name="evals", project="other", base_path=str(base), report_metrics=[])
    await evals.log(metrics={"accuracy": 0.5}, split="test")
    await model.register(InMemoryBackend())
    for step in range(len(VAL_REWARDS)):
        await model.log([tool_group(step)], split="val")
        if step < 3:
            await model.train(
                synthetic_groups(offset=step), config=arthex.TrainConfig(learning_rate=1e-2)
            )
    model_dir = base / "proj" / "models" / "agent"
    for step in range(4):  # the LocalBackend's layout: a state file marks a complete one
        folder = model_dir / "checkpoints" / f"{step:04d}"
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text(json.dumps({"step": step}))
        (folder / "model.safetensors").write_bytes(b"\0" * CHECKPOINT_BYTES)
    idle = arthex.TrainableModel(
        name="idle", project="other", base_model="tiny", base_path=str(base), report_metrics=[]
    )
    await idle.register(InMemoryBackend())  # writes model.json only: a model without history
    # proj/agent is the most recently updated: set it clearly apart, since a coarse file-system
    # clock can give files written a moment apart the same mtime
    later = time.time() + 60
    os.utime(model_dir / "history.jsonl", (later, later))


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli") / ".art"
    asyncio.run(build_runs(root))
    return root


def env() -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "COLUMNS"))}
    return {**clean, "PYTHONIOENCODING": "utf-8"}


def arthex_many(
    *commands: Sequence[str], cwd: Path | None = None, timeout: float = 120
) -> list[subprocess.CompletedProcess[str]]:
    """Run `python -m arthex.apps.cli ...` once per command, concurrently (each pays its
    imports)."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "arthex.apps.cli", *command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            env=env(),
        )
        for command in commands
    ]
    results = []
    for proc, command in zip(procs, commands, strict=True):
        out, err = proc.communicate(timeout=timeout)
        results.append(subprocess.CompletedProcess(list(command), proc.returncode, out, err))
    return results


def arthex_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return arthex_many(args, cwd=cwd)[0]


def table_rows(text: str) -> list[list[str]]:
    """The body rows of a rich table, as stripped cells."""
    return [
        [cell.strip() for cell in line.strip().strip("│").split("│")]
        for line in text.splitlines()
        if line.startswith("│")
    ]


def history_rows(base: Path) -> list[dict[str, object]]:
    """history.jsonl read with nothing but json, to check the CLI against."""
    path = base / "proj" / "models" / "agent" / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def step_means(rows: list[dict[str, object]], key: str) -> dict[int, float]:
    values: dict[int, list[float]] = defaultdict(list)
    for row in rows:
        value = row.get(key)
        if isinstance(value, int | float):
            step = row["step"]
            assert isinstance(step, int)
            values[step].append(float(value))
    return {step: sum(v) / len(v) for step, v in sorted(values.items())}


def checkpoints(base: Path) -> list[str]:
    return sorted(p.name for p in (base / "proj" / "models" / "agent" / "checkpoints").iterdir())


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("arthex: error: ")
    for fragment in fragments:
        assert fragment in lines[0]


# --- the commands -----------------------------------------------------------------------------


def test_help_lists_every_command_and_version_and_serve_answer(base: Path) -> None:
    helped, version, flag, served = arthex_many(
        ["--help"], ["version"], ["--version"], ["serve", "-h"]
    )
    assert helped.returncode == 0
    for command in ("demo", "version", "serve", "history", "plot", "trajectories", "prune", "runs"):
        assert command in helped.stdout
    assert version.stdout.strip() == flag.stdout.strip() == arthex.__version__
    assert served.returncode == 0, served.stderr
    assert "Usage: arthex serve [OPTIONS]" in served.stdout and "--backend NAME" in served.stdout


def test_demo_offers_the_pipeline() -> None:
    helped = arthex_cli("demo", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "--pipeline" in helped.stdout


def test_history_shows_the_last_rows_of_the_chosen_keys(base: Path) -> None:
    table, as_json, guessed = arthex_many(
        [
            "history",
            "proj/agent",
            "--base-path",
            str(base),
            "-k",
            "val/reward,loss/train",
            "-n",
            "3",
        ],
        ["history", str(base / "proj" / "models" / "agent"), "--keys", "val/*", "--format", "json"],
        ["history", "--base-path", str(base)],
    )
    assert table.returncode == 0, table.stderr
    per_step: dict[int, dict[str, object]] = {}  # a step's rows are one row (no key twice here)
    for r in history_rows(base):
        per_step.setdefault(int(str(r["step"])), {}).update(r)
    rows = [r for r in per_step.values() if "val/reward" in r or "loss/train" in r][-3:]
    expected = [
        [str(r["step"]), *(f"{r[k]:.4g}" if k in r else "" for k in ("val/reward", "loss/train"))]
        for r in rows
    ]
    assert table_rows(table.stdout) == expected
    assert f"proj/agent: the last 3 of {len(per_step)} steps" in table.stdout
    assert "step" in table.stdout and "val/reward" in table.stdout

    assert as_json.returncode == 0, as_json.stderr
    printed = [json.loads(line) for line in as_json.stdout.splitlines()]
    val_rows = [r for r in history_rows(base) if "val/reward" in r]
    assert [p["val/reward"] for p in printed] == [r["val/reward"] for r in val_rows]
    assert all(
        set(p) == {"step", *(k for k in r if k.startswith("val/"))}
        for p, r in zip(printed, val_rows, strict=True)
    )

    assert guessed.returncode == 0, guessed.stderr
    assert "using proj/agent" in guessed.stderr  # three models; the newest was picked
    assert "train/reward" in guessed.stdout and "loss/train" in guessed.stdout


def test_plot_writes_a_png_of_the_historys_curves(base: Path, tmp_path: Path) -> None:
    import matplotlib.image

    out, data = tmp_path / "run.png", tmp_path / "series.json"
    result = arthex_cli(
        "plot", "--base-path", str(base), "--project", "proj", "--name", "agent",
        "--out", str(out), "--data", str(data), "--width", "800", "--height", "600",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert str(out) in result.stdout
    pixels = matplotlib.image.imread(out)
    assert pixels.shape == (600, 800, 4)
    assert pixels[..., :3].std() > 0.05  # not a blank canvas

    series = json.loads(data.read_text())
    rows = history_rows(base)
    for panel, split, key in [
        ("reward", "val", "val/reward"),
        ("reward", "train", "train/reward"),
        ("reward_std_dev", "val", "val/reward_std_dev"),
        ("reward_std_dev", "train", "train/reward_std_dev"),
        ("loss", "train", "loss/train"),
    ]:
        line = series[panel][split]
        means = step_means(rows, key)
        assert line["key"] == key
        assert line["step"] == list(means)
        assert line["value"] == pytest.approx(list(means.values()))
    assert series["reward"]["val"]["value"] == pytest.approx(VAL_REWARDS)


def test_trajectories_prints_a_split_and_step_with_trainable_turns_marked(base: Path) -> None:
    shown, latest = arthex_many(
        ["trajectories", "proj/agent", "--base-path", str(base), "--split", "val", "--step", "1"],
        ["trajectories", "proj/agent", "--base-path", str(base)],
    )
    assert shown.returncode == 0, shown.stderr
    groups = asyncio.run(ParquetTrajectoryStore(str(base)).read(RunRef("proj", "agent"), "val", 1))
    choices = sum(len(list(t.choices())) for g in groups for t in g.trajectories)
    assert shown.stdout.count("[trainable] assistant:") == choices == 4
    assert "split=val  step=1" in shown.stdout
    assert "reward=0.85 " in shown.stdout and "reward=0.95 " in shown.stdout
    assert 'get_weather({"city": "city-0"})' in shown.stdout
    assert "tool[call_0]: sunny" in shown.stdout
    assert "user: Weather at step 1?" in shown.stdout
    assert "RuntimeError: rollout timed out" in shown.stdout
    assert "called_tool=True" in shown.stdout
    # defaults: the train split, at its latest step (2: the groups of the third train call)
    assert latest.returncode == 0, latest.stderr
    assert "split=train  step=2" in latest.stdout
    assert latest.stdout.count("[trainable]") == 8


def test_prune_is_a_dry_run_until_yes(base: Path, tmp_path: Path) -> None:
    copy = tmp_path / ".art"
    shutil.copytree(base, copy)
    dry = arthex_cli("prune", "proj/agent", "--base-path", str(copy))
    assert dry.returncode == 0, dry.stderr
    assert checkpoints(copy) == ["0000", "0001", "0002", "0003"]
    assert "would delete 2 checkpoint(s)" in dry.stdout and "--yes" in dry.stdout
    actions = {row[0]: row[3] for row in table_rows(dry.stdout)}
    assert actions == {
        "0": "delete",
        "1": "keep (best max)",
        "2": "delete",
        "3": "keep (latest)",
    }

    done = arthex_cli("prune", "proj/agent", "--base-path", str(copy), "--yes")
    assert done.returncode == 0, done.stderr
    assert checkpoints(copy) == ["0001", "0003"]
    assert "deleted 2 checkpoint(s)" in done.stdout

    # by "min", step 1 is no longer wanted; a pin keeps it; the latest always stays
    model_dir = str(copy / "proj" / "models" / "agent")
    by_min = arthex_cli("prune", model_dir, "--direction", "min")
    assert {row[0]: row[3] for row in table_rows(by_min.stdout)} == {
        "1": "delete",
        "3": "keep (latest)",
    }
    pinned = arthex_cli("prune", model_dir, "--direction", "min", "--pin", "1", "--yes")
    assert pinned.returncode == 0, pinned.stderr
    assert "nothing to delete" in pinned.stdout
    assert checkpoints(copy) == ["0001", "0003"]


def test_prune_deletes_nothing_when_the_metric_was_never_logged(base: Path, tmp_path: Path) -> None:
    copy = tmp_path / ".art"
    shutil.copytree(base, copy)
    typo, unnamed = arthex_many(
        ["prune", "proj/agent", "--base-path", str(copy), "--metric", "val/rewrd", "--yes"],
        ["prune", "--base-path", str(copy), "--yes"],
    )
    assert_one_line_error(
        typo,
        "'val/rewrd' was never logged",
        "nothing deleted",
        "pass --metric, one of: ",
        "val/reward",
    )
    assert_one_line_error(unnamed, "3 models under", "name one")
    assert checkpoints(copy) == ["0000", "0001", "0002", "0003"]


def test_runs_lists_every_model_with_step_best_and_disk_use(base: Path) -> None:
    result = arthex_cli("runs", "--base-path", str(base))
    assert result.returncode == 0, result.stderr
    rows = {r[0]: r for r in table_rows(result.stdout)}
    assert set(rows) == {"other/evals", "other/idle", "proj/agent"}
    agent = rows["proj/agent"]
    assert agent[1] == "3"  # the newest checkpoint
    assert agent[2] == "val/reward 0.9 @ 1"
    assert agent[3] == "4"
    size = sum(p.stat().st_size for p in (base / "proj/models/agent").rglob("*") if p.is_file())
    assert agent[4] == f"{size / 1024:.1f} KB"
    assert rows["other/evals"][1] == "0"  # from its history: no checkpoints
    assert rows["other/idle"][1:4] == ["", "", "0"]


def test_mistakes_get_one_line_and_exit_code_2(base: Path, tmp_path: Path) -> None:
    results = arthex_many(
        ["history", str(tmp_path / "nowhere")],
        ["plot", "other/idle", "--base-path", str(base)],
        ["history", "proj/agent", "--base-path", str(base), "--keys", "val/nope"],
        ["trajectories", "proj/agent", "--base-path", str(base), "--split", "test"],
        ["runs", "--base-path", str(tmp_path / "nowhere")],
        ["history", str(base)],
    )
    assert_one_line_error(results[0], "no model directory", "nowhere")
    assert_one_line_error(results[1], "other/idle has no history yet")
    assert_one_line_error(results[2], "no history key matches 'val/nope'")
    assert_one_line_error(results[3], "split 'test'", "logged splits: train, val")
    assert_one_line_error(results[4], "not a directory")
    assert_one_line_error(results[5], "not a model directory", "proj/models/agent")


@pytest.mark.slow
def test_a_newcomer_gets_from_the_demo_to_a_plot_with_no_arguments(tmp_path: Path) -> None:
    """The README's path: `make demo` (here: a three-step demo), then a bare `arthex plot`."""
    import matplotlib.image

    demo = arthex_cli("demo", "--steps", "3", cwd=tmp_path)
    assert demo.returncode == 0, demo.stderr[-2000:]
    plotted, shown = arthex_many(
        ["plot", "--data", "series.json"], ["trajectories", "--max-chars", "20"], cwd=tmp_path
    )
    assert plotted.returncode == 0, plotted.stderr
    (model_dir,) = (tmp_path / ".art" / "demo" / "models").iterdir()
    png = model_dir.relative_to(tmp_path) / "plot.png"  # in the run, not the working directory
    assert plotted.stdout.strip() == f"wrote {png}"
    assert list(tmp_path.glob("*.png")) == []
    assert matplotlib.image.imread(tmp_path / png).shape == (900, 1200, 4)
    series = json.loads((tmp_path / "series.json").read_text())
    # one step convention: the demo's last line and `trajectories` name the same history step
    assert "step   2  reward" in demo.stdout and "step   3  reward" not in demo.stdout
    (footer,) = [line for line in demo.stdout.splitlines() if line.startswith("watch the run")]
    command = footer.removeprefix("watch the run in a browser: ").removesuffix(" view .art")
    assert command == "arthex" or Path(tmp_path / command).samefile(
        Path(sys.executable).parent / "arthex"
    ), footer  # the command that works from here (tests/e2e/test_cli_command_name.py)
    assert "split=train  step=2" in shown.stdout
    rows = [json.loads(line) for line in (model_dir / "history.jsonl").read_text().splitlines()]
    assert series["reward"]["train"]["step"] == [0, 1, 2]
    assert series["reward"]["train"]["value"] == pytest.approx(
        list(step_means(rows, "train/reward").values())
    )
    assert series["loss"]["train"]["step"] == [1, 2, 3]


def test_plot_says_where_it_cannot_write_and_how_to_choose(base: Path, tmp_path: Path) -> None:
    copy = tmp_path / ".art"
    shutil.copytree(base, copy)
    (copy / "proj" / "models" / "agent" / "plot.png").mkdir()  # in the way, even for root
    result = arthex_cli("plot", "proj/agent", "--base-path", str(copy))
    assert_one_line_error(result, "cannot write", "plot.png", "--out")
