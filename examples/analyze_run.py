# %% [markdown]
# # Analysing a run
#
# A notebook-style script (each `# %%` is a cell in VS Code, Jupyter via jupytext, or
# PyCharm): load a run with arthex's loaders, summarise it with polars, plot it with
# matplotlib.
#
#     python examples/analyze_run.py                       # the newest run under .art
#     python examples/analyze_run.py .art/demo/models/digits-...  --out-dir /tmp/analysis
#
# It writes the figure (analysis.png) and, next to it, the numbers behind it (analysis.json)
# into the run's own directory, or into `--out-dir`; never into the current directory.

# %%
from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib.pyplot as plt
import polars as pl
from matplotlib.ticker import MaxNLocator

import arthex


def newest_model(base_path: Path = Path(".art")) -> Path:
    """The model directory under `base_path` whose history changed last."""
    candidates = [p for p in base_path.glob("*/models/*") if (p / "history.jsonl").is_file()]
    if not candidates:
        raise SystemExit(f"no runs under {base_path}: train one first (e.g. `arthex demo`)")
    return max(candidates, key=lambda p: (p / "history.jsonl").stat().st_mtime)


parser = argparse.ArgumentParser(description="Summarise and plot one arthex run.")
parser.add_argument("model_dir", nargs="?", type=Path, default=None)
parser.add_argument(
    "--out-dir",
    type=Path,
    default=None,
    help="Where to write analysis.png and analysis.json "
    "(created if missing). Default: the run's directory.",
)
args, _unknown = parser.parse_known_args()  # tolerate a notebook kernel's own arguments
model_dir: Path = args.model_dir or newest_model()
out_dir: Path = args.out_dir or model_dir
out_dir.mkdir(parents=True, exist_ok=True)
figure_file = out_dir / "analysis.png"
print(f"run: {model_dir.parent.parent.name}/{model_dir.name}  ({model_dir})")

# %% [markdown]
# ## The history: one row per logged batch
#
# `load_history` reads every row, whatever keys it has; rows at the same step (a train
# batch, an evaluation, the training metrics) stay separate, so average them per step.

# %%
history = arthex.load_history(model_dir)
per_step = (
    history.drop("recorded_at").group_by("step").mean().sort("step")  # nulls are skipped
)
wanted = [c for c in ("train/reward", "val/reward", "loss/train") if c in per_step.columns]
print(per_step.select("step", *wanted))

# %% [markdown]
# ## Trajectories: every parquet part as one LazyFrame
#
# Nothing is read until `collect()`, and then only the columns used. Rows of a group whose
# rollouts all failed have no trajectory: filter them out.

# %%
trajectories = arthex.load_trajectories(model_dir).filter(pl.col("trajectory_index").is_not_null())
rewards = (
    trajectories.group_by("split", "step")
    .agg(
        pl.col("reward").mean().alias("mean"),
        pl.col("reward").quantile(0.1).alias("p10"),
        pl.col("reward").quantile(0.9).alias("p90"),
        pl.len().alias("n"),
    )
    .sort("split", "step")
    .collect()
)
print(rewards)

# %% [markdown]
# ## What the model said
#
# The `messages` column is the conversation as a list of structs; the model's own turns
# (its Choices, the ones training uses) have `trainable = true`.

# %%
turns = (
    trajectories.select("split", "step", "reward", "messages")
    .explode("messages")
    .unnest("messages")
    .filter(pl.col("trainable"))
    .with_columns(
        pl.col("content").fill_null("").str.len_chars().alias("reply_chars"),
    )
    .collect()
)
replies = turns.group_by("split", "step").agg(pl.col("reply_chars").mean()).sort("split", "step")
# Per trajectory: did any of the model's turns call a tool?
called = trajectories.select(
    "split",
    pl.col("messages")
    .list.eval(
        pl.element().struct.field("trainable")
        & pl.element().struct.field("tool_calls").is_not_null()
    )
    .list.any()
    .alias("called_tool"),
)
tool_call_rate = {
    split: float(rate)
    for split, rate in called.group_by("split").agg(pl.col("called_tool").mean()).collect().rows()
}
print(f"tool-call rate by split: {tool_call_rate}")
print("best-scored reply:", turns.sort("reward", descending=True)["content"].head(1).to_list())

# %% [markdown]
# ## Plot: reward (mean with a p10-p90 band), reply length, loss

# %%
figure, (ax_reward, ax_chars, ax_loss) = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
for split, frame in rewards.partition_by("split", as_dict=True).items():
    name = str(split[0])
    ax_reward.plot(frame["step"], frame["mean"], marker="o", label=name)
    ax_reward.fill_between(frame["step"], frame["p10"], frame["p90"], alpha=0.2)
for split, frame in replies.partition_by("split", as_dict=True).items():
    ax_chars.plot(frame["step"], frame["reply_chars"], marker="o", label=str(split[0]))
if "loss/train" in per_step.columns:
    loss = per_step.select("step", "loss/train").drop_nulls()
    ax_loss.plot(loss["step"], loss["loss/train"], marker="o", color="C3", label="loss/train")
ax_reward.set_ylabel("reward")
ax_chars.set_ylabel("reply characters")
ax_loss.set_ylabel("loss")
ax_loss.set_xlabel("step")
for ax in (ax_reward, ax_chars, ax_loss):
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
figure.suptitle(f"{model_dir.parent.parent.name}/{model_dir.name}")
figure.tight_layout()
figure.savefig(figure_file, dpi=100)
plt.close(figure)

summary = {
    "model_dir": str(model_dir),
    "rewards": rewards.to_dicts(),
    "tool_call_rate": tool_call_rate,
    "reply_chars": replies.to_dicts(),
}
figure_file.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n")
print(f"wrote {figure_file} and {figure_file.with_suffix('.json')}")
