"""base-image/Train.py on a GPU: what differs from the CPU this suite runs on.

Keras 2.15 XLA-compiles the optimizer's update step only when a GPU is visible, and XLA on a GPU needs
libdevice (cuda-nvcc), which the CUDA runtime image lacks: the first step would fail with `libdevice not
found`.
The CPU never shows it, so these tests make TensorFlow report a GPU to Keras's decision (in a subprocess, so
nothing leaks) and check what Train.py asks for."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import importlib.util, json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
real = tf.config.list_physical_devices
gpu = tf.config.PhysicalDevice(name="/physical_device:GPU:0", device_type="GPU")
fake = lambda kind=None: [gpu] if kind == "GPU" else real(kind)  # noqa: E731
tf.config.list_physical_devices = tf.compat.v2.config.list_physical_devices = fake
spec = importlib.util.spec_from_file_location("train", sys.argv[1])
train = importlib.util.module_from_spec(spec)
spec.loader.exec_module(train)
default = tf.keras.optimizers.Adam(0.001)
ours = train.distributed_optimizer(0.001, 4)
print(json.dumps({"keras_default": default.jit_compile, "train": ours.jit_compile,
                  "lr": float(ours.learning_rate.numpy()), "wrapped": type(ours).__module__}))
"""


def test_train_asks_for_no_xla_where_keras_would_compile_it_on_a_gpu() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, str(REPO / "base-image" / "Train.py")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["keras_default"] is True  # with a GPU visible, Keras would use XLA: the case that fails
    assert seen["train"] is False
    assert abs(seen["lr"] - 0.004) < 1e-9  # scaled by the number of processes
    assert seen["wrapped"].startswith("horovod")  # gradients are averaged over ranks


TIMED = """
import importlib.util, json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
spec = importlib.util.spec_from_file_location("train", sys.argv[1])
train = importlib.util.module_from_spec(spec)
spec.loader.exec_module(train)
hvd, np, tf = train.hvd, train.np, train.tf
hvd.init()
x, y = train.load_data(None)
x, y = x[:320], y[:320]

def fit(timed):
    tf.keras.utils.set_random_seed(7)
    model = train.build_model(x.shape[1], 10)
    if timed:
        model = train.time_compute(model)
    model.compile(loss=train.LOSS, optimizer=train.distributed_optimizer(0.001, 1), metrics=train.METRICS)
    seen = []
    class Logs(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append(sorted(logs))
    model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0, callbacks=[Logs()])
    return train.weights_sha256(model), seen

plain, plain_logs = fit(False)
timed, timed_logs = fit(True)
print(json.dumps({"same": plain == timed, "plain": plain_logs[-1], "timed": timed_logs[-1]}))
"""


def test_the_timed_train_step_trains_as_keras_does_and_logs_its_compute_time() -> None:
    # the step Train.py uses (time_compute) must compute what Keras's own does: the same weights after the
    # same batches, its compute time a further log of every step
    done = subprocess.run([sys.executable, "-c", TIMED, str(REPO / "base-image" / "Train.py")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["same"] is True
    assert seen["plain"] == ["accuracy", "loss"]
    assert seen["timed"] == ["accuracy", "compute_s", "loss"]


RESET_PROBE = """
import importlib.util, json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
from horovod.common.elastic import ObjectState, run_fn
from horovod.common.exceptions import HostsUpdatedInterrupt
spec = importlib.util.spec_from_file_location("train", sys.argv[1])
train = importlib.util.module_from_spec(spec)
spec.loader.exec_module(train)


class Recorded(ObjectState):
    syncs = 0

    def __init__(self):
        super().__init__(bcast_object=lambda value: value, get_rank=lambda: 0, epoch=0)

    def sync(self):
        Recorded.syncs += 1
        super().sync()


def syncs(guarded):
    Recorded.syncs = 0
    calls = []

    def training(state):
        calls.append(1)
        if len(calls) == 1:  # the first run: Horovod tells of a host removed only
            if guarded:
                with train.synced_after_any_reset():
                    raise HostsUpdatedInterrupt(skip_sync=True)
            raise HostsUpdatedInterrupt(skip_sync=True)

    run_fn(training, lambda: None)(Recorded())
    return Recorded.syncs


print(json.dumps({"horovod": syncs(False), "train": syncs(True)}))
"""


def test_an_elastic_reset_after_a_removed_host_syncs_the_state_as_a_new_host_does() -> None:
    """Horovod's own run loop (run_fn) with a state that counts its syncs: a removal-only reset skips the
    sync there, while the processes of a host added in the same reset begin with one (horovod#3494: each
    side waits for the other's collective for ever). Train.py's elastic training syncs after it too."""
    done = subprocess.run([sys.executable, "-c", RESET_PROBE, str(REPO / "base-image" / "Train.py")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"horovod": 1, "train": 2}  # Horovod alone: the first sync only; Train.py: after the reset
