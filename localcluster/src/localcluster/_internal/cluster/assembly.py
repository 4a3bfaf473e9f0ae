"""`LocalCluster`: the store, the API server over HTTPS, the controllers and a pod runtime, started together.

Run it on the caller's event loop (`await cluster.astart()`, as `localcluster up`'s daemon does) or on a
private loop in a background thread (`cluster.start()`, as the pytest fixture does; `cluster.call(coro)` then
runs a coroutine there). The cluster is also the runtime's RuntimeHost.

A runtime may define `async prepare_network() -> str | None`: called before certificates are made, it returns
the address pods reach the API server on (a bridge address); the server then listens there too and the
certificate names it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import datetime
import logging
import shutil
import socket
import tempfile
import threading
from collections.abc import Collection, Coroutine, Mapping
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from localcluster._internal.admission import podsecurity, priority
from localcluster._internal.admission.plugins import AdmissionHook
from localcluster._internal.apiserver.api import ApiServer
from localcluster._internal.apiserver.faults import Fault, Faults
from localcluster._internal.apiserver.subresources import Subresources
from localcluster._internal.auth import certs, rbac
from localcluster._internal.auth.access import Access
from localcluster._internal.auth.tokens import TokenAuthority
from localcluster._internal.cluster.spec import ClusterSpec, make_runtime, node_object, runtime_options
from localcluster._internal.controllers import scheduler
from localcluster._internal.controllers.loops import Controllers
from localcluster._internal.doubles import nodeshutdown
from localcluster._internal.doubles.apioutage import ApiOutages, Outage
from localcluster._internal.doubles.autoscaler import Autoscaler, Timing
from localcluster._internal.doubles.kueue import Kueue
from localcluster._internal.doubles.openshift import RestrictedV2
from localcluster._internal.errors import InvalidInput
from localcluster._internal.runtime.base import ObjectChange, PodRuntime
from localcluster._internal.runtime.process import ProcessRuntime
from localcluster._internal.runtime.processfaults import ProcessFault
from localcluster._internal.storage.store import DELETED, Event, NotFound, Store, now_iso

T = TypeVar("T")
log = logging.getLogger(__name__)
Obj = dict[str, Any]
SEED_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class LocalCluster:
    def __init__(self, spec: ClusterSpec | None = None, *, state_dir: Path | None = None,
                 runtime: PodRuntime | None = None) -> None:
        self.spec = spec or ClusterSpec()
        try:
            self.pod_security = podsecurity.defaults_from(self.spec.pod_security_defaults)
        except ValueError as error:
            raise InvalidInput(str(error)) from None
        self._own_dir = state_dir is None
        self.dir = Path(state_dir) if state_dir is not None else Path(tempfile.mkdtemp(prefix="dt-cluster-"))
        self.state_dir = self.dir / "state"
        self.runtime: PodRuntime = runtime or make_runtime(self.spec.runtime, runtime_options(self.spec))
        self.store = Store(history=self.spec.history)
        self.tokens = TokenAuthority()
        self.faults = Faults()
        self.outages = ApiOutages(cut=self._cut_connections, close=self._close_http, reopen=self._serve)
        self.api_host = self.spec.bind_host
        self.api_port = self.spec.port
        self.ca_cert_pem = b""
        self._certs: certs.ServerCerts | None = None
        self._runner: web.AppRunner | None = None
        self._hosts: list[str] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.controllers: Controllers | None = None
        self.api: ApiServer | None = None
        self.autoscaler: Autoscaler | None = None   # doubles/autoscaler, with spec.node_pools
        self.kueue: Kueue | None = None             # doubles/kueue, with spec.kueue
        self._doubles: list[asyncio.Task[None]] = []

    # ---- paths and identities ----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host = self.spec.bind_host if self.spec.bind_host != "0.0.0.0" else "127.0.0.1"
        return f"https://{host}:{self.api_port}"

    @property
    def ca_path(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def admin_token(self) -> str:
        return self.tokens.admin_token

    def token_for(self, namespace: str, service_account: str) -> str:
        return self.tokens.issue(namespace, service_account)[0]

    @property
    def notices(self) -> list[str]:
        """What the runtime cannot enforce on this machine (NetworkPolicy, memory limits), once each."""
        notices = getattr(self.runtime, "notices", None)
        return list(notices()) if notices is not None else []

    # ---- RuntimeHost ---------------------------------------------------------------------------------------
    def get(self, resource: str, namespace: str | None, name: str) -> Obj | None:
        return self.store.copy_of(resource, namespace, name)

    async def update_pod_status(self, namespace: str, name: str, status: Obj) -> None:
        assert self.controllers is not None
        await self.controllers.update_pod_status(namespace, name, status)

    async def set_node_ready(self, node: str, ready: bool, *, reason: str, message: str) -> None:
        now = now_iso()

        def change(obj: Obj) -> None:
            conditions = obj.setdefault("status", {}).setdefault("conditions", [])
            for cond in conditions:
                if cond.get("type") == "Ready":
                    if cond.get("status") != ("True" if ready else "Unknown"):
                        cond["lastTransitionTime"] = now
                    cond.update({"status": "True" if ready else "Unknown", "reason": reason,
                                 "message": message, "lastHeartbeatTime": now})
            taints = [t for t in obj["spec"].get("taints") or [] if not t.get("key", "").startswith(
                ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"))]
            if not ready:
                taints += [{"key": "node.kubernetes.io/unreachable", "effect": effect, "timeAdded": now}
                           for effect in ("NoSchedule", "NoExecute")]
            if taints:
                obj["spec"]["taints"] = taints
            else:
                obj["spec"].pop("taints", None)

        with contextlib.suppress(NotFound):
            self.store.mutate("nodes", None, node, change)

    def service_account_token(self, namespace: str, service_account: str) -> str:
        return self.token_for(namespace, service_account)

    def list_objects(self, resource: str) -> list[Obj]:
        return self.store.objects(resource)

    def on_change(self, resources: Collection[str], callback: ObjectChange) -> None:
        wanted = frozenset(resources)

        def listener(event: Event) -> None:
            if event.resource in wanted:
                old = event.old.obj if event.old is not None else None
                callback(event.resource, old, None if event.type == DELETED else event.new.obj)

        self.store.add_listener(listener)

    async def record_event(self, obj: Obj, *, reason: str, message: str, type: str = "Normal",
                           component: str = "kubelet", field_path: str = "") -> None:
        if self.controllers is None:
            return
        node = (obj.get("spec") or {}).get("nodeName", "") if component == "kubelet" else ""
        try:
            self.controllers.record_event(obj, type, reason, message, component=component, host=node,
                                          field_path=field_path)
        except Exception:  # an event is never worth failing the pod operation that records it
            log.exception("could not record event %s for %s", reason, obj["metadata"].get("name"))

    # ---- lifecycle on the caller's loop ------------------------------------------------------------------
    async def astart(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        prepare = getattr(self.runtime, "prepare_network", None)
        pod_api_host = (await prepare()) if prepare is not None else None
        sans = tuple(dict.fromkeys((*self.spec.sans, *([pod_api_host] if pod_api_host else []))))
        self._certs = certs.generate(sans=sans)
        self.ca_cert_pem = self._certs.ca_cert_pem
        self.ca_path.write_bytes(self.ca_cert_pem)
        self._seed()
        if self.spec.kueue:
            # its webhook must see every pod created: made before the controllers that admit pods
            self.kueue = Kueue(store=self.store, record=self._record_event,
                               manage_without_queue_name=self.spec.kueue_manage_without_queue_name)
        # OpenShift's SCC admission is a plugin of the server, so it runs before any webhook (Kueue's)
        hooks: list[AdmissionHook] = [RestrictedV2()] if self.spec.openshift else []
        hooks += [self.kueue.webhook] if self.kueue else []
        self.controllers = Controllers(store=self.store, runtime=self.runtime, pod_security=self.pod_security,
                                       event_ttl=self.spec.event_ttl, admit_handlers=[nodeshutdown.refusal],
                                       job_backoff=self.spec.job_backoff, admission_hooks=hooks)
        self.controllers.start()
        self._start_doubles()
        access = Access(store=self.store, tokens=self.tokens)
        subresources = Subresources(store=self.store, access=access, controllers=self.controllers,
                                    runtime=self.runtime, tokens=self.tokens)
        self._hosts = list(dict.fromkeys([self.spec.bind_host, *([pod_api_host] if pod_api_host else [])]))
        if self.api_port == 0:
            self.api_port = _free_port(self.spec.bind_host)
        self.api = ApiServer(store=self.store, access=access, controllers=self.controllers,
                             subresources=subresources, faults=self.faults,
                             server_address=f"{self.spec.bind_host}:{self.api_port}",
                             bookmark_interval=self.spec.bookmark_interval, gate=self.outages.gate,
                             served=self.spec.served)
        await self._serve()
        local = "127.0.0.1" if self.spec.bind_host == "0.0.0.0" else self.spec.bind_host
        self.api_host = pod_api_host or local
        await self.runtime.start(self)
        self.kubeconfig.write_text(certs.kubeconfig(server=self.url, ca_path=self.ca_path,
                                                    token=self.admin_token))
        self.kubeconfig.chmod(0o600)

    async def _serve(self) -> None:
        assert self.api is not None and self._certs is not None
        self._runner = web.AppRunner(self.api.app(), access_log=None, handle_signals=False,
                                     shutdown_timeout=1.0)
        await self._runner.setup()
        context = self._certs.ssl_context()
        for host in self._hosts:
            site = web.TCPSite(self._runner, host, self.api_port, ssl_context=context, reuse_address=True,
                               backlog=1024)
            await site.start()

    def _abort_connections(self) -> None:
        server = self._runner.server if self._runner is not None else None
        # drop connections outright: a TLS close handshake with a gone client never finishes
        for handler in server.connections if server is not None else []:
            if handler.transport is not None:
                handler.transport.abort()

    async def _cut_connections(self) -> None:
        """Every open connection ends, watches and log follows included (as a restart ends them); the
        listeners stay."""
        self.store.close_watches()
        self._abort_connections()

    async def _close_http(self) -> None:
        if self._runner is None:
            return
        self.store.close_watches()
        self._abort_connections()
        await self._runner.cleanup()
        self._runner = None

    def _start_doubles(self) -> None:
        """The models of other systems this cluster runs (doubles/), on its loop."""
        spec = self.spec
        if spec.node_pools:
            self.autoscaler = Autoscaler(
                store=self.store, pools=spec.node_pools, schedule=scheduler.schedule,
                record=self._record_event,
                new_node=lambda name, gpus, index: node_object(index, gpus, spec, name=name),
                first_index=len(spec.nodes) + spec.cpu_nodes + 1, gpu_taint=spec.gpu_taint,
                timing=Timing(scan_interval=spec.autoscaler_scan_interval,
                              provision_delay=spec.autoscaler_provision_delay,
                              ready_delay=spec.autoscaler_ready_delay,
                              unneeded_time=spec.autoscaler_unneeded_time),
                provisioning_requests=spec.provisioning_requests)
            self._doubles.append(asyncio.ensure_future(self.autoscaler.run()))
        if self.kueue is not None:
            self._doubles.append(asyncio.ensure_future(self.kueue.run()))

    def _record_event(self, obj: Mapping[str, Any], *, reason: str, message: str, type: str = "Normal",
                      component: str = "kubelet", host: str = "", field_path: str = "") -> None:
        if self.controllers is not None:
            self.controllers.events.record(obj, reason=reason, message=message, type=type,
                                           component=component, host=host, field_path=field_path)

    async def astop(self) -> None:
        try:
            self.outages.forget()
            for task in self._doubles:
                task.cancel()
            await asyncio.gather(*self._doubles, return_exceptions=True)
            self._doubles.clear()
            with contextlib.suppress(Exception):
                await self.runtime.shutdown()
            self.store.close_watches()
            if self.controllers is not None:
                await self.controllers.stop()
        finally:
            # whatever failed above, the server still closes its listener and connections and the
            # directories go: a half-stopped cluster would leave a live HTTPS server in the process
            await self._close_http()
            # TLS transports finish closing over a few more loop turns
            await asyncio.sleep(0.05)
            shutil.rmtree(self.state_dir, ignore_errors=True)
            if self._own_dir:
                shutil.rmtree(self.dir, ignore_errors=True)

    def _seed(self) -> None:
        s = self.store
        for ns in SEED_NAMESPACES:
            s.create("namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                    "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}},
                                    "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
            s.create("serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount",
                                         "metadata": {"name": "default", "namespace": ns}})
        for role in rbac.BOOTSTRAP_CLUSTER_ROLES:
            s.create("clusterroles.rbac.authorization.k8s.io", copy.deepcopy(role))
        for binding in rbac.BOOTSTRAP_CLUSTER_ROLE_BINDINGS:
            s.create("clusterrolebindings.rbac.authorization.k8s.io", copy.deepcopy(binding))
        s.create("services", {"apiVersion": "v1", "kind": "Service",
                              "metadata": {"name": "kubernetes", "namespace": "default",
                                           "labels": {"component": "apiserver", "provider": "kubernetes"}},
                              "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.1",
                                       "clusterIPs": ["10.96.0.1"],
                                       "ports": [{"name": "https", "port": 443, "protocol": "TCP",
                                                  "targetPort": 6443}], "sessionAffinity": "None"},
                              "status": {"loadBalancer": {}}})
        for pc in priority.system_class_objects():
            s.create("priorityclasses.scheduling.k8s.io", pc)
        renewed = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        gpu_nodes = [node_object(i, gpus, self.spec) for i, gpus in enumerate(self.spec.nodes, start=1)]
        first_cpu = len(self.spec.nodes) + 1
        cpu_nodes = [node_object(first_cpu + k, None, self.spec, name=f"cpu-{k + 1}")
                     for k in range(self.spec.cpu_nodes)]
        for obj in gpu_nodes + cpu_nodes:
            node = s.create("nodes", obj)
            # the lease a kubelet renews; `kubectl describe node` shows it
            owner = {"apiVersion": "v1", "kind": "Node", "name": node["metadata"]["name"],
                     "uid": node["metadata"]["uid"]}
            s.create("leases.coordination.k8s.io", {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": node["metadata"]["name"], "namespace": "kube-node-lease",
                             "ownerReferences": [owner]},
                "spec": {"holderIdentity": node["metadata"]["name"], "leaseDurationSeconds": 40,
                         "renewTime": renewed}})

    # ---- test hooks ----------------------------------------------------------------------------------------
    def inject_fault(self, code: int, *, verb: str | None = None, resource: str | None = None,
                     subresource: str | None = None, namespace: str | None = None, name: str | None = None,
                     count: int = 1, retry_after: int | None = None, message: str = "") -> Fault:
        """The next `count` requests matching verb/resource/... answer `code` (e.g. 500, 503, 429, 409)."""
        return self.faults.inject(Fault(code, verb, resource, subresource, namespace, name, count,
                                        retry_after, message))

    async def aapi_outage(self, mode: str, *, seconds: float | None = None,
                          retry_after: int | None = None) -> Outage:
        """Start an API outage (doubles/apioutage.py): `refuse`, `hang`, `429` or `503`, for `seconds` or
        until `aclear_api_outage()`; one in force replaces the one before."""
        return await self.outages.start(mode, seconds=seconds, retry_after=retry_after)

    async def aclear_api_outage(self) -> Outage | None:
        """End the API outage in force; the one ended, or None when there was none."""
        return await self.outages.clear()

    async def ashutdown_node(self, node: str, *, grace_period: float = 30.0,
                             critical_grace_period: float = 10.0) -> nodeshutdown.NodeShutdown:
        """Shut `node` down gracefully as its kubelet would (doubles/nodeshutdown.py: shutdownGracePeriod
        `grace_period`, shutdownGracePeriodCriticalPods `critical_grace_period`); returns when it is done."""
        periods = nodeshutdown.ShutdownPeriods(grace_period, critical_grace_period)
        assert self.controllers is not None, "the cluster is not started"
        controllers = self.controllers

        def record(obj: Obj, kind: str, reason: str, message: str) -> None:
            controllers.record_event(obj, kind, reason, message, component="kubelet", host=node)

        return await nodeshutdown.shutdown_node(store=self.store, runtime=self.runtime, record=record,
                                                node=node, periods=periods)

    def _processes(self, what: str) -> ProcessRuntime:
        if not isinstance(self.runtime, ProcessRuntime):
            raise InvalidInput(f"{what} needs pods that are processes (runtime='process', localcluster up "
                               f"--runtime process); this cluster's pods are simulated ({self.spec.runtime})")
        return self.runtime

    async def afreeze(self, pod: str, *, namespace: str = "default", match: str | None = None,
                      container: str | None = None) -> ProcessFault:
        """Freeze the pod's processes (runtime/processfaults.py); `match`: only those whose command line
        matches this regular expression, and what they started."""
        runtime = self._processes("freezing a pod")
        return await runtime.freeze(namespace, pod, match=match, container=container)

    async def athaw(self, pod: str, *, namespace: str = "default") -> ProcessFault:
        return await self._processes("thawing a pod").thaw(namespace, pod)

    async def athrottle(self, pod: str, cpu: float, *, namespace: str = "default", match: str | None = None,
                        container: str | None = None) -> ProcessFault:
        """Hold the pod's processes (or those matching `match`) to `cpu` CPUs with a cgroup CPU quota."""
        runtime = self._processes("throttling a pod")
        return await runtime.throttle(namespace, pod, cpu, match=match, container=container)

    async def aunthrottle(self, pod: str, *, namespace: str = "default") -> ProcessFault:
        return await self._processes("unthrottling a pod").unthrottle(namespace, pod)

    async def acut_watches(self) -> int:
        return self.store.close_watches()

    async def arestart(self, *, down_seconds: float = 0.0) -> None:
        """Stop serving HTTP (every connection drops), optionally stay down, then serve again; the store,
        controllers and pods carry on as if only the API server process had restarted."""
        self.store.close_watches()
        await self._close_http()
        if down_seconds:
            await asyncio.sleep(down_seconds)
        await self._serve()

    # ---- lifecycle on a private loop in a thread -----------------------------------------------------------
    def start(self, *, timeout: float = 60.0) -> LocalCluster:
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.astart())
            except BaseException as error:  # report any start failure to the starting thread
                failure.append(error)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=run, name="local-cluster", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise TimeoutError(f"the local cluster did not start within {timeout} s")
        if failure:
            raise failure[0]
        return self

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        """Run a coroutine on the cluster's loop and return its result."""
        return self.start_coroutine(coro).result(timeout)

    def start_coroutine(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run a coroutine on the cluster's loop without waiting for it: its Future."""
        assert self._loop is not None, "call() needs a cluster started with start()"
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def stop(self, *, timeout: float = 60.0) -> None:
        if self._loop is None or self._thread is None:
            return
        try:
            self.call(self.astop(), timeout)
        except Exception as error:  # stop anyway, but say so: a leak found later has a cause to read
            log.warning("local cluster at %s: stopping did not finish cleanly: %r", self.dir, error)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        self._loop = None

    def cut_watches(self) -> int:
        return self.call(self.acut_watches())

    def api_outage(self, mode: str, *, seconds: float | None = None,
                   retry_after: int | None = None) -> Outage:
        return self.call(self.aapi_outage(mode, seconds=seconds, retry_after=retry_after))

    def clear_api_outage(self) -> Outage | None:
        return self.call(self.aclear_api_outage())

    def freeze(self, pod: str, *, namespace: str = "default", match: str | None = None,
               container: str | None = None) -> ProcessFault:
        return self.call(self.afreeze(pod, namespace=namespace, match=match, container=container))

    def thaw(self, pod: str, *, namespace: str = "default") -> ProcessFault:
        return self.call(self.athaw(pod, namespace=namespace))

    def throttle(self, pod: str, cpu: float, *, namespace: str = "default", match: str | None = None,
                 container: str | None = None) -> ProcessFault:
        return self.call(self.athrottle(pod, cpu, namespace=namespace, match=match, container=container))

    def unthrottle(self, pod: str, *, namespace: str = "default") -> ProcessFault:
        return self.call(self.aunthrottle(pod, namespace=namespace))

    def shutdown_node(self, node: str, *, grace_period: float = 30.0,
                      critical_grace_period: float = 10.0) -> nodeshutdown.NodeShutdown:
        coro = self.ashutdown_node(node, grace_period=grace_period,
                                   critical_grace_period=critical_grace_period)
        return self.call(coro, timeout=grace_period + 60)

    def restart(self, *, down_seconds: float = 0.0) -> None:
        self.call(self.arestart(down_seconds=down_seconds))

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host if host != "0.0.0.0" else "127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
