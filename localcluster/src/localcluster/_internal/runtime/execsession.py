"""What the process runtime's kubelet does for `kubectl exec`, `attach` and `port-forward` once the API server
has found the container: start the exec shim (runtime/nsexec.py) with pipes or a terminal, follow a
container's output for attach, and open TCP connections inside a pod's network namespace.

- exec: the command runs in the container's namespaces, root, user, groups, working directory and environment
  (`TERM=xterm` added with a terminal, as containerd does). With a terminal (tty) the shim's stdio is a pty
  whose master we hold: resizes are TIOCSWINSZ on it, and its output is all on stdout.
- attach: the container's output from now on (stdout and stderr, as the container's log holds them, both on
  stdout); what is typed goes to the container's stdin, a pipe when its spec says `stdin: true` (closed after
  the first attach with `stdinOnce`), else it is dropped as a kubelet drops it.
- port-forward: a socket made by a thread that has entered the pod's network namespace (a socket keeps the
  namespace it was made in), connected to 127.0.0.1:PORT, as the kubelet dials localhost in the pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import fcntl
import json
import os
import pty
import signal
import socket
import struct
import termios
import threading
from collections.abc import AsyncGenerator, Iterable, Mapping
from pathlib import Path
from typing import Any

from localcluster._internal.runtime.base import StreamingError
from localcluster._internal.runtime.logs import container_log
from localcluster._internal.runtime.netns import spawn
from localcluster._internal.runtime.pods import ContainerRun, PodRun

SHIM = Path(__file__).with_name("nsexec.py")
CHUNK = 32 * 1024
KILL_GRACE = 2.0
CONNECT_SECONDS = 30.0
CLONE_NEWNET = 0x40000000
NAMESPACES = ["user", "ipc", "uts", "net", "pid", "mnt"]  # the shim skips those it already shares

_libc = ctypes.CDLL(None, use_errno=True)


def shim_spec(config: Mapping[str, Any], *, pid: int, command: list[str], tty: bool, isolated: bool,
              cgroups: bool, report_fd: int) -> dict[str, Any]:
    """The shim's instructions, from the spec the container's own shim ran with (runtime/launch.py)."""
    env = dict(config.get("env") or {})
    if tty:
        env.setdefault("TERM", "xterm")
    return {"pid": pid, "namespaces": NAMESPACES if isolated else [], "root": isolated, "cgroups": cgroups,
            "workdir": config.get("workdir") or "/", "argv": command, "env": env, "user": config.get("user"),
            "no_new_privs": bool(config.get("no_new_privs")), "tty": tty, "report_fd": report_fd}


def locate(runs: Iterable[PodRun], namespace: str, name: str,
           container: str | None) -> tuple[PodRun, ContainerRun]:
    """The pod's current run on its node and the named container (None: the first), or why not."""
    run = next((r for r in reversed(list(runs))
                if (r.namespace, r.name) == (namespace, name) and not r.deleting), None)
    if run is None or run.lost:
        raise StreamingError(f'pod "{name}" is not running on its node')
    ctr = run.container(container) if container is not None else next(iter(run.app), None)
    if ctr is None:
        raise StreamingError(f'container not found ("{container}")')
    return run, ctr


def container_config(ctr: ContainerRun) -> dict[str, Any]:
    """The spec the container's current start ran with."""
    try:
        config: dict[str, Any] = json.loads((ctr.directory / "spec.json").read_text())
    except (OSError, ValueError) as e:
        raise StreamingError(f"container {ctr.name}: its configuration is unreadable: {e}") from e
    return config


class _Shim:
    """The shim process, its failure report and the end of what it started."""

    def __init__(self, proc: asyncio.subprocess.Process, report: int) -> None:
        self.proc = proc
        self._report = report
        self._code: int | None = None

    async def wait(self) -> int:
        if self._code is None:
            code = await self.proc.wait()
            failure = b""
            with contextlib.suppress(OSError):
                failure = os.read(self._report, 4096) if self._report >= 0 else b""
            self._close_report()
            if failure:
                raise StreamingError(failure.decode(errors="replace"))
            self._code = code
        return self._code

    def _close_report(self) -> None:
        if self._report >= 0:
            os.close(self._report)
            self._report = -1

    async def kill(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)  # handed to the command
            try:
                await asyncio.wait_for(asyncio.shield(self.proc.wait()), KILL_GRACE)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()  # the command dies with it (PR_SET_PDEATHSIG)
                await self.proc.wait()
        self._close_report()


