"""The manager's side of the scale bench (bench/measure/scale.py starts it): a fresh process that goes the
manager's own way to its first plan, read on three clocks.

    python -m bench.measure.scale_manager KUBECONFIG SERVER_PID   # one JSON object on stdout

Cold, once, as a real manager does it once: the manager's imports (the image's DistributeTrain_PreTraining.py
imports distributetrain.cli; cli/job.py's `_orchestrator` then imports the orchestrator, PreTraining, the
gateway and the Observer), then scale_path.py: connecting, the request and its pod demands, and
`PreTraining.plan`, the product's own function. Then the same plan again, warm. Before the clock starts this
process has imported only the standard library and the bench's /proc reader, so the imports timed are the
manager's alone.

Three clocks for each step: wall time; this process's CPU (time.process_time, every thread: the manager's own
cost, which other load on the machine inflates little); and the CPU of the local API server and its children
(/proc/PID/stat), which answers on the same cores and whose time is otherwise inside every wall figure.
"""

from __future__ import annotations

import json
import sys
import time

from bench.measure.proctimes import tree_cpu


def main(kubeconfig: str, server_pid: int) -> dict[str, object]:
    started = (time.perf_counter(), time.process_time(), tree_cpu(server_pid))
    # DistributeTrain_PreTraining.py's import, then those of cli/job.py's _orchestrator
    import distributetrain.cli
    import distributetrain.kube.gateway
    import distributetrain.manager.orchestrator
    import distributetrain.manager.pretraining
    import distributetrain.observe.jobstate
    import distributetrain.observe.observer  # noqa: F401 - imported to be timed

    ended = (time.perf_counter(), time.process_time(), tree_cpu(server_pid))
    # the bench's own instruments, imported after the manager's modules and outside every timed step
    from bench.measure import scale_path

    imports = scale_path.Stamp(*(end - start for end, start in zip(ended, started, strict=True)))
    return scale_path.measure(kubeconfig, server_pid, imports=imports)


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]))))
