"""The container shim: builds one container's private world and runs its command as PID 1 of it.

Run by the process runtime as `python -I -S sandbox.py SPEC.json` (standard library only), it
1. joins the pod's namespaces (those of its pause process: network, UTS (hostname), IPC, maybe user),
2. unshares a mount namespace (private propagation: nothing it mounts reaches the host) and a PID namespace,
3. mounts the container's root: an overlay whose lower layer is the host's / and whose upper layer is a tmpfs,
   so the container writes where it likes (like a container's writable layer) and the host never changes;
   /dev, /sys and the host's other top-level mounts are bound in, /proc and /dev/shm are fresh (a 64 MiB
   tmpfs, unless a pod volume is mounted there),
4. copies the image's files (runtime/images.py) to their destinations, bind-mounts the volumes at their
   mountPath, the managed /etc/hosts and /etc/hostname; mount points are created inside the overlay only,
5. forks the command: PID 1 of the new PID namespace, in the container's cgroups (its limits, runtime/
   cgroups.py), chrooted, as the container's user (runtime/runas.py; a non-root user is shown the
   directories that stand in for its image, see `reveal`), in workingDir, with exactly the pod's env.
It prints `started PID` (the command's host PID) or `error MESSAGE` on stdout, forwards signals to the
command, and exits with the command's exit code (128+N for signal N, as Kubernetes reports it). When this
shim dies, the command gets SIGKILL (PR_SET_PDEATHSIG), and with PID 1 gone the kernel kills every process
of the container: nothing can outlive its container.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import sys
from typing import Any

CLONE_NEWNS, CLONE_NEWPID = 0x00020000, 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH, PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 2, 1, 38
# /proc, /sys and /run are the container's own (fresh); /mnt, /media stay empty
SKIPPED_TOP_MOUNTS = ("/proc", "/sys", "/run", "/mnt", "/media")
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)

_libc = ctypes.CDLL(None, use_errno=True)


class SandboxError(Exception):
    pass


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise SandboxError(f"{what}: {os.strerror(err)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def enc(s: str | None) -> bytes | None:
        return None if s is None else s.encode()
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount {source} on {target}")


def join_namespaces(paths: list[str]) -> None:
    for path in paths:  # the user namespace, when there is one, comes first
        fd = os.open(path, os.O_RDONLY)
        try:
            _check(_libc.setns(fd, 0), f"setns {path}")
        finally:
            os.close(fd)


def mount_points() -> list[tuple[str, bool]]:
    """(mount point, whether its parent is the root mount), from /proc/self/mountinfo."""
    rows = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            rows.append((fields[0], fields[1], fields[4].encode().decode("unicode_escape")))
    root_ids = {mid for mid, _, point in rows if point == "/"}
    return sorted({(point, parent in root_ids) for _, parent, point in rows if point != "/"})


def _skipped(point: str) -> bool:
    return any(point == s or point.startswith(s + "/") for s in SKIPPED_TOP_MOUNTS)


def _under(path: str, prefixes: set[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in prefixes)


def resolve(root: str, path: str, make: str | None, host_binds: set[str]) -> str:
    """`path` inside `root` with symlinks resolved against `root` (an absolute link must not escape to the
    host), creating what is missing: directories, and a file at the end when make == "file". Refuses to
    create anything inside a bound host directory (`host_binds`, container paths), which would change the
    host."""
    parts = [p for p in path.split("/") if p and p != "."]
    current = "/"
    links = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            current = os.path.dirname(current)
            continue
        host = root + os.path.join(current, part)
        if os.path.islink(host):
            links += 1
            if links > 40:
                raise SandboxError(f"too many symbolic links under {path}")
            target = os.readlink(host)
            if target.startswith("/"):
                current = "/"
            parts = [p for p in target.split("/") if p and p != "."] + parts
            continue
        if not os.path.lexists(host) and (parts or make):
            if _under(current, host_binds):
                raise SandboxError(f"{path}: creating {os.path.join(current, part)} would change the host's "
                                   f"{current}, which the pod shares with it; choose another mountPath")
            if parts or make == "dir":
                os.mkdir(host, 0o755)
            else:
                with open(host, "a"):
                    pass
        current = os.path.join(current, part)
    return root + current


def overlay_root(scratch: str, points: list[tuple[str, bool]]) -> tuple[str, set[str]]:
    """As root: one overlay over the whole of / (its submounts bound in afterwards)."""
    root = os.path.join(scratch, "root")
    mount("overlay", root, "overlay", 0, f"lowerdir=/,upperdir={scratch}/upper,workdir={scratch}/work")
    binds: set[str] = set()
    tops = [p for p, top in points if top and not _skipped(p) and p != "/dev/shm"]
    for point in tops:
        target = resolve(root, point, "dir" if os.path.isdir(point) else "file", binds)
        mount(point, target, None, MS_BIND | MS_REC)
        binds.add(point)
    return root, binds


def per_directory_root(scratch: str, points: list[tuple[str, bool]]) -> tuple[str, set[str]]:
    """In a user namespace (no root): an overlay of / is refused (its submounts are locked), so the root
    is a tmpfs holding one overlay per top-level directory; a directory with mounts under it is bound."""
    root = os.path.join(scratch, "root")
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    binds: set[str] = set()
    busy = {p for p, _ in points}
    for entry in sorted(os.listdir("/")):
        source, target = "/" + entry, root + "/" + entry
        if os.path.islink(source):
            os.symlink(os.readlink(source), target)
        elif not os.path.isdir(source):
            with open(target, "a"):
                pass
            mount(source, target, None, MS_BIND)
            binds.add(source)
        else:
            os.mkdir(target, 0o755)
            binds.add(source)
            if _skipped(source):
                continue  # /proc and /sys are mounted afresh; /mnt and /media stay empty
            if source in busy or any(p.startswith(source + "/") for p in busy):
                mount(source, target, None, MS_BIND | MS_REC)
                continue
            binds.discard(source)
            upper, work = f"{scratch}/upper/{entry}", f"{scratch}/work/{entry}"
            os.makedirs(upper)
            os.makedirs(work)
            mount("overlay", target, "overlay", 0,
                  f"userxattr,lowerdir={source},upperdir={upper},workdir={work}")
    return root, binds


def reveal(root: str, paths: list[str], binds: set[str]) -> None:
    """Show a non-root container the host directories that stand in for its image's contents (runtime/
    runas.py), however the host's directories above them are permissioned: the first directory above one
    that others may not enter is replaced, in this mount namespace only, by a tmpfs holding just the
    revealed directories, each bound at its own path. The host does not change; siblings stay hidden."""
    closed: dict[str, str] = {}
    for path in paths:
        current = ""
        for part in [p for p in path.split("/") if p][:-1]:
            current += "/" + part
            try:
                mode = os.stat(root + current).st_mode
            except OSError:
                break
            if not mode & 0o001:
                closed[path] = current
                break
    groups: dict[str, list[str]] = {}
    for path, top in closed.items():
        outer = min((t for t in closed.values() if top == t or top.startswith(t + "/")), key=len)
        groups.setdefault(outer, []).append(path)
    for top, inner in sorted(groups.items()):
        # held open first: with root "" (a host process), the tmpfs would hide the directories themselves
        held = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in sorted(inner)}
        mount("tmpfs", root + top, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
        binds.discard(top)
        for path, fd in held.items():
            os.makedirs(root + path, 0o755, exist_ok=True)
            mount(f"/proc/self/fd/{fd}", root + path, None, MS_BIND | MS_REC)
            os.close(fd)
            binds.add(path)


def build_root(spec: dict[str, Any]) -> str:
    scratch = spec["scratch"]
    points = mount_points()  # before our own mounts
    mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    for sub in ("upper", "work", "root"):
        os.mkdir(os.path.join(scratch, sub), 0o755)
    root, binds = per_directory_root(scratch, points) if spec.get("user_namespace") \
        else overlay_root(scratch, points)
    for point in binds:  # a bound host mount that holds our scratch dir also carried our own mounts in
        if scratch.startswith(point + "/") and os.path.ismount(root + scratch):
            _libc.umount2((root + scratch).encode(), MNT_DETACH)
    if spec.get("fresh_sysfs"):
        mount("sysfs", root + "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY)
        if os.path.ismount("/sys/fs/cgroup"):
            mount("/sys/fs/cgroup", root + "/sys/fs/cgroup", None, MS_BIND | MS_REC)
    else:
        mount("/sys", root + "/sys", None, MS_BIND | MS_REC)
    binds.add("/sys")
    # /run is the container's own, empty and writable, as in an image: a host's /run often holds mounts
    # (/run/user/UID, /run/netns) that would make it the host's, and /var/run/secrets (-> /run) must be made
    if os.path.isdir(root + "/run"):
        mount("tmpfs", root + "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
        binds.discard("/run")
    reveal(root, spec.get("reveal") or [], binds)
    shm = spec.get("shm_bytes", 64 << 20)  # None: a pod volume is mounted at /dev/shm instead
    if shm is not None and os.path.isdir(root + "/dev/shm"):
        mount("shm", root + "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={shm}")
    for source, dest, mode in spec.get("image_files", []):
        if os.path.isdir(source):
            target = resolve(root, dest, "dir", binds)
            shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
        else:
            parent = resolve(root, os.path.dirname(dest) or "/", "dir", binds)
            target = os.path.join(parent, os.path.basename(dest))
            shutil.copy2(source, target)
        if mode is not None:
            os.chmod(target, mode)
    mounts = spec.get("mounts", [])
    covered = held_under(root, spec.get("image_dirs") or [], [dest for _, dest, _ in mounts])
    for source, dest, read_only in mounts:
        target = resolve(root, dest, "dir" if os.path.isdir(source) else "file", binds)
        mount(source, target, None, MS_BIND | MS_REC)
        if read_only:
            mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_REC)
    for path, fd in covered.items():
        # In an image the interpreter and the venv sit in /usr or /opt, where no pod volume goes; here they
        # may sit under /tmp (a clone in mktemp -d), which a pod's emptyDir at /tmp would hide: bound back on
        # top of the volume (a directory of that path is made in it to hold the bind).
        os.makedirs(root + path, 0o755, exist_ok=True)
        mount(f"/proc/self/fd/{fd}", root + path, None, MS_BIND | MS_REC)
        os.close(fd)
    resolve(root, spec.get("workdir") or "/", "dir", binds)
    return root


def held_under(root: str, image_dirs: list[str], dests: list[str]) -> dict[str, int]:
    """The image stand-in directories that a pod volume mounted at one of `dests` (a directory above them)
    would hide, each held open (O_PATH) before the volume covers it."""
    under = [path for path in image_dirs
             if any(path.startswith(os.path.normpath(dest).rstrip("/") + "/") for dest in dests)]
    return {path: os.open(root + path, os.O_PATH | os.O_DIRECTORY) for path in under
            if os.path.isdir(root + path)}


def run_child(spec: dict[str, Any], root: str | None, log_fd: int, report_fd: int) -> None:
    """In the forked child: become the container's command or report why not."""
    try:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, *FORWARDED):
            signal.signal(sig, signal.SIG_DFL)
        for cgroup in spec.get("cgroups") or []:  # its memory and CPU limits (runtime/cgroups.py)
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as procs:
                procs.write("0")  # cgroup v1: 0 is the writing process itself
        if root is not None:
            mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            os.chroot(root)
        if spec.get("no_new_privs"):  # allowPrivilegeEscalation: false
            _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
        user = spec.get("user")
        if user is not None:  # runAsUser / runAsGroup / supplementalGroups: the kernel drops every capability
            os.setgroups(user["groups"])
            os.setresgid(user["gid"], user["gid"], user["gid"])
            os.setresuid(user["uid"], user["uid"], user["uid"])
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # a change of user clears it
        workdir = spec.get("workdir") or "/"
        if root is not None or os.path.isdir(workdir):
            os.chdir(workdir)  # a plain host process keeps the shim's directory: never make one on the host
        if not spec.get("stdin"):  # `stdin: true` keeps the shim's, a pipe attach writes to
            os.dup2(os.open("/dev/null", os.O_RDONLY), 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        argv = spec["argv"]
        os.execvpe(argv[0], argv, spec["env"])
    except BaseException as e:
        reason = f"exec: {spec['argv'][0]!r}: {e}" if isinstance(e, OSError) else str(e)
        os.write(report_fd, reason.encode()[:4000])
    os._exit(128)


def main(spec_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    log_fd = os.open(spec["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    root = None
    try:
        join_namespaces(spec.get("namespaces", []))
        if spec.get("isolate", True):
            _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWPID), "unshare mount and PID namespaces")
            mount(None, "/", None, MS_REC | MS_PRIVATE)
            root = build_root(spec)
    except (OSError, SandboxError) as e:
        print(f"error {e}", flush=True)
        return 128
    read_fd, report_fd = os.pipe2(os.O_CLOEXEC)
    child = os.fork()
    if child == 0:
        os.close(read_fd)
        run_child(spec, root, log_fd, report_fd)
    os.close(report_fd)
    failure = b""
    while chunk := os.read(read_fd, 4096):
        failure += chunk
    os.close(read_fd)
    if failure:
        os.waitpid(child, 0)
        os.write(log_fd, failure + b"\n")
        print(f"error {failure.decode(errors='replace')}", flush=True)
        return 128
    for sig in FORWARDED:
        signal.signal(sig, lambda signum, _frame: os.kill(child, signum))
    print(f"started {child}", flush=True)
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
