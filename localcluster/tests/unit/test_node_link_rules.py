"""Node links' pure rules: what `--node-link` accepts, what it refuses and why, the tc commands it makes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from localcluster import ImageMap, InvalidInput
from localcluster._internal.cluster.spec import ClusterSpec, runtime_options
from localcluster._internal.runtime.imagepulls import PullSettings
from localcluster._internal.runtime.netns import ClusterNetwork, node_bridge_name, uplink_names
from localcluster._internal.runtime.nodelink import NodeLink, parse_node_link, shaping_batch


@pytest.mark.parametrize(("text", "rate", "delay", "shown"), [
    ("1gbit", 10**9, 0.0, "1gbit"),
    ("500mbit", 5 * 10**8, 0.0, "500mbit"),
    ("2.5Gbit", 25 * 10**8, 0.0, "2500mbit"),
    (" 100mbit , 0.2ms ", 10**8, 0.0002, "100mbit,0.2ms"),
    ("1gbit,50us", 10**9, 0.00005, "1gbit,0.05ms"),
])
def test_a_node_link_reads_like_tc(text: str, rate: int, delay: float, shown: str) -> None:
    link = parse_node_link(text)
    assert (link.rate_bits, str(link)) == (rate, shown)
    assert link.delay_s == pytest.approx(delay)


@pytest.mark.parametrize(("text", "says"), [
    ("fast", "expected RATE[,DELAY] like 1gbit or 1gbit,0.2ms"),
    ("1gbps", "expected RATE[,DELAY]"),       # tc's "bps" is bytes per second: refused rather than guessed
    ("100", "expected RATE[,DELAY]"),
    ("100kbit", "the rate must be between 1mbit and 100gbit"),
    ("1gbit,soon", "the delay 'soon' should read like 0.2ms or 50us"),
    ("1gbit,2s", "a delay of more than 1 s is not a node link"),
])
def test_a_bad_node_link_is_refused_naming_the_flag_and_the_form(text: str, says: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_node_link(text)
    assert str(refused.value).startswith(f"--node-link {text!r}: ")
    assert says in str(refused.value)


def test_each_uplink_end_gets_one_htb_class_at_the_rate_and_a_bounded_queue() -> None:
    assert shaping_batch("dtvab12cd34u01", NodeLink(rate_bits=10**9)).splitlines() == [
        "qdisc replace dev dtvab12cd34u01 root handle 1: htb default 1",
        "class replace dev dtvab12cd34u01 parent 1: classid 1:1 htb rate 1000000000bit ceil 1000000000bit "
        "burst 125000b cburst 125000b quantum 60000",
        "qdisc replace dev dtvab12cd34u01 parent 1:1 handle 10: bfifo limit 1250000",
    ]
    slow = shaping_batch("x", NodeLink(rate_bits=10**7, delay_s=0.0002)).splitlines()
    assert "burst 65536b" in slow[1]  # never less than one 64 KiB GSO packet
    assert slow[2] == "qdisc replace dev x parent 1:1 handle 10: netem delay 0.2ms limit 1000"


def test_names_fit_an_interface_name_and_never_collide_with_a_pods_veth() -> None:
    bridge = node_bridge_name("ab12cd34", 254)
    near, far = uplink_names("ab12cd34", 254)
    assert (bridge, near, far) == ("dtbab12cd34nfe", "dtvab12cd34ufe", "dtvab12cd34sfe")
    assert all(len(name) <= 15 for name in (bridge, near, far))
    assert not {near[11], far[11]} & set("0123456789abcdef")  # a pod's veth: dtv<id> and 4 hex digits


def test_a_node_link_needs_the_process_runtime_and_network_namespaces() -> None:
    with pytest.raises(InvalidInput, match="node links need the process runtime"):
        runtime_options(ClusterSpec(runtime="sim", node_link="1gbit"))
    assert runtime_options(ClusterSpec(runtime="process", node_link="1gbit",
                                       runtime_options={"network": "netns"})) == {
        "network": "netns", "node_link": "1gbit", "images": ImageMap(), "pulls": PullSettings()}
    with pytest.raises(InvalidInput, match="node links need the netns network mode"):
        ClusterNetwork(mode="loopback", node_link=parse_node_link("1gbit"))



def test_one_nodes_own_link_overrides_every_nodes_link() -> None:
    with pytest.raises(InvalidInput, match="node links need the process runtime"):
        runtime_options(ClusterSpec(runtime="sim", node_links={"node-2": "84mbit"}))
    with pytest.raises(InvalidInput, match="node links need the netns network mode"):
        ClusterNetwork(mode="loopback", node_links={"node-2": parse_node_link("84mbit")})
    network = ClusterNetwork(mode="netns", node_link=parse_node_link("1gbit"),
                             node_links={"node-2": parse_node_link("84mbit")})
    network.nodes.update({"node-1": 1, "node-2": 2})
    assert (network._link_of(1), network._link_of(2)) == (NodeLink(10**9), NodeLink(84 * 10**6))
    alone = ClusterNetwork(mode="netns", node_links={"node-2": parse_node_link("84mbit")})
    alone.nodes.update({"node-1": 1, "node-2": 2})
    assert (alone._link_of(1), alone._link_of(2)) == (None, NodeLink(84 * 10**6))


@pytest.mark.parametrize(("args", "says"), [
    (["--node-link", "fast"], "error: --node-link 'fast': expected RATE[,DELAY]"),
    (["--node-link", "1gbit"], "error: --node-link 1gbit: node links need --runtime process"),
])
def test_localcluster_up_refuses_a_bad_node_link_before_starting_anything(
        tmp_path: Path, args: list[str], says: str) -> None:
    done = subprocess.run([str(Path(sys.executable).parent / "localcluster"), "up", "--dir",
                           str(tmp_path / "cluster"), *args], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(says), done.stderr
    assert not (tmp_path / "cluster").exists()
