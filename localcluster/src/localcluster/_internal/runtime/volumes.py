"""Pod volumes as host directories, and the bind mounts that put them at each container's mountPath.

Every volume is materialised once per pod under the pod's directory (emptyDir, secret, configMap, downwardAPI,
projected, the service-account token), except hostPath (the host path itself) and persistentVolumeClaim (one
directory per claim under the cluster's state dir, kept across pods until `localcluster down`; the claim must
exist). A memory-backed emptyDir is a tmpfs (runtime/tmpfs.py). The sandbox (runtime/sandbox.py) bind-mounts
them inside the container's private mount namespace. Secret, configMap, downwardAPI and projected contents
are written as the kubelet's AtomicWriter writes them (the files in a `..<time>` directory, `..data` a symlink
to it, each top-level name a symlink through `..data`), so an update (`refresh`, which the runtime calls on
each of the kubelet's syncs of the pod, runtime/volumesync.py) swaps every file at once with one rename.
With the pod's `fsGroup`, a volume's files belong to that group and are group-readable (secret, configMap,
downwardAPI, projected) or readable and writable (emptyDir, persistentVolumeClaim), directories setgid, as the
kubelet's SetVolumeOwnership makes them: a non-root container reads a Secret mounted with mode 0400 through
its group, the mode becoming 0440.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from localcluster._internal.runtime.podenv import Getter, NotReadyYet, field_value, resource_value
from localcluster._internal.runtime.tmpfs import is_memory_backed, memory_volume_bytes, mount_tmpfs

SA_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
SA_VOLUME = "kube-api-access"
# the volumes the kubelet keeps current while the pod runs
REFRESHED = ("secret", "configMap", "downwardAPI", "projected")


@dataclass(frozen=True)
class Mount:
    source: str          # host path (directory or file)
    dest: str            # path inside the container
    read_only: bool = False


@dataclass(frozen=True)
class PodContext:
    """What volume sources need to know about the pod and the cluster."""

    pod: Mapping[str, Any]
    pod_ip: str
    host_ip: str
    allocatable: Mapping[str, Any]
    ca_cert_pem: bytes
    token: str


DATA_LINK = "..data"


def _owned_mode(mode: int, fs_group: Any) -> int:
    """A file's mode once set_ownership has given the fsGroup read access."""
    return mode | _RO_MASK if fs_group is not None and os.geteuid() == 0 else mode


def _payload_of(directory: Path) -> dict[str, tuple[bytes, int]]:
    """What an AtomicWriter directory holds now: relative path -> (content, mode)."""
    data = directory / DATA_LINK
    if not data.is_symlink():
        return {}
    root = directory / os.readlink(data)
    return {str(path.relative_to(root)): (path.read_bytes(), stat.S_IMODE(path.stat().st_mode))
            for path in root.rglob("*") if path.is_file()}


def write_atomic(directory: Path, files: Mapping[str, bytes], modes: Mapping[str, int], default_mode: int,
                 *, fs_group: Any = None) -> bool:
    """Write `files` as the kubelet's AtomicWriter does (pkg/volume/util/atomic_writer.go): into a fresh
    `..<time>` directory, then `..data` swapped to it by one rename, every top-level name a symlink through
    `..data`; the old directory removed last. A reader sees the old files or the new, never a mix. Returns
    False (and writes nothing) when the content and modes are what the directory already holds."""
    wanted: dict[str, tuple[bytes, int]] = {}
    for rel, content in files.items():
        parts = PurePosixPath(rel)
        if ".." in parts.parts or parts.is_absolute() or not parts.parts:
            raise ValueError(f"volume item path {rel!r} must be relative and must not contain '..'")
        wanted[str(parts)] = (content, modes.get(rel, default_mode))
    data = directory / DATA_LINK
    old = os.readlink(data) if data.is_symlink() else None
    if old is not None and _payload_of(directory) == {
            rel: (content, _owned_mode(mode, fs_group)) for rel, (content, mode) in wanted.items()}:
        return False
    stamp = directory / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.monotonic_ns() % 10**9:09d}"
    stamp.mkdir()
    os.chmod(stamp, 0o755)
    for rel, (content, mode) in wanted.items():
        target = stamp / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        os.chmod(target, mode)
    set_ownership(stamp, fs_group, read_only=True)
    temporary = directory / "..data_tmp"
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    temporary.symlink_to(stamp.name)
    os.replace(temporary, data)  # the one atomic step: every file changes at once
    tops = {PurePosixPath(rel).parts[0] for rel in wanted}
    for top in tops:
        link = directory / top
        if not link.is_symlink():
            link.symlink_to(f"{DATA_LINK}/{top}")
    for entry in directory.iterdir():
        if entry.is_symlink() and entry.name not in tops and entry.name != DATA_LINK:
            entry.unlink()  # a key the update removed
    if old is not None:
        shutil.rmtree(directory / old, ignore_errors=True)
    return True


