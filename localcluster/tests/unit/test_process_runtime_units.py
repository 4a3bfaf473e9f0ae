"""The process runtime's pure parts: image mapping, Kubernetes env/argv rules, status rendering, addresses.
No root, no processes."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from localcluster import InvalidInput
from localcluster._internal.runtime import podstatus as ps
from localcluster._internal.runtime.images import (
    ImageConfig,
    ImageMap,
    ImageMapping,
    ImageNotFound,
    account_files,
    container_argv,
    image_path,
    parse_dockerfile,
)
from localcluster._internal.runtime.logs import LineReader, LineTimes, format_time, parse_time, render
from localcluster._internal.runtime.netns import (
    AddressPool,
    choose_second_octet,
    cidr_index,
    node_index,
)
from localcluster._internal.runtime.podenv import (
    NotReadyYet,
    container_env,
    expand,
    hosts_file,
    pod_hostname,
)
from localcluster._internal.runtime.probes import ProbeTiming, ProbeTracker
from localcluster._internal.runtime.volumes import set_ownership


@pytest.mark.parametrize(("image", "path"), [
    ("busybox", "busybox"),
    ("busybox:1.36", "busybox"),
    ("registry.example.com:5000/team/train:1.0", "team/train"),
    ("localhost/distributetrain/base@sha256:abc", "distributetrain/base"),
    ("docker.io/library/python:3.11-slim", "library/python"),
])
def test_image_path_drops_registry_tag_and_digest(image: str, path: str) -> None:
    assert image_path(image) == path


def test_an_image_map_file_names_dockerfiles_and_host_images(tmp_path: Path) -> None:
    (tmp_path / "images" / "app").mkdir(parents=True)
    (tmp_path / "images" / "app" / "Dockerfile").write_text("FROM scratch\n")
    (tmp_path / "map.yaml").write_text("""\
images:
  - pattern: "*team/app*"
    dockerfile: images/app/Dockerfile
    context: .
  - pattern: "team/*"
    host: true
  - pattern: busybox
    host: true
""")
    images = ImageMap.load(tmp_path / "map.yaml")
    app = images.lookup("registry.example.com:5000/team/app:1.0")
    assert app == ImageMapping("*team/app*", tmp_path / "images" / "app" / "Dockerfile", tmp_path)
    assert images.build_contexts == (tmp_path,)
    assert images.resolve("team/app").dockerfile == tmp_path / "images" / "app" / "Dockerfile"  # first match
    assert images.resolve("team/tools:2") == ImageConfig(name="team/tools:2")  # the host's own files
    assert images.resolve("busybox:1.36").is_host_image
    with pytest.raises(ImageNotFound, match=r'failed to pull and unpack image "python:3.11-slim": not found '
                                            r"in the local cluster's image map"):
        images.resolve("python:3.11-slim")
    with pytest.raises(ImageNotFound):
        ImageMap().resolve("busybox")  # no map: no image at all


@pytest.mark.parametrize(("text", "says"), [
    ("pattern: busybox\n", "expected one key, `images`"),
    ("images:\n  - host: true\n", "image 1: expected a mapping with a `pattern`"),
    ("images:\n  - {pattern: a, host: true}\n  - {pattern: b}\n", "image 2 (b): give either"),
    ("images:\n  - {pattern: a, host: true, dockerfile: D}\n", "image 1 (a): give either"),
    ("images:\n  - {pattern: a, host: yes please}\n", "host must be true or false"),
    ("images:\n  - {pattern: a, host: true, context: .}\n", "a host image has no build context"),
    ("images:\n  - {pattern: a, dockerfile: D, tag: x}\n", "unknown key(s) tag"),
    ("images: [\n", "cannot be read"),
])
def test_an_unusable_image_map_file_is_refused_with_its_reason(tmp_path: Path, text: str, says: str) -> None:
    (tmp_path / "map.yaml").write_text(text)
    with pytest.raises(InvalidInput, match=re.escape(says)) as caught:
        ImageMap.load(tmp_path / "map.yaml")
    assert str(tmp_path / "map.yaml") in str(caught.value)  # the file it is about


def test_a_dockerfile_gives_its_files_and_defaults(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "entrypoint").write_text("#!/bin/sh\n")
    (tmp_path / "Train.py").write_text("print()\n")
    (tmp_path / "requirements.txt").write_text("\n")
    (tmp_path / "Dockerfile").write_text("""\
