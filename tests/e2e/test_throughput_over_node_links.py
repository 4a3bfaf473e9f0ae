"""The throughput bench's measurement, end to end and small: a 2-GPU job run by `distributetrain run` on a
local cluster of real processes, once on one node and once split over two nodes joined by a 200mbit node
link. Real Horovod over Gloo, the product's own planner, sshd workers and chief; what is checked is what the
bench reports: the split the planner made, each rank on its own core, the slow link showing in the step."""

from __future__ import annotations

import os

import pytest
from bench.measure import throughput

pytestmark = [pytest.mark.e2e, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces and tc need root")]


def test_a_job_split_over_a_slow_node_link_steps_slower_than_on_one_node() -> None:
    one = throughput.run_job((2,), node_link="", sizes=(25,), seconds=3.0)
    split = throughput.run_job((1, 1), node_link="200mbit", sizes=(25,), seconds=3.0)

    assert (one["ranks"], split["ranks"]) == (2, 2)
    assert {r["core"] for r in one["pinning"].values()} == {0, 1}  # rank r on core r % 2
    assert len({r["pod"] for r in split["pinning"].values()}) == 2  # one rank in each node's pod
    fast, slow = one["sizes"]["25"], split["sizes"]["25"]
    # 25 MB over a ring of two: each rank sends and receives 25 MB, ~1 s at 23.9 MB/s of payload
    assert slow["step_s_median"] - slow["compute_s_median"] > 0.8, (fast, slow)
    assert slow["step_s_median"] > 2 * fast["step_s_median"], (fast, slow)