def _keyed(data: Mapping[str, bytes], items: list[dict[str, Any]] | None, what: str,
           optional: bool) -> tuple[dict[str, bytes], dict[str, int]]:
    if not items:
        return dict(data), {}
    files, modes = {}, {}
    for item in items:
        if item["key"] not in data:
            if optional:
                continue
            raise NotReadyYet(f"configmap/secret {what} has no key {item['key']}")
        files[item["path"]] = data[item["key"]]
        if "mode" in item:
            modes[item["path"]] = int(item["mode"])
    return files, modes


def object_bytes(obj: Mapping[str, Any], secret: bool) -> dict[str, bytes]:
    if secret:
        data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
        data.update({k: str(v).encode() for k, v in (obj.get("stringData") or {}).items()})
        return data
    data = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
    data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    return data


def _object_files(get: Getter, namespace: str, source: Mapping[str, Any], secret: bool,
                  ca_cert_pem: bytes) -> tuple[dict[str, bytes], dict[str, int]]:
    name = source.get("secretName") if secret else source.get("name")
    kind = "secrets" if secret else "configmaps"
    obj = get(kind, namespace, name or "")
    if obj is None and not secret and name == "kube-root-ca.crt":
        obj = {"data": {"ca.crt": ca_cert_pem.decode()}}  # the CA configmap every namespace gets
    if obj is None:
        if source.get("optional"):
            return {}, {}
        raise NotReadyYet(f'{"secret" if secret else "configmap"} "{name}" not found')
    return _keyed(object_bytes(obj, secret), source.get("items"), f"{namespace}/{name}",
                  bool(source.get("optional")))


def _downward_files(ctx: PodContext, items: list[dict[str, Any]]) -> tuple[dict[str, bytes], dict[str, int]]:
    files, modes = {}, {}
    containers = {c["name"]: c for c in ctx.pod.get("spec", {}).get("containers", [])}
    for item in items:
        if "fieldRef" in item:
            value = field_value(ctx.pod, item["fieldRef"]["fieldPath"], pod_ip=ctx.pod_ip,
                                host_ip=ctx.host_ip)
        else:
            ref = item["resourceFieldRef"]
            container = containers.get(ref.get("containerName", ""), next(iter(containers.values()), {}))
            value = resource_value(container, ref, ctx.allocatable)
        files[item["path"]] = value.encode()
        if "mode" in item:
            modes[item["path"]] = int(item["mode"])
    return files, modes


def service_account_files(ctx: PodContext) -> dict[str, bytes]:
    return {"token": ctx.token.encode(), "ca.crt": ctx.ca_cert_pem,
            "namespace": ctx.pod.get("metadata", {}).get("namespace", "default").encode()}


def materialise(volume: Mapping[str, Any], *, ctx: PodContext, get: Getter, pod_dir: Path,
                claims_dir: Path) -> str:
    """Make the volume's host directory (or find it) and return its path."""
    namespace = ctx.pod.get("metadata", {}).get("namespace", "default")
    target = pod_dir / "volumes" / volume["name"]
    if "hostPath" in volume:
        return _host_path(volume["hostPath"])
    fs_group = ((ctx.pod.get("spec") or {}).get("securityContext") or {}).get("fsGroup")
    if "persistentVolumeClaim" in volume:
        name = volume["persistentVolumeClaim"]["claimName"]
        if get("persistentvolumeclaims", namespace, name) is None:
            raise NotReadyYet(f'persistentvolumeclaim "{name}" not found')
        claim = claims_dir / namespace / name
        claim.mkdir(parents=True, exist_ok=True)
        set_ownership(claim, fs_group, read_only=False)
        return str(claim)
    payload = _payload(volume, ctx=ctx, get=get, namespace=namespace)
    target.mkdir(parents=True, exist_ok=True)
    if is_memory_backed(volume):
        mount_tmpfs(target, memory_volume_bytes(volume, ctx.pod, ctx.allocatable.get("memory")))
    os.chmod(target, 0o777 if "emptyDir" in volume else 0o755)
    if payload is not None:
        write_atomic(target, *payload, fs_group=fs_group)
    set_ownership(target, fs_group, read_only="emptyDir" not in volume)
    return str(target)


def refresh(volume: Mapping[str, Any], *, ctx: PodContext, get: Getter, pod_dir: Path) -> bool:
    """Bring a secret, configMap, downwardAPI or projected volume up to date with its sources, as the
    kubelet's periodic sync does; True when its files changed. A source that went away leaves the files as
    they were."""
    if not any(kind in volume for kind in REFRESHED):
        return False
    target = pod_dir / "volumes" / volume["name"]
    namespace = ctx.pod.get("metadata", {}).get("namespace", "default")
    try:
        payload = _payload(volume, ctx=ctx, get=get, namespace=namespace)
    except NotReadyYet:
        return False
    if payload is None or not target.is_dir():
        return False
    fs_group = ((ctx.pod.get("spec") or {}).get("securityContext") or {}).get("fsGroup")
    return write_atomic(target, *payload, fs_group=fs_group)


