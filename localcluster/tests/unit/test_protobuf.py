"""The protobuf request bodies kubectl's typed commands send, decoded (apiserver/protobuf.py with the field
schemas of apiserver/protoschema.py): bodies captured from kubectl 1.37, and hand-encoded ones for the wire
format's corners (packed integers, pointer zeros, fields the schema does not know)."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster._internal.apiserver import protobuf
from localcluster._internal.apiserver.protoschema import MESSAGES

# `kubectl create job j1 --image=busybox -- sleep 5` (kubectl 1.37.1): the Job message inside the envelope
KUBECTL_JOB = bytes.fromhex(
    "0a120a026a3112001a0022002a00320038004200126432620a100a0012001a0022002a00320038004200124e122b0a026a3112"
    "0762757379626f781a05736c6565701a01352a0042006a007200800100880100900100a201001a054e6576657232004200"
    "4a0052005800600068008201008a01009a0100c201001a082000280030003a00")
# `kubectl create poddisruptionbudget p1 --selector=app=x --min-available=50%`
KUBECTL_PDB = bytes.fromhex(
    "0a120a02703112001a0022002a0032003800420012170a09080110001a03353025120a0a080a036170701201781a0a080018"
    "00200028003000")
# `kubectl create priorityclass pc1 --value=1000 --description=hi --preemption-policy=Never --global-default`
KUBECTL_PRIORITY_CLASS = bytes.fromhex(
    "0a130a0370633112001a0022002a0032003800420010e8071801220268692a054e65766572")


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number: int, value: int | bytes | str) -> bytes:
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    data = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(data)) + data


def envelope(kind: str, api_version: str, raw: bytes) -> bytes:
    type_meta = field(1, api_version) + field(2, kind)
    content_type = field(4, "application/vnd.kubernetes.protobuf")
    return protobuf.MAGIC + field(1, type_meta) + field(2, raw) + content_type


def test_kubectls_job_decodes_to_what_its_json_would_say() -> None:
    assert protobuf.decode_message("Job", KUBECTL_JOB) == {
        "metadata": {"name": "j1"},
        "spec": {"template": {"metadata": {}, "spec": {
            "containers": [{"name": "j1", "image": "busybox", "command": ["sleep", "5"], "resources": {}}],
            "restartPolicy": "Never"}}},
        "status": {}}


def test_kubectls_budget_keeps_its_int_or_string_and_its_status_integers() -> None:
    assert protobuf.decode_message("PodDisruptionBudget", KUBECTL_PDB) == {
        "metadata": {"name": "p1"},
        "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "x"}}},
        "status": {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}}


def test_kubectls_priority_class() -> None:
    assert protobuf.decode_message("PriorityClass", KUBECTL_PRIORITY_CLASS) == {
        "metadata": {"name": "pc1"}, "value": 1000, "globalDefault": True, "description": "hi",
        "preemptionPolicy": "Never"}


def test_the_envelope_names_the_kind_and_version() -> None:
    obj = protobuf.decode_object(envelope("PriorityClass", "scheduling.k8s.io/v1", KUBECTL_PRIORITY_CLASS))
    assert obj is not None
    assert (obj["kind"], obj["apiVersion"], obj["value"]) == ("PriorityClass", "scheduling.k8s.io/v1", 1000)
    assert protobuf.decode_object(envelope("Deployment", "apps/v1", b"")) is None


def test_a_pointer_zero_is_kept_and_a_plain_zero_dropped() -> None:
    spec = field(7, 0) + field(10, 0)                    # backoffLimit: 0, suspend: false (both pointers)
    status = field(4, 0) + field(9, 0)                   # active: 0 (plain), ready: 0 (pointer)
    job = protobuf.decode_message("Job", field(2, spec) + field(3, status))
    assert job == {"spec": {"backoffLimit": 0, "suspend": False}, "status": {"ready": 0}}


def test_exit_codes_decode_packed_or_not_and_negative_integers_too() -> None:
    packed = field(2, "NotIn") + field(3, varint(0) + varint(42))
    unpacked = field(2, "In") + field(3, 1) + field(3, 2)
    assert protobuf.decode_message("PodFailurePolicyOnExitCodesRequirement", packed) == {
        "operator": "NotIn", "values": [0, 42]}
    assert protobuf.decode_message("PodFailurePolicyOnExitCodesRequirement", unpacked) == {
        "operator": "In", "values": [1, 2]}
    assert protobuf.decode_message("ContainerStateTerminated", field(1, -1)) == {"exitCode": -1}


def test_embedded_structs_are_inlined_as_in_json() -> None:
    selector = field(1, field(1, "creds")) + field(2, "token")
    assert protobuf.decode_message("SecretKeySelector", selector) == {"name": "creds", "key": "token"}


def test_an_unknown_field_with_a_value_is_refused_not_dropped() -> None:
    with pytest.raises(protobuf.ProtobufError, match="field 99 of PodSpec is not one the local cluster"):
        protobuf.decode_message("PodSpec", field(99, "something"))
    assert protobuf.decode_message("PodSpec", field(99, "") + field(98, 0) + field(97, field(1, 0))) == {}


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_every_message_names_only_known_types(name: str) -> None:
    scalars = {"string", "int", "bool", "bytes", "double", "quantity", "time", "intorstring"}
    for f in MESSAGES[name].values():
        kind: Any = f.kind.removeprefix("map:")
        assert kind in scalars or kind in MESSAGES, (name, f)
