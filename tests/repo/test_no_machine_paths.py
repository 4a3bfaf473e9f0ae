"""No tracked file names a path of one machine: this checkout, its virtual environment, the interpreter's
installation, or a home directory. A test that finds its interpreter at an absolute path into one
checkout's `.venv` passes where that path exists and fails on every other clone; the suite finds the
interpreter and the project from where it runs (`sys.executable`, the package's location)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# absolute paths into an environment, on any machine: a checkout's venv, pyenv, a site-packages
GENERIC = re.compile(r"(?<![\w.~$}])(/[\w.+-]+){2,}/(\.venv|venv|\.pyenv|site-packages|dist-packages)/")


def _machine_paths() -> list[str]:
    paths = {str(REPO), os.path.realpath(REPO), sys.prefix, sys.base_prefix, os.path.realpath(sys.prefix)}
    home = os.path.expanduser("~")
    if home.count("/") >= 2:  # /home/someone: a user's home; /root is also a path inside every image
        paths.add(home)
    # short system paths (/usr, /opt) would match container paths the project names on purpose
    return sorted(p for p in paths if p.count("/") >= 2)


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    files = [REPO / name for name in listed.decode().split("\0") if name]
    return [f for f in files if f.is_file() and f.suffix not in (".png", ".jpg", ".gz")]


def offending_lines(text: str, machine_paths: list[str]) -> list[str]:
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        hits = [p for p in machine_paths if p in line]
        match = GENERIC.search(line)
        if hits or match:
            found.append(f"{number}: {(hits or [match.group(0) if match else ''])[0]}")
    return found


def test_the_guard_sees_a_machine_path() -> None:
    venv_path = "/" + "/".join(("home", "someone", "checkout", ".venv", ""))  # not one literal: see above
    assert offending_lines(f'PY = "{venv_path}bin/python"\n', []) == [f"1: {venv_path}"]
    assert offending_lines(f"cd {REPO}/src\n", [str(REPO)]) == [f"1: {REPO}"]
    # paths inside images and relative venv paths are what the project names on purpose
    assert offending_lines("COPY --from=framework /opt/venv /opt/venv\n.venv/bin/pytest tests\n"
                           "ENV PATH=/opt/venv/bin:$PATH\n/root/.ssh/id_ed25519\n$(VENV)/bin/pip\n", []) == []


def test_no_tracked_file_names_a_path_of_this_machine() -> None:
    machine = _machine_paths()
    problems = {}
    for path in _tracked_text_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        lines = offending_lines(text, machine)
        if lines:
            problems[str(path.relative_to(REPO))] = lines[:5]
    assert not problems, (f"tracked files name paths of this machine ({', '.join(machine)}); find them from "
                          f"where the code runs instead: {problems}")
