"""Host discovery for elastic Horovod: what horovodrun, in the chief, runs every second as its
`--host-discovery-script` (`python3 -m distributetrain.chief.discovery ...`, written by the launcher). It
prints `HOST:SLOTS`, one line per host: the chief's own address first, then each worker of the hostfile
ConfigMap the manager keeps current (manager/keeper.py), named by its pod, with its GPUs.

Why pod names, not addresses: Horovod never takes back a host it saw fail, and a replacement worker may get
the address of the pod it replaces; a pod name is never reused. ssh reaches a name through the alias file
this script keeps beside the launcher's ssh config (`Host NAME` / `HostName IP`), rewritten atomically.
Why the chief alone on the first call: Horovod numbers ranks in the order it first saw each host, so rank 0
(the final accuracy, the checkpoints) stays in the chief, the pod the job keeps.

Reads both keys of the ConfigMap through its `..data` link when there is one, so they come from one update.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shlex
import socket
import struct
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from distributetrain import hostfile, naming
from distributetrain.errors import InvalidInput
from distributetrain.hostfile import HostSlots

FIRST_CALL_MARK = "discovered"
ALIASES_FILE = "aliases"
SCRIPT_FILE = "discover-hosts"
SIOCGIFADDR = 0x8915  # linux/sockios.h: an interface's IPv4 address


@dataclass(frozen=True)
class Elastic:
    """horovodrun's elastic settings, as the chief's launcher passes them."""

    min_processes: int
    max_processes: int
    timeout: float      # --elastic-timeout: how long Horovod waits for its minimum
    script: Path        # --host-discovery-script
    interface: str | None  # the chief's own, for --network-interface when the job names none


def horovodrun_args(elastic: Elastic) -> list[str]:
    """What replaces `--hostfile FILE` in an elastic horovodrun."""
    return ["--host-discovery-script", str(elastic.script), "--min-np", str(elastic.min_processes),
            "--max-np", str(elastic.max_processes), "--elastic-timeout", str(max(1, round(elastic.timeout)))]


def setup(work: Path, *, python: str, hostfile_path: Path, chief: HostSlots, min_processes: int,
          max_processes: int, timeout: float) -> Elastic:
    """What the chief's launcher needs for an elastic horovodrun: the discovery script in its private
    directory `work`, and the interface of the chief's address."""
    return Elastic(min_processes=min_processes, max_processes=max_processes, timeout=timeout,
                   script=write_script(work, python=python, hostfile_path=hostfile_path, chief=chief),
                   interface=interface_of(chief.host))


def write_script(work: Path, *, python: str, hostfile_path: Path, chief: HostSlots) -> Path:
    """The discovery script horovodrun runs: this module, with the chief's line and the launcher's private
    directory (the first-call mark, the ssh aliases)."""
    script = work / SCRIPT_FILE
    command = [python, "-m", "distributetrain.chief.discovery", "--hostfile", str(hostfile_path), "--chief",
               f"{chief.host}:{chief.slots}", "--state", str(work)]
    script.write_text(f"#!/bin/sh\nexec {shlex.join(command)}\n")
    script.chmod(0o755)
    return script


def interface_of(address: str) -> str | None:
    """The network interface holding `address` (IPv4): elastic Horovod, told its interface, skips its probe
    between hosts, which needs two of them to start."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:
                answer = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            if socket.inet_ntoa(answer[20:24]) == address:
                return name
    return None


def parse_names(text: str) -> dict[str, str]:
    """The ConfigMap's `names` key: `IP POD` per line -> {IP: POD}."""
    names: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        parts = raw.split()
        if not parts or parts[0].startswith("#"):
            continue
        if len(parts) != 2 or not naming.is_dns1123_label(parts[1]):
            raise InvalidInput(f"names line {number}: {raw!r} is not 'IP POD'")
        names[parts[0]] = parts[1]
    return names


def discover(workers: Sequence[HostSlots], names: Mapping[str, str], *, chief: HostSlots,
             first: bool) -> tuple[list[str], dict[str, str]]:
    """The lines to print (`HOST:SLOTS`, the chief first) and the ssh aliases (pod name -> address)."""
    lines = [f"{chief.host}:{chief.slots}"] if chief.slots else []
    if first and lines:
        return lines, {}
    aliases = {}
    for worker in workers:
        name = names.get(worker.host, worker.host)
        if name != worker.host:
            aliases[name] = worker.host
        lines.append(f"{name}:{worker.slots}")
    return lines, aliases


def ssh_config(aliases: Mapping[str, str]) -> str:
    return "".join(f"Host {name}\n  HostName {ip}\n" for name, ip in sorted(aliases.items()))


def read_configmap(hostfile_path: Path) -> tuple[str, str]:
    """The hostfile and names keys, from one update of the volume (both through its `..data` link)."""
    directory = hostfile_path.parent
    data = directory / "..data"
    base = directory / os.readlink(data) if data.is_symlink() else directory
    names = base / naming.HOSTNAMES_KEY
    return ((base / hostfile_path.name).read_text(),
            names.read_text() if names.exists() else "")


def _write_atomic(path: Path, text: str) -> None:
    if path.exists() and path.read_text() == text:
        return
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m distributetrain.chief.discovery", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hostfile", type=Path, required=True, help="the mounted hostfile ConfigMap's file")
    parser.add_argument("--chief", required=True, metavar="IP:SLOTS", help="this pod's address and GPUs")
    parser.add_argument("--state", type=Path, required=True, help="the launcher's private directory")
    args = parser.parse_args(argv)
    try:
        host, _, slots = args.chief.rpartition(":")
        chief = HostSlots(host, int(slots))
        text, names_text = read_configmap(args.hostfile)
        workers = hostfile.parse(text)
        names = parse_names(names_text)
    except (InvalidInput, OSError, ValueError) as err:
        print(f"distributetrain discovery: {args.hostfile}: {err}", file=sys.stderr)
        return 1
    mark = args.state / FIRST_CALL_MARK
    lines, aliases = discover(workers, names, chief=chief, first=not mark.exists())
    if aliases or mark.exists():
        _write_atomic(args.state / ALIASES_FILE, ssh_config(aliases))
    mark.touch()
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
