"""Fabric devices placed with the GPUs (placement/fabric.py, inventory, fit): what --fabric-resource means,
the share a pod of g GPUs requests, the nodes that cannot give both refused with numbers, and the pods that
request them with the fabric's NCCL settings."""

from __future__ import annotations

from typing import Any

import pytest

from distributetrain import naming
from distributetrain.errors import CannotPlace, InvalidInput
from distributetrain.manager import manifests
from distributetrain.placement import fabric, fit
from distributetrain.placement.planner import Entry
from distributetrain.request.jobspec import JobSpec

GPU = "nvidia.com/gpu"
EFA = fabric.EFA_RESOURCE


def node(name: str, gpus: int = 8, **extended: int) -> dict[str, Any]:
    """A GPU node; extended={'vpc.amazonaws.com/efa': 4} as the EFA device plugin advertises (keys with a
    slash are given through **{...})."""
    allocatable = {"cpu": "96", "memory": "1152Gi", "pods": "110", GPU: str(gpus),
                   **{k: str(v) for k, v in extended.items()}}
    return {"metadata": {"name": name, "labels": {}}, "spec": {},
            "status": {"allocatable": allocatable, "capacity": allocatable,
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def holder(name: str, on: str, **requests: int) -> dict[str, Any]:
    """A running pod of another job holding `requests` on node `on`."""
    amounts = {k: str(v) for k, v in requests.items()}
    return {"metadata": {"name": name, "namespace": "other"},
            "spec": {"nodeName": on, "containers": [{"name": "c", "resources": {"requests": amounts,
                                                                                "limits": amounts}}]},
            "status": {"phase": "Running"}}


P4D = {EFA: 4}  # p4d.24xlarge: 8 A100 and 4 EFA interfaces


def rows(nodes: list[dict[str, Any]], pods: list[dict[str, Any]] | None = None,
         request: str = "auto") -> Any:
    return fit.survey(nodes, pods or [], resource=GPU, demands=None, job_gpus=16,
                      fabric=fabric.parse_request(request))


def shares(plan: Any) -> dict[str, tuple[int, int]]:
    return {e.node: (e.gpus, e.fabric.devices if e.fabric else 0) for e in plan.allocation}


# ---- what --fabric-resource says ------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("auto", fabric.AUTO_REQUEST), ("NONE", fabric.NO_FABRIC),
    ("vpc.amazonaws.com/efa", fabric.Request("given", fabric.Fabric(EFA))),
    ("rdma/hca_shared_devices_a=1", fabric.Request("given", fabric.Fabric("rdma/hca_shared_devices_a", 1))),
])
def test_the_request_forms(text: str, expected: fabric.Request) -> None:
    assert fabric.parse_request(text) == expected
    assert fabric.parse_request(str(expected)) == expected  # what --help shows parses back


@pytest.mark.parametrize("text", ["efa", "rdma/", "rdma/ib=0", "rdma/ib=two", "/efa"])
def test_a_request_that_names_no_resource_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"auto, none, an extended resource|count after ="):
        fabric.parse_request(text)


def test_the_kind_follows_the_resource() -> None:
    assert fabric.Fabric(EFA).kind == "efa"
    assert fabric.Fabric("rdma/hca_shared_devices_a").kind == fabric.Fabric("nvidia.com/rdma_vf").kind == "ib"


@pytest.mark.parametrize(("gpus", "node_gpus", "node_devices", "devices"), [
    (6, 8, 4, 3), (8, 8, 4, 4), (2, 8, 4, 1), (1, 8, 4, 1), (3, 8, 4, 1), (5, 8, 4, 2),
    (8, 8, 32, 32), (1, 8, 32, 4),   # p5.48xlarge: 32 EFA for 8 H100
    (8, 8, 1, 1), (4, 8, 1, 1),      # g5.48xlarge: one EFA for the whole node
])
def test_a_pods_share_is_in_proportion_to_its_gpus_and_at_least_one(gpus: int, node_gpus: int,
                                                                     node_devices: int, devices: int) -> None:
    assert fabric.Fabric(EFA).devices(gpus, node_gpus=node_gpus, node_devices=node_devices) == devices


