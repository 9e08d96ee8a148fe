"""Run the probes in child interpreters, each probe under its own timeout.

A worker (`python probes.py`) imports torch once, reports what the machine has, then runs the
probes it is given in order, announcing each before it starts. The runner reads that stream:

- a result arrives: recorded; a failing probe ends the worker, so the next one starts clean;
- the worker dies (segfault, `Abort trap: 6`, OMP error #15): the probe that had started is
  marked failed with the signal and the last stderr lines, and a fresh worker runs the rest;
- a probe passes its deadline (a hang, a DataLoader that never delivers): the whole process
  group is killed (DataLoader workers included), that probe fails, a fresh worker runs the rest.

`isolate=True` gives every probe a fresh interpreter (the strict mode: no state shared at all,
at the cost of one torch import per probe). The default reuses a worker while probes pass, and a
probe that fails or crashes after others ran in its worker runs once more, alone in a fresh one,
before it is reported: failed again, it is the device's (or torch's) failure; passed alone, a probe
before it left state that broke it, reported as a warning naming that probe. So a shared run
attributes a failure as an isolated one does, for one torch import instead of one a probe.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

PROBES_SCRIPT = Path(__file__).with_name("probes.py")
MARK = "@@envkit-selftest "

# Seconds each probe may take (times the timeout scale). The compile probe is generous: the
# first Inductor compile on a loaded CPU takes 20-60 s.
TIMEOUTS = {"startup": 120.0, "device": 60.0, "matmul": 90.0, "softmax": 90.0, "layernorm": 60.0, "conv2d": 60.0,
            "sdpa": 90.0, "backward": 90.0, "autocast": 120.0, "memory": 60.0, "throughput": 90.0,
            "bandwidth": 60.0, "dataloader": 120.0, "compile": 420.0}
# A probe whose deadline passes is a failure (a hang), except where slowness is not a defect.
TIMEOUT_STATUS = {"compile": "warn"}


# what a worker sends (probes.py; "?": a message of a kind it never sends) or what befell it
EventKind = Literal["info", "start", "result", "done", "?", "exit", "timeout"]
SENT: tuple[EventKind, ...] = ("info", "start", "result", "done")


@dataclass
class Event:
    """What a worker sent (kind: info/start/result/done) or what happened to it (exit/timeout)."""

    kind: EventKind
    data: dict = field(default_factory=dict)


class Worker:
    """One child interpreter running probes.py; stdout is read on a thread so reads can time out."""

    def __init__(self, python: str, env: dict[str, str]):
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=40)
        self._events: queue.Queue = queue.Queue()
        kwargs = {}
        if os.name == "posix":
            kwargs["start_new_session"] = True  # one process group: DataLoader workers die with it
        self.proc = subprocess.Popen([python, "-u", str(PROBES_SCRIPT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env, text=True, bufsize=1, **kwargs)
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None  # the pipes: opened with PIPE
        for line in self.proc.stdout:
            if line.startswith(MARK):
                try:
                    msg = json.loads(line[len(MARK):])
                except json.JSONDecodeError:
                    continue
                kind = msg.pop("kind", "?")
                self._events.put(Event(kind if kind in SENT else "?", msg))
            else:
                self.stderr_tail.append(line.rstrip("\n"))
        self.proc.wait()
        self._events.put(Event("exit", {"returncode": self.proc.returncode}))

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_tail.append(line.rstrip("\n"))

    def send(self, data: dict) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(data) + "\n")
            self.proc.stdin.flush()
            self.proc.stdin.close()
        except (BrokenPipeError, OSError, ValueError):
            pass  # it died: the reader reports the exit

    def next_event(self, timeout: float) -> Event:
        try:
            return self._events.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return Event("timeout", {"seconds": timeout})

    def kill(self) -> None:
        """Kill the worker's whole process group: a DataLoader worker may outlive its parent."""
        try:
            if os.name == "posix":
                os.killpg(self.proc.pid, signal.SIGKILL)
            elif self.proc.poll() is None:
                self.proc.kill()
        except (ProcessLookupError, PermissionError):
            pass  # the group is already empty
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def stderr_summary(self, lines: int = 3) -> str:
        useful = [ln for ln in self.stderr_tail if ln.strip() and "UserWarning" not in ln and "_conversion_method_template" not in ln]
        return " | ".join(useful[-lines:])


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "did not exit"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        what = {"SIGABRT": "aborted (on macOS: 'Abort trap: 6')", "SIGSEGV": "segmentation fault",
                "SIGBUS": "bus error", "SIGKILL": "killed (out of memory?)", "SIGILL": "illegal instruction"}.get(name, "killed")
        return f"{name}: {what}"
    return f"exit code {returncode}"


