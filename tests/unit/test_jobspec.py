"""JobSpec.from_sources: every field from arguments or DT_* variables, validated all at once."""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from pathlib import Path

import pytest

from distributetrain.errors import EXIT_USAGE, InvalidInput
from distributetrain.naming import DEFAULT_COMMAND
from distributetrain.placement import fabric
from distributetrain.placement.tolerations import Toleration
from distributetrain.request.fieldparsers import MAX_GPUS, parse_duration
from distributetrain.request.jobspec import FIELD, JobSpec, ManagerIdentity

IMAGE = "registry.example.com/team/train:1.0"


def spec(args: dict[str, object] | None = None, env: dict[str, str] | None = None) -> JobSpec:
    return JobSpec.from_sources({"gpus": "6", "image": IMAGE, **(args or {})}, env or {})


def problems(args: dict[str, object], env: dict[str, str] | None = None) -> str:
    with pytest.raises(InvalidInput) as caught:
        JobSpec.from_sources({"gpus": "6", "image": IMAGE, **args}, env or {})
    assert caught.value.exit_code == EXIT_USAGE
    return str(caught.value)


def test_defaults() -> None:
    s = spec()
    assert (s.gpus, s.image, s.job_name, s.namespace) == (6, IMAGE, "distributetrain", "default")
    assert s.command == DEFAULT_COMMAND
    assert s.resource == "nvidia.com/gpu" and s.ssh_port == 2222
    assert s.fabric_resource == fabric.AUTO_REQUEST and str(s.fabric_resource) == "auto"
    assert s.keep_chief and s.network_policy and s.transport == "gloo"
    assert s.all_tolerations() == (Toleration(key="nvidia.com/gpu", operator="Exists"),)


