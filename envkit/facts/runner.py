"""The one door through which envkit looks at a machine.

Every probe (a command with a timeout, a file, the interpreter, installed packages, the
environment, the torch runtime) goes through a Runner. `LiveRunner` asks this machine,
`RecordingRunner` asks it and keeps the answers, `ReplayRunner` answers from a snapshot: so
every parser is a pure function over text and any Mac can be tested on Linux.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from envkit.errors import EnvkitError
from envkit.facts import bytecode_cache, interp_probe
from envkit.fsutil import atomic_write_text
from envkit.redact import recorded_env, redact

SNAPSHOT_VERSION = 1

# The environment variables recorded (an allow-list) and how secrets are kept out: envkit/redact.py,
# shared by every writer.
# Torch and friends: read from installed metadata, never imported.
PACKAGES = ("torch", "torchvision", "torchaudio", "numpy")

_RUNTIME_SCRIPT = r"""
import json, sys
out = {"ok": True}
import torch
out["torch_version"] = torch.__version__
mps = getattr(torch.backends, "mps", None)
out["mps_built"] = bool(mps is not None and mps.is_built())
out["mps_available"] = bool(mps is not None and mps.is_available())
if out["mps_available"]:
    try:
        torch.ones(2, device="mps", dtype=torch.bfloat16).sum().item()
        out["mps_bf16"] = True
    except Exception as exc:
        out["mps_bf16"] = False
        out["mps_bf16_error"] = str(exc).splitlines()[0][:200]
out["cuda_built"] = bool(torch.backends.cuda.is_built())
out["cuda_version"] = torch.version.cuda
out["hip_version"] = getattr(torch.version, "hip", None)
out["cuda_available"] = bool(torch.cuda.is_available())
out["device_count"] = torch.cuda.device_count() if out["cuda_available"] else 0
out["devices"] = []
for i in range(out["device_count"]):
    p = torch.cuda.get_device_properties(i)
    dev = {"name": p.name, "capability": "%d.%d" % (p.major, p.minor), "memory_bytes": int(p.total_memory)}
    if getattr(p, "gcnArchName", None):  # ROCm: "gfx942:sramecc+:xnack-"
        dev["gcn_arch"] = p.gcnArchName
    out["devices"].append(dev)
if out["cuda_available"]:
    out["cuda_bf16"] = bool(torch.cuda.is_bf16_supported())
    out["arch_list"] = list(torch.cuda.get_arch_list())
