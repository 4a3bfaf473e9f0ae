"""The exec shim: runs one command inside a running container, as `kubectl exec` (and `kubectl cp`) do.

Run by the process runtime as `python -I -S nsexec.py SPEC_JSON` (standard library only), it
1. joins the cgroups of the container's PID 1 (so what exec starts counts against the container's limits),
2. joins its namespaces: user (when there is one) first, then IPC, UTS (hostname), network, PID and mount,
3. forks (a PID namespace applies to children only); the child chroots into the container's root
   (/proc/PID/root, opened before the mount namespace changed), goes to the working directory, starts a
   session on the terminal when there is one (tty), takes the container's user, groups and no_new_privs, and
   execs the command with exactly the container's environment,
4. forwards signals to the child and exits with its exit code (128+N for signal N).
Why the command could not start goes to the descriptor `report_fd` (a pipe, left empty when the command
started), so the API server can answer with the kubelet's InternalError instead of an exit code. The child
dies with the shim (PR_SET_PDEATHSIG) and, being in the container's PID namespace, with the container.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import signal
import sys
import termios
from typing import Any

PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
NAMESPACE_ORDER = ("user", "ipc", "uts", "net", "pid", "mnt")

_libc = ctypes.CDLL(None, use_errno=True)


class ExecError(Exception):
    pass


def _check(result: int, what: str) -> None:
    if result != 0:
        raise ExecError(f"{what}: {os.strerror(ctypes.get_errno())}")


def join_cgroups(pid: int) -> None:
    """Every cgroup v1 hierarchy PID belongs to, where it differs from ours (a container's memory cgroup)."""
    def groups(of: str) -> dict[str, str]:
        with open(f"/proc/{of}/cgroup") as f:
            rows = [line.rstrip("\n").split(":", 2) for line in f if line.count(":") >= 2]
        return {controllers: path for _, controllers, path in rows if controllers}
    mine = groups("self")
    for controllers, path in groups(str(pid)).items():
        directory = "/sys/fs/cgroup/" + controllers.removeprefix("name=")
        if mine.get(controllers) == path or not os.path.isdir(directory + path):
            continue
        try:
            with open(os.path.join(directory + path, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        except OSError as e:
            raise ExecError(f"joining the container's {controllers} cgroup {path}: {e.strerror}") from e


def enter(pid: int, namespaces: list[str]) -> None:
    # every descriptor is opened before the first setns: /proc may mean something else afterwards
    fds = [(name, os.open(f"/proc/{pid}/ns/{name}", os.O_RDONLY)) for name in NAMESPACE_ORDER
           if name in namespaces]
    try:
        for name, fd in fds:
            if os.stat(f"/proc/self/ns/{name}").st_ino == os.fstat(fd).st_ino:
                continue  # already there (the host's network in loopback mode)
            _check(_libc.setns(fd, 0), f"setns {name} of PID {pid}")
    finally:
        for _, fd in fds:
            os.close(fd)


def run_child(spec: dict[str, Any], root_fd: int | None, report_fd: int) -> None:
    try:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, *FORWARDED):
            signal.signal(sig, signal.SIG_DFL)
        if root_fd is not None:
            os.fchdir(root_fd)
            os.chroot(".")
            os.close(root_fd)
        workdir = spec.get("workdir") or "/"
        if root_fd is not None or os.path.isdir(workdir):
            os.chdir(workdir)
        if spec.get("tty"):
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        if spec.get("no_new_privs"):
            _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
        user = spec.get("user")
        if user is not None:
            os.setgroups(user["groups"])
            os.setresgid(user["gid"], user["gid"], user["gid"])
            os.setresuid(user["uid"], user["uid"], user["uid"])
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # a change of user clears it
        argv = spec["argv"]
        os.execvpe(argv[0], argv, spec["env"])
    except BaseException as e:
        command = spec["argv"][0]
        if isinstance(e, FileNotFoundError) and "/" not in command:
            reason = f'exec: "{command}": executable file not found in $PATH'
        elif isinstance(e, OSError) and e.strerror:
            reason = f'exec: "{command}": {e.strerror}'
        else:
            reason = str(e)
        os.write(report_fd, reason.encode()[:4000])
    os._exit(127)


def main(raw: str) -> int:
    spec = json.loads(raw)
    report_fd = int(spec["report_fd"])
    os.set_inheritable(report_fd, False)  # closed by a successful exec: an empty report means it started
    pid = int(spec["pid"])
    root_fd = None
    try:
        if spec.get("cgroups"):
            join_cgroups(pid)
        if spec.get("root"):
            root_fd = os.open(f"/proc/{pid}/root", os.O_RDONLY | os.O_DIRECTORY)
        enter(pid, list(spec.get("namespaces") or []))
    except (OSError, ExecError) as e:
        os.write(report_fd, f"entering the container (PID {pid}): {e}".encode())
        return 127
    child = os.fork()
    if child == 0:
        run_child(spec, root_fd, report_fd)
    if root_fd is not None:
        os.close(root_fd)
    os.close(report_fd)
    for sig in FORWARDED:
        signal.signal(sig, lambda signum, _frame: os.kill(child, signum))
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
