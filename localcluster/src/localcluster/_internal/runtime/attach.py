"""Which nodes each PersistentVolumeClaim's volume is attached to, as the attach/detach controller keeps it.

A volume whose access modes allow neither ReadWriteMany nor ReadOnlyMany (ReadWriteOnce, ReadWriteOncePod)
attaches to one node at a time: a pod on another node waits in ContainerCreating, and the controller reports
`Multi-Attach error for volume "pvc-<uid>" Volume is already used by pod(s) NAME` (FailedAttachVolume) until
the pods using it there end. Pods on the same node share it. The volume's name is the claim's bound volume
(spec.volumeName) or, as dynamic provisioning names it, `pvc-<claim uid>`. Pure bookkeeping.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MULTI_NODE_MODES = ("ReadWriteMany", "ReadOnlyMany")


def claim_names(pod: Mapping[str, Any]) -> list[str]:
    return [v["persistentVolumeClaim"]["claimName"] for v in (pod.get("spec") or {}).get("volumes") or []
            if "persistentVolumeClaim" in v]


def volume_name(claim: Mapping[str, Any]) -> str:
    bound = (claim.get("spec") or {}).get("volumeName")
    return str(bound) if bound else f"pvc-{claim['metadata'].get('uid', '')}"


def multi_attach_allowed(claim: Mapping[str, Any]) -> bool:
    """IsMultiAttachAllowed: no access modes (unknown), or ReadWriteMany/ReadOnlyMany among them."""
    modes = (claim.get("spec") or {}).get("accessModes") or []
    return not modes or any(mode in MULTI_NODE_MODES for mode in modes)


@dataclass(frozen=True)
class User:
    uid: str
    name: str
    node: str


class Attachments:
    """Claims in use, by (namespace, claim name), with the pods using each and their nodes."""

    def __init__(self) -> None:
        self._users: dict[tuple[str, str], dict[str, User]] = {}

    def attach(self, pod: Mapping[str, Any], claims: Mapping[str, Mapping[str, Any]]) -> str | None:
        """Attach the pod's claims (`claims`: those that exist, by name) to its node; or, when one of them is
        a single-node volume in use on another node, attach nothing and return the Multi-Attach message."""
        meta, node = pod["metadata"], str(pod["spec"]["nodeName"])
        namespace = str(meta.get("namespace", "default"))
        for name, claim in sorted(claims.items()):
            if multi_attach_allowed(claim):
                continue
            users = self._users.get((namespace, name), {}).values()
            elsewhere = sorted(u.name for u in users if u.node != node and u.uid != meta["uid"])
            if elsewhere:
                return (f'Multi-Attach error for volume "{volume_name(claim)}" '
                        f'Volume is already used by pod(s) {", ".join(elsewhere)}')
        user = User(str(meta["uid"]), str(meta["name"]), node)
        for name in claims:
            self._users.setdefault((namespace, name), {})[user.uid] = user
        return None

    def detach(self, uid: str) -> None:
        """The pod ended or is gone: its claims stay attached only for the other pods using them."""
        for key in list(self._users):
            self._users[key].pop(uid, None)
            if not self._users[key]:
                del self._users[key]
