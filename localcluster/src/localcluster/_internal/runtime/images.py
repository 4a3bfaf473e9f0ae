"""How an image name becomes local files for the process runtime (there is no image engine and no registry).

The cluster knows only the images its `ImageMap` names; every other image fails to pull, as it would on a
node that cannot reach a registry holding it (`ErrImagePull`, then `ImagePullBackOff`). The map is given by
whoever starts the cluster (`ClusterSpec(images=...)`, `localcluster up --images FILE`); by default it is
empty. Each entry matches the image's repository path (registry host, tag and digest dropped; first match
wins) and says what the image is:

- *a Dockerfile* and its build context: its COPY/ADD lines say which files of the context appear at which
  path inside the container, and its ENV, WORKDIR, USER, ENTRYPOINT and CMD are the container's defaults.
  RUN steps are not run: the environment the cluster runs in (the venv whose bin/ is first on every pod's
  PATH) holds what they install; only the accounts they create (`groupadd`, `useradd`: name, uid, gid, home,
  shell, password field) are kept, for the runtime to add to the container's /etc/passwd, /etc/group and
  /etc/shadow (`account_files`) and to make the home directory. `FROM` another mapped image, or a stage
  named earlier in the same file, inherits its files and settings.
- *the host's own files* (`host: true`): no files are added and the container's command runs against the
  host's filesystem, with the venv first on PATH (`busybox`, `python:3.11-slim`: their commands are the
  host's).

A map file (YAML; paths relative to the file):

    images:
      - pattern: "*team/trainer*"       # fnmatch on the repository path (registry.example.com/team/trainer:1)
        dockerfile: ../trainer/Dockerfile
        context: ..                        # default: the Dockerfile's directory
      - pattern: busybox
        host: true
"""

from __future__ import annotations

import fnmatch
import glob
import json
import os
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from localcluster._internal.apimachinery.durations import parse_duration
from localcluster._internal.apimachinery.quantity import parse_quantity
from localcluster._internal.errors import InvalidInput, InvalidQuantity

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_RM = re.compile(r"\brm\s+((?:-[a-zA-Z]+\s+)*)([^&|;]+)")


class ImageNotFound(Exception):
    """An image the cluster's image map does not name: the pull a real node would try fails."""

    def __init__(self, image: str) -> None:
        super().__init__(f'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": not '
                         "found in the local cluster's image map (map it to a Dockerfile or to the host's "
                         "files: ClusterSpec(images=...), localcluster up --images FILE)")
        self.image = image


@dataclass(frozen=True)
class ImageFile:
    """One COPY/ADD source: `source` (a file or directory on the host) appears at `dest` in the container.
    A directory source copies its contents into dest, as Docker does."""

    source: Path
    dest: str
    mode: int | None = None


@dataclass(frozen=True)
class ImageGroup:
    name: str
    gid: int


@dataclass(frozen=True)
class ImageUser:
    """An account a RUN step creates (useradd), with Debian's defaults for what it does not say."""

    name: str
    uid: int
    gid: int
    home: str
    shell: str = "/bin/sh"
    password: str = "!"      # useradd without --password: a locked account
    create_home: bool = False


