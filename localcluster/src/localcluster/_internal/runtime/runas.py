"""Who a container runs as, by the kubelet's rules, and which host paths a non-root container must be shown.

The user: the container's `securityContext.runAsUser`, else the pod's, else the image's `USER`, else root;
the group likewise (runAsGroup, then the image's `USER u:g` when the user is the image's, then the user's
primary group in the image's /etc/passwd, else 0); supplementary groups: the pod's `supplementalGroups` and
`fsGroup`. A container with
`runAsNonRoot: true` that would run as uid 0, or whose image names its user by a name the kubelet cannot
check, does not start: its state is `CreateContainerConfigError` with the kubelet's own message.

There is no image filesystem here: a container's root is the host's `/` under a private overlay, the
virtual environment the cluster runs in standing in for the image's installed packages. A container's files
belong to it, however the host's directories above them are permissioned (a checkout under a 0700 home). So
for a non-root container the runtime lists the directories that stand in for the image's contents (the
interpreter, the virtual environment, the source directories its editable installs point to, the mapped
images' build contexts); the shim (sandbox.py) shows each one at its own path
inside the container, over a private tmpfs that replaces the first directory above it the user could not
enter. The host is never changed, and siblings of those directories stay hidden, as in a real container.
"""

from __future__ import annotations

import os
import pwd
import sys
import sysconfig
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localcluster._internal.runtime.images import ImageUser


class ContainerConfigError(Exception):
    """The container cannot be configured as asked; the kubelet reports CreateContainerConfigError."""


@dataclass(frozen=True)
class RunAs:
    uid: int
    gid: int
    groups: tuple[int, ...] = ()
    no_new_privs: bool = False
    home: str = "/root"

    @property
    def is_root(self) -> bool:
        return self.uid == 0


def _context(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("securityContext") or {}


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def _home(uid: int, users: Sequence[ImageUser] = ()) -> str:
    """HOME as the kubelet sets it: the user's home in the image's /etc/passwd (the accounts its RUN steps
    created, then the host's, which stands in for the rest of the image), else /."""
    for user in users:
        if user.uid == uid:
            return user.home
    try:
        return pwd.getpwuid(uid).pw_dir or "/"
    except KeyError:
        return "/"


def _image_user(user: str) -> tuple[int | None, int | None, str | None]:
    """(uid, gid, name) from a Dockerfile USER: `65532`, `65532:65532`, `nobody`, `app:app`."""
    name, _, group = user.partition(":")
    uid = int(name) if name.isdigit() else None
    gid = int(group) if group.isdigit() else None
    return uid, gid, (name if name and uid is None else None)


def run_as(pod: Mapping[str, Any], container: Mapping[str, Any], *, image_user: str = "",
           users: Sequence[ImageUser] = ()) -> RunAs:
    """The user, groups and no_new_privs of one container. Raises ContainerConfigError as the kubelet does
    for a runAsNonRoot container that would run as root."""
    pod_ctx, ctr_ctx = _context(pod.get("spec") or {}), _context(container)
    image_uid, image_gid, image_name = _image_user(image_user)
    uid = _first(ctr_ctx.get("runAsUser"), pod_ctx.get("runAsUser"))
    non_root = _first(ctr_ctx.get("runAsNonRoot"), pod_ctx.get("runAsNonRoot"))
    meta = pod.get("metadata") or {}
    where = f"(pod: \"{meta.get('name')}_{meta.get('namespace')}({meta.get('uid')})\", " \
            f"container: {container.get('name')})"
    if uid is None and image_name is not None:
        if non_root:
            raise ContainerConfigError(f"container has runAsNonRoot and image has non-numeric user "
                                       f"({image_name}), cannot verify user is non-root {where}")
        own = next((u for u in users if u.name == image_name), None)
        try:
            entry = (own.uid, own.gid) if own else pwd.getpwnam(image_name)[2:4]
            found = (int(entry[0]), int(entry[1]))
        except KeyError as e:
            raise ContainerConfigError(f"unable to find user {image_name}: no matching entries in passwd "
                                       "file") from e
        uid, image_gid = found[0], image_gid if image_gid is not None else found[1]
    from_image = uid is None
    if uid is None:
        uid = image_uid if image_uid is not None else 0
    if non_root and uid == 0:
        raise ContainerConfigError(f"container has runAsNonRoot and image will run as root {where}")
    # the image's group goes with the image's user only: a runAsUser from the pod takes its group from the
    # image's /etc/passwd, else 0 (containerd's WithUserID, CRI-O likewise), as an OpenShift UID does
    gid = _first(ctr_ctx.get("runAsGroup"), pod_ctx.get("runAsGroup"), image_gid if from_image else None)
    if gid is None:
        own = next((u for u in users if u.uid == int(uid)), None)
        try:
            gid = own.gid if own else pwd.getpwuid(int(uid)).pw_gid
        except KeyError:
            gid = 0
    groups = [int(g) for g in pod_ctx.get("supplementalGroups") or []]
    if pod_ctx.get("fsGroup") is not None:
        groups.append(int(pod_ctx["fsGroup"]))
    no_new_privs = ctr_ctx.get("allowPrivilegeEscalation") is False
    return RunAs(uid=int(uid), gid=int(gid), groups=tuple(dict.fromkeys(groups)), no_new_privs=no_new_privs,
                 home=_home(int(uid), users))


def environment_directories() -> list[str]:
    """The directories the environment's `.pth` files add to the import path (editable installs: a
    project's `src/`), which its packages are loaded from as much as from site-packages."""
    found: list[str] = []
    for site_dir in dict.fromkeys(sysconfig.get_path(kind) for kind in ("purelib", "platlib")):
        try:
            names = sorted(n for n in os.listdir(site_dir) if n.endswith(".pth"))
        except OSError:
            continue
        for name in names:
            try:
                lines = Path(site_dir, name).read_text().splitlines()
            except (OSError, UnicodeDecodeError):
                continue
            # as site.addpackage reads them: comments and `import` lines are not directories
            found += [os.path.join(site_dir, line.rstrip()) for line in lines
                      if line.strip() and not line.startswith(("#", "import ", "import\t"))]
    return [d for d in found if os.path.isdir(d)]


def image_directories(extra: Iterable[str] = ()) -> list[str]:
    """The host directories that stand in for an image's contents: the interpreter's installation, the
    virtual environment, the directories its editable installs add, and `extra` (the venv pods run and the
    mapped images' build contexts), each resolved through symlinks; nested ones are dropped."""
    candidates = [sys.base_prefix, sys.prefix, *environment_directories(), *extra]
    resolved = sorted({os.path.realpath(p) for p in candidates if p and os.path.isdir(p)})
    return [p for p in resolved if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in resolved)]
