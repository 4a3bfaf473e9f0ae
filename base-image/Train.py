"""Horovod data-parallel Keras training: the script every DistributeTrain job runs by default.

Run by the chief's launcher as `horovodrun -np N ... python3 Train.py [options]`; every one of the N processes
runs this file, each on its own shard of the data and (on a GPU cluster) its own GPU. To train your own model,
edit the three blocks marked `EDIT` below (data, model, loss/metrics); the Horovod parts around them are what
makes it distributed and rarely need changes. Self-contained on purpose: it needs TensorFlow 2.15 (Keras 2),
Horovod and NumPy, plus scikit-learn only for the default dataset, not the distributetrain package.

Output contract (tests and `make demo` read these lines):
  rank 0:     `epoch=E loss=... accuracy=... val_loss=... val_accuracy=...` after every epoch
  rank 0:     `final_accuracy=0.9xxx` on the held-out split, at the end
  rank 0:     `first_step_unix=T` (time.time()) once, when the first training batch ends: the end of the
              job's start-up, which bench/demo_phases.py measures
  rank 0:     the progress line the manager reads (its pod's labels and annotations, its metrics), once when
              the first training step ends and after every epoch:
              `dt-progress epoch=E/N step=S loss=L accuracy=A steps_per_s=R [val_loss=... val_accuracy=...]`
              (E epochs done of N, S steps done; every field optional; any script may print this line:
              docs/images.md, "The progress line")
  every rank: `rank=R size=S weights_sha256=HEX` (identical on every rank when training worked)
  every rank: its heartbeat, at its first step (untimed), every HEARTBEAT_EVERY seconds while it trains and
              once when its training ends:
              `dt-progress rank=R step=S step_s=T compute_s=C` (S steps done by this process, T mean
              seconds per step since its last beat, C the mean of them it spent computing its gradients
              before the all-reduce; `done=1` on the last), which the manager's watchdog reads to find a
              rank that stopped making progress or computes slower than the others (the format:
              distributetrain.observe.heartbeat); before its first beat, `dt-rank rank=R host=HOSTNAME`
              (its pod's name), how the manager finds its pod
  rank 0, with --resume:  `resumed_from_epoch=E` (0: no checkpoint yet, from the start), and
              `resumed_from_step=S` when the checkpoint was taken S steps into epoch E+1
  rank 0, on a graceful notice: `checkpoint_on_notice epoch=E step=S` (see below)
  rank 0, with --elastic: `elastic size=S from_epoch=E` each time Horovod (re)forms with S processes

Two forms of the same training. The default: `model.fit` once, over a fixed set of processes. The elastic form
(--elastic, or DT_ELASTIC=1, which the chief's launcher sets for a job run with --min-gpus): Horovod elastic
runs the training in `hvd.elastic.run` with the model and the epoch as its state, committed after every
epoch; when a worker is lost, the other processes go back to the last commit and go on, and when one joins
they re-form; each time, the data is re-sharded and the learning rate scaled to the new number of processes.
Checkpoints (--checkpoint-dir, rank 0, every epoch) let a relaunched training go on with --resume.

A graceful notice - the kubelet's SIGTERM to a worker pod that is drained, preempted or on a node shutting
down, which the worker's entrypoint passes on to its training processes - stops the training within
NOTICE_CHECK_EVERY steps on every rank, after rank 0 saved a checkpoint of that very step
(`checkpoint-EEE-sSSSSSSS.keras`): a relaunch (--restarts) resumes there and loses no step. The elastic form
lets Horovod drop the leaving worker instead (the manager takes it out of the hostfile at once): its ranks
train on until Horovod's next look for host changes (HostUpdatesEvery), and the reset that drops them
syncs the state as any other (synced_after_any_reset).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep the job log readable: no oneDNN/CPU banners

import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf
from horovod.common.exceptions import HostsUpdatedInterrupt

SEED = 1234
# seconds between two heartbeats of a rank (DT_HEARTBEAT_SECONDS): a stopped rank is seen within this
HEARTBEAT_EVERY = float(os.environ.get("DT_HEARTBEAT_SECONDS") or 10.0)
COMPUTE_S = "compute_s"  # the train step's own log: seconds it computed its gradients (TimedTape)
NOTICE_CHECK_EVERY = 5  # steps between two looks for a graceful notice (one small allreduce each)
EXIT_NOTICE = 143  # a training stopped by a graceful notice ends as one terminated by SIGTERM would


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=int(os.environ.get("DT_EPOCHS", "20")))
    parser.add_argument("--batch-size", type=int, default=32,
                        help="per process; the global batch is N times it")
    parser.add_argument("--lr", type=float, default=0.001, help="for one process; scaled by hvd.size()")
    parser.add_argument("--data", default=os.environ.get("DT_DATA"),
                        help="an .npz file with arrays x and y (default: scikit-learn's bundled digits)")
    parser.add_argument("--output-dir", default=os.environ.get("DT_OUTPUT_DIR"),
                        help="checkpoints and TensorBoard logs, written by rank 0 only "
                             "(default: $DT_MOUNT_PATH/output when a shared volume is mounted, else none)")
    parser.add_argument("--validation-split", type=float, default=0.2)
    parser.add_argument("--checkpoint-dir", default=os.environ.get("DT_CHECKPOINT_DIR"),
                        help="where rank 0 writes checkpoint-NNN.keras after every epoch (default: the "
                             "output directory)")
    parser.add_argument("--resume", action="store_true", default=os.environ.get("DT_RESUME") == "1",
                        help="start from the newest checkpoint in the checkpoint directory, if any")
    parser.add_argument("--elastic", action="store_true", default=os.environ.get("DT_ELASTIC") == "1",
                        help="the elastic form: for horovodrun --min-np (the launcher sets DT_ELASTIC=1)")
    args = parser.parse_args()
    if args.output_dir is None and os.environ.get("DT_MOUNT_PATH"):
        args.output_dir = os.path.join(os.environ["DT_MOUNT_PATH"], "output")
    args.checkpoint_dir = args.checkpoint_dir or args.output_dir
    return args


# ---- EDIT 1: your data ------------------------------------------------------------------------------------
def load_data(path: str | None) -> tuple[np.ndarray, np.ndarray]:
    """All examples as float32 features and integer labels. Every rank loads the same arrays, then keeps its
    own shard (see `shard`); for data too big for that, read only this rank's files instead."""
    if path:
        with np.load(path) as data:
            x, y = data["x"], data["y"]
    else:
        x, y = digits()
        x = x / 16.0  # 1,797 8x8 images of handwritten digits, 10 classes
    return x.reshape(len(x), -1).astype("float32"), y.astype("int64")


def digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled digits (works offline), read from its own file as its load_digits does
    (sklearn/datasets/_base.py: the last column is the label) without importing scikit-learn: that import
    costs every rank ~0.6 s of CPU at start-up, six ranks on two cores a second and a half of the job's."""
    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
    for folder in (spec.submodule_search_locations or []) if spec else []:
        bundled = os.path.join(folder, "datasets", "data", "digits.csv.gz")
        if os.path.exists(bundled):
            data = np.loadtxt(bundled, delimiter=",")
            return data[:, :-1], data[:, -1].astype("int64")
    from sklearn.datasets import load_digits  # another layout: let scikit-learn find it

    loaded = load_digits()
    return loaded.data, loaded.target


# ---- EDIT 2: your model -----------------------------------------------------------------------------------
def build_model(num_features: int, num_classes: int) -> tf.keras.Model:
    return tf.keras.Sequential([
        tf.keras.layers.Input(shape=(num_features,)),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(num_classes, activation="softmax"),
    ])


# ---- EDIT 3: loss, metrics and the optimizer for one process -----------------------------------------------
LOSS = "sparse_categorical_crossentropy"
METRICS = ["accuracy"]


def make_optimizer(lr: float) -> tf.keras.optimizers.Optimizer:
    return tf.keras.optimizers.Adam(learning_rate=lr)


# ---- Horovod plumbing (usually unchanged) ---------------------------------------------------------------
def split(x: np.ndarray, y: np.ndarray, fraction: float) -> tuple[np.ndarray, ...]:
    """The same shuffled train/validation split on every rank (fixed seed)."""
    order = np.random.default_rng(SEED).permutation(len(x))
    cut = int(len(x) * (1 - fraction))
    return x[order[:cut]], y[order[:cut]], x[order[cut:]], y[order[cut:]]