@dataclass(frozen=True)
class ImageConfig:
    name: str
    dockerfile: Path | None = None          # None: the host's own files
    files: tuple[ImageFile, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    workdir: str = ""
    user: str = ""                           # USER: `uid[:gid]` or a name; "" is root
    users: tuple[ImageUser, ...] = ()        # accounts RUN steps create
    groups: tuple[ImageGroup, ...] = ()

    @property
    def is_host_image(self) -> bool:
        return self.dockerfile is None


@dataclass(frozen=True)
class ImageMapping:
    """Images whose repository path matches `pattern` (fnmatch, e.g. `*team/trainer*`): built from
    `dockerfile` with `context` as the build context (default: the Dockerfile's directory), or, without a
    dockerfile, the host's own files (`ImageMapping.host("busybox")`)."""

    pattern: str
    dockerfile: Path | None = None
    context: Path | None = None
    pull_time: float | None = None     # seconds its first pull takes on a node (None: it is preloaded)
    size: int = 0                      # bytes, as the kubelet's Pulled event reports it

    @staticmethod
    def host(pattern: str) -> ImageMapping:
        return ImageMapping(pattern)

    @property
    def is_host(self) -> bool:
        return self.dockerfile is None

    @property
    def build_context(self) -> Path | None:
        if self.dockerfile is None:
            return None
        return self.context or self.dockerfile.parent


_ENTRY_KEYS = {"pattern", "dockerfile", "context", "host", "pull_time", "size"}


@dataclass(frozen=True)
class ImageMap:
    """The images a cluster can run, first match wins; empty: none (every pull fails)."""

    mappings: tuple[ImageMapping, ...] = field(default_factory=tuple)

    @staticmethod
    def load(path: Path | str) -> ImageMap:
        """A map file (YAML, see the module's docstring); relative paths are relative to the file.
        Raises InvalidInput naming the file and the entry when it cannot be used."""
        path = Path(path)
        try:
            document = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as e:
            raise InvalidInput(f"image map {path}: cannot be read ({e})") from e
        return ImageMap.from_document(document, base=path.resolve().parent, source=str(path))

    @staticmethod
    def from_document(document: Any, *, base: Path, source: str = "the image map") -> ImageMap:
        """The map a parsed document (`{"images": [{"pattern": ..., ...}, ...]}`) describes."""
        entries = document.get("images") if isinstance(document, dict) else None
        if not isinstance(entries, list) or set(document) != {"images"}:
            raise InvalidInput(f"{source}: expected one key, `images`, holding a list of entries")
        mappings = []
        for number, entry in enumerate(entries, start=1):
            where = f"{source}, image {number}"
            pattern = entry.get("pattern") if isinstance(entry, dict) else None
            if not isinstance(pattern, str) or not pattern:
                raise InvalidInput(f"{where}: expected a mapping with a `pattern` (e.g. pattern: busybox)")
            unknown = sorted(set(entry) - _ENTRY_KEYS)
            if unknown:
                raise InvalidInput(f"{where} ({pattern}): unknown key(s) {', '.join(unknown)}; "
                                   f"expected {', '.join(sorted(_ENTRY_KEYS))}")
            host = entry.get("host", False)
            dockerfile = entry.get("dockerfile")
            if host is not True and host is not False:
                raise InvalidInput(f"{where} ({pattern}): host must be true or false, not {host!r}")
            if host == (dockerfile is not None) or not isinstance(dockerfile, str | None):
                raise InvalidInput(f"{where} ({pattern}): give either `dockerfile: PATH` or "
                                   "`host: true`")
            if host and "context" in entry:
                raise InvalidInput(f"{where} ({pattern}): a host image has no build context")
            context = entry.get("context")
            if context is not None and not isinstance(context, str):
                raise InvalidInput(f"{where} ({pattern}): context must be a path")
            pull_time = (parse_duration(str(entry["pull_time"]), what=f"{where} ({pattern}): pull_time")
                         if entry.get("pull_time") is not None else None)
            size = parse_size(entry.get("size", 0), what=f"{where} ({pattern})")
            mappings.append(ImageMapping(
                pattern, dockerfile=(base / dockerfile).resolve() if dockerfile else None,
                context=(base / context).resolve() if context else None, pull_time=pull_time, size=size))
        return ImageMap(tuple(mappings))

    def pull_times(self) -> tuple[tuple[str, float, int], ...]:
        """(pattern, seconds, size) of the entries with a `pull_time`, in order."""
        return tuple((m.pattern, m.pull_time, m.size) for m in self.mappings if m.pull_time is not None)

    @property
    def build_contexts(self) -> tuple[Path, ...]:
        """The directories the mapped Dockerfiles build from, once each."""
        found = (m.build_context for m in self.mappings)
        return tuple(dict.fromkeys(c for c in found if c is not None))

    def lookup(self, image: str) -> ImageMapping | None:
        path = image_path(image)
        return next((m for m in self.mappings if fnmatch.fnmatchcase(path, m.pattern)), None)

    def resolve(self, image: str, *, _seen: frozenset[str] = frozenset()) -> ImageConfig:
        """The image's files and defaults. Raises ImageNotFound for an image the map does not name, and
        InvalidInput for a mapped Dockerfile that cannot be read or used."""
        mapping = self.lookup(image)
        if mapping is None:
            raise ImageNotFound(image)
        if mapping.dockerfile is None:
            return ImageConfig(name=image)
        if str(mapping.dockerfile) in _seen:
            raise InvalidInput(f"image {image}: {mapping.dockerfile} inherits from itself through FROM")
        try:
            text = mapping.dockerfile.read_text()
        except OSError as e:
            raise InvalidInput(f"image {image} maps to {mapping.dockerfile}, which cannot be read ({e}); "
                               "create it or change the local cluster's image map") from e
        context = mapping.build_context or mapping.dockerfile.parent
        seen = _seen | {str(mapping.dockerfile)}
        return parse_dockerfile(text, name=image, dockerfile=mapping.dockerfile, context=context,
                                parent=lambda ref: self._base(ref, seen))

    def _base(self, ref: str, seen: frozenset[str]) -> ImageConfig | None:
        """A FROM image: mapped, its files and settings; not mapped (debian, python:3.11-slim), none."""
        return self.resolve(ref, _seen=seen) if self.lookup(ref) is not None else None


def parse_size(value: Any, *, what: str) -> int:
    """An image size in bytes: a number, or a quantity (7Gi, 6.5G); InvalidInput naming `what` otherwise."""
    try:
        size = parse_quantity(str(value))
    except InvalidQuantity:
        raise InvalidInput(f"{what}: size {value!r} is not a quantity (bytes, or like 7Gi)") from None
    if size < 0:
        raise InvalidInput(f"{what}: size {value!r} is negative")
    return int(size)


def image_path(image: str) -> str:
    """`registry.example.com:5000/team/train:1.0@sha256:...` -> `team/train`."""
    ref = image.split("@", 1)[0]
    parts = ref.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = parts[1:]
    last = parts[-1].split(":", 1)[0]
    return "/".join([*parts[:-1], last])


_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::([-+])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def substitute(text: str, variables: Mapping[str, str]) -> str:
    """Dockerfile variable expansion: $V, ${V}, ${V:-default}, ${V:+alternative}."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(4)
        value = variables.get(name, "")
        if m.group(2) == "-":
            return value or m.group(3)
        if m.group(2) == "+":
            return m.group(3) if value else ""
        return value

    return _VAR.sub(one, text)


def logical_lines(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        line = (pending + stripped).strip()
        pending = ""
        if line:
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    if pending.strip():
        word, _, rest = pending.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def _exec_form(arguments: str) -> tuple[str, ...]:
    if arguments.startswith("["):
        try:
            value = json.loads(arguments)
        except ValueError:
            value = None
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
    return ("/bin/sh", "-c", arguments)


def _env_pairs(arguments: str) -> list[tuple[str, str]]:
    words = shlex.split(arguments)
    if words and "=" not in words[0]:
        return [(words[0], arguments.split(None, 1)[1] if len(words) > 1 else "")]
    return [(k, v) for k, _, v in (w.partition("=") for w in words)]


def _copy_args(arguments: str) -> tuple[dict[str, str], list[str]]:
    if arguments.lstrip().startswith("["):
        flags: dict[str, str] = {}
        words = json.loads(arguments)
    else:
        words = shlex.split(arguments)
        flags = {}
        while words and words[0].startswith("--"):
            key, _, value = words.pop(0)[2:].partition("=")
            flags[key] = value
    return flags, [str(w) for w in words]


def _container_path(path: str, workdir: str) -> str:
    return str(PurePosixPath(workdir or "/", path)) if not path.startswith("/") else path


def parse_dockerfile(text: str, *, name: str, dockerfile: Path, context: Path,
                     parent: Callable[[str], ImageConfig | None] | None = None) -> ImageConfig:
    """The last stage's files and defaults. `FROM` a stage named earlier in the file (`FROM runtime AS base`
    after `... AS runtime`; names are case-insensitive, as Docker's) starts from that stage's files and
    settings, as a multi-stage build does; `parent(ref)` resolves other FROM images (None: an image the map
    does not name, of which nothing is inherited). COPY --from (files of another stage or image) and ADD of
    a URL are not emulated and ignored."""
    config = ImageConfig(name=name, dockerfile=dockerfile)
    args: dict[str, str] = {}
    env: dict[str, str] = {}
    files: list[ImageFile] = []
    removed: list[str] = []  # paths a RUN deletes: build inputs such as /tmp/pkg, not part of the image
    stages: dict[str, ImageConfig] = {}  # each named stage as it ended
    stage = ""
    for instruction, arguments in logical_lines(text):
        scope = {**args, **env}
        if instruction == "ARG":
            key, _, default = arguments.partition("=")
            args.setdefault(key.strip(), default.strip().strip('"'))
        elif instruction == "FROM":
            if stage:
                stages[stage] = _without(config, removed)
            words = [w for w in substitute(arguments, args).split() if not w.startswith("--")]
            stage = words[2].lower() if len(words) >= 3 and words[1].lower() == "as" else ""
            ref = words[0] if words else ""
            base = stages.get(ref.lower()) or (parent(ref) if parent is not None and ref else None)
            config = ImageConfig(name=name, dockerfile=dockerfile, env=(("PATH", DEFAULT_PATH),)) \
                if base is None or base.is_host_image else replace(base, name=name, dockerfile=dockerfile)
            env = dict(config.env)
            files = list(config.files)
            removed = []
        elif instruction == "RUN":
            for m in _RM.finditer(substitute(arguments, scope)):
                removed.extend(w.rstrip("/") for w in m.group(2).split() if w.startswith("/"))
            config = _with_accounts(config, substitute(arguments, scope))
        elif instruction == "ENV":
            for key, value in _env_pairs(arguments):
                env[key] = substitute(value, {**args, **env})
            config = replace(config, env=tuple(env.items()))
        elif instruction == "WORKDIR":
            config = replace(config, workdir=_container_path(substitute(arguments, scope), config.workdir))
        elif instruction == "ENTRYPOINT":
            # Docker: setting ENTRYPOINT resets a CMD inherited from the base image
            config = replace(config, entrypoint=_exec_form(arguments), cmd=())
        elif instruction == "CMD":
            config = replace(config, cmd=_exec_form(arguments))
        elif instruction == "USER":
            config = replace(config, user=substitute(arguments, scope).strip())
        elif instruction in ("COPY", "ADD"):
            flags, words = _copy_args(substitute(arguments, scope))
            if "from" in flags or len(words) < 2:
                continue
            if instruction == "ADD" and any("://" in w for w in words[:-1]):
                continue  # a download (ADD URL): nothing of the build context, and no registry here
            mode = int(flags["chmod"], 8) if flags.get("chmod", "").isdigit() else None
            dest = _container_path(words[-1], config.workdir)
            sources = [s for w in words[:-1]
                       for s in sorted(glob.glob(str(context / w))) or [str(context / w)]]
            into_dir = words[-1].endswith("/") or len(sources) > 1
            for source in sources:
                src = Path(source)
                if not os.path.lexists(src):
                    raise InvalidInput(f"image {name}: {dockerfile} copies {src.relative_to(context)}, which "
                                       f"is not in its build context {context}")
                target = str(PurePosixPath(dest, src.name)) if into_dir and not src.is_dir() else dest
                files.append(ImageFile(source=src, dest=target, mode=mode))
            config = replace(config, files=tuple(files))
    return _without(config, removed)


def _without(config: ImageConfig, removed: Sequence[str]) -> ImageConfig:
    """`config` without the files a RUN of its stage deleted (`removed`: paths, and everything under them)."""
    kept = tuple(f for f in config.files
                 if not any(f.dest == r or f.dest.startswith(r + "/") for r in removed))
    return replace(config, files=kept)


_COMMANDS = re.compile(r"&&|\|\||;|\|")
# options of useradd/groupadd that take a value (the rest are flags)
_VALUED = {"-u", "--uid", "-g", "--gid", "-d", "--home-dir", "-s", "--shell", "-p", "--password", "-c",
           "--comment", "-G", "--groups", "-k", "--skel", "-K", "--key", "-e", "--expiredate", "-f",
           "--inactive", "-R", "--root", "-P", "--prefix", "-b", "--base-dir", "-Z", "--selinux-user"}


def _options(words: list[str]) -> tuple[dict[str, str], list[str]]:
    options: dict[str, str] = {}
    positional: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        key, equals, value = word.partition("=")
        if word.startswith("-") and equals and key in _VALUED:
            options[key] = value
        elif word in _VALUED and i + 1 < len(words):
            options[word] = words[i + 1]
            i += 1
        elif word.startswith("-"):
            options[word] = ""
        else:
            positional.append(word)
        i += 1
    return options, positional


def _pick(options: Mapping[str, str], *names: str) -> str | None:
    return next((options[n] for n in names if n in options), None)


def _with_accounts(config: ImageConfig, command: str) -> ImageConfig:
    """The accounts `groupadd` and `useradd` in a RUN line create, added to the image's (Debian's
    defaults: a group of the user's name, shell /bin/sh, home /home/NAME, a locked password `!`)."""
    groups, users = list(config.groups), list(config.users)
    for part in _COMMANDS.split(command):
        try:
            words = shlex.split(part)
        except ValueError:
            continue
        if not words or os.path.basename(words[0]) not in ("groupadd", "useradd"):
            continue
        options, names = _options(words[1:])
        if not names:
            continue
        name = names[-1]
        taken_gids = {g.gid for g in groups}
        if os.path.basename(words[0]) == "groupadd":
            given = _pick(options, "-g", "--gid")
            groups.append(ImageGroup(name, int(given) if given and given.isdigit()
                                     else max(taken_gids | {999}) + 1))
            continue
        uid_text = _pick(options, "-u", "--uid")
        uid = int(uid_text) if uid_text and uid_text.isdigit() else max({u.uid for u in users} | {999}) + 1
        group = _pick(options, "-g", "--gid")
        if group is None:
            if not any(g.name == name for g in groups):
                groups.append(ImageGroup(name, uid if uid not in taken_gids else max(taken_gids) + 1))
            gid = next(g.gid for g in groups if g.name == name)
        else:
            gid = int(group) if group.isdigit() else next((g.gid for g in groups if g.name == group), 0)
        users.append(ImageUser(
            name=name, uid=uid, gid=gid, home=_pick(options, "-d", "--home-dir") or f"/home/{name}",
            shell=_pick(options, "-s", "--shell") or "/bin/sh",
            password=_pick(options, "-p", "--password") or "!",
            create_home=any(o in options for o in ("-m", "--create-home"))))
    return replace(config, users=tuple(users), groups=tuple(groups))


def _merged(text: str, added: list[str], names: set[str], ids: set[str]) -> str:
    """`text`'s lines without those naming one of `names` (field 1) or `ids` (field 3), then `added`."""
    kept = [line for line in text.splitlines()
            if line.split(":")[0] not in names and [*line.split(":"), "", "", ""][2] not in ids]
    return "\n".join([*kept, *added]) + "\n"


def account_files(image: ImageConfig, *, passwd: str, group: str, shadow: str) -> dict[str, str]:
    """The container's /etc/passwd, /etc/group and /etc/shadow: the host's (the container's root is the
    host's `/`) with the image's accounts added, replacing any of the same name or id (in an image, useradd
    would have refused a duplicate)."""
    users = {u.name for u in image.users}
    return {
        "/etc/passwd": _merged(passwd,
                               [f"{u.name}:x:{u.uid}:{u.gid}::{u.home}:{u.shell}" for u in image.users],
                               users, {str(u.uid) for u in image.users}),
        "/etc/group": _merged(group, [f"{g.name}:x:{g.gid}:" for g in image.groups],
                              {g.name for g in image.groups}, {str(g.gid) for g in image.groups}),
        "/etc/shadow": _merged(shadow, [f"{u.name}:{u.password}:19000:0:99999:7:::" for u in image.users],
                               users, set()),
    }


def container_argv(image: ImageConfig, command: Sequence[str] | None,
                   args: Sequence[str] | None) -> list[str]:
    """Kubernetes rules: `command` replaces ENTRYPOINT (and drops CMD), `args` replaces CMD."""
    if command:
        return [*command, *(args or [])]
    return [*image.entrypoint, *(args if args else image.cmd)]
