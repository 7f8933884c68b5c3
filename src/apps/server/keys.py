"""The training server's API keys: who may call it, and which tenant each key speaks for.

Format (a file, or the `ARTHEX_SERVER_KEYS` environment variable): one entry per line (the
variable may also separate entries with commas), `#` starts a comment, blank lines are skipped.

    tenant:KEY                     a plaintext key (at least 16 characters)
    tenant:sha256:<64 hex digits>  the SHA-256 of a key, so the file need not hold the secret

Keys cannot contain spaces, `#` or `,` (`new_key` makes URL-safe ones).

A tenant may have several keys (rotation); a key belongs to one tenant. Tenant names are path
segments on the server (its state lives under them), so they follow `validate_name`. Only the
SHA-256 digests are kept in memory; a presented key is hashed and compared with every stored
digest in constant time, so timing tells nothing about which key, or how much of one, matched.
Keys are bearer secrets with high entropy, which is why a fast hash is enough here.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import shlex
import sys
from pathlib import Path

import attrs

from ...core.errors import InvalidInputError, InvalidNameError
from ...core.identity import validate_name

KEYS_ENV = "ARTHEX_SERVER_KEYS"
HASH_PREFIX = "sha256:"
MIN_KEY_LENGTH = 16
_HEX_DIGEST = re.compile(r"[0-9a-fA-F]{64}")


def hash_key(key: str) -> str:
    """The line form of a key's digest: `sha256:<hex>`."""
    return HASH_PREFIX + hashlib.sha256(key.encode()).hexdigest()


# prints the key to give a client, and the line (its hash) to put in the keys file
NEW_KEY_COMMAND = (
    f"{shlex.quote(sys.executable)} -c "
    "\"from arthex.apps.server.keys import new_key; print(*new_key('team-a'))\""
)


def new_key(tenant: str) -> tuple[str, str]:
    """A fresh random key for `tenant` and the keys-file line that stores only its hash."""
    validate_name(tenant, "tenant")
    key = "ak-" + secrets.token_urlsafe(32)
    return key, f"{tenant}:{hash_key(key)}"


@attrs.frozen
class KeyRing:
    """(tenant, sha256 digest) pairs; `tenant_for` answers who a presented key is."""

    entries: tuple[tuple[str, bytes], ...]

    @property
    def tenants(self) -> frozenset[str]:
        return frozenset(tenant for tenant, _ in self.entries)

    def tenant_for(self, presented: str) -> str | None:
        found = self.identify(presented)
        return found[0] if found is not None else None

    def identify(self, presented: str) -> tuple[str, bytes] | None:
        """(tenant, the key's digest) for a key of this ring, else None. The digest names the
        key without being it (rate limits are per key)."""
        digest = hashlib.sha256(presented.encode()).digest()
        found: tuple[str, bytes] | None = None
        for tenant, stored in self.entries:  # no early exit: every digest is compared
            if hmac.compare_digest(digest, stored) and found is None:
                found = (tenant, stored)
        return found

    def overlaps(self, other: KeyRing) -> bool:
        """Whether a key is in both rings (an admin key must not also be a tenant's)."""
        return bool({d for _, d in self.entries} & {d for _, d in other.entries})

    @classmethod
    def parse(cls, text: str, source: str) -> KeyRing:
        entries: list[tuple[str, bytes]] = []
        owners: dict[bytes, str] = {}
        for number, raw in enumerate(text.replace(",", "\n").splitlines(), start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            tenant, sep, secret = line.partition(":")
            where = f"{source}, entry {number}"
            if not sep or not secret:
                raise InvalidInputError(f"{where}: expected 'tenant:key' or 'tenant:sha256:<hex>'")
            try:
                validate_name(tenant.strip(), "tenant")
            except InvalidNameError as exc:
                raise InvalidInputError(f"{where}: {exc}") from None
            digest = _digest(secret.strip(), where)
            if digest in owners:
                raise InvalidInputError(
                    f"{where}: this key is listed twice (tenants {owners[digest]!r} and "
                    f"{tenant.strip()!r}); a key must belong to exactly one tenant"
                )
            owners[digest] = tenant.strip()
            entries.append((tenant.strip(), digest))
        if not entries:
            raise InvalidInputError(f"{source} holds no API keys; add lines 'tenant:key'")
        return cls(tuple(entries))

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> KeyRing:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise InvalidInputError(f"cannot read the API keys file {str(path)!r}: {exc}") from exc
        return cls.parse(text, f"keys file {str(path)!r}")

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None) -> KeyRing:
        """From `path` when given, else from the `ARTHEX_SERVER_KEYS` variable."""
        if path is not None:
            return cls.from_file(path)
        text = os.environ.get(KEYS_ENV)
        if not text:
            raise InvalidInputError(
                f"no API keys: pass a keys file (lines 'tenant:key') or set {KEYS_ENV}; the "
                f"server never runs open. Make a key and its line with: {NEW_KEY_COMMAND}"
            )
        return cls.parse(text, f"${KEYS_ENV}")


def _digest(secret: str, where: str) -> bytes:
    if secret.startswith(HASH_PREFIX):
        hexdigest = secret[len(HASH_PREFIX) :]
        if _HEX_DIGEST.fullmatch(hexdigest) is None:
            raise InvalidInputError(f"{where}: 'sha256:' must be followed by 64 hex digits")
        return bytes.fromhex(hexdigest)
    if len(secret) < MIN_KEY_LENGTH or any(c.isspace() for c in secret):
        raise InvalidInputError(
            f"{where}: a key must be at least {MIN_KEY_LENGTH} characters without spaces; "
            "make one with arthex.apps.server.keys.new_key(tenant)"
        )
    return hashlib.sha256(secret.encode()).digest()
