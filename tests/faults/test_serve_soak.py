"""The serve soak (`make soak`, not CI): `arthex serve --backend local` with 8 tenants, each
training and sampling the tiny model through the server for ARTHEX_SOAK_SECONDS (default
1800), under injected faults, then a full audit.

Every tenant is a client process (`_serve_tenant`) with its own key; all of them name their
model `soak/agent`, so only the server's tenancy keeps them apart. The faults:

- the server SIGKILLed and started again on the same state directory and port, at evenly
  spaced times in the first half of the run (the second half is one server's life, whose
  memory and open files are compared);
- a tenant's client SIGKILLed every so often and started again: it resumes from the
  server's step, taking over its lease once the dead client's expires (`--lease-ttl` is short
  for it); a client whose call fails (the server gone, the store down) starts a new session
  in the same process, as a user's retry loop does, and never exits before its deadline;
- the tenants' trajectory store, moto's S3 server behind the fault proxy (`_s3_proxy`): a
  burst every few seconds (503 SlowDown, 500, connection resets, a reply delayed past the
  client's timeout, a write whose reply is lost), and once an outage longer than the store's
  retry budget. The server keeps its own state on its local disk (it has no object-store
  option), so the store's faults reach the clients' writes only.

The audit, with the server still up after the clients end:

- every step a tenant was told was trained (`acks.jsonl`) has its complete checkpoint folder
  on the server, in that tenant's own folder, or was deleted by the tenant's own retention
  (which found it there; the latest step is always kept, at most 3 folders are); its one
  training row in the tenant's history; and its batch in the tenant's train split: the
  acknowledging attempt's groups, stored once;
- no tenant saw another's data: every group in a tenant's store carries its own name, every
  completion it sampled was served by its own model; each key lists only its own model, and
  another tenant's model id or served name is unknown to it (404);
- the server's RSS and open file descriptors over its last life, from when it settled (every
  tenant finished a step on it: all eight models loaded): the mean of the last third within
  RSS_GROWTH of the first third's, the most descriptors within FD_SLACK.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest

pytest.importorskip("torch")
pytest.importorskip("moto")
pytest.importorskip("psutil")

from arthex.adapters.jsonl_history import JsonlHistory
from arthex.adapters.local import checkpoints as ckpt
from arthex.adapters.parquet.store import ParquetTrajectoryStore
from arthex.core.identity import RunRef
from arthex.core.training_row import trained_rows
from arthex.testing.tiny_model import tiny_model
from tests._serverless import REPO, ServerProcess, launch_server, make_keys

from . import _serve_tenant as tenant_loop
from .test_object_store_faults import BUCKET, Stack

pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.soak]

SECONDS = float(os.environ.get("ARTHEX_SOAK_SECONDS", "1800"))
TENANTS = 8
LEASE_TTL_S = 5
STORE_BUDGET_S = 8.0
FAULT_EVERY_S = 6.0
SAMPLE_EVERY_S = 2.0
RSS_GROWTH = 64 * 2**20
FD_SLACK = 16
END_GRACE_S = 180.0
RUN = RunRef(tenant_loop.PROJECT, tenant_loop.NAME)


@attrs.define
class Tenant:
    name: str
    key: str
    folder: Path
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    killed: int = 0
    ended: Counter[str] = attrs.field(factory=Counter)  # how its processes ended

    def lines(self) -> list[dict[str, Any]]:
        path = self.folder / "acks.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []

    def acks(self) -> list[dict[str, Any]]:
        """The steps `model.train` returned."""
        return [x for x in self.lines() if "step" in x]

    def deleted(self) -> set[int]:
        """The steps its own `model.delete_checkpoints` calls said they deleted, and those a
        call cut short by a kill may have deleted: the acknowledged steps before the one it
        followed (the latest is always kept) that no earlier call had said it deleted."""
        said: set[int] = set()
        acked: list[int] = []
        cut_short: set[int] = set()
        pending: int | None = None
        for line in self.lines():
            if "step" in line:
                if pending is not None:  # the process was killed inside its delete call
                    cut_short |= {s for s in acked if s < pending} - said
                    pending = None
                acked.append(line["step"])
            elif "deleting_after" in line:
                pending = line["deleting_after"]
            elif "deleted" in line:
                said |= set(line["deleted"])
                pending = None
        if pending is not None:
            cut_short |= {s for s in acked if s < pending} - said
        return said | cut_short

    def errors(self) -> Counter[str]:
        """The errors its clients recovered from, by class."""
        lines = (self.folder / "stderr.log").read_text(errors="replace").splitlines()
        prefix = tenant_loop.ERROR_PREFIX
        return Counter(x[len(prefix) :].split(":", 1)[0] for x in lines if x.startswith(prefix))


class Soak:
    def __init__(self, root: Path, stack: Stack, base_model: str) -> None:
        self.root, self.stack, self.base_model = root, stack, base_model
        self.state = root / "state"
        self.keys = make_keys(TENANTS)
        self.tenants = [
            Tenant(name, key, root / "tenants" / name) for name, key in self.keys.items()
        ]
        self.server: ServerProcess | None = None
        self.port = "0"
        self.lives = 0
        self.samples: list[tuple[float, int, int, int]] = []  # (time, life, rss, fds)
        self.life_started: list[float] = []
        self.started = time.monotonic()
        self.deadline = time.time() + SECONDS

    def start_server(self) -> None:
        extra = ["--port", self.port, "--lease-ttl", str(LEASE_TTL_S)]
        pending = launch_server(self.state, backend="local", keys=self.keys, extra_args=extra)
        self.server = pending.wait()
        self.port = self.server.url.rsplit(":", 1)[1]
        self.lives += 1
        self.life_started.append(time.time())

    def kill_server(self) -> None:
        assert self.server is not None
        self.server.stop(kill=True)
        self.start_server()

    def start_tenant(self, tenant: Tenant) -> None:
        assert self.server is not None
        tenant.folder.mkdir(parents=True, exist_ok=True)
        options = {
            "tenant": tenant.name,
            "key": tenant.key,
            "url": self.server.url,
            "folder": str(tenant.folder),
            "base_model": self.base_model,
            "s3_endpoint": self.stack.proxy.endpoint,
            "bucket": BUCKET,
            "store_budget_s": STORE_BUDGET_S,
            "deadline": self.deadline,
        }
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        with (tenant.folder / "stderr.log").open("ab") as err:
            tenant.process = subprocess.Popen(
                [sys.executable, "-m", "tests.faults._serve_tenant", json.dumps(options)],
                cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err,
            )  # fmt: skip
        tenant.starts += 1

    def reap(self, tenant: Tenant) -> bool:
        """Whether the tenant's process ended (counted by how)."""
        process = tenant.process
        if process is None or process.poll() is None:
            return False
        code = process.returncode
        tenant.ended[{0: "done", -signal.SIGKILL: "killed"}.get(code, f"exit {code}")] += 1
        tenant.process = None
        return True

    def sample(self) -> None:
        assert self.server is not None
        psutil: Any = importlib.import_module("psutil")
        try:
            me = psutil.Process(self.server.process.pid)
            rss = me.memory_info().rss + sum(c.memory_info().rss for c in me.children(True))
            fds = len(os.listdir(f"/proc/{me.pid}/fd"))
        except (psutil.Error, OSError):
            return
        self.samples.append((time.time(), self.lives, rss, fds))

    def inject(self, rng: random.Random) -> str:
        def put(method: str, _path: str, _headers: dict[str, str]) -> bool:
            return method in ("PUT", "POST")

        faults = self.stack.proxy.faults
        kind = rng.choice(["slowdown", "error500", "reset", "lost", "delay"])
        if kind == "lost":
            faults.add("lost", times=1, match=put)
        elif kind == "delay":
            faults.add("delay", times=1, delay=3.0)
        else:
            faults.add(kind, times=rng.randint(1, 3))
        return kind

    def run(self) -> dict[str, Any]:
        rng = random.Random(41)
        server_kills = int(min(5, max(1, SECONDS // 300)))
        kill_server_at = [SECONDS / 2 * (i + 1) / server_kills for i in range(server_kills)]
        client_every = max(10.0, SECONDS / 60)
        next_client_kill, next_fault, next_sample = client_every, FAULT_EVERY_S, 0.0
        outage_at: float | None = SECONDS * 0.6
        outage_end = 0.0
        injected: Counter[str] = Counter()
        self.start_server()
        for tenant in self.tenants:
            self.start_tenant(tenant)
        while (now := time.monotonic() - self.started) < SECONDS:
            if kill_server_at and now >= kill_server_at[0]:
                kill_server_at.pop(0)
                injected["server SIGKILL"] += 1
                self.kill_server()
            if now >= next_client_kill:
                next_client_kill += client_every
                alive = [t for t in self.tenants if t.process and t.process.poll() is None]
                if alive:
                    victim = rng.choice(alive)
                    assert victim.process is not None
                    victim.process.kill()
                    victim.killed += 1
                    injected["client SIGKILL"] += 1
            if now >= next_fault:
                next_fault += FAULT_EVERY_S
                injected[f"store {self.inject(rng)}"] += 1
            if outage_at is not None and now >= outage_at:
                outage_at, outage_end = None, now + STORE_BUDGET_S + 4
                self.stack.proxy.faults.add("slowdown", times=None)
                injected["store outage"] += 1
            if outage_end and now >= outage_end:
                outage_end = 0.0
                self.stack.proxy.faults.clear()
            for tenant in self.tenants:
                if self.reap(tenant) and now < SECONDS - 15:
                    self.start_tenant(tenant)
            if now >= next_sample:
                next_sample += SAMPLE_EVERY_S
                self.sample()
            time.sleep(0.5)
        self.stack.proxy.faults.clear()
        end = time.monotonic() + END_GRACE_S
        while any(t.process is not None for t in self.tenants):
            for tenant in self.tenants:
                if tenant.process is not None and time.monotonic() > end:
                    tenant.process.kill()
                self.reap(tenant)
            time.sleep(0.5)
        return dict(injected)


@pytest.fixture
def soak(tmp_path: Path) -> Iterator[Soak]:
    stack = Stack()
    made = Soak(tmp_path, stack, tiny_model(tmp_path / "tiny"))
    try:
        yield made
    finally:
        for tenant in made.tenants:
            if tenant.process is not None:
                tenant.process.kill()
                tenant.process.wait()
        if made.server is not None:
            made.server.stop()
        stack.proxy.stop()
        stack.server.stop()


def audit_tenant(soak: Soak, tenant: Tenant, ids: dict[str, str]) -> dict[str, int]:
    acks = tenant.acks()
    acked = [a["step"] for a in acks]
    assert acked, f"{tenant.name} never finished a step: {dict(tenant.ended)}"
    assert acked == sorted(set(acked)), f"{tenant.name} acknowledged {acked}"
    folder = soak.state / "backend" / tenant.name / "models" / ids[tenant.name]
    complete, deleted = set(ckpt.complete_steps(folder)), tenant.deleted()
    missing = sorted(set(acked) - complete - deleted)
    assert not missing, f"{tenant.name}: acknowledged steps {missing} have no checkpoint"
    assert acked[-1] in complete, f"{tenant.name}: its latest step {acked[-1]} is gone"
    # the latest and the best kept, plus at most a step a kill left before its retention ran
    assert len(complete) <= 3, f"{tenant.name} keeps checkpoints {sorted(complete)}"

    rows = trained_rows(asyncio.run(JsonlHistory(str(tenant.folder / "art")).rows(RUN)))
    training = Counter(r.step for r in rows if r.values.get("loss/train") is not None)
    assert all(training[s] == 1 for s in acked), (
        f"{tenant.name}: training rows of acknowledged steps {[(s, training[s]) for s in acked]}"
    )
    assert all(n == 1 for n in training.values()), f"{tenant.name}: {training.most_common(3)}"

    store = ParquetTrajectoryStore(f"{BUCKET}/{tenant.name}", filesystem=soak.stack.direct)
    steps = asyncio.run(store.steps(RUN, "train"))  # listed once: a long run has hundreds
    acks_by_step = {a["step"]: a for a in acks}
    stored = 0
    for step in steps:
        groups = asyncio.run(store.read(RUN, "train", step))
        stored += len(groups)
        owners = {g.metadata[tenant_loop.TENANT_KEY] for g in groups}
        assert owners == {tenant.name}, f"{tenant.name}'s step {step} holds groups of {owners}"
        served = {t.metadata[tenant_loop.SERVED_KEY] for g in groups for t in g.trajectories}
        foreign = [s for s in served if f"/{tenant.name}/" not in str(s)]
        assert not foreign, f"{tenant.name} sampled from {foreign}"
        per_attempt = Counter(g.metadata[tenant_loop.ATTEMPT_KEY] for g in groups)
        twice = {a: n for a, n in per_attempt.items() if n != tenant_loop.GROUPS}
        assert not twice, f"{tenant.name} step {step}: groups per attempt {twice}"
        if (ack := acks_by_step.get(step + 1)) is not None:
            assert per_attempt[ack["attempt"]] == tenant_loop.GROUPS, (tenant.name, ack)
    assert all(a["step"] - 1 in steps for a in acks)
    return {"acked": len(acked), "deleted": len(deleted), "kept": len(complete), "groups": stored}


def audit_isolation(soak: Soak) -> dict[str, str]:
    """Each key sees its one model, and nothing of another tenant's; returns the model ids."""
    assert soak.server is not None
    url, ids = soak.server.url, {}
    for tenant in soak.tenants:
        auth = {"Authorization": f"Bearer {tenant.key}"}
        listed = httpx.get(f"{url}/preview/models", headers=auth, timeout=30).json()["data"]
        assert [(m["project"], m["name"]) for m in listed] == [(RUN.project, RUN.name)], listed
        ids[tenant.name] = listed[0]["id"]
        served = httpx.get(f"{url}/v1/models", headers=auth, timeout=30).json()["data"]
        others = [m["id"] for m in served for t in soak.keys if t != tenant.name and t in m["id"]]
        assert not others, f"{tenant.name} is shown {others}"
    assert len(set(ids.values())) == TENANTS, ids
    for tenant in soak.tenants:
        auth = {"Authorization": f"Bearer {tenant.key}"}
        for other in soak.tenants:
            if other is tenant:
                continue
            got = httpx.get(f"{url}/preview/models/{ids[other.name]}", headers=auth, timeout=30)
            assert got.status_code == 404, (tenant.name, other.name, got.status_code)
            body = {
                "model": f"wandb-artifact:///{other.name}/{RUN.project}/{RUN.name}",
                "messages": [{"role": "user", "content": "hello"}],
                "max_tokens": 2,
            }
            sampled = httpx.post(f"{url}/v1/chat/completions", headers=auth, json=body, timeout=60)
            assert sampled.status_code == 404, (tenant.name, other.name, sampled.text[:200])
    return ids


def settled(soak: Soak) -> float:
    """When the last server life was warm: every tenant had finished a step on it (its model
    loaded, trained and sampled once), as the first steps of test_soak.py are left out."""
    began = soak.life_started[-1]
    firsts: list[float | None] = [
        min((float(a["at"]) for a in t.acks() if a["at"] > began), default=None)
        for t in soak.tenants
    ]
    assert None not in firsts, f"a tenant finished no step on the last server life: {firsts}"
    return max(f for f in firsts if f is not None)


def flatness(soak: Soak) -> tuple[str, int, int, int, int]:
    """The last life once settled: (summary, first-third RSS mean, last-third RSS mean,
    first-third most fds, last-third most fds)."""
    warm = settled(soak)
    life = [s for s in soak.samples if s[1] == soak.lives]
    last = [s for s in life if s[0] >= warm]
    assert len(last) >= 9, f"too few samples of the last server life once settled: {len(last)}"
    third = len(last) // 3
    early, late = last[:third], last[-third:]
    rss0, rss1 = statistics.mean(s[2] for s in early), statistics.mean(s[2] for s in late)
    fd0, fd1 = max(s[3] for s in early), max(s[3] for s in late)
    at = [s[0] - soak.life_started[0] for s in (life[0], last[0], last[-1])]
    text = (
        f"server life {soak.lives} (up at {at[0]:.0f}s, settled at {at[1]:.0f}s, to {at[2]:.0f}s; "
        f"{len(last)} samples settled): RSS {rss0 / 2**20:.0f} -> "
        f"{rss1 / 2**20:.0f} MiB (max {max(s[2] for s in last) / 2**20:.0f}), fds "
        f"{min(s[3] for s in early)}..{fd0} -> {min(s[3] for s in late)}..{fd1}"
    )
    return text, int(rss0), int(rss1), fd0, fd1


def progress(text: str) -> None:
    """A line on stderr as the audit goes (the report itself prints at the end)."""
    print(f"[soak {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def test_eight_tenants_train_and_sample_through_faults_and_lose_nothing(soak: Soak) -> None:
    injected = soak.run()
    with (soak.root / "server-samples.csv").open("w") as out:  # to plot; its path is printed
        out.writelines(
            f"{t - soak.life_started[0]:.1f},{life},{rss},{fds}\n"
            for t, life, rss, fds in soak.samples
        )
    progress(f"faults over, auditing ({sum(len(t.acks()) for t in soak.tenants)} acks)")
    ids = audit_isolation(soak)
    progress("isolation audited")
    counts = {}
    for tenant in soak.tenants:
        counts[tenant.name] = audit_tenant(soak, tenant, ids)
        progress(f"{tenant.name} audited: {counts[tenant.name]}")
    text, rss0, rss1, fd0, fd1 = flatness(soak)
    lives = Counter(s[1] for s in soak.samples)
    ended: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for tenant in soak.tenants:
        ended.update(tenant.ended)
        errors.update(tenant.errors())
    print(  # shown with -s
        f"\n{SECONDS:.0f}s, {soak.lives} server lives ({dict(lives)} samples), faults "
        f"{injected}, store requests {len(soak.stack.proxy.faults.log)}\n"
        f"client processes: {sum(t.starts for t in soak.tenants)} started, ended {dict(ended)}; "
        f"errors recovered from {dict(errors)}\n"
        + "\n".join(f"{name}: {c}" for name, c in counts.items())
        + f"\n{text}\nsamples (s, life, rss, fds): {soak.root / 'server-samples.csv'}"
    )
    assert set(ended) <= {"done", "killed"}, f"clients ended otherwise: {dict(ended)}"
    assert rss1 - rss0 < RSS_GROWTH, text
    assert fd1 <= fd0 + FD_SLACK, text
