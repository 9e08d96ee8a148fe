"""Run the command and watch it from envkit's process: stdout and stderr go to the terminal and to
train.log as they come; the heartbeat thread samples the device; SIGINT/SIGTERM/SIGHUP sent to
envkit go on to the command's whole process group (its own group, so torchrun's workers get them
too); a command that prints nothing and logs no metric for --stall-timeout is recorded as stalled
and stopped (a watchdog inside the training process cannot fire during a Metal or NCCL hang);
--restart-on-failure reruns a command that died, never one that succeeded or that the user stopped.

The supervisor owns the run folder (runfolder.owner.take_owner_lock, passed on to the command, so the folder
is owned while either lives) and the command dies with it: PR_SET_PDEATHSIG on the command (Linux,
at once) and a guard process watching a pipe (envkit/exec/guard.py: Linux and macOS, the whole
process group)."""

from __future__ import annotations

import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from envkit.runfolder.progress import Heartbeat
from envkit.exec.reads import DataReads
from envkit.exec.scalars import PrintedMetrics
from envkit.launch.spawn import die_with_parent
from envkit.fsutil import process_start_time
from envkit.redact import redact_argv, strip_userinfo
from envkit.runfolder.applog import open_append
from envkit.runfolder.owner import take_owner_lock
from envkit.train.watching.cpu_fallback import FallbackCounter
from envkit.runfolder.find import read_metrics
from envkit.exec.heartbeat import HeartbeatWriter
from envkit.runfolder.folder import RunFolder

# SIGUSR1: Slurm's warning before a time limit (passed on by envkit's job): the command's to handle
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, *((signal.SIGUSR1,) if hasattr(signal, "SIGUSR1") else ()))
LAST_LINES = 40
MAX_DELAY = 300.0


