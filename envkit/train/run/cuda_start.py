"""CUDA's start begun on a thread while the trainer imports torch.

A CUDA run's first step waits for the driver's start and the GPU's primary context, a second or more
that holds no Python lock, and for `import torch`, which is all Python. Done one after the other, as
torch does on its first CUDA call, they add up; `begin` starts the first through the driver (ctypes:
cuInit, cuDevicePrimaryCtxRetain, no torch) on a thread before the trainer imports torch, and torch's
own start then finds the context made. The context is kept (torch retains the same one); nothing else
is set, so torch configures CUDA exactly as it would have. Measured: benchmarks/bench_start_floors.py.

Any failure (no driver, no such device, a CPU machine, macOS) only ends the thread: the trainer's own
start meets the same problem and reports it as it always has.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time


class CudaStart(threading.Thread):
    """The driver and device `index`'s primary context, started; `error` says why not."""

    def __init__(self, index: int) -> None:
        super().__init__(name="envkit-cuda-start", daemon=True)
        self.index = index
        self.error: str | None = None
        self.seconds: float | None = None

    def run(self) -> None:
        t0 = time.perf_counter()
        try:
            driver = ctypes.CDLL("libcuda.so.1")  # ctypes lets go of the GIL during each call: the imports go on
        except OSError as exc:
            self.error = f"no CUDA driver ({exc})"
            return
        device, context = ctypes.c_int(), ctypes.c_void_p()
        for name, call in (("cuInit", lambda: driver.cuInit(0)),
                           ("cuDeviceGet", lambda: driver.cuDeviceGet(ctypes.byref(device), self.index)),
                           ("cuDevicePrimaryCtxRetain", lambda: driver.cuDevicePrimaryCtxRetain(ctypes.byref(context), device))):
            code = call()
            if code != 0:
                self.error = f"{name} returned CUDA error {code}"
                return
        self.seconds = time.perf_counter() - t0


_started: CudaStart | None = None


def begin(index: int) -> CudaStart:
    """Start device `index`'s context on a thread; `wait()` before anything forks or touches CUDA."""
    global _started
    # Read by cuInit: set as torch.cuda sets it before its own start (it would find it already set),
    # here on the calling thread, as the environment is not safe to change while another thread reads it.
    os.environ.setdefault("CUDA_MODULE_LOADING", "LAZY")
    _started = CudaStart(index)
    _started.start()
    return _started


def begin_for(device_type: str) -> CudaStart | None:
    """`begin` for this process's GPU (LOCAL_RANK, as torchrun numbers them) where the run may train on
    CUDA: device.type cuda or auto, on Linux, and not after a device fault moved it to the CPU."""
    if device_type not in ("cuda", "auto") or not sys.platform.startswith("linux") or os.environ.get("ENVKIT_TRAIN_DEVICE") == "cpu":
        return None
    return begin(int(os.environ.get("LOCAL_RANK", "0")))


def wait() -> None:
    """Join the thread begun here (if any): before torch's own CUDA start and before any fork."""
    if _started is not None:
        _started.join()