class PipeSession(_Shim):
    """exec without a terminal: stdin, stdout and stderr are pipes."""

    async def write_stdin(self, data: bytes) -> None:
        if self.proc.stdin is None or self.proc.stdin.is_closing():
            return
        self.proc.stdin.write(data)
        with contextlib.suppress(ConnectionError):
            await self.proc.stdin.drain()

    async def close_stdin(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()

    async def read_stdout(self) -> bytes:
        assert self.proc.stdout is not None
        return await self.proc.stdout.read(CHUNK)

    async def read_stderr(self) -> bytes:
        assert self.proc.stderr is not None
        return await self.proc.stderr.read(CHUNK)

    def resize(self, width: int, height: int) -> None:
        pass


class PtySession(_Shim):
    """exec with a terminal: we hold the pty's master; the command has the slave as its controlling tty."""

    def __init__(self, proc: asyncio.subprocess.Process, report: int, master: int) -> None:
        super().__init__(proc, report)
        self.master = master
        os.set_blocking(master, False)

    async def _ready(self, writing: bool) -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        if writing:
            add, remove = loop.add_writer, loop.remove_writer
        else:
            add, remove = loop.add_reader, loop.remove_reader
        add(self.master, lambda: None if done.done() else done.set_result(None))
        try:
            await done
        finally:
            remove(self.master)

    async def write_stdin(self, data: bytes) -> None:
        while data and self.master >= 0:
            try:
                data = data[os.write(self.master, data):]
            except BlockingIOError:
                await self._ready(writing=True)
            except OSError:
                return

    async def close_stdin(self) -> None:
        await self.write_stdin(b"\x04")  # end of input, as Ctrl-D at the start of a line

    async def read_stdout(self) -> bytes:
        while self.master >= 0:
            try:
                chunk = os.read(self.master, CHUNK)
            except BlockingIOError:
                await self._ready(writing=False)
                continue
            except OSError as e:  # EIO: every holder of the slave has closed it
                if e.errno != errno.EIO:
                    raise
                chunk = b""
            if not chunk:
                self._close_master()
            return chunk
        return b""

    async def read_stderr(self) -> bytes:
        return b""

    def resize(self, width: int, height: int) -> None:
        if self.master >= 0:
            fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))

    def _close_master(self) -> None:
        if self.master >= 0:
            os.close(self.master)
            self.master = -1

    async def kill(self) -> None:
        await super().kill()
        self._close_master()


async def start_exec(run: PodRun, ctr: ContainerRun, command: list[str], *, tty: bool, stdin: bool,
                     python: str, isolated: bool, cgroups: bool) -> PipeSession | PtySession:
    if ctr.pid is None or not ctr.is_running:
        raise StreamingError(f'container "{ctr.name}" in pod "{run.name}" is not running')
    config = container_config(ctr)
    report, report_w = os.pipe()
    os.set_blocking(report, False)
    master = slave = -1
    if tty:
        master, slave = pty.openpty()
        user = config.get("user")
        if user is not None:  # the terminal belongs to the user it serves, as runc makes it
            os.fchown(slave, user["uid"], -1)
    spec = shim_spec(config, pid=ctr.pid, command=command, tty=tty, isolated=isolated, cgroups=cgroups,
                     report_fd=report_w)
    pipe = asyncio.subprocess.PIPE
    try:
        proc = await spawn(
            "setpriv", "--pdeathsig", "KILL", "--", python, "-I", "-S", str(SHIM), json.dumps(spec),
            stdin=slave if tty else (pipe if stdin else asyncio.subprocess.DEVNULL),
            stdout=slave if tty else pipe, stderr=slave if tty else pipe, pass_fds=(report_w,),
            start_new_session=True)
    except BaseException:
        for fd in (report, master):
            if fd >= 0:
                os.close(fd)
        raise
    finally:
        os.close(report_w)
        if slave >= 0:
            os.close(slave)
    return PtySession(proc, report, master) if tty else PipeSession(proc, report)


