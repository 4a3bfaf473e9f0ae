"""The manager's Prometheus metrics: the job's state (jobstate.JobState, as the phases write it to a file)
served over HTTP on the manager pod's `metrics` port (docs/observability.md lists every metric).

Manager.sh runs PreTraining and PostTraining as two processes; this server runs beside them for the script's
whole life (`python -m distributetrain.observe.metrics --state FILE`), so a scrape works in either phase and
between them: each scrape reads the file the phases keep current (publisher.py replaces it whole). A server
that cannot start (its port taken) says so and exits; the job goes on without metrics.

`families(state)` is the pure part: the metric families for one state.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from prometheus_client import start_http_server
from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from distributetrain import naming
from distributetrain.observe import joblog, jobstate
from distributetrain.observe.jobstate import JobState

PREFIX = "distributetrain_"


def families(state: JobState) -> list[Metric]:
    """Every metric of the job, labelled with its name and namespace."""
    keys = ["job_name", "namespace"]
    job = [state.job, state.namespace]

    def gauge(name: str, doc: str, value: float | None) -> list[Metric]:
        if value is None:
            return []
        family = GaugeMetricFamily(PREFIX + name, doc, labels=keys)
        family.add_metric(job, value)
        return [family]

    def counter(name: str, doc: str, value: float) -> Metric:
        family = CounterMetricFamily(PREFIX + name, doc, labels=keys)
        family.add_metric(job, value)
        return family

    phase = GaugeMetricFamily(PREFIX + "job_phase", "1 for the job's current phase, 0 for the others",
                              labels=[*keys, "phase"])
    reached = GaugeMetricFamily(PREFIX + "phase_reached_seconds",
                                "Seconds from the manager's start until the job first reached the phase",
                                labels=[*keys, "phase"])
    for name in naming.PHASES:
        phase.add_metric([*job, name], 1.0 if state.phase == name else 0.0)
        since = state.since_start(name)
        if since is not None:
            reached.add_metric([*job, name], since)
    pods = GaugeMetricFamily(PREFIX + "pod_info",
                             "The job's pods that hold GPUs (1 each): join DCGM-exporter's GPU metrics on "
                             "namespace and pod", labels=[*keys, "pod", "role", "node", "gpus"])
    for pod in state.pods:
        pods.add_metric([*job, pod.name, pod.role, pod.node, str(pod.gpus)], 1.0)
    out: list[Metric] = [phase, reached, pods]
    out += gauge("gpus_requested", "GPUs the job asked for", float(state.gpus))
    out += gauge("gpus_held", "GPUs held by the job's pods that exist now", float(state.held))
    out += gauge("workers", "Worker pods of the job that exist now", float(state.workers))
    out += gauge("workers_ready", "Worker pods Running and Ready", float(state.workers_ready))
    out.append(counter("replans", "Times the gang did not start and the job was planned again",
                       float(state.replans)))
    out.append(counter("restarts", "Times the training was restarted", float(state.restarts)))
    first = None if state.first_step_at is None else max(0.0, state.first_step_at - state.started_at)
    out += gauge("first_step_seconds", "Seconds from the manager's start until the first training step",
                 first)
    out += gauge("exit_code", "The job's exit code, once it ended",
                 None if state.exit_code is None else float(state.exit_code))
    out += _progress(state, gauge)
    if state.transports:
        transport = GaugeMetricFamily(PREFIX + "nccl_transport",
                                      "Pods whose NCCL uses this transport (NET/OFI, NET/IB, NET/Socket), "
                                      "from NCCL's log; `fabric`: the one the job asked for (efa, ib; empty: "
                                      "TCP)",
                                      labels=[*keys, "transport", "fabric"])
        counts = Counter(t for _, t in state.transports)
        for name, count in sorted(counts.items()):
            transport.add_metric([*job, name, state.fabric], float(count))
        out.append(transport)
    out += _ranks(state, keys, job)
    return out


def _ranks(state: JobState, keys: list[str], job: list[str]) -> list[Metric]:
    """Every rank's step time from its heartbeats, and how far the slowest is from the median."""
    timed = [r for r in state.ranks if r.step_seconds is not None]
    if not timed:
        return []
    steps = GaugeMetricFamily(PREFIX + "rank_step_seconds",
                              "Each training rank's mean seconds per step over its last heartbeat period",
                              labels=[*keys, "rank", "pod", "node"])
    for rank in timed:
        steps.add_metric([*job, str(rank.rank), rank.pod, rank.node], float(rank.step_seconds or 0.0))
    out: list[Metric] = [steps]
    computed = [r for r in timed if r.compute_seconds is not None]
    if computed:
        compute = GaugeMetricFamily(PREFIX + "rank_compute_seconds",
                                    "Each training rank's mean seconds per step computing its gradients "
                                    "(forward and backward, before the all-reduce) over its last heartbeat "
                                    "period",
                                    labels=[*keys, "rank", "pod", "node"])
        for rank in computed:
            compute.add_metric([*job, str(rank.rank), rank.pod, rank.node],
                               float(rank.compute_seconds or 0.0))
        out.append(compute)
    skew = state.skew
    if skew is not None:
        family = GaugeMetricFamily(PREFIX + "rank_step_skew",
                                   "The slowest rank's compute time (else step time) over the median rank's "
                                   "(1: no straggler)",
                                   labels=keys)
        family.add_metric(job, skew)
        out.append(family)
    return out


