"""Rank failures in sharded training: the call ends quickly with the culprit's name, nothing is
left running, and the run goes on from its newest complete checkpoint.

- A rank SIGKILLed mid-call (what the kernel's OOM killer does), and a rank that raises (a
  KeyboardInterrupt delivered to it, the way a CUDA out-of-memory error would surface): the
  train call raises BackendError naming that rank within 30 s, every rank process is gone,
  and the next call starts new ranks on the newest checkpoint, bit for bit.
- A rank on "another machine" that stops answering (SIGSTOP: a hung node or a cut network)
  is found by its heartbeat.
- The frontend SIGKILLed: its ranks and their zygote go away on their own.
- A rank SIGKILLed before the first step's metrics, mid-call, or during the checkpoint save:
  once the backend is closed, no process it started (ranks, the zygote) is left.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

import psutil
from safetensors.torch import load_file

from arthex.adapters.local import LocalBackend
from arthex.adapters.local.distributed.channel import Channel
from arthex.core.config import TrainConfig
from arthex.core.errors import BackendError
from arthex.core.identity import ModelSpec, RunRef
from arthex.testing.builders import synthetic_groups
from arthex.testing.tiny_model import tiny_model

pytestmark = [pytest.mark.faults, pytest.mark.slow]

RUN = RunRef("faults", "sharded")
DEADLINE_S = 30.0
ONE_ROW_PER_STEP = TrainConfig(learning_rate=1e-3, grad_accumulation_sequences=1)


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def checkpoint(root: Path, step: int) -> Path:
    return root / RUN.project / "models" / RUN.name / "checkpoints" / f"{step:04d}"


def reaped(pid: int) -> bool:
    """Ended and reaped: no process under that pid, not even a zombie."""
    return not bool(psutil.pid_exists(pid))


def ended(pid: int) -> bool:
    """Ended; a zombie counts (an orphan's reaping is the init process's job)."""
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


async def train_until_hit(
    b: LocalBackend, hit: signal.Signals, rank: int
) -> tuple[int, BackendError | None, float]:
    """Train 8 one-row steps; after the first step's metrics, send `hit` to `rank`. Returns
    the steps seen, the error, and the seconds from the signal to the error."""
    pids = b.rank_processes(RUN)
    seen, error, sent = 0, None, 0.0

    async def consume() -> None:
        nonlocal seen, sent
        async for _ in b.train_steps(RUN, synthetic_groups(2, 4, offset=1), ONE_ROW_PER_STEP):
            seen += 1
            if seen == 1:
                os.kill(pids[rank], hit)
                sent = time.monotonic()

    try:
        await asyncio.wait_for(consume(), timeout=DEADLINE_S + 60)
    except BackendError as exc:
        error = exc
    return seen, error, time.monotonic() - sent


@pytest.mark.parametrize(
    ("hit", "says", "forked"),
    [
        (signal.SIGKILL, "was killed by SIGKILL", True),
        pytest.param(signal.SIGINT, "KeyboardInterrupt", False, marks=pytest.mark.extended),
    ],
    ids=["killed-forked-rank", "raised-in-fresh-rank"],
)
def test_a_failing_rank_ends_the_call_and_the_next_call_resumes(
    base_model: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    hit: signal.Signals,
    says: str,
    forked: bool,
) -> None:
    if not forked:  # the first generation's ranks as fresh interpreters, not zygote forks
        monkeypatch.setenv("ARTHEX_RANK_ZYGOTE", "0")

    async def scenario() -> tuple[int, BackendError | None, float, list[int], list[str], int]:
        b = LocalBackend(full_finetune=True, world_size=2)
        try:
            await b.register(ModelSpec(run=RUN, base_model=base_model, base_path=str(tmp_path)))
            async for _ in b.train_steps(RUN, synthetic_groups(2, 4), ONE_ROW_PER_STEP):
                pass
            ranks = b.rank_processes(RUN)
            monkeypatch.delenv("ARTHEX_RANK_ZYGOTE", raising=False)  # the restart forks
            seen, error, took = await train_until_hit(b, hit, rank=1)
            assert b.rank_processes(RUN) == {}, "the failed generation is forgotten"
            lost = [pid for pid in ranks.values() if not reaped(pid)]
            # the next call starts new ranks on the newest checkpoint, exactly
            weights, optimizer = b.training_tensors(RUN)
            saved = {
                **load_file(str(checkpoint(tmp_path, 1) / "model.safetensors")),
                **load_file(str(checkpoint(tmp_path, 1) / "optimizer.safetensors")),
            }
            live = {**weights, **optimizer}
            differing = [k for k in live if not (k in saved and bool((live[k] == saved[k]).all()))]
            async for _ in b.train_steps(RUN, synthetic_groups(2, 4, offset=2), ONE_ROW_PER_STEP):
                pass
            return seen, error, took, lost, differing, await b.get_step(RUN)
        finally:
            await b.close()

    seen, error, took, lost, differing, step = asyncio.run(scenario())
    assert error is not None, f"the call went on after rank 1 was hit ({seen} steps)"
    assert seen < 8
    assert "trainer rank 1 of 2" in str(error) and says in str(error), str(error)
    assert took < DEADLINE_S, f"the error came {took:.1f} s after the rank was hit"
    assert lost == [], "every rank of the failed generation has ended and been reaped"
    assert differing == []
    assert step == 2, "the failed call left no checkpoint; the next one made step 2"
    assert not (checkpoint(tmp_path, 3)).exists()


def test_a_remote_rank_that_stops_answering_is_named_by_its_heartbeat(
    base_model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARTHEX_RANK_HEARTBEAT_TIMEOUT", "4")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ARTHEX_", "MASTER_"))}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", RANK="1")
    node = subprocess.Popen(
        [sys.executable, "-m", "arthex.adapters.local.distributed.worker"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    async def scenario() -> tuple[int, BackendError | None, float]:
        b = LocalBackend(
            full_finetune=True,
            world_size=2,
            devices=["cpu"],
            master_port=port,
            master_addr="127.0.0.1",
        )
        try:
            await b.register(ModelSpec(run=RUN, base_model=base_model, base_path=str(tmp_path)))
            pids = b.rank_processes(RUN)
            assert list(pids) == [0]
            # the frontend cannot signal a rank on another machine; the test can
            seen, error, sent = 0, None, 0.0
            try:
                async for _ in b.train_steps(RUN, synthetic_groups(2, 4), ONE_ROW_PER_STEP):
                    seen += 1
                    if seen == 1:
                        node.send_signal(signal.SIGSTOP)
                        sent = time.monotonic()
            except BackendError as exc:
                error = exc
            return seen, error, time.monotonic() - sent
        finally:
            await b.close()

    try:
        seen, error, took = asyncio.run(scenario())
    finally:
        node.kill()
        node.wait()
    assert error is not None and seen < 8
    assert "trainer rank 1 of 2 stopped answering: no heartbeat for 4 s" in str(error), str(error)
    assert took < DEADLINE_S


FRONTEND = textwrap.dedent(
    """
    import asyncio, sys
    from arthex.adapters.local import LocalBackend
    from arthex.core.config import TrainConfig
    from arthex.core.identity import ModelSpec, RunRef
    from arthex.testing.builders import synthetic_groups

    async def main():
        b = LocalBackend(full_finetune=True, world_size=2)
        run = RunRef("faults", "orphans")
        await b.register(ModelSpec(run=run, base_model=sys.argv[1], base_path=sys.argv[2]))
        print(" ".join(str(p) for p in b.rank_processes(run).values()), flush=True)
        config = TrainConfig(learning_rate=1e-3, grad_accumulation_sequences=1)
        while True:
            async for _ in b.train_steps(run, synthetic_groups(2, 4), config):
                pass

    asyncio.run(main())
    """
)


def test_ranks_do_not_outlive_a_killed_frontend(base_model: str, tmp_path: Path) -> None:
    frontend = subprocess.Popen(
        [sys.executable, "-c", FRONTEND, base_model, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert frontend.stdout is not None
        line = frontend.stdout.readline().decode()
        ranks = [int(pid) for pid in line.split()]
        assert len(ranks) == 2, f"the frontend reported {line!r}"
        helpers = [p.pid for p in psutil.Process(frontend.pid).children()]
        frontend.send_signal(signal.SIGKILL)
        frontend.wait()
        watched = ranks + helpers
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline and not all(ended(p) for p in watched):
            time.sleep(0.1)
        alive = [p for p in watched if not ended(p)]
    finally:
        if frontend.poll() is None:
            frontend.kill()
            frontend.wait()
    assert alive == [], f"still running after their frontend died: {alive}"


def descendants() -> dict[int, str]:
    """This process's live descendants: pid -> command line."""
    found = {}
    for process in psutil.Process().children(recursive=True):
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                found[process.pid] = " ".join(process.cmdline())
        except psutil.NoSuchProcess:
            pass
    return found