FROM python:3.11-slim
ENV APP_PORT=2222
COPY requirements.txt /tmp/pkg/
RUN pip install -r /tmp/pkg/requirements.txt && rm -rf /tmp/pkg
COPY --chmod=0755 bin/entrypoint /usr/local/bin/app-entrypoint
WORKDIR /opt/app
COPY Train.py ./
ENTRYPOINT ["/usr/local/bin/app-entrypoint"]
CMD ["worker"]
""")
    config = ImageMap((ImageMapping("team/app", tmp_path / "Dockerfile"),)).resolve("team/app:0.1.0")
    dests = {f.dest: f for f in config.files}
    assert dests["/opt/app/Train.py"].source == tmp_path / "Train.py"
    assert dests["/usr/local/bin/app-entrypoint"].mode == 0o755
    assert not any(d.startswith("/tmp/") for d in dests)  # build inputs a RUN deletes are not exposed
    assert config.entrypoint == ("/usr/local/bin/app-entrypoint",)
    assert config.cmd == ("worker",)
    assert config.workdir == "/opt/app"
    assert dict(config.env)["APP_PORT"] == "2222"


def test_dockerfile_parsing_rules(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a")
    (tmp_path / "b.txt").write_text("b")
    (tmp_path / "dir").mkdir()
    text = """\
# comment
ARG BASE=/app
FROM --platform=linux/amd64 python:3.11 AS build
ENV ONE=1 \\
    TWO="two words"
ENV THREE ${ONE}-$TWO
WORKDIR ${BASE:-/fallback}
WORKDIR sub
COPY *.txt ./
COPY --from=build /x /y
COPY ["dir", "/data/"]
CMD python -m app
"""
    config = parse_dockerfile(text, name="x", dockerfile=tmp_path / "Dockerfile", context=tmp_path)
    env = dict(config.env)
    assert env["ONE"] == "1" and env["TWO"] == "two words" and env["THREE"] == "1-two words"
    assert env["PATH"].endswith("/usr/bin:/sbin:/bin")
    assert config.workdir == "/app/sub"
    assert [(f.source.name, f.dest) for f in config.files] == [
        ("a.txt", "/app/sub/a.txt"), ("b.txt", "/app/sub/b.txt"), ("dir", "/data/")]
    assert config.cmd == ("/bin/sh", "-c", "python -m app")


def test_entrypoint_resets_an_inherited_cmd(tmp_path: Path) -> None:
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "Dockerfile").write_text('FROM debian\nENTRYPOINT ["/a"]\nCMD ["b"]\n')
    (tmp_path / "child").mkdir()
    (tmp_path / "child" / "Dockerfile").write_text('FROM team/base:1\nENTRYPOINT ["/c"]\n')
    registry = ImageMap((ImageMapping("team/base", tmp_path / "base" / "Dockerfile"),
                         ImageMapping("team/child", tmp_path / "child" / "Dockerfile")))
    child = registry.resolve("team/child")
    assert (child.entrypoint, child.cmd) == (("/c",), ())
    assert registry.resolve("team/base").cmd == ("b",)


def test_a_stage_named_earlier_is_inherited_as_a_multi_stage_build_does(tmp_path: Path) -> None:
    # Docker: `FROM <stage>` starts from that stage's filesystem and config (ENV, USER, WORKDIR...), however
    # many stages chain, the name picked by an ARG before the first FROM and matched case-insensitively;
    # what a stage's RUN deleted stays deleted; a stage not on the chain contributes nothing
    for name in ("a.txt", "tool.sh"):
        (tmp_path / name).write_text(name)
    text = """\
