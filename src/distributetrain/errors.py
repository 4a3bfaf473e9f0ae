"""The error hierarchy and the exit-code table.

Every failure the user can meet is one of these, raised with a message that names the object, what was
asked and what was available, and what to do next. The CLI maps them to exit codes once, here.

Exit codes (documented in docs/design.md and `distributetrain --help`):

====  ==========================================================================
0     success (the chief's training exited 0)
1-    the chief's own non-zero exit code is passed through unchanged
2     bad usage or bad input: nothing was created
3     the request cannot be placed on the free GPUs: nothing was created
70    a worker failed or disappeared during the job
71    the gang of workers did not become Ready within the schedule timeout (after retries)
72    the Kubernetes API refused or failed (Forbidden, unreachable, repeated 5xx)
73    a worker's sshd never accepted the job key
74    the job's active deadline passed
75    the chief pod was lost (deleted, evicted, its node failed)
130   interrupted (SIGINT); 143 terminated (SIGTERM) - everything created was deleted first
====  ==========================================================================
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_UNPLACEABLE = 3
EXIT_WORKER_FAILED = 70
EXIT_SCHEDULE_TIMEOUT = 71
EXIT_API = 72
EXIT_SSH = 73
EXIT_DEADLINE = 74
EXIT_CHIEF_LOST = 75
EXIT_SIGINT = 130
EXIT_SIGTERM = 143


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
    """The Kubernetes API refused (`Forbidden`) or failed; the message carries the server's own words."""

    exit_code = EXIT_API


class SshUnreachable(DistributeTrainError):
    exit_code = EXIT_SSH


class DeadlineExceeded(DistributeTrainError):
    exit_code = EXIT_DEADLINE


class ChiefLost(DistributeTrainError):
    exit_code = EXIT_CHIEF_LOST


class Interrupted(DistributeTrainError):
    """The manager was signalled; it cleaned up before raising this."""

    def __init__(self, message: str, *, signal_number: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signal_number
