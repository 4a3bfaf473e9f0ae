"""The remote-command and port-forward protocol rules: options from kubectl's query, negotiation, the Status
kubectl turns into `command terminated with exit code N`, terminal sizes, WebSocket port-forward ports."""

from __future__ import annotations

import json

import pytest
from multidict import MultiDict

from localcluster._internal.apimachinery import status as st
from localcluster._internal.streams import channels as ch


def query(**values: str | list[str]) -> MultiDict[str]:
    out: MultiDict[str] = MultiDict()
    for key, value in values.items():
        for item in value if isinstance(value, list) else [value]:
            out.add(key, item)
    return out


def test_exec_options_are_read_as_kubectl_sends_them() -> None:
    options = ch.StreamOptions.parse(query(command=["sh", "-c", "exit 3"], container="main", stdin="true",
                                           stdout="true", stderr="true"), attach=False)
    assert options == ch.StreamOptions(("sh", "-c", "exit 3"), "main", True, True, True, False)
    assert options.expected_streams() == {ch.ERROR, ch.STDIN, ch.STDOUT, ch.STDERR}


def test_a_terminal_has_one_output_and_a_resize_stream() -> None:
    options = ch.StreamOptions.parse(query(command="bash", stdin="true", stdout="true", stderr="true",
                                           tty="true"), attach=False)
    assert not options.stderr
    assert options.expected_streams() == {ch.ERROR, ch.STDIN, ch.STDOUT, ch.RESIZE}


@pytest.mark.parametrize(("values", "attach", "message"), [
    ({"command": "ls"}, False, "you must specify at least 1 of stdin, stdout, stderr"),
    ({"stdout": "true"}, False, "you must specify at least one command for the container"),
])
def test_options_the_server_refuses(values: dict[str, str], attach: bool, message: str) -> None:
    with pytest.raises(st.ApiStatus) as refused:
        ch.StreamOptions.parse(query(**values), attach=attach)
    assert (refused.value.code, refused.value.message) == (400, message)


def test_attach_needs_no_command() -> None:
    assert ch.StreamOptions.parse(query(stdout="true"), attach=True).command == ()


def test_the_clients_order_of_protocols_wins() -> None:
    assert ch.negotiate(["v4.channel.k8s.io, v5.channel.k8s.io"], ch.EXEC_WEBSOCKET_PROTOCOLS) == ch.V4
    assert ch.negotiate([ch.V5, ch.V4, ch.V3, ch.V2, ch.V1], ch.EXEC_SPDY_PROTOCOLS) == ch.V5
    assert ch.negotiate(["channel.k8s.io"], ch.EXEC_WEBSOCKET_PROTOCOLS) is None


def test_exit_codes_travel_as_kubectl_decodes_them() -> None:
    assert ch.exit_status(0, ("true",)) == {"metadata": {}, "status": "Success"}
    failure = json.loads(ch.status_bytes(ch.exit_status(3, ("sh", "-c", "exit 3"))))
    assert failure["kind"] == "Status" and failure["status"] == "Failure"
    assert failure["reason"] == "NonZeroExitCode"
    assert failure["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]
    assert "[sh -c exit 3], exit code 3" in failure["message"]


def test_a_command_that_cannot_start_is_an_internal_error() -> None:
    status = ch.internal_error('exec: "nosuch": executable file not found in $PATH')
    assert status["reason"] == "InternalError" and status["code"] == 500
    assert status["message"] == ('Internal error occurred: error executing command in container: exec: '
                                 '"nosuch": executable file not found in $PATH')


def test_terminal_sizes_back_to_back_or_split_across_reads() -> None:
    sizes, rest = ch.parse_resize(b'{"Width":80,"Height":24}\n{"Width":100,"Height":30}{"Wid')
    assert sizes == [(80, 24), (100, 30)]
    assert ch.parse_resize(rest + b'th":120,"Height":40}\n') == ([(120, 40)], b"")


def test_websocket_port_forward_ports() -> None:
    assert ch.parse_ports(["8080,8081", "9090"]) == [8080, 8081, 9090]
    assert ch.port_prefix(2222) == b"\xae\x08"
    for bad, message in (([], 'query parameter "port" is required'), (["0"], 'unable to parse "0" as a port'),
                         (["x"], 'unable to parse "x" as a port')):
        with pytest.raises(st.ApiStatus, match=message):
            ch.parse_ports(bad)