class AttachSession:
    """attach: the container's output from now on, until it ends; what is typed goes to its stdin when it has
    one (`stdin: true`), which `stdinOnce` closes when the first attach ends."""

    def __init__(self, run: PodRun, ctr: ContainerRun) -> None:
        if ctr.proc is None or not ctr.is_running:
            raise StreamingError(f'container "{ctr.name}" in pod "{run.name}" is not running')
        self._proc = ctr.proc
        self._once = bool(ctr.spec.get("stdinOnce"))
        # the output from this moment on: what the container prints in answer to the first stdin must not
        # fall between the attach and the follower's first read (kubectl run -i lost the echo of its input)
        start = ctr.log_path.stat().st_size if ctr.log_path.exists() else 0
        self._log: AsyncGenerator[bytes, None] = container_log(run, ctr, follow=True, tail_lines=None,
                                                               offset=start)

    async def write_stdin(self, data: bytes) -> None:
        stdin = self._proc.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.write(data)
            with contextlib.suppress(ConnectionError):
                await stdin.drain()

    async def close_stdin(self) -> None:
        if self._once and self._proc.stdin is not None and not self._proc.stdin.is_closing():
            self._proc.stdin.close()

    async def read_stdout(self) -> bytes:
        try:
            return await anext(self._log)
        except StopAsyncIteration:
            return b""

    async def read_stderr(self) -> bytes:
        return b""

    def resize(self, width: int, height: int) -> None:
        pass

    async def wait(self) -> int:
        await self._proc.wait()
        return 0

    async def kill(self) -> None:
        await self.close_stdin()
        await self._log.aclose()


def _socket_in_netns(pid: int) -> socket.socket:
    """Runs in a thread of its own, which ends right after: a network namespace is per thread, so entering
    the pod's changes nothing for the rest of the server."""
    target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        if _libc.setns(target, CLONE_NEWNET) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"setns into the network namespace of PID {pid}: {os.strerror(code)}")
        return socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    finally:
        os.close(target)


async def _in_thread(pid: int) -> socket.socket:
    loop = asyncio.get_running_loop()
    result: asyncio.Future[socket.socket] = loop.create_future()

    def work() -> None:
        try:
            sock = _socket_in_netns(pid)
        except OSError as e:
            error = e
            loop.call_soon_threadsafe(lambda: None if result.done() else result.set_exception(error))
            return
        def deliver() -> None:
            if result.done():  # the caller gave up meanwhile
                sock.close()
            else:
                result.set_result(sock)
        loop.call_soon_threadsafe(deliver)

    threading.Thread(target=work, name=f"netns-{pid}", daemon=True).start()
    return await result


async def open_port(*, netns_pid: int | None, address: str, port: int,
                    where: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to `address`:PORT inside the network namespace held by `netns_pid` (None: ours)."""
    sock = await _in_thread(netns_pid) if netns_pid is not None else socket.socket()
    sock.setblocking(False)
    try:
        connecting = asyncio.get_running_loop().sock_connect(sock, (address, port))
        await asyncio.wait_for(connecting, CONNECT_SECONDS)
    except TimeoutError as e:
        sock.close()
        raise StreamingError(f"failed to connect to localhost:{port} inside {where}: dial tcp4 "
                             f"{address}:{port}: i/o timeout") from e
    except OSError as e:
        sock.close()
        reason = os.strerror(e.errno).lower() if e.errno else str(e)  # as Go words it
        raise StreamingError(f"failed to connect to localhost:{port} inside {where}: dial tcp4 "
                             f"{address}:{port}: connect: {reason}") from e
    return await asyncio.open_connection(sock=sock)


async def open_pod_port(run: PodRun, port: int, *, netns: bool) -> tuple[asyncio.StreamReader,
                                                                          asyncio.StreamWriter]:
    """localhost:PORT as the pod sees it: in its network namespace, or its own address in loopback mode."""
    if run.net is None:
        raise StreamingError(f'pod "{run.name}" has no network yet')
    return await open_port(netns_pid=run.net.pause.pid if netns else None,
                           address="127.0.0.1" if netns else run.ip, port=port,
                           where=f'the network namespace of pod "{run.namespace}/{run.name}"')
