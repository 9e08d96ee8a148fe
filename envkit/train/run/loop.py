"""The training loop, top to bottom like nanoGPT's train.py:

    build (device, data, model, precision, optimizer, resume (checkpointer.py), compile, DDP,
    batch stream: build.py) -> for each step:
       train_step (step.py) -> at a logged/evaluated/checkpointed step: one non-finite check
       (a rollback if it fails, recover.py), the metrics row, eval, checkpoint
    -> TrainResult (state.py) -> summary.json

Runs in the child process that `envkit run` starts (envkit/train/run/child.py), or in-process for
bench, tune, the batch-size probe and the benchmarks. `state.step` counts completed optimizer steps.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from envkit.train.data.bad_files import UnreadableFile
from envkit.train.recovery import faults, injection
from envkit.train.recovery.guards import NanGuard, TrainingStopped
from envkit.train.recovery.injection import Injector
from envkit.train.run import recover, timing
from envkit.train.run.compile_cache import compile_counters
from envkit.config.batch_auto import is_auto
from envkit.config.config import Config
from envkit.train.run.evaluate import evaluate
from envkit.train.run.memory import empty_cache, peak_memory_mb
from envkit.train.run.optim import lr_at
from envkit.train.run.speed import eager_stance
from envkit.train.run.state import TrainResult, TrainState
from envkit.train.run.step import StepOut, train_step
from envkit.train.run.stopping import Stopper
from envkit.train.run.build import build_trainer
from envkit.train.run.trainer import Trainer
from envkit.train.watching.mfu import mfu as compute_mfu
from envkit.train.watching.profiling import StepProfiler
from envkit.train.watching.telemetry import Telemetry, fmt_duration
from envkit.train.watching.watch import RunWatch
from envkit.runfolder.folder import RunFolder

if TYPE_CHECKING:
    from envkit.runfolder.records import TrainStatus


def train(cfg: Config, run_dir: Path, *, stop_after: int | None = None, resume: str = "auto",
          torch_settings: dict | None = None, handle_signals: bool = True,
          profile_steps: tuple[int, int] | None = None, on_step=None, split_oom: bool = True) -> TrainResult:
    """Train `cfg` in `run_dir`. bench and tune (envkit/bench/child.py) time these very steps:
    on_step(step=, loss=, micro_batch=, per_step=, unit=, epoch_samples=) returning True stops; split_oom=False
    re-raises an out of memory instead of splitting the micro-batch."""
    run_dir = Path(run_dir)
    training, logging = cfg.training, cfg.logging
    inject = injection.from_env()  # None unless a test set ENVKIT_TRAIN_INJECT
    tel = Telemetry(run_dir, total_steps=training.max_steps, unit="", heartbeat_seconds=logging.heartbeat_seconds,
                    progress=logging.progress, enabled=os.environ.get("RANK", "0") == "0",
                    stopped=TrainingStopped,  # a full disk at any write: status disk_full, one line
                    write_fault=(lambda name, step: inject.write_full(run_dir, name, step)) if inject else None)
    tr, state = build_trainer(cfg, run_dir, tel, torch_settings=torch_settings, resume=resume, inject=inject)
    cfg, training = tr.cfg, tr.training  # with what the trainer derived (max_steps from epochs, what auto became)
    if training.epochs:
        tel.set_epochs(training.epochs, training.max_steps)
    result = TrainResult(status="running", max_steps=training.max_steps, epochs=training.epochs, unit=tr.unit,
                         device=tr.device_type, device_name=tr.device_name, precision=tr.precision, world_size=tr.world,
                         parallel=tr.parallel, parameters=tr.parameters, config_hash=cfg.config_hash(), flops_per_token=tr.flops_per_token,
                         baseline_loss=tr.data.baseline_loss, chance_accuracy=tr.data.chance_accuracy, resumed_from=tr.resumed_from,
                         compile=tr.compile_note, derived=dict(cfg.derived))
    tel.rewound(state.step, "resume" if tr.resumed_from else "restart")  # rows of an earlier attempt past this step
    guard = NanGuard(training.nan_policy, training.nan_lr_factor, training.max_rollbacks, state.rollbacks)
    watch = tr.watch
    loop = _Loop(tr, state, guard, result, tel, watch, StepProfiler(run_dir, profile_steps, tr.device_type, tr.rank, tr.world, tr.log),
                 stop_after=stop_after, on_step=on_step, split_oom=split_oom, elapsed_mark=time.perf_counter(), saved_step=state.step,
                 inject=inject)
    _say_start(tr, state, tel)
    timing.mark("start lines, heartbeat")
    stop = (Stopper(tr.log if tr.master else (lambda m: None), tr.world, term_grace=cfg.checkpoint.sigterm_grace_seconds)
            if handle_signals else None)
    if stop is not None:  # a step given up (envkit's process gone, SIGTERM's grace over): summary.json says so
        stop.on_give_up = lambda reason: _given_up(loop, result, tel, reason)
    try:
        result.status = loop.run(stop)
    except TrainingStopped as exc:
        tr.log(f"error: {exc}")
        _finish(tr, state, result, tel, watch, exc.status, error=str(exc))
        raise
    except UnreadableFile as exc:  # dataset.on_bad_file: stop (in a worker or here): one line naming the file
        tr.log(f"error: {exc}")
        _finish(tr, state, result, tel, watch, "failed", error=str(exc))
        raise TrainingStopped(str(exc)) from exc
    except BaseException as exc:
        status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        result.signal = "SIGINT" if isinstance(exc, KeyboardInterrupt) else None  # a second Ctrl-C
        _finish(tr, state, result, tel, watch, status, error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        loop.profiler.close()
        if stop is not None:
            stop.restore()
        if tr.world > 1 and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    return _finish(tr, state, result, tel, watch, result.status)


@dataclass
class _Loop:
    tr: Trainer
    state: TrainState
    guard: NanGuard
    result: TrainResult
    tel: Telemetry
    watch: RunWatch
    profiler: StepProfiler
    stop_after: int | None
    on_step: Callable[..., bool] | None
    split_oom: bool
    elapsed_mark: float  # perf_counter at the last checkpoint: state.elapsed grows by what follows
    saved_step: int = 0  # the step the newest checkpoint holds (the one resumed from, at first)
    eta: float | None = None  # seconds left, as of the last logged step
    warm: bool = False  # the first step of this attempt has ended (compilation, caches, workers: done)
    first_step: int | None = None  # that step's number
    inject: Injector | None = None  # the tests' fault hook (ENVKIT_TRAIN_INJECT); None in every user's run

    def run(self, stop) -> TrainStatus:
        """Steps until max_steps (completed), --stop-after or on_step (stopped), or a signal (interrupted)."""
        tr, state, training = self.tr, self.state, self.tr.training
        while state.step < training.max_steps:
            if stop is not None and not stop.enter_step():  # asked to stop between two steps
                return self.stop_between(stop)
            self.profiler.before_step(state.step)
            lr = lr_at(state.step, T=training) * state.lr_scale  # warm-up, then cosine (train/run/optim.py)
            try:
                if self.inject:
                    self.inject.before_step(tr.run_dir, state.step + 1, tr.raw_model, micro_batch=state.micro_batch)
                out = train_step(tr, state, lr)
            except Exception as exc:  # noqa: BLE001 - out of memory: split the micro-batch, redo this step
                recover.split_after_oom(tr, state, exc, split=self.split_oom, metrics=self.tel.metrics)
                continue
            finally:
                if stop is not None:
                    stop.leave_step()
            if not self.warm:
                self.first_step_done()
            elif timing.ON and self.first_step is not None and state.step - self.first_step < timing.STEPS:
                self.later_step_done()  # ENVKIT_TIMING: waited for, so its line says when it ended (CUDA graphs recorded)
            if state.trained is not None:  # None: resumed from a checkpoint that did not count it
                state.trained += tr.per_step(state)  # samples or tokens, for the run's overall rate
            self.profiler.after_step(state.step)
            if training.empty_cache_every and state.step % training.empty_cache_every == 0:
                empty_cache(tr.device_type)
            if self.on_step is not None and self.on_step(step=state.step, loss=out.loss, micro_batch=state.micro_batch,
                                                         per_step=tr.per_step(state), unit=tr.unit,
                                                         # one epoch in per_step's units (tokens for a token model)
                                                         epoch_samples=tr.sampler.per_epoch * tr.per_step(state) // state.grad_accum):
                return "stopped"
            signalled = stop is not None and stop.agreed(tr.world)
            kept = self.after_step(out, lr, at_end=state.step in (training.max_steps, self.stop_after) or signalled)
            if state.step == self.first_step:  # after the first step's line: keeping the compiled graphs does not delay it
                self.keep_compiled()
            if not kept:
                continue  # rolled back: the steps since that checkpoint are trained again
            if state.step == self.stop_after:
                tr.log(f"stopped after step {state.step} (--stop-after); `envkit run` again resumes")
                return "stopped"
            if signalled:
                return self.interrupted(stop)
        return "completed"

    def first_step_done(self) -> None:
        """The warm-up ends with the first step: the device is waited for once, so the moment is the
        step's real end; utilization is sampled from here, and the progress says so."""
        self.warm = True
        if self.tr.device_type == "cuda":
            torch.cuda.synchronize(self.tr.device)
        timing.mark("first step: the device waited for (the step's end)")
        timing.first_step_ended()
        compiling = str(self.tr.compile_note).startswith("on")
        self.watch.first_step_done(compiling)
        self.tel.first_step_done(self.state.step)
        self.first_step = self.state.step

    def later_step_done(self) -> None:
        if self.tr.device_type == "cuda":
            torch.cuda.synchronize(self.tr.device)
        timing.mark(f"step {self.state.step}, waited for")

    def keep_compiled(self) -> None:
        """Everything a step runs is compiled by the first step's end (eval runs the eager model):
        rank 0 keeps it for the next run (compile_cache.py); the clock does not count the write."""
        if self.tr.compile_cache is not None and self.tr.master:
            with self.tr.clock.pause():
                self.tr.compile_cache.save()
            timing.mark("compile cache written, if anything compiled (after the first step's line)")

    def stop_between(self, stop) -> TrainStatus:
        """A stop that came after the last step's check: the last completed step is checkpointed
        (unless it is already), then the loop ends. Several processes cannot checkpoint without
        each other, and the others may be in the next step: this one gives up alone."""
        if self.tr.world > 1:
            stop.give_up(stop.signal or "a stop between steps")
        if self.state.step > self.saved_step:
            with self.tr.clock.pause():
                self.save()
        return self.interrupted(stop)

    def interrupted(self, stop) -> TrainStatus:
        self.result.signal = stop.signal if str(stop.signal).startswith("SIG") else None
        kept = "checkpoint written" if self.saved_step else "no step to checkpoint yet"
        self.tr.log(f"interrupted at step {self.state.step} ({stop.signal}); {kept}; `envkit run` again resumes")
        return "interrupted"

    def after_step(self, out: StepOut, lr: float, at_end: bool) -> bool:
        """Log, eval and checkpoint, each when due. These steps sync with the device, so the
        non-finite check happens here, once: False after a rollback."""
        step, training = self.state.step, self.tr.training
        c = self.tr.cfg
        every = {"logging": c.logging.every_steps, "eval": c.eval.every_steps, "checkpoint": c.checkpoint.every_steps}
        do_log = step % every["logging"] == 0 or at_end
        do_eval = bool(every["eval"] and step % every["eval"] == 0) or step == training.max_steps
        do_save = bool(every["checkpoint"] and step % every["checkpoint"] == 0) or at_end
        if not (do_log or do_eval or do_save):
            return True
        loss = self.tr.global_loss(out.loss) if do_log else None  # syncs with the device
        val = None
        if do_eval and recover.check_finite(self.tr, loss):
            # eager, as before blocks were compiled in place (compile_scope blocks, fsdp units): other batch
            # sizes and no_grad would compile them again, once per shape, for a few batches
            with self.tr.clock.pause(), eager_stance(self.tr.compile_cache is not None):
                val, acc = evaluate(self.tr.raw_model, self.tr.val_batches, self.tr.data, self.tr.device, self.tr.autocast)
        if not recover.check_finite(self.tr, loss, val):
            recover.rollback(self.tr, self.state, self.guard)
            self.tel.rewound(self.state.step, "rollback")
            return False
        if loss is not None:  # do_log
            self.log_row(loss, out, lr)
        if val is not None:
            self.eval_row(val, acc)
        if do_save:
            with self.tr.clock.pause():
                self.save()
        return True

    def log_row(self, loss: float, out: StepOut, lr: float) -> None:
        tr, state, result = self.tr, self.state, self.result
        dt, steps = tr.clock.read()  # eval and checkpoint time left out
        rate = tr.per_step(state) / dt if dt > 0 else None
        window = [state.step - steps + 1, state.step]
        if tr.clock.readings > 1 or steps > 2 * tr.cfg.logging.every_steps:
            result.rates.append(rate)  # the first interval holds warm-up and compilation
            result.rate_steps = [(result.rate_steps or window)[0], state.step]
        else:
            result.warmup_steps = window
        result.final_loss = loss
        row = {"step": state.step, "loss": round(loss, 6), "lr": lr, "dt_ms": round(1000 * dt, 3),
               f"{tr.unit}_per_second": rate, "epoch": round(tr.sampler.epoch_of(state.batches), 4)}
        if tr.clock.readings == 1:
            row["warmup"] = True  # the window holding this attempt's first step: no hint judges it
        if out.grad_norm is not None:
            row["grad_norm"] = float(out.grad_norm)
        mfu = compute_mfu(tr.flops_per_token, rate, tr.device_name, tr.world) if tr.unit == "tokens" else None
        if mfu is not None:
            row["mfu"] = mfu
        memory = peak_memory_mb(tr.device_type, tr.device)
        if memory:
            row["memory_mb"] = memory
        self.watch.on_log(row)
        self.tel.metrics(row)
        eta = self.eta = dt * (tr.training.max_steps - state.step)
        self.tel.progress(state.step, row, eta)
        self.tel.heartbeat(step=state.step, loss=loss, eta=eta, mfu=row.get("mfu"), memory_mb=row.get("memory_mb"))
        if row.get("memory_mb"):
            result.peak_memory_mb = max(result.peak_memory_mb or 0.0, row["memory_mb"])

    def eval_row(self, val: float, acc: float | None) -> None:
        state, data = self.state, self.tr.data
        if state.best_val_loss is None or val < state.best_val_loss:
            state.best_val_loss = val
        self.result.final_val_loss, self.result.accuracy = val, acc
        self.tel.metrics({"step": state.step, "val_loss": val, **({"accuracy": acc} if acc is not None else {})})
        self.tr.log(f"eval step {state.step}: val loss {val:.4f}" + (f", accuracy {acc:.3f}" if acc is not None else "")
                    + (f" (baseline {data.baseline_loss:.4f})" if data.baseline_loss else ""))

    def save(self) -> None:
        tr, state = self.tr, self.state
        now = time.perf_counter()
        state.elapsed += now - self.elapsed_mark
        self.elapsed_mark = now
        path = tr.checkpointer.save(state)  # every process: fsdp writes its shards
        self.saved_step = state.step
        if tr.master:
            assert path is not None  # rank 0's save returns the checkpoint's path
            # the last logged ETA: a run that checkpoints more often than it beats would otherwise show none
            self.tel.heartbeat(step=state.step, loss=self.result.final_loss, eta=self.eta, force=True,
                               checkpoint=path.name)
        if tr.world > 1:
            torch.distributed.barrier()


