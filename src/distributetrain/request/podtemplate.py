"""The user's pod template, and the merge that lays the manager's parts on top of it.

Job pods are configured the MPI Operator way: the user owns a PodTemplateSpec (`--pod-template FILE`, or
`--worker-template` / `--chief-template` for one role; the shipped manifest mounts one from a ConfigMap) with
whatever a cluster asks of pods: annotations, env (NCCL_*), resources, volumes, imagePullSecrets,
priorityClassName, runtimeClassName, securityContext, affinity, sidecar containers. The template's first
container is the job container; the others are kept as they are (and counted: their requests are the pod's).

`merge` starts from the template and lays the manager's parts on top, in two strengths:
- defaults, which the template overrides: the mesh opt-out annotations, the pod's and the job container's
  securityContext fields, environment variables (NCCL's debug level, the fabric's settings; per name),
  cpu and memory requests/limits (per resource: a template that names memory in
  either requests or limits gets none of ours for memory), terminationGracePeriodSeconds, enableServiceLinks,
  automountServiceAccountToken;
- what the manager owns: name, namespace, its labels (the user's are kept, ours win), ownerReferences, the
  GPU share and the fabric's, the node pin (ANDed into every required node-affinity term of the template),
  tolerations and node selector (added), the ssh, hostfile, work and /dev/shm volumes and mounts, the job
  container's name,
  image, command, args, environment (DT_*), ports and readiness probe, restartPolicy.
A template that sets what the manager owns is refused (`parse`, `conflicts`), naming the field: exit 2,
nothing created. Pure: text in, values out; the one read of a file is `load`, at the edge.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from distributetrain import naming
from distributetrain.errors import InvalidInput
from distributetrain.quantity import parse_quantity

# PodTemplateSpec.metadata: what a template may set; the rest (name, namespace, ownerReferences...) is ours
_METADATA_ALLOWED = ("labels", "annotations")
# pod spec fields the manager owns outright
_OWNED_POD_FIELDS = ("nodeName", "restartPolicy")
# fields of the job container (the template's first) the manager owns
_OWNED_CONTAINER_FIELDS = ("image", "command", "args", "readinessProbe")
_MANAGED_MOUNT_PATHS = (naming.SSH_MOUNT_PATH, naming.HOSTFILE_MOUNT_PATH, naming.SHM_MOUNT_PATH)
# the DT_* variables the manager sets in job containers; a template may set others (e.g. DT_START_TIMEOUT)
MANAGED_ENV = frozenset({naming.ENV_JOB_NAME, naming.ENV_SSH_PORT, naming.ENV_SSH_DIR, naming.ENV_HOSTFILE,
                         naming.ENV_NUM_PROCESSES, naming.ENV_SLOTS, naming.ENV_POD_IP, naming.ENV_POD_IPS,
                         naming.ENV_TRANSPORT, naming.ENV_SSH_TIMEOUT, naming.ENV_NETWORK_INTERFACE,
                         naming.ENV_FABRIC, naming.ENV_NODE_NAME})
_RESERVED_CONTAINER_NAMES = (naming.WORKER_CONTAINER, naming.CHIEF_CONTAINER)


@dataclass(frozen=True)
class PodTemplate:
    """A validated PodTemplateSpec. `source` says where it came from (the option or variable and the file),
    for error messages; `metadata` holds only labels and annotations."""

    source: str
    metadata: Mapping[str, Any] = field(default_factory=dict)
    spec: Mapping[str, Any] = field(default_factory=dict)

    @property
    def job_container(self) -> Mapping[str, Any]:
        containers = self.spec.get("containers") or []
        return containers[0] if containers else {}

    @property
    def sidecars(self) -> list[Mapping[str, Any]]:
        return list((self.spec.get("containers") or [])[1:])


def load(path: str, *, source: str = "") -> PodTemplate:
    """Read and parse a template file; a missing or unreadable file is InvalidInput naming it."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise InvalidInput(f"{path!r} cannot be read ({err.strerror or err}); give the path of a "
                           "PodTemplateSpec YAML file") from None
    try:
        return parse(text, source=source or path)
    except InvalidInput as err:
        raise InvalidInput(f"{path}: {err}") from None


