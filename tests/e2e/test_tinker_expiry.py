"""A checkpoint Tinker expires (its TTL passed) is shown as expired, not as an error, by
`delete_checkpoints`, `arthex runs` and the viewer.

The TTL is set through the SDK's own `set_checkpoint_ttl_from_tinker_path` (one hour, the
service's shortest), and the emulator's clock is then moved an hour and a second ahead, so
the checkpoint is gone from the service as an expired one is: unlisted, and a 404 to load or
delete.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from arthex.core.config import TrainConfig
from arthex.core.identity import ModelSpec, RunRef
from arthex.core.pruning import delete_checkpoints
from arthex.testing.builders import synthetic_groups

pytest.importorskip("tinker")
pytest.importorskip("torch")

from arthex.adapters.tinker import TinkerBackend
from arthex.emulators.tinker import TinkerEmulator
from tests._view_runs import viewer
from tests.e2e.test_cli import arthex_cli as cli
from tests.e2e.test_cli import table_rows

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("error::FutureWarning:tinker"),
    pytest.mark.filterwarnings("error::DeprecationWarning:tinker"),
]

KEY = "tml-expiry"
TIMEOUT_S = 120.0
RUN = RunRef("expiry", "agent")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    from arthex.testing.tiny_model import tiny_model

    return tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")


@pytest.fixture(scope="module")
def emulator(tiny: str) -> Iterator[TinkerEmulator]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TINKER_TELEMETRY", "0")
        with TinkerEmulator(tiny, api_key=KEY, torch_threads=1) as running:
            yield running


def backend(emulator: TinkerEmulator) -> TinkerBackend:
    return TinkerBackend(base_url=emulator.base_url, api_key=KEY, timeout_s=TIMEOUT_S, serve=False)


def service_paths(emulator: TinkerEmulator, run_id: str) -> set[str]:
    import tinker

    rest = tinker.RestClient(base_url=emulator.base_url, api_key=KEY)
    listed = rest.list_checkpoints(run_id).result(TIMEOUT_S)
    return {c.tinker_path for c in listed.checkpoints}


def expire(emulator: TinkerEmulator, path: str) -> None:
    import tinker

    rest = tinker.RestClient(base_url=emulator.base_url, api_key=KEY)
    rest.set_checkpoint_ttl_from_tinker_path(path, 3600).result(TIMEOUT_S)
    emulator.advance_clock(3601)


def test_an_expired_checkpoint_is_shown_as_expired_everywhere(
    emulator: TinkerEmulator, tiny: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec = ModelSpec(RUN, base_model=tiny, base_path=str(tmp_path))
    model_dir = tmp_path / "expiry" / "models" / "agent"

    async def train() -> None:
        b = backend(emulator)
        try:
            await b.register(spec)
            for _ in range(3):
                async for _m in b.train_steps(RUN, synthetic_groups(2), TrainConfig()):
                    pass
        finally:
            await b.close()

    asyncio.run(train())
    # what model.log would have written: the listings read a run from its history
    row = {"train/reward": 0.5, "step": 3, "recorded_at": "2026-05-01T12:00:00+00:00"}
    (model_dir / "history.jsonl").write_text(json.dumps(row) + "\n")
    record = json.loads((model_dir / "tinker-run.json").read_text())
    sampler = {c["step"]: c["sampler_path"] for c in record["checkpoints"]}
    run_id = sampler[1].removeprefix("tinker://").split("/")[0]
    expire(emulator, sampler[1])
    on_service = service_paths(emulator, run_id)
    assert sampler[1] not in on_service and sampler[2] in on_service  # the emulator expired it

    async def prune() -> tuple[tuple[int, ...], list[int]]:
        b = backend(emulator)
        try:
            await b.register(spec)
            # keep the newest only: step 1 would be deleted, had it not expired
            decision = await delete_checkpoints(b, RUN, 3, metric="train/reward", keep_last=1)
            return decision.deleted, await b.checkpoint_steps(RUN)
        finally:
            await b.close()

    with caplog.at_level(logging.WARNING, logger="arthex.adapters.tinker.backend"):
        deleted, remaining = asyncio.run(prune())
    assert deleted == (0, 2)  # step 1 is not "deleted", nor an error
    assert remaining == [3]
    assert "Tinker expired step(s) [1]" in caplog.text
    assert json.loads((model_dir / "tinker-run.json").read_text())["expired"] == [1]

    runs = cli("runs", "--base-path", str(tmp_path))
    assert runs.returncode == 0, runs.stderr
    (listed,) = table_rows(runs.stdout)
    assert listed[3] == "1 (tinker, 1 expired)", listed

    with viewer([str(tmp_path)]) as view:
        summary = {f"{r['project']}/{r['name']}": r for r in view.json("/api/runs")["runs"]}
        assert summary["expiry/agent"]["checkpoints_expired"] == 1
        rows = view.json("/api/runs/expiry/agent/checkpoints")["checkpoints"]
    assert [(r["step"], r.get("expired", False)) for r in rows] == [(1, True), (3, False)]
    assert "kept" not in rows[0]  # neither kept nor "would be deleted": it is gone
