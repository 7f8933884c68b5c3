"""Dependencies failing under a running loop: the inference server dying mid-rollout, the
backend closed mid-rollout, the disk failing (ENOSPC or EIO injected at the file boundary)
while logging and while LocalBackend saves a checkpoint, and the serverless training server
restarting mid-job.

Each must end in a clear error (or an exception entry the caller asked to keep), with the
files already on disk intact and readable, no temp file visible as data, and the next call
working once the fault is gone. A wandb failure mid-run is covered by
tests/e2e/test_wandb_faults.py.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

from openai import AsyncOpenAI
from safetensors.torch import load_file, save_file

import arthex
from arthex.adapters.files import TEMP_PREFIX
from arthex.adapters.jsonl_history import JsonlHistory
from arthex.adapters.local import LocalBackend, checkpoint_io
from arthex.adapters.local import checkpoints as ckpt
from arthex.adapters.parquet.store import ParquetTrajectoryStore
from arthex.core.config import TrainConfig
from arthex.core.errors import BackendError, DiskFullError, TooManyExceptionsError
from arthex.core.gather import gather_trajectory_groups
from arthex.core.identity import RunRef
from arthex.core.metrics import MetricsRow
from arthex.core.trajectories import Trajectory, TrajectoryGroup, trajectory_group
from arthex.testing.tiny_model import tiny_model

from ._training_loop import NAME, PROJECT, model_dir, start_child

pytestmark = pytest.mark.faults

CONFIG = TrainConfig(learning_rate=1e-2)
SLOW_TOKENS = 300


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def enospc(what: str) -> OSError:
    return OSError(errno.ENOSPC, f"No space left on device (injected: {what})")


def visible_temps(root: Path | str) -> list[Path]:
    return list(Path(root).rglob(f"{TEMP_PREFIX}*"))


def history_rows(base: Path, run: RunRef) -> list[MetricsRow]:
    return list(asyncio.run(JsonlHistory(str(base)).rows(run)))


# --- the inference server dies mid-rollout ---------------------------------------------------


def wait_for(events: Connection, kind: str, timeout_s: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if events.poll(0.5):
            event: dict[str, Any] = events.recv()
            if event["event"] == kind:
                return event
    raise AssertionError(f"no {kind!r} event in {timeout_s}s")


class Server:
    """The LocalBackend's inference server in a child process, so it can die for real."""

    def __init__(self, base: Path, base_model: str) -> None:
        self.process, self.events = start_child(
            {"base_path": str(base), "base_model": base_model, "steps": 0, "serve_only": True}
        )
        self.registered = wait_for(self.events, "registered")
        serving = wait_for(self.events, "serving")
        self.base_url, self.api_key, self.model = (
            serving["base_url"],
            serving["api_key"],
            serving["model"],
        )

    def kill(self) -> None:
        assert self.process.pid is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.join()
        self.events.close()


def rollouts(server: Server, kill_after_first: bool) -> list[Any]:
    """2 groups: one 1-token rollout and three long ones each. With `kill_after_first` the
    server is SIGKILLed as soon as the first short rollout is back, the long ones in flight."""
    # the client a user gets from model.openai_client(): default retries, long timeout
    client = AsyncOpenAI(base_url=server.base_url, api_key=server.api_key, timeout=1200.0)
    done = asyncio.Event()

    async def rollout(group: int, index: int) -> Trajectory:
        messages: list[Any] = [{"role": "user", "content": f"Count to {group + 3}."}]
        response = await client.chat.completions.create(
            model=server.model,
            messages=messages,
            max_tokens=1 if index == 0 else SLOW_TOKENS,
            temperature=1.0,
            logprobs=True,
            seed=group * 10 + index,
        )
        if kill_after_first and not done.is_set():
            done.set()
            server.kill()
        return Trajectory(messages_and_choices=[*messages, response.choices[0]], reward=index)

    return [trajectory_group(rollout(g, i) for i in range(4)) for g in range(2)]


