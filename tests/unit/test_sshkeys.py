"""The per-job key pair: ed25519 in OpenSSH formats that ssh and paramiko read; the private half hidden."""

from __future__ import annotations

import io

import paramiko
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_ssh_private_key,
    load_ssh_public_key,
)

from distributetrain.manager import sshkeys


def test_private_and_public_halves_match() -> None:
    keys = sshkeys.generate("job-a@distributetrain")
    private = load_ssh_private_key(keys.private_openssh(), password=None)
    assert isinstance(private, Ed25519PrivateKey)
    kind, blob, comment = keys.public.split(" ")
    assert (kind, comment) == ("ssh-ed25519", "job-a@distributetrain")
    public = load_ssh_public_key(f"{kind} {blob}".encode())
    assert isinstance(public, Ed25519PublicKey)
    assert public.public_bytes(Encoding.Raw, PublicFormat.Raw) == \
        private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def test_paramiko_reads_the_private_key_and_derives_the_same_public_key() -> None:
    keys = sshkeys.generate("job")
    key = paramiko.Ed25519Key.from_private_key(io.StringIO(keys.private_openssh().decode()))
    assert f"{key.get_name()} {key.get_base64()}" == " ".join(keys.public.split(" ")[:2])


def test_private_key_never_in_repr_or_str() -> None:
    keys = sshkeys.generate("job")
    secret_body = keys.private_openssh().decode().splitlines()[1]
    for text in (repr(keys), str(keys), f"{keys}", repr([keys])):
        assert "OPENSSH PRIVATE KEY" not in text
        assert secret_body not in text
        assert "<hidden>" in text


def test_authorized_keys_admits_only_this_key_restricted() -> None:
    keys = sshkeys.generate("job")
    assert keys.authorized_keys() == f"restrict {keys.public}\n"


def test_every_job_gets_a_fresh_key() -> None:
    assert sshkeys.generate("a").public.split()[1] != sshkeys.generate("a").public.split()[1]
