"""The launcher's pure parts (hostfile merge, the horovodrun argv, horovodrun's failure report, settings)
and its error paths up to the point where horovodrun would start."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
from pathlib import Path

import pytest

from distributetrain import hostfile, naming
from distributetrain.chief import launcher
from distributetrain.chief import settings as launchsettings
from distributetrain.chief.launcher import Failure, launch_interface
from distributetrain.errors import EXIT_SSH, EXIT_USAGE, InvalidInput, SshUnreachable
from distributetrain.hostfile import HostSlots
from distributetrain.manager import manifests, sshkeys
from distributetrain.placement.planner import Entry
from distributetrain.request.jobspec import JobSpec

WORKERS = (HostSlots("10.244.1.7", 5), HostSlots("10.244.2.3", 2))

# The tail of a real horovodrun run whose rank 2 lost its worker (tests/e2e/test_training_local.py).
HOROVODRUN_FAILURE = """\
Process 2 exit with status code 255.
Terminating remaining workers after failure of Process 2.
[0]<stderr>:Terminated
Process 1 exit with status code 255.
Process 0 exit with status code 143.
RuntimeError: Horovod detected that one or more processes exited with non-zero status, thus causing the job \
to be terminated. The first process to do so was:
Process name: 2
Exit code: 255
"""


def test_the_chief_comes_first_so_rank_0_and_its_checkpoints_stay_in_the_kept_pod() -> None:
    hosts = launcher.with_chief(WORKERS, pod_ip="10.244.3.9", slots=1)
    assert hosts == (HostSlots("10.244.3.9", 1), *WORKERS)
    assert launcher.render_hostfile(hosts) == "10.244.3.9 slots=1\n10.244.1.7 slots=5\n10.244.2.3 slots=2\n"
    assert hostfile.parse(launcher.render_hostfile(hosts)) == sorted(hosts, key=lambda h: h.host)


def test_a_chief_without_gpus_adds_no_line() -> None:
    assert launcher.with_chief(WORKERS, pod_ip="10.244.3.9", slots=0) == WORKERS


@pytest.mark.parametrize(("workers", "pod_ip", "slots", "message"), [
    (WORKERS, "", 1, "DT_POD_IP"),
    (WORKERS, "10.244.1.7", 1, "10.244.1.7 is also a worker"),
    (WORKERS, "10.244.3.9", -1, "chief slots: -1"),
    ((), "10.244.3.9", 0, "nothing to train on"),
])
def test_bad_chief_input_is_refused_with_what_to_fix(workers: tuple[HostSlots, ...], pod_ip: str, slots: int,
                                                     message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        launcher.with_chief(workers, pod_ip=pod_ip, slots=slots)


def test_the_total_must_match_the_jobs_processes() -> None:
    hosts = launcher.with_chief(WORKERS, pod_ip="10.244.3.9", slots=1)
    assert launcher.check_total(hosts, 8) == 8
    assert launcher.check_total(hosts, None) == 8
    with pytest.raises(InvalidInput, match=r"2 workers have 8 slots, but the job asks for 6 processes"):
        launcher.check_total(hosts, 6)


def test_horovodrun_argv() -> None:
    argv = launcher.horovodrun_argv(
        horovodrun=["horovodrun"], num_proc=6, hostfile=Path("/tmp/w/hostfile"), ssh_port=2222,
        identity_file=Path("/root/.ssh/id_ed25519"), transport="gloo", network_interface="eth0",
        start_timeout=120, command=["python3", "/opt/distributetrain/Train.py", "--epochs", "5"])
    assert argv == [
        "horovodrun", "-np", "6", "--hostfile", "/tmp/w/hostfile", "-p", "2222",
        "--ssh-identity-file", "/root/.ssh/id_ed25519", "--gloo", "--start-timeout", "120", "--disable-cache",
        "--network-interface", "eth0", "python3", "/opt/distributetrain/Train.py", "--epochs", "5"]


def test_horovodrun_argv_mpi_without_interface() -> None:
    argv = launcher.horovodrun_argv(
        horovodrun=["/opt/venv/bin/horovodrun"], num_proc=1, hostfile=Path("h"), ssh_port=22,
        identity_file=Path("k"), transport="mpi", network_interface=None, start_timeout=0.4, command=["t"])
    assert "--mpi" in argv and "--gloo" not in argv and "--network-interface" not in argv
    assert argv[argv.index("--start-timeout") + 1] == "1"
    assert argv[-1] == "t"


def test_an_image_that_vouches_for_its_horovod_build_starts_horovodrun_without_the_check() -> None:
    command = launcher.horovodrun_command({"DT_HOROVOD_BUILD_CHECKED": "gloo"}, python="/opt/venv/bin/python",
                                          console_script="/opt/venv/bin/horovodrun", horovod_version="0.28.1")
    argv = launcher.horovodrun_argv(
        horovodrun=command, num_proc=2, hostfile=Path("h"), ssh_port=2222, identity_file=Path("k"),
        transport="gloo", network_interface="eth0", start_timeout=30, command=["python3", "Train.py"])
    assert argv[:5] == ["/opt/venv/bin/python", "-m", "distributetrain.chief.horovodrun", "-np", "2"]


@pytest.mark.parametrize(("env", "version"), [
    ({}, "0.28.1"),                                             # an image that checked nothing
    ({"DT_HOROVOD_BUILD_CHECKED": ""}, "0.28.1"),
    ({"DT_HOROVOD_BUILD_CHECKED": "nccl"}, "0.28.1"),           # not a controller horovodrun checks
    ({"DT_HOROVOD_BUILD_CHECKED": "gloo"}, "0.27.0"),           # a Horovod whose launch.py was not read
    ({"DT_HOROVOD_BUILD_CHECKED": "gloo"}, None),
])
def test_otherwise_horovodrun_checks_its_build_as_always(env: dict[str, str], version: str | None) -> None:
    assert launcher.horovodrun_command(env, python="python3", console_script="/venv/bin/horovodrun",
                                       horovod_version=version) == ["/venv/bin/horovodrun"]


def test_the_controllers_an_image_vouches_for() -> None:
    from distributetrain.chief import horovodrun

    assert horovodrun.vouched({"DT_HOROVOD_BUILD_CHECKED": "gloo, MPI"}, horovod_version="0.28.1") == {
        "gloo", "mpi"}
    assert horovodrun.vouched({"DT_HOROVOD_BUILD_CHECKED": "gloo"}, horovod_version="0.28.1") == {"gloo"}


@pytest.mark.parametrize(("change", "message"), [
    ({"transport": "nccl"}, "transport: 'nccl' is not one of gloo, mpi"),
    ({"num_proc": 0}, "0 asked"),
    ({"command": []}, "command: empty"),
])
def test_horovodrun_argv_refuses(change: dict[str, object], message: str) -> None:
    args: dict[str, object] = {
        "horovodrun": ["horovodrun"], "num_proc": 2, "hostfile": Path("h"), "ssh_port": 2222,
        "identity_file": Path("k"), "transport": "gloo", "network_interface": None, "start_timeout": 30.0,
        "command": ["python3"]}
    args.update(change)
    with pytest.raises(InvalidInput, match=message):
        launcher.horovodrun_argv(**args)  # type: ignore[arg-type]


def test_ranks_fill_hosts_in_hostfile_order() -> None:
    hosts = launcher.with_chief(WORKERS, pod_ip="10.244.3.9", slots=1)
    assert [launcher.rank_host(hosts, r) for r in range(9)] == (
        ["10.244.3.9"] + ["10.244.1.7"] * 5 + ["10.244.2.3"] * 2 + [None])


def test_horovodruns_failure_report_gives_the_trainings_exit_code() -> None:
    failure = launcher.find_failure(HOROVODRUN_FAILURE.splitlines())
    assert failure == Failure(rank=2, exit_code=255)
    assert launcher.exit_code_for(1, failure) == 255
    assert launcher.exit_code_for(1, Failure(0, 3)) == 3
    assert launcher.exit_code_for(1, Failure(0, -9)) == 137  # a rank killed by SIGKILL, as a shell shows it
    assert launcher.exit_code_for(0, None) == 0
    assert launcher.exit_code_for(1, None) == 1  # horovodrun's own failure: its code
    assert launcher.exit_code_for(-15, None) == 143
    assert launcher.find_failure(["[0]<stdout>:epoch=1 loss=0.3", "Exit code: 7"]) is None


@pytest.mark.parametrize(("text", "seconds"), [("120", 120.0), ("90s", 90.0), ("2m", 120.0), ("1.5h", 5400.0),
                                               ("500ms", 0.5)])
def test_durations(text: str, seconds: float) -> None:
    assert launchsettings.parse_duration(text, name="x") == seconds


def test_a_bad_duration_names_its_setting() -> None:
    with pytest.raises(InvalidInput, match="ssh timeout: 'soon'"):
        launchsettings.parse_duration("soon", name="ssh timeout")


def test_settings_from_the_chief_pods_environment() -> None:
    home = f"/home/{naming.IMAGE_USER}"  # the base image's user's home, inside the chief's container
    env = {"HOME": home, "DT_POD_IP": "10.244.3.9", "DT_SLOTS": "1", "DT_NUM_PROCESSES": "6",
           "DT_SSH_PORT": "2022", "DT_TRANSPORT": "gloo", "DT_NETWORK_INTERFACE": "eth0",
           "DT_SSH_TIMEOUT": "45", "DT_HOSTFILE": "/etc/distributetrain/hostfile/hostfile"}
    s = launchsettings.parse_settings(["--", "python3", "train.py", "--epochs", "3"], env)
    got = (s.pod_ip, s.slots, s.num_processes, s.ssh_port, s.transport, s.network_interface, s.ssh_timeout)
    assert got == ("10.244.3.9", 1, 6, 2022, "gloo", "eth0", 45.0)
    assert s.hostfile == Path("/etc/distributetrain/hostfile/hostfile")
    assert s.identity_file == Path(home) / ".ssh" / "id_ed25519"
    assert s.command == ("python3", "train.py", "--epochs", "3")


def test_settings_defaults_and_arguments_over_the_environment() -> None:
    s = launchsettings.parse_settings(["--slots", "2", "--ssh-port", "2200"],
                                {"DT_SLOTS": "1", "DT_SSH_IDENTITY": "/run/key"})
    assert s.slots == 2 and s.ssh_port == 2200 and s.identity_file == Path("/run/key")
    assert s.hostfile == Path(naming.HOSTFILE_MOUNT_PATH) / naming.HOSTFILE_KEY
    assert s.command == naming.DEFAULT_COMMAND == ("python3", naming.TRAIN_SCRIPT_PATH)
    assert s.num_processes is None and s.transport == "gloo" and s.network_interface is None


def test_a_non_integer_environment_value_is_named() -> None:
    with pytest.raises(InvalidInput, match="DT_SLOTS: 'two'"):
        launchsettings.parse_settings([], {"DT_SLOTS": "two"})


def test_the_launcher_reads_what_the_chief_pod_sets() -> None:
    spec = JobSpec.from_sources({"gpus": "6", "image": "i", "network_interface": "eth0"}, {})
    chief = manifests.chief_pod(spec, entry=Entry("n", 1), owner=None)["spec"]["containers"][0]
    assert chief["command"] == [naming.ENTRYPOINT_PATH] and chief["args"][0] == naming.ENTRYPOINT_LAUNCHER
    set_by_the_pod = {env["name"] for env in chief["env"]}
    for name in ("ENV_SSH_PORT", "ENV_SSH_DIR", "ENV_HOSTFILE", "ENV_NUM_PROCESSES", "ENV_SLOTS",
                 "ENV_POD_IP", "ENV_NETWORK_INTERFACE", "ENV_TRANSPORT", "ENV_SSH_TIMEOUT"):
        assert getattr(naming, name) in set_by_the_pod, name
    worker = manifests.worker_pod(spec, index=0, entry=Entry("n", 5), owner=None)["spec"]["containers"][0]
    assert worker["args"] == [naming.ENTRYPOINT_WORKER]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def key(tmp_path: Path) -> Path:
    path = tmp_path / "id_ed25519"
    path.write_bytes(sshkeys.generate("unit").private_openssh())
    path.chmod(0o600)
    return path


def test_a_worker_that_never_answers_is_named(key: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
                                              ) -> None:
    port = _closed_port()
    (tmp_path / "hostfile").write_text("127.0.0.1 slots=2\n")
    with caplog.at_level(logging.ERROR, logger="distributetrain.chief.launcher"):
        code = launcher.main(["--hostfile", str(tmp_path / "hostfile"), "--identity-file", str(key),
                              "--ssh-port", str(port), "--pod-ip", "127.0.0.9", "--ssh-timeout", "0.2",
                              "--ssh-delay", "0.1", "--ssh-connect-timeout", "1"])
    assert code == EXIT_SSH == SshUnreachable.exit_code
    assert f"worker 127.0.0.1:{port} did not accept the job key" in caplog.text
    assert "after 3 attempts" in caplog.text and "connection refused" in caplog.text


def test_a_hostfile_that_does_not_match_the_plan_stops_before_any_ssh(key: Path, tmp_path: Path) -> None:
    (tmp_path / "hostfile").write_text("10.0.0.1 slots=5\n")
    code = launcher.main(["--hostfile", str(tmp_path / "hostfile"), "--identity-file", str(key),
                          "--pod-ip", "10.0.0.2", "--slots", "1", "--num-processes", "7"])
    assert code == EXIT_USAGE


def test_a_malformed_hostfile_is_named(key: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "hostfile").write_text("10.0.0.1 slots=5\n10.0.0.3 five\n")
    code = launcher.main(["--hostfile", str(tmp_path / "hostfile"), "--identity-file", str(key),
                          "--pod-ip", "10.0.0.2"])
    assert code == EXIT_USAGE
    assert "line 2" in caplog.text and str(tmp_path / "hostfile") in caplog.text


def test_the_chief_uses_its_ipv4_address_on_a_dual_stack_network() -> None:
    assert launchsettings.own_ip({"DT_POD_IP": "fd00::9", "DT_POD_IPS": "fd00::9,10.244.3.9"}) == "10.244.3.9"
    assert launchsettings.own_ip({"DT_POD_IP": "10.244.3.9"}) == "10.244.3.9"
    settings = launchsettings.parse_settings([], {"DT_POD_IP": "fd00::9", "DT_POD_IPS": "fd00::9,10.244.3.9"})
    assert settings.pod_ip == "10.244.3.9"


def test_each_rank_loads_its_hosts_own_environment_over_the_chiefs(tmp_path: Path) -> None:
    """Horovod's Gloo launcher runs every rank as `env CHIEF_VARS... COMMAND`: the shim then loads the file a
    worker's entrypoint wrote (DT_HOST_ENV_FILE, given by that worker's sshd), so its own values win."""
    own = tmp_path / "pod-env"
    own.write_text("export ONLY_WORKER='yes'\nexport SHARED='worker'\n")
    argv = launcher.with_host_env(["sh", "-c", 'echo "$ONLY_WORKER $SHARED $CHIEF"'])
    assert argv[:2] == ["sh", "-c"] and argv[-3:] == ["sh", "-c", 'echo "$ONLY_WORKER $SHARED $CHIEF"']
    chief_env = {"PATH": os.environ["PATH"], "SHARED": "chief", "CHIEF": "c"}
    on_worker = subprocess.run(argv, env={**chief_env, "DT_HOST_ENV_FILE": str(own)}, capture_output=True,
                               text=True, check=True)
    assert on_worker.stdout == "yes worker c\n"
    on_chief = subprocess.run(argv, env=chief_env, capture_output=True, text=True, check=True)
    assert on_chief.stdout == " chief c\n"


@pytest.mark.parametrize(("explicit", "workers", "elastic", "expected"), [
    (None, 2, False, "eth0"),      # this pod's interface: horovodrun skips its probe of every host
    ("ib0", 2, False, "ib0"),      # the job's own wins
    (None, 0, False, None),        # all ranks here: horovodrun's all-local path wants 127.0.0.1's interface
    ("ib0", 0, False, None),
    (None, 0, True, "eth0"),       # elastic: hosts may join, and its driver probes between them untold
])
def test_horovodrun_is_told_an_interface_only_where_a_rank_is_on_another_pod(
        explicit: str | None, workers: int, elastic: bool, expected: str | None) -> None:
    assert launch_interface(explicit, "eth0", workers=workers, elastic=elastic) == expected