def test_every_field_from_environment(tmp_path: Path) -> None:
    template = tmp_path / "pod.yaml"
    template.write_text("metadata:\n  annotations:\n    team: ml\n")
    env = {"DT_GPUS": "12", "DT_IMAGE": "train@sha256:" + "a" * 64, "DT_JOB_NAME": "resnet-12",
           "DT_NAMESPACE": "ml", "DT_COMMAND": "python3 /workspace/Train.py --epochs 3",
           "DT_RESOURCE": "amd.com/gpu", "DT_FABRIC_RESOURCE": "rdma/ib=2",
           "DT_TOLERATIONS": "dedicated=ml:NoSchedule,example.com/spot",
           "DT_NODE_SELECTOR": "gpu=a100,zone=z1", "DT_TOPOLOGY_KEY": "topology.kubernetes.io/zone",
           "DT_PLACEMENT_POLICY": "largest-first", "DT_SSH_PORT": "2022", "DT_SCHEDULE_TIMEOUT": "90s",
           "DT_START_TIMEOUT": "45m",
           "DT_RETRIES": "0", "DT_BACKOFF": "1m", "DT_SSH_TIMEOUT": "30", "DT_ACTIVE_DEADLINE": "1h30m",
           "DT_API_OUTAGE_TOLERANCE": "2h", "DT_WAIT_FOR_GPUS": "10m", "DT_KEEP_CHIEF": "false",
           "DT_SCALE_UP": "on", "DT_GPUS_PER_NODE": "8",
           "DT_PROVISIONING_CLASS": "check-capacity.autoscaling.x-k8s.io", "DT_QUEUE": "none",
           "DT_VOLUME_CLAIM": "train-data",
           "DT_MOUNT_PATH": "/data", "DT_NETWORK_INTERFACE": "eth0", "DT_TRANSPORT": "mpi",
           "DT_DISRUPTION_BUDGET": "off", "DT_PRIORITY_CLASS": "ml-high",
           "DT_NETWORK_POLICY": "off", "DT_SERVICE_ACCOUNT": "trainer", "DT_IMAGE_PULL_POLICY": "Always",
           "DT_IMAGE_PULL_SECRETS": "regcred, other", "DT_POD_TEMPLATE": str(template),
           "DT_WORKER_TEMPLATE": str(template), "DT_CHIEF_TEMPLATE": "", "DT_CPU_PER_GPU": "500m",
           "DT_MEMORY_PER_GPU": "16Gi", "DT_SHM_SIZE": "0", "DT_ALLOW_EGRESS": "10.1.2.3/16,0.0.0.0/0",
           "DT_RESTRICT_EGRESS": "yes", "DT_PREFLIGHT": "on", "DT_MIN_BUSBW": "12.5",
           "DT_PREFLIGHT_ATTEMPTS": "3",
           "DT_MIN_GPUS": "", "DT_MAX_GPUS": "", "DT_RESTARTS": "2", "DT_REPLACE_TIMEOUT": "5m",
           "DT_GROW_INTERVAL": "10s", "DT_HANG_TIMEOUT": "90s", "DT_ON_HANG": "restart",
           "DT_STRAGGLER_FACTOR": "2", "DT_STRAGGLER_REPORTS": "5", "DT_REPLACE_STRAGGLERS": "false"}
    s = JobSpec.from_sources({}, env)
    assert s.pod_template is not None and s.pod_template.metadata == {"annotations": {"team": "ml"}}
    assert s == JobSpec(
        gpus=12, image="train@sha256:" + "a" * 64, job_name="resnet-12", namespace="ml",
        command=("python3", "/workspace/Train.py", "--epochs", "3"), resource="amd.com/gpu",
        fabric_resource=fabric.Request("given", fabric.Fabric("rdma/ib", 2)),
        tolerations=(Toleration(key="dedicated", operator="Equal", value="ml", effect="NoSchedule"),
                     Toleration(key="example.com/spot", operator="Exists")),
        node_selector=(("gpu", "a100"), ("zone", "z1")), topology_key="topology.kubernetes.io/zone",
        placement_policy="largest-first", ssh_port=2022, schedule_timeout=90.0, start_timeout=2700.0,
        retries=0, backoff=60.0,
        ssh_timeout=30.0, active_deadline=5400.0, api_outage_tolerance=7200.0, wait_for_gpus=600.0,
        scale_up="on", gpus_per_node=8, provisioning_class="check-capacity.autoscaling.x-k8s.io",
        queue="none",
        keep_chief=False,
        volume_claim="train-data", mount_path="/data", network_interface="eth0", transport="mpi",
        disruption_budget=False, priority_class="ml-high", network_policy=False, service_account="trainer",
        image_pull_policy="Always",
        image_pull_secrets=("regcred", "other"), pod_template=s.pod_template,
        worker_template=s.worker_template,
        chief_template=None, cpu_per_gpu=Fraction(1, 2), memory_per_gpu=Fraction(16 * 2**30),
        shm_size=Fraction(0), allow_egress=("10.1.0.0/16", "0.0.0.0/0"), restrict_egress=True, preflight=True,
        min_busbw=12.5, preflight_attempts=3, restarts=2, replace_timeout=300.0, grow_interval=10.0,
        hang_timeout=90.0, on_hang="restart", straggler_factor=2.0, straggler_reports=5,
        replace_stragglers=False)
    assert s.recovery == "restart" and s.hang_action == "restart"
    # every field has its variable, named DT_<FIELD>
    assert {FIELD[f.name].env for f in dataclasses.fields(JobSpec)} == set(env)


def test_elastic_and_restart_requests() -> None:
    elastic = spec({"min_gpus": "2", "max_gpus": "8"})
    assert (elastic.recovery, elastic.min_gpus, elastic.max_gpus, elastic.restarts) == ("elastic", 2, 8, 0)
    assert spec().recovery is None and spec({"min_gpus": "6"}).max_gpus is None
    text = problems({"min_gpus": "7", "max_gpus": "5", "restarts": "1", "transport": "mpi"})
    assert "min_gpus: 7 is more than the job's 6 GPU(s)" in text
    assert "max_gpus: 5 is less than the job's 6 GPU(s)" in text
    assert "restarts: an elastic job (--min-gpus) goes on without its lost workers" in text
    assert "transport (mpi): elastic Horovod runs on Gloo only" in text
    assert "max_gpus: only elastic jobs grow; give --min-gpus too" in problems({"max_gpus": "8"})


def test_what_a_hang_leads_to_by_default_and_when_asked() -> None:
    assert spec().hang_action == "fail" and spec().hang_timeout is None
    assert spec({"restarts": "2"}).hang_action == "restart"
    assert spec({"min_gpus": "2"}).hang_action == "replace"
    assert spec({"restarts": "2", "on_hang": "fail", "hang_timeout": "2m"}).hang_action == "fail"
    assert "on_hang (restart): relaunching needs --restarts K" in problems({"on_hang": "restart"})
    assert "on_hang (replace): only an elastic job (--min-gpus)" in problems({"on_hang": "replace"})
    assert "on_hang (restart): an elastic job never relaunches" in problems({"on_hang": "restart",
                                                                            "min_gpus": "2"})
    assert "restarts (--restarts): 101 is outside 0..100" in problems({"restarts": "101"})
    assert "replace_timeout (--replace-timeout)" in problems({"replace_timeout": "0"})