def timeout_for(name: str, scale: float, overrides: dict[str, float] | None = None) -> float:
    if overrides and name in overrides:
        return float(overrides[name])
    return TIMEOUTS.get(name, 90.0) * scale


def run_probes(python: str, env: dict[str, str], probes: list[str], make_config, *, isolate: bool = False,
               scale: float = 1.0, timeouts: dict[str, float] | None = None, on_info=None, on_result=None) -> tuple[dict, list[dict]]:
    """Run `probes`; returns (info from the first worker, result dicts in probe order).

    make_config(info) -> the config dict sent to workers (everything but "probes"); it may raise
    (e.g. an unavailable device) before any probe runs. on_info(info) and on_result(result) are
    called as things happen."""
    tally = _Tally(probes, on_result)
    info: dict | None = None
    config: dict | None = None
    while tally.pending:
        batch = tally.pending[:1] if isolate or tally.shared_try else list(tally.pending)
        tally.before = None
        worker = Worker(python, env)
        try:
            ev = worker.next_event(timeout_for("startup", scale, timeouts))
            if ev.kind != "info":
                worker.kill()
                why = (f"did not start within {timeout_for('startup', scale, timeouts):.0f} s" if ev.kind == "timeout"
                       else describe_exit(ev.data.get("returncode")))
                err = worker.stderr_summary()
                if info is not None:  # a later worker: the probes it was to run fail, none is left out of the report
                    tally.give_up(f"no fresh interpreter started for it ({why}" + (f": {err}" if err else "") + ")")
                return info or {"torch_error": f"the interpreter {why}" + (f": {err}" if err else ""), "startup_crash": True}, \
                    tally.in_order(probes)
            if info is None:
                info = ev.data
                if on_info:
                    on_info(info)
                if info.get("torch_error"):
                    worker.kill()
                    return info, []
                config = make_config(info)
            assert config is not None  # made from the first worker's info
            worker.send({**config, "probes": batch})
            _drive(worker, batch, tally, scale, timeouts)
        finally:
            worker.kill()
    return info or {}, tally.in_order(probes)


class _Tally:
    """The results so far, in the order they end; a probe that failed after others in a shared
    worker is held back (shared_try) while it runs again alone."""

    def __init__(self, probes: list[str], on_result) -> None:
        self.pending = list(probes)
        self.results: dict[str, dict] = {}
        self.shared_try: dict[str, tuple[dict, str]] = {}  # probe -> (its failure in a shared worker, the probe before it)
        self.before: str | None = None  # the last probe the current worker finished
        self.on_result = on_result

    def record(self, res: dict) -> None:
        name = res["name"]
        if res["status"] == "fail" and res.get("kind") != "timeout" and self.before is not None and name not in self.shared_try:
            self.shared_try[name] = (res, self.before)
            return
        _finish(_confirmed(res, self.shared_try.pop(name, None)), self.results, self.pending, self.on_result)
        self.before = name

    def give_up(self, why: str) -> None:
        """Every pending probe failed: no interpreter started to run it (a held-back one keeps its shared failure)."""
        for name in list(self.pending):
            held = self.shared_try.pop(name, None)
            res = ({**held[0], "message": f"{held[0]['message']} (after {held[1]} in a shared interpreter; running it "
                    f"again alone: {why})"} if held else
                   {"name": name, "status": "fail", "kind": "crash", "seconds": 0.0, "message": f"not run: {why}"})
            _finish(res, self.results, self.pending, self.on_result)

    def in_order(self, probes: list[str]) -> list[dict]:
        return [self.results[p] for p in probes if p in self.results]


