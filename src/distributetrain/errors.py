"""The error hierarchy and the exit-code table.

Every failure the user can meet is one of these, raised with a message that names the object, what was
asked and what was available, and what to do next. Each class carries its exit code; the CLI exits with it
(cli/__init__.py). EXIT_CODES is the table of them all, written once: `distributetrain --help` prints it,
and a unit test holds docs/design.md to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_UNPLACEABLE = 3
EXIT_WORKER_FAILED = 70
EXIT_SCHEDULE_TIMEOUT = 71
EXIT_API = 72
EXIT_SSH = 73
EXIT_DEADLINE = 74
EXIT_CHIEF_LOST = 75
EXIT_PREFLIGHT = 76
EXIT_API_UNREACHABLE = 77
EXIT_START_FAILED = 78
EXIT_HUNG = 79
EXIT_SIGINT = 130
EXIT_SIGTERM = 143

EXIT_CODES: tuple[tuple[str, str], ...] = (
    (f"{EXIT_OK}", "the training succeeded"),
    (f"{EXIT_USAGE}", "bad usage or input; nothing was created"),
    (f"{EXIT_UNPLACEABLE}", "the request cannot be placed on the free GPUs; nothing was created"),
    (f"{EXIT_WORKER_FAILED}", "a worker failed or disappeared"),
    (f"{EXIT_SCHEDULE_TIMEOUT}",
     "the job's pods were not bound within the schedule timeout, or not started within the start timeout, "
     "after the retries"),
    (f"{EXIT_API}", "the Kubernetes API refused (Forbidden) or failed"),
    (f"{EXIT_SSH}", "a worker's sshd never accepted the job key"),
    (f"{EXIT_DEADLINE}", "the active deadline passed"),
    (f"{EXIT_CHIEF_LOST}", "the chief pod was lost"),
    (f"{EXIT_PREFLIGHT}", "the pre-flight all-reduce check failed: a pod unreachable, hung, off the job's "
                          "fabric (EFA, InfiniBand), or below --min-busbw; the training was not started"),
    (f"{EXIT_API_UNREACHABLE}",
     "the API server did not answer for longer than --api-outage-tolerance while the job ran; its pods were "
     "left to their owner (the manager's Job: a new manager pod adopts them)"),
    (f"{EXIT_START_FAILED}",
     "a job pod cannot start: its image cannot be pulled (ErrImagePull, InvalidImageName) or its container "
     "cannot be configured (CreateContainerConfigError); nothing was kept"),
    (f"{EXIT_HUNG}",
     "the training hung: a rank made no step for --hang-timeout, or stopped first and another then failed "
     "waiting for it (a Gloo or NCCL timeout); the manager names its pod, node and last step; nothing was "
     "kept but the chief, for its log"),
    (f"{EXIT_SIGINT} / {EXIT_SIGTERM}",
     "interrupted by SIGINT / SIGTERM, after deleting everything the job created; a manager pod of a Job "
     "leaves a running job to the Job's next pod"),
    ("other", "the training's own exit code, passed through from the chief"),
)


class DistributeTrainError(Exception):
    """Base of every error we raise on purpose; `exit_code` is what the CLI exits with."""

    exit_code: int = 1


class InvalidInput(DistributeTrainError):
    """Bad usage or bad input: a field, a file, a quantity. Raised before anything is created."""

    exit_code = EXIT_USAGE


class InvalidQuantity(InvalidInput):
    """A Kubernetes quantity that cannot be parsed, or a fractional count of an integer resource."""


class CannotPlace(DistributeTrainError):
    """The request does not fit the free GPUs of the eligible nodes."""

    exit_code = EXIT_UNPLACEABLE


class WorkerFailed(DistributeTrainError):
    exit_code = EXIT_WORKER_FAILED


class ScheduleTimeout(DistributeTrainError):
    exit_code = EXIT_SCHEDULE_TIMEOUT


class ApiError(DistributeTrainError):
    """The Kubernetes API refused or failed; the message carries the server's own words. Callers decide by
    the answer's fields, never its text: `status` (the HTTP code; None when no answer came), `reason` (the
    Status object's: NotFound, AlreadyExists, Conflict, Expired...) and `details` (its name, kind, causes)."""

    exit_code = EXIT_API

    def __init__(self, message: str, *, status: int | None = None, reason: str | None = None,
                 details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.details: Mapping[str, Any] = MappingProxyType(dict(details or {}))


class Forbidden(ApiError):
    """403: RBAC denies the request."""


class NotFound(ApiError):
    """404: the object, or its namespace (details kind "namespaces"), does not exist."""


class Conflict(ApiError):
    """409: a create whose name is taken or a delete whose precondition (uid) no longer holds."""


class AlreadyExists(Conflict):
    """409 with reason AlreadyExists: an object of that name exists."""


class ApiUnreachable(ApiError):
    """The API server did not answer for longer than the job tolerates an outage. Nothing can be cleaned up
    then: the job's objects are left to their owner."""

    exit_code = EXIT_API_UNREACHABLE


class StartFailed(DistributeTrainError):
    """A job pod can never start as asked (a bad image, a missing Secret key): no re-plan helps."""

    exit_code = EXIT_START_FAILED


class Gone(ApiError):
    """410: a watch's resourceVersion or a list's continue token is too old; list again."""


class StreamBroken(ApiError):
    """A watch or log stream was cut mid-way (API server restarted, connection reset); resume it."""


class SshUnreachable(DistributeTrainError):
    exit_code = EXIT_SSH


class DeadlineExceeded(DistributeTrainError):
    exit_code = EXIT_DEADLINE


class ChiefLost(DistributeTrainError):
    exit_code = EXIT_CHIEF_LOST


class PreflightFailed(DistributeTrainError):
    """The chief's pre-flight all-reduce check (allreduce.py) hung, failed or measured too little."""

    exit_code = EXIT_PREFLIGHT


class Hung(DistributeTrainError):
    """The training stopped making progress (manager/watchdog.py). Raised once the supervisor already ended
    the job as a finished one ends (`cleaned_up`): the guard deletes nothing more, the chief is kept."""

    exit_code = EXIT_HUNG
    cleaned_up = True


class Interrupted(DistributeTrainError):
    """The manager was signalled; it cleaned up before raising this."""

    def __init__(self, message: str, *, signal_number: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signal_number