def _say_start(tr: Trainer, state: TrainState, tel: Telemetry) -> None:
    training = tr.training
    tel.start(state.step)
    if is_auto(tr.cfg.declared):  # decided by envkit run's probe (envkit/launch/auto_batch.py)
        tr.log(f"training.batch_size {training.batch_size} ({tr.cfg.origin.get('training.batch_size', 'auto')})")
    tr.log(f"training {tr.cfg.model.type} for {training.max_steps} steps ({state.micro_batch} x {state.grad_accum} accum x "
           f"{tr.world} proc, {tr.precision}, compile {tr.compile_note}) from step {state.step}; run folder {tr.run_dir}")
    tel.warming_up(state.step, compiling=str(tr.compile_note).startswith("on"))
    tel.heartbeat(step=state.step, loss=None, eta=None, force=True)


def _finish(tr: Trainer, state: TrainState, result: TrainResult, tel: Telemetry, watch: RunWatch, status: TrainStatus,
            error: str | None = None) -> TrainResult:
    """The result's last fields, summary.json and the last heartbeat (rank 0)."""
    result.status, result.error, result.steps = status, error, state.step
    result.best_val_loss, result.rollbacks, result.elapsed_seconds = state.best_val_loss, state.rollbacks, state.elapsed
    result.trained = state.trained
    result.micro_batch, result.grad_accum = state.micro_batch, state.grad_accum
    result.faults = faults.events(tr.run_dir)
    if result.unit == "tokens":
        result.mfu = compute_mfu(result.flops_per_token, result.per_second, result.device_name, result.world_size)
    result.watch = watch.finish()
    if tr.compile_cache is not None:
        if tr.master and state.step:
            tr.compile_cache.save()  # only if a graph compiled after the first step's save
        result.compile_cache = {"key": tr.compile_cache.key, "enabled": tr.compile_cache.enabled, "notes": tr.compile_cache.notes}
        result.compile_stats = compile_counters()
    if tr.data.skipped is not None:
        result.skipped_files = tr.data.skipped.summary()
        if tr.data.skipped.count:
            tel.log(tr.data.skipped.line())  # once, at the end: the count is whole only then
    if tel.enabled:
        tel.summary(result.summary())  # a full disk here stops with one line (status disk_full)
        tel.heartbeat(step=state.step, loss=result.final_loss, eta=None, status=status, force=True)
        tel.log(f"{status}: {state.step}/{result.max_steps} steps, final loss {_f(result.final_loss, 'no step logged')}, "
                f"best val loss {_f(state.best_val_loss, 'no eval yet')}"
                + (f", accuracy {result.accuracy:.3f}" if result.accuracy is not None else "") + ", " + _rates(result)
                + (f", mfu {100 * result.mfu:.1f}%" if result.mfu else "") + f", {fmt_duration(state.elapsed)} of training")
    tel.close()
    return result


