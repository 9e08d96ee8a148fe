"""The trainer's process: `python -m envkit.train.run.child RUN_DIR [--stop-after K] [--resume auto|never|PATH]`
(or `RUN_DIR --probe OUT.json`: one probing step for batch_size auto, train/run/batch_probe.py).

Started by `envkit run` (envkit/launch/launcher.py) with the managed environment's Python and the
profile's variables already set, or by torchrun (one per GPU). It reads RUN_DIR/config.json, which
the parent resolved and validated. Needs torch and the standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.train.recovery.guards import TrainingStopped
from envkit.train.run.determinism import environ_before_cuda, op_error
from envkit.train.run.parent_watch import watch_parent
from envkit.train.run.stopping import exit_code, parent_gone
from envkit.config.config import Config
from envkit.train.watching.profiling import parse_profile_steps
from envkit.train.run.batch_probe import probe
from envkit.train.recovery.faults import switch_device
from envkit.train.run import timing
from envkit.runfolder.folder import RunFolder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="envkit.train.run.child")
    parser.add_argument("run_dir")
    parser.add_argument("--stop-after", type=int, default=None)
    parser.add_argument("--resume", default="auto")
    parser.add_argument("--debug", action="store_true")
    parser.add_argument("--profile-steps", default=None, help="A:B (validated by envkit run)")
    parser.add_argument("--probe", default=None, help="write one probing step's memory to this JSON file")
    args = parser.parse_args(argv)
    timing.child_started()  # ENVKIT_TIMING=1: where the time to the first step goes (train/run/timing.py)

    import warnings

    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # torch without numpy: harmless here

    watch_parent(on_gone=parent_gone)  # stop when envkit run/sweep dies, however it dies, mid-step included
    run_dir = Path(args.run_dir)
    try:
        resolved = RunFolder(run_dir).config()
        cfg = Config.from_resolved(resolved)
        environ_before_cuda(cfg)  # training.deterministic: cuBLAS and Inductor read these when they start
        timing.mark("config read")
        from envkit.train.run.loop import train

        timing.mark("the trainer's modules imported (torch)")

        if args.probe:
            Path(args.probe).write_text(json.dumps(probe(cfg, run_dir, resolved.get("torch_settings"))))
            return 0

        result = train(cfg, run_dir, stop_after=args.stop_after, resume=args.resume,
                        torch_settings=resolved.get("torch_settings"), profile_steps=parse_profile_steps(args.profile_steps))
    except EnvkitError as exc:
        if args.debug:
            raise
        print(exc.one_line(), file=sys.stderr, flush=True)
        return 2
    except TrainingStopped as exc:
        if args.debug:
            raise
        print(f"envkit: training stopped: {exc}", file=sys.stderr, flush=True)
        return 3
    except KeyboardInterrupt:
        print("envkit: training aborted", file=sys.stderr, flush=True)
        return 130
    except Exception as exc:  # noqa: BLE001 - a device error gets its meaning and fix, not only a traceback
        if op_error(exc) and not args.debug:  # an op with no deterministic kernel
            print(op_error(exc), file=sys.stderr, flush=True)
            return 2
        if not args.debug:
            switch_device(run_dir, cfg.device.fallback if "cfg" in locals() else "auto", exc)  # returns only without a switch
        advice = device_error_advice(exc)
        if advice is None or args.debug:
            raise
        print(f"envkit: error: {advice}", file=sys.stderr, flush=True)
        return 1
    if result.status == "interrupted":
        # 128 + the signal's number, as a shell reports it (130 Ctrl-C, 143 SIGTERM): `envkit run && next` stops
        # here. Under torchrun 0: it calls a worker's other codes a failure; envkit run reads summary.json's signal.
        return 0 if int(os.environ.get("WORLD_SIZE", "1")) > 1 else exit_code(result.signal)
    return 0 if result.status in ("completed", "stopped") else 1


def device_error_advice(exc: BaseException) -> str | None:
    """The errors users meet on MPS and CUDA, in one line with what to do (docs/knowledge/mps.md, problems 1-8)."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    low = text.lower()
    resume = "; `envkit run` again resumes from the last checkpoint"
    if "out of memory" in low or type(exc).__name__ == "OutOfMemoryError":
        return (f"the device ran out of memory ({text[:160]}): lower training.batch_size and raise training.grad_accum "
                "to keep the effective batch (e.g. --set training.batch_size=16 --set training.grad_accum=4); on MPS never "
                "set PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 (it may cause system failure)" + resume)
    if isinstance(exc, NotImplementedError) and "mps" in low:
        return (f"an operator is missing on MPS ({text[:160]}): export PYTORCH_ENABLE_MPS_FALLBACK=1 before Python starts "
                "(the Apple profiles set it; `eval \"$(envkit env)\"`) so it runs on the CPU" + resume)
    if "bfloat16" in low and "mps" in low:
        return f"bf16 is not available on this MPS ({text[:160]}): it needs macOS 14; use training.precision: fp32" + resume
    if "float64" in low and "mps" in low:
        return f"MPS has no float64 ({text[:160]}): cast the model and data to float32" + resume
    return None


if __name__ == "__main__":  # the spawn guard: DataLoader workers re-import this module on macOS
    code = main()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # One of several processes: leave without the interpreter's teardown, where torch.distributed's C++
        # threads can abort a run that has finished (seen in CI: rank 1 "terminate called without an active
        # exception" after the run completed, so torchrun failed it). Its files are written and closed by now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
