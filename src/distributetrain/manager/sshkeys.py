"""The per-job SSH key pair: ed25519, generated in memory, never written to disk, an image or a log.

The private half lives only in the job's Secret. `KeyPair`'s repr and str hide it, so an accidental log line
or traceback cannot leak it; read it explicitly with `private_openssh()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

KEY_TYPE = "ssh-ed25519"


@dataclass(frozen=True)
class KeyPair:
    """An OpenSSH-format ed25519 key pair. `public` is one `ssh-ed25519 AAAA... COMMENT` line."""

    public: str
    _private: bytes = field(repr=False)

    def private_openssh(self) -> bytes:
        """The private key as an OpenSSH-format PEM block (what ssh and paramiko read)."""
        return self._private

    def authorized_keys(self) -> str:
        """authorized_keys admitting only this key, without forwarding or pty (horovodrun needs neither)."""
        return f"restrict {self.public}\n"

    def __repr__(self) -> str:
        return f"KeyPair(public={self.public!r}, private=<hidden>)"

    __str__ = __repr__


def generate(comment: str) -> KeyPair:
    """A fresh key pair; `comment` (e.g. the job name) ends the public line, tracing a key to its job."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return KeyPair(public=f"{public.decode()} {comment}".strip(), _private=private)
