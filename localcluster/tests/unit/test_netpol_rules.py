"""NetworkPolicy's rules (runtime/netpol.py): who is isolated, what is allowed, and the nft text
that says so. The e2e tests (tests/e2e/test_network_policy.py) send the traffic."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster._internal.runtime.netpol import (
    Allow,
    Endpoint,
    Isolation,
    PortRange,
    bridge_ruleset,
    isolation_by_pod,
    pod_ruleset,
)

WORKER = Endpoint("w", "jobs", {"job": "a", "role": "worker"}, "10.244.1.2", {"ssh": (2222, "TCP")}, "dtv1")
CHIEF = Endpoint("c", "jobs", {"job": "a", "role": "chief"}, "10.244.2.2", {}, "dtv2")
OTHER_JOB = Endpoint("o", "jobs", {"job": "b"}, "10.244.2.3", {}, "dtv3")
MONITOR = Endpoint("m", "monitoring", {"app": "prom"}, "10.244.3.2", {"ssh": (22, "TCP")}, "dtv4")
PODS = [WORKER, CHIEF, OTHER_JOB, MONITOR]
NAMESPACES = {"jobs": {"kubernetes.io/metadata.name": "jobs"},
              "monitoring": {"kubernetes.io/metadata.name": "monitoring", "team": "ops"}}


def policy(spec: dict[str, Any], namespace: str = "jobs") -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": namespace}, "spec": spec}


def isolation(*policies: dict[str, Any]) -> dict[str, Isolation]:
    return isolation_by_pod(policies, PODS, NAMESPACES)


def test_no_policy_isolates_nobody() -> None:
    assert set(isolation().values()) == {Isolation()}


def test_a_policy_isolates_only_the_pods_it_selects_in_its_namespace() -> None:
    result = isolation(policy({"podSelector": {"matchLabels": {"job": "a"}}}))
    assert result["w"] == result["c"] == Isolation(ingress=())  # default-deny ingress
    assert result["o"] == result["m"] == Isolation()


def test_policy_types_default_to_ingress_plus_egress_when_egress_rules_exist() -> None:
    egress = isolation(policy({"podSelector": {}, "egress": [{}]}))
    assert egress["w"] == Isolation(ingress=(), egress=(Allow(everyone=True),))
    explicit = isolation(policy({"podSelector": {}, "policyTypes": ["Egress"]}))
    assert explicit["w"] == Isolation(egress=())


def test_the_jobs_own_policy_admits_the_jobs_pods_on_every_port() -> None:
    job = {"matchLabels": {"job": "a"}}
    result = isolation(policy({"podSelector": job, "ingress": [{"from": [{"podSelector": job}]}]}))
    assert result["w"].ingress == (Allow(ips=frozenset({"10.244.1.2", "10.244.2.2"})),)


def test_namespace_selector_alone_and_with_a_pod_selector() -> None:
    ops = {"matchLabels": {"team": "ops"}}
    alone = isolation(policy({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": ops}]}]}))
    assert alone["w"].ingress == (Allow(ips=frozenset({"10.244.3.2"})),)
    both = isolation(policy({"podSelector": {}, "ingress": [{"from": [
        {"namespaceSelector": ops, "podSelector": {"matchLabels": {"app": "other"}}}]}]}))
    assert both["w"].ingress == ()  # no pod matches both: the rule allows nothing
    every = isolation(policy({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {}}]}]}))
    assert every["w"].ingress == (Allow(ips=frozenset(p.ip for p in PODS)),)


def test_match_expressions() -> None:
    selector = {"matchExpressions": [{"key": "role", "operator": "In", "values": ["chief"]},
                                     {"key": "gpu", "operator": "DoesNotExist"}]}
    result = isolation(policy({"podSelector": {}, "ingress": [{"from": [{"podSelector": selector}]}]}))
    assert result["w"].ingress == (Allow(ips=frozenset({"10.244.2.2"})),)


def test_ports_protocols_ranges_and_named_ports() -> None:
    result = isolation(policy({"podSelector": {"matchLabels": {"role": "worker"}}, "ingress": [{"ports": [
        {"port": "ssh"}, {"port": 5000, "endPort": 5100, "protocol": "UDP"}, {"protocol": "SCTP"},
        {"port": "http"}]}]}))
    # "ssh" is the worker's own 2222; "http" names no port of it and is dropped
    assert result["w"].ingress == (Allow(everyone=True, ports=(
        PortRange("tcp", 2222, 2222), PortRange("udp", 5000, 5100), PortRange("sctp"))),)
    unresolved = isolation(policy({"podSelector": {"matchLabels": {"role": "worker"}},
                                   "ingress": [{"ports": [{"port": "http"}]}]}))
    assert unresolved["w"].ingress == ()  # only a named port that no container has: nothing


def test_egress_named_ports_are_each_destinations_own() -> None:
    result = isolation(policy({"podSelector": {"matchLabels": {"role": "chief"}}, "policyTypes": ["Egress"],
                              "egress": [{"ports": [{"port": "ssh"}]}]}))
    assert result["c"].egress == (Allow(ips=frozenset({"10.244.1.2"}), ports=(PortRange("tcp", 2222, 2222),)),
                                  Allow(ips=frozenset({"10.244.3.2"}), ports=(PortRange("tcp", 22, 22),)))


def test_ip_blocks_with_exceptions_and_the_union_of_policies() -> None:
    block = {"ipBlock": {"cidr": "10.244.0.0/16", "except": ["10.244.2.0/24"]}}
    first = policy({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [block]}]})
    second = policy({"podSelector": {"matchLabels": {"role": "worker"}}, "policyTypes": ["Egress"],
                     "egress": [{"to": [{"podSelector": {"matchLabels": {"job": "b"}}}]}]})
    result = isolation(first, second)
    assert result["w"].egress == (Allow(blocks=(("10.244.0.0/16", ("10.244.2.0/24",)),)),
                                  Allow(ips=frozenset({"10.244.2.3"})))
    assert result["c"].egress == (Allow(blocks=(("10.244.0.0/16", ("10.244.2.0/24",)),)),)


HOSTS = ["10.244.0.1", "10.244.1.1"]


def test_an_unisolated_pod_has_its_table_removed() -> None:
    assert pod_ruleset(Isolation(), host_addresses=HOSTS, node_ip="10.244.1.1") == (
        "table inet networkpolicy\ndelete table inet networkpolicy\n")


def test_the_ruleset_of_an_isolated_pod() -> None:
    text = pod_ruleset(Isolation(
        ingress=(Allow(ips=frozenset({"10.244.2.2", "10.244.1.2"}), ports=(PortRange("tcp", 2222, 2222),)),
                 Allow(blocks=(("10.0.0.0/8", ("10.1.0.0/16",)),), ports=(PortRange("udp", 5000, 5100),
                                                                          PortRange("sctp")))),
        egress=(Allow(everyone=True, ports=(PortRange("udp", 53, 53),)),)),
        host_addresses=HOSTS, node_ip="10.244.1.1")
    assert text.splitlines() == [
        "table inet networkpolicy", "delete table inet networkpolicy", "table inet networkpolicy {",
        "  chain ingress {", "    type filter hook input priority 0; policy drop;", '    iifname "lo" accept',
        "    ct state established,related accept", "    ip saddr { 10.244.0.1, 10.244.1.1 } accept",
        "    ip saddr { 10.244.1.2, 10.244.2.2 } tcp dport 2222 accept",
        "    ip saddr 10.0.0.0/8 ip saddr != { 10.1.0.0/16 } udp dport 5000-5100 accept",
        "    ip saddr 10.0.0.0/8 ip saddr != { 10.1.0.0/16 } meta l4proto sctp accept",
        "  }",
        "  chain egress {", "    type filter hook output priority 0; policy drop;", '    oifname "lo" accept',
        "    ct state established,related accept", "    ip daddr 10.244.1.1 accept",
        "    udp dport 53 accept",
        "  }", "}"]


@pytest.mark.parametrize("pods, elements", [
    ([], False),
    ([WORKER, CHIEF], True),
])
def test_the_bridge_table_ties_each_port_to_its_pods_address(pods: list[Endpoint], elements: bool) -> None:
    text = bridge_ruleset("dtb0123abcd", pods)
    assert text.startswith("table bridge dtb0123abcd\ndelete table bridge dtb0123abcd\n")
    assert "iifname @ports ether type ip iifname . ip saddr != @addresses drop" in text
    assert "iifname @ports ether type arp iifname . arp saddr ip != @addresses drop" in text
    assert ('elements = { "dtv1" . 10.244.1.2, "dtv2" . 10.244.2.2 }' in text) is elements