def test_shares_of_one_node_split_among_pods_never_ask_for_more_than_it_has() -> None:
    efa = fabric.Fabric(EFA)
    for first in range(2, 7):  # pods of at least G/F = 2 GPUs
        second = 8 - first
        total = sum(efa.devices(g, node_gpus=8, node_devices=4) for g in (first, second))
        assert total <= 4, (first, second)


# ---- auto: what the GPU nodes advertise -------------------------------------------------------------------

def test_auto_finds_efa_on_the_gpu_nodes() -> None:
    resolved = fabric.resolve(fabric.AUTO_REQUEST, [node("a", **P4D)], gpu_resource=GPU)
    assert resolved == fabric.Fabric(EFA)


def test_auto_without_a_fabric_is_tcp_and_none_ignores_one() -> None:
    assert fabric.resolve(fabric.AUTO_REQUEST, [node("a")], gpu_resource=GPU) is None
    assert fabric.resolve(fabric.NO_FABRIC, [node("a", **P4D)], gpu_resource=GPU) is None
    # a CPU node's devices are not the GPU nodes' fabric
    cpu_node_only = [node("a"), node("cpu", gpus=0, **P4D)]
    assert fabric.resolve(fabric.AUTO_REQUEST, cpu_node_only, gpu_resource=GPU) is None


def test_auto_takes_a_shared_rdma_resource_once_per_pod() -> None:
    resolved = fabric.resolve(fabric.AUTO_REQUEST, [node("a", **{"rdma/hca_shared_devices_a": 1000})],
                              gpu_resource=GPU)
    assert resolved == fabric.Fabric("rdma/hca_shared_devices_a", 1)


def test_auto_with_two_fabric_resources_is_refused_naming_them() -> None:
    nodes = [node("a", **P4D), node("b", **{"rdma/ib": 8})]
    with pytest.raises(InvalidInput, match=r"several fabric resources \(rdma/ib, vpc\.amazonaws\.com/efa\)"):
        fabric.resolve(fabric.AUTO_REQUEST, nodes, gpu_resource=GPU)


def test_a_fabric_the_template_requests_itself_is_refused() -> None:
    with pytest.raises(InvalidInput, match=r"the pod template requests vpc\.amazonaws\.com/efa itself"):
        fabric.resolve(fabric.AUTO_REQUEST, [node("a", **P4D)], gpu_resource=GPU, claimed={EFA})


def test_a_given_fabric_no_node_advertises_is_a_typo() -> None:
    with pytest.raises(InvalidInput, match=r"fabric_resource: no node advertises 'rdma/ib'.*--fabric-resou"):
        rows([node("a", **P4D)], request="rdma/ib")


# ---- placed with the GPUs ----------------------------------------------------------------------------------

def test_a_two_node_job_gets_efa_in_proportion_to_its_gpus() -> None:
    """The issue's case: nodes of 8 GPUs and 4 EFA; 14 GPUs go 8 + 6, the 6 with 3 EFA."""
    plan = fit.place(rows([node("a", **P4D), node("b", **P4D)]), 14, policy="optimal")
    assert shares(plan) == {"a": (8, 4), "b": (6, 3)}
    assert {e.fabric.resource for e in plan.allocation if e.fabric} == {EFA}


def test_a_node_short_of_efa_offers_only_the_gpus_its_devices_can_serve() -> None:
    # another job holds 2 GPUs and 2 EFA on b: 6 GPUs but only 2 EFA free, enough for 5 GPUs (a pod of 6
    # needs 3)
    surveyed = rows([node("a", **P4D), node("b", **P4D)], [holder("x", "b", **{GPU: 2, EFA: 2})])
    b = next(r for r in surveyed if r.node == "b")
    assert (b.free, b.fabric.free, b.fabric.offered) == (6, 2, 5)
    assert b.fabric.note == ("5 of 6 with vpc.amazonaws.com/efa: a pod of 6 GPUs needs 3 "
                             "vpc.amazonaws.com/efa, 2 free")
    assert shares(fit.place(surveyed, 13, policy="optimal")) == {"a": (8, 4), "b": (5, 2)}


def test_a_node_whose_efa_is_all_taken_is_refused_with_the_numbers() -> None:
    surveyed = rows([node("a", **P4D), node("b", **P4D)], [holder("x", "b", **{EFA: 4})])
    with pytest.raises(CannotPlace) as caught:
        fit.place(surveyed, 16, policy="optimal")
    text = str(caught.value)
    assert "allow to fit only 8 out of 16" in text
    assert ("b offers 0 of 8 free GPU(s) (a pod of 1 GPU needs 1 vpc.amazonaws.com/efa, 0 free)" in text)
    assert "--fabric-resource none" in text


