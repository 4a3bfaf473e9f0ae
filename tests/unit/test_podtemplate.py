"""The pod template at the edge: parsed and checked once, refusing (exit 2, naming the field) what the
manager owns, before anything is created."""

from __future__ import annotations

from pathlib import Path

import pytest

from distributetrain.errors import EXIT_USAGE, InvalidInput
from distributetrain.request import podtemplate
from distributetrain.request.jobspec import JobSpec

IMAGE = "registry.example.com/team/train:1.0"


def refused(text: str) -> str:
    with pytest.raises(InvalidInput) as caught:
        podtemplate.parse(text, source="t.yaml")
    assert caught.value.exit_code == EXIT_USAGE
    return str(caught.value)


@pytest.mark.parametrize(("text", "field"), [
    ("spec: {nodeName: node-1}", "spec.nodeName"),
    ("spec: {restartPolicy: Always}", "spec.restartPolicy"),
    ("metadata: {name: x}", "metadata.name"),
    ("metadata: {namespace: ml}", "metadata.namespace"),
    ("metadata: {ownerReferences: []}", "metadata.ownerReferences"),
    ("spec: {volumes: [{name: ssh, emptyDir: {}}]}", "spec.volumes[ssh]"),
    ("spec: {volumes: [{name: dshm, emptyDir: {}}]}", "spec.volumes[dshm]"),
    ("spec: {containers: [{name: a, command: [sh]}]}", "spec.containers[0].command"),
    ("spec: {containers: [{name: a, args: [x]}]}", "spec.containers[0].args"),
    ("spec: {containers: [{name: a, image: busybox}]}", "spec.containers[0].image"),
    ("spec: {containers: [{name: a, readinessProbe: {tcpSocket: {port: 1}}}]}",
     "spec.containers[0].readinessProbe"),
    ("spec: {containers: [{name: a, env: [{name: DT_SSH_PORT, value: '22'}]}]}",
     "spec.containers[0].env[DT_SSH_PORT]"),
    ("spec: {containers: [{name: a, volumeMounts: [{name: keys, mountPath: /etc/distributetrain/ssh}]}]}",
     "spec.containers[0].volumeMounts[keys].mountPath"),
    ("spec: {containers: [{name: a, volumeMounts: [{name: x, mountPath: /dev/shm}]}]}",
     "spec.containers[0].volumeMounts[x].mountPath"),
    ("spec: {containers: [{name: a}, {name: launcher, image: b}]}", "spec.containers[1].name"),
    ("metadata: {labels: {'bad key!': x}}", "metadata.labels.bad key!"),
    ("metadata: {annotations: {a: 1}}", "metadata.annotations"),
    ("kind: Pod\nspec: {}", "kind"),
])
def test_what_the_manager_owns_is_refused_by_its_field(text: str, field: str) -> None:
    assert field in refused(text)


def test_every_problem_at_once() -> None:
    message = refused("spec: {nodeName: n, restartPolicy: Always}")
    assert "spec.nodeName" in message and "spec.restartPolicy" in message


def test_forms_accepted() -> None:
    assert podtemplate.parse("# only comments\n", source="t").spec == {}
    whole = podtemplate.parse("apiVersion: v1\nkind: PodTemplate\nmetadata: {name: x}\n"
                              "template: {spec: {priorityClassName: high}}", source="t")
    assert whole.spec == {"priorityClassName": "high"}
    own = podtemplate.parse("spec: {containers: [{name: job, env: [{name: DT_START_TIMEOUT, value: '3'}]}]}",
                            source="t")
    assert own.job_container["env"][0]["name"] == "DT_START_TIMEOUT"


def spec_with(tmp_path: Path, text: str, **args: object) -> JobSpec:
    path = tmp_path / "t.yaml"
    path.write_text(text)
    return JobSpec.from_sources({"gpus": "6", "image": IMAGE, "pod_template": str(path), **args}, {})


def problems(tmp_path: Path, text: str, **args: object) -> str:
    with pytest.raises(InvalidInput) as caught:
        spec_with(tmp_path, text, **args)
    return str(caught.value)


def test_the_request_and_the_template_must_agree(tmp_path: Path) -> None:
    gpu = problems(tmp_path, "spec: {containers: [{name: a, resources: {limits: {nvidia.com/gpu: '1'}}}]}")
    assert "pod_template (--pod-template" in gpu
    assert "spec.containers[0].resources.limits.nvidia.com/gpu" in gpu
    init = problems(tmp_path,
                    "spec: {initContainers: [{name: i, resources: {requests: {amd.com/gpu: '1'}}}]}",
                    resource="amd.com/gpu")
    assert "spec.initContainers[0].resources.requests.amd.com/gpu" in init
    selector = problems(tmp_path, "spec: {nodeSelector: {pool: cpu}}", node_selector=["pool=gpu"])
    assert "spec.nodeSelector.pool" in selector
    claim = problems(tmp_path, "spec: {containers: [{name: a, volumeMounts: [{name: d, mountPath: /data}]}]}",
                     volume_claim="train", mount_path="/data")
    assert "/data is where --volume-claim is mounted" in claim
    shm = problems(tmp_path, "spec: {containers: [{name: a, resources: {limits: {memory: 1Gi}}}]}")
    assert "/dev/shm" in shm and "limits.memory" in shm
    # a memory limit above /dev/shm is the template's to set
    assert spec_with(tmp_path, "spec: {containers: [{name: a, resources: {limits: {memory: 64Gi}}}]}")


def test_a_missing_or_broken_file_names_itself(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as caught:
        JobSpec.from_sources({"gpus": "1", "image": IMAGE}, {"DT_POD_TEMPLATE": str(tmp_path / "none.yaml")})
    assert "pod_template (DT_POD_TEMPLATE)" in str(caught.value) and "none.yaml" in str(caught.value)
    bad = tmp_path / "bad.yaml"
    bad.write_text("spec: [")
    with pytest.raises(InvalidInput) as caught:
        JobSpec.from_sources({"gpus": "1", "image": IMAGE, "chief_template": str(bad)}, {})
    assert "chief_template (--chief-template)" in str(caught.value) and "not valid YAML" in str(caught.value)


def test_role_templates_replace_the_shared_one(tmp_path: Path) -> None:
    shared, chief = tmp_path / "shared.yaml", tmp_path / "chief.yaml"
    shared.write_text("spec: {priorityClassName: low}")
    chief.write_text("spec: {priorityClassName: high}")
    spec = JobSpec.from_sources({"gpus": "2", "image": IMAGE, "pod_template": str(shared),
                                 "chief_template": str(chief)}, {})
    assert spec.template_for("worker") is spec.pod_template
    assert spec.template_for("chief") is spec.chief_template


def test_best_effort_pods_are_refused(tmp_path: Path) -> None:
    message = problems(tmp_path, "spec: {}", cpu_per_gpu="0", memory_per_gpu="0")
    assert "BestEffort" in message
    assert spec_with(tmp_path, "spec: {containers: [{name: a, resources: {requests: {cpu: '1'}}}]}",
                     cpu_per_gpu="0", memory_per_gpu="0")


def test_mig_suits_one_gpu_jobs_only() -> None:
    with pytest.raises(InvalidInput) as caught:
        JobSpec.from_sources({"gpus": "2", "image": IMAGE, "resource": "nvidia.com/mig-1g.10gb"}, {})
    assert "NVIDIA/nccl#1716" in str(caught.value)
    assert JobSpec.from_sources({"gpus": "1", "image": IMAGE, "resource": "nvidia.com/mig-1g.10gb"}, {})