@pytest.mark.parametrize(
    ("point", "rank"),
    [
        pytest.param("before-first-step", 1, marks=pytest.mark.extended),
        ("mid-call", 1),
        ("checkpoint-save", 0),
    ],
)
def test_a_backend_closed_after_a_rank_was_killed_leaves_no_process(
    base_model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str, rank: int
) -> None:
    """The kill is timed by the frontend's own commands, counted as they are sent: the first
    `train` command (the ranks have not reported a step), the first step's metrics, the
    second `save` command (the first wrote step 0 at register). Every process seen while the
    ranks ran (the ranks and the zygote that forked them) has ended once `close` returns,
    and none of this process's children is new."""
    backend = LocalBackend(full_finetune=True, world_size=2)
    sent: dict[str, int] = {}
    watched: set[int] = set()
    put_json = Channel.put_json

    def kill() -> None:
        pids = backend.rank_processes(RUN)
        for pid in pids.values():  # the ranks and their parent (the zygote, when forked)
            watched.update({pid, psutil.Process(pid).ppid()})
        watched.discard(os.getpid())
        os.kill(pids[rank], signal.SIGKILL)

    def counting(channel: Channel, key: str, value: object) -> None:
        put_json(channel, key, value)
        if key.startswith("cmd/") and isinstance(value, dict):
            op = str(value["op"])
            sent[op] = sent.get(op, 0) + 1
            if (point, op, sent[op]) in {
                ("before-first-step", "train", 1),
                ("checkpoint-save", "save", 2),
            }:
                kill()

    monkeypatch.setattr(Channel, "put_json", counting)
    before = descendants()

    async def scenario() -> tuple[int, BackendError | None]:
        seen, error = 0, None
        try:
            await backend.register(
                ModelSpec(run=RUN, base_model=base_model, base_path=str(tmp_path))
            )
            try:
                async for _ in backend.train_steps(RUN, synthetic_groups(2, 4), ONE_ROW_PER_STEP):
                    seen += 1
                    if seen == 1 and point == "mid-call":
                        kill()
            except BackendError as exc:
                error = exc
        finally:
            await backend.close()
        return seen, error

    seen, error = asyncio.run(scenario())
    assert error is not None, f"the call went on after rank {rank} was killed ({seen} steps)"
    assert f"trainer rank {rank} of 2" in str(error) and "SIGKILL" in str(error), str(error)
    if point == "before-first-step":
        assert seen == 0
    elif point == "mid-call":
        assert 1 <= seen < 8
    else:
        assert seen == 8 and not checkpoint(tmp_path, 1).exists()
    assert len(watched) == 3, f"expected two ranks and their zygote, saw {watched}"
    left = {pid: command for pid, command in descendants().items() if pid not in before}
    assert [pid for pid in watched if not reaped(pid)] == [] and left == {}, left


