"""The only module that imports paramiko: does a worker's sshd accept the job key yet?

The launcher in the chief asks this for every worker before it starts horovodrun, so that a worker whose sshd
never came up is reported by name (exit 73) instead of surfacing as an obscure Horovod ssh failure.
"""

from __future__ import annotations

import getpass
import logging
import socket
import time
from pathlib import Path

import paramiko

from distributetrain.errors import InvalidInput, SshUnreachable

log = logging.getLogger(__name__)


def load_private_key(path: Path) -> paramiko.PKey:
    """The job's ed25519 private key, in OpenSSH format (what sshkeys.py writes into the Secret)."""
    try:
        return paramiko.Ed25519Key.from_private_key_file(str(path))
    except FileNotFoundError as err:
        raise InvalidInput(
            f"ssh key {path}: no such file; the job's Secret must be mounted and installed by the entrypoint"
        ) from err
    except (paramiko.SSHException, ValueError) as err:
        raise InvalidInput(f"ssh key {path}: not an unencrypted OpenSSH ed25519 key ({err})") from err


def _try_once(host: str, port: int, user: str, key: paramiko.PKey, timeout: float) -> None:
    """One full handshake and public-key authentication; raises whatever went wrong."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        transport = paramiko.Transport(sock)
        try:
            transport.banner_timeout = timeout
            transport.auth_timeout = timeout
            transport.start_client(timeout=timeout)
            # Host keys are generated per pod at start, so there is nothing to pin them to; what matters here
            # is that the worker accepts *our* key, which only the job's Secret holds.
            transport.auth_publickey(user, key)
            if not transport.is_authenticated():
                raise paramiko.AuthenticationException("public key not accepted")
        finally:
            transport.close()


def _describe(err: BaseException) -> str:
    if isinstance(err, paramiko.AuthenticationException):
        return f"the job key was refused ({err})"
    if isinstance(err, ConnectionRefusedError):
        return "connection refused (sshd not listening yet)"
    if isinstance(err, TimeoutError | socket.timeout):
        return "timed out"
    return f"{type(err).__name__}: {err}"


def wait_until_accepts(
    host: str,
    port: int,
    key: Path,
    *,
    attempts: int,
    delay: float,
    timeout: float,
    user: str | None = None,
) -> None:
    """Return once `host:port` accepts the private key at `key` for `user` (default: the current user).

    Tries `attempts` times, `delay` seconds apart, each connection bounded by `timeout` seconds; then raises
    SshUnreachable naming the host, the port, the attempts made and the last error seen.
    """
    if attempts < 1:
        raise InvalidInput(f"ssh attempts: {attempts} asked, at least 1 is needed")
    pkey = load_private_key(key)
    login = user or getpass.getuser()
    last = "no attempt made"
    for attempt in range(1, attempts + 1):
        try:
            _try_once(host, port, login, pkey, timeout)
        except (OSError, EOFError, paramiko.SSHException) as err:
            last = _describe(err)
            log.info("ssh %s@%s:%d attempt %d/%d: %s", login, host, port, attempt, attempts, last)
            if attempt < attempts:
                time.sleep(delay)
            continue
        log.info("ssh %s@%s:%d accepts the job key (attempt %d)", login, host, port, attempt)
        return
    raise SshUnreachable(
        f"worker {host}:{port} did not accept the job key for user {login!r} after {attempts} attempts "
        f"({delay:g}s apart): {last}. Check that the worker pod is Running, read its sshd log with "
        f"`kubectl logs POD`, and that the job's Secret is mounted at the same path in every pod."
    )
