"""One rank of the throughput bench (bench/measure/throughput.py): a data-parallel training step reduced to
its two parts, a fixed compute step and `hvd.allreduce` of a gradient of a realistic size.

Run by horovodrun in the job's pods, as Train.py would be: `python3 throughput_rank.py --gradient-mb 25,100`.
Each rank first pins itself to one core, `rank % cores` of the cores it may use (sched_setaffinity, before
TensorFlow starts a thread), with TensorFlow and NumPy held to one thread. The compute step is a fixed amount
of work (`--work` float32 256x256 matrix products, no sleep), so its time is known and every rank does the
same. For each gradient size: two warm-up steps, then as many steps as fill `--seconds` (rank 0 decides from
the warm-up and broadcasts the count, so every rank runs the same steps).

Output: every rank `rank=R size=S core=C host=H`; rank 0 one line `throughput_result=JSON` with, per size,
the steps, their median and mean time, the median compute and allreduce times, and steps per second.
Standard library, NumPy, TensorFlow and Horovod only: it runs in the job's image.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time

RANK = int(os.environ.get("HOROVOD_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
CORES = sorted(os.sched_getaffinity(0))
CORE = CORES[RANK % len(CORES)]
os.sched_setaffinity(0, {CORE})  # this thread; every thread started later inherits it
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "TF_NUM_INTRAOP_THREADS",
              "TF_NUM_INTEROP_THREADS"):
    os.environ[_name] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import horovod.tensorflow as hvd  # noqa: E402
import numpy as np  # noqa: E402
import numpy.typing as npt  # noqa: E402
import tensorflow as tf  # noqa: E402

MATRIX = 256
WARMUP = 2


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gradient-mb", default="25,100", help="gradient sizes in MB (10^6 bytes), float32")
    parser.add_argument("--work", type=int, default=300, help="matrix products per compute step")
    parser.add_argument("--seconds", type=float, default=12.0, help="measured time per gradient size")
    parser.add_argument("--min-steps", type=int, default=4)
    parser.add_argument("--max-steps", type=int, default=60)
    return parser.parse_args()


def compute(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32], work: int) -> float:
    """`work` matrix products, the rank's forward and backward pass; returns its own duration."""
    began = time.perf_counter()
    c = a
    for _ in range(work):
        c = np.dot(c, b)
        c *= 1e-3  # keep the values finite
    return time.perf_counter() - began


def step(gradient: tf.Tensor, a: npt.NDArray[np.float32], b: npt.NDArray[np.float32], work: int,
         name: str) -> tuple[float, float, float]:
    """One training step: (step, compute, allreduce) seconds on this rank."""
    began = time.perf_counter()
    compute_s = compute(a, b, work)
    reduced = hvd.allreduce(gradient, op=hvd.Average, name=name)
    _ = reduced.numpy()  # the step ends when the averaged gradient is here
    ended = time.perf_counter()
    return ended - began, compute_s, ended - began - compute_s


def main() -> int:
    args = parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    hvd.init()
    print(f"rank={hvd.rank()} size={hvd.size()} core={CORE} host={socket.gethostname()}", flush=True)
    rng = np.random.default_rng(hvd.rank())
    a = rng.random((MATRIX, MATRIX), dtype=np.float32)
    b = rng.random((MATRIX, MATRIX), dtype=np.float32)
    result: dict[str, object] = {"ranks": hvd.size(), "work": args.work, "cores": len(CORES), "sizes": {}}
    for mb in (float(x) for x in args.gradient_mb.split(",")):
        gradient = tf.random.uniform([int(mb * 1e6 / 4)], dtype=tf.float32, seed=hvd.rank())
        name = f"gradient_{mb:g}mb"
        warm = [step(gradient, a, b, args.work, name) for _ in range(WARMUP)]
        wanted = max(args.min_steps, min(args.max_steps, int(args.seconds / max(1e-3, warm[-1][0]))))
        steps = int(hvd.broadcast(tf.constant(wanted), root_rank=0, name=f"steps_{mb:g}mb").numpy())
        began = time.perf_counter()
        times = [step(gradient, a, b, args.work, name) for _ in range(steps)]
        elapsed = time.perf_counter() - began
        result["sizes"][f"{mb:g}"] = {  # type: ignore[index]
            "steps": steps, "seconds": elapsed, "steps_per_s": steps / elapsed,
            "step_s_median": statistics.median(t[0] for t in times),
            "step_s_mean": statistics.fmean(t[0] for t in times),
            "compute_s_median": statistics.median(t[1] for t in times),
            "allreduce_s_median": statistics.median(t[2] for t in times),
        }
    if hvd.rank() == 0:
        print("throughput_result=" + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
