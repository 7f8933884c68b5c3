"""ART 0.5.23's `art.loss` and arthex's under `arthex.art` give the same numbers on the same
seeded tensors: the ratio histogram's edges, `histogram_quantile`, and for CISPO, PPO, their
clip intervals and the KL penalty, `loss_fn`'s loss, gradient, entropy, probs_corr and KL term,
each call's `LossOffPolicyDiagnostics` (ratio sum, clipped and token counts, histogram) and the
step metrics `LossOffPolicyDiagnosticsAccumulator` gives over the calls. One script for both
(art/loss_script.py), run in the venv that has ART and torch (art_tinker_env.py), arthex from
this checkout."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .art_env import SCRIPTS, art_environment, checkout_pyroot
from .art_tinker_env import art_tinker_python


def run_script(lib: str, root: Path) -> Any:
    env = art_environment()
    if lib != "art":
        env["PYTHONPATH"] = str(checkout_pyroot(root))
    done = subprocess.run(
        [str(art_tinker_python()), str(SCRIPTS / "loss_script.py"), lib],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    root = tmp_path_factory.mktemp("art-loss")
    return run_script("art", root), run_script("arthex.art", root)


def same(art: Any, ours: Any) -> None:
    if isinstance(art, float):
        assert ours == pytest.approx(art, rel=1e-9, abs=1e-12)
    elif isinstance(art, dict):
        assert ours.keys() == art.keys()
        for key in art:
            same(art[key], ours[key])
    elif isinstance(art, list):
        assert len(ours) == len(art)
        for theirs, mine in zip(art, ours, strict=True):
            same(theirs, mine)
    else:
        assert ours == art


@pytest.mark.parametrize("part", ["edges", "quantiles", "runs"])
def test_arts_loss_and_diagnostics_give_the_same_numbers(
    outcomes: tuple[Any, Any], part: str
) -> None:
    art, ours = outcomes
    same(art[part], ours[part])


def test_the_cases_reach_each_branch(outcomes: tuple[Any, Any]) -> None:
    art, _ = outcomes
    assert art["quantiles"][5] == pytest.approx(1e4)  # q=1 with counts above the last edge
    assert art["quantiles"][-1] == 0.0  # an empty histogram
    cispo_clipped, _, ppo = art["runs"][:3]
    for run in art["runs"]:
        histograms = [call["ratio_histogram"] for call in run["calls"]]
        assert max(sum(1 for count in h if count) for h in histograms) > 5  # spread out
        assert set(run["metrics"]) == {
            "loss/importance_ratio_mean",
            "loss/importance_ratio_p95",
            "loss/importance_ratio_p99",
            "loss/clipped_token_fraction",
        }
    # both clip rules count some tokens (which ones PPO counts: tests/unit/test_art_loss.py)
    for run in (cispo_clipped, ppo):
        assert 0 < run["metrics"]["loss/clipped_token_fraction"] < 1
    assert any(call["kl_policy_ref"] for call in art["runs"][4]["calls"])
