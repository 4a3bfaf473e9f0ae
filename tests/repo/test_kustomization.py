"""`kubectl apply -k .`: the kustomization at the repository root is exactly rbac/ plus manifests/ (the job
pods' template and the manager),
and one setting moves both images to a registry (the base image too, which the manager passes to job pods in
DT_IMAGE) and everything namespaced to a namespace. Rendered by the real kubectl's built-in kustomize."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import yaml
from localcluster import kubectl_path

REPO = Path(__file__).resolve().parents[2]


def kustomize(directory: Path) -> list[dict[str, Any]]:
    done = subprocess.run([kubectl_path(), "kustomize", str(directory)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "HOME": str(directory)})
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def files(*paths: str) -> list[dict[str, Any]]:
    return [d for p in paths for d in yaml.safe_load_all((REPO / p).read_text()) if d]


def key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def manager_pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The manager Job's pod template spec."""
    spec: dict[str, Any] = next(o for o in objects if o["kind"] == "Job")["spec"]["template"]["spec"]
    return spec


def manager(objects: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = manager_pod(objects)["containers"][0]
    return container


def env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container["env"]}


def test_the_kustomization_is_the_rbac_and_the_manifests_unchanged() -> None:
    objects = kustomize(REPO)
    shipped = [str(p.relative_to(REPO)) for d in ("rbac", "manifests")
               for p in sorted((REPO / d).glob("*.yaml"))]
    expected = {key(o): o for o in files(*shipped)}
    assert {key(o): o for o in objects} == expected
    # the manager reads the job pods' template from the ConfigMap it mounts
    (volume,) = [v for v in manager_pod(objects)["volumes"] if "configMap" in v]
    mount = next(m for m in manager(objects)["volumeMounts"] if m["name"] == volume["name"])
    (key_name,) = expected[("ConfigMap", volume["configMap"]["name"])]["data"]
    assert env(manager(objects))["DT_POD_TEMPLATE"] == f"{mount['mountPath']}/{key_name}"


def test_one_setting_moves_both_images_and_the_namespace(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(REPO, overlay)],
        "namespace": "ml-team",
        "images": [{"name": "distributetrain/manager", "newName": "registry.example.com/ml/manager",
                    "newTag": "1.4"},
                   {"name": "distributetrain/base", "newName": "registry.example.com/ml/base",
                    "newTag": "1.4"}]}))
    rendered = kustomize(overlay)
    container = manager(rendered)
    assert container["image"] == "registry.example.com/ml/manager:1.4"
    assert env(container)["DT_IMAGE"] == "registry.example.com/ml/base:1.4"
    assert env(container)["DT_SCHEDULE_TIMEOUT"] == "5m"  # other values are left alone
    # the pod template's ConfigMap follows the namespace, with the manager that mounts it
    assert next(o for o in rendered if o["kind"] == "ConfigMap")["metadata"]["namespace"] == "ml-team"
    # the admission policy's allowed image follows the base image (kustomizeconfig.yaml)
    params = next(o for o in rendered if key(o) == ("PodTemplate", "distributetrain-admission"))
    assert params["template"]["spec"]["containers"][0]["image"] == "registry.example.com/ml/base:1.4"
    # the namespace itself is renamed, still enforcing Pod Security restricted
    (namespace,) = [o for o in rendered if o["kind"] == "Namespace"]
    assert namespace["metadata"]["name"] == "ml-team"
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    # cluster-scoped: the ClusterRole(Binding), the manager's PriorityClass, and the admission policy and its
    # binding (which this kustomize may stamp with the namespace all the same: the API server drops it for a
    # cluster-scoped object)
    for obj in rendered:
        if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding", "Namespace", "ValidatingAdmissionPolicy",
                               "ValidatingAdmissionPolicyBinding", "PriorityClass"):
            assert obj["metadata"]["namespace"] == "ml-team", key(obj)
        for subject in obj.get("subjects") or []:
            assert subject["namespace"] == "ml-team", key(obj)  # the bindings follow the ServiceAccount


def test_the_openshift_component_adds_the_scc_binding_and_the_managers_dns_egress(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(REPO, overlay)],
        "components": [os.path.relpath(REPO / "openshift", overlay)], "namespace": "ml-team"}))
    rendered = {key(o): o for o in kustomize(overlay)}
    binding = rendered[("RoleBinding", "distributetrain-scc-restricted-v2")]
    assert binding["roleRef"]["name"] == "system:openshift:scc:restricted-v2"
    assert {(s["name"], s["namespace"]) for s in binding["subjects"]} == {
        ("distributetrain-serviceaccount", "ml-team"), ("default", "ml-team")}
    egress = rendered[("NetworkPolicy", "distributetrain-manager-egress")]["spec"]["egress"]
    assert {p["port"] for p in egress[0]["ports"]} == {5353}
    # the manager fixes no uid: the SCC assigns one from the namespace's range
    manager_job = rendered[("Job", "distributetrain-manager")]
    assert "runAsUser" not in manager_job["spec"]["template"]["spec"]["securityContext"]
    assert set(rendered) >= {key(o) for o in kustomize(REPO)} - {("Namespace", "default")}
