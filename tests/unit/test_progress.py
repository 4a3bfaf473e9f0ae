"""The progress line (progress.py): what a script prints and what the manager reads from the chief's log."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distributetrain.observe import progress
from distributetrain.observe.progress import Progress


def test_the_line_train_py_prints_after_an_epoch() -> None:
    line = (b"[0]<stdout>:dt-progress epoch=3/20 step=120 accuracy=0.8800 loss=0.4100 val_accuracy=0.9000 "
            b"val_loss=0.3000 steps_per_s=35.2")
    assert progress.parse(line) == Progress(epoch=3, epochs=20, step=120, loss=0.41, accuracy=0.88,
                                            steps_per_s=35.2,
                                            extra=(("val_accuracy", 0.9), ("val_loss", 0.3)))
    assert progress.text(progress.parse(line) or Progress()) == (
        "epoch 3 of 20, step 120, loss 0.4100, accuracy 0.8800, 35.2 steps/s")


@pytest.mark.parametrize(("line", "expected"), [
    ("dt-progress epoch=0/20 step=1", Progress(epoch=0, epochs=20, step=1)),
    ("dt-progress step=5", Progress(step=5)),
    ("dt-progress epoch=7", Progress(epoch=7)),
    ("dt-progress", Progress()),
    ("  dt-progress loss=1e-3  ", Progress(loss=0.001)),
])
def test_every_field_is_optional(line: str, expected: Progress) -> None:
    assert progress.parse(line) == expected


@pytest.mark.parametrize("line", [
    "epoch=3 accuracy=0.9 loss=0.1",            # the older epoch line is not a progress line
    "xdt-progress step=1",                      # the marker must stand alone
    "dt-progress epoch=21/20",                  # more epochs done than there are
    "dt-progress epoch=three",
    "dt-progress step=1.5",
    "dt-progress loss=nan",
    "dt-progress loss",
    "dt-progress step=1 step=2",
    "dt-progress Loss=0.1",
    "dt-progressing step=1",
])
def test_a_malformed_line_is_no_progress(line: str) -> None:
    assert progress.parse(line) is None


def test_a_later_line_keeps_what_it_does_not_repeat() -> None:
    first = progress.parse("dt-progress epoch=1/3 step=7 loss=0.9 val_loss=0.8") or Progress()
    later = progress.parse("dt-progress step=8 val_loss=0.7") or Progress()
    assert progress.merge(first, later) == Progress(epoch=1, epochs=3, step=8, loss=0.9,
                                                     extra=(("val_loss", 0.7),))


def test_the_launcher_starting_the_users_command() -> None:
    assert progress.LAUNCHED.match(b"launcher 2026-11-22 03:17:31,045 INFO starting: horovodrun -np 6 x")
    assert not progress.LAUNCHED.match(b"[0]<stdout>:launcher 2026-11-22 03:17:31,045 INFO starting: x")


numbers = st.floats(allow_nan=False, allow_infinity=False, width=64)


@given(epoch=st.integers(0, 1000), extra=st.integers(0, 1000), step=st.none() | st.integers(0, 10**9),
       loss=st.none() | numbers, rate=st.none() | numbers,
       metrics=st.lists(st.tuples(st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True), numbers),
                        max_size=4, unique_by=lambda kv: kv[0]))
def test_what_a_script_prints_is_what_the_manager_reads(epoch: int, extra: int, step: int | None,
                                                        loss: float | None, rate: float | None,
                                                        metrics: list[tuple[str, float]]) -> None:
    named = {"epoch", "step", "loss", "accuracy", "steps_per_s"}
    report = Progress(epoch=epoch, epochs=epoch + extra, step=step, loss=loss, steps_per_s=rate,
                      extra=tuple((k, v) for k, v in metrics if k not in named))
    assert progress.parse(progress.line(report)) == report
