"""The kubelet's image manager as the runtimes model it: image references (InvalidImageName), presence per
node, pull times, the events' exact words, the back-off after failed pulls (runtime/imagepulls.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from localcluster import ImageMap, InvalidInput, PullTime
from localcluster._internal.cluster.spec import ClusterSpec, pull_settings
from localcluster._internal.runtime.imagepulls import ImageManager, PullSettings
from localcluster._internal.runtime.imageref import InvalidReference, default_tagged, invalid_name_message

Event = tuple[str, str, bool]


@pytest.mark.parametrize(("image", "tagged"), [
    ("busybox", "busybox:latest"),
    ("busybox:1.36", "busybox:1.36"),
    ("registry.example.com:5000/team/train:1.0", "registry.example.com:5000/team/train:1.0"),
    ("localhost/x", "localhost/x:latest"),
    ("x@sha256:" + "a" * 64, "x@sha256:" + "a" * 64),
    ("UPPER.io/team/x:1", "UPPER.io/team/x:1"),       # an upper-case registry host is a host
])
def test_references_get_the_default_tag_only_without_tag_or_digest(image: str, tagged: str) -> None:
    assert default_tagged(image) == tagged


@pytest.mark.parametrize(("image", "why"), [
    # distribution/reference v0.6's words, as kubelets since v1.30 print them
    ("DUMMY_IMAGE:TEST", "invalid reference format: repository name (library/DUMMY_IMAGE) must be lowercase"),
    ("team/App:1", "invalid reference format: repository name (team/App) must be lowercase"),
    ("train@sha256:", "invalid reference format"),
    ("my image", "invalid reference format"),
    ("x:", "invalid reference format"),
    ("x@md5:" + "a" * 32, "unsupported digest algorithm"),
    ("e" * 64, f"invalid repository name ({'e' * 64}), cannot specify 64-byte hexadecimal strings"),
])
def test_invalid_references_fail_with_the_kubelets_message(image: str, why: str) -> None:
    with pytest.raises(InvalidReference) as caught:
        default_tagged(image)
    assert invalid_name_message(image, caught.value) == (
        f'Failed to apply default image tag "{image}": couldn\'t parse image reference "{image}": {why}')


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def manager(settings: PullSettings, clock: Clock | None = None, **kw: object) -> ImageManager:
    return ImageManager(settings, clock=clock or Clock(), **kw)  # type: ignore[arg-type]


def ensure(images: ImageManager, image: str, *, node: str = "node-1", pod: str = "uid-1",
           policy: str = "IfNotPresent") -> tuple[tuple[bool, str, str], list[Event]]:
    events: list[Event] = []

    async def record(event: Event) -> None:
        events.append(event)

    async def run() -> tuple[bool, str, str]:
        outcome = await images.ensure(node=node, pod_uid=pod, image=image, policy=policy, record=record)
        return outcome.ok, outcome.reason, outcome.message

    return asyncio.run(run()), events


def test_an_image_without_a_pull_time_is_on_every_node_already() -> None:
    images = manager(PullSettings())
    assert ensure(images, "nginx:1.25") == ((True, "", ""), [
        ("Pulled", 'Container image "nginx:1.25" already present on machine and can be accessed by the pod',
         False)])


def test_always_pulls_even_a_present_image_and_the_pull_is_instant() -> None:
    images = manager(PullSettings())
    assert ensure(images, "busybox", policy="Always") == ((True, "", ""), [
        ("Pulling", 'Pulling image "busybox"', False),
        ("Pulled", 'Successfully pulled image "busybox" in 0s (0s including waiting). Image size: 0 bytes.',
         False)])


def test_the_first_pull_on_a_node_takes_its_time_and_later_ones_find_it_present() -> None:
    images = ImageManager(PullSettings(times=(PullTime("team/big", 0.2, 7 * 2**30),)))
    (ok, _, _), events = ensure(images, "registry.example.com/team/big:2.0")
    assert ok and events[0] == ("Pulling", 'Pulling image "registry.example.com/team/big:2.0"', False)
    reason, message, warning = events[1]
    assert (reason, warning) == ("Pulled", False)
    assert message.startswith('Successfully pulled image "registry.example.com/team/big:2.0" in 2')
    assert message.endswith("including waiting). Image size: 7516192768 bytes.")
    assert ensure(images, "registry.example.com/team/big:2.0", pod="uid-2")[1] == [
        ("Pulled", 'Container image "registry.example.com/team/big:2.0" already present on machine and can '
                   "be accessed by the pod", False)]
    # another node has not pulled it
    assert ensure(images, "registry.example.com/team/big:2.0", node="node-2")[1][0][0] == "Pulling"
    assert images.present("node-2", "registry.example.com/team/big:2.0")
    assert not images.present("node-3", "registry.example.com/team/big:2.0")


def test_a_missing_image_fails_then_backs_off_doubling_as_the_kubelets_image_backoff() -> None:
    clock = Clock()
    images = manager(PullSettings(missing=("team/typo",)), clock)
    error = ('rpc error: code = NotFound desc = failed to pull and unpack image "docker.io/team/typo:1": '
             'failed to resolve reference "docker.io/team/typo:1": docker.io/team/typo:1: not found')
    first = ensure(images, "team/typo:1")
    assert first == ((False, "ErrImagePull", error), [
        ("Pulling", 'Pulling image "team/typo:1"', False),
        ("Failed", f'Failed to pull image "team/typo:1": {error}', True),
        ("Failed", "Error: ErrImagePull", True)])
    clock.now += 9.9
    backing_off = ensure(images, "team/typo:1")
    assert backing_off == ((False, "ImagePullBackOff", f'Back-off pulling image "team/typo:1": ErrImagePull: '
                                                       f"{error}"), [
        ("BackOff", 'Back-off pulling image "team/typo:1"', False),
        ("Failed", "Error: ImagePullBackOff", True)])
    delays = []
    for _ in range(7):  # after each failed pull: in back-off until the delay is over, then a new pull
        start = clock.now
        while ensure(images, "team/typo:1")[0][1] == "ImagePullBackOff":
            clock.now += 1
        delays.append(round(clock.now - start))
    assert delays == [1, 20, 40, 80, 160, 300, 300]   # 10 s doubling to 300 s (the first wait began at 9.9)
    # another pod has its own back-off
    assert ensure(images, "team/typo:1", pod="uid-2")[0][1] == "ErrImagePull"


def test_never_refuses_an_absent_image_and_invalid_names_never_pull() -> None:
    images = manager(PullSettings(times=(PullTime("team/big", 60.0),)))
    assert ensure(images, "team/big:1", policy="Never") == (
        (False, "ErrImageNeverPull", 'Container image "team/big:1" is not present with pull policy of Never'),
        [("ErrImageNeverPull", 'Container image "team/big:1" is not present with pull policy of Never', True),
         ("Failed", "Error: ErrImageNeverPull", True)])
    # an upper-case first component is taken for a registry host (splitDockerDomain): the name is `Big`
    message = ('Failed to apply default image tag "Team/Big:1": couldn\'t parse image reference '
               '"Team/Big:1": invalid reference format: repository name (Big) must be lowercase')
    assert ensure(images, "Team/Big:1") == ((False, "InvalidImageName", message), [
        ("InspectFailed", message, True), ("Failed", "Error: InvalidImageName", True)])


def test_pulls_on_a_node_wait_for_each_other_and_count_the_wait() -> None:
    images = ImageManager(PullSettings(times=(PullTime("team/a", 0.3), PullTime("team/b", 0.3))))
    events: list[Event] = []

    async def record(event: Event) -> None:
        events.append(event)

    async def both() -> None:
        await asyncio.gather(
            images.ensure(node="n", pod_uid="p1", image="team/a:1", policy="IfNotPresent", record=record),
            images.ensure(node="n", pod_uid="p2", image="team/b:1", policy="IfNotPresent", record=record))

    asyncio.run(both())
    second = next(m for r, m, _ in events if r == "Pulled" and "team/b" in m)
    pulling, total = second.split(" in ", 1)[1].split(" including waiting")[0].split(" (")
    assert pulling.startswith("3") and total.startswith("6")   # 300ms pulling, 600ms with the wait


def test_the_cluster_spec_and_the_image_map_give_pull_times(tmp_path: Path) -> None:
    (tmp_path / "map.yaml").write_text("images:\n  - pattern: '*trainer*'\n    host: true\n"
                                       "    pull_time: 3m\n    size: 7Gi\n")
    spec = ClusterSpec(images=ImageMap.load(tmp_path / "map.yaml"), pull_times=(PullTime("team/base", 1.0),),
                       missing_images=("team/typo",))
    settings = pull_settings(spec)
    assert settings.times == (PullTime("team/base", 1.0), PullTime("*trainer*", 180.0, 7 * 2**30))
    assert settings.time_for("registry.example.com/ml/trainer:2") == PullTime("*trainer*", 180.0, 7 * 2**30)
    assert settings.time_for("busybox") is None and settings.is_missing("team/typo:1")
    assert PullTime.parse("distributetrain/base=180s") == PullTime("distributetrain/base", 180.0)
    assert PullTime.parse("*trainer*=3m,7Gi") == PullTime("*trainer*", 180.0, 7 * 2**30)
    for bad in ("distributetrain/base", "=3m", "x=soon", "x=3m,lots"):
        with pytest.raises(InvalidInput, match="--pull-time"):
            PullTime.parse(bad)