def parse(text: str, *, source: str) -> PodTemplate:
    """A PodTemplateSpec (`metadata`, `spec`), or a `kind: PodTemplate` object (its `template`), from YAML.
    An empty document (comments only) is an empty template. Raises InvalidInput naming every field the
    manager owns that the template sets."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise InvalidInput(f"not valid YAML: {err}") from None
    if doc is None:
        return PodTemplate(source=source)
    if not isinstance(doc, dict):
        raise InvalidInput(f"must be a PodTemplateSpec mapping (metadata, spec), not {type(doc).__name__}")
    if doc.get("kind") == "PodTemplate":
        doc = doc.get("template") or {}
        if not isinstance(doc, dict):
            raise InvalidInput("template: must be a PodTemplateSpec mapping (metadata, spec)")
    unknown = sorted(set(doc) - {"metadata", "spec"})
    if unknown:
        raise InvalidInput(f"{', '.join(unknown)}: not a PodTemplateSpec field (a template has metadata and "
                           "spec; a whole object may be given as kind: PodTemplate with template:)")
    metadata, spec = doc.get("metadata") or {}, doc.get("spec") or {}
    if not isinstance(metadata, dict) or not isinstance(spec, dict):
        raise InvalidInput("metadata and spec must be mappings")
    problems = [*_metadata_problems(metadata), *_spec_problems(spec)]
    if problems:
        raise InvalidInput("; ".join(problems))
    return PodTemplate(source=source, metadata=copy.deepcopy(metadata), spec=copy.deepcopy(spec))


def _metadata_problems(metadata: Mapping[str, Any]) -> list[str]:
    problems = [f"metadata.{key}: set by the manager; a template may set only labels and annotations"
                for key in sorted(set(metadata) - set(_METADATA_ALLOWED))]
    for kind in _METADATA_ALLOWED:
        values = metadata.get(kind) or {}
        if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
            problems.append(f"metadata.{kind}: must map names to strings (quote numbers and booleans)")
            continue
        if kind == "labels":
            for key, value in values.items():
                try:
                    naming.check_qualified_name(str(key))
                    naming.check_label_value(value)
                except InvalidInput as err:
                    problems.append(f"metadata.labels.{key}: {err}")
    return problems


def _containers(spec: Mapping[str, Any], kind: str) -> list[Mapping[str, Any]]:
    containers = spec.get(kind) or []
    if not isinstance(containers, list) or not all(isinstance(c, dict) for c in containers):
        raise InvalidInput(f"spec.{kind}: must be a list of containers")
    return containers


def _spec_problems(spec: Mapping[str, Any]) -> list[str]:
    problems = [f"spec.{key}: set by the manager (each pod is pinned to its planned node and runs once); "
                "remove it from the template" for key in _OWNED_POD_FIELDS if key in spec]
    for volume in spec.get("volumes") or []:
        if isinstance(volume, dict) and volume.get("name") in naming.MANAGED_VOLUMES:
            problems.append(f"spec.volumes[{volume.get('name')}]: the manager's own volume name (it uses "
                            f"{', '.join(naming.MANAGED_VOLUMES)}); rename yours")
    containers = _containers(spec, "containers")
    for kind in ("containers", "initContainers"):
        for index, container in enumerate(_containers(spec, kind)):
            where = f"spec.{kind}[{index}]"
            sidecar = not (kind == "containers" and index == 0)
            if sidecar and container.get("name") in _RESERVED_CONTAINER_NAMES:
                problems.append(f"{where}.name: {container.get('name')!r} names the manager's job container; "
                                "give this container another name")
            for mount in container.get("volumeMounts") or []:
                if not isinstance(mount, dict):
                    continue
                if mount.get("name") in naming.MANAGED_VOLUMES:
                    problems.append(f"{where}.volumeMounts[{mount.get('name')}]: the manager's own volume")
                elif str(mount.get("mountPath", "")).rstrip("/") in _MANAGED_MOUNT_PATHS:
                    problems.append(f"{where}.volumeMounts[{mount.get('name')}].mountPath: "
                                    f"{mount.get('mountPath')} is where the manager mounts its own volume")
    if containers:
        job = containers[0]
        problems += [f"spec.containers[0].{key}: the job container's {key} is the manager's (it runs the "
                     "base image's entrypoint with the job's command; set the image with --image / DT_IMAGE, "
                     "the command with --command / DT_COMMAND)"
                     for key in _OWNED_CONTAINER_FIELDS if key in job]
        for entry in job.get("env") or []:
            if isinstance(entry, dict) and entry.get("name") in MANAGED_ENV:
                problems.append(f"spec.containers[0].env[{entry['name']}]: set by the manager for every job")
    return problems


def conflicts(template: PodTemplate, *, resource: str, node_selector: Mapping[str, str],
              mount_path: str | None, shm_bytes: int) -> list[str]:
    """What the template sets that this request's own parts contradict: the GPU resource in any container,
    a node selector key with another value, a mount at the claim's path, a job container memory limit that
    /dev/shm would not fit in."""
    problems = []
    spec = template.spec
    for kind in ("containers", "initContainers"):
        for index, container in enumerate(_containers(spec, kind)):
            resources = container.get("resources") or {}
            for part in ("limits", "requests"):
                if resource in (resources.get(part) or {}):
                    problems.append(f"spec.{kind}[{index}].resources.{part}.{resource}: the GPU share is the "
                                    "manager's (it sets each pod's from the plan); remove it")
            if mount_path is not None:
                for mount in container.get("volumeMounts") or []:
                    if isinstance(mount, dict) and str(mount.get("mountPath", "")).rstrip("/") == \
                            mount_path.rstrip("/"):
                        problems.append(f"spec.{kind}[{index}].volumeMounts[{mount.get('name')}].mountPath: "
                                        f"{mount_path} is where --volume-claim is mounted")
    for key, value in (spec.get("nodeSelector") or {}).items():
        if key in node_selector and node_selector[key] != value:
            problems.append(f"spec.nodeSelector.{key}: {value!r}, but --node-selector asks for "
                            f"{node_selector[key]!r}")
    limit = ((template.job_container.get("resources") or {}).get("limits") or {}).get("memory")
    if shm_bytes and limit is not None and \
            parse_quantity(limit, what="spec.containers[0].resources.limits.memory") <= shm_bytes:
        problems.append(f"spec.containers[0].resources.limits.memory: {limit} leaves no room beside "
                            f"/dev/shm ({shm_bytes} bytes, --shm-size), which counts against it; raise it")
    return problems


def named_resources(template: PodTemplate) -> set[str]:
    """The resources any container of the template requests or limits."""
    names: set[str] = set()
    for kind in ("containers", "initContainers"):
        for container in template.spec.get(kind) or []:
            res = container.get("resources") or {}
            names.update(res.get("limits") or {}, res.get("requests") or {})
    return names


def names_resources(template: PodTemplate | None, *resources: str) -> bool:
    """Whether any container of the template requests or limits any of `resources` (e.g. cpu, memory)."""
    if template is None:
        return False
    for kind in ("containers", "initContainers"):
        for container in template.spec.get(kind) or []:
            res = container.get("resources") or {}
            if any(r in (res.get("limits") or {}) or r in (res.get("requests") or {}) for r in resources):
                return True
    return False


# ---- the merge -----------------------------------------------------------------------------------------

def merge(template: PodTemplate | None, *, defaults: Mapping[str, Any],
          owned: Mapping[str, Any]) -> dict[str, Any]:
    """The pod to create: the template, `defaults` laid under it and `owned` over it. Both are whole pods
    whose `spec.containers` hold the job container alone (`defaults` may hold a partial one); the template
    was checked by `parse` and `conflicts`, so nothing of `owned` collides with it."""
    metadata = copy.deepcopy(dict(template.metadata)) if template else {}
    spec = copy.deepcopy(dict(template.spec)) if template else {}
    containers = spec.get("containers") or [{}]
    job, sidecars = dict(containers[0]), containers[1:]
    default_spec, default_job = _split(defaults)
    owned_spec, owned_job = _split(owned)

    # defaults: the template wins
    _under(metadata, {k: v for k, v in (defaults.get("metadata") or {}).items()})
    _under(spec, default_spec)
    _under(job, {k: v for k, v in default_job.items() if k not in ("resources", "env")})
    job["resources"] = _resources_under(job.get("resources") or {}, default_job.get("resources") or {})
    job["env"] = _env_under(job.get("env") or [], default_job.get("env") or [])

    # owned: the manager's
    meta = owned.get("metadata") or {}
    out_meta: dict[str, Any] = {"name": meta["name"], "namespace": meta["namespace"],
                                "labels": {**(metadata.get("labels") or {}), **(meta.get("labels") or {})}}
    annotations = {**(metadata.get("annotations") or {}), **(meta.get("annotations") or {})}
    if annotations:
        out_meta["annotations"] = annotations
    if meta.get("ownerReferences"):
        out_meta["ownerReferences"] = meta["ownerReferences"]
    for key, value in owned_spec.items():
        if key == "affinity":
            spec["affinity"] = _pin(spec.get("affinity") or {}, value)
        elif key == "tolerations":
            spec["tolerations"] = _union(spec.get("tolerations") or [], value)
        elif key == "nodeSelector":
            spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **value}
        elif key in ("volumes", "imagePullSecrets"):
            spec[key] = _union(spec.get(key) or [], value)
        else:
            spec[key] = value
    for key, value in owned_job.items():
        if key in ("env", "volumeMounts", "ports"):
            job[key] = [*(job.get(key) or []), *value]
        elif key == "resources":
            job["resources"] = _resources_over(job.get("resources") or {}, value)
        elif key == "securityContext":
            job[key] = {**(job.get(key) or {}), **value}
        else:
            job[key] = value
    for key in ("resources", "env"):
        if not job.get(key):
            job.pop(key, None)
    spec["containers"] = [_ordered(job), *sidecars]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": out_meta, "spec": _ordered(spec, _POD_ORDER)}


def _split(pod: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    spec = dict(pod.get("spec") or {})
    containers = spec.pop("containers", None) or [{}]
    return spec, dict(containers[0])


def _under(target: dict[str, Any], defaults: Mapping[str, Any]) -> None:
    """Fill in what `target` does not set, recursively into mappings both have."""
    for key, value in defaults.items():
        if key not in target:
            target[key] = copy.deepcopy(value)
        elif isinstance(target[key], dict) and isinstance(value, Mapping):
            _under(target[key], value)


def _resources_under(resources: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Default requests/limits per resource: one the container names in either part gets none of ours (a
    limit alone also sets the request; ours beside it could exceed it)."""
    named = set(resources.get("requests") or {}) | set(resources.get("limits") or {})
    out = {k: dict(v) for k, v in resources.items() if isinstance(v, Mapping)}
    for part in ("requests", "limits"):
        for name, value in (defaults.get(part) or {}).items():
            if name not in named:
                out.setdefault(part, {})[name] = value
    return out


