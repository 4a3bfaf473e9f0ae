"""Bearer tokens of the local cluster: one admin token, and signed tokens for ServiceAccounts.

A ServiceAccount token is `dtsa.<base64 of "namespace:name:expiry">.<HMAC>`, signed with a key that lives only
in the server process (and its state directory, so a restarted server still accepts the tokens it issued). The
account must still exist when the token is used, as with the real server's bound tokens.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class SATokenClaims:
    namespace: str
    name: str
    expires: int  # unix seconds; 0 = never


class TokenAuthority:
    def __init__(self, *, admin_token: str | None = None, signing_key: bytes | None = None) -> None:
        self.admin_token = admin_token or secrets.token_urlsafe(32)
        self.signing_key = signing_key or secrets.token_bytes(32)

    def _sign(self, payload: bytes) -> str:
        return base64.urlsafe_b64encode(hmac.new(self.signing_key, payload, hashlib.sha256).digest()).decode(
        ).rstrip("=")

    def issue(self, namespace: str, name: str, *, expiration_seconds: int = 0) -> tuple[str, int]:
        """A token for the ServiceAccount and its expiry (unix seconds, 0 = never)."""
        expires = int(time.time()) + expiration_seconds if expiration_seconds else 0
        payload = f"{namespace}:{name}:{expires}".encode()
        body = base64.urlsafe_b64encode(payload).decode().rstrip("=")
        return f"dtsa.{body}.{self._sign(payload)}", expires

    def verify_service_account(self, token: str) -> SATokenClaims | None:
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != "dtsa":
            return None
        try:
            payload = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        except ValueError:
            return None
        if not hmac.compare_digest(self._sign(payload), parts[2]):
            return None
        namespace, name, expires = payload.decode().split(":")
        if int(expires) and int(expires) < time.time():
            return None
        return SATokenClaims(namespace, name, int(expires))
