"""One job from one manager process: PreTraining then PostTraining, each under the one cleanup guard.

`run` is `distributetrain run` (both phases in this process); `run_pretraining` is `distributetrain launch`
and DistributeTrain_PreTraining.py. PostTraining in a process of its own (DistributeTrain_PostTraining.py,
`distributetrain wait`) needs no request: posttraining.run_posttraining.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from distributetrain.kube.gateway import Kube
from distributetrain.manager import cleanup, posttraining
from distributetrain.manager.pretraining import PreTraining, StartedJob
from distributetrain.observe.joblog import Reporter
from distributetrain.request.jobspec import JobSpec, ManagerIdentity


class Orchestrator:
    """One job, driven from one manager process."""

    def __init__(self, kube: Kube, spec: JobSpec, *, owner: ManagerIdentity | None = None,
                 reporter: Reporter | None = None, started_at: float | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        """`started_at` (epoch seconds): when the manager started, if before this process (Manager.sh runs
        the two phases as two processes); the active deadline counts from it."""
        self.kube = kube
        self.spec = spec
        self.reporter = reporter or Reporter()
        self.pretraining = PreTraining(kube, spec, owner=owner, reporter=self.reporter, started_at=started_at,
                                       clock=clock, sleep=sleep)
        self._clock = clock

    def run(self) -> int:
        """PreTraining then PostTraining; return the chief's exit code. On any error or SIGTERM/SIGINT,
        delete everything the job owns first, then raise (Interrupted carries 128+signal)."""
        with self._guard():
            return self._supervise(self.pretraining.run())

    def run_pretraining(self) -> StartedJob:
        """PreTraining alone, with the same cleanup on failure or signal."""
        with self._guard():
            return self.pretraining.run()

    def run_posttraining(self, started: StartedJob) -> int:
        """PostTraining of the job this manager's PreTraining started, with the same cleanup."""
        with self._guard():
            return self._supervise(started)

    def _supervise(self, started: StartedJob) -> int:
        # an adopted job's workers are read from the cluster, and checked against the chief's process count
        spec = self.spec
        return posttraining.supervise(
            self.kube, job=spec.job_name, namespace=spec.namespace, keep_chief=spec.keep_chief,
            reporter=self.reporter, workers=None if started.adopted else started.workers,
            deadline=self.pretraining.deadline, schedule_timeout=spec.schedule_timeout, clock=self._clock,
            request=lambda: spec, owner=self.pretraining.owner)

    def _guard(self) -> contextlib.AbstractContextManager[None]:
        # only what this run created or adopted is its to delete
        return cleanup.guard(self.kube, job=self.spec.job_name, namespace=self.spec.namespace,
                             reporter=self.reporter, armed=lambda: self.pretraining.touched)