def test_a_node_without_the_fabric_does_not_join_a_job_that_crosses_nodes() -> None:
    surveyed = rows([node("a", **P4D), node("b", **P4D), node("c")])
    c = next(r for r in surveyed if r.node == "c")
    assert c.eligible and c.fabric is not None and c.fabric.offered == 0
    assert c.fabric.note == "no vpc.amazonaws.com/efa allocatable"
    assert set(shares(fit.place(surveyed, 16, policy="optimal"))) == {"a", "b"}


def test_a_whole_job_in_one_pod_takes_no_devices_unless_it_may_grow() -> None:
    surveyed = rows([node("a", **P4D)], [holder("x", "a", **{EFA: 4})])
    alone = fit.place(surveyed, 8, policy="optimal", one_pod_fabric=False)
    assert shares(alone) == {"a": (8, 0)}
    with pytest.raises(CannotPlace):  # an elastic job's or a replacement's pod must cross nodes
        fit.place(surveyed, 8, policy="optimal")


def test_a_fixed_count_per_pod_whatever_its_gpus() -> None:
    shared = {"rdma/hca_shared_devices_a": 63}
    plan = fit.place(rows([node("a", **shared), node("b", **shared)], request="rdma/hca_shared_devices_a=1"),
                     12, policy="optimal")
    assert shares(plan) == {"a": (8, 1), "b": (4, 1)}


def test_the_rows_show_the_fabric() -> None:
    row = next(iter(rows([node("a", **P4D)])))
    assert row.to_json()["fabric"] == {"resource": EFA, "allocatable": 4, "requested": 0, "free": 4,
                                       "offered": 8, "note": None}


# ---- the pods ----------------------------------------------------------------------------------------------

def share(devices: int) -> fabric.Share:
    return fabric.Share(fabric.Fabric(EFA), devices)


def test_a_pod_requests_its_share_and_gets_the_fabrics_nccl_settings() -> None:
    spec = JobSpec.from_sources({"gpus": "14", "image": "i"}, {})
    worker = manifests.worker_pod(spec, index=0, entry=Entry("a", 8, share(4)), owner=None)
    chief = manifests.chief_pod(spec, entry=Entry("b", 6, share(3)), owner=None)
    for pod, gpus, devices in ((worker, "8", "4"), (chief, "6", "3")):
        resources = pod["spec"]["containers"][0]["resources"]
        for part in ("requests", "limits"):
            assert (resources[part][GPU], resources[part][EFA]) == (gpus, devices)
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert (env["FI_PROVIDER"], env["NCCL_DEBUG"]) == ("efa", "INFO")
        assert env["NCCL_DEBUG_SUBSYS"] == "INIT,NET"
    chief_env = {e["name"]: e.get("value") for e in chief["spec"]["containers"][0]["env"]}
    assert chief_env[naming.ENV_FABRIC] == "efa"
    plain = manifests.chief_pod(spec, entry=Entry("b", 6), owner=None)
    plain_env = {e["name"] for e in plain["spec"]["containers"][0]["env"]}
    assert "FI_PROVIDER" not in plain_env and naming.ENV_FABRIC not in plain_env
    assert EFA not in plain["spec"]["containers"][0]["resources"]["requests"]


def test_the_template_overrides_a_fabric_setting(tmp_path: Any) -> None:
    template = tmp_path / "t.yaml"
    template.write_text("spec:\n  containers:\n    - env: [{name: FI_PROVIDER, value: 'efa;shm'}, "
                        "{name: NCCL_DEBUG, value: WARN}]\n")
    spec = JobSpec.from_sources({"gpus": "14", "image": "i", "pod_template": str(template)}, {})
    pod = manifests.worker_pod(spec, index=0, entry=Entry("a", 8, share(4)), owner=None)
    env = [(e["name"], e.get("value")) for e in pod["spec"]["containers"][0]["env"]]
    assert env[:3] == [("FI_PROVIDER", "efa;shm"), ("NCCL_DEBUG", "WARN"), ("NCCL_DEBUG_SUBSYS", "INIT,NET")]
    assert [name for name, _ in env].count("FI_PROVIDER") == 1
