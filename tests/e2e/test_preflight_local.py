"""The pre-flight all-reduce check for real (allreduce.py, allreducecheck.py): the launcher of
test_training_local.py (real sshd workers on 127.0.0.2 and .3, the chief on 127.0.0.1) with DT_PREFLIGHT,
Horovod over ssh and Gloo; then the training's progress lines, as the manager reads them."""

from __future__ import annotations

import re

import pytest
from test_training_local import WORKERS, Launcher, Pods, pods  # noqa: F401 - pods is a fixture

from distributetrain.observe import progress

pytestmark = pytest.mark.e2e


def test_the_preflight_measures_every_rank_then_the_training_runs(pods: Pods) -> None:  # noqa: F811
    launcher = Launcher(pods, 1, slots={WORKERS[0]: 1, WORKERS[1]: 1}, DT_PREFLIGHT="true")
    code = launcher.wait(timeout=420)
    out = launcher.output()
    assert code == 0, out
    # per size: time, algorithm and bus bandwidth, over the 3 ranks, with Gloo on the CPU
    for size in ("1 MiB", "16 MiB", "64 MiB"):
        assert re.search(rf"INFO pre-flight {size} over 3 ranks \(Gloo\): [0-9.]+ ms, "
                         r"algbw [0-9.e+-]+ GB/s, busbw [0-9.e+-]+ GB/s$", out, flags=re.MULTILINE), out
    assert re.search(r"INFO pre-flight pods to the chief at 64 MiB: 127\.0\.0\.2 \S+ GB/s, 127\.0\.0\.3 \S+ "
                     r"GB/s; slowest 127\.0\.0\.[23]$", out, flags=re.MULTILINE), out
    took = float(re.findall(r"INFO pre-flight took ([0-9.]+)s", out)[0])
    assert 0 < took < 300
    # the check ran before the training's own horovodrun
    lines = out.splitlines()
    check = next(i for i, line in enumerate(lines) if "pre-flight took" in line)
    start = next(i for i, line in enumerate(lines) if progress.LAUNCHED.match(line.encode()))
    assert check < start
    # Train.py's progress lines, read as the manager reads them: the first step, then the one epoch
    reports = [r for r in (progress.parse(line) for line in lines) if r is not None]
    assert reports[0] == progress.Progress(epoch=0, epochs=1, step=1), reports
    last = reports[-1]
    assert (last.epoch, last.epochs) == (1, 1)
    assert last.step is not None and last.step > 1 and last.loss is not None and last.accuracy is not None
    assert last.steps_per_s is not None and last.steps_per_s > 0
    assert {name for name, _ in last.extra} == {"val_loss", "val_accuracy"}


def test_a_bus_bandwidth_below_min_busbw_fails_fast_naming_the_slowest_pod(pods: Pods) -> None:  # noqa: F811
    launcher = Launcher(pods, 1, slots={WORKERS[0]: 1, WORKERS[1]: 1}, DT_MIN_BUSBW="100000")
    code = launcher.wait(timeout=420)
    out = launcher.output()
    assert code == 76, out
    assert re.search(r"ERROR the pre-flight all-reduce over 3 ranks reached [0-9.e+-]+ GB/s bus bandwidth "
                     r"at 64 MiB, below --min-busbw 100000 GB/s; the slowest pod is 127\.0\.0\.[23] "
                     r"\([0-9.e+-]+ GB/s to the chief\); the training was not started$", out,
                     flags=re.MULTILINE), out
    assert "starting: horovodrun" not in out and "dt-progress" not in out  # Train.py never ran
