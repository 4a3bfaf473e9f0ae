"""One job from one manager process: PreTraining then PostTraining, each under the one cleanup guard.

`run` is `distributetrain run` (both phases in this process); `run_pretraining` is `distributetrain launch`
and DistributeTrain_PreTraining.py. PostTraining in a process of its own (DistributeTrain_PostTraining.py,
`distributetrain wait`) needs no request: posttraining.run_posttraining.
"""

from __future__ import annotations

import contextlib

from distributetrain.manager import cleanup, posttraining
from distributetrain.manager.pretraining import PreTraining, StartedJob
from distributetrain.manager.watchdog import StragglerRule


class Orchestrator:
    """One job, driven from one manager process."""

    def __init__(self, pretraining: PreTraining) -> None:
        """The job of `pretraining` (its connection, request, owner, reporter, clock and deadline)."""
        self.pretraining = pretraining
        self.kube = pretraining.kube
        self.spec = pretraining.spec
        self.reporter = pretraining.reporter
        self._clock = pretraining.clock

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
            self.kube.patient(spec.api_outage_tolerance), job=spec.job_name, namespace=spec.namespace,
            keep_chief=spec.keep_chief, reporter=self.reporter,
            workers=None if started.adopted else started.workers, deadline=self.pretraining.deadline,
            schedule_timeout=spec.schedule_timeout, clock=self._clock, request=lambda: spec,
            owner=self.pretraining.owner, hang_timeout=spec.hang_timeout, on_hang=spec.hang_action,
            stragglers=StragglerRule(spec.straggler_factor, spec.straggler_reports, spec.replace_stragglers))

    def _guard(self) -> contextlib.AbstractContextManager[None]:
        # only what this run created or adopted is its to delete
        owner = self.pretraining.owner
        return cleanup.guard(self.kube, job=self.spec.job_name, namespace=self.spec.namespace,
                             reporter=self.reporter, armed=lambda: self.pretraining.touched,
                             durable=owner is not None and owner.durable)