@pytest.mark.slow
def test_inference_server_killed_mid_rollout(base_model: str, tmp_path: Path) -> None:
    base = tmp_path / "runs"
    evals = RunRef(PROJECT, "evals")

    # 1. the default budget (no failure allowed): a clear error, and nothing is written
    server = Server(base, base_model)

    async def strict() -> None:
        await gather_trajectory_groups(rollouts(server, kill_after_first=True))

    with pytest.raises(TooManyExceptionsError, match=r"max_exceptions=0.*APIConnectionError"):
        asyncio.run(strict())
    assert not (base / PROJECT / "models" / "evals").exists()

    # 2. a restart resumes the run where it was (the dead server wrote nothing), and a budget
    #    keeps the failures as exception entries that are logged as such, never as success
    server = Server(base, base_model)
    assert server.registered["step"] == 0 and server.registered["entries"] == ["0000"]

    async def lenient() -> list[TrajectoryGroup]:
        return await gather_trajectory_groups(
            rollouts(server, kill_after_first=True), max_exceptions=100
        )

    groups = asyncio.run(lenient())
    failed = sum(len(g.exceptions) for g in groups)
    succeeded = sum(len(g.trajectories) for g in groups)
    assert failed >= 1 and failed + succeeded == 8
    assert {e.type for g in groups for e in g.exceptions} == {"openai.APIConnectionError"}

    async def log() -> MetricsRow | None:
        async with arthex.Model(
            name=evals.name, project=PROJECT, base_path=str(base), report_metrics=[]
        ) as model:
            return await model.log(groups, split="val")

    row = asyncio.run(log())
    assert row is not None and row.values["val/exception_rate"] == pytest.approx(failed / 8)
    back = asyncio.run(ParquetTrajectoryStore(base).read(evals, "val", 0))
    assert sum(len(g.exceptions) for g in back) == failed
    assert [len(g.trajectories) for g in back] == [len(g.trajectories) for g in groups]
    assert history_rows(base, evals) == [row]

    # 3. recovery: a fresh server serves the same run and every rollout succeeds
    server = Server(base, base_model)
    try:
        groups = asyncio.run(gather_trajectory_groups(rollouts(server, kill_after_first=False)))
        assert [len(g.trajectories) for g in groups] == [4, 4]
    finally:
        server.kill()
    assert visible_temps(base) == []


def test_backend_closed_mid_rollout_then_calls_say_so(base_model: str, tmp_path: Path) -> None:
    async def scenario() -> tuple[list[TrajectoryGroup], BaseException | None, int]:
        model = arthex.TrainableModel(
            name=NAME,
            project=PROJECT,
            base_model=base_model,
            base_path=str(tmp_path),
            report_metrics=[],
        )
        backend = LocalBackend(engine="torch", full_finetune=True)
        await model.register(backend)
        client = model.openai_client()
        policy = model.get_inference_name()

        async def rollout(index: int) -> Trajectory:
            messages: list[Any] = [{"role": "user", "content": "Count."}]
            response = await client.chat.completions.create(
                model=policy, messages=messages, max_tokens=SLOW_TOKENS, logprobs=True, seed=index
            )
            return Trajectory(messages_and_choices=[*messages, response.choices[0]], reward=index)

        gathering = asyncio.ensure_future(
            gather_trajectory_groups(
                [trajectory_group(rollout(i) for i in range(4))], max_exceptions=100
            )
        )
        await asyncio.sleep(0.2)
        await backend.close()
        groups = await gathering
        error: BaseException | None = None
        try:
            await model.train(groups or [], config=CONFIG)
        except Exception as exc:
            error = exc
        rows = len(await model.history())
        await model.close()
        return groups, error, rows

    groups, error, rows = asyncio.run(scenario())
    # each rollout either finished (the server drains in-flight requests) or is an entry
    assert sum(len(g.trajectories) + len(g.exceptions) for g in groups) == 4
    assert isinstance(error, BackendError) and "closed" in str(error), repr(error)
    assert rows == 0, "a train call on a closed backend wrote history"
    assert ckpt.complete_steps(tmp_path / PROJECT / "models" / NAME) == [0]


# --- the disk fails while logging ---------------------------------------------------------


def trajectories(n: int, tag: str) -> list[Trajectory]:
    return [
        Trajectory(
            messages_and_choices=[
                {"role": "user", "content": f"{tag} {i}"},
                {"role": "assistant", "content": "4"},
            ],
            reward=float(i),
        )
        for i in range(n)
    ]