try:
    out["cudnn_version"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
except Exception:
    out["cudnn_version"] = None
out["openmp"] = bool(torch.backends.openmp.is_available())
xpu = getattr(torch, "xpu", None)
out["xpu_available"] = bool(xpu is not None and xpu.is_available())
if out["xpu_available"]:
    out["xpu_devices"] = []
    for i in range(xpu.device_count()):
        p = xpu.get_device_properties(i)
        out["xpu_devices"].append({"name": p.name, "memory_bytes": int(p.total_memory),
                                   "device_id": "0x%x" % p.device_id if isinstance(getattr(p, "device_id", None), int) else None})
    try:
        out["xpu_bf16"] = bool(xpu.is_bf16_supported())
    except Exception:
        pass
out["num_threads"] = torch.get_num_threads()
print("ENVKIT_RUNTIME " + json.dumps(out))
"""


@dataclass
class CommandResult:
    rc: int
    stdout: str
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.rc == 0


def relevant_env(environ: dict[str, str]) -> dict[str, str]:
    """Allow-listed, not secret by name, URLs without credentials (envkit/redact.py)."""
    return recorded_env(environ)


class Runner:
    """Interface shared by the live, recording and replaying runners."""

    system: str = "unknown"

    def run(self, argv: list[str], timeout: float = 10.0) -> CommandResult | None:
        raise NotImplementedError

    def read(self, path: str) -> str | None:
        raise NotImplementedError

    def interpreter(self) -> dict:
        """{"python": {...}, "packages": {...}, "openmp_libs": [...]}"""
        raise NotImplementedError

    def environ(self) -> dict[str, str]:
        raise NotImplementedError

    def runtime(self, timeout: float = 60.0) -> dict | None:
        raise NotImplementedError


class LiveRunner(Runner):
    """Asks this machine. `python` is the interpreter to examine (default: envkit's own)."""

    def __init__(self, python: str | None = None):
        import platform

        self.system = platform.system()
        self.python_exe = python or sys.executable
        self._interp: dict | None = None

    def run(self, argv, timeout=10.0):
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, errors="replace")
        except FileNotFoundError:
            return None
        except PermissionError as exc:
            return CommandResult(126, "", str(exc))
        except subprocess.TimeoutExpired:
            return CommandResult(124, "", f"timed out after {timeout:g} s")
        except OSError as exc:
            return CommandResult(127, "", str(exc))
        return CommandResult(proc.returncode, proc.stdout, proc.stderr)

    def read(self, path):
        try:
            return Path(path).read_text(errors="replace")
        except OSError:
            return None

    def interpreter(self) -> dict:
        prefix = str(bytecode_cache.prefix_for(self.python_exe) or "") or None  # whether torch's bytecode is there too
        if self._interp is None and os.path.realpath(self.python_exe) == os.path.realpath(sys.executable) \
                and self.python_exe == sys.executable:
            self._interp = interp_probe.probe(list(PACKAGES), prefix)  # our own interpreter: no subprocess needed
        if self._interp is None:
            res = self.run([self.python_exe, interp_probe.__file__, json.dumps(PACKAGES), *([prefix] if prefix else [])], timeout=30)
            if res is None or not res.ok:
                why = "not found" if res is None else (res.stderr.strip().splitlines() or ["failed"])[-1]
                raise EnvkitError(f"cannot run the Python interpreter {self.python_exe}: {why}",
                                  fix="pass --python with a working interpreter")
            self._interp = json.loads(res.stdout)
        assert self._interp is not None  # set above, by one way or the other
        return self._interp

    def environ(self):
        return relevant_env(dict(os.environ))

    def runtime(self, timeout=60.0):
        res = self.run([self.python_exe, "-c", _RUNTIME_SCRIPT], timeout=timeout)
        return parse_runtime_output(res, timeout)


def parse_runtime_output(res: CommandResult | None, timeout: float) -> dict:
    """Turn the torch subprocess's outcome into a runtime dict; a crash is data, not an exception."""
    if res is None:
        return {"ok": False, "error": "interpreter not found"}
    for line in res.stdout.splitlines():
        if line.startswith("ENVKIT_RUNTIME "):
            return json.loads(line[len("ENVKIT_RUNTIME "):])
    if res.rc == 124:
        return {"ok": False, "error": f"importing torch hung for more than {timeout:g} s"}
    lines = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    if res.rc < 0:
        import signal

        try:
            name = signal.Signals(-res.rc).name
        except ValueError:
            name = f"signal {-res.rc}"
        return {"ok": False, "error": f"the torch process crashed ({name}) {last}".strip(), "rc": res.rc}
    if "No module named 'torch'" in res.stderr:
        return {"ok": False, "error": "torch is not installed", "missing": True}
    return {"ok": False, "error": last or f"torch exited with code {res.rc}", "rc": res.rc}


class RecordingRunner(LiveRunner):
    """Asks this machine and keeps every answer, to be written as a snapshot."""

    def __init__(self, python: str | None = None):
        super().__init__(python)
        self.commands: dict[str, object] = {}
        self.files: dict[str, str] = {}
        self._runtime: dict | None = None

    def run(self, argv, timeout=10.0):
        res = super().run(argv, timeout)
        if argv and argv[0] == self.python_exe:
            return res  # the interpreter probes are recorded in their own sections
        key = " ".join(argv)
        if res is None:
            return None  # absent from the snapshot = not found
        self.commands[key] = res.stdout if res.ok and not res.stderr else {
            "rc": res.rc, "stdout": res.stdout, "stderr": res.stderr}
        return res

    def read(self, path):
        text = super().read(path)
        if text is not None:
            self.files[path] = text
        return text

    def runtime(self, timeout=60.0):
        self._runtime = super().runtime(timeout)
        return self._runtime

    def snapshot(self) -> dict:
        interp = self.interpreter()
        snap = {
            "envkit_snapshot": SNAPSHOT_VERSION,
            "system": self.system,
            "python": interp["python"],
            "commands": self.commands,
            "files": self.files,
            "env": self.environ(),
            "packages": interp["packages"],
            "openmp_libs": interp.get("openmp_libs", []),
            "torch_cuda_requires": interp.get("torch_cuda_requires", []),
            "torch_bytecode": interp.get("torch_bytecode"),
        }
        if self._runtime is not None:
            snap["runtime"] = self._runtime
        # command outputs and files may hold URLs with credentials too (pip config, proxies)
        return cast(dict, redact_home(redact(snap), str(Path.home())))  # redact_home keeps the shape: a dict stays a dict


def redact_home(value, home: str):
    """Write the user's home directory as ~ everywhere in a snapshot."""
    if not home or home == "/":
        return value
    if isinstance(value, str):
        return value.replace(home, "~")
    if isinstance(value, list):
        return [redact_home(v, home) for v in value]
    if isinstance(value, dict):
        return {redact_home(k, home): redact_home(v, home) for k, v in value.items()}
    return value


class ReplayRunner(Runner):
    """Answers from a snapshot: a command or file it does not hold behaves as not found."""

    def __init__(self, snapshot: dict, source: str = "snapshot"):
        self.snap = snapshot
        self.source = source
        self.system = snapshot.get("system") or "unknown"

    def run(self, argv, timeout=10.0):
        value = self.snap.get("commands", {}).get(" ".join(argv))
        if value is None:
            return None
        if isinstance(value, str):
            return CommandResult(0, value, "")
        return CommandResult(int(value.get("rc", 1)), value.get("stdout", "") or "", value.get("stderr", "") or "")

    def read(self, path):
        return self.snap.get("files", {}).get(path)

    def interpreter(self):
        return {"python": dict(self.snap.get("python") or {}),
                "packages": dict(self.snap.get("packages") or {}),
                "openmp_libs": list(self.snap.get("openmp_libs") or []),
                "torch_cuda_requires": list(self.snap.get("torch_cuda_requires") or []),
                "torch_bytecode": self.snap.get("torch_bytecode")}  # absent from snapshots recorded before it was asked

    def environ(self):
        return relevant_env(dict(self.snap.get("env") or {}))

    def runtime(self, timeout=60.0):
        return self.snap.get("runtime")


def load_snapshot(path: str | os.PathLike) -> dict:
    """Read and check a snapshot file; any problem is one clear EnvkitError."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise EnvkitError("snapshot file not found", where=str(p), fix="pass the path of a file written by `envkit doctor --record`")
    except OSError as exc:
        raise EnvkitError(f"cannot read snapshot: {exc.strerror}", where=str(p))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EnvkitError(f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})", where=str(p),
                          fix="record it again with `envkit doctor --record FILE`")
    if not isinstance(data, dict) or "envkit_snapshot" not in data:
        raise EnvkitError("not an envkit snapshot (no \"envkit_snapshot\" key)", where=str(p),
                          fix="record one with `envkit doctor --record FILE`")
    if data["envkit_snapshot"] != SNAPSHOT_VERSION:
        raise EnvkitError(f"snapshot version {data['envkit_snapshot']!r} is not supported (this envkit reads {SNAPSHOT_VERSION})",
                          where=str(p), fix="record it again with this envkit")
    for key, kind in (("commands", dict), ("files", dict), ("env", dict), ("packages", dict), ("python", dict)):
        if key in data and not isinstance(data[key], kind):
            raise EnvkitError(f"key \"{key}\" must be an object", where=str(p))
    return data


def write_json_atomic(path: str | os.PathLike, data) -> None:
    atomic_write_text(Path(path), json.dumps(data, indent=2, sort_keys=False) + "\n")
