"""Image references as the kubelet reads them before pulling (pkg/kubelet/images/image_manager.go
`applyDefaultImageTag`, pkg/util/parsers `ParseImageName`, v1.37), with the grammar and the words of
github.com/distribution/reference v0.6 (`ParseNormalizedNamed`, regexp.go) and go-digest. Pure.

The API server accepts any image string without surrounding spaces; a string that is no reference fails only
on the node, as `InvalidImageName`: `Failed to apply default image tag "Ubuntu:22.04": couldn't parse image
reference "Ubuntu:22.04": invalid reference format: repository name (library/Ubuntu) must be lowercase`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = _ALNUM + r"(?:" + _SEPARATOR + _ALNUM + r")*"
_REMOTE_NAME = _PATH_COMPONENT + r"(?:/" + _PATH_COMPONENT + r")*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_NAME = _DOMAIN_COMPONENT + r"(?:\." + _DOMAIN_COMPONENT + r")*"
_HOST = r"(?:" + _DOMAIN_NAME + r"|\[(?:[a-fA-F0-9:]+)\])"
_DOMAIN_AND_PORT = _HOST + r"(?::[0-9]+)?"
_NAME = r"(?:" + _DOMAIN_AND_PORT + r"/)?" + _REMOTE_NAME
_TAG = r"[0-9A-Za-z_][0-9A-Za-z_.-]{0,127}"     # Go's \w is ASCII
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][0-9a-fA-F]{32,}"
_REFERENCE = re.compile(r"^(" + _NAME + r")(?::(" + _TAG + r"))?(?:@(" + _DIGEST + r"))?$")
_NAME_PARTS = re.compile(r"^(?:(" + _DOMAIN_AND_PORT + r")/)?(" + _REMOTE_NAME + r")$")
_IDENTIFIER = re.compile(r"^[a-f0-9]{64}$")
_DIGEST_ANCHORED = re.compile(r"^" + _DIGEST + r"$")
# go-digest's algorithms a kubelet has registered, and the length of their hex digests
_ALGORITHMS = {"sha256": 64, "sha384": 96, "sha512": 128}
_NAME_TOTAL_LENGTH_MAX = 255
DEFAULT_TAG = "latest"


class InvalidReference(ValueError):
    """Not an image reference; the message is distribution/reference's."""


@dataclass(frozen=True)
class Reference:
    domain: str
    path: str
    tag: str = ""
    digest: str = ""

    @property
    def name(self) -> str:
        return f"{self.domain}/{self.path}"

    def __str__(self) -> str:
        return self.name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


def _split_docker_domain(name: str) -> tuple[str, str]:
    maybe_domain, slash, maybe_remote = name.partition("/")
    if not slash:
        return "docker.io", "library/" + name
    if maybe_domain == "localhost" or any(c in maybe_domain for c in ".:") or \
            maybe_domain.lower() != maybe_domain:
        domain, remote = maybe_domain, maybe_remote
    elif maybe_domain == "index.docker.io":
        domain, remote = "docker.io", maybe_remote
    else:
        domain, remote = "docker.io", name
    if domain == "index.docker.io":
        domain = "docker.io"
    if domain == "docker.io" and "/" not in remote:
        remote = "library/" + remote
    return domain, remote


def _check_digest(digest: str) -> None:
    algorithm, _, encoded = digest.partition(":")
    if not algorithm or not encoded:
        raise InvalidReference("invalid checksum digest format")
    if algorithm not in _ALGORITHMS:
        if not _DIGEST_ANCHORED.match(digest):
            raise InvalidReference("invalid checksum digest format")
        raise InvalidReference("unsupported digest algorithm")
    if len(encoded) != _ALGORITHMS[algorithm]:
        raise InvalidReference("invalid checksum digest length")
    if not re.fullmatch(r"[a-f0-9]+", encoded):
        raise InvalidReference("invalid checksum digest format")


def _parse(text: str) -> Reference:
    """distribution/reference `Parse`."""
    if not text:
        raise InvalidReference("repository name must have at least one component")
    match = _REFERENCE.match(text)
    if match is None:
        lowered = text.lower()
        if lowered != text and _REFERENCE.match(lowered):
            raise InvalidReference("repository name must be lowercase")
        raise InvalidReference("invalid reference format")
    name, tag, digest = match.group(1), match.group(2) or "", match.group(3) or ""
    parts = _NAME_PARTS.match(name)
    domain, path = (parts.group(1) or "", parts.group(2)) if parts else ("", name)
    if len(path) > _NAME_TOTAL_LENGTH_MAX:
        raise InvalidReference(f"repository name must not be more than {_NAME_TOTAL_LENGTH_MAX} characters")
    if digest:
        _check_digest(digest)
    return Reference(domain, path, tag, digest)


def parse_normalized(image: str) -> Reference:
    """distribution/reference `ParseNormalizedNamed`: `busybox` is docker.io/library/busybox."""
    if _IDENTIFIER.match(image):
        raise InvalidReference(f"invalid repository name ({image}), cannot specify 64-byte hexadecimal "
                               "strings")
    domain, remainder = _split_docker_domain(image)
    remote = remainder.split(":", 1)[0]
    if remote.lower() != remote:
        raise InvalidReference(f"invalid reference format: repository name ({remote}) must be lowercase")
    return _parse(f"{domain}/{remainder}")


def default_tagged(image: str) -> str:
    """The kubelet's `applyDefaultImageTag`: the image as written, with `:latest` added when it names neither
    a tag nor a digest. Raises InvalidReference with the kubelet's `couldn't parse image reference ...`."""
    try:
        ref = parse_normalized(image)
    except InvalidReference as error:
        raise InvalidReference(f"couldn't parse image reference {_quoted(image)}: {error}") from None
    tag = ref.tag or ("" if ref.digest else DEFAULT_TAG)
    if not ref.digest and tag and not image.endswith(":" + tag):
        return f"{image}:{tag}"
    return image


def _quoted(text: str) -> str:
    """Go's %q of a plain string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def invalid_name_message(image: str, error: InvalidReference) -> str:
    """The kubelet's InvalidImageName message (and its InspectFailed event)."""
    return f"Failed to apply default image tag {_quoted(image)}: {error}"


def fully_qualified(image: str) -> str:
    """`busybox:1.36` -> `docker.io/library/busybox:1.36`, as containerd names what it pulls."""
    ref = parse_normalized(image)
    tag = ref.tag or ("" if ref.digest else DEFAULT_TAG)
    return ref.name + (f":{tag}" if tag else "") + (f"@{ref.digest}" if ref.digest else "")