@dataclass
class Options:
    restarts: int = 0
    restart_delay: float = 10.0
    stall_timeout: float | None = None
    grace: float = 30.0  # seconds between SIGINT and SIGTERM (and SIGTERM and SIGKILL) when envkit stops it
    caffeinate: bool = True
    heartbeat_seconds: float = 3.0
    echo: bool = True  # show the output live (off for --detach: only train.log)
    metrics_pattern: str | None = None  # printed metrics (scalars.py): a user's regex, "off", or None for the default reading

    @classmethod
    def from_record(cls, options: dict, **overrides) -> Options:
        """From a run folder's config.json "options" (written by exec: ExecRequest.recorded): the
        supervisor's keys, each of its type; the process layout and anything else is not the supervisor's."""
        def number(key: str, default, kind=float):
            value = options.get(key, default)
            return kind(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default

        stall = options.get("stall_timeout")
        return cls(restarts=number("restarts", cls.restarts, int), restart_delay=number("restart_delay", cls.restart_delay),
                   stall_timeout=float(stall) if isinstance(stall, (int, float)) and not isinstance(stall, bool) else None,
                   grace=number("grace", cls.grace), caffeinate=options.get("caffeinate") is not False,
                   metrics_pattern=options["metrics_pattern"] if isinstance(options.get("metrics_pattern"), str) else None,
                   **overrides)


def caffeinate_command(pid: int, system: str, enabled: bool = True) -> list[str] | None:
    """macOS: keep the machine from idle (-i) and system (-s) sleep while `pid` lives (-w). Not -d:
    holding the display awake has been reported to trip the GPU watchdog."""
    if not enabled or system != "Darwin":
        return None
    return ["caffeinate", "-i", "-s", "-w", str(pid)]


def restart_delay(attempt: int, base: float) -> float:
    """Back-off before attempt `attempt + 1`: base, 2*base, 4*base, ... at most five minutes."""
    return min(MAX_DELAY, base * 2 ** (attempt - 1))


STALLED_EXIT = 124  # envkit exec's exit code for a command stopped as stalled (docs/exec.md)


def exit_code(returncode: int) -> int:
    """A shell's exit code: killed by signal N -> 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


class Supervisor:
    def __init__(self, argv: list[str], env: dict, run_dir: Path, opts: Options, console=None):
        self.argv, self.env, self.run_dir, self.opts = argv, env, Path(run_dir), opts
        self.console = console  # where the command's stdout is echoed: sys.stdout, or sys.stderr under --json
        self.proc: subprocess.Popen | None = None
        self.interrupted: int | None = None  # the signal the user sent
        self.fallbacks = FallbackCounter()
        self.printed = PrintedMetrics(self.run_dir, opts.metrics_pattern)  # metrics from `step N: loss X` lines
        self.last_lines: deque[str] = deque(maxlen=LAST_LINES)
        self._log_lock = threading.Lock()
        self._log = os.fdopen(open_append(RunFolder(self.run_dir).train_log), "ab", buffering=0)  # never through a symlink
        self._wake = threading.Event()
        self.beat = HeartbeatWriter(self.run_dir, interval=opts.heartbeat_seconds)

    # ---------------------------------------------------------------- the whole run
    def run(self) -> int:
        started = time.time()
        attempts: list[dict] = []
        self.owner = take_owner_lock(self.run_dir, "envkit exec")  # released by the kernel when we (and the command) end
        reads = DataReads(self.run_dir).start()  # the data the command reads, fingerprinted as it goes
        self._start_guard()
        previous = {s: signal.signal(s, self._on_signal) for s in FORWARDED}
        self.beat.start()
        try:
            rc, how = 0, "exited"
            for n in range(1, self.opts.restarts + 2):
                self._note(f"attempt {n}/{self.opts.restarts + 1}: {' '.join(redact_argv(self.argv))}")
                t0 = time.time()
                rc, how, stall = self._attempt(n)
                attempts.append({"attempt": n, "started_at": t0, "ended_at": time.time(), "exit_code": rc, "how": how,
                                 **({"stall": stall} if stall else {})})
                self._note(f"attempt {n} {how} with exit code {rc}")
                if rc == 0 or self.interrupted or n > self.opts.restarts:
                    break
                delay = restart_delay(n, self.opts.restart_delay)
                self._note(f"restarting in {delay:g} s ({self.opts.restarts + 1 - n} attempt(s) left)")
                self.beat.beat(status="restarting", attempt=n)
                if self._wake.wait(delay) and self.interrupted:
                    break
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
            self.beat.stop()
        # told to stop (Ctrl-C, SIGTERM, `envkit stop`, Slurm's SIGUSR1 to save and stop): not finished, even on exit 0
        status = ("completed" if rc == 0 and not self.interrupted else "interrupted" if self.interrupted
                  else "stalled" if attempts and attempts[-1]["how"] == "stalled" else "failed")
        self.printed.close()
        reads.close()
        if not RunFolder(self.run_dir).opened_file.exists() and os.environ.get("ENVKIT_RECORD_OPENED") != "0":
            self._note("the data the command read is not recorded: no Python process of it loaded envkit's open hook "
                       "(python -I, -E or -S, another sitecustomize earlier on PYTHONPATH, or not Python)")
        self._write_summary(status, rc, started, attempts)
        self._log.close()
        self._stop_guard()
        self.owner.close()
        # a stall is stopped with SIGINT, so the command's own code is a Ctrl-C's (130): envkit exits
        # 124 instead (what `timeout` exits with), so a script tells a hang from a user's stop
        return STALLED_EXIT if status == "stalled" else rc

    def _start_guard(self) -> None:
        """envkit/exec/guard.py in a session of its own, reading a pipe only this process writes."""
        pkg_parent = str(Path(__file__).resolve().parents[2])
        read_end, self._guard_pipe = os.pipe()
        code = "import sys; sys.path.insert(0, sys.argv.pop(1)); from envkit.exec.guard import main; sys.exit(main(sys.argv[1:]))"
        try:
            self._guard = subprocess.Popen([sys.executable, "-c", code, pkg_parent, str(self.opts.grace)], stdin=read_end,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        finally:
            os.close(read_end)

    def _tell_guard(self, line: str) -> None:
        try:
            os.write(self._guard_pipe, line.encode() + b"\n")
        except OSError:  # the guard is gone: pdeathsig still covers the command on Linux
            pass

    def _stop_guard(self) -> None:
        self._tell_guard("done")
        os.close(self._guard_pipe)
        try:
            self._guard.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def _write_summary(self, status: str, rc: int, started: float, attempts: list[dict]) -> None:
        rows = [r for r in read_metrics(self.run_dir) if isinstance(r, dict)]
        steps = [r["step"] for r in rows if isinstance(r.get("step"), int)]
        losses = [r["loss"] for r in rows if isinstance(r.get("loss"), (int, float))]
        ended = time.time()
        summary = {"kind": "exec", "status": status, "exit_code": rc, "started_at": started, "ended_at": ended,
                   "duration_seconds": round(ended - started, 3), "attempts": attempts, "steps": steps[-1] if steps else None,
                   "final_loss": losses[-1] if losses else None, "updated_at": ended, "hints": []}
        if self.interrupted:
            summary["signal"] = signal.Signals(self.interrupted).name
        if self.beat.util:
            summary["avg_device_util_pct"] = round(sum(self.beat.util) / len(self.beat.util), 1)
        self.fallbacks.add_to(summary)
        if summary["cpu_fallbacks"] and self.opts.echo:
            h = summary["hints"][-1]
            print(f"envkit: hint [cpu-fallback]: {h['message']}; try: {h['fix']}", file=sys.stderr, flush=True)
        RunFolder(self.run_dir).write_summary(summary)

    # ---------------------------------------------------------------- one attempt
    def _attempt(self, n: int) -> tuple[int, str, dict | None]:
        try:
            self.proc = proc = subprocess.Popen(self.argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                stdin=None if self.opts.echo else subprocess.DEVNULL,
                                                start_new_session=True,  # its own group (pgid = pid): signals reach torchrun's workers too
                                                preexec_fn=die_with_parent(), pass_fds=(self.owner.fileno(),))
        except OSError as exc:  # found when checked, gone or not executable now
            self._note(f"could not start {redact_argv(self.argv[:1])[0]}: {exc.strerror or exc}")
            return 127, "not started", None
        self._tell_guard(f"pgid {proc.pid}")
        self.beat.last_output_at = time.time()
        self.beat.beat(status="running", attempt=n, child_pid=proc.pid, child_start=process_start_time(proc.pid), pgid=proc.pid)
        caff = caffeinate_command(proc.pid, platform.system(), self.opts.caffeinate)
        if caff and shutil.which(caff[0]):
            subprocess.Popen(caff, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        readers = [threading.Thread(target=self._pump, args=(proc.stdout, self.console or sys.stdout), daemon=True),
                   threading.Thread(target=self._pump, args=(proc.stderr, sys.stderr), daemon=True)]
        for t in readers:
            t.start()
        stall = None
        while True:
            try:
                proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                pass
            if stall is None and self.opts.stall_timeout and not self.interrupted:
                quiet = time.time() - self.beat.last_activity()
                if quiet > self.opts.stall_timeout:
                    stall = self._record_stall(quiet)
                    threading.Thread(target=self.stop_group, daemon=True).start()
        for t in readers:
            t.join(timeout=10)
        how = "stalled" if stall else "interrupted" if self.interrupted else "exited" if proc.returncode >= 0 else "killed"
        return exit_code(proc.returncode), how, stall

    def _pump(self, pipe, terminal) -> None:
        """Copy one stream to the terminal and train.log as it comes; lines feed the watchers."""
        partial = b""
        fd = pipe.fileno()
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            self.beat.last_output_at = time.time()
            if self.opts.echo:
                try:
                    terminal.buffer.write(chunk)
                    terminal.buffer.flush()
                except (OSError, ValueError):  # envkit's output went away (`| head`): train.log still gets it all
                    self.opts.echo = False
            with self._log_lock:
                self._log.write(chunk)
            partial += chunk
            *lines, partial = partial.split(b"\n")
            for raw in lines:
                line = raw.decode("utf-8", "replace").rstrip("\r")
                self.last_lines.append(line)
                self.fallbacks.feed(line)
                self.printed.feed(line)
        if partial:
            self.last_lines.append(partial.decode("utf-8", "replace"))
            self.fallbacks.feed(partial.decode("utf-8", "replace"))
        pipe.close()

    def _note(self, message: str) -> None:
        line = f"envkit: {strip_userinfo(message)}"
        with self._log_lock:
            self._log.write((time.strftime("%Y-%m-%d %H:%M:%S ") + line + "\n").encode())
        if self.opts.echo:
            print(line, file=sys.stderr, flush=True)

    # ---------------------------------------------------------------- stalls and signals
    def _record_stall(self, quiet: float) -> dict:
        stall = {"quiet_seconds": round(quiet, 1), "at": time.time(), "last_lines": list(self.last_lines)[-20:]}
        spy = shutil.which("py-spy")
        if spy and self.proc is not None:
            try:
                out = subprocess.run([spy, "dump", "--pid", str(self.proc.pid)], capture_output=True, text=True, timeout=30)
                stall["py_spy"] = (out.stdout or out.stderr)[-20000:]
            except (OSError, subprocess.SubprocessError) as exc:
                stall["py_spy"] = f"py-spy failed: {exc}"
        else:
            stall["py_spy"] = None  # `pip install py-spy` records the Python stacks of a stalled run
        self._note(f"no output and no metric for {quiet:.0f} s: recorded as stalled, stopping the command")
        RunFolder(self.run_dir).write_stall(stall)
        return stall

    def _on_signal(self, signum, frame) -> None:
        self.interrupted = signum
        self._wake.set()
        self._send(signum)

    def _send(self, signum: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def stop_group(self) -> None:
        """SIGINT, then SIGTERM after the grace period, then SIGKILL."""
        proc = self.proc
        if proc is None:  # not started: nothing to stop
            return
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            self._send(signum)
            try:
                proc.wait(timeout=self.opts.grace)
                return
            except subprocess.TimeoutExpired:
                continue


def run_state_pids(run_dir: Path) -> tuple[int | None, int | None]:
    """(envkit's pid, the command's pid) from heartbeat.json."""
    beat = RunFolder(run_dir).heartbeat() or Heartbeat()
    return beat.pid, beat.child_pid
