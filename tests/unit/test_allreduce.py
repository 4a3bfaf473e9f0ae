"""The pre-flight all-reduce check's pure part (allreduce.py): bandwidths as nccl-tests computes them, the
ranks' lines read back, and the verdict that names the pod to blame."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from distributetrain import naming
from distributetrain.chief import allreduce
from distributetrain.chief import settings as launchsettings
from distributetrain.chief.allreduce import Measure
from distributetrain.errors import InvalidInput
from distributetrain.hostfile import HostSlots
from distributetrain.manager import manifests
from distributetrain.placement.planner import Entry
from distributetrain.request.jobspec import JobSpec

HOSTS = (HostSlots("10.244.3.2", 1), HostSlots("10.244.1.2", 3), HostSlots("10.244.2.2", 2))
MIB = 1 << 20


def test_bus_bandwidth_is_nccl_tests_factor_of_the_algorithm_bandwidth() -> None:
    six = Measure(ranks=6, size=64 * MIB, seconds=0.5)
    assert six.algbw == pytest.approx(64 * MIB / 0.5 / 1e9)
    assert six.busbw == pytest.approx(six.algbw * 2 * 5 / 6)
    assert Measure(ranks=2, size=MIB, seconds=0.01).busbw == pytest.approx(MIB / 0.01 / 1e9)


def test_sizes_and_first_ranks() -> None:
    assert [allreduce.parse_size(s) for s in ("1M", "16MiB", "512K", "1G", "4096")] == [
        MIB, 16 * MIB, 512 << 10, 1 << 30, 4096]
    with pytest.raises(ValueError, match="give bytes"):
        allreduce.parse_size("lots")
    assert allreduce.size_text(64 * MIB) == "64 MiB"
    assert allreduce.first_ranks(HOSTS) == [("10.244.3.2", 0), ("10.244.1.2", 1), ("10.244.2.2", 4)]
    assert allreduce.first_ranks((HostSlots("a", 0), HostSlots("b", 2))) == [("b", 0)]


def lines(*, ready: range = range(6), pairs: bool = True, sweep: bool = True, done: bool = True,
          slow: float = 0.4) -> list[str]:
    out = [f"[{r}]<stdout>:dt-preflight ready rank={r} host=pod-{r} backend=Gloo\n" for r in ready]
    if pairs:
        out += ["[0]<stdout>:dt-preflight pair host=10.244.1.2 size=67108864\n",
                "[0]<stdout>:dt-preflight pair host=10.244.1.2 size=67108864 seconds=0.100000\n",
                "[0]<stdout>:dt-preflight pair host=10.244.2.2 size=67108864\n"]
        if sweep:
            out.append(f"[0]<stdout>:dt-preflight pair host=10.244.2.2 size=67108864 seconds={slow:.6f}\n")
    if sweep:
        out += [f"[0]<stdout>:dt-preflight allreduce ranks=6 size={s} seconds=0.200000\n"
                for s in (MIB, 16 * MIB, 64 * MIB)]
    if done:
        out.append("[0]<stdout>:dt-preflight done\n")
    return out


def verdict(text: list[str], **kw: object) -> str | None:
    options: dict[str, Any] = {"min_busbw": None, "timed_out": False, "exit_code": 0, **kw}
    return allreduce.verdict(allreduce.read(text), hosts=HOSTS, ranks=6, **options)


def test_a_check_that_ended_well_passes_and_is_summarised() -> None:
    report = allreduce.read(["noise\n", *lines()])
    assert report.ready == set(range(6)) and report.done and report.backend == "Gloo"
    assert verdict(lines()) is None
    summary = allreduce.summary(report)
    assert summary[0] == ("pre-flight 1 MiB over 6 ranks (Gloo): 200.0 ms, algbw 0.00524 GB/s, "
                          "busbw 0.00874 GB/s")
    assert summary[-1] == ("pre-flight pods to the chief at 64 MiB: 10.244.1.2 0.671 GB/s, 10.244.2.2 0.168 "
                           "GB/s; slowest 10.244.2.2")


def test_below_min_busbw_blames_the_pod_of_the_slow_link() -> None:
    assert verdict(lines(), min_busbw=0.1) is None  # 64 MiB over 6 ranks in 0.2 s: 0.559 GB/s of bus
    assert verdict(lines(), min_busbw=0.6) == (
        "the pre-flight all-reduce over 6 ranks reached 0.559 GB/s bus bandwidth at 64 MiB, below "
        "--min-busbw 0.6 GB/s; to blame: 10.244.2.2, every link measured from it below the floor (each "
        "pod's link to the chief, GB/s: 10.244.1.2 0.671, 10.244.2.2 0.168)")


def test_every_link_slow_blames_the_chiefs_pod_their_common_end() -> None:
    found = allreduce.blame(allreduce.read(lines()), hosts=HOSTS, ranks=6, min_busbw=1.0, timed_out=False,
                            exit_code=0, nodes=NODES)
    assert found is not None and (found.pods, found.nodes) == (("10.244.3.2",), ("gpu-3",))
    assert "to blame: the chief's pod 10.244.3.2 (node gpu-3), every link" in found.why


def test_a_pair_below_the_floor_skipped_the_sweep_and_is_blamed() -> None:
    text = [*lines(sweep=False, done=False), "[0]<stdout>:dt-preflight pair host=10.244.2.2 size=16 "
            "seconds=0.1\n", "[0]<stdout>:dt-preflight skip\n", "[0]<stdout>:dt-preflight done at=5.0\n"]
    found = allreduce.blame(allreduce.read(text), hosts=HOSTS, ranks=6, min_busbw=0.5, timed_out=False,
                            exit_code=0, nodes=NODES)
    assert found is not None and found.nodes == ("gpu-2",)
    assert found.why.startswith("a pod's link to the chief measured below --min-busbw 0.5 GB/s (the sweep "
                                "was skipped); to blame: 10.244.2.2 (node gpu-2)")


def pair(host: str, gbps: float) -> Measure:
    return Measure(2, 1_000_000_000, 1 / gbps, host)


@pytest.mark.parametrize(("links", "blamed"), [
    ({"b": 5, "c": 5, "d": 5}, ()),                      # every link fast
    ({"b": 5, "c": 0.2, "d": 5}, ("c",)),                # one slow link: its far end
    ({"b": 0.2, "c": 0.3, "d": 0.2}, ("a",)),            # every link slow: the chief, their common end
    ({"b": 0.2, "c": 0.2, "d": 5}, ("b", "c")),          # two slow pods, the chief fine elsewhere
    ({"b": 0.2}, ("a", "b")),                            # one link: either end; both named
])
def test_which_pods_to_blame_from_the_links_to_the_chief(links: dict[str, float],
                                                        blamed: tuple[str, ...]) -> None:
    pairs = [pair(host, gbps) for host, gbps in links.items()]
    assert allreduce.blame_pairs(pairs, chief="a", floor=1.0) == blamed


def test_where_the_time_went_from_the_ranks_stamps() -> None:
    text = ["[0]<stdout>:dt-preflight ready rank=0 host=p0 backend=Gloo start=101.0 imported=104.0 "
            "init=105.0\n", "[1]<stdout>:dt-preflight ready rank=1 host=p1 backend=Gloo start=102.0 "
            "imported=106.5 init=107.0\n", "[0]<stdout>:dt-preflight done at=109.0\n"]
    assert allreduce.phases(allreduce.read(text), launched=100.0) == (
        "pre-flight phases: every rank's process running (horovodrun, ssh and Python) +2.0s, TensorFlow and "
        "Horovod imported +4.5s, Horovod initialised +0.5s, the all-reduces done +2.0s")
    assert allreduce.phases(allreduce.read(lines()), launched=100.0) == ""
    tcp = [line.replace("backend=Gloo", "backend=TCP") for line in text]
    assert allreduce.phases(allreduce.read(tcp), launched=100.0) == (
        "pre-flight phases: every rank's process running (horovodrun, ssh and Python) +2.0s, numpy imported "
        "+4.5s, the ranks met at the rendezvous +0.5s, the all-reduces done +2.0s")


def test_a_pod_whose_ranks_never_started_is_named() -> None:
    text = lines(ready=range(4), pairs=False, sweep=False, done=False)
    assert verdict(text, timed_out=True) == (
        "the pre-flight all-reduce hung: 1 pod(s) never started their ranks: 10.244.2.2 (unreachable from "
        "the chief, or Horovod could not start there)")


def test_a_hang_between_the_chief_and_one_pod_names_that_pod() -> None:
    text = lines(sweep=False, done=False)
    assert verdict(text, timed_out=True) == (
        "the pre-flight all-reduce hung between the chief and 10.244.2.2: that pod is unreachable on "
        "Horovod's ports or far too slow")
    assert verdict(text, exit_code=1, timed_out=False).startswith(
        "the pre-flight all-reduce failed (horovodrun exited with 1) between the chief and 10.244.2.2")


def test_the_launcher_runs_it_when_asked_and_the_manager_asks_for_it() -> None:
    base = {naming.ENV_POD_IP: "10.244.3.2"}
    assert launchsettings.parse_settings([], base).preflight is False
    assert launchsettings.parse_settings([], {**base, naming.ENV_PREFLIGHT: "true"}).preflight is True
    settings = launchsettings.parse_settings([], {**base, naming.ENV_MIN_BUSBW: "2.5"})
    assert (settings.preflight, settings.min_busbw) == (True, 2.5)  # a floor turns the check on
    off = launchsettings.parse_settings(["--no-preflight"], {**base, naming.ENV_PREFLIGHT: "1"})
    assert off.preflight is False
    with pytest.raises(InvalidInput, match="DT_MIN_BUSBW: 'fast' is not a number"):
        launchsettings.parse_settings([], {**base, naming.ENV_MIN_BUSBW: "fast"})
    with pytest.raises(InvalidInput, match="pre-flight sizes: size 'X'"):
        launchsettings.parse_settings(["--preflight-sizes", "1M,x"], base)
    spec = JobSpec.from_sources({"gpus": "6", "image": "i:1", "min_busbw": "10"}, {})
    chief = manifests.chief_pod(spec, entry=_entry(), owner=None)
    env = {e["name"]: e.get("value") for e in chief["spec"]["containers"][0]["env"]}
    assert (env[naming.ENV_PREFLIGHT], env[naming.ENV_MIN_BUSBW]) == ("true", "10")
    plain = manifests.chief_pod(JobSpec.from_sources({"gpus": "6", "image": "i:1"}, {}), entry=_entry(),
                                owner=None)
    assert naming.ENV_PREFLIGHT not in {e["name"] for e in plain["spec"]["containers"][0]["env"]}
    with pytest.raises(InvalidInput, match=r"min_busbw \(--min-busbw\): '-1': give a positive number"):
        JobSpec.from_sources({"gpus": "6", "image": "i:1", "min_busbw": "-1"}, {})


def _entry() -> Entry:
    from distributetrain.placement.planner import plan

    return plan({"node-1": 6}, 6).chief


# ---- the fabric -------------------------------------------------------------------------------------------
NODES = {"10.244.3.2": "gpu-3", "10.244.1.2": "gpu-1", "10.244.2.2": "gpu-2"}
# NCCL's own messages, verbatim from the threads named in tests/unit/test_chieflog.py (NVIDIA/nccl#1597: EFA
# through aws-ofi-nccl; Oneflow-Inc/oneflow#3586: the socket fallback), behind Gloo's rank prefix and each
# pod's hostname, as the chief's log carries them
OFI = ["NCCL INFO NET/OFI Selected Provider is efa (found 16 nics)", "NCCL INFO Using network Libfabric"]
SOCKET = ["NCCL INFO NET/IB : No device found.",
          "NCCL INFO NET/Socket : Using [0]eth0:10.244.2.2<0>", "NCCL INFO Using network Socket"]


def nccl(rank: int, host: str, messages: list[str]) -> list[str]:
    return [f"[{rank}]<stdout>:{host}:4242:4243 [0] {text}\n" for text in messages]


def efa_lines(*, worker_2: list[str] = OFI) -> list[str]:
    out = lines()
    out += nccl(0, "pod-0", OFI) + nccl(1, "pod-1", OFI) + nccl(4, "pod-4", worker_2)
    return out


def fabric_blame(text: list[str], fabric: str = "efa") -> allreduce.Blame | None:
    from distributetrain.observe import chieflog

    return allreduce.fabric_verdict(allreduce.read(text), chieflog.read_networks(text), hosts=HOSTS,
                                    fabric=fabric, nodes=NODES)


def test_every_pod_on_the_fabric_passes() -> None:
    assert fabric_blame(efa_lines()) is None


def test_sockets_where_efa_was_asked_fail_naming_the_pod_and_its_node() -> None:
    blame = fabric_blame(efa_lines(worker_2=SOCKET))
    assert blame is not None and (blame.pods, blame.nodes) == (("10.244.2.2",), ("gpu-2",))
    assert blame.why.startswith(
        "the pre-flight all-reduce did not cross nodes over the fabric efa on 1 pod(s): pod pod-4 at "
        "10.244.2.2 (node gpu-2): NCCL uses NET/Socket ([0]eth0:10.244.2.2<0>) where the fabric efa was "
        "asked (NET/OFI)")


def test_a_pod_whose_nccl_said_nothing_is_not_proven() -> None:
    blame = fabric_blame(efa_lines(worker_2=[]))
    assert blame is not None and blame.nodes == ("gpu-2",)
    assert "NCCL never said which network it uses (the check ran on Gloo" in blame.why


def test_ib_is_checked_the_same_way() -> None:
    roce = ["NCCL INFO NET/IB : Using [0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE [RO]; OOB "
            "enp220s0np0:11.1.128.128<0>", "NCCL INFO Using network IB"]
    text = lines() + nccl(0, "pod-0", roce) + nccl(1, "pod-1", roce) + nccl(4, "pod-4", roce)
    assert fabric_blame(text, "ib") is None
    assert fabric_blame(efa_lines(), "ib") is not None


def test_below_min_busbw_names_the_slow_pods_node() -> None:
    said = str(verdict(lines(), min_busbw=0.6, nodes=NODES))
    assert "to blame: 10.244.2.2 (node gpu-2), every link" in said


def fake_horovodrun(tmp_path: Any, text: list[str]) -> list[str]:
    """A horovodrun that prints what the ranks would have printed, and NCCL_DEBUG as it saw it."""
    out = tmp_path / "ranks.txt"
    out.write_text("".join(text))
    script = ("import os, sys; sys.stdout.write(open(sys.argv[1]).read()); "
              "print('NCCL_DEBUG=' + os.environ['NCCL_DEBUG'])")
    return [sys.executable, "-c", script, str(out)]


def test_the_launcher_fails_the_check_naming_the_node(tmp_path: Any, caplog: Any, capsys: Any) -> None:
    from distributetrain.chief import preflight
    from distributetrain.errors import PreflightFailed
    from distributetrain.observe import chieflog

    argv = fake_horovodrun(tmp_path, efa_lines(worker_2=SOCKET))
    blamed_pod = r"pod-4 at 10\.244\.2\.2 \(node gpu-2\)"
    with caplog.at_level("INFO"), pytest.raises(PreflightFailed, match=blamed_pod):
        preflight.run(argv, {"NCCL_DEBUG": "WARN", "PATH": os.environ.get("PATH", "")}, hosts=HOSTS,
                      ranks=6, min_busbw=None, timeout=60, fabric="efa", nodes=NODES)
    assert ("pre-flight NCCL networks: pod-0 NET/OFI (provider efa), pod-1 NET/OFI (provider efa), pod-4 "
            "NET/Socket") in caplog.text
    blamed = [chieflog.parse_preflight_blamed(r.getMessage().encode()) for r in caplog.records]
    assert chieflog.PreflightBlame(("gpu-2",), ("10.244.2.2",)) in blamed
    # and with every pod on the fabric it passes; the check's NCCL logs at INFO whatever the pod said
    report = preflight.run(fake_horovodrun(tmp_path, efa_lines()), {"NCCL_DEBUG": "WARN"}, hosts=HOSTS,
                           ranks=6, min_busbw=None, timeout=60, fabric="efa", nodes=NODES)
    assert report.done
    assert "NCCL_DEBUG=INFO" in capsys.readouterr().out


def test_the_chief_is_told_its_fabric_and_its_node_and_reads_the_workers_nodes(tmp_path: Any) -> None:
    from distributetrain.chief import launcher
    from distributetrain.placement import fabric

    base = {naming.ENV_POD_IP: "10.244.3.2"}
    assert launchsettings.parse_settings([], base).fabric is None
    told = {**base, naming.ENV_FABRIC: "efa", naming.ENV_NODE_NAME: "gpu-3"}
    settings = launchsettings.parse_settings([], told)
    assert (settings.fabric, settings.node_name) == ("efa", "gpu-3")
    spec = JobSpec.from_sources({"gpus": "14", "image": "i:1"}, {})
    share = fabric.Share(fabric.Fabric(fabric.EFA_RESOURCE), 3)
    chief = manifests.chief_pod(spec, entry=Entry("gpu-3", 6, share), owner=None)["spec"]["containers"][0]
    env = {e["name"]: e.get("value") or e.get("valueFrom") for e in chief["env"]}
    assert env[naming.ENV_FABRIC] == "efa"
    assert env[naming.ENV_NODE_NAME] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    configmap = manifests.hostfile_configmap(spec, [HostSlots("10.244.1.2", 8)], owner=None,
                                             nodes={"10.244.1.2": "gpu-1"})
    (tmp_path / naming.NODES_KEY).write_text(configmap["data"][naming.NODES_KEY])
    assert launcher.read_nodes(tmp_path / naming.NODES_KEY) == {"10.244.1.2": "gpu-1"}
    assert launcher.read_nodes(tmp_path / "absent") == {}
