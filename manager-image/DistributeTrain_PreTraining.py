#!/usr/bin/env python3
"""PreTraining, the design's first step: list the free GPUs, plan the split, create the per-job SSH key Secret
and the workers pinned to their nodes, wait until they are all Ready (re-planning if they are not), then write
the hostfile and create the chief last. Same as `distributetrain launch`; on failure it deletes what it made.
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
    main(["launch", "--quiet", *sys.argv[1:]])  # the pod's log is for people: no bare job name in it