def test_arguments_win_over_environment() -> None:
    s = JobSpec.from_sources({"gpus": "3", "image": IMAGE, "command": ["python3", "a.py"]},
                             {"DT_GPUS": "9", "DT_COMMAND": "python3 b.py", "DT_NAMESPACE": "ml"})
    assert (s.gpus, s.command, s.namespace) == (3, ("python3", "a.py"), "ml")


def test_command_as_json_list() -> None:
    assert spec(env={"DT_COMMAND": '["python3", "-c", "print(1)"]'}).command == ("python3", "-c", "print(1)")


@pytest.mark.parametrize(("field", "value", "fragment"), [
    ("gpus", "0", "at least 1 GPU"),
    ("gpus", "-1", "not a whole number of GPUs"),
    ("gpus", "abc", "not a whole number of GPUs"),
    ("gpus", "1.5", "not a whole number of GPUs"),
    ("gpus", str(10**9), f"beyond the sane cap of {MAX_GPUS} GPUs"),
    ("image", "Registry/UPPER:1", "not an image reference"),
    ("image", "train:tag with space", "not an image reference"),
    ("image", "", "not an image reference"),
    ("job_name", "Bad_Name", "lower-case letters"),
    ("job_name", "a" * 41, "at most 40 characters"),
    ("namespace", "-ns", "not a namespace name"),
    ("command", [], "is empty"),
    ("command", "   ", "is empty"),
    ("resource", "gpu", "needs a domain prefix"),
    ("resource", "kubernetes.io/gpu", "native resource name"),
    ("tolerations", ["dedicated=ml:Sometimes"], "effect 'Sometimes'"),
    ("tolerations", ['[{"key": "a", "operator": "Maybe"}]'][0], "operator must be Equal or Exists"),
    ("node_selector", ["zone"], "is not KEY=VALUE"),
    ("node_selector", ["zone=bad value!"], "label value"),
    ("topology_key", "bad key!", "must be 1-63 characters"),
    ("placement_policy", "random", "is not one of"),
    ("ssh_port", "70000", "outside 1..65535"),
    ("schedule_timeout", "soon", "not a duration"),
    ("schedule_timeout", "0", "more than 0 seconds"),
    ("retries", "-1", "outside 0..100"),
    ("backoff", "-5s", "not a duration"),
    ("active_deadline", "0", "more than 0 seconds"),
    ("keep_chief", "maybe", "not true or false"),
    ("volume_claim", "Claim_1", "not a valid object name"),
    ("mount_path", "relative/path", "absolute path"),
    ("network_interface", "eth 0", "not a network interface"),
    ("transport", "nccl", "is not one of"),
    ("image_pull_policy", "Sometimes", "is not one of"),
])
def test_invalid_field_is_named(field: str, value: object, fragment: str) -> None:
    extra = {"volume_claim": "data"} if field == "mount_path" else {}
    message = problems({field: value, **extra})
    assert f"{field} ({FIELD[field].option})" in message
    assert fragment in message
    assert "nothing was created" in message


def test_every_problem_reported_at_once_with_the_variable_name() -> None:
    message = problems({"gpus": None, "image": None}, {"DT_GPUS": "0", "DT_SSH_PORT": "x"})
    assert "gpus (DT_GPUS): '0': at least 1 GPU is needed" in message
    assert "image: required; give --image or set DT_IMAGE" in message
    assert "ssh_port (DT_SSH_PORT)" in message


def test_mount_path_needs_a_claim() -> None:
    assert "mount_path: given without volume_claim" in problems({"mount_path": "/data"})


@pytest.mark.parametrize(("text", "seconds"), [("300", 300.0), ("90s", 90.0), ("5m", 300.0),
                                               ("1h30m", 5400.0), ("250ms", 0.25), (7, 7.0)])
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_manager_identity_from_downward_api_env() -> None:
    env = {"DT_MANAGER_POD_NAME": "distributetrain-manager", "DT_MANAGER_POD_UID": "u-1",
           "DT_MANAGER_NAMESPACE": "ml"}
    assert ManagerIdentity.from_env(env) == ManagerIdentity("distributetrain-manager", "u-1", "ml")
    assert ManagerIdentity.from_env({"DT_MANAGER_POD_NAME": "x"}) is None