def _drive(worker: Worker, batch: list[str], tally: _Tally, scale: float, timeouts: dict[str, float] | None) -> None:
    """Read one worker's events until its batch is done, it fails, hangs or dies."""
    current: str | None = None
    started = 0.0
    while True:
        limit = timeout_for(current, scale, timeouts) - (time.monotonic() - started) if current else timeout_for("startup", scale, timeouts)
        ev = worker.next_event(limit)
        if ev.kind == "start":
            current, started = ev.data["probe"], time.monotonic()
        elif ev.kind == "result":
            res = ev.data["result"]
            tally.record(res)
            current = None
            if res["status"] == "fail":
                return  # the worker stops itself after a failure; a fresh one runs the rest (or this probe alone)
        elif ev.kind == "done":
            return
        elif ev.kind == "timeout":
            if current is None:  # stuck between probes: treat the next pending one as hung
                current = next((p for p in batch if p not in tally.results), None)
                if current is None:
                    return
            limit_s = timeout_for(current, scale, timeouts)
            worker.kill()
            status = TIMEOUT_STATUS.get(current, "fail")
            tally.record({"name": current, "status": status, "kind": "timeout", "seconds": round(limit_s, 2),
                          "message": f"no result within {limit_s:.0f} s: the probe hung (process killed)"
                          + (" or is too slow here" if status == "warn" else "")})
            return
        elif ev.kind == "exit":
            err = worker.stderr_summary()
            if current is not None:
                tally.record({"name": current, "status": "fail", "kind": "crash", "seconds": round(time.monotonic() - started, 2),
                              "message": f"the interpreter crashed: {describe_exit(ev.data.get('returncode'))}"
                                         + (f"; stderr: {err}" if err else ""),
                              "details": {"returncode": ev.data.get("returncode"), "stderr_tail": list(worker.stderr_tail)[-10:]}})
            else:  # exited between probes without a result for the rest of its batch
                left = [p for p in batch if p not in tally.results]
                if left:
                    tally.record({"name": left[0], "status": "fail", "kind": "crash", "seconds": 0.0,
                                  "message": f"the interpreter exited before this probe ({describe_exit(ev.data.get('returncode'))})"
                                  + (f"; stderr: {err}" if err else "")})
            return


_OUTCOME = {"pass": "passed", "warn": "passed with a warning", "skip": "was skipped"}


def _confirmed(alone: dict, shared: tuple[dict, str] | None) -> dict:
    """The result of a probe that failed after `shared[1]` in a shared worker and then ran alone."""
    if shared is None:
        return alone
    first, before = shared
    if alone.get("kind") == "timeout":  # it hung alone (a warning for compile): that is what is reported
        return {**alone, "message": f"{alone['message']}, run alone after it failed after {before} in a shared interpreter "
                                    f"({first['kind']}: {first['message']})", "details": {**alone.get("details", {}), "shared_run": first}}
    if alone["status"] == "fail":
        return {**alone, "message": f"{alone['message']} (after {before} in a shared interpreter, and again alone in a fresh one)",
                "details": {**alone.get("details", {}), "shared_run": first}}
    return {**alone, "status": "warn", "kind": "neighbour",
            "message": f"failed after {before} in a shared interpreter ({first['kind']}: {first['message']}), "
                       f"then {_OUTCOME.get(alone['status'], alone['status'])} alone in a fresh one: "
                       f"{before} left the process in a state that broke it",
            "details": {**alone.get("details", {}), "shared_run": first, "after": before}}


def _finish(res: dict, results: dict, pending: list, on_result) -> None:
    name = res["name"]
    results[name] = res
    if name in pending:
        pending.remove(name)
    if on_result:
        on_result(res)


def default_python() -> str:
    return sys.executable