ARG FLAVOUR=plain
FROM debian AS Runtime
ENV PATH=/opt/venv/bin:$PATH CHECKED=gloo
COPY a.txt tool.sh /tmp/in/
RUN useradd -u 2000 -m app && rm -rf /tmp/in/tool.sh
USER app
FROM debian AS fancy-extra
ENV EXTRA=1
FROM runtime AS flavour-plain
FROM flavour-${FLAVOUR} AS final
ENV OWN=1
"""
    config = parse_dockerfile(text, name="x", dockerfile=tmp_path / "Dockerfile", context=tmp_path)
    env = dict(config.env)
    assert env["CHECKED"] == "gloo" and env["OWN"] == "1" and "EXTRA" not in env
    assert env["PATH"] == "/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert [f.dest for f in config.files] == ["/tmp/in/a.txt"]
    assert config.user == "app" and [u.name for u in config.users] == ["app"]


def test_copy_of_a_missing_file_names_it(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM scratch\nCOPY nothing.sh /x\n")
    registry = ImageMap((ImageMapping("team/app", tmp_path / "Dockerfile"),))
    with pytest.raises(InvalidInput, match=r"nothing\.sh"):
        registry.resolve("team/app")


@pytest.mark.parametrize(("command", "args", "argv"), [
    (None, None, ["/entry", "cmd-default"]),
    (None, ["x"], ["/entry", "x"]),
    (["/bin/true"], None, ["/bin/true"]),
    (["/bin/echo"], ["y"], ["/bin/echo", "y"]),
])
def test_command_and_args_follow_kubernetes(command: list[str] | None, args: list[str] | None,
                                            argv: list[str]) -> None:
    image = ImageConfig(name="i", entrypoint=("/entry",), cmd=("cmd-default",))
    assert container_argv(image, command, args) == argv


def test_env_order_and_expansion() -> None:
    objects = {("configmaps", "ns", "cm"): {"data": {"A": "from-cm", "B": "b", "bad-key!": "skipped"}}}
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "labels": {"x": "1"}},
           "spec": {"nodeName": "node-2"}}
    container = {"name": "c", "envFrom": [{"configMapRef": {"name": "cm"}}],
                 "env": [{"name": "A", "value": "explicit-$(B)"}, {"name": "ESC", "value": "$$(B)"},
                         {"name": "LBL", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['x']"}}},
                         {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}]}
    env = container_env(pod=pod, container=container, get=lambda r, n, k: objects.get((r, n or "", k)),
                        image_env=[("A", "image"), ("PATH", "/bin")], base={"HOSTNAME": "p"},
                        pod_ip="10.244.2.3", host_ip="10.244.2.1", allocatable={"cpu": "64"})
    assert env["A"] == "explicit-b" and env["B"] == "b" and env["ESC"] == "$(B)"
    assert env["LBL"] == "1" and env["CPU"] == "64" and env["PATH"] == "/bin"
    assert "bad-key!" not in env


def test_missing_config_map_keeps_the_container_waiting() -> None:
    container = {"name": "c", "env": [
        {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "no", "key": "k"}}}]}
    with pytest.raises(NotReadyYet, match='configmap "no" not found'):
        container_env(pod={"metadata": {}, "spec": {}}, container=container, get=lambda r, n, k: None,
                      image_env=[], base={}, pod_ip="", host_ip="", allocatable={})
    optional = {"name": "c", "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {
        "name": "no", "key": "k", "optional": True}}}]}
    assert "X" not in container_env(pod={"metadata": {}, "spec": {}}, container=optional,
                                    get=lambda r, n, k: None, image_env=[], base={}, pod_ip="", host_ip="",
                                    allocatable={})


def test_expand_leaves_unknown_references() -> None:
    assert expand("$(A) $(NOPE) $$(A) $", {"A": "1"}) == "1 $(NOPE) $(A) $"


def test_hostname_and_hosts_file() -> None:
    pod = {"metadata": {"name": "job-worker-0", "namespace": "ml"},
           "spec": {"hostname": "w0", "subdomain": "job", "hostAliases": [{"ip": "10.0.0.9",
                                                                           "hostnames": ["db"]}]}}
    assert pod_hostname(pod) == ("w0", "w0.job.ml.svc.cluster.local")
    hosts = hosts_file(pod, "10.244.1.7")
    assert "10.244.1.7\tw0.job.ml.svc.cluster.local\tw0\n" in hosts
    assert "10.0.0.9\tdb" in hosts
    assert "127.0.0.1\tw0" not in hosts
    assert pod_hostname({"metadata": {"name": "x" * 70}, "spec": {}})[0] == "x" * 63


def view(state: dict[str, object], restarts: int = 0) -> ps.ContainerView:
    return ps.ContainerView(name="c", image="i", image_id="i", state=state, restart_count=restarts)


@pytest.mark.parametrize(("policy", "codes", "phase"), [
    ("Never", [0, 0], "Succeeded"),
    ("Never", [0, 1], "Failed"),
    ("OnFailure", [0, 0], "Succeeded"),
    ("Always", [0, 0], "Running"),
])
def test_phase_of_finished_containers(policy: str, codes: list[int], phase: str) -> None:
    containers = [view(ps.terminated(c, started_at=None, finished_at="t")) for c in codes]
    assert ps.pod_phase([], containers, policy, init_done=True) == phase


def test_phase_while_starting_and_running() -> None:
    assert ps.pod_phase([], [view(ps.waiting("ContainerCreating"))], "Never", init_done=True) == "Pending"
    assert ps.pod_phase([], [view(ps.running("t")), view(ps.waiting("ContainerCreating"))], "Never",
                        init_done=True) == "Running"
    failed_init = view(ps.terminated(1, started_at=None, finished_at="t"))
    assert ps.pod_phase([failed_init], [view(ps.waiting("PodInitializing"))], "Never",
                        init_done=False) == "Failed"
    assert ps.exit_code_of(-9) == 137 and ps.exit_code_of(3) == 3


def test_conditions_keep_pod_scheduled_and_transition_times() -> None:
    scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": "t0"}
    ready = view(ps.running("t"))
    ready.ready = True
    first = ps.conditions([scheduled], sandbox_ready=True, init_done=True, app=[ready], init_pending=[],
                          phase="Running")
    by_type = {c["type"]: c for c in first}
    assert by_type["PodScheduled"] == scheduled
    assert by_type["Ready"]["status"] == by_type["ContainersReady"]["status"] == "True"
    old = dict(by_type["Ready"], lastTransitionTime="long-ago")
    again = {c["type"]: c for c in ps.conditions([scheduled, old], sandbox_ready=True, init_done=True,
                                                   app=[ready], init_pending=[], phase="Running")}
    assert again["Ready"]["lastTransitionTime"] == "long-ago"
    ready.ready = False
    unready = {c["type"]: c for c in ps.conditions([scheduled], sandbox_ready=True, init_done=True,
                                                     app=[ready], init_pending=[], phase="Running")}
    assert unready["Ready"]["reason"] == "ContainersNotReady"
    assert unready["Ready"]["message"] == "containers with unready status: [c]"


def test_probe_thresholds() -> None:
    tracker = ProbeTracker(ProbeTiming(success_threshold=2, failure_threshold=3))
    assert [tracker.record(ok) for ok in (True, True)] == [False, True] and tracker.result
    assert [tracker.record(ok) for ok in (False, False, True, False, False, False)] == \
        [False, False, False, False, False, True]
    assert not tracker.result


def test_subnet_choice_skips_what_the_machine_uses() -> None:
    addresses = [{"addr_info": [{"local": "10.244.0.1", "prefixlen": 16}]},
                 {"addr_info": [{"local": "192.0.2.2", "prefixlen": 24}]}]
    routes = [{"dst": "default"}, {"dst": "10.245.3.0/24"}]
    assert choose_second_octet(addresses, routes) == 246
    assert choose_second_octet([], []) == 244


def test_pod_addresses_per_node() -> None:
    known: dict[str, int] = {}
    assert [node_index(n, known) for n in ("node-3", "gpu-a", "node-1", "node-3")] == [3, 1, 2, 3]
    # a node's podCIDR decides its number, so cpu-1 (10.244.4.0/24) never takes node-1's range
    known = {}
    assert node_index("cpu-1", known, pod_cidr="10.244.4.0/24") == 4
    assert node_index("node-1", known, pod_cidr="10.244.1.0/24") == 1
    assert node_index("cpu-2", known) == 2
    assert [cidr_index(c) for c in ("10.244.7.0/24", "10.245.1.0/24", "192.168.1.0/24", "")] == [7, 0, 0, 0]
    pool = AddressPool(10, 244)
    first, second = pool.allocate(3), pool.allocate(3)
    assert (first, second, pool.node_ip(3)) == ("10.244.3.2", "10.244.3.3", "10.244.3.1")
    # round-robin, as CNI's host-local IPAM: a freed address comes back only once the others have been used
    pool.release(first)
    assert pool.allocate(3) == "10.244.3.4"
    pool.used = {f"10.244.3.{host}" for host in range(2, 255)} - {first}
    assert pool.allocate(3) == first


# ---- accounts a Dockerfile's RUN creates; fsGroup on volumes; log line times ------------------------------
def test_the_accounts_a_run_creates_are_kept(tmp_path: Path) -> None:
    text = """\
