"""torch.compile's own modules, imported on a thread while the trainer builds the rest.

A compiled run's first step waits for Dynamo's, AOTAutograd's and Inductor's imports: 0.7 s before
the first forward on an H100 host, more inside it, 3 s on a 2-core CPU (benchmarks/RESULTS.md, the
first step's breakdown). The stages before the compile (CUDA's start, the data, the model built and
initialised on the device, the optimizer, the compile cache) spend most of their time inside torch's
operators, which let go of the GIL, so the imports can run beside them on a second thread.

Safe to run beside the main thread: Python's import system locks each module, so a main-thread import
of a module the thread is importing waits for it and then finds it whole. A module that fails here
(no triton on this machine, an import that only works on the main thread) is simply left for the
compile to import, where its error means what it always did. Nothing here changes what is computed.
"""

from __future__ import annotations

import threading

from envkit.train.run import timing

# What the first compile imports, outermost first: importing these pulls in nearly all of it.
_EVERYWHERE = ("torch._dynamo", "torch._functorch.aot_autograd", "torch._inductor.compile_fx")
# Inductor's GPU code: the Triton backend, its runtime and the CUDA-graph trees (reduce-overhead).
_CUDA = ("triton", "torch._inductor.codegen.triton", "torch._inductor.runtime.triton_heuristics",
         "torch._inductor.cudagraph_trees", "torch._higher_order_ops.triton_kernel_wrap")


def modules_for(device_type: str) -> tuple[str, ...]:
    return _EVERYWHERE + (_CUDA if device_type == "cuda" else ())


def _import_all(names: tuple[str, ...]) -> None:
    import importlib

    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - left to the compile, which imports it again and reports its error there
            pass


class CompileImports:
    """The thread, started by `start` and waited for by `wait` (before torch.compile is called)."""

    def __init__(self, device_type: str) -> None:
        self._thread = threading.Thread(target=_import_all, args=(modules_for(device_type),),
                                        name="envkit-compile-imports", daemon=True)

    @classmethod
    def start(cls, device_type: str) -> CompileImports:
        imports = cls(device_type)
        imports._thread.start()
        return imports

    def wait(self) -> None:
        self._thread.join()
        timing.mark("torch.compile's modules imported (on a thread, beside the stages above)")