def forked_here(process: psutil.Process, me: psutil.Process) -> bool:
    """A direct child (the shared zygote), not one of the ranks it forks."""
    try:
        return bool(process.ppid() == me.pid)
    except psutil.NoSuchProcess:
        return False


def test_a_register_whose_step_cannot_be_served_leaves_no_rank_running(
    base_model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ranks have loaded the checkpoint when serving it fails (the engine cannot read it):
    register raises, and the ranks it started are stopped by then, not left running for the
    rest of the process's life."""
    from arthex.adapters.inference.engine_pool import ServingPool

    async def unservable(*args: object) -> None:
        raise BackendError("checkpoint 0 is saved but could not be served: the engine failed")

    monkeypatch.setattr(ServingPool, "serve_step", unservable)
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}

    async def main() -> list[int]:
        backend = LocalBackend(full_finetune=True, world_size=2)
        try:
            spec = ModelSpec(run=RUN, base_model=base_model, base_path=str(tmp_path))
            with pytest.raises(BackendError, match="could not be served"):
                await backend.register(spec)
            # the ranks ran: they wrote step 0
            assert (checkpoint(tmp_path, 0) / "model.safetensors").is_file()
            new = [p for p in me.children(recursive=True) if p.pid not in before]
            return [p.pid for p in new if not ended(p.pid) and not forked_here(p, me)]
        finally:
            await backend.close()

    assert asyncio.run(main()) == []


def test_a_backend_closed_while_a_register_is_in_flight_stops_the_ranks_it_started(
    base_model: str, tmp_path: Path
) -> None:
    """`close` runs while `register` is still loading on freshly started ranks: the run never
    reached the backend's table, so `close` alone cannot see it; register hands it back to be
    closed, raises the closed-backend error, and no rank outlives it."""
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}

    def live_ranks() -> list[int]:
        new = [p for p in me.children(recursive=True) if p.pid not in before]
        return [p.pid for p in new if not ended(p.pid) and not forked_here(p, me)]

    async def main() -> tuple[bool, list[int]]:
        backend = LocalBackend(full_finetune=True, world_size=2)
        spec = ModelSpec(run=RUN, base_model=base_model, base_path=str(tmp_path))
        registering = asyncio.create_task(backend.register(spec))
        while not live_ranks() and not registering.done():  # noqa: ASYNC110 (no event: processes)
            await asyncio.sleep(0.05)  # polls for an event (ranks exist), asserts no time
        in_flight = not registering.done()
        await backend.close()
        with pytest.raises(BackendError, match="closed"):
            await registering
        return in_flight, live_ranks()

    in_flight, left = asyncio.run(main())
    assert in_flight, "register finished before its ranks were seen; nothing was raced"
    assert left == []


def test_a_rank_group_collected_without_close_lets_the_zygote_go() -> None:
    """The zygote is held by the rank groups forked from it; one dropped without `close`
    lets go when collected, so the zygote does not wait for interpreter exit."""
    import gc

    from arthex.adapters.local.distributed import processes

    class Group:  # a holder is any object the zygote is held for
        pass

    group = Group()
    zygote = processes._zygote(group)
    process = psutil.Process(zygote._proc.pid)
    assert process.is_running()
    del group
    gc.collect()
    zygote._proc.wait(timeout=120)  # ends once let go: a deadline, not a sleep
    assert processes._ZYGOTE is not zygote
