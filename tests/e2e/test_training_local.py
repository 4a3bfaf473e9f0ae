"""Real training without Kubernetes (local_pods.py: two sshd "worker pods" on 127.0.0.2 and .3, the chief's
launcher on this host): the launcher checks both sshd with the job key, runs the pre-flight all-reduce check
(allreduce.py over ssh, Gloo) when asked, then horovodrun over ssh, and Train.py trains on the digits.

One training (the `trained` fixture: 3 epochs, with the pre-flight check) serves every test that reads a
finished run; a test that breaks its run (a worker killed, a bandwidth floor) has pods of its own.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from local_pods import (
    ACCURACY_THRESHOLD,
    EPOCHS,
    SLOTS,
    TRAINING_TIMEOUT,
    WORKERS,
    Launcher,
    Pods,
    Training,
    kill_tree,
    sshd_missing,
)

from distributetrain.observe import progress

pytestmark = pytest.mark.e2e

if sshd_missing():
    pytest.skip("openssh-server is not installed (make system-deps)", allow_module_level=True)


def test_three_ranks_over_two_ssh_workers_train_to_identical_weights(trained: Training) -> None:
    out = trained.output
    assert trained.exit_code == 0, out

    assert re.search(r"horovod size=3 ", out), out
    accuracy = float(re.findall(r"final_accuracy=([0-9.]+)", out)[-1])
    assert accuracy >= ACCURACY_THRESHOLD, out
    epochs = re.findall(r"<stdout>:epoch=(\d+) ", out)
    assert epochs == [str(e) for e in range(1, EPOCHS + 1)], out

    checksums = dict(re.findall(r"rank=(\d+) size=3 weights_sha256=([0-9a-f]{64})", out))
    assert sorted(checksums) == ["0", "1", "2"], out
    assert len(set(checksums.values())) == 1, checksums

    # ranks 1 and 2 really went through each worker's sshd with the job key
    for host in WORKERS:
        assert "Accepted publickey for" in trained.pods.sshd_log(host), trained.pods.sshd_log(host)


def test_the_job_key_is_installed_private_and_passwords_are_refused(trained: Training) -> None:
    assert trained.exit_code == 0, trained.output
    pods = trained.pods
    chief_ssh = pods.base / "chief" / "home" / ".ssh"
    for path, mode in ((chief_ssh, 0o700), (chief_ssh / "id_ed25519", 0o600),
                       (chief_ssh / "authorized_keys", 0o600),
                       (pods.base / WORKERS[0] / "home" / ".ssh" / "authorized_keys", 0o600)):
        st = path.stat()
        assert (st.st_mode & 0o777, st.st_uid) == (mode, os.getuid()), path
    # a worker gets no private key: it only has to accept the chief's
    assert not (pods.base / WORKERS[0] / "home" / ".ssh" / "id_ed25519").exists()
    # without the key the worker refuses: no password or keyboard-interactive fallback is offered
    refused = subprocess.run(
        ["ssh", "-F", "/dev/null", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
         "-o", "BatchMode=yes", "-o", "PubkeyAuthentication=no", "-p", str(pods.port), WORKERS[0], "true"],
        capture_output=True, text=True, timeout=30)
    assert refused.returncode == 255
    assert "Permission denied (publickey)" in refused.stderr


def test_the_preflight_measures_every_rank_then_the_training_runs(trained: Training) -> None:
    out = trained.output
    assert trained.exit_code == 0, out
    # per size: time, algorithm and bus bandwidth, over the 3 ranks, TCP ring all-reduces (no fabric: the
    # check's cheap form)
    for size in ("1 MiB", "16 MiB", "64 MiB"):
        assert re.search(rf"INFO pre-flight {size} over 3 ranks \(TCP\): [0-9.]+ ms, "
                         r"algbw [0-9.e+-]+ GB/s, busbw [0-9.e+-]+ GB/s$", out, flags=re.MULTILINE), out
    assert re.search(r"INFO pre-flight pods to the chief at 16 MiB: 127\.0\.0\.2 \S+ GB/s, 127\.0\.0\.3 \S+ "
                     r"GB/s; slowest 127\.0\.0\.[23]$", out, flags=re.MULTILINE), out
    assert re.search(r"INFO pre-flight phases: every rank's process running .* \+[0-9.]+s, the all-reduces "
                     r"done \+[0-9.]+s$", out, flags=re.MULTILINE), out
    took = float(re.findall(r"INFO pre-flight took ([0-9.]+)s", out)[0])
    assert 0 < took < 300
    # the check ran before the training's own horovodrun
    lines = out.splitlines()
    check = next(i for i, line in enumerate(lines) if "pre-flight took" in line)
    start = next(i for i, line in enumerate(lines) if progress.LAUNCHED.match(line.encode()))
    assert check < start
    # Train.py's progress lines, read as the manager reads them: the first step, then every epoch (a line
    # with rank= is a rank's heartbeat, the watchdog's, not the job's progress)
    parsed = [r for r in (progress.parse(line) for line in lines) if r is not None]
    reports = [r for r in parsed if r.rank is None]
    beats = [r for r in parsed if r.rank is not None]
    assert {r.rank for r in beats} == {0, 1, 2}, out  # every rank beats, the workers' too
    assert reports[0] == progress.Progress(epoch=0, epochs=EPOCHS, step=1), reports
    last = reports[-1]
    assert (last.epoch, last.epochs) == (EPOCHS, EPOCHS)
    assert last.step is not None and last.step > 1 and last.loss is not None and last.accuracy is not None
    assert last.steps_per_s is not None and last.steps_per_s > 0
    assert {name for name, _ in last.extra} == {"val_loss", "val_accuracy"}


def test_a_bus_bandwidth_below_min_busbw_fails_fast_naming_the_pod_to_blame(pods: Pods) -> None:
    launcher = Launcher(pods, 1, slots=SLOTS, DT_MIN_BUSBW="100000")
    code = launcher.wait(timeout=TRAINING_TIMEOUT)
    out = launcher.output()
    assert code == 76, out
    # every link below the floor: their common end, the chief's pod, is blamed, and the sweep skipped
    assert re.search(r"ERROR a pod's link to the chief measured below --min-busbw 100000 GB/s \(the sweep "
                     r"was skipped\); to blame: the chief's pod (\S+), every link measured from it below the "
                     r"floor \(each pod's link to the chief, GB/s: 127\.0\.0\.2 \S+, 127\.0\.0\.3 \S+\); "
                     r"the training was not started$", out, flags=re.MULTILINE), out
    assert re.search(r"ERROR pre-flight blames node\(s\) \S+ \(pods \S+\)$", out, flags=re.MULTILINE), out
    assert "starting: horovodrun" not in out and "dt-progress" not in out  # Train.py never ran


def _training_processes(mark: str) -> list[int]:
    """Every process of this test's training (horovodrun exports the chief's environment to every rank)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            environ = (proc / "environ").read_bytes()
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if f"DT_E2E_MARK={mark}".encode() in environ.split(b"\0") and b"Train.py" in cmdline:
            found.append(int(proc.name))
    return found


def test_a_worker_killed_mid_training_fails_the_launcher_and_no_rank_survives(pods: Pods) -> None:
    launcher = Launcher(pods, 200, slots=SLOTS)
    launcher.wait_for_line(r"<stdout>:epoch=1 ", timeout=300)
    assert len(_training_processes(str(pods.base))) >= 3
    kill_tree(pods.workers[WORKERS[1]].pid)  # the whole "pod": sshd, its sessions and the training rank
    code = launcher.wait(timeout=120)
    out = launcher.output()
    assert code != 0, out
    assert "final_accuracy" not in out
    assert re.search(rf"rank 2 on {re.escape(WORKERS[1])} exited", out), out
    # The surviving worker's rank sees Horovod shut down and exits by itself (measured: within ~5 s); it must
    # not linger holding its GPU until someone deletes the pod.
    deadline = time.monotonic() + 60
    while (left := _training_processes(str(pods.base))) and time.monotonic() < deadline:
        time.sleep(1)
    assert left == [], f"training processes still alive 60 s after the launcher exited: {left}"
