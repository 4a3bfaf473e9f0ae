"""Readiness and liveness probes as the kubelet runs them: tcpSocket and httpGet to the pod IP, exec inside
the container's namespaces. gRPC probes are not emulated (they always fail, with a log line saying so).

A check answers (ok, output): the output is what the kubelet puts after `Readiness probe failed: ` in its
Unhealthy event (Go's dial error, `HTTP probe failed with statuscode: 500`, an exec probe's own output)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)
Outcome = tuple[bool, str]
_EXEC_OUTPUT_LIMIT = 10 * 1024    # the kubelet keeps the first 10 KiB of an exec probe's output


def _dial_error(host: str, port: int, error: BaseException) -> str:
    """Go's net.Dial error text, which the kubelet's probe messages carry."""
    if isinstance(error, TimeoutError):
        return f"dial tcp {host}:{port}: i/o timeout"
    if isinstance(error, ConnectionRefusedError):
        return f"dial tcp {host}:{port}: connect: connection refused"
    if isinstance(error, OSError) and error.strerror:
        return f"dial tcp {host}:{port}: connect: {error.strerror.lower()}"
    return f"dial tcp {host}:{port}: {error}"


@dataclass(frozen=True)
class ProbeTiming:
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3

    @staticmethod
    def of(probe: Mapping[str, Any]) -> ProbeTiming:
        return ProbeTiming(initial_delay=float(probe.get("initialDelaySeconds", 0)),
                           period=float(probe.get("periodSeconds", 10)),
                           timeout=float(probe.get("timeoutSeconds", 1)),
                           success_threshold=int(probe.get("successThreshold", 1)),
                           failure_threshold=int(probe.get("failureThreshold", 3)))


@dataclass
class ProbeTracker:
    """Consecutive results against the thresholds; `result` flips only when a threshold is reached."""

    timing: ProbeTiming
    result: bool = False
    successes: int = 0
    failures: int = 0

    def record(self, ok: bool) -> bool:
        """Record one probe; True when the result changed."""
        if ok:
            self.successes, self.failures = self.successes + 1, 0
            if not self.result and self.successes >= self.timing.success_threshold:
                self.result = True
                return True
        else:
            self.successes, self.failures = 0, self.failures + 1
            if self.result and self.failures >= self.timing.failure_threshold:
                self.result = False
                return True
        return False


def resolve_port(port: int | str, container: Mapping[str, Any]) -> int:
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise ValueError(f"container {container.get('name')} has no port named {port!r}")


async def tcp_check(host: str, port: int, timeout: float) -> Outcome:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (TimeoutError, OSError) as error:
        return False, _dial_error(host, port, error)
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True, ""


async def http_check(host: str, port: int, path: str, headers: Sequence[Mapping[str, str]],
                     timeout: float) -> Outcome:
    url = f"http://{host}:{port}{path or '/'}"

    async def get() -> Outcome:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            extra = "".join(f"{h['name']}: {h['value']}\r\n" for h in headers)
            writer.write(f"GET {path or '/'} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                         f"User-Agent: kube-probe/1.37\r\n{extra}Connection: close\r\n\r\n".encode())
            await writer.drain()
            status = (await reader.readline()).split()
            code = int(status[1]) if len(status) >= 2 and status[1].isdigit() else 0
            if 200 <= code < 400:
                return True, ""
            return False, f"HTTP probe failed with statuscode: {code}"
        finally:
            writer.close()
    try:
        return await asyncio.wait_for(get(), timeout)
    except TimeoutError:
        return False, (f'Get "{url}": context deadline exceeded (Client.Timeout exceeded while awaiting '
                       "headers)")
    except (OSError, ValueError) as error:
        return False, f'Get "{url}": {_dial_error(host, port, error)}'


async def exec_check(command: Sequence[str], *, pid: int, env: Mapping[str, str], isolated: bool,
                     user_ns: bool, timeout: float) -> Outcome:
    """Run the command in the container: its mount (and root), PID, network, UTS and IPC namespaces."""
    if isolated:
        flags = ["--mount", "--uts", "--ipc", "--net", "--pid", "--root", "--wd"]
        flags += ["--user"] if user_ns else []
        argv = ["nsenter", f"--target={pid}", *flags, "--", *command]
    else:
        argv = list(command)
    try:
        proc = await asyncio.create_subprocess_exec(*argv, env=dict(env), stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.STDOUT)
    except OSError as error:
        return False, str(error)
    try:
        output, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return False, f"command {list(command)!r} timed out"
    return proc.returncode == 0, output[:_EXEC_OUTPUT_LIMIT].decode(errors="replace")


def checker(probe: Mapping[str, Any], *, container: Mapping[str, Any], pod_ip: str, pid: int,
            env: Mapping[str, str], isolated: bool, user_ns: bool) -> Callable[[], Awaitable[Outcome]]:
    timeout = ProbeTiming.of(probe).timeout
    if "tcpSocket" in probe:
        tcp = probe["tcpSocket"]
        port = resolve_port(tcp["port"], container)
        return lambda: tcp_check(tcp.get("host") or pod_ip, port, timeout)
    if "httpGet" in probe:
        http = probe["httpGet"]
        port = resolve_port(http["port"], container)
        return lambda: http_check(http.get("host") or pod_ip, port, http.get("path", "/"),
                                  http.get("httpHeaders") or [], timeout)
    if "exec" in probe:
        command = list(probe["exec"].get("command") or [])
        return lambda: exec_check(command, pid=pid, env=env, isolated=isolated, user_ns=user_ns,
                                  timeout=timeout)

    async def unsupported() -> Outcome:
        log.warning("container %s: only tcpSocket, httpGet and exec probes are emulated",
                    container.get("name"))
        return False, "only tcpSocket, httpGet and exec probes are emulated by the local cluster"
    return unsupported


def start_probes(container: Mapping[str, Any], *, pod_ip: str, pid: int, env: Mapping[str, str],
                 isolated: bool, user_ns: bool, on_ready: Callable[[bool], Awaitable[None]],
                 on_dead: Callable[[], Awaitable[None]],
                 on_unhealthy: Callable[[str], Awaitable[None]]) -> list[asyncio.Future[None]]:
    """Probe a started container: readiness reports each change (`on_ready`), a liveness probe's failure
    past its threshold `on_dead`, and every failed probe `on_unhealthy("Readiness probe failed: ...")`."""
    tasks: list[asyncio.Future[None]] = []
    for kind, what in (("readinessProbe", "Readiness"), ("livenessProbe", "Liveness")):
        probe = container.get(kind)
        if not probe:
            continue
        check = checker(probe, container=container, pod_ip=pod_ip, pid=pid, env=env, isolated=isolated,
                        user_ns=user_ns)

        async def failed(output: str, what: str = what) -> None:
            await on_unhealthy(f"{what} probe failed: {output}")

        async def alive(ok: bool) -> None:
            if not ok:
                await on_dead()

        readiness = kind == "readinessProbe"
        tasks.append(asyncio.ensure_future(run_probe(probe, check, initial=not readiness,
                                                     on_change=on_ready if readiness else alive,
                                                     on_failure=failed)))
    return tasks


async def run_probe(probe: Mapping[str, Any], check: Callable[[], Awaitable[Outcome]], *, initial: bool,
                    on_change: Callable[[bool], Awaitable[None]],
                    on_failure: Callable[[str], Awaitable[None]] | None = None) -> None:
    """Probe forever (the caller cancels): report each failed probe's output (`on_failure`, the kubelet's
    Unhealthy event) and each change of the thresholded result. `initial` is the result before the first
    probe (readiness: False; liveness: True)."""
    timing = ProbeTiming.of(probe)
    tracker = ProbeTracker(timing, result=initial)
    await asyncio.sleep(timing.initial_delay)
    while True:
        ok, output = await check()
        if not ok and on_failure is not None:
            await on_failure(output)
        if tracker.record(ok):
            await on_change(tracker.result)
        await asyncio.sleep(timing.period)
