"""NetworkPolicy as Kubernetes defines it, and the nft rulesets that enforce it. Pure.

    isolation = isolation_by_pod(policies, endpoints, namespaces)   # uid -> Isolation
    text = pod_ruleset(isolation[uid], host_addresses=..., node_ip=...) # for `nft -f` in the pod's netns
    text = bridge_ruleset(table, endpoints)                             # anti-spoofing on the cluster bridge

Semantics (networking.k8s.io/v1): a pod is isolated for ingress (egress) only when some policy of its
namespace selects it with that policyType (policyTypes defaults to Ingress, plus Egress when the policy has
egress rules); an isolated pod admits only what the union of those policies' rules allows; replies of allowed
connections pass (conntrack); traffic between a pod and its node is always allowed, and a pod always reaches
itself. A peer is a podSelector (pods of the policy's namespace), a namespaceSelector (every pod of the
matching namespaces), both (those pods in those namespaces) or an ipBlock (cidr minus except); a rule without
peers allows every address, without ports every port. Ports: protocol (TCP by default), a number or a named
container port, endPort for a range.

Why rules live in each pod's network namespace (`inet` family) and not on the bridge: the bridge family has
no connection tracking on these kernels (CONFIG_NF_CONNTRACK_BRIDGE is off), so replies could only be let
through by stateless reverse rules. The cluster's bridge table only makes sure a pod sends from its own
address, so nobody passes for a pod a policy admits by changing its IP.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from localcluster._internal.apimachinery.labelselector import as_selector
from localcluster._internal.apimachinery.selectors import LabelSelector

POD_TABLE = "networkpolicy"


@dataclass(frozen=True)
class Endpoint:
    """A running pod as policies see it: where it is and what it is called."""

    uid: str
    namespace: str
    labels: Mapping[str, str]
    ip: str
    ports: Mapping[str, tuple[int, str]] = field(default_factory=dict)  # port name -> (number, protocol)
    interface: str = ""  # its veth on the cluster bridge


@dataclass(frozen=True)
class PortRange:
    protocol: str                 # tcp, udp, sctp
    first: int | None = None      # None: every port of the protocol
    last: int | None = None


@dataclass(frozen=True)
class Allow:
    """Traffic from (ingress) or to (egress) these addresses on these ports. `everyone`: any address;
    no ports: every port and protocol."""

    everyone: bool = False
    ips: frozenset[str] = frozenset()
    blocks: tuple[tuple[str, tuple[str, ...]], ...] = ()   # (cidr, excepted cidrs)
    ports: tuple[PortRange, ...] = ()


@dataclass(frozen=True)
class Isolation:
    """None: not isolated in that direction; otherwise what is allowed (empty: nothing)."""

    ingress: tuple[Allow, ...] | None = None
    egress: tuple[Allow, ...] | None = None


def policy_types(policy: Mapping[str, Any]) -> tuple[str, ...]:
    spec = policy.get("spec") or {}
    given = spec.get("policyTypes")
    if given:
        return tuple(given)
    return ("Ingress", "Egress") if spec.get("egress") else ("Ingress",)


def _peer_pods(peer: Mapping[str, Any], policy_namespace: str, endpoints: Sequence[Endpoint],
               namespaces: Mapping[str, Mapping[str, str]]) -> frozenset[str]:
    pods = as_selector(peer["podSelector"] or {}) if "podSelector" in peer else LabelSelector()
    if "namespaceSelector" in peer:
        chosen = as_selector(peer["namespaceSelector"] or {})
        in_scope = {ns for ns, labels in namespaces.items() if chosen.matches(labels)}
    else:
        in_scope = {policy_namespace}
    return frozenset(e.ip for e in endpoints if e.namespace in in_scope and pods.matches(e.labels))


def _port_ranges(ports: Iterable[Mapping[str, Any]],
                 target: Endpoint | None) -> tuple[PortRange, ...] | None:
    """The rule's ports with named ports resolved on `target` (the pod they name a port of); None when the
    rule lists ports and none resolves (it then allows nothing)."""
    out: list[PortRange] = []
    listed = False
    for port in ports:
        listed = True
        protocol = str(port.get("protocol") or "TCP").lower()
        number = port.get("port")
        if number is None:
            out.append(PortRange(protocol))
        elif isinstance(number, str) and not number.isdigit():
            named = target.ports.get(number) if target is not None else None
            if named is not None and named[1].lower() == protocol:
                out.append(PortRange(protocol, named[0], named[0]))
        else:
            first = int(number)
            out.append(PortRange(protocol, first, int(port.get("endPort") or first)))
    if listed and not out:
        return None
    return tuple(out)


def _has_named_port(rule: Mapping[str, Any]) -> bool:
    return any(isinstance(p.get("port"), str) and not str(p["port"]).isdigit()
               for p in rule.get("ports") or [])


def _in_blocks(ip: str, blocks: Iterable[tuple[str, tuple[str, ...]]]) -> bool:
    address = ipaddress.ip_address(ip)
    for cidr, excepted in blocks:
        if address in ipaddress.ip_network(cidr, strict=False) and not any(
                address in ipaddress.ip_network(e, strict=False) for e in excepted):
            return True
    return False


def _allows(rule: Mapping[str, Any], peers_key: str, policy_namespace: str, subject: Endpoint,
            endpoints: Sequence[Endpoint], namespaces: Mapping[str, Mapping[str, str]]) -> list[Allow]:
    peers = rule.get(peers_key) or []
    ips: set[str] = set()
    blocks: list[tuple[str, tuple[str, ...]]] = []
    for peer in peers:
        if "ipBlock" in peer:
            block = peer["ipBlock"]
            blocks.append((str(block["cidr"]), tuple(str(e) for e in block.get("except") or ())))
        else:
            ips |= _peer_pods(peer, policy_namespace, endpoints, namespaces)
    everyone = not peers
    if peers_key == "to" and _has_named_port(rule):
        # an egress named port is a port of each destination pod: one allow per destination
        out = []
        for dest in endpoints:
            if everyone or dest.ip in ips or _in_blocks(dest.ip, blocks):
                ports = _port_ranges(rule.get("ports") or [], dest)
                if ports is not None:
                    out.append(Allow(ips=frozenset({dest.ip}), ports=ports))
        return out
    ports = _port_ranges(rule.get("ports") or [], subject)
    if ports is None or (not everyone and not ips and not blocks):
        return []
    return [Allow(everyone=everyone, ips=frozenset(ips), blocks=tuple(blocks), ports=ports)]


def isolation_by_pod(policies: Iterable[Mapping[str, Any]], endpoints: Sequence[Endpoint],
                     namespaces: Mapping[str, Mapping[str, str]]) -> dict[str, Isolation]:
    """What each endpoint may receive and send (uid -> Isolation), by every policy that selects it."""
    ingress: dict[str, list[Allow]] = {}
    egress: dict[str, list[Allow]] = {}
    for policy in policies:
        meta, spec = policy.get("metadata") or {}, policy.get("spec") or {}
        namespace = meta.get("namespace", "default")
        selected = as_selector(spec.get("podSelector") or {})
        types = policy_types(policy)
        for pod in endpoints:
            if pod.namespace != namespace or not selected.matches(pod.labels):
                continue
            if "Ingress" in types:
                allows = ingress.setdefault(pod.uid, [])
                for rule in spec.get("ingress") or []:
                    allows += _allows(rule, "from", namespace, pod, endpoints, namespaces)
            if "Egress" in types:
                allows = egress.setdefault(pod.uid, [])
                for rule in spec.get("egress") or []:
                    allows += _allows(rule, "to", namespace, pod, endpoints, namespaces)
    return {pod.uid: Isolation(ingress=tuple(ingress[pod.uid]) if pod.uid in ingress else None,
                               egress=tuple(egress[pod.uid]) if pod.uid in egress else None)
            for pod in endpoints}


def _set(items: Iterable[str]) -> str:
    return "{ " + ", ".join(sorted(items)) + " }"


def _rules(allow: Allow, direction: str) -> list[str]:
    """nft rule lines for one Allow; `direction` is saddr (ingress) or daddr (egress)."""
    if allow.everyone:
        addresses = [""]
    else:
        addresses = [f"ip {direction} {_set(allow.ips)} "] if allow.ips else []
        for cidr, excepted in allow.blocks:
            network = ipaddress.ip_network(cidr, strict=False)
            family = "ip" if network.version == 4 else "ip6"
            text = f"{family} {direction} {network} "
            if excepted:
                others = _set(str(ipaddress.ip_network(e, strict=False)) for e in excepted)
                text += f"{family} {direction} != {others} "
            addresses.append(text)
    ports = [""]
    if allow.ports:
        ports = []
        for p in allow.ports:
            if p.first is None:
                ports.append(f"meta l4proto {p.protocol} ")
            elif p.last is None or p.last == p.first:
                ports.append(f"{p.protocol} dport {p.first} ")
            else:
                ports.append(f"{p.protocol} dport {p.first}-{p.last} ")
    return [f"{a}{p}accept" for a in addresses for p in ports]


def pod_ruleset(isolation: Isolation, *, host_addresses: Iterable[str], node_ip: str) -> str:
    """The `nft -f` text for one pod's network namespace: replaces its table (or removes it when the pod is
    not isolated), in one transaction."""
    lines = [f"table inet {POD_TABLE}", f"delete table inet {POD_TABLE}"]
    if isolation.ingress is None and isolation.egress is None:
        return "\n".join(lines) + "\n"
    lines.append(f"table inet {POD_TABLE} {{")
    if isolation.ingress is not None:
        lines += ["  chain ingress {", "    type filter hook input priority 0; policy drop;",
                  '    iifname "lo" accept', "    ct state established,related accept",
                  # the node (kubelet probes come from the host) is always allowed
                  f"    ip saddr {_set(host_addresses)} accept"]
        lines += [f"    {r}" for allow in isolation.ingress for r in _rules(allow, "saddr")]
        lines.append("  }")
    if isolation.egress is not None:
        lines += ["  chain egress {", "    type filter hook output priority 0; policy drop;",
                  '    oifname "lo" accept', "    ct state established,related accept",
                  f"    ip daddr {node_ip} accept"]
        lines += [f"    {r}" for allow in isolation.egress for r in _rules(allow, "daddr")]
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def bridge_ruleset(table: str, endpoints: Iterable[Endpoint]) -> str:
    """The cluster bridge's table: a pod's port carries IPv4 and ARP only from the pod's own address."""
    ports = [e for e in endpoints if e.interface]
    lines = [f"table bridge {table}", f"delete table bridge {table}", f"table bridge {table} {{",
             "  set ports {", "    type ifname;"]
    if ports:
        lines.append("    elements = " + _set(f'"{e.interface}"' for e in ports))
    lines += ["  }", "  set addresses {", "    type ifname . ipv4_addr;"]
    if ports:
        lines.append("    elements = " + _set(f'"{e.interface}" . {e.ip}' for e in ports))
    lines += ["  }", "  chain prerouting {", "    type filter hook prerouting priority 0; policy accept;",
              "    iifname @ports ether type ip iifname . ip saddr != @addresses drop",
              "    iifname @ports ether type arp iifname . arp saddr ip != @addresses drop",
              "  }", "}"]
    return "\n".join(lines) + "\n"
