"""What the manager's log says: the inventory table, pods, the hostfile; and the Reporter's timestamps."""

from __future__ import annotations

import io
import re

from distributetrain.hostfile import HostSlots
from distributetrain.observe import joblog
from distributetrain.observe.joblog import Reporter
from distributetrain.placement.inventory import NodeGpus


def row(node: str, allocatable: int, requested: int, reason: str | None = None) -> NodeGpus:
    return NodeGpus(node=node, allocatable=allocatable, requested=requested,
                    free=max(0, allocatable - requested), eligible=reason is None, reason=reason)


def test_inventory_table_shows_every_node_with_its_numbers_and_why_it_is_excluded() -> None:
    rows = [row("cpu-1", 0, 0, "no nvidia.com/gpu allocatable"), row("node-1", 5, 0), row("node-2", 3, 1),
            row("node-3", 2, 0)]
    assert joblog.inventory_lines(rows, resource="nvidia.com/gpu") == [
        "inventory: 4 node(s), 3 eligible; 9 of 10 nvidia.com/gpu free on eligible nodes",
        "  NODE    ALLOCATABLE  REQUESTED  FREE  ELIGIBLE",
        "  cpu-1   0            0          0     no: no nvidia.com/gpu allocatable",
        "  node-1  5            0          5     yes",
        "  node-2  3            1          2     yes",
        "  node-3  2            0          2     yes",
    ]


def test_a_large_cluster_shows_the_nodes_with_most_free_gpus_and_counts_the_rest() -> None:
    rows = [row(f"node-{i:04d}", 8, i % 9) for i in range(1000)]
    rows += [row("tainted", 8, 0, "untolerated taint a=b:NoSchedule")]
    lines = joblog.inventory_lines(rows, resource="nvidia.com/gpu", limit=5)
    assert len(lines) == 1 + 1 + 5 + 1
    assert lines[0].startswith("inventory: 1001 node(s), 1000 eligible;")
    shown = [line.split()[0] for line in lines[2:7]]
    assert shown == ["node-0000", "node-0009", "node-0018", "node-0027", "node-0036"]  # 8 free each, by name
    assert all(line.split()[3] == "8" for line in lines[2:7])
    eligible_hidden_free = sum(r.free for r in rows if r.eligible) - 5 * 8
    assert lines[-1] == (f"  ... and 996 more node(s): 995 eligible with {eligible_hidden_free} free, 1 not "
                         "eligible (`distributetrain inventory` lists them all)")


def test_pod_text_names_the_node_it_runs_on_or_was_planned_for() -> None:
    planned = {"metadata": {"name": "j-worker-0", "annotations": {"distributetrain.io/gpus": "5"}},
               "spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                   "nodeSelectorTerms": [{"matchExpressions": [
                       {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]}]}]}}}}}
    assert joblog.pod_text(planned) == "j-worker-0 (node-1, 5 GPUs)"
    bound = {"metadata": {"name": "j-chief", "annotations": {"distributetrain.io/gpus": "1"}},
             "spec": {"nodeName": "node-3"}}
    assert joblog.pod_text(bound) == "j-chief (node-3, 1 GPU)"


def test_hostfile_text_is_the_sorted_content_and_stays_one_line() -> None:
    hosts = [HostSlots("10.244.2.10", 4), HostSlots("10.244.2.9", 8)]
    assert joblog.hostfile_text(hosts) == "10.244.2.9 slots=8; 10.244.2.10 slots=4"
    many = [HostSlots(f"10.0.0.{i}", 8) for i in range(1, 21)]
    assert joblog.hostfile_text(many, limit=2) == "10.0.0.1 slots=8; 10.0.0.2 slots=8; ... and 18 more"
    assert joblog.listing(["a", "b", "c"], limit=2) == "a, b, ... and 1 more"


def test_reporter_lines_carry_utc_milliseconds() -> None:
    out = io.StringIO()
    Reporter(stream=out).say("plan (attempt 1): 6 GPU(s)")
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
    assert re.fullmatch(stamp + r" distributetrain: plan \(attempt 1\): 6 GPU\(s\)\n", out.getvalue())


# ---- the chief's log, resumed by time --------------------------------------------------------------------
def stamped(second: int, nanos: int, text: str) -> bytes:
    return f"2026-11-22T03:17:{second:02d}.{nanos:09d}Z {text}".encode()


def copy(cursor: joblog.LogCursor, lines: list[bytes], out: list[bytes]) -> None:
    cursor.restart()
    for line in lines:
        stamp, rest = joblog.split_stamp(line)
        if cursor.admit(stamp):
            out.append(rest)


def test_split_stamp() -> None:
    assert joblog.split_stamp(b"2026-11-22T03:17:28.5Z epoch=1") == (1795317448 * 10**9 + 500_000_000,
                                                                      b"epoch=1")
    assert joblog.split_stamp(b"2026-11-22T04:17:28+01:00 x")[0] == 1795317448 * 10**9
    assert joblog.split_stamp(b"no stamp here") == (None, b"no stamp here")


def test_a_resumed_stream_loses_and_repeats_nothing() -> None:
    cursor = joblog.LogCursor()
    out: list[bytes] = []
    first = [stamped(1, 0, "a"), stamped(1, 0, "b"), stamped(2, 5, "c")]   # two lines share a time
    copy(cursor, first, out)
    assert cursor.since_time() == "2026-11-22T03:17:02Z"  # whole seconds: the server passes no more on
    # the stream is cut; the next starts at that second: c again, then what came meanwhile
    copy(cursor, [stamped(2, 5, "c"), stamped(2, 5, "d"), stamped(3, 0, "e")], out)
    assert out == [b"a", b"b", b"c", b"d", b"e"]


def test_after_a_rotation_nothing_is_skipped() -> None:
    """A line count would skip the first lines of the new file: the old ones are no longer served."""
    cursor = joblog.LogCursor()
    out: list[bytes] = []
    copy(cursor, [stamped(1, 0, "old-1"), stamped(1, 1, "old-2")], out)
    copy(cursor, [stamped(4, 0, "new-1"), stamped(4, 1, "new-2")], out)  # rotated: only newer lines served
    assert out == [b"old-1", b"old-2", b"new-1", b"new-2"]