def _payload(volume: Mapping[str, Any], *, ctx: PodContext, get: Getter, namespace: str
             ) -> tuple[dict[str, bytes], dict[str, int], int] | None:
    """The files (with their modes, and the default mode) of a volume made of files; None for emptyDir."""
    files: dict[str, bytes] = {}
    modes: dict[str, int] = {}
    if "secret" in volume or "configMap" in volume:
        secret = "secret" in volume
        source = volume["secret"] if secret else volume["configMap"]
        files, modes = _object_files(get, namespace, source, secret, ctx.ca_cert_pem)
        return files, modes, int(source.get("defaultMode", 0o644))
    if "downwardAPI" in volume:
        files, modes = _downward_files(ctx, volume["downwardAPI"].get("items") or [])
        return files, modes, int(volume["downwardAPI"].get("defaultMode", 0o644))
    if "projected" in volume:
        for source in volume["projected"].get("sources") or []:
            more: dict[str, bytes]
            more_modes: dict[str, int] = {}
            if "serviceAccountToken" in source:
                more = {source["serviceAccountToken"]["path"]: ctx.token.encode()}
            elif "downwardAPI" in source:
                more, more_modes = _downward_files(ctx, source["downwardAPI"].get("items") or [])
            elif "secret" in source:
                more, more_modes = _object_files(get, namespace, {"secretName": source["secret"].get("name"),
                                                                  **source["secret"]}, True, ctx.ca_cert_pem)
            elif "configMap" in source:
                more, more_modes = _object_files(get, namespace, source["configMap"], False, ctx.ca_cert_pem)
            else:
                continue
            files.update(more)
            modes.update(more_modes)
        return files, modes, int(volume["projected"].get("defaultMode", 0o644))
    if "emptyDir" not in volume:
        raise ValueError(f"volume {volume['name']}: only emptyDir, secret, configMap, downwardAPI, "
                         "projected, hostPath and persistentVolumeClaim volumes are emulated locally")
    return None


_RW_MASK, _RO_MASK, _EXEC_MASK = 0o660, 0o440, 0o110


def set_ownership(root: Path, fs_group: Any, *, read_only: bool) -> None:
    """The kubelet's SetVolumeOwnership (pkg/volume/volume_linux.go): every file and directory gets group
    `fs_group`, its mode OR the group's read (and write, unless `read_only`) bits; directories also setgid
    and group-executable. Only as root (chown to another group needs it); nothing without an fsGroup."""
    if fs_group is None or os.geteuid() != 0:
        return
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        os.chown(path, -1, int(fs_group))
        mode = stat.S_IMODE(os.stat(path).st_mode) | (_RO_MASK if read_only else _RW_MASK)
        if path.is_dir():
            mode |= stat.S_ISGID | _EXEC_MASK
        os.chmod(path, mode)


def _host_path(source: Mapping[str, Any]) -> str:
    path, kind = source["path"], source.get("type", "")
    if kind == "DirectoryOrCreate":
        os.makedirs(path, mode=0o755, exist_ok=True)
    elif kind == "FileOrCreate" and not os.path.exists(path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).touch(mode=0o644)
    checks = {"Directory": stat.S_ISDIR, "File": stat.S_ISREG, "Socket": stat.S_ISSOCK,
              "CharDevice": stat.S_ISCHR, "BlockDevice": stat.S_ISBLK}
    if kind in checks and not (os.path.exists(path) and checks[kind](os.stat(path).st_mode)):
        raise NotReadyYet(f"hostPath type check failed: {path} is not a {kind}")
    return str(path)


def container_mounts(container: Mapping[str, Any], volumes: Mapping[str, str]) -> list[Mount]:
    mounts = []
    for vm in container.get("volumeMounts") or []:
        source = volumes[vm["name"]]
        if vm.get("subPath"):
            source = os.path.join(source, vm["subPath"])
            if not os.path.exists(source):
                os.makedirs(source, exist_ok=True)  # the kubelet creates a missing subPath as a directory
        mounts.append(Mount(source=source, dest=vm["mountPath"], read_only=bool(vm.get("readOnly"))))
    return mounts


def wants_service_account(pod: Mapping[str, Any], account: Mapping[str, Any] | None) -> bool:
    spec = pod.get("spec", {})
    if spec.get("automountServiceAccountToken") is not None:
        return bool(spec["automountServiceAccountToken"])
    if account is not None and account.get("automountServiceAccountToken") is not None:
        return bool(account["automountServiceAccountToken"])
    return True