def shard(x: np.ndarray, y: np.ndarray, rank: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """This rank's slice. Every rank gets the same number of examples (the remainder is dropped): with unequal
    shards ranks would run different numbers of steps and the allreduce of the last ones would hang."""
    usable = len(x) // size * size
    return x[:usable][rank::size], y[:usable][rank::size]


def distributed_optimizer(lr: float, size: int) -> tf.keras.optimizers.Optimizer:
    """The optimizer of EDIT 3 at the learning rate scaled with the number of processes (the global batch is
    `size` times larger), without XLA, wrapped by Horovod to average gradients over every rank."""
    optimizer = make_optimizer(lr * size)
    # On a GPU, Keras 2.15 compiles the optimizer's update step with XLA by default, which needs libdevice
    # from cuda-nvcc; the CUDA runtime image has none, so the first step would fail with "libdevice not
    # found" (tensorflow#58681, keras#17422). The update is a small part of a step: leave XLA off unless the
    # image ships cuda-nvcc and sets XLA_FLAGS=--xla_gpu_cuda_data_dir=/usr/local/cuda.
    optimizer.jit_compile = False
    return hvd.DistributedOptimizer(optimizer)


class TimedTape(tf.GradientTape):
    """A GradientTape that notes when this rank's gradients exist, before Horovod's DistributedOptimizer
    all-reduces them (it does in `compute_gradients`, which calls this tape's `gradient`): the end of the
    step's compute, however long the all-reduce then waits for slower ranks."""

    def gradient(self, target, sources, output_gradients=None,  # type: ignore[no-untyped-def]
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        grads = super().gradient(target, sources, output_gradients, unconnected_gradients)
        self.computed = stamp_after(tf.nest.flatten(grads))
        with tf.control_dependencies([self.computed]):  # the all-reduce starts after the stamp
            return tf.nest.map_structure(lambda g: g if g is None else tf.identity(g), grads)


def stamp_after(tensors: list[tf.Tensor]) -> tf.Tensor:
    """tf.timestamp() once `tensors` are computed. A control dependency alone would do on the CPU; on a GPU an
    op counts as done when it is queued, so one element of each crosses to the host, which waits for the
    device's stream to get there."""
    ends = [tf.reshape(tf.cast(getattr(t, "values", t), tf.float32), [-1])[:1]  # IndexedSlices: values
            for t in tensors if t is not None]
    with tf.device("/cpu:0"):
        landed = tf.concat(ends, 0) if ends else tf.zeros([0])
        with tf.control_dependencies([landed]):
            return tf.timestamp()


def timed_train_step(model: tf.keras.Model, data: object) -> dict[str, tf.Tensor]:
    """Keras 2.15's Model.train_step (keras/engine/training.py), plus the seconds from the forward pass's
    start to this rank's gradients (COMPUTE_S in the step's logs; the Heartbeat callback reports it): under
    synchronous all-reduce every rank's wall step time is the same, this is what tells a slow rank."""
    x, y, sample_weight = tf.keras.utils.unpack_x_y_sample_weight(data)
    started = tf.timestamp()
    with tf.control_dependencies([started]), TimedTape() as tape:
        y_pred = model(x, training=True)
        loss = model.compute_loss(x, y, y_pred, sample_weight)
    model.optimizer.minimize(loss, model.trainable_variables, tape=tape)
    logs = model.compute_metrics(x, y, y_pred, sample_weight)
    return {**logs, COMPUTE_S: tape.computed - started}


def time_compute(model: tf.keras.Model) -> tf.keras.Model:
    """The model, its training step timed (timed_train_step). Set on this model only, not by a subclass: its
    checkpoints and the saved model stay the plain Keras model of EDIT 2, loadable without this file."""
    model.train_step = lambda data: timed_train_step(model, data)
    return model


def latest_checkpoint(directory: str | None) -> tuple[str, int, int] | None:
    """The newest checkpoint in `directory`, its epochs done and steps done in the next epoch: an epoch's
    `checkpoint-NNN.keras` (step 0), or one taken on a graceful notice, `checkpoint-NNN-sSSSSSSS.keras`.
    None when there is none."""
    found = []
    for name in os.listdir(directory) if directory and os.path.isdir(directory) else ():
        match = re.fullmatch(r"checkpoint-(\d+)(?:-s(\d+))?\.keras", name)
        if match:
            found.append((int(match[1]), int(match[2] or 0), os.path.join(directory, name)))
    if not found:
        return None
    epoch, step, path = max(found)
    return path, epoch, step


def resume(model: tf.keras.Model, directory: str | None, rank: int) -> tuple[int, int]:
    """Rank 0 loads the newest checkpoint (weights and optimizer state); every rank learns its epoch and
    step."""
    # the optimizer's variables made now, on every rank alike: Keras loads no optimizer state into an
    # optimizer without them, and ranks whose training steps were traced differently would not match their
    # allreduces (they hang)
    model.optimizer.build(model.trainable_variables)
    epoch = step = 0
    if rank == 0:
        found = latest_checkpoint(directory)
        if found is not None:
            model.load_weights(found[0])
            epoch, step = found[1], found[2]
        print(f"resumed_from_epoch={epoch}", flush=True)
        if step:
            print(f"resumed_from_step={step}", flush=True)
    where = hvd.broadcast(np.array([epoch, step], dtype=np.int64), root_rank=0, name="resumed_at")
    return int(where[0]), int(where[1])


class Notice:
    """A graceful notice (SIGTERM) seen by this process; every rank learns of any rank's at the same step."""

    received = False

    @staticmethod
    def listen() -> None:
        signal.signal(signal.SIGTERM, Notice._note)

    @staticmethod
    def _note(signum: int, frame: object) -> None:
        Notice.received = True


class StoppedOnNotice(Exception):
    """Raised out of `fit` on every rank at the same step: the epoch's end must not run (its checkpoint and
    log lines would count an unfinished epoch as done)."""


class StopOnNotice(tf.keras.callbacks.Callback):
    """Every NOTICE_CHECK_EVERY steps, whether any rank got a graceful notice (one allreduce of a flag, on
    every rank at the same step); if one did, rank 0 saves a checkpoint of this step and every rank stops."""

    def __init__(self, rank: int, checkpoint_dir: str | None, *, resumed: tuple[int, int] = (0, 0)) -> None:
        """`resumed`: the epoch and step a resumed training starts at (its first epoch's steps count on)."""
        super().__init__()
        self.rank, self.checkpoint_dir, self.resumed = rank, checkpoint_dir, resumed
        self.epoch = 0

    def on_epoch_begin(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        self.epoch = epoch

    def on_train_batch_end(self, batch: int, logs: dict[str, float] | None = None) -> None:
        if (batch + 1) % NOTICE_CHECK_EVERY:
            return
        noticed = hvd.allreduce(np.array([1.0 if Notice.received else 0.0], dtype=np.float32), op=hvd.Sum,
                                name="dt_graceful_notice")
        if float(noticed[0]) == 0.0:
            return
        step = batch + 1 + (self.resumed[1] if self.epoch == self.resumed[0] else 0)
        if self.rank == 0:
            if self.checkpoint_dir:
                os.makedirs(self.checkpoint_dir, exist_ok=True)
                name = f"checkpoint-{self.epoch:03d}-s{step:07d}.keras"
                self.model.save(os.path.join(self.checkpoint_dir, name))
            print(f"checkpoint_on_notice epoch={self.epoch} step={step}", flush=True)
        raise StoppedOnNotice


@contextlib.contextmanager
def synced_after_any_reset() -> Iterator[None]:
    """Elastic: every reset syncs the state from rank 0, a host removed as well as one added.

    Horovod skips the sync when the hosts it was told of were only removed (horovod/common/elastic.py,
    Horovod 0.28.1: `HostsUpdatedInterrupt(all_update == removed)`, and `run_fn` then skips `state.sync()`):
    the survivors hold the state already. But the ring it forms next is made of the hosts the driver sees
    at that moment (runner/elastic/driver.py, `_activate_workers` once every process re-registered), which
    can include a host added since - a drained worker's replacement, Ready seconds after the eviction that
    removed it, or the host a job below its --min-np waited for. The new host's processes begin with a
    sync (broadcasts); survivors that skipped theirs go on to the training step's allreduce; each waits for
    the other for ever, without an error (horovod#3494). Syncing after a removal too costs one broadcast of
    the model, and keeps both sides doing the same collectives."""
    try:
        yield
    except HostsUpdatedInterrupt as interrupt:
        if not interrupt.skip_sync:
            raise
        raise HostsUpdatedInterrupt(skip_sync=False) from None


class HostUpdatesEvery(tf.keras.callbacks.Callback):
    """Elastic: act on a host leaving within NOTICE_CHECK_EVERY steps rather than at the epoch's commit, so a
    drained worker is dropped while the kubelet's grace period lasts."""

    def __init__(self, state: hvd.elastic.KerasState) -> None:
        super().__init__()
        self.state = state

    def on_train_batch_end(self, batch: int, logs: dict[str, float] | None = None) -> None:
        if (batch + 1) % NOTICE_CHECK_EVERY == 0:
            self.state.check_host_updates()


def weights_sha256(model: tf.keras.Model) -> str:
    digest = hashlib.sha256()
    for w in model.get_weights():
        digest.update(np.ascontiguousarray(w).tobytes())
    return digest.hexdigest()


class EpochLog(tf.keras.callbacks.Callback):
    """One parseable line per epoch from rank 0; after MetricAverageCallback, so these are all-rank means."""

    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        fields = " ".join(f"{k}={v:.4f}" for k, v in sorted(metrics_of(logs).items()))
        print(f"epoch={epoch + 1} {fields}", flush=True)


def metrics_of(logs: dict[str, float] | None) -> dict[str, float]:
    """The epoch's metrics; not the last step's compute time, which is the heartbeat's."""
    return {k: v for k, v in (logs or {}).items() if k != COMPUTE_S}


class CommitEachEpoch(tf.keras.callbacks.Callback):
    """Elastic: the epoch's end is the state's commit point (a lost worker costs at most one epoch)."""

    def __init__(self, state: hvd.elastic.KerasState) -> None:
        super().__init__()
        self.state = state

    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        self.state.epoch = epoch + 1
        self.state.commit()


class FirstStepLog(tf.keras.callbacks.Callback):
    """When the first training step ended, once per process (an elastic one trains again after each reset),
    as Unix time: start-up phases are timed against it."""

    done = False

    def on_train_batch_end(self, batch: int, logs: dict[str, float] | None = None) -> None:
        if not FirstStepLog.done:
            FirstStepLog.done = True
            print(f"first_step_unix={time.time():.3f}", flush=True)


class ProgressLog(tf.keras.callbacks.Callback):
    """The progress line (see the module's docstring): once after the first training step, then after every
    epoch with its metrics (all-rank means, after MetricAverageCallback) and the epoch's steps per second."""

    def __init__(self, epochs: int) -> None:
        super().__init__()
        self.epochs = epochs
        self.steps = 0
        self.epoch_steps = 0
        self.epoch_started = time.perf_counter()

    def on_epoch_begin(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        self.epoch_steps, self.epoch_started = 0, time.perf_counter()

    def on_train_batch_end(self, batch: int, logs: dict[str, float] | None = None) -> None:
        self.steps += 1
        self.epoch_steps += 1
        if self.steps == 1:
            print(f"dt-progress epoch=0/{self.epochs} step=1", flush=True)

    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        rate = self.epoch_steps / max(time.perf_counter() - self.epoch_started, 1e-9)
        fields = " ".join(f"{k}={v:.4f}" for k, v in sorted(metrics_of(logs).items()))
        print(f"dt-progress epoch={epoch + 1}/{self.epochs} step={self.steps} {fields} "
              f"steps_per_s={rate:.1f}", flush=True)


class Heartbeat(tf.keras.callbacks.Callback):
    """Every rank's heartbeat (the module's docstring). A thread prints it, not the step: a rank blocked in a
    collective, waiting for a stuck peer, keeps beating with the same step count, while a frozen one falls
    silent - how the manager tells the rank that stopped first from those that wait for it. The step only
    counts, and adds up its compute time (timed_train_step's)."""

    def __init__(self, rank: int, every: float = HEARTBEAT_EVERY) -> None:
        super().__init__()
        self.rank, self.every = rank, every
        self.steps = self.last_steps = 0
        # (seconds, steps) computed so far, written whole by the training loop only; the thread keeps what
        # it had at its last beat (no lock: a step costs two adds)
        self.computed = self.last_computed = (0.0, 0)
        self.last_at = time.perf_counter()
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None

    def on_train_begin(self, logs: dict[str, float] | None = None) -> None:
        if self.thread is None:  # fit() runs twice on a mid-epoch resume: one thread
            # where this rank runs (its pod's hostname, the pod's name): the manager finds its pod by it
            print(f"dt-rank rank={self.rank} host={socket.gethostname()}", flush=True)
            self.stopped.clear()
            self.last_at = time.perf_counter()
            self.thread = threading.Thread(target=self._beat_every, name="dt-heartbeat", daemon=True)
            self.thread.start()

    def on_train_batch_end(self, batch: int, logs: dict[str, float] | None = None) -> None:
        self.steps += 1
        compute = (logs or {}).get(COMPUTE_S)
        if compute is not None:
            self.computed = (self.computed[0] + float(compute), self.computed[1] + 1)
        if self.steps == 1:
            # said at once, untimed (its time is the start-up's): a rank frozen before its first periodic
            # beat must still be known to the watchdog, or it blames a rank that only waits for it
            print(f"dt-progress rank={self.rank} step=1", flush=True)

    def on_train_end(self, logs: dict[str, float] | None = None) -> None:
        self.stop()

    def stop(self, *, done: bool = True) -> None:
        """The training loop ended: the last beat, marked done. Not `done` when it failed or was stopped (a
        rank failing on a peer's timeout is not a rank that finished: the manager still weighs it)."""
        if self.thread is None:
            return
        self.stopped.set()
        self.thread.join(timeout=5)
        self.thread = None
        if done:
            self.beat(done=True)

    def _beat_every(self) -> None:
        while not self.stopped.wait(self.every):
            self.beat()

    def beat(self, *, done: bool = False) -> None:
        steps, now, computed = self.steps, time.perf_counter(), self.computed
        made = steps - self.last_steps
        seconds, timed = computed[0] - self.last_computed[0], computed[1] - self.last_computed[1]
        self.last_steps, self.last_at, before, self.last_computed = steps, now, self.last_at, computed
        if steps == 0 and not done:
            return  # still starting (tracing the first step): nothing to watch yet
        took = f" step_s={(now - before) / made:.6f}" if made > 0 else ""
        took += f" compute_s={seconds / timed:.6f}" if timed > 0 else ""
        print(f"dt-progress rank={self.rank} step={steps}{took}" + (" done=1" if done else ""), flush=True)


def stop_heartbeats(callbacks: list[tf.keras.callbacks.Callback]) -> None:
    """After fit raised (on_train_end did not run): the heartbeat thread ends, with no `done` beat."""
    for callback in callbacks:
        if isinstance(callback, Heartbeat):
            callback.stop(done=False)


def callbacks_of(rank: int, args: argparse.Namespace) -> list[tf.keras.callbacks.Callback]:
    """Every rank's callbacks, then rank 0's: its log lines, and (only rank 0 writes, so ranks never race on
    the shared volume) checkpoints and TensorBoard."""
    callbacks: list[tf.keras.callbacks.Callback] = [
        hvd.callbacks.MetricAverageCallback(),  # epoch metrics are the mean over ranks, not rank 0's shard
        Heartbeat(rank),
    ]
    if rank == 0:
        callbacks += [EpochLog(), FirstStepLog(), ProgressLog(args.epochs)]
        if args.checkpoint_dir:
            os.makedirs(args.checkpoint_dir, exist_ok=True)
            callbacks.append(tf.keras.callbacks.ModelCheckpoint(
                os.path.join(args.checkpoint_dir, "checkpoint-{epoch:03d}.keras")))
        if args.output_dir:
            os.makedirs(args.output_dir, exist_ok=True)
            callbacks.append(tf.keras.callbacks.TensorBoard(log_dir=os.path.join(args.output_dir,
                                                                                 "tensorboard")))
    return callbacks


def train_elastic(model: tf.keras.Model, args: argparse.Namespace, x_train: np.ndarray, y_train: np.ndarray,
                  validation: tuple[np.ndarray, np.ndarray]) -> None:
    """The elastic form: the model, its optimizer and the epoch are Horovod's state, committed every epoch.
    After a lost worker the others restore the last commit and go on; when one joins, rank 0's state is
    broadcast to it. Each (re)start re-shards the data and scales the learning rate to the current size."""
    # a process that joins later must hold the same optimizer variables as the others when the state is
    # broadcast to it: create them all now rather than at the first step
    model.optimizer.build(model.trainable_variables)
    state = hvd.elastic.KerasState(model, epoch=0)

    def scale_learning_rate() -> None:
        tf.keras.backend.set_value(state.model.optimizer.learning_rate, args.lr * hvd.size())

    state.register_reset_callbacks([scale_learning_rate])

    @hvd.elastic.run
    def train(state: hvd.elastic.KerasState) -> None:
        rank, size = hvd.rank(), hvd.size()
        x_mine, y_mine = shard(x_train, y_train, rank, size)
        if rank == 0:
            print(f"elastic size={size} from_epoch={state.epoch}", flush=True)
        callbacks = [*callbacks_of(rank, args), CommitEachEpoch(state), HostUpdatesEvery(state)]
        try:
            with synced_after_any_reset():
                state.model.fit(x_mine, y_mine, batch_size=args.batch_size, epochs=args.epochs,
                                initial_epoch=state.epoch, validation_data=validation, verbose=0,
                                callbacks=callbacks)
        finally:  # a reset raises out of fit: this rank number's heartbeat ends with it
            stop_heartbeats(callbacks)

    train(state)


def main() -> int:
    args = parse_args()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()

    # One GPU per process: the local rank picks it. On the CPU this finds no GPU and does nothing.
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")
    tf.keras.utils.set_random_seed(SEED + rank)  # different per rank; rank 0's weights are broadcast anyway

    x, y = load_data(args.data)
    x_train, y_train, x_val, y_val = split(x, y, args.validation_split)
    x_mine, y_mine = shard(x_train, y_train, rank, size)
    num_classes = int(y.max()) + 1
    if rank == 0:
        print(f"horovod size={size} train={len(x_train)} per_rank={len(x_mine)} val={len(x_val)} "
              f"classes={num_classes} epochs={args.epochs} batch_size={args.batch_size} "
              f"lr={args.lr * size:g}", flush=True)

    model = time_compute(build_model(x.shape[1], num_classes))
    model.compile(loss=LOSS, optimizer=distributed_optimizer(args.lr, size), metrics=METRICS,
                  jit_compile=False)  # as for the optimizer: no XLA, which needs cuda-nvcc on a GPU

    Notice.listen()
    if args.elastic:
        train_elastic(model, args, x_train, y_train, (x_val, y_val))
    else:
        epoch, step = resume(model, args.checkpoint_dir, rank) if args.resume else (0, 0)
        callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),  # rank 0's weights everywhere
                     *callbacks_of(rank, args),
                     StopOnNotice(rank, args.checkpoint_dir, resumed=(epoch, step))]
        try:
            if step:  # resumed mid-epoch: the rest of that epoch's steps first (the same count, reshuffled)
                model.fit(x_mine[step * args.batch_size:], y_mine[step * args.batch_size:],
                          batch_size=args.batch_size, epochs=epoch + 1, initial_epoch=epoch,
                          callbacks=callbacks, validation_data=(x_val, y_val), verbose=0)
                epoch += 1
            model.fit(x_mine, y_mine, batch_size=args.batch_size, epochs=args.epochs, initial_epoch=epoch,
                      callbacks=callbacks, validation_data=(x_val, y_val), verbose=0)
        except StoppedOnNotice:
            print(f"rank={rank} stopped on a graceful notice", flush=True)
            return EXIT_NOTICE
        finally:
            stop_heartbeats(callbacks)

    _, accuracy = model.evaluate(x_val, y_val, batch_size=256, verbose=0)
    rank, size = hvd.rank(), hvd.size()  # elastic: what they are at the end
    if rank == 0:
        print(f"final_accuracy={accuracy:.4f}", flush=True)
        if args.output_dir:
            model.save(os.path.join(args.output_dir, "model.keras"))
    print(f"rank={rank} size={size} weights_sha256={weights_sha256(model)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
