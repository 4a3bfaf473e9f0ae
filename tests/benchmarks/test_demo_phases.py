"""bench/measure/demo_phases.py reads the phases of a job's start-up from the manager's log."""

from __future__ import annotations

from datetime import datetime

from bench.measure import demo_phases

# the shape of a real manager log (make demo), shortened; the launcher's times are local time
LOG = """\
2026-11-22T03:02:30.900Z distributetrain: manager started
2026-11-22T03:02:31.500Z distributetrain: inventory: 4 node(s), 3 eligible; 10 of 10 nvidia.com/gpu free
2026-11-22T03:02:31.510Z distributetrain:   NODE    ALLOCATABLE  REQUESTED  FREE  ELIGIBLE
2026-11-22T03:02:31.600Z distributetrain: plan (attempt 1): 6 GPU(s) as 5 on node-1, 1 on node-3
2026-11-22T03:02:31.700Z distributetrain: created Secret train-6gpu-ssh (the job's ssh key pair)
2026-11-22T03:02:31.800Z distributetrain: worker train-6gpu-worker-0 created on node-1 with 5 GPUs
2026-11-22T03:02:33.800Z distributetrain: 1 worker(s) Running and Ready 2.00s after their creation
2026-11-22T03:02:33.900Z distributetrain: hostfile ConfigMap train-6gpu-hostfile written: 10.244.1.2 slots=5
2026-11-22T03:02:34.000Z distributetrain: chief train-6gpu-chief created on node-3 with 1 GPU; horovodrun
2026-11-22T03:02:35.000Z distributetrain: chief train-6gpu-chief is Running, 1.00s after its creation; its
2026-11-22T03:02:35.100Z distributetrain: supervising job train-6gpu: chief train-6gpu-chief (node-3, 1 GPU)
launcher {local}:35,500 INFO waiting for 1 workers' sshd on port 2222: 10.244.1.2
launcher {local}:35,596 INFO ssh root@10.244.1.2:2222 accepts the job key (attempt 1)
launcher {local}:35,597 INFO starting: /venv/bin/horovodrun -np 6 --hostfile /tmp/h -p 2222 python3 Train.py
[0]<stdout>:horovod size=6 train=1437
[0]<stdout>:first_step_unix={first_step}
[0]<stdout>:epoch=1 accuracy=0.4547
launcher {local}:50,000 INFO training finished: 6 processes on 2 pods, exit code 0
2026-11-22T03:02:51.000Z distributetrain: chief train-6gpu-chief ended with exit code 0; releasing the workers
2026-11-22T03:02:52.000Z distributetrain: deleted 4 object(s) of job train-6gpu; kept train-6gpu-chief
"""


def utc(text: str) -> float:
    return datetime.fromisoformat(text + "+00:00").timestamp()


def test_every_phase_is_timed_from_kubectl_apply() -> None:
    local = datetime.fromtimestamp(utc("2026-11-22T03:02:00")).strftime("%Y-%m-%d %H:%M")
    log = LOG.format(local=local, first_step=f"{utc('2026-11-22T03:02:40.250'):.3f}")
    rows = demo_phases.phase_table(log, applied=utc("2026-11-22T03:02:30"))
    got = {r["phase"]: (round(r["since_apply_s"], 3), round(r["phase_s"], 3)) for r in rows}
    assert got == {
        "manager pod started (Manager.sh's first line)": (0.9, 0.9),
        "manager up, cluster listed (inventory)": (1.5, 0.6),
        "plan": (1.6, 0.1),
        "workers created": (1.8, 0.2),
        "workers Running and Ready": (3.8, 2.0),
        "hostfile written, chief created": (4.0, 0.2),
        "chief running": (5.0, 1.0),
        "ssh ready (every worker accepts the job key)": (5.596, 0.596),
        "horovodrun started": (5.597, 0.001),
        "first training step ended": (10.25, 4.653),
        "training ended": (20.0, 9.75),
        "workers deleted, manager done": (22.0, 2.0),
    }


def test_a_missing_line_leaves_its_phase_empty_and_the_next_timed_from_the_one_before() -> None:
    log = "\n".join(line for line in LOG.splitlines()
                    if "Running and Ready" not in line and "launcher" not in line)
    rows = demo_phases.phase_table(log.format(first_step=utc("2026-11-22T03:02:40")),
                                  applied=utc("2026-11-22T03:02:30"))
    by_phase = {r["phase"]: r for r in rows}
    assert by_phase["workers Running and Ready"]["since_apply_s"] is None
    assert round(by_phase["hostfile written, chief created"]["phase_s"], 3) == 2.2


def test_the_manifest_applied_is_the_users_with_a_short_training() -> None:
    text = demo_phases.manager_manifest(epochs=2)
    assert "python3 /opt/distributetrain/Train.py --epochs 2" in text
    assert "train-6gpu" in text and "distributetrain-serviceaccount" in text


def test_the_start_up_is_given_with_its_spread_beside_bare_horovodrun() -> None:
    def run(first_step: float) -> dict[str, object]:
        return {"phases": [{"phase": "first training step ended", "since_apply_s": first_step,
                            "phase_s": 1.0}], "wall_s": 30.0}

    median = [{"phase": "first training step ended", "since_apply_s": 15.0, "phase_s": 1.0}]
    text = demo_phases.markdown(median, [run(14.0), run(15.0), run(18.0)], epochs=2, bare=[12.0, 13.0, 12.5])
    assert "median 15.00 s (range 14.00-18.00), n=3" in text
    assert "median 12.50 s (range 12.00-13.00), n=3" in text
    assert "Ratio of the medians 1.20x" in text
    assert ("Run by run, against the bare run right after it: 1.17x, 1.15x, 1.44x; ours minus bare 2.0, "
            "2.0, 5.5 s.") in text
