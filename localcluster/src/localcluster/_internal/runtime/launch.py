"""What the kubelet works out before a pod's containers start: its volumes on disk, GPU indices per container,
and for each container the shim's spec (namespaces, root, files, mounts, argv, environment)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localcluster._internal.apimachinery.quantity import parse_count
from localcluster._internal.podspec.requests import GPU_RESOURCE
from localcluster._internal.runtime.base import RuntimeHost
from localcluster._internal.runtime.images import (
    DEFAULT_PATH,
    ImageConfig,
    ImageMap,
    account_files,
    container_argv,
)
from localcluster._internal.runtime.podenv import container_args, container_env
from localcluster._internal.runtime.pods import ContainerRun, PodRun
from localcluster._internal.runtime.runas import RunAs, image_directories, run_as
from localcluster._internal.runtime.tmpfs import shm_bytes
from localcluster._internal.runtime.volumes import (
    SA_MOUNT_PATH,
    Mount,
    PodContext,
    container_mounts,
    materialise,
    refresh,
    service_account_files,
    wants_service_account,
)

SA_VOLUME_KEY = "\0serviceaccount"  # cannot clash with a volume name


@dataclass
class Launcher:
    host: RuntimeHost
    images: ImageMap
    claims_dir: Path
    venv_bin: str
    api_host: str               # where pods reach the API server
    netns: bool                 # pods have network namespaces of their own
    isolate: bool               # mount and PID namespaces per container
    user_namespace: bool        # ...inside a user namespace (no root)
    gpus_in_use: dict[str, set[int]] = field(default_factory=dict)

    def _context(self, run: PodRun) -> PodContext:
        node = self.host.get("nodes", None, run.node) or {}
        return PodContext(pod=run.pod, pod_ip=run.ip, host_ip=run.host_ip,
                          allocatable=(node.get("status") or {}).get("allocatable") or {},
                          ca_cert_pem=self.host.ca_cert_pem,
                          token=self.host.service_account_token(run.namespace, run.service_account))

    def volumes(self, run: PodRun) -> dict[str, str]:
        """Every volume's host path by name, the service-account files, /etc/hosts and /etc/hostname."""
        ctx = self._context(run)
        out = {v["name"]: materialise(v, ctx=ctx, get=self.host.get, pod_dir=run.dir,
                                      claims_dir=self.claims_dir)
               for v in run.pod["spec"].get("volumes") or []}
        account = self.host.get("serviceaccounts", run.namespace, run.service_account)
        if wants_service_account(run.pod, account):
            sa = run.dir / "serviceaccount"
            sa.mkdir(parents=True, exist_ok=True)
            for key, value in service_account_files(ctx).items():
                (sa / key).write_bytes(value)
            out[SA_VOLUME_KEY] = str(sa)
        (run.dir / "etc-hosts").write_text(run.hosts_file())
        (run.dir / "etc-hostname").write_text(run.hostname + "\n")
        return out

    def refresh_volumes(self, run: PodRun) -> list[str]:
        """Bring the pod's secret, configMap, downwardAPI and projected volumes up to date (the kubelet's
        periodic sync); the names of those that changed."""
        ctx = self._context(run)
        return [v["name"] for v in run.pod["spec"].get("volumes") or []
                if refresh(v, ctx=ctx, get=self.host.get, pod_dir=run.dir)]

    def assign_gpus(self, run: PodRun) -> None:
        """Distinct GPU indices of the node for each container asking for some, as the device plugin does."""
        node = self.host.get("nodes", None, run.node) or {}
        total = parse_count((node.get("status") or {}).get("allocatable", {}).get(GPU_RESOURCE, "0"),
                            what=f"node {run.node} {GPU_RESOURCE}")
        used = self.gpus_in_use.setdefault(run.node, set())
        for ctr in run.app:
            want = _gpu_limit(ctr.spec)
            if not want:
                continue
            free = [i for i in range(total) if i not in used]
            count = parse_count(want, what=f"container {ctr.name} {GPU_RESOURCE}")
            if count > len(free):
                raise RuntimeError(f"node {run.node}: container {ctr.name} asks for {count} {GPU_RESOURCE}, "
                                   f"{len(free)} of {total} are free")
            ctr.gpus = free[:count]
            used.update(ctr.gpus)
        pod_gpus = [g for c in run.app for g in c.gpus]
        for ctr in run.init:  # init containers run before the others: they may use the pod's devices
            want = _gpu_limit(ctr.spec)
            ctr.gpus = pod_gpus[:parse_count(want, what=GPU_RESOURCE)] if want else []

    def release_gpus(self, run: PodRun) -> None:
        used = self.gpus_in_use.get(run.node, set())
        for ctr in run.app:
            used.difference_update(ctr.gpus)
            ctr.gpus = []

    def _base_env(self, run: PodRun, ctr: ContainerRun, image: ImageConfig,
                  user: RunAs) -> tuple[list[tuple[str, str]], dict[str, str]]:
        image_env = dict(image.env)
        path = image_env.get("PATH", DEFAULT_PATH)
        # the project's environment stands in for the image's RUN steps: its bin/ comes first
        image_env["PATH"] = ":".join([self.venv_bin,
                                      *(p for p in path.split(":") if p and p != self.venv_bin)])
        image_env.setdefault("HOME", user.home)
        api_host = self.api_host if self.netns else self.host.api_host
        api_port = str(self.host.api_port)
        tcp = f"KUBERNETES_PORT_{api_port}_TCP"
        base = {"HOSTNAME": run.hostname, "KUBERNETES_SERVICE_HOST": api_host,
                "KUBERNETES_SERVICE_PORT": api_port, "KUBERNETES_SERVICE_PORT_HTTPS": api_port,
                "KUBERNETES_PORT": f"tcp://{api_host}:{api_port}",
                tcp: f"tcp://{api_host}:{api_port}", f"{tcp}_PROTO": "tcp", f"{tcp}_PORT": api_port,
                f"{tcp}_ADDR": api_host}
        if ctr.gpus:
            base["NVIDIA_VISIBLE_DEVICES"] = ",".join(map(str, ctr.gpus))
        return list(image_env.items()), base

    def sandbox_spec(self, run: PodRun, ctr: ContainerRun) -> dict[str, Any]:
        """The JSON the shim (runtime/sandbox.py) reads. Raises NotReadyYet (a missing Secret/ConfigMap key),
        ContainerConfigError (runAsNonRoot as root), ImageNotFound (an image the map does not name),
        InvalidInput (an unusable Dockerfile) or ValueError (nothing to run)."""
        image = self.images.resolve(ctr.spec.get("image", ""))
        user = run_as(run.pod, ctr.spec, image_user=image.user, users=image.users)
        image_env, base = self._base_env(run, ctr, image, user)
        node = self.host.get("nodes", None, run.node) or {}
        env = container_env(pod=run.pod, container=ctr.spec, get=self.host.get, image_env=image_env,
                            base=base, pod_ip=run.ip, host_ip=run.host_ip,
                            allocatable=(node.get("status") or {}).get("allocatable") or {})
        argv = container_args(container_argv(image, ctr.spec.get("command"), ctr.spec.get("args")), env)
        if not argv:
            raise ValueError(f"image {image.name!r} is mapped to the host's files (no Dockerfile, no "
                             f"ENTRYPOINT) and container {ctr.name} sets no command: give it a command")
        mounts = container_mounts(ctr.spec, run.volumes)
        if SA_VOLUME_KEY in run.volumes and not any(m.dest.rstrip("/") == SA_MOUNT_PATH for m in mounts):
            mounts.append(Mount(run.volumes[SA_VOLUME_KEY], SA_MOUNT_PATH, read_only=True))
        mounts += [Mount(str(run.dir / "etc-hosts"), "/etc/hosts"),
                   Mount(str(run.dir / "etc-hostname"), "/etc/hostname")]
        pause = run.net.pause.pid if run.net is not None else 0
        # in a user namespace only root is mapped: the container keeps the (unprivileged) caller's user
        switch = self.isolate and not self.user_namespace
        files = [[str(f.source), f.dest, f.mode] for f in image.files]
        if switch and (image.users or image.groups):
            accounts, homes = _accounts(image, ctr.directory)
            files += accounts
            mounts += homes
        namespaces = (["user"] if self.user_namespace else []) + ["uts", "ipc"]
        namespaces += ["net"] if self.netns else []
        return {
            "namespaces": [f"/proc/{pause}/ns/{ns}" for ns in namespaces] if self.isolate else [],
            "isolate": self.isolate, "user_namespace": self.user_namespace,
            "scratch": str(ctr.directory / "rootfs"), "fresh_sysfs": self.netns,
            "image_files": files,
            "mounts": [[m.source, m.dest, m.read_only] for m in mounts],
            "workdir": ctr.spec.get("workingDir") or image.workdir or "/",
            "shm_bytes": shm_bytes(m.dest for m in mounts),
            "argv": argv, "env": env,
            "user": {"uid": user.uid, "gid": user.gid, "groups": list(user.groups)} if switch else None,
            "no_new_privs": user.no_new_privs, "stdin": bool(ctr.spec.get("stdin")),
            "reveal": self._image_directories() if switch and not user.is_root else [],
            "image_dirs": self._image_directories(),
        }

    def _image_directories(self) -> list[str]:
        return image_directories([os.path.dirname(self.venv_bin), *map(str, self.images.build_contexts)])


