"""The chief's relaunches (chief/relaunch.py): a restart job waits for the whole hostfile; an elastic job
whose worker was lost before Horovod's first ring formed relaunches as soon as its minimum is there; a
training that failed on its own is never relaunched."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from distributetrain.chief.relaunch import Relauncher
from distributetrain.hostfile import HostSlots

CHIEF = HostSlots("10.0.0.9", 1)


class Scripted(Relauncher):
    """A Relauncher whose workers answer ssh as the test says, on a clock the test drives."""

    def __init__(self, path: Path, *, down: set[str], **kwargs: object) -> None:
        self.now = 0.0
        super().__init__(hostfile_path=path, ssh_port=2222, identity_file=path, user="trainer", chief=CHIEF,
                         clock=lambda: self.now, sleep=self._advance, **kwargs)  # type: ignore[arg-type]
        self.down = down
        self.on_sleep: list[str] = []  # hostfile texts written at each pause, as the manager would

    def _advance(self, seconds: float) -> None:
        self.now += seconds
        if self.on_sleep:
            self.path.write_text(self.on_sleep.pop(0))

    def unreachable(self, workers: Sequence[HostSlots], *, timeout: float = 5.0) -> list[str]:
        return [w.host for w in workers if w.host in self.down]


def test_an_elastic_job_relaunches_once_its_minimum_is_back(tmp_path: Path) -> None:
    hostfile = tmp_path / "hostfile"
    first = "10.0.0.2 slots=5\n"
    hostfile.write_text(first)
    relauncher = Scripted(hostfile, down={"10.0.0.2"}, processes=6, restarts=3, wait=60.0, minimum=1)
    # the manager takes the lost worker out at once: 1 process (the chief's) is the minimum, so go
    relauncher.on_sleep = [""]
    launches: list[list[str]] = []

    def launch(hosts: Sequence[HostSlots]) -> int:
        launches.append([h.host for h in hosts])
        return 1 if len(launches) == 1 else 0

    env: dict[str, str] = {}
    assert relauncher.run(launch, env, launched=first, workers=[HostSlots("10.0.0.2", 5)]) == 0
    assert launches == [["10.0.0.9", "10.0.0.2"], ["10.0.0.9"]]
    assert env["DT_RESUME"] == "1"


def test_a_restart_job_waits_for_the_whole_hostfile(tmp_path: Path) -> None:
    hostfile = tmp_path / "hostfile"
    first = "10.0.0.2 slots=5\n"
    hostfile.write_text(first)
    relauncher = Scripted(hostfile, down={"10.0.0.2"}, processes=6, restarts=1, wait=60.0)
    relauncher.on_sleep = ["", "", "10.0.0.3 slots=5\n"]
    launches: list[list[str]] = []

    def launch(hosts: Sequence[HostSlots]) -> int:
        launches.append([h.host for h in hosts])
        return 1 if len(launches) == 1 else 0

    assert relauncher.run(launch, {}, launched=first, workers=[HostSlots("10.0.0.2", 5)]) == 0
    assert launches == [["10.0.0.9", "10.0.0.2"], ["10.0.0.9", "10.0.0.3"]]


def test_a_training_that_failed_on_its_own_is_not_relaunched(tmp_path: Path) -> None:
    hostfile = tmp_path / "hostfile"
    first = "10.0.0.2 slots=5\n"
    hostfile.write_text(first)
    relauncher = Scripted(hostfile, down=set(), processes=6, restarts=3, wait=60.0, minimum=1)
    launches = []

    def launch(hosts: Sequence[HostSlots]) -> int:
        launches.append(hosts)
        return 3

    assert relauncher.run(launch, {}, launched=first, workers=[HostSlots("10.0.0.2", 5)]) == 3
    assert len(launches) == 1