def _env_under(mine: Sequence[Any], defaults: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Default variables per name: one the container sets keeps its value (a template's NCCL_DEBUG=WARN)."""
    named = {entry.get("name") for entry in mine if isinstance(entry, Mapping)}
    return [*mine, *(dict(entry) for entry in defaults if entry.get("name") not in named)]


def _resources_over(resources: Mapping[str, Any], owned: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: dict(v) for k, v in resources.items() if isinstance(v, Mapping)}
    for part in ("requests", "limits"):
        for name, value in (owned.get(part) or {}).items():
            out.setdefault(part, {})[name] = value
    return out


def _union(mine: Sequence[Any], ours: Iterable[Any]) -> list[Any]:
    out = list(mine)
    for item in ours:
        if item not in out:
            out.append(item)
    return out


def _pin(affinity: Mapping[str, Any], ours: Mapping[str, Any]) -> dict[str, Any]:
    """The template's affinity with the manager's required node affinity ANDed in: node selector terms are
    ORed, a term's expressions and fields ANDed, so our pin joins every term of the template's."""
    out = copy.deepcopy(dict(affinity))
    node = out.setdefault("nodeAffinity", {})
    key = "requiredDuringSchedulingIgnoredDuringExecution"
    pin_terms = ours["nodeAffinity"][key]["nodeSelectorTerms"]
    theirs = (node.get(key) or {}).get("nodeSelectorTerms") or []
    if not theirs:
        node[key] = {"nodeSelectorTerms": copy.deepcopy(pin_terms)}
        return out
    joined = []
    for term in theirs:
        for pin in pin_terms:
            combined = copy.deepcopy(dict(term))
            for part in ("matchExpressions", "matchFields"):
                if pin.get(part):
                    combined[part] = [*(combined.get(part) or []), *pin[part]]
            joined.append(combined)
    node[key] = {"nodeSelectorTerms": joined}
    return out


_CONTAINER_ORDER = ("name", "image", "imagePullPolicy", "command", "args", "workingDir", "env", "envFrom",
                    "resources", "volumeMounts", "ports", "readinessProbe", "securityContext")
_POD_ORDER = ("restartPolicy", "affinity", "nodeSelector", "tolerations", "containers", "initContainers",
              "volumes", "securityContext")


def _ordered(obj: Mapping[str, Any], order: Sequence[str] = _CONTAINER_ORDER) -> dict[str, Any]:
    """The fields in a reading order (a dry run prints them), the rest after."""
    first = {k: obj[k] for k in order if k in obj}
    return {**first, **{k: v for k, v in obj.items() if k not in first}}
