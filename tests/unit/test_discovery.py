"""Host discovery for elastic Horovod (discovery.py): what horovodrun reads each second from the script, run
for real as a process over a ConfigMap volume laid out as the kubelet lays it out (`..data` swapped)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from distributetrain import naming
from distributetrain.chief import discovery
from distributetrain.chief.discovery import Elastic
from distributetrain.errors import InvalidInput
from distributetrain.hostfile import HostSlots

CHIEF = HostSlots("10.244.3.2", 1)


def _configmap(directory: Path, version: str, hostfile: str, names: str) -> Path:
    """One update of a ConfigMap volume: a timestamped directory, `..data` pointing at it, each key a link
    through `..data` (the kubelet's AtomicWriter)."""
    directory.mkdir(exist_ok=True)
    payload = directory / f"..{version}"
    payload.mkdir()
    (payload / naming.HOSTFILE_KEY).write_text(hostfile)
    (payload / naming.HOSTNAMES_KEY).write_text(names)
    temporary = directory / "..data_tmp"
    temporary.symlink_to(payload.name)
    os.replace(temporary, directory / "..data")
    for key in (naming.HOSTFILE_KEY, naming.HOSTNAMES_KEY):
        if not (directory / key).is_symlink():
            (directory / key).symlink_to(f"..data/{key}")
    return directory / naming.HOSTFILE_KEY


def test_the_chief_alone_first_then_every_worker_by_its_pod_name() -> None:
    workers = [HostSlots("10.244.1.2", 5), HostSlots("10.244.4.2", 2)]
    names = {"10.244.1.2": "train-worker-0", "10.244.4.2": "train-worker-3"}
    assert discovery.discover(workers, names, chief=CHIEF, first=True) == (["10.244.3.2:1"], {})
    lines, aliases = discovery.discover(workers, names, chief=CHIEF, first=False)
    assert lines == ["10.244.3.2:1", "train-worker-0:5", "train-worker-3:2"]
    assert aliases == {"train-worker-0": "10.244.1.2", "train-worker-3": "10.244.4.2"}
    assert discovery.ssh_config(aliases) == ("Host train-worker-0\n  HostName 10.244.1.2\n"
                                             "Host train-worker-3\n  HostName 10.244.4.2\n")


def test_a_chief_without_gpus_is_not_offered_and_workers_come_at_once() -> None:
    lines, _ = discovery.discover([HostSlots("10.244.1.2", 5)], {"10.244.1.2": "train-worker-0"},
                                  chief=HostSlots("10.244.3.2", 0), first=True)
    assert lines == ["train-worker-0:5"]


def test_names_are_strict() -> None:
    assert discovery.parse_names("# pods\n10.244.1.2 train-worker-0\n\n") == {"10.244.1.2": "train-worker-0"}
    with pytest.raises(InvalidInput, match="names line 1"):
        discovery.parse_names("10.244.1.2 Train_Worker\n")


def test_horovodrun_gets_the_script_and_its_bounds(tmp_path: Path) -> None:
    elastic = Elastic(min_processes=1, max_processes=8, timeout=780.4, script=tmp_path / "discover-hosts",
                      interface=None)
    assert discovery.horovodrun_args(elastic) == [
        "--host-discovery-script", str(tmp_path / "discover-hosts"), "--min-np", "1", "--max-np", "8",
        "--elastic-timeout", "780"]


def test_the_script_follows_the_configmap_as_the_manager_changes_it(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    hostfile = _configmap(tmp_path / "volume", "2026_01_01", "10.244.1.2 slots=5\n",
                          "10.244.1.2 train-worker-0\n")
    script = discovery.write_script(work, python=sys.executable, hostfile_path=hostfile, chief=CHIEF)

    def run() -> str:
        done = subprocess.run([str(script)], capture_output=True, text=True, timeout=60, check=True)
        return done.stdout

    assert run() == "10.244.3.2:1\n"  # the first call: the chief alone, so rank 0 is its own
    assert run() == "10.244.3.2:1\ntrain-worker-0:5\n"
    # the worker lost: the manager removed its line; then its replacement (same address) joins
    _configmap(tmp_path / "volume", "2026_01_02", "", "")
    assert run() == "10.244.3.2:1\n"
    _configmap(tmp_path / "volume", "2026_01_03", "10.244.1.2 slots=5\n", "10.244.1.2 train-worker-1\n")
    assert run() == "10.244.3.2:1\ntrain-worker-1:5\n"
    assert (work / discovery.ALIASES_FILE).read_text() == "Host train-worker-1\n  HostName 10.244.1.2\n"


def test_the_script_fails_naming_the_file_it_could_not_read(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    bad = tmp_path / "volume" / naming.HOSTFILE_KEY
    bad.parent.mkdir()
    bad.write_text("10.244.1.2\n")
    script = discovery.write_script(work, python=sys.executable, hostfile_path=bad, chief=CHIEF)
    done = subprocess.run([str(script)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert str(bad) in done.stderr and "is not 'HOST slots=N'" in done.stderr