class Faults:
    """Counts calls at one file boundary and fails the chosen ones."""

    def __init__(self) -> None:
        self.calls = 0
        self.fail_at: set[int] = set()

    def arm(self, *calls: int) -> None:
        self.calls, self.fail_at = 0, set(calls)

    def hit(self) -> bool:
        self.calls += 1
        return self.calls in self.fail_at


@pytest.fixture
def history_write(monkeypatch: pytest.MonkeyPatch) -> Faults:
    """`os.write` on any history.jsonl: a failing call writes half its bytes (a short write),
    and the next call, the writer finishing the line, gets ENOSPC."""
    faults = Faults()
    real_write = os.write
    short: set[int] = set()

    def write(fd: int, data: Any) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").endswith("history.jsonl"):
            if fd in short:
                short.discard(fd)
                raise enospc("history append")
            if faults.hit():
                short.add(fd)
                return real_write(fd, bytes(data)[: len(data) // 2])
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    return faults


def test_disk_full_while_logging_keeps_the_files_and_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, history_write: Faults
) -> None:
    import pyarrow.parquet as pq

    run = RunRef(PROJECT, "logged")
    store = ParquetTrajectoryStore(tmp_path)
    model = arthex.Model(
        name=run.name, project=run.project, base_path=str(tmp_path), report_metrics=[]
    )
    split_dir = store.split_dir(run, "val")

    def log(tag: str) -> MetricsRow | None:
        return asyncio.run(model.log(trajectories(3, tag), split="val"))

    def snapshot() -> tuple[list[MetricsRow], list[list[TrajectoryGroup]], bytes]:
        parts = [
            asyncio.run(store.read(run, "val", step))
            for step in asyncio.run(store.steps(run, "val"))
        ]
        return (
            history_rows(tmp_path, run),
            parts,
            JsonlHistory(str(tmp_path)).path(run).read_bytes(),
        )

    good = [log("before"), log("before")]
    assert all(r is not None for r in good)

    # a) the parquet part fails half written (ENOSPC inside the writer)
    real_write_table = pq.write_table

    def write_table(table: Any, where: Any, **kwargs: Any) -> None:
        real_write_table(table, where, **kwargs)
        with open(where, "r+b") as handle:
            handle.truncate(os.path.getsize(where) // 2)
        raise enospc("parquet write")

    before = snapshot()
    monkeypatch.setattr(pq, "write_table", write_table)
    with pytest.raises(OSError) as info:
        log("lost")
    assert info.value.errno == errno.ENOSPC
    monkeypatch.setattr(pq, "write_table", real_write_table)
    assert snapshot() == before and visible_temps(split_dir) == []

    # b) publishing the finished step file fails (the rename of the rewritten file over it)
    real_replace = os.replace

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if Path(src).name.startswith(TEMP_PREFIX) and str(dst).endswith(".parquet"):
            raise enospc("parquet publish")
        real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match=r"(?i)no space left"):
        log("lost")
    monkeypatch.setattr(os, "replace", real_replace)
    assert snapshot() == before and visible_temps(split_dir) == []

    # c) the history append writes half a line, then ENOSPC: the half line is taken back;
    #    the part is on disk (the error told the caller its row is not)
    history_write.arm(1)
    with pytest.raises(OSError, match=r"(?i)no space left"):
        log("unrecorded")
    history_write.arm()
    rows, parts, ledger = snapshot()
    assert rows == before[0] and ledger == before[2]
    assert len(parts[0]) == len(before[1][0]) + 1

    # d) the history's fsync fails (EIO): the appended line is taken back, the error raised
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith("history.jsonl"):
            raise OSError(errno.EIO, "Input/output error (injected: history fsync)")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError, match="Input/output error"):
        log("unsynced")
    monkeypatch.setattr(os, "fsync", real_fsync)
    rows, parts, ledger = snapshot()
    assert rows == before[0] and ledger == before[2]
    assert len(parts[0]) == len(before[1][0]) + 2

    # e) the disk recovers: the next log works, nothing before it is lost
    after = log("after")
    assert after is not None
    rows, parts, ledger = snapshot()
    assert rows == [*before[0], after]
    assert ledger.startswith(before[2]) and ledger.endswith(b"\n")
    assert [t.messages()[0]["content"] for t in parts[0][-1].trajectories] == [
        "after 0",
        "after 1",
        "after 2",
    ]
    assert visible_temps(tmp_path) == []


