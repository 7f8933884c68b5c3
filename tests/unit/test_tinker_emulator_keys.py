"""The tinker emulator's one request check of its own (emulators/tinker/keys.py): which API
keys it accepts. Without a configured key, any key of the SDK's shape (`tml-...`, or a JWT,
`eyJ...`); with one, that key alone. Every accepted key is the one open tenant, named by the
key's sha256 (worked out here with hashlib), as the guard's rate limit reads it."""

from __future__ import annotations

import hashlib

import pytest

from arthex.apps.server.guard import OPEN_TENANT
from arthex.core.errors import InvalidInputError
from arthex.emulators.tinker.keys import OpenKeys, check_api_key


def digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


@pytest.mark.parametrize("key", ["tml-local", "tml-", "eyJhbGciOiJIUzI1NiJ9.e30.sig"])
def test_without_a_configured_key_any_key_of_the_sdks_shape_is_the_open_tenant(key: str) -> None:
    assert OpenKeys(None).identify(key) == (OPEN_TENANT, digest(key))


@pytest.mark.parametrize("key", ["", "sk-local", "TML-local", "xtml-local", "tml", "eyj.x"])
def test_without_a_configured_key_other_keys_are_refused(key: str) -> None:
    assert OpenKeys(None).identify(key) is None


def test_a_configured_key_accepts_itself_alone() -> None:
    keys = OpenKeys("tml-secret")
    assert keys.identify("tml-secret") == (OPEN_TENANT, digest("tml-secret"))
    for other in ["tml-other", "tml-secre", "tml-secret2", "eyJhbGciOiJIUzI1NiJ9", ""]:
        assert keys.identify(other) is None, other


def test_a_configured_key_of_the_sdks_shape_is_taken_and_another_refused_naming_its_start() -> None:
    for key in [None, "tml-local", "eyJhbGciOiJIUzI1NiJ9"]:
        check_api_key(key)
    for key, start in [("sk-live-123", "sk-l"), ("abc", "abc"), ("", "")]:
        with pytest.raises(InvalidInputError) as caught:
            check_api_key(key)
        assert str(caught.value) == (
            f"api_key must start with 'tml-' as the tinker SDK requires, got {start!r}..."
        )
