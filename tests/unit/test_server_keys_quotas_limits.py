"""The training server's key ring, per-tenant quotas and limits at their edges: the entry a
bad keys line is named by, the key a new tenant gets, the bound an option is refused at, and
when a tenant's jobs or bytes are over its quota. Expected values are worked out by hand
(hashlib for digests, byte counts of files written here)."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from arthex.adapters.serverless import QuotaExceededError
from arthex.apps.server.keys import KEYS_ENV, KeyRing, new_key
from arthex.apps.server.limits import ServerLimits
from arthex.apps.server.quotas import TenantQuotas
from arthex.core.errors import InvalidInputError

A16 = "a" * 16
B16 = "b" * 16


def refusal(text: str) -> str:
    with pytest.raises(InvalidInputError) as caught:
        KeyRing.parse(text, "keys")
    return str(caught.value)


def test_comments_blank_lines_and_commas_separate_entries_numbered_from_one() -> None:
    ring = KeyRing.parse(f"# keys\n\nteam-a:{A16} # first\nteam-b:{B16},team-c:{'c' * 16}", "k")
    assert [tenant for tenant, _ in ring.entries] == ["team-a", "team-b", "team-c"]
    assert ring.tenant_for(A16) == "team-a"
    assert ring.entries[0][1] == hashlib.sha256(A16.encode()).digest()
    assert refusal(f"team-a:{A16}\nbad") == (
        "keys, entry 2: expected 'tenant:key' or 'tenant:sha256:<hex>'"
    )
    assert refusal("team-a:") == "keys, entry 1: expected 'tenant:key' or 'tenant:sha256:<hex>'"
    # a second '#' is still inside the comment
    assert KeyRing.parse(f"team-a:{A16} # a # b", "k").tenant_for(A16) == "team-a"


def test_a_bad_tenant_a_short_key_and_a_shared_key_are_named_by_entry() -> None:
    assert refusal(f"bad name:{A16}") == (
        "keys, entry 1: tenant 'bad name' is not a safe path segment: use letters, digits, "
        "'_', '-' and '.', not starting with '.' or '-' (no slashes, '..', spaces or control "
        "characters)"
    )
    assert refusal("team-a:" + "a" * 15) == (
        "keys, entry 1: a key must be at least 16 characters without spaces; make one with "
        "arthex.apps.server.keys.new_key(tenant)"
    )
    assert KeyRing.parse(f"team-a:{A16}", "k").tenant_for(A16) == "team-a"  # 16 is enough
    assert refusal(f"team-a:{A16}\nteam-b:{A16}") == (
        "keys, entry 2: this key is listed twice (tenants 'team-a' and 'team-b'); a key must "
        "belong to exactly one tenant"
    )


def test_keys_load_from_the_file_given_else_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "keys"
    path.write_text(f"team-a:{A16}\n")
    assert KeyRing.load(path).tenant_for(A16) == "team-a"
    monkeypatch.setenv(KEYS_ENV, "team-a:short")
    with pytest.raises(InvalidInputError, match=r"^\$ARTHEX_SERVER_KEYS, entry 1: a key must"):
        KeyRing.load()


def test_a_new_key_is_a_prefixed_urlsafe_secret_and_its_line_holds_only_its_hash() -> None:
    key, line = new_key("team-a")
    assert key.startswith("ak-") and len(key) == 3 + 43  # 32 random bytes in base64url
    assert line == "team-a:sha256:" + hashlib.sha256(key.encode()).hexdigest()
    with pytest.raises(InvalidInputError, match=r"^tenant 'bad name' is not a safe"):
        new_key("bad name")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_headers", 7, "--max-headers must be a whole number from 8 to 10000, got 7"),
        ("max_headers", 10_001, "--max-headers must be a whole number from 8 to 10000, got 10001"),
        ("max_headers", 8.5, "--max-headers must be a whole number from 8 to 10000, got 8.5"),
        ("max_headers", True, "--max-headers must be a whole number from 8 to 10000, got True"),
        ("max_headers", "9", "--max-headers must be a whole number from 8 to 10000, got '9'"),
        ("rate_per_s", -1, "--rate-limit must be a number from 0 to 1000000, got -1"),
        ("lease_ttl_s", 0.5, "--lease-ttl must be a number from 1 to 86400, got 0.5"),
        ("lease_ttl_s", float("nan"), "--lease-ttl must be a number from 1 to 86400, got nan"),
        ("keep_alive_s", 0, "--keep-alive must be a whole number from 1 to 3600, got 0"),
        ("keep_alive_s", 1.5, "--keep-alive must be a whole number from 1 to 3600, got 1.5"),
    ],
)
def test_a_limit_out_of_its_bound_is_refused_naming_the_option(
    field: str, value: object, message: str
) -> None:
    with pytest.raises(InvalidInputError) as caught:
        ServerLimits(**{field: value})  # type: ignore[arg-type]
    assert str(caught.value) == message


def test_limits_at_their_bounds_are_taken() -> None:
    limits = ServerLimits(max_headers=10_000, rate_per_s=0.5, lease_ttl_s=86_400)
    assert (limits.max_headers, limits.rate_per_s, limits.lease_ttl_s) == (10_000, 0.5, 86_400)


def test_a_tenants_jobs_are_counted_up_and_down(tmp_path: Path) -> None:
    quotas = TenantQuotas(ServerLimits(max_jobs_per_tenant=1), tmp_path)
    quotas.admit_job("team-a")
    quotas.job_started("team-a")
    quotas.job_started("team-a")
    quotas.job_ended("team-a")
    with pytest.raises(QuotaExceededError) as caught:
        quotas.admit_job("team-a")  # one still runs
    assert str(caught.value) == (
        "this API key's tenant has 1 training jobs running or queued, the most this server "
        "allows at once (1); wait for one to end"
    )
    quotas.admit_job("team-b")
    quotas.job_ended("team-a")
    quotas.admit_job("team-a")


def test_storage_is_full_at_the_quota_and_the_next_checkpoint_is_its_average(
    tmp_path: Path,
) -> None:
    model = tmp_path / "team-a" / "m"
    model.mkdir(parents=True)
    (model / "ckpt").write_bytes(b"x" * 10)
    (tmp_path / "team-b").mkdir()
    (tmp_path / "team-link").symlink_to(tmp_path / "team-a", target_is_directory=True)
    quotas = TenantQuotas(ServerLimits(max_checkpoint_bytes_per_tenant=10), tmp_path)
    assert quotas.bytes_by_tenant() == {"team-a": 10, "team-b": 0}  # links are not followed
    with pytest.raises(QuotaExceededError) as caught:
        quotas.check_storage("team-a", 0)
    assert str(caught.value) == (
        "this API key's tenant keeps 10 bytes of checkpoints on this server; the quota is 10 "
        "bytes: delete checkpoints (model.delete_checkpoints()) or ask the operator for more"
    )
    # 10 bytes in 3 checkpoints: the next is taken to need 3 (whole bytes): 13 fits in 13
    asyncio.run(
        TenantQuotas(ServerLimits(max_checkpoint_bytes_per_tenant=13), tmp_path).admit_checkpoint(
            "team-a", model, 3
        )
    )
    # one checkpoint of 10: the next needs 10, and 20 does not fit in 19
    with pytest.raises(QuotaExceededError, match="the next checkpoint needs about 10 more"):
        asyncio.run(
            TenantQuotas(
                ServerLimits(max_checkpoint_bytes_per_tenant=19), tmp_path
            ).admit_checkpoint("team-a", model, 1)
        )


def test_a_keys_file_is_named_when_unreadable_and_in_each_bad_entry(tmp_path: Path) -> None:
    missing = tmp_path / "none"
    with pytest.raises(InvalidInputError) as caught:
        KeyRing.from_file(missing)
    assert str(caught.value).startswith(
        f"cannot read the API keys file {str(missing)!r}: [Errno 2]"
    )
    bad = tmp_path / "keys"
    bad.write_text("team-a:short\n")
    with pytest.raises(InvalidInputError) as caught:
        KeyRing.from_file(bad)
    assert str(caught.value).startswith(f"keys file {str(bad)!r}, entry 1: a key must")


def test_rings_overlap_only_when_they_share_a_key() -> None:
    ring = KeyRing.parse(f"team-a:{A16}", "k")
    assert ring.overlaps(KeyRing.parse(f"admin:{A16}", "k"))
    assert not ring.overlaps(KeyRing.parse(f"admin:{B16}", "k"))
