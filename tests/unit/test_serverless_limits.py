"""The training server's operator parts without sockets: the token bucket (on a clock the test
moves), the trainer lease table, the tenant quotas, the audit log file, the option checks,
and how the client treats rate limits, quotas and a model another trainer holds."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path
from typing import Any

import httpx
import pytest

from arthex.adapters.serverless import QuotaExceededError, ServerlessBackend
from arthex.adapters.serverless.client_http import raise_for_status
from arthex.apps.cli.serve import parse
from arthex.apps.server.audit import AuditLog
from arthex.apps.server.leases import LeaseTable, parse_claim
from arthex.apps.server.limits import ServerLimits
from arthex.apps.server.options import ServeOptions, audit_of
from arthex.apps.server.quotas import TenantQuotas, disk_bytes
from arthex.apps.server.ratelimit import TokenBuckets
from arthex.core.errors import BackendError, CorruptDataError, InvalidInputError, RunBusyError
from arthex.core.identity import ModelSpec, RunRef


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# --- token buckets --------------------------------------------------------------------------


def test_a_bucket_grants_its_burst_then_one_token_per_interval() -> None:
    clock = Clock()
    buckets = TokenBuckets(rate=2.0, burst=3, clock=clock)
    assert [buckets.take("k") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("k") == pytest.approx(0.5)  # one token every 1/2 s
    assert buckets.take("other") == 0.0, "each key has its own bucket"
    clock.now += 0.25
    assert buckets.take("k") == pytest.approx(0.25)
    clock.now += 0.25
    assert buckets.take("k") == 0.0
    clock.now += 100
    assert [buckets.take("k") for _ in range(4)][-1] > 0, "refill stops at the burst"
    assert TokenBuckets.retry_after(0.01) == "1" and TokenBuckets.retry_after(2.5) == "3"


def test_a_rate_of_zero_never_refuses() -> None:
    buckets = TokenBuckets(rate=0, burst=1, clock=Clock())
    assert all(buckets.take("k") == 0.0 for _ in range(1000))


# --- leases ---------------------------------------------------------------------------------

A_LEASE, B_LEASE = "a" * 24, "b" * 24


def test_one_trainer_holds_a_model_until_it_releases_or_goes_quiet(tmp_path: Path) -> None:
    clock = Clock()
    table = LeaseTable(tmp_path / "leases.json", ttl_s=30, clock=clock)
    first = table.claim("m1", A_LEASE, "pid 1 on alpha", "p/agent")
    with pytest.raises(RunBusyError, match=r"pid 1 on alpha.*p/agent|p/agent.*pid 1 on alpha"):
        table.claim("m1", B_LEASE, "pid 2 on bravo", "p/agent")
    with pytest.raises(RunBusyError):
        table.require("m1", None, "p/agent")  # a training call without the lease
    assert table.claim("m2", B_LEASE, "pid 2 on bravo", "p/other").id == B_LEASE
    clock.now += 29
    table.renew("m1", A_LEASE)  # a read by the holder
    clock.now += 29
    table.require("m1", A_LEASE, "p/agent")  # still held: renewed 29 s ago
    assert table.live("m1") == first.__class__(
        id=A_LEASE, holder="pid 1 on alpha", since=first.since, expires_at=clock.now + 30
    )
    table.renew("m1", B_LEASE)  # someone else's read changes nothing
    clock.now += 31
    assert table.live("m1") is None, "expired 30 s after the holder's last call"
    assert table.claim("m1", B_LEASE, "pid 2 on bravo", "p/agent").holder == "pid 2 on bravo"
    assert not table.release("m1", A_LEASE), "only the holder releases"
    assert table.release("m1", B_LEASE)
    table.require("m1", None, "p/agent")  # free: an anonymous call passes, takes nothing
    assert table.live("m1") is None


def test_leases_survive_a_restart_with_a_fresh_ttl(tmp_path: Path) -> None:
    clock = Clock()
    LeaseTable(tmp_path / "leases.json", ttl_s=30, clock=clock).claim(
        "m1", A_LEASE, "pid 1 on alpha", "p/agent"
    )
    clock.now += 3600  # the server was down for an hour
    reloaded = LeaseTable(tmp_path / "leases.json", ttl_s=30, clock=clock)
    reloaded.load()
    lease = reloaded.live("m1")
    assert lease is not None and lease.holder == "pid 1 on alpha"
    assert lease.expires_at == clock.now + 30
    (tmp_path / "leases.json").write_text("{broken")
    with pytest.raises(CorruptDataError, match="move it away"):
        LeaseTable(tmp_path / "leases.json", ttl_s=30).load()


@pytest.mark.parametrize(
    "claim",
    [
        "not-an-object",
        {"id": "short"},
        {"id": "x" * 65},
        {"id": "has space in it!!!!"},
        {"id": A_LEASE, "holder": "line\nbreak"},
        {"id": A_LEASE, "holder": "h" * 201},
        {"id": A_LEASE, "holder": 7},
    ],
)
def test_bad_lease_claims_are_refused(claim: object) -> None:
    with pytest.raises(InvalidInputError, match="lease"):
        parse_claim(claim)


# --- quotas ---------------------------------------------------------------------------------


def test_a_model_being_registered_holds_its_place_under_the_quota(tmp_path: Path) -> None:
    quotas = TenantQuotas(ServerLimits(max_models_per_tenant=2), tmp_path)
    with quotas.registering("alice", ("p", "a"), registered=1):
        with quotas.registering("alice", ("p", "a"), registered=1):
            pass  # the same name again: no second place
        refused = quotas.registering("alice", ("p", "b"), registered=1)
        with pytest.raises(QuotaExceededError, match=r"\(2\)"), refused:
            pass
        with quotas.registering("bob", ("p", "b"), registered=1):
            pass  # another tenant's count
    with quotas.registering("alice", ("p", "b"), registered=1):
        pass


def test_jobs_and_bytes_are_counted_per_tenant(tmp_path: Path) -> None:
    quotas = TenantQuotas(
        ServerLimits(max_jobs_per_tenant=1, max_checkpoint_bytes_per_tenant=1000), tmp_path
    )
    quotas.job_started("alice")
    with pytest.raises(QuotaExceededError, match="wait for one to end"):
        quotas.admit_job("alice")
    quotas.admit_job("bob")
    quotas.job_ended("alice")
    quotas.admit_job("alice")
    model = tmp_path / "alice" / "models" / "m1"
    (model / "0000").mkdir(parents=True)
    (model / "0000" / "weights").write_bytes(b"x" * 400)
    (model / "0001").mkdir()
    (model / "0001" / "weights").write_bytes(b"x" * 400)
    os.symlink(model / "0001" / "weights", model / "link")  # not counted twice
    assert disk_bytes(tmp_path / "alice") == 800
    assert quotas.bytes_by_tenant() == {"alice": 800}
    with pytest.raises(QuotaExceededError, match="delete checkpoints") as refused:
        asyncio.run(quotas.admit_checkpoint("alice", model, checkpoints=2))  # 800 + 400 > 1000
    assert refused.value.status == 507
    asyncio.run(quotas.admit_checkpoint("alice", model, checkpoints=4))  # 800 + 200 fits


# --- audit log ------------------------------------------------------------------------------


def test_the_audit_log_is_private_json_lines_rotated_by_size(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit" / "audit.jsonl", max_bytes=4096, backups=2)
    log.open()
    try:
        for index in range(200):
            log.record(
                tenant="alice",
                method="POST",
                route="/preview/models",
                status=201,
                duration_ms=1.25,
                model_id=f"m{index:024d}",
            )
    finally:
        log.close()
    files = sorted(p.name for p in (tmp_path / "audit").iterdir())
    assert files == ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"]
    lines = []
    for name in files:
        path = tmp_path / "audit" / name
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert path.stat().st_size <= 4096
        lines += [json.loads(line) for line in path.read_text().splitlines()]
    assert set(lines[0]) == {
        "time", "tenant", "method", "route", "status", "model_id", "job_id", "duration_ms"
    }  # fmt: skip
    kept = sorted(int(line["model_id"][1:]) for line in lines)
    assert kept == list(range(200 - len(kept), 200)), "the newest lines are kept, none torn"


# --- options --------------------------------------------------------------------------------


def test_options_build_the_limits_and_the_audit_log(tmp_path: Path) -> None:
    options: ServeOptions = parse(
        [
            "--state-dir", str(tmp_path), "--rate-limit", "2.5", "--max-models-per-tenant", "3",
            "--max-checkpoint-bytes-per-tenant", "1000000", "--lease-ttl", "30",
            "--allow-base-model", "a", "--allow-base-model", "b", "--log-level", "DEBUG",
        ]
    )  # fmt: skip
    assert options.limits == ServerLimits(
        rate_per_s=2.5,
        max_models_per_tenant=3,
        max_checkpoint_bytes_per_tenant=1_000_000,
        lease_ttl_s=30.0,
    )
    assert options.allow_base_model == ("a", "b") and options.log_level == "debug"
    audit = audit_of(options)
    assert audit is not None and audit.path == tmp_path / "audit.jsonl"
    assert audit_of(parse(["--audit-log", "off"])) is None
    assert parse([]) == ServeOptions(), "the command's defaults are the settings' defaults"


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["--rate-burst", "0"], "--rate-burst"),
        (["--lease-ttl", "0"], "--lease-ttl"),
        (["--max-headers", "3"], "--max-headers"),
        (["--audit-max-bytes", "10"], "--audit-max-bytes"),
        (["--max-jobs-per-tenant", "1.5"], "--max-jobs-per-tenant"),
    ],
)
def test_an_option_out_of_bounds_ends_with_one_line(
    argv: list[str], option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        parse(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and option in err


# --- the client -----------------------------------------------------------------------------


def error(status: int, kind: str, message: str = "said so") -> httpx.Response:
    return httpx.Response(status, json={"error": {"message": message, "type": kind}})


@pytest.mark.parametrize(
    ("status", "kind", "raised"),
    [
        (409, "run_busy", RunBusyError),
        (429, "insufficient_quota", QuotaExceededError),
        (507, "insufficient_storage", QuotaExceededError),
        (429, "rate_limit_exceeded", BackendError),
    ],
)
def test_client_statuses_for_leases_quotas_and_rates(
    status: int, kind: str, raised: type[Exception]
) -> None:
    with pytest.raises(raised, match="said so"):
        raise_for_status("POST", "/p", error(status, kind))


def test_a_rate_limited_post_is_retried_and_a_quota_refusal_is_not() -> None:
    log: list[str] = []

    def respond(request: httpx.Request) -> httpx.Response:
        log.append(request.method)
        body: dict[str, Any] = json.loads(request.content or b"{}")
        if body.get("name") == "rated" and log.count("POST") == 1:
            response = error(429, "rate_limit_exceeded")
            response.headers["Retry-After"] = "0"
            return response
        if body.get("name") == "over":
            return error(429, "insufficient_quota", "has 100 models")
        assert request.headers["X-Arthex-Lease"] and request.headers["X-Arthex-Lease-Holder"]
        assert "lease" not in body  # the hosted API's register body; the lease rides in headers
        return httpx.Response(201, json={"id": "m" + "0" * 24, "capabilities": []})

    backend = ServerlessBackend(
        "http://server.test", "k" * 20, backoff_s=0, transport=httpx.MockTransport(respond)
    )

    async def main() -> None:
        try:
            await backend.register(ModelSpec(run=RunRef("p", "rated")))
            with pytest.raises(QuotaExceededError, match="100 models"):
                await backend.register(ModelSpec(run=RunRef("p", "over")))
        finally:
            await backend.close()

    asyncio.run(main())
    assert log == ["POST", "POST", "POST"], "one retry for the rate limit, none for the quota"