# --- the disk fails while LocalBackend saves a checkpoint -----------------------------------


async def served_groups(model: arthex.TrainableModel, seed: int) -> list[TrajectoryGroup]:
    client = model.openai_client()
    policy = model.get_inference_name()

    async def rollout(group: int, index: int) -> Trajectory:
        messages: list[Any] = [{"role": "user", "content": f"Count to {group + 3}."}]
        response = await client.chat.completions.create(
            model=policy, messages=messages, max_tokens=4, logprobs=True, seed=seed + index
        )
        return Trajectory(messages_and_choices=[*messages, response.choices[0]], reward=index)

    return await gather_trajectory_groups(
        trajectory_group(rollout(g, i) for i in range(2)) for g in range(2)
    )


def test_disk_full_while_saving_a_checkpoint_keeps_the_step_and_recovers(
    base_model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, history_write: Faults
) -> None:
    real_save_file = save_file
    real_rename = os.rename
    mdir = model_dir(tmp_path)

    def half_written_optimizer(tensors: Any, filename: str, **kwargs: Any) -> None:
        real_save_file(tensors, filename, **kwargs)
        if Path(filename).name == ckpt.OPTIMIZER_FILE:
            with open(filename, "r+b") as handle:
                handle.truncate(os.path.getsize(filename) // 2)
            raise enospc("optimizer.safetensors")

    def rename(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if Path(src).name.startswith(TEMP_PREFIX) and Path(dst).parent.name == "checkpoints":
            raise enospc("checkpoint publish")
        real_rename(src, dst, *args, **kwargs)

    injections: list[tuple[str, Callable[[], None], Callable[[], None]]] = [
        (
            "save",
            lambda: monkeypatch.setattr(checkpoint_io, "save_file", half_written_optimizer),
            lambda: monkeypatch.setattr(checkpoint_io, "save_file", real_save_file),
        ),
        (
            "rename",
            lambda: monkeypatch.setattr(os, "rename", rename),
            lambda: monkeypatch.setattr(os, "rename", real_rename),
        ),
    ]

    def assert_at(backend: LocalBackend, model: arthex.TrainableModel, step: int) -> None:
        assert ckpt.latest_step(mdir) == step
        assert ckpt.step_folders(mdir) == ckpt.complete_steps(mdir)
        assert visible_temps(mdir / "checkpoints") == []
        saved_w = load_file(str(ckpt.step_dir(mdir, step) / ckpt.WEIGHTS_FILE))
        saved_o = load_file(str(ckpt.step_dir(mdir, step) / ckpt.OPTIMIZER_FILE))
        weights, optimizer = backend.training_tensors(model.run)
        import torch

        assert optimizer.keys() == saved_o.keys()
        assert all(torch.equal(v, saved_o[k]) for k, v in optimizer.items())
        assert all(torch.equal(v, saved_w[k]) for k, v in weights.items())

    async def scenario() -> None:
        model = arthex.TrainableModel(
            name=NAME,
            project=PROJECT,
            base_model=base_model,
            base_path=str(tmp_path),
            report_metrics=[],
        )
        backend = LocalBackend(engine="torch", full_finetune=True)
        try:
            await model.register(backend)
            assert (await model.train(await served_groups(model, 0), config=CONFIG)).step == 1
            for what, inject, heal in injections:
                groups = await served_groups(model, 10)
                inject()
                # a full disk is said as DiskFullError (an OSError) naming the checkpoint
                with pytest.raises(
                    (BackendError, DiskFullError), match=r"(?i)no space left"
                ) as info:
                    await model.train(groups, config=CONFIG)
                heal()
                assert "stays at step 1" in str(info.value), f"{what}: {info.value}"
                assert await model.get_step() == 1
                assert_at(backend, model, 1)  # memory reloaded from the files, not drifted
                # the served policy is still step 1
                again = await served_groups(model, 20)
                assert all(len(g.trajectories) == 2 for g in again)

            # the disk recovered: the next step trains from step 1's state, not from the
            # discarded updates (AdamW counts exactly two steps)
            assert (await model.train(await served_groups(model, 30), config=CONFIG)).step == 2
            assert_at(backend, model, 2)
            _, optimizer = backend.training_tensors(model.run)
            assert {float(v) for k, v in optimizer.items() if k.endswith(".step")} == {2.0}

            # the checkpoint is durable but its training row fails to append: the call fails,
            # the step has advanced (the checkpoint is the truth), and the next call rebuilds
            # the lost row from the metrics kept with the checkpoint
            history_write.arm(2)  # 1: the train-split row at step 2, 2: the row at step 3
            with pytest.raises(OSError, match=r"(?i)no space left"):
                await model.train(await served_groups(model, 40), config=CONFIG)
            history_write.arm()
            assert await model.get_step() == 3
            assert (await model.train(await served_groups(model, 50), config=CONFIG)).step == 4
        finally:
            await backend.close()
            await model.close()

    asyncio.run(scenario())
    rows = history_rows(tmp_path, RunRef(PROJECT, NAME))
    loss = [r.step for r in rows if "loss/train" in r.values]
    assert loss == [1, 2, 3, 4]  # 3 rebuilt by the next train call; never a duplicate
    train = sorted(r.step for r in rows if "train/reward" in r.values)
    # The two failed saves at step 1 trained the same rollouts (same seed, same policy): the
    # second call is a retry of the first and writes its batch row no second time; the
    # successful call after them brought new rollouts, so step 1 has two batch rows.
    assert train == [0, 1, 1, 2, 3]
    assert ckpt.complete_steps(mdir) == [0, 1, 2, 3, 4]


# --- the serverless training server restarts mid-job ----------------------------------------


@pytest.mark.slow
def test_serverless_server_restarting_mid_job_fails_the_train_call_then_recovers(
    tmp_path: Path,
) -> None:
    pytest.importorskip("arthex.adapters.serverless")
    from arthex.adapters.serverless import ServerlessBackend, TrainingJobFailed
    from arthex.testing.builders import synthetic_groups
    from tests._serverless import STEP_DELAY_ENV, start_server

    state = tmp_path / "state"
    delay = {STEP_DELAY_ENV: "0.5"}
    server = start_server(state, backend="tests._serverless:slow_backend", env=delay)
    port = server.url.rsplit(":", 1)[1].split("/")[0]
    run = RunRef(PROJECT, "remote")
    restarted: list[Any] = []

    async def scenario() -> tuple[BaseException | None, int, int]:
        model = arthex.TrainableModel(
            name=run.name,
            project=run.project,
            base_model="remote-base",
            base_path=str(tmp_path / "runs"),
            report_metrics=[],
        )
        # enough GET retries to outlast the restart (about 0.5 + 1 + 2 + 4 + 8 s)
        backend = ServerlessBackend(server.url, server.fresh_key(), retries=5)
        try:
            await model.register(backend)
            with server.gate.closed() as gate:  # the job holds after its first gradient step
                training = asyncio.ensure_future(model.train(synthetic_groups(6), config=CONFIG))
                await asyncio.to_thread(gate.wait_held)  # it is between its gradient steps
                assert not training.done()
                server.stop(kill=True)
            restarted.append(
                await asyncio.to_thread(
                    start_server,
                    state,
                    backend="tests._serverless:slow_backend",
                    keys=server.keys,
                    extra_args=["--port", port],
                    env=delay,
                )
            )
            error: BaseException | None = None
            try:
                await training
            except Exception as exc:
                error = exc
            step_after_failure = await model.get_step()
            result = await model.train(synthetic_groups(2), config=CONFIG)
            return error, step_after_failure, result.step
        finally:
            await backend.close()
            await model.close()

    try:
        error, step_after_failure, step = asyncio.run(scenario())
    finally:
        server.stop()
        for process in restarted:
            process.stop()
    assert isinstance(error, TrainingJobFailed), repr(error)
    assert "stopped while this job ran" in str(error)
    assert step_after_failure == 0 and step == 1
    rows = history_rows(tmp_path / "runs", run)
    assert [r.step for r in rows if "loss/train" in r.values] == [1]
    # the interrupted attempt's rollouts stay logged at step 0, beside the retry's
    assert [r.step for r in rows if "train/reward" in r.values] == [0, 0]
