"""The training's progress line, and what the manager reads from the chief's log (pure).

One line format, printed by rank 0 of base-image/Train.py and by any script that wants the manager to show
its progress (docs/images.md, "The progress line"):

    dt-progress epoch=3/20 step=120 loss=0.4100 accuracy=0.8800 steps_per_s=35.2

`dt-progress` then space-separated `key=value` fields, all optional: `epoch=E/N` (E epochs done of N; `E`
alone when N is unknown), `step=S` (training steps, i.e. batches, done so far), `loss`, `accuracy`,
`steps_per_s` (decimal numbers) and any other `name=number` (e.g. `val_loss`), which is kept as a further
metric. `rank=R` says which Horovod rank printed it: such a line is that rank's heartbeat
(observe/heartbeat.py, what the manager's watchdog reads), not the job's progress. Anything before
`dt-progress` is ignored (horovodrun prefixes `[0]<stdout>:`). A line with a
malformed field is not a progress line: a script's mistake never shows as wrong progress.

The manager also reads the moment the chief's launcher starts the user's command, which ends the job's
Launching phase (`LAUNCHED`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

MARKER = "dt-progress"
_LINE = re.compile(rb"(?:^|[\s:])dt-progress((?:\s+\S+)*)\s*$")
_KEY = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_EPOCH = re.compile(r"^(\d{1,9})(?:/(\d{1,9}))?$")
_STEP = re.compile(r"^\d{1,15}$")
NAMED = ("loss", "accuracy", "steps_per_s")
MAX_EXTRA = 16  # a script printing hundreds of metrics must not bloat the manager's state
# the chief's launcher, as it starts the user's command (launcher.run logs `starting: horovodrun ...`)
LAUNCHED = re.compile(rb"^launcher \S+ \S+ INFO starting: ")


@dataclass(frozen=True)
class Progress:
    """One progress report; None where the line did not say."""

    epoch: int | None = None
    epochs: int | None = None
    step: int | None = None
    loss: float | None = None
    accuracy: float | None = None
    steps_per_s: float | None = None
    extra: tuple[tuple[str, float], ...] = ()  # further metrics, in the line's order
    rank: int | None = None  # the Horovod rank that printed it: a heartbeat (observe/heartbeat.py)


def parse(line: bytes | str) -> Progress | None:
    """The progress a chief's log line reports, or None when it is not a (well-formed) progress line."""
    raw = line.encode("utf-8", "replace") if isinstance(line, str) else line
    match = _LINE.search(raw.rstrip(b"\r\n"))
    if match is None:
        return None
    seen: set[str] = set()
    epoch: int | None = None
    epochs: int | None = None
    step: int | None = None
    rank: int | None = None
    named: dict[str, float] = {}
    extra: list[tuple[str, float]] = []
    for token in match[1].decode("utf-8", "replace").split():
        key, eq, value = token.partition("=")
        if not eq or not _KEY.match(key) or key in seen:
            return None
        seen.add(key)
        if key == "epoch":
            found = _EPOCH.match(value)
            if found is None or (found[2] is not None and int(found[1]) > int(found[2])):
                return None
            epoch, epochs = int(found[1]), int(found[2]) if found[2] is not None else None
        elif key == "step":
            if not _STEP.match(value):
                return None
            step = int(value)
        elif key == "rank":
            if not _STEP.match(value):
                return None
            rank = int(value)
        else:
            number = _number(value)
            if number is None:
                return None
            if key in NAMED:
                named[key] = number
            elif len(extra) < MAX_EXTRA:
                extra.append((key, number))
    return Progress(epoch=epoch, epochs=epochs, step=step, loss=named.get("loss"),
                    accuracy=named.get("accuracy"), steps_per_s=named.get("steps_per_s"), extra=tuple(extra),
                    rank=rank)


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def line(progress: Progress) -> str:
    """The line that reports `progress` (what a script prints; parse(line(p)) == p)."""
    parts = [MARKER]
    if progress.rank is not None:
        parts.append(f"rank={progress.rank}")
    if progress.epoch is not None:
        total = f"/{progress.epochs}" if progress.epochs is not None else ""
        parts.append(f"epoch={progress.epoch}{total}")
    if progress.step is not None:
        parts.append(f"step={progress.step}")
    for key in NAMED:
        value = getattr(progress, key)
        if value is not None:
            parts.append(f"{key}={value!r}")
    parts += [f"{key}={value!r}" for key, value in progress.extra]
    return " ".join(parts)


def text(progress: Progress) -> str:
    """As a person reads it (the manager pod's annotation): `epoch 3 of 20, step 120, loss 0.4100,
    accuracy 0.8800, 35.2 steps/s`."""
    parts = []
    if progress.epoch is not None:
        parts.append(f"epoch {progress.epoch}" + (f" of {progress.epochs}" if progress.epochs else ""))
    if progress.step is not None:
        parts.append(f"step {progress.step}")
    if progress.loss is not None:
        parts.append(f"loss {progress.loss:.4f}")
    if progress.accuracy is not None:
        parts.append(f"accuracy {progress.accuracy:.4f}")
    if progress.steps_per_s is not None:
        parts.append(f"{progress.steps_per_s:.1f} steps/s")
    return ", ".join(parts) or "started"


def merge(old: Progress | None, new: Progress) -> Progress:
    """What is known after `new`: its fields, and the older ones it did not repeat (a first-step line says
    only `step=1`; the epoch count and last loss stay known)."""
    if old is None:
        return new
    extra = dict(old.extra)
    extra.update(new.extra)
    return Progress(
        epoch=new.epoch if new.epoch is not None else old.epoch,
        epochs=new.epochs if new.epochs is not None else old.epochs,
        step=new.step if new.step is not None else old.step,
        loss=new.loss if new.loss is not None else old.loss,
        accuracy=new.accuracy if new.accuracy is not None else old.accuracy,
        steps_per_s=new.steps_per_s if new.steps_per_s is not None else old.steps_per_s,
        extra=tuple(extra.items())[:MAX_EXTRA])
