"""The pre-flight all-reduce check's pure part (allreduce.py): bandwidths as nccl-tests computes them, the
ranks' lines read back, and the verdict that names the pod to blame."""

from __future__ import annotations

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


def test_below_min_busbw_names_the_slowest_pod() -> None:
    assert verdict(lines(), min_busbw=0.1) is None  # 64 MiB over 6 ranks in 0.2 s: 0.559 GB/s of bus
    assert verdict(lines(), min_busbw=1.0) == (
        "the pre-flight all-reduce over 6 ranks reached 0.559 GB/s bus bandwidth at 64 MiB, below "
        "--min-busbw 1 GB/s; the slowest pod is 10.244.2.2 (0.168 GB/s to the chief)")


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