def _accounts(image: ImageConfig, directory: Path) -> tuple[list[list[Any]], list[Mount]]:
    """The accounts the image's RUN steps create: /etc/passwd, /etc/group and /etc/shadow with them added,
    copied into the container's root (its overlay; the host's files never change), and for each account
    created with a home (useradd -m) a directory it owns, mounted there."""
    etc = directory / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    current = {path: Path(path).read_text() if os.access(path, os.R_OK) else ""
               for path in ("/etc/passwd", "/etc/group", "/etc/shadow")}
    files: list[list[Any]] = []
    for path, text in account_files(image, passwd=current["/etc/passwd"], group=current["/etc/group"],
                                    shadow=current["/etc/shadow"]).items():
        source = etc / os.path.basename(path)
        source.write_text(text)
        mode = 0o640 if path == "/etc/shadow" else 0o644
        files.append([str(source), path, mode])
    homes = []
    for user in image.users:
        if user.create_home:
            home = directory / "homes" / user.name
            home.mkdir(parents=True, exist_ok=True)
            os.chown(home, user.uid, user.gid)
            os.chmod(home, 0o750)
            homes.append(Mount(str(home), user.home))
    return files, homes


def _gpu_limit(container: dict[str, Any]) -> Any:
    res = container.get("resources") or {}
    return (res.get("limits") or {}).get(GPU_RESOURCE) or (res.get("requests") or {}).get(GPU_RESOURCE)