FROM ubuntu:22.04
RUN apt-get update && groupadd --gid 10001 trainer \\
 && useradd --no-log-init --uid 10001 --gid 10001 --create-home --home-dir /home/trainer --shell /bin/bash \\
      --password '*' trainer
RUN useradd -u 2000 -M plain; useradd --system svc
"""
    config = parse_dockerfile(text, name="x", dockerfile=tmp_path / "Dockerfile", context=tmp_path)
    trainer, plain, svc = config.users
    assert (trainer.name, trainer.uid, trainer.gid, trainer.home, trainer.shell, trainer.password,
            trainer.create_home) == ("trainer", 10001, 10001, "/home/trainer", "/bin/bash", "*", True)
    # Debian's defaults: a group of the user's name, /home/NAME, /bin/sh, a locked password
    assert (plain.uid, plain.gid, plain.home, plain.shell, plain.password, plain.create_home) == \
        (2000, 2000, "/home/plain", "/bin/sh", "!", False)
    assert svc.name == "svc" and svc.uid not in (10001, 2000)
    assert [g.name for g in config.groups] == ["trainer", "plain", "svc"]
    files = account_files(config, passwd="root:x:0:0:root:/root:/bin/bash\nold:x:2000:2000::/old:/bin/sh\n",
                          group="root:x:0:\n", shadow="root:*:19000:0:99999:7:::\n")
    passwd = files["/etc/passwd"].splitlines()
    assert passwd[0].startswith("root:") and not any(line.startswith("old:") for line in passwd)  # same uid
    assert "trainer:x:10001:10001::/home/trainer:/bin/bash" in passwd
    assert "trainer:*:19000:0:99999:7:::" in files["/etc/shadow"].splitlines()
    assert "trainer:x:10001:" in files["/etc/group"].splitlines()


def test_fs_group_makes_volume_files_the_groups(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("chown to another group needs root")
    secret = tmp_path / "secret"
    (secret / "sub").mkdir(parents=True)
    (secret / "id_ed25519").write_text("key")
    os.chmod(secret / "id_ed25519", 0o400)
    set_ownership(secret, 10001, read_only=True)
    key = (secret / "id_ed25519").stat()
    assert (key.st_gid, stat.S_IMODE(key.st_mode)) == (10001, 0o440)  # 0400 becomes 0440, as the kubelet's
    assert stat.S_IMODE((secret / "sub").stat().st_mode) & (stat.S_ISGID | 0o050) == stat.S_ISGID | 0o050
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "f").write_text("x")
    os.chmod(scratch / "f", 0o600)
    set_ownership(scratch, 10001, read_only=False)
    assert stat.S_IMODE((scratch / "f").stat().st_mode) == 0o660


def test_line_times_are_fixed_once_given() -> None:
    times = LineTimes()
    reader = LineReader(times)
    assert [line for _, line in reader.feed(b"a\nb\npart")] == [b"a\n", b"b\n"]
    first = list(times.times)
    again = LineReader(times)
    lines = again.feed(b"a\nb\npartial\n")
    assert times.times[:2] == first and len(times.times) == 3
    assert render(lines, times, timestamps=False, since=times.times[2]) == b"partial\n"
    stamped = render(lines[:1], times, timestamps=True, since=None)
    assert stamped.endswith(b" a\n") and parse_time(stamped.split(b" ")[0].decode()) == times.times[0]
    assert format_time(1795317448 * 10**9 + 5) == b"2026-11-22T03:17:28.000000005Z"


def test_a_download_added_from_a_url_is_not_a_build_context_file(tmp_path: Path) -> None:
    (tmp_path / "app.sh").write_text("echo hi\n")
    text = """\
FROM scratch AS fetched
ADD --checksum=sha256:0000000000000000000000000000000000000000000000000000000000000000 \\
    https://example.com/tool.tar.gz /tool.tar.gz
FROM ubuntu:22.04
ADD https://example.com/other.tar.gz /opt/
COPY app.sh /opt/app.sh
"""
    config = parse_dockerfile(text, name="x", dockerfile=tmp_path / "Dockerfile", context=tmp_path)
    assert [(f.source.name, f.dest) for f in config.files] == [("app.sh", "/opt/app.sh")]
