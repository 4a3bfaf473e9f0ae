"""The events a kubelet records about containers, in its own words (pkg/kubelet/kuberuntime, prober); the
runtimes send them through RuntimeHost.record_event. Each is (reason, message, warning). The image manager's
(Pulling, Pulled, BackOff, InspectFailed...) are runtime/imagepulls.py's."""

from __future__ import annotations

from localcluster._internal.errors import InvalidInput
from localcluster._internal.runtime.podenv import NotReadyYet
from localcluster._internal.runtime.runas import ContainerConfigError

KubeletEvent = tuple[str, str, bool]


def created(container: str) -> KubeletEvent:
    return "Created", f"Created container: {container}", False


def started(container: str) -> KubeletEvent:
    return "Started", f"Started container {container}", False


def stopping(container: str) -> KubeletEvent:
    return "Killing", f"Stopping container {container}", False


def liveness_kill(container: str) -> KubeletEvent:
    return "Killing", f"Container {container} failed liveness probe, will be restarted", False


def unhealthy(message: str) -> KubeletEvent:
    return "Unhealthy", message, True


def back_off(container: str, pod: str, namespace: str, uid: str) -> KubeletEvent:
    message = f"Back-off restarting failed container {container} in pod {pod}_{namespace}({uid})"
    return "BackOff", message, True


def failed(error: str) -> KubeletEvent:
    return "Failed", f"Error: {error}", True


def setup_failure(error: Exception, image: str) -> tuple[str, list[KubeletEvent]]:
    """A container that could not be set up: its waiting reason and the kubelet's events."""
    if isinstance(error, (NotReadyYet, ContainerConfigError)):
        return "CreateContainerConfigError", [failed(str(error))]
    if isinstance(error, InvalidInput):  # the image maps to a Dockerfile that cannot be used
        return "ErrImagePull", [("Failed", f'Failed to pull image "{image}": {error}', True),
                                failed("ErrImagePull")]
    return "CreateContainerError", [failed(str(error))]
