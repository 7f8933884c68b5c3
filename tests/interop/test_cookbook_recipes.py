"""tinker-cookbook's own training loops (0.5.8, in its own venv: cookbook_env.py), unmodified,
train the tiny model through `arthex serve --protocol tinker` on loopback: the supervised recipe's
loss falls and the RL recipe's reward rises, as each recipe logs them in its own
`metrics.jsonl`; the checkpoints each recipe records in its `checkpoints.jsonl` are the
server's, listed by the SDK's REST client; and the SFT recipe run again on its log folder
resumes from its last checkpoint and logs the losses of a run that never stopped.

The data is made in memory by the scripts in `cookbook/` with the cookbook's classes (a chat
dataset builder and its renderer for SFT; an Env, group builder and RL dataset for RL), the
model's name is the tiny model's folder (its tokenizer read from there, nothing fetched).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._tinker import TinkerServer, keys_file, start_tinker_server

from .cookbook_env import cookbook_environment, cookbook_python, run_recipe

pytestmark = pytest.mark.slow

KEY = "tml-cookbook-interop"
RECIPE_TIMEOUT_S = 600.0


@pytest.fixture(scope="module")
def cookbook() -> Path:
    return cookbook_python()


@pytest.fixture(scope="module")
def server(tiny: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinkerServer]:
    """`arthex serve --protocol tinker` on the tiny model, one tenant: the server the recipes
    train against (its `url` and the tenant's key are all they are told)."""
    pytest.importorskip("tinker")
    folder = tmp_path_factory.mktemp("cookbook-server")
    running = start_tinker_server(
        folder / "state",
        [tiny],
        keys_file(folder, {"cookbook": KEY}),
        extra_args=["--audit-log", "off"],
    )
    try:
        yield running
    finally:
        running.stop()


def metrics(log_path: Path) -> list[dict[str, Any]]:
    lines = (log_path / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def final_checkpoint(log_path: Path) -> dict[str, Any]:
    lines = (log_path / "checkpoints.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    final: dict[str, Any] = records[-1]
    assert final["name"] == "final", records
    return final


def listed_paths(server: TinkerServer, tinker_path: str) -> set[str]:
    """The checkpoints of `tinker_path`'s training run, as the server lists them to the SDK."""
    import tinker

    run_id = tinker_path.removeprefix("tinker://").split("/", 1)[0]
    rest = tinker.RestClient(base_url=server.url, api_key=KEY)
    listing = rest.list_checkpoints(run_id).result(60)
    return {c.tinker_path for c in listing.checkpoints}


def run_sft(cookbook: Path, server: TinkerServer, tiny: str, log_path: Path, epochs: int) -> None:
    """The SFT recipe for `epochs` passes over its one batch, logging to `log_path` (where a
    checkpoint it recorded earlier is resumed from, as the recipe does)."""
    payload = {
        "model": tiny,
        "log_path": str(log_path),
        "epochs": epochs,
        "learning_rate": 1e-2,
        "lora_rank": 8,
    }
    env = cookbook_environment(server.url, KEY)
    run_recipe(cookbook, "sft_recipe.py", payload, env, log_path.parent, RECIPE_TIMEOUT_S)


@pytest.fixture(scope="module")
def sft_log(
    cookbook: Path, server: TinkerServer, tiny: str, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The log folder of an SFT recipe run for 6 epochs, without interruption."""
    log_path = tmp_path_factory.mktemp("sft") / "log"
    run_sft(cookbook, server, tiny, log_path, epochs=6)
    return log_path


def test_the_supervised_recipe_lowers_its_loss(sft_log: Path, server: TinkerServer) -> None:
    rows = metrics(sft_log)
    assert [row["step"] for row in rows] == list(range(6))
    assert all(row["num_sequences"] == 4 for row in rows)
    nll = [row["train_mean_nll"] for row in rows]
    # the same four conversations every step: their mean NLL falls and keeps falling
    assert nll[-1] < 0.7 * nll[0], nll
    assert nll[-1] < min(nll[:3]), nll
    final = final_checkpoint(sft_log)
    assert {final["state_path"], final["sampler_path"]} <= listed_paths(server, final["state_path"])


def test_a_resumed_supervised_recipe_continues_as_if_never_stopped(
    cookbook: Path, server: TinkerServer, tiny: str, sft_log: Path, tmp_path: Path
) -> None:
    log_path = tmp_path / "log"
    run_sft(cookbook, server, tiny, log_path, epochs=4)
    stopped = final_checkpoint(log_path)
    assert stopped["epoch"] == 4
    # run again for 6: the recipe resumes from its checkpoint (weights and optimizer state,
    # into a new training run, after checking the renderer recorded with the old run)
    run_sft(cookbook, server, tiny, log_path, epochs=6)
    resumed = final_checkpoint(log_path)
    assert resumed["state_path"].split("/")[2] != stopped["state_path"].split("/")[2]
    nll = [row["train_mean_nll"] for row in metrics(log_path)]
    whole = [row["train_mean_nll"] for row in metrics(sft_log)]
    assert [row["step"] for row in metrics(log_path)] == list(range(6))
    assert nll == pytest.approx(whole, rel=1e-5), (nll, whole)
    import tinker

    rest = tinker.RestClient(base_url=server.url, api_key=KEY)
    run = rest.get_training_run_by_tinker_path(resumed["state_path"]).result(60)
    assert (run.user_metadata or {}).get("renderer_name") == "role_colon"


def test_the_rl_recipe_raises_its_reward(
    cookbook: Path, server: TinkerServer, tiny: str, tmp_path: Path
) -> None:
    log_path = tmp_path / "rl"
    # Sampling is unseeded, so each run climbs its own way: most are near 1 by step 9, but
    # on a loaded machine some start late (seen: 0.51, 0.48, 0.56 at steps 9, 10, 11, then
    # 0.77, 0.94), so the run is long enough for the slowest to arrive.
    steps = 16
    payload = {
        "model": tiny,
        "log_path": str(log_path),
        "steps": steps,
        "groups": 4,
        "group_size": 8,
        "max_tokens": 16,
        "learning_rate": 2e-2,
        "lora_rank": 8,
    }
    env = cookbook_environment(server.url, KEY)
    run_recipe(cookbook, "rl_recipe.py", payload, env, tmp_path, RECIPE_TIMEOUT_S)
    rows = metrics(log_path)
    assert [row["step"] for row in rows] == list(range(steps))
    reward = [row["env/all/reward/total"] for row in rows]
    # half the vocabulary is rewarded: a random model starts near 0.5, a trained one near 1
    assert 0.3 < reward[0] < 0.7, reward
    assert sum(reward[-2:]) / 2 > reward[0] + 0.25, reward
    # the sampler's logprobs are the trainer's: the recipe's own check of the two agreeing
    assert all(abs(row["optim/kl_sample_train_v1"]) < 1e-3 for row in rows), rows
    final = final_checkpoint(log_path)
    assert {final["state_path"], final["sampler_path"]} <= listed_paths(server, final["state_path"])
