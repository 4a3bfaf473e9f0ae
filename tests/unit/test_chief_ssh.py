"""ssh.py against real sockets on loopback: a port nobody listens on, a listener that is not sshd, bad keys.
(A real sshd accepting and refusing the key is covered by tests/e2e/test_training_local.py.)"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from distributetrain.chief import ssh
from distributetrain.errors import InvalidInput, SshUnreachable
from distributetrain.manager import sshkeys


def test_a_closed_port_is_reported_with_host_port_attempts_and_cause(tmp_path: Path) -> None:
    key = tmp_path / "k"
    key.write_bytes(sshkeys.generate("unit").private_openssh())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(SshUnreachable) as err:
        ssh.wait_until_accepts("127.0.0.1", port, key, attempts=2, delay=0.01, timeout=1, user="someone")
    message = str(err.value)
    assert f"127.0.0.1:{port}" in message and "after 2 attempts" in message and "'someone'" in message
    assert "connection refused" in message


def test_a_listener_that_is_not_sshd_is_not_taken_for_one(tmp_path: Path) -> None:
    key = tmp_path / "k"
    key.write_bytes(sshkeys.generate("unit").private_openssh())
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]

        def answer_garbage() -> None:
            for _ in range(2):
                conn, _ = server.accept()
                with conn:
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

        thread = threading.Thread(target=answer_garbage, daemon=True)
        thread.start()
        with pytest.raises(SshUnreachable, match=f"127.0.0.1:{port}"):
            ssh.wait_until_accepts("127.0.0.1", port, key, attempts=2, delay=0.01, timeout=2)
        thread.join(timeout=5)


def test_a_missing_or_foreign_key_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="no such file"):
        ssh.load_private_key(tmp_path / "absent")
    (tmp_path / "junk").write_text("not a key\n")
    with pytest.raises(InvalidInput, match="not an unencrypted OpenSSH ed25519 key"):
        ssh.load_private_key(tmp_path / "junk")


def test_attempts_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="0 asked"):
        ssh.wait_until_accepts("127.0.0.1", 1, tmp_path / "k", attempts=0, delay=0, timeout=1)
