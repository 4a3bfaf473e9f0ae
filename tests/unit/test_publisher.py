"""publisher.py: the state file the metrics server reads is written at a bounded rate, at once on a phase
change, whole (never half a file), and the last state is flushed on close; a write that fails is said once."""

from __future__ import annotations

import time
from pathlib import Path

from localcluster import wait_until

from distributetrain.observe.publisher import Publisher


def test_state_writes_are_bounded_urgent_ones_immediate_and_the_last_one_flushed(tmp_path: Path) -> None:
    said: list[str] = []
    path = tmp_path / "state.json"
    publisher = Publisher(None, say=said.append, target=None, state_file=path)
    publisher.start()
    publisher.state("phase-1", urgent=True)
    wait_until(lambda: path.exists() and path.read_text() == "phase-1", timeout=5, what="an urgent write")
    for step in range(200):  # a script printing progress on every step
        publisher.state(f"progress-{step}", urgent=False)
        time.sleep(0.002)
    time.sleep(0.1)
    assert publisher.sent["states"] <= 2  # the first plus at most one more within a second
    publisher.state("phase-2", urgent=True)
    wait_until(lambda: path.read_text() == "phase-2", timeout=5, what="the phase change")
    publisher.state("last", urgent=False)
    publisher.close(timeout=5)
    assert path.read_text() == "last" and not publisher.is_alive()
    assert not (tmp_path / "state.json.new").exists() and said == []


def test_a_state_file_that_cannot_be_written_is_said_once(tmp_path: Path) -> None:
    said: list[str] = []
    publisher = Publisher(None, say=said.append, target=None, state_file=tmp_path / "missing" / "state.json")
    publisher.start()
    for n in range(3):
        publisher.state(f"s{n}", urgent=True)
        time.sleep(0.05)
    publisher.close(timeout=5)
    assert len(said) == 1 and "the job's state is not written for the metrics server" in said[0]
    assert "further failures of this kind are not logged" in said[0]
