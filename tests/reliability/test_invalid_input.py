"""Fault matrix, bad input: the real `distributetrain run` exits 2 with a message naming the field, and
nothing is created - not a pod, not a Secret, nothing with our labels anywhere."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from reliability_support import IMAGE, Factory, free_gpus, kube_of

from distributetrain import naming

GOOD = {"--gpus": "6", "--image": IMAGE, "--job-name": "train"}
# (case, changed options, the field the message must name, a fragment of the reason)
CASES: list[tuple[str, dict[str, str], str, str]] = [
    ("GPUs 0", {"--gpus": "0"}, "gpus", "at least 1 GPU"),
    ("GPUs -1", {"--gpus": "-1"}, "gpus", "whole number"),
    ("GPUs abc", {"--gpus": "abc"}, "gpus", "whole number"),
    ("GPUs 10^9", {"--gpus": "1000000000"}, "gpus", "1000000000"),
    ("unknown resource name", {"--resource": "example.com/fpga"}, "resource", "no node advertises"),
    ("malformed resource name", {"--resource": "gpu"}, "resource", "domain prefix"),
    ("malformed image reference", {"--image": "Registry/Bad Image:!"}, "image", "image reference"),
    ("namespace that does not exist", {"--namespace": "nowhere"}, "namespace", "does not exist"),
    ("malformed namespace", {"--namespace": "Not_A_Namespace"}, "namespace", "namespace name"),
    ("bad toleration key", {"--toleration": "bad key!:NoSchedule"}, "tolerations", "bad key!"),
    ("bad toleration effect", {"--toleration": "dedicated=ml:Sometimes"}, "tolerations", "Sometimes"),
    ("bad node selector", {"--node-selector": "novalue"}, "node_selector", "novalue"),
    ("bad node selector key", {"--node-selector": "bad key=x"}, "node_selector", "bad key"),
    ("empty command", {"--command": ""}, "command", "empty"),
    ("blank command", {"--command": "   "}, "command", "empty"),
]


def _everything_ours(kube: object) -> list[str]:
    """Every object in every namespace the job could have touched, labelled as ours or named like the job."""
    found = []
    for kind in ("pods", "secrets", "configmaps", "networkpolicies"):
        items, _ = kube.list(kind, None) if kind != "networkpolicies" else kube.list(kind, "default")  # type: ignore[attr-defined]
        for item in items:
            meta = item["metadata"]
            if (meta.get("labels") or {}).get(naming.MANAGED_BY_KEY) == naming.MANAGED_BY or \
                    meta["name"].startswith("train"):
                found.append(f"{kind}/{meta['namespace']}/{meta['name']}")
    return found


def test_invalid_inputs_exit_2_naming_the_field(local_cluster_factory: Factory,
                                                row: Callable[..., object]) -> None:
    cluster = local_cluster_factory()
    kube = kube_of(cluster)
    before = free_gpus(kube)
    binary = str(Path(sys.executable).parent / "distributetrain")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DT_") and k != "KUBECONFIG"}
    started = time.monotonic()
    procs = {}
    for case, changes, _field, _reason in CASES:  # all at once: each is a separate manager process
        options = {**GOOD, **changes}
        argv = [binary, "run", "--kubeconfig", str(cluster.kubeconfig)]
        for key, value in options.items():
            argv += [key, value]
        procs[case] = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                       env=env)
    results = {case: (p.wait(timeout=120), p.communicate()[0]) for case, p in procs.items()}
    elapsed = time.monotonic() - started

    problems = []
    for case, _changes, field, reason in CASES:
        code, output = results[case]
        if code != 2 or f"{field}" not in output or reason not in output:
            problems.append(f"{case}: exit {code}, output:\n{output}")
        if "Traceback" in output:
            problems.append(f"{case}: a traceback instead of a message:\n{output}")
    assert not problems, "\n\n".join(problems)
    assert _everything_ours(kube) == []
    assert free_gpus(kube) == before
    for case, _changes, field, _reason in CASES:
        row(f"invalid input: {case}", test=f"test_invalid_input[{case}]", outcome=f"exit {results[case][0]}",
            exit_code=results[case][0], objects_left=0, gpus_held=0,
            notes=f"names `{field}`; {len(CASES)} cases in {elapsed:.1f} s")


def test_everything_wrong_at_once_is_reported_at_once(local_cluster_factory: Factory) -> None:
    """Every bad field in one message, so a user fixes them in one go."""
    cluster = local_cluster_factory()
    binary = str(Path(sys.executable).parent / "distributetrain")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DT_") and k != "KUBECONFIG"}
    done = subprocess.run([binary, "run", "--kubeconfig", str(cluster.kubeconfig), "--gpus", "abc", "--image",
                           "Bad Image", "--command", "", "--node-selector", "novalue"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2
    for field in ("gpus", "image", "command", "node_selector"):
        assert f"\n  {field} " in done.stderr, done.stderr
    assert "nothing was created" in done.stderr