def _progress(state: JobState, gauge: Callable[[str, str, float | None], list[Metric]]) -> list[Metric]:
    report = state.progress
    if report is None:
        return []
    out = gauge("training_epoch", "Epochs the training has completed", _float(report.epoch))
    out += gauge("training_epochs", "Epochs the training runs", _float(report.epochs))
    out += gauge("training_step", "Training steps (batches) done", _float(report.step))
    out += gauge("training_loss", "The training's last reported loss", report.loss)
    out += gauge("training_accuracy", "The training's last reported accuracy", report.accuracy)
    out += gauge("training_steps_per_second", "The training's last reported step rate", report.steps_per_s)
    if report.extra:
        extra = GaugeMetricFamily(PREFIX + "training_metric", "Further metrics the progress line reports",
                                  labels=["job_name", "namespace", "name"])
        for name, value in report.extra:
            extra.add_metric([state.job, state.namespace, name], value)
        out.append(extra)
    return out


def _float(value: int | None) -> float | None:
    return None if value is None else float(value)


class StateCollector(Collector):
    """Reads the state file at each scrape; an absent or unreadable file yields no job metrics."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def collect(self) -> Iterator[Metric]:
        try:
            state = jobstate.loads(self.path.read_text())
        except (OSError, ValueError):
            return
        yield from families(state)


def serve(*, state_file: Path, port: int, address: str = "0.0.0.0") -> threading.Thread:
    """Serve the metrics of the state in `state_file` on address:port/metrics (in a daemon thread)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StateCollector(state_file))
    _server, thread = start_http_server(port, address, registry=registry)
    return thread


def main(argv: Sequence[str] | None = None) -> int:
    say = joblog.Reporter().say  # the manager's log: its lines look like the phases'
    parser = argparse.ArgumentParser(prog="python -m distributetrain.observe.metrics",
                                     description="Serve the job's Prometheus metrics from its state file.")
    parser.add_argument("--state", type=Path, required=True, help="the state file the manager's phases write")
    parser.add_argument("--port", type=int, default=naming.DEFAULT_METRICS_PORT)
    parser.add_argument("--address", default="0.0.0.0")
    args = parser.parse_args(argv)
    try:
        serve(state_file=args.state, port=args.port, address=args.address)
    except OSError as err:
        say(f"cannot serve metrics on {args.address}:{args.port}: {err}; the job goes on without them")
        return 1
    say(f"serving the job's metrics on {args.address}:{args.port}/metrics")
    stop = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stop.set())
    parent = os.getppid()
    # until signalled, or until Manager.sh is gone (killed outright, it could not stop this server)
    while not stop.wait(1.0) and os.getppid() == parent:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
