#!/usr/bin/env python3
"""PostTraining, the design's last step: stream the chief's log into this pod's, watch the chief and the
workers, and when the chief ends delete the workers, the hostfile and the Secret (keeping the chief for its
log); exit with the chief's exit code. Takes the same request as PreTraining; `distributetrain wait JOB`
does the same for a job named on the command line.
"""

import os
import signal
import sys

# Hold SIGTERM/SIGINT from the first line: the package takes them over once it can clean up after them
# (orchestrator.py), and Manager.sh hands them on only after this notice.
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
if os.environ.get("DT_NOTIFY_PARENT") == "1":
    os.kill(os.getppid(), signal.SIGUSR1)

from distributetrain.cli import main  # noqa: E402 - after the signal mask, on purpose

if __name__ == "__main__":
    main(["supervise", *sys.argv[1:]])
