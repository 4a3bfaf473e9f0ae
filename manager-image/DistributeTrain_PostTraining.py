#!/usr/bin/env python3
"""PostTraining, the design's last step: stream the chief's log into this pod's, watch the chief and the
workers, and when the chief ends delete the workers, the hostfile and the Secret (keeping the chief for its
log); exit with the chief's exit code. Given the same request as PreTraining, it takes only the job's name,
namespace and keep-chief from it, and the manager's start time (DT_MANAGER_STARTED_AT, set by Manager.sh);
the workers and the active deadline it reads from the job's pods. `distributetrain wait JOB` does the same
for a job named on the command line.
"""

import os
import signal
import sys

# Hold SIGTERM/SIGINT from the first line: the package takes them over once it can clean up after them
# (cleanup.py), and Manager.sh hands them on only after this notice.
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
if os.environ.get("DT_NOTIFY_PARENT") == "1":
    os.kill(os.getppid(), signal.SIGUSR1)

from distributetrain.cli import main  # noqa: E402 - after the signal mask, on purpose

if __name__ == "__main__":
    main(["posttraining", *sys.argv[1:]])
