"""bench/store.py: the placement runs' records are stored gzipped, read back whole, written the same for the
same numbers, and results written before (plain JSON) still read; the committed results load."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from bench import store

ROOT = Path(__file__).resolve().parents[2]


def _placement(records: list[dict[str, Any]]) -> dict[str, Any]:
    return {"records": records, "fill": [{"cluster": "C1-small"}], "series": {"C1-small": []}, "traces": 1,
            "jobs_simulated": 10}


RECORDS = [{"cluster": "C1-small", "mix": "helios", "load": 0.9, "span": "derived", "seed": 0, "policy": p,
            "metrics": {"jobs": 10, "jct_mean": 3600.0 + i}} for i, p in enumerate(("ideal", "ours"))]


def test_placement_runs_are_stored_gzipped_and_read_back_whole(tmp_path: Path) -> None:
    store.save_placement(tmp_path, _placement(RECORDS), rows=[])

    stored = tmp_path / store.RUNS_FILE
    assert json.loads(gzip.decompress(stored.read_bytes())) == RECORDS
    assert not (tmp_path / store.PLAIN_RUNS_FILE).exists()
    loaded = store.load(tmp_path).placement
    assert loaded is not None and loaded["records"] == RECORDS
    assert (loaded["traces"], loaded["jobs_simulated"]) == (1, 10)


def test_the_same_records_give_the_same_bytes(tmp_path: Path) -> None:
    """No time in the gzip header: a re-run with the same numbers leaves git nothing to store."""
    store.save_placement(tmp_path / "a", _placement(RECORDS), rows=[])
    store.save_placement(tmp_path / "b", _placement(RECORDS), rows=[])
    assert (tmp_path / "a" / store.RUNS_FILE).read_bytes() == (tmp_path / "b" / store.RUNS_FILE).read_bytes()


def test_runs_stored_as_plain_json_before_are_still_read_and_replaced_by_a_new_run(tmp_path: Path) -> None:
    store.save_placement(tmp_path, _placement(RECORDS), rows=[])
    (tmp_path / store.RUNS_FILE).unlink()
    (tmp_path / store.PLAIN_RUNS_FILE).write_text(json.dumps(RECORDS, indent=1))

    loaded = store.load(tmp_path).placement
    assert loaded is not None and loaded["records"] == RECORDS

    store.save_placement(tmp_path, _placement(RECORDS[:1]), rows=[])
    assert not (tmp_path / store.PLAIN_RUNS_FILE).exists()  # one copy of the runs, the one that is read
    again = store.load(tmp_path).placement
    assert again is not None and again["records"] == RECORDS[:1]


def test_the_committed_results_load_with_every_run_their_summary_was_made_from() -> None:
    results = store.load(ROOT / "bench" / "results")
    assert results.placement is not None
    records = results.placement["records"]
    summary = json.loads((ROOT / "bench" / "results" / "placement_summary.json").read_text())
    cells = {(r["cluster"], r["mix"], r["load"], r["span"], r["policy"]) for r in records}
    assert cells == {(r["cluster"], r["mix"], r["load"], r["span"], r["policy"]) for r in summary}