def _given_up(loop: _Loop, result: TrainResult, tel: Telemetry, reason: str) -> None:
    """summary.json and one line for a step given up unfinished. Called from another thread while the
    main thread is inside the step: nothing is closed or joined here, the process ends right after."""
    state, kept = loop.state, loop.saved_step
    result.status, result.steps, result.signal = "interrupted", state.step, "SIGTERM" if reason.startswith("SIGTERM") else None
    result.error = f"{reason}: step {state.step + 1} was given up unfinished; the newest checkpoint holds step {kept}"
    tel.log(f"interrupted in step {state.step + 1} ({reason}): given up unfinished; `envkit run` again resumes from "
            + (f"the checkpoint of step {kept}" if kept else "the start"))
    if tel.enabled:
        RunFolder(loop.tr.run_dir).write_summary(result.summary())
        tel.heartbeat(step=state.step, loss=result.final_loss, eta=None, status="interrupted", force=True)


def _f(x, missing: str) -> str:
    return f"n/a ({missing})" if x is None else f"{x:.4f}"


def _rates(result: TrainResult) -> str:
    """The run's rate: everything it trained over its training time (evals and checkpoints in), and
    beside it, named, the median rate of the logged windows (steady state, which MFU is taken from)."""
    unit = result.unit
    overall = f"{result.overall_per_second:,.0f} {unit}/s overall" if result.overall_per_second else f"{unit}/s n/a (no time measured)"
    first, last = result.rate_steps or (None, None)
    steady = (f"{result.per_second:,.0f} {unit}/s median of the logged windows of steps {first}-{last}" if result.per_second
              else "no steady rate (too few logged windows: the first holds the warm-up)")
    if result.per_second and result.warmup_steps:
        steady += f"; steps {result.warmup_steps[0]}-{result.warmup_steps[1]}, the warm-up, left out"
    return f"{overall} ({steady})"
