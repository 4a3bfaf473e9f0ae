"""The process runtime: a kubelet for every node of the local cluster, running pods as real processes.

Each pod: a pause process holding its network/UTS/IPC namespaces (runtime/netns.py), volumes materialised
under its directory (runtime/volumes.py), and per container a shim (runtime/sandbox.py) that builds the
container's private mount namespace and runs the command as PID 1 of its own PID namespace. Status goes back
through RuntimeHost.update_pod_status exactly as a kubelet reports it (runtime/podstatus.py).
See docs/local-cluster-processes.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from localcluster._internal.errors import InvalidInput
from localcluster._internal.runtime import execsession as ex
from localcluster._internal.runtime import kubeletevents as ke
from localcluster._internal.runtime import podstatus as ps
from localcluster._internal.runtime.base import RuntimeHost
from localcluster._internal.runtime.enforce import Enforcement
from localcluster._internal.runtime.forward import TcpForwarder
from localcluster._internal.runtime.imagepulls import ImageManager, PullSettings
from localcluster._internal.runtime.images import ImageMap, ImageNotFound
from localcluster._internal.runtime.launch import Launcher
from localcluster._internal.runtime.logs import container_log
from localcluster._internal.runtime.netns import ClusterNetwork, can_use_netns, can_use_userns, spawn
from localcluster._internal.runtime.nodelink import parse_node_link
from localcluster._internal.runtime.podenv import NotReadyYet
from localcluster._internal.runtime.pods import ContainerRun, PodRun
from localcluster._internal.runtime.probes import start_probes
from localcluster._internal.runtime.processfaults import ProcessFault, ProcessFaults
from localcluster._internal.runtime.runas import ContainerConfigError
from localcluster._internal.runtime.volumesync import PodSyncs

log = logging.getLogger(__name__)

SANDBOX = Path(__file__).with_name("sandbox.py")
RETRY_SECONDS = 1.0
LOST_MESSAGE = "The container could not be located when the pod was terminated"
VOLUME_REFRESH = 60.0


async def _exited(proc: asyncio.subprocess.Process, seconds: float) -> bool:
    try:
        await asyncio.wait_for(asyncio.shield(proc.wait()), seconds)
    except TimeoutError:
        return False
    return True


class ProcessRuntime:
    """Pods as processes. `network`: "netns" (root: a namespace and an IP per pod on a bridge), "loopback"
    (a 127.x address per pod, shared network), or "auto" (netns when root). Containers get mount and PID
    namespaces (volumes at their mountPath, a private root) as root, or inside a user namespace without root
    where the kernel allows it; otherwise they are plain host processes. `node_link` ("1gbit", "1gbit,0.2ms";
    netns only): the rate (and delay) of each node's link to the others (runtime/nodelink.py); `node_links`
    ({"node-2": "84mbit"}): the named nodes' own links instead (one slow NIC)."""

    def __init__(self, *, network: str = "auto", images: ImageMap | None = None,
                 venv_bin: str | None = None, restart_backoff: float = 1.0, max_backoff: float = 30.0,
                 shutdown_grace: float = 2.0, network_policy: bool = True,
                 memory_limits: bool = True, volume_refresh: float = VOLUME_REFRESH,
                 node_link: str = "", node_links: Mapping[str, str] | None = None,
                 pulls: PullSettings | None = None) -> None:
        root = os.geteuid() == 0
        self.user_namespace = not root and can_use_userns()
        self.network = ClusterNetwork(mode=network if network != "auto" else (
            "netns" if can_use_netns() else "loopback"), user_namespace=self.user_namespace,
            node_link=parse_node_link(node_link) if node_link else None,
            node_links={node: parse_node_link(link) for node, link in (node_links or {}).items()})
        self.isolate = root or self.user_namespace
        self.enforcement = Enforcement(network=self.network, pods=lambda: self.pods.values(),
                                       network_policy=network_policy, memory_limits=memory_limits,
                                       isolate=self.isolate)
        # frozen and throttled pods (runtime/processfaults.py), in cgroups of the cluster's own
        self.faults = ProcessFaults(self.enforcement.cgroups.name, cgroups=os.geteuid() == 0,
                                    own_namespaces=self.isolate)
        self.images = images or ImageMap()   # none: every image fails to pull
        # the kubelets' image managers (runtime/imagepulls.py): what pulls take, and an image the map does not
        # name fails as on a node that cannot reach a registry holding it
        self.image_manager = ImageManager(pulls, unavailable=self._unavailable)
        self.venv_bin = venv_bin or str(Path(sys.executable).parent)
        # the shim needs only the standard library: any Python 3 this user may run will do
        self.python = sys.executable if os.access(sys.executable, os.X_OK) else (
            shutil.which("python3") or sys.executable)
        self.restart_backoff = restart_backoff
        self.max_backoff = max_backoff
        self.shutdown_grace = shutdown_grace
        # how often a running pod's secret/configMap/downwardAPI/projected volumes are brought up to date: the
        # kubelet's sync period (1 minute, plus up to half of it as jitter) is what a real cluster's updates
        # wait for, unless the pod object itself is updated (runtime/volumesync.py); 0: only then
        self.volume_refresh = volume_refresh
        self.syncs = PodSyncs()
        self.pods: dict[str, PodRun] = {}              # by uid
        self.failed_nodes: set[str] = set()
        self._host: RuntimeHost | None = None
        self._launcher: Launcher | None = None
        self._forwarder: TcpForwarder | None = None
        self._dir = Path("/nonexistent")

    def _unavailable(self, image: str) -> str | None:
        return str(ImageNotFound(image)) if self.images.lookup(image) is None else None

    # ---- PodRuntime ---------------------------------------------------------------------------------------
    @property
    def api_host(self) -> str:
        """Where pods reach the API server (valid after start): the bridge's host address, or 127.0.0.1."""
        return self.network.api_host

    @property
    def host(self) -> RuntimeHost:
        assert self._host is not None, "ProcessRuntime.start() was not called"
        return self._host

    async def _event(self, run: PodRun, ctr: ContainerRun, event: ke.KubeletEvent) -> None:
        """The kubelet's event about one container (kubectl describe shows them)."""
        reason, message, warning = event
        await self.host.record_event(run.pod, reason=reason, message=message, field_path=ctr.field_path,
                                     type="Warning" if warning else "Normal")

    def notices(self) -> list[str]:
        """What this machine does not let the runtime enforce (`localcluster up` prints it)."""
        return self.enforcement.notices()

    async def prepare_network(self) -> str | None:
        """Make the bridge; returns the address pods reach the API server on (for its certificate and to
        listen on), or None when pods share the host's network. LocalCluster calls it before start()."""
        await self.network.setup()
        return self.api_host if self.network.mode == "netns" else None

    async def start(self, host: RuntimeHost) -> None:
        self._host = host
        self._dir = Path(host.state_dir) / "process"
        (self._dir / "pods").mkdir(parents=True, exist_ok=True)
        await self.network.setup()
        self._launcher = Launcher(host=host, images=self.images, claims_dir=self._dir / "claims",
                                  venv_bin=self.venv_bin, api_host=self.api_host,
                                  netns=self.network.mode == "netns", isolate=self.isolate,
                                  user_namespace=self.user_namespace)
        await self.enforcement.start(host)
        host.on_change(("pods",), self.syncs.pod_changed)

    @property
    def launcher(self) -> Launcher:
        assert self._launcher is not None, "ProcessRuntime.start() was not called"
        return self._launcher

    async def run_pod(self, pod: dict[str, Any]) -> None:
        run = PodRun.of(pod, directory=self._dir / "pods" / pod["metadata"]["uid"], images=self.images)
        self.pods[run.uid] = run
        node = self.host.get("nodes", None, run.node) or {}
        pod_cidr = str((node.get("spec") or {}).get("podCIDR") or "")
        run.host_ip = self.network.host_ip(run.node, pod_cidr=pod_cidr)
        if run.node in self.failed_nodes:
            await self._lose(run)
            return
        run.spawn(self._pod_main(run))

    async def stop_pod(self, pod: dict[str, Any], grace_seconds: float) -> None:
        run = self.pods.get(pod["metadata"].get("uid", ""))
        if run is None:
            return
        run.deleting = True
        for ctr in run.all_containers:
            if ctr.is_running:
                await self._event(run, ctr, ke.stopping(ctr.name))
        await run.cancel_setup()
        await self._kill_containers(run, grace_seconds)
        await run.cancel_all()
        await self._report_stopped(run)
        await self._release(run)
        self.pods.pop(run.uid, None)

    async def _report_stopped(self, run: PodRun) -> None:
        """A pod that finalizers keep in the store ends as the kubelet reports a deleted pod: its terminal
        phase and its containers' exit codes (kubelet 1.27+ sets them before the pod is removed)."""
        current = self.host.get("pods", run.namespace, run.name)
        if current is None or current["metadata"].get("uid") != run.uid or not current["metadata"].get(
                "finalizers"):
            return
        await self.host.update_pod_status(run.namespace, run.name,
                                          run.status((current.get("status") or {}).get("conditions") or []))

    async def logs(self, namespace: str, name: str, container: str, *, follow: bool,
                   tail_lines: int | None, timestamps: bool = False,
                   since: int | None = None) -> AsyncIterator[bytes]:
        run = next((r for r in reversed(self.pods.values()) if (r.namespace, r.name) == (namespace, name)),
                   None)
        ctr = run.container(container) if run is not None else None
        if run is None or ctr is None:
            return
        stream = container_log(run, ctr, follow=follow, tail_lines=tail_lines, timestamps=timestamps,
                               since=since)
        async with contextlib.aclosing(stream) as chunks:  # the log file closes with the client's stream
            async for chunk in chunks:
                yield chunk

    async def fail_node(self, node: str) -> None:
        self.failed_nodes.add(node)
        await self.host.set_node_ready(node, False, reason="NodeStatusUnknown",
                                       message="Kubelet stopped posting node status.")
        await asyncio.gather(*(self._lose(run) for run in list(self.pods.values())
                               if run.node == node and not run.lost))

    async def kill_pod(self, pod: dict[str, Any], grace_seconds: float, *, reason: str, message: str,
                       conditions: list[dict[str, Any]]) -> None:
        """The kubelet ends the pod without its deletion (runtime/base.py): SIGTERM, the grace period,
        SIGKILL; nothing restarts; then the final status."""
        run = self.pods.get(pod["metadata"].get("uid", ""))
        if run is None or run.deleting or run.lost or run.terminating or run.phase() in ("Succeeded",
                                                                                          "Failed"):
            return
        run.terminating = True
        for ctr in run.all_containers:
            if ctr.is_running:
                await self._event(run, ctr, ke.stopping(ctr.name))
        await run.cancel_setup()
        await self._kill_containers(run, grace_seconds)
        # each container's supervisor records its end (exit code, OOMKilled) as its process goes
        for _ in range(500):
            if all(ctr.proc is None for ctr in run.all_containers):
                break
            await asyncio.sleep(0.01)
        finished = ps.now()
        for ctr in run.all_containers:
            if not ctr.view.is_terminated:
                ctr.view.state = ps.terminated(137, started_at=None, finished_at=finished,
                                               reason="ContainerStatusUnknown", message=LOST_MESSAGE)
            ctr.view.ready = False
        codes = [ctr.view.exit_code for ctr in run.app]
        run.ended_phase = "Succeeded" if codes and all(code == 0 for code in codes) else "Failed"
        run.reason, run.message = reason, message
        run.extra_conditions = [dict(c, lastTransitionTime=finished) for c in conditions]
        self.launcher.release_gpus(run)
        self.enforcement.pod_finished(run)
        await self.faults.release(run)
        await self._report(run)

    # ---- faults in a pod's processes (runtime/processfaults.py) -------------------------------------------
    def faults_in_force(self) -> list[str]:
        """One line per frozen or throttled pod."""
        lines = []
        for run in self.pods.values():
            frozen, throttled = self.faults.frozen.get(run.uid), self.faults.throttled.get(run.uid)
            if frozen is not None:
                lines.append(f"pod {run.namespace}/{run.name}: {len(frozen.pids)} process(es) frozen "
                             f"({frozen.method})")
            if throttled is not None:
                lines.append(f"pod {run.namespace}/{run.name}: throttled to {throttled.cpu:g} CPU")
        return lines

    def _running(self, namespace: str, name: str) -> PodRun:
        run = next((r for r in self.pods.values() if (r.namespace, r.name) == (namespace, name)
                    and not (r.deleting or r.lost or r.terminating)), None)
        if run is None:
            raise InvalidInput(f"pod {namespace}/{name} is not running on this cluster")
        return run

    async def freeze(self, namespace: str, name: str, *, match: str | None = None,
                     container: str | None = None) -> ProcessFault:
        """Stop the pod's processes (those matching `match`, a regular expression on their command line,
        and their children; of one `container`); the pod stays Running."""
        return await self.faults.freeze(self._running(namespace, name), match=match, container=container)

    async def thaw(self, namespace: str, name: str) -> ProcessFault:
        return await self.faults.thaw(self._running(namespace, name))

    async def throttle(self, namespace: str, name: str, cpu: float, *, match: str | None = None,
                       container: str | None = None) -> ProcessFault:
        """Hold the pod's processes (or those matching) to `cpu` CPUs."""
        run = self._running(namespace, name)
        return await self.faults.throttle(run, cpu, match=match, container=container)

    async def unthrottle(self, namespace: str, name: str) -> ProcessFault:
        return await self.faults.unthrottle(self._running(namespace, name))

    async def shutdown(self) -> None:
        runs = list(self.pods.values())
        await asyncio.gather(*(self.stop_pod(r.pod, min(r.grace, self.shutdown_grace)) for r in runs),
                             return_exceptions=True)
        if self._forwarder is not None:
            await self._forwarder.close()
            self._forwarder = None
        await self.faults.undo_all()
        await self.enforcement.shutdown()
        await self.network.teardown()
        shutil.rmtree(self._dir, ignore_errors=True)

    # ---- exec, attach, port-forward (runtime/execsession.py) ----------------------------------------------
    async def exec_in_container(self, namespace: str, name: str, container: str, command: list[str], *,
                                tty: bool, stdin: bool) -> ex.PipeSession | ex.PtySession:
        run, ctr = ex.locate(self.pods.values(), namespace, name, container)
        return await ex.start_exec(run, ctr, command, tty=tty, stdin=stdin, python=self.python,
                                isolated=self.isolate, cgroups=os.geteuid() == 0)

    async def attach_container(self, namespace: str, name: str, container: str, *,
                               tty: bool) -> ex.AttachSession:
        return ex.AttachSession(*ex.locate(self.pods.values(), namespace, name, container))

    async def open_pod_port(self, namespace: str, name: str,
                            port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await ex.open_pod_port(ex.locate(self.pods.values(), namespace, name, None)[0], port,
                                   netns=self.network.mode == "netns")

    # ---- one pod ------------------------------------------------------------------------------------------
    async def _pod_main(self, run: PodRun) -> None:
        try:
            run.start_time = ps.now()
            await self._report(run)
            await self.enforcement.wait_for_attach(run, lambda: self._report(run))
            run.net = await self.network.create_pod(node=run.node, hostname=run.hostname)
            run.ip = run.net.ip
            await self.enforcement.network_changed()
            run.sandbox_ready = True
            await self._report(run)
            await self._ensure_forwarder()
            run.volumes = await self._retry(run, lambda: self.launcher.volumes(run))
            await self._assign_gpus(run)
            for ctr in run.init:
                if not await self._run_init(run, ctr):
                    return
            run.init_done = True
            await self._report(run)
            for ctr in run.app:
                run.spawn(self._supervise(run, ctr))
            run.spawn(self._refresh_volumes(run))
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a pod that cannot be set up fails; the runtime goes on
            log.exception("pod %s/%s could not start", run.namespace, run.name)
            run.reason, run.message = "RunContainerError", str(e)
            for ctr in run.all_containers:
                if not ctr.view.is_terminated:
                    ctr.view.state = ps.waiting("RunContainerError", str(e))
            await self._report(run)

    async def _refresh_volumes(self, run: PodRun) -> None:
        """The kubelet's syncs of a running pod's volumes (runtime/volumesync.py): every `volume_refresh`
        seconds plus up to half of it (so pods started together drift apart), and at once when the pod object
        is updated (an annotation, a label); each update of a volume lands atomically."""
        self.syncs.track(run.uid)
        try:
            while not (run.deleting or run.lost or run.terminating):
                updated = await self.syncs.wait(run.uid, self.volume_refresh)
                if run.deleting or run.lost or run.terminating:
                    return
                latest = self.syncs.latest(run.uid)
                if updated and latest is not None:  # a downwardAPI volume shows the pod as it is now
                    for key in ("labels", "annotations"):
                        run.pod["metadata"][key] = dict(latest["metadata"].get(key) or {})
                try:
                    changed = self.launcher.refresh_volumes(run)
                except (OSError, ValueError) as e:
                    log.warning("pod %s/%s: volumes not refreshed: %s", run.namespace, run.name, e)
                else:
                    if changed:
                        log.info("pod %s/%s: volumes %s updated%s", run.namespace, run.name,
                                 ", ".join(changed), " (the pod was updated)" if updated else "")
        finally:
            self.syncs.forget(run.uid)

    async def _retry(self, run: PodRun, make: Any) -> Any:
        """Wait, like the kubelet, for referenced Secrets/ConfigMaps that do not exist yet."""
        while True:
            try:
                return make()
            except NotReadyYet as e:
                for ctr in run.all_containers:
                    ctr.view.state = ps.waiting("ContainerCreating", f"MountVolume.SetUp failed: {e}")
                await self._report(run)
                await asyncio.sleep(RETRY_SECONDS)

    async def _assign_gpus(self, run: PodRun) -> None:
        """The node's devices for the pod. A real kubelet counts only active pods' devices as taken, so a pod
        being deleted (even without grace) does not keep a newcomer out: wait here until its processes end
        and release theirs, rather than refuse the newcomer."""
        while True:
            try:
                self.launcher.assign_gpus(run)
                return
            except RuntimeError:
                if not any(r.deleting and r.node == run.node for r in self.pods.values() if r is not run):
                    raise
            await asyncio.sleep(RETRY_SECONDS / 10)

    async def _run_init(self, run: PodRun, ctr: ContainerRun) -> bool:
        """Run an init container to success (restarting it unless restartPolicy is Never)."""
        while True:
            code = await self._run_once(run, ctr)
            if code == 0:
                ctr.view.ready = True
                return True
            if run.restart_policy == "Never" or run.deleting or run.terminating:
                await self._finish_if_done(run)
                return False
            await self._backoff(run, ctr)

    async def _supervise(self, run: PodRun, ctr: ContainerRun) -> None:
        while True:
            code = await self._run_once(run, ctr)
            if run.deleting or run.lost or run.terminating:
                return
            if run.restart_policy == "Never" or (run.restart_policy == "OnFailure" and code == 0):
                await self._finish_if_done(run)
                return
            await self._backoff(run, ctr)

    async def _backoff(self, run: PodRun, ctr: ContainerRun) -> None:
        delay = min(self.max_backoff, self.restart_backoff * 2 ** min(ctr.view.restart_count, 16))
        ctr.view.last_state = ctr.view.state
        ctr.view.state = ps.waiting("CrashLoopBackOff", f"back-off {delay:g}s restarting failed container="
                                    f"{ctr.name} pod={run.name}_{run.namespace}({run.uid})")
        ctr.view.restart_count += 1
        await self._report(run)
        await self._event(run, ctr, ke.back_off(ctr.name, run.name, run.namespace, run.uid))
        await asyncio.sleep(delay)

    async def _finish_if_done(self, run: PodRun) -> None:
        phase = run.phase()
        if phase in ("Succeeded", "Failed"):
            self.launcher.release_gpus(run)
            self.enforcement.pod_finished(run)
        await self._report(run)

    async def _run_once(self, run: PodRun, ctr: ContainerRun) -> int:
        """Start the container once, wait for its end and report every step; returns its exit code."""
        config = await self._retry_config(run, ctr)
        if config is None:
            return 128
        spec_path = ctr.directory / "spec.json"
        ctr.generation += 1
        ctr.directory.mkdir(parents=True, exist_ok=True)
        (ctr.directory / "rootfs").mkdir(exist_ok=True)
        cgroups = self.enforcement.container_cgroups(run, ctr)
        spec_path.write_text(json.dumps({**config, "log": str(ctr.log_path),
                                         "cgroups": [str(p) for p in cgroups.directories]}))
        ctr.log_path.touch()
        with ctr.log_path.open("ab") as log_file:  # the shim's own errors land in the container's log
            proc = await spawn(
                "setpriv", "--pdeathsig", "KILL", "--", self.python, "-I", "-S", str(SANDBOX), str(spec_path),
                stdin=asyncio.subprocess.PIPE if config["stdin"] else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=log_file,
                start_new_session=True)
        ctr.proc = proc
        await self._event(run, ctr, ke.created(ctr.name))
        assert proc.stdout is not None
        line = (await proc.stdout.readline()).decode(errors="replace").strip()
        started_at = ps.now()
        if line.startswith("started "):
            await self._event(run, ctr, ke.started(ctr.name))
            ctr.pid = int(line.split()[1])
            ctr.view.container_id = f"process://{run.uid[:8]}-{ctr.name}-{ctr.generation}"
            ctr.view.state, ctr.view.started = ps.running(started_at), True
            ctr.view.ready = not ctr.init and "readinessProbe" not in ctr.spec
            await self._report(run)
            self._start_probes(run, ctr, config["env"])
            returncode = await proc.wait()
            reason, message = None, None
        else:
            returncode = await proc.wait()
            reason, message = "StartError", line.removeprefix("error ").strip() or "the sandbox failed"
            await self._event(run, ctr, ke.failed(message))
        await ctr.stop_probes()
        oom = await self.enforcement.container_ended(cgroups)  # "OOMKilled" when the kernel killed in it
        reason = reason or oom
        code = 128 if reason == "StartError" else ps.exit_code_of(returncode)
        if ctr.killed_by_node_loss:
            return code
        ctr.pid, ctr.proc = None, None
        ctr.view.ready = False
        ctr.view.state = ps.terminated(code, started_at=started_at, finished_at=ps.now(), reason=reason,
                                       message=message, container_id=ctr.view.container_id)
        await self._report(run)
        return code

    async def _pull(self, run: PodRun, ctr: ContainerRun) -> bool:
        """The kubelet's EnsureImageExists for this start of the container; False: it waits (its status says
        why) and the next sync tries again."""
        outcome = await self.image_manager.ensure(
            node=run.node, pod_uid=run.uid, image=str(ctr.spec.get("image", "")),
            policy=str(ctr.spec.get("imagePullPolicy") or "IfNotPresent"),
            record=lambda event: self._event(run, ctr, event))
        if not outcome.ok:
            ctr.view.state = ps.waiting(outcome.reason, outcome.message)
        return outcome.ok

    async def _retry_config(self, run: PodRun, ctr: ContainerRun) -> dict[str, Any] | None:
        """Pull the image, then work out the container's configuration, syncing again every RETRY_SECONDS
        while either fails (as the kubelet's pod worker does)."""
        while not (run.deleting or run.terminating):
            if not await self._pull(run, ctr):
                await self._report(run)
                await asyncio.sleep(RETRY_SECONDS)
                continue
            try:
                return self.launcher.sandbox_spec(run, ctr)
            except (NotReadyYet, ContainerConfigError, InvalidInput, ValueError, ImageNotFound) as e:
                reason, events = ke.setup_failure(e, str(ctr.spec.get("image", "")))
                ctr.view.state = ps.waiting(reason, str(e))
                for event in events:
                    await self._event(run, ctr, event)
            await self._report(run)
            await asyncio.sleep(RETRY_SECONDS)
        return None

    def _start_probes(self, run: PodRun, ctr: ContainerRun, env: dict[str, str]) -> None:
        assert ctr.pid is not None
        if ctr.init:
            return

        async def ready(ok: bool) -> None:
            ctr.view.ready = ok and ctr.is_running
            await self._report(run)

        async def dead() -> None:
            if ctr.proc is not None and ctr.proc.returncode is None:
                await self._event(run, ctr, ke.liveness_kill(ctr.name))
                self.faults.before_stop(run)
                await self._kill(ctr, float(run.grace))

        async def unhealthy(message: str) -> None:
            await self._event(run, ctr, ke.unhealthy(message))

        ctr.probe_tasks += start_probes(ctr.spec, pod_ip=run.ip, pid=ctr.pid, env=env, isolated=self.isolate,
                                        user_ns=self.user_namespace, on_ready=ready, on_dead=dead,
                                        on_unhealthy=unhealthy)

    # ---- stopping -----------------------------------------------------------------------------------------
    async def _kill(self, ctr: ContainerRun, grace: float) -> None:
        proc, pid = ctr.proc, ctr.pid
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)  # the shim hands it to the container's PID 1
        if await _exited(proc, grace):
            return
        # SIGKILL PID 1 itself: its whole PID namespace dies and the shim reaps it and reports 137. Killing
        # the shim instead would leave PID 1 a zombie for the host's init to collect.
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not self.isolate:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        if not await _exited(proc, 5):
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGKILL)
            await proc.wait()

    async def _kill_containers(self, run: PodRun, grace: float) -> None:
        self.faults.before_stop(run)
        await asyncio.gather(*(self._kill(c, grace) for c in run.all_containers))

    async def _release(self, run: PodRun) -> None:
        await self.faults.release(run)
        self.launcher.release_gpus(run)
        if run.net is not None:
            await self.network.delete_pod(run.net)
            run.net = None
        await self.enforcement.release(run)
        shutil.rmtree(run.dir, ignore_errors=True)

    async def _lose(self, run: PodRun) -> None:
        """The node died under the pod: everything ends at once, as with a power cut."""
        run.lost = True
        for ctr in run.all_containers:
            ctr.killed_by_node_loss = True
        await run.cancel_setup()
        await self._kill_containers(run, 0)
        finished = ps.now()
        for ctr in run.all_containers:
            started = ctr.view.state.get("running", {}).get("startedAt")
            if not ctr.view.is_terminated:
                ctr.view.state = ps.terminated(137, started_at=started, finished_at=finished,
                                               reason="ContainerStatusUnknown", message=LOST_MESSAGE)
            ctr.view.ready = False
        run.reason = "NodeLost"
        run.message = f"Node {run.node} which was running pod {run.name} is unresponsive"
        self.launcher.release_gpus(run)
        self.enforcement.pod_finished(run)
        await self._report(run)

    async def _ensure_forwarder(self) -> None:
        """Pods reach the API server on the bridge address; when the server listens elsewhere (127.0.0.1),
        splice connections through to it."""
        if self.network.mode != "netns" or self._forwarder is not None or self.host.api_host == self.api_host:
            return
        self._forwarder = TcpForwarder(listen=(self.api_host, self.host.api_port),
                                       target=(self.host.api_host, self.host.api_port))
        await self._forwarder.start()

    # ---- status -------------------------------------------------------------------------------------------
    async def _report(self, run: PodRun) -> None:
        if run.deleting and not run.lost:
            return
        current = self.host.get("pods", run.namespace, run.name)
        if current is None or current["metadata"].get("uid") != run.uid:
            return
        await self.host.update_pod_status(run.namespace, run.name,
                                          run.status((current.get("status") or {}).get("conditions") or []))
