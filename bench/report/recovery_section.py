"""The section of docs/benchmarks.md that bench/measure/recovery.py measures (what a lost worker costs an
elastic and a restart job), rendered from its stored result. Light imports only: no cluster."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from bench.report.markdown import table

TITLE = "Surviving a lost worker: elastic and restart jobs"


def _spread(values: Sequence[float], digits: int = 1) -> str:
    """The median in bold, then the interquartile range and the extremes (each run, when there are few)."""
    if not values:
        return "n/a"
    median = statistics.median(values)
    if len(values) < 5:
        return f"**{median:.{digits}f}** ({', '.join(f'{v:.{digits}f}' for v in values)})"
    low, _, high = statistics.quantiles(values, n=4, method="inclusive")
    return (f"**{median:.{digits}f}** (IQR {low:.{digits}f}-{high:.{digits}f}, "
            f"min-max {min(values):.{digits}f}-{max(values):.{digits}f})")


def _looks(runs: Sequence[Mapping[str, Any]]) -> str:
    """How many faults found no room for their replacement at the manager's first look."""
    counted = [r["no_room_looks"] for r in runs if "no_room_looks" in r]
    if not counted:
        return "not recorded"
    waited = [n for n in counted if n]
    return f"{len(waited)} of {len(counted)}" + (f" (looks without room: {', '.join(map(str, waited))})"
                                                  if waited else "")


def _whole_rings(runs: Sequence[Mapping[str, Any]]) -> str:
    """How many faults' first ring after the loss was already whole (the replacement Ready before Horovod's
    reset formed it): there the job never trained on the chief's rank alone."""
    counted = [r["resumed_ranks"] for r in runs if "resumed_ranks" in r]
    if not counted:
        return "Faults whose first ring after the loss already held the replacement: not recorded."
    whole = sum(1 for n in counted if n == 6)
    return (f"Faults whose first ring after the loss already held the replacement (Ready before Horovod's "
            f"reset formed its ring, so the job went from 6 ranks to 6): {whole} of {len(counted)}.")


def section(result: Mapping[str, Any] | None, provenance: str) -> str:
    """The section of docs/benchmarks.md."""
    if not isinstance(result, Mapping) or "elastic" not in result:
        why = (result or {}).get("skipped") or (result or {}).get("failed") or "no run recorded"
        return f"Not run: {why}.\n"
    elastic, restart = result["elastic"]["runs"], result["restart"]["runs"]
    refresh = result.get("volume_refresh_s", 1.0)

    def row(label: str, runs: Sequence[Mapping[str, Any]], key: str, digits: int = 1) -> list[str]:
        return [label, _spread([r[key] for r in runs if key in r], digits)]

    if refresh >= 60:
        volumes = (f"ConfigMap volumes are refreshed as a real kubelet refreshes them: every {refresh:g} s "
                   "plus up to half of that as jitter, and at once when the pod object is updated. The chief "
                   "sees each new hostfile within a second because the manager annotates its pod after each "
                   "write (docs/manager.md, \"Hostfile updates\"); the times below include that path. ")
    else:
        volumes = (f"ConfigMap volumes are refreshed every {refresh:g} s here; on a real cluster the "
                   "kubelet takes up to its sync period plus its cache's propagation delay (up to about 1-2 "
                   "minutes), which adds to the times that wait for the hostfile (full size; a restart's "
                   "relaunch), not to detection nor to an elastic job resuming. ")

    lines = [
        f"The demo's 6-GPU job on nodes of {', '.join(map(str, result['nodes']))} GPUs (a worker of 5 GPUs, "
        "the chief's 1; pods as processes, ranks on the CPU), run by `distributetrain run`; its worker's pod "
        f"deleted without grace {result['faults']} times in one elastic job and {result['faults']} times in "
        "one restart job (bench/measure/recovery.py). Seconds from the loss: the median in bold, then the "
        "interquartile range and the extremes (n = "
        f"{len(result['elastic']['runs'])} and {len(result['restart']['runs'])}). " + volumes + provenance,
        "",
        "Elastic (`--min-gpus 1`): Horovod goes on with the chief's rank, the manager replaces the worker, "
        "Horovod grows back to 6. After the last fault the job is stopped (SIGTERM to the manager, exit "
        f"{result['elastic']['exit_code']}, everything deleted): the rank left alone trains about 10 epochs "
        "a second here, far faster than 6 ranks sharing 2 cores, so no epoch count lasts the faults and no "
        "more. The accuracy and the weights after such losses are the fault matrix's (docs/reliability.md).",
        "",
        table(["from the worker's loss to", "seconds"], [
            row("the manager noticing it", elastic, "detect_s", 2),
            row("training again (on 1 of 6 GPUs; on 6 if the replacement was in the reset's ring)", elastic,
                "resumed_s"),
            row("the replacement worker created", elastic, "replacement_created_s"),
            row("the replacement worker Ready", elastic, "replacement_ready_s"),
            row("training at full size again (6 of 6)", elastic, "full_size_s")]), "",
        _whole_rings(elastic),
        "",
        f"Restart (`--restarts {result['faults']}`): the training stops, the manager replaces the worker, "
        "the "
        "chief's launcher relaunches it from rank 0's last checkpoint (every epoch). Workers lost "
        + ("in turn " if len(restart) > 3 else "")
        + ", ".join(dict.fromkeys(f"{round(100 * r.get('fraction', 0))}%" for r in restart))
        + " of the way through an epoch "
        f"of about {statistics.median([r['epoch_s'] for r in restart]):.1f} s. Final accuracy "
        f"{result['restart'].get('final_accuracy') or 0:.4f}, exit {result['restart']['exit_code']}.", "",
        table(["from the worker's loss to / lost", "seconds (epochs)"], [
            row("the manager noticing it", restart, "detect_s", 2),
            row("the replacement worker created", restart, "replacement_created_s"),
            row("the relaunch (every lost worker replaced: Ready)", restart, "relaunched_s"),
            row("the relaunched training's first step", restart, "training_again_s"),
            ["epochs done at the loss / resumed from",
             ", ".join(f"{r['epochs_done']} / {r['resumed_from']}" for r in restart)],
            row("training work lost: epochs redone and the part of the epoch under way, x the epoch's "
                "length", restart, "work_lost_s")]),
        "",
        "Faults whose replacement found no room at the manager's first look (the lost pod's GPUs still "
        f"counted; the manager then looks again after 2 s, 4 s, ...): elastic {_looks(elastic)}, restart "
        f"{_looks(restart)}.",
        "",
        "The training work lost is small because rank 0 checkpoints every epoch; what a failure costs a "
        "restart job is the relaunch: Horovod and TensorFlow start again on every rank (here 6 ranks on 2 "
        "shared cores), where an elastic job's surviving ranks go on within a second.",
        "",
    ]
    return "\n".join(lines)
