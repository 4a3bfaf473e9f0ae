"""SIGTERM/SIGINT for the manager: raised as Interrupted in the main thread wherever it blocks, so that the
job's cleanup runs; ignored during that cleanup."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from distributetrain.errors import Interrupted


def _raise_interrupted(signal_number: int, _frame: object) -> None:
    raise Interrupted(f"received {signal.Signals(signal_number).name}", signal_number=signal_number)


@contextlib.contextmanager
def raising_interrupted() -> Iterator[None]:
    """SIGTERM/SIGINT raise Interrupted in the main thread, wherever it blocks, so cleanup runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGTERM, signal.SIGINT)}
    # the entry scripts of Manager.sh hold these signals from their first line: a held one lands here
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        yield
    finally:
        # held again as before (Manager.sh hands a signal that comes now to the next phase), then restored
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def ignored() -> Iterator[None]:
    """A second signal must not cut the cleanup short: it is bounded and quick."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
