"""Secret and ConfigMap volumes written as the kubelet's AtomicWriter writes them: the files behind `..data`,
swapped in one rename, so a reader sees the old files or the new ones, never a mix."""

from __future__ import annotations

import os
from pathlib import Path

from localcluster._internal.runtime.volumes import DATA_LINK, write_atomic


def read(directory: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in directory.iterdir() if not p.name.startswith("..")}


def test_files_are_symlinks_through_data(tmp_path: Path) -> None:
    assert write_atomic(tmp_path, {"hostfile": b"10.0.0.2 slots=5\n", "names": b"10.0.0.2 w-0\n"}, {}, 0o444)
    assert read(tmp_path) == {"hostfile": "10.0.0.2 slots=5\n", "names": "10.0.0.2 w-0\n"}
    assert os.readlink(tmp_path / "hostfile") == f"{DATA_LINK}/hostfile"
    stamp = os.readlink(tmp_path / DATA_LINK)
    assert stamp.startswith("..") and (tmp_path / stamp / "hostfile").is_file()
    assert oct((tmp_path / "hostfile").stat().st_mode & 0o777) == oct(0o444)


def test_an_update_swaps_every_file_at_once_and_removes_the_old_ones(tmp_path: Path) -> None:
    write_atomic(tmp_path, {"a": b"1", "b": b"1", "gone": b"x"}, {}, 0o644)
    first = os.readlink(tmp_path / DATA_LINK)
    assert write_atomic(tmp_path, {"a": b"2", "b": b"2"}, {"b": 0o600}, 0o644)
    assert read(tmp_path) == {"a": "2", "b": "2"}
    assert not (tmp_path / first).exists()
    assert not os.path.lexists(tmp_path / "gone")  # a key the update dropped
    assert oct((tmp_path / "b").stat().st_mode & 0o777) == oct(0o600)
    dots = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".."))
    assert dots == sorted([DATA_LINK, os.readlink(tmp_path / DATA_LINK)])


def test_the_same_content_is_not_written_again(tmp_path: Path) -> None:
    write_atomic(tmp_path, {"a": b"1", "dir/b": b"2"}, {}, 0o644)
    stamp = os.readlink(tmp_path / DATA_LINK)
    assert not write_atomic(tmp_path, {"a": b"1", "dir/b": b"2"}, {}, 0o644)
    assert os.readlink(tmp_path / DATA_LINK) == stamp
    assert (tmp_path / "dir" / "b").read_text() == "2"  # a nested item, through its top-level link
