"""Act: run the installer (streaming its output), fetch nightly wheels into envkit's cache, and
verify the result inside the target interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Literal

from envkit.checks import builds
from envkit.checks.accel import gfx_problems
from envkit.errors import EnvkitError
from envkit.facts.model import TorchDevice
from envkit.fsutil import cache_dir, sha256_file
from envkit.install.index.pages import timeouts
from envkit.redact import strip_userinfo

# what the verification checks the installed torch on: its device, or cpu-only (a +cpu build: no GPU support expected)
VerifyDevice = TorchDevice | Literal["cpu-only"]


class StepFailed(Exception):
    """A step of the install failed; the caller rolls back."""


def stream(argv: list[str], *, echo=None, timeout: float | None = None) -> int:
    """Run a command, passing its output through line by line (URL credentials stripped: pip masks
    the password but prints the user, and a failing resolver may print a URL whole). Ctrl-C stops it
    and re-raises."""
    echo = echo or (lambda line: sys.stderr.write(f"  │ {strip_userinfo(line)}\n"))
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                                env={**os.environ, "PYTHONUNBUFFERED": "1", "PIP_NO_INPUT": "1"})
    except FileNotFoundError:
        raise StepFailed(f"{argv[0]} not found")
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            echo(line.rstrip("\n"))
        return proc.wait(timeout=timeout)
    except BaseException:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise


def run_step(argv: list[str], what: str, echo=None) -> None:
    rc = stream(argv, echo=echo)
    if rc != 0:
        raise StepFailed(f"{what} failed (exit code {rc}): {' '.join(argv)}")


def wheel_cache() -> Path:
    return cache_dir() / "wheels"


def fetch_wheel(url: str, filename: str, sha256: str | None) -> Path:
    """Download a wheel into envkit's cache (kept after the index drops it: nightlies vanish after ~60 days)."""
    dest = wheel_cache() / filename
    if dest.is_file() and (sha256 is None or sha256_file(dest) == sha256):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{filename}.part")
    try:
        if url.startswith("file://"):
            import shutil
            from urllib.parse import unquote, urlsplit

            shutil.copyfile(unquote(urlsplit(url).path), tmp)
        else:
            import requests

            with requests.get(url, stream=True, timeout=timeouts()) as resp:
                if resp.status_code in (401, 403):  # a private index: the credential rule is lock/credentials.py
                    raise EnvkitError(f"{url} answered HTTP {resp.status_code}: the index wants a user and password",
                                      fix="put them into the index's URL in PIP_INDEX_URL (or ENVKIT_INDEX_URL, UV_INDEX_URL), "
                                          "https://USER:PASSWORD@host/path-of-the-index, used for that index only; or into ~/.netrc")
                resp.raise_for_status()
                with open(tmp, "wb") as fh:
                    for chunk in resp.iter_content(1 << 20):
                        fh.write(chunk)
        if sha256 and sha256_file(tmp) != sha256:
            raise EnvkitError(f"the wheel {filename} does not match the sha256 the index gave",
                              fix="try again; if it persists, the index or a proxy is corrupting files")
        os.replace(tmp, dest)
    except OSError as exc:
        raise EnvkitError(f"cannot download {url}: {exc}", fix="check the network and the disk space")
    except Exception as exc:
        if isinstance(exc, EnvkitError):
            raise
        raise EnvkitError(f"cannot download {url}: {exc.__class__.__name__}", fix="check the network, or point --index-url at a mirror")
    finally:
        if tmp.exists():
            tmp.unlink()
    return dest


_VERIFY = r"""
import json, sys, warnings
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # --no-numpy: harmless for this check
from importlib import metadata
want = json.loads(sys.argv[1]); device = sys.argv[2]
out = {"ok": True, "problems": [], "versions": {}}
for name, version in want.items():
    try:
        got = metadata.version(name)
    except metadata.PackageNotFoundError:
        got = None
    out["versions"][name] = got
    if got != version:
        out["problems"].append("%s is %s, the plan said %s" % (name, got, version))
try:
    import torch
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    assert float((x @ x.T).sum()) == 83.0
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
    out["hip"] = getattr(torch.version, "hip", None)
    if device == "xpu":
        xpu = getattr(torch, "xpu", None)
        if xpu is None or not xpu.is_available():
            out["problems"].append("torch.xpu.is_available() is False: this build does not see the Intel GPU")
        else:
            float(torch.ones(4, device="xpu").sum())
    elif device == "cuda":
        if not torch.cuda.is_available():
            out["problems"].append("torch.cuda.is_available() is False: this build does not see the GPU")
        else:
            # envkit judges these (a kernel-less GPU fails the op below with a worse message)
            out["arch_list"] = list(torch.cuda.get_arch_list())
            out["gpus"] = [{"name": torch.cuda.get_device_name(i),
                            "capability": "%d.%d" % tuple(torch.cuda.get_device_capability(i))}
                           for i in range(torch.cuda.device_count())]
            if out["hip"]:  # ROCm: the gfx target, which get_arch_list() names
                for i, g in enumerate(out["gpus"]):
                    g["gfx"] = str(getattr(torch.cuda.get_device_properties(i), "gcnArchName", "") or "")
            try:
                float(torch.ones(4, device="cuda").sum())
            except Exception as exc:
                out["problems"].append("a CUDA operation failed: %s" % (str(exc).splitlines() or [type(exc).__name__])[0][:300])
    elif device == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            out["problems"].append("torch.backends.mps.is_available() is False")
        else:
            float(torch.ones(4, device="mps").sum())
    elif device == "cpu-only" and torch.version.cuda:
        out["problems"].append("a CUDA build (%s) was installed on a machine without a GPU" % torch.version.cuda)
except Exception as exc:
    out["problems"].append("import torch failed: %s: %s" % (type(exc).__name__, str(exc).splitlines()[0] if str(exc) else ""))
if device == "cuda" and not out["problems"]:
    try:  # their bytecode, written by this import (torch.compile is on by default on CUDA): not a check
        import torch._dynamo, torch._inductor.compile_fx
    except Exception:
        pass
out["ok"] = not out["problems"]
print("ENVKIT_VERIFY " + json.dumps(out))
"""


def verify(python: str, versions: dict[str, str], device: VerifyDevice, timeout: float = 300) -> dict:
    """Run inside the target: the installed versions are the planned ones, torch imports, the device
    works, and on CUDA every GPU's architecture is among the build's kernels (or PTX it can JIT). Its
    imports write the bytecode of the modules they load, PYTHONDONTWRITEBYTECODE or not: the installers
    wrote none (plan.py, BYTECODE), and without it every process compiles torch's sources again."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    try:
        proc = subprocess.run([python, "-c", _VERIFY, json.dumps(versions), device], capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"ok": False, "problems": [f"verification hung for more than {timeout:g} s"]}
    for line in proc.stdout.splitlines():
        if line.startswith("ENVKIT_VERIFY "):
            out = json.loads(line[len("ENVKIT_VERIFY "):])
            # a ROCm build lists gfx targets, not sm_XY: its fit is judged by checks/accel.py
            if out.get("hip"):
                problems = gfx_problems(out.get("arch_list"), out.get("gpus") or [])
            else:
                problems = arch_problems(out.get("arch_list"), out.get("gpus") or [])
            if problems:
                out["problems"] = problems + [p for p in out["problems"] if "no kernel image" not in p]
                out["ok"] = False
            return out
    last = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
    return {"ok": False, "problems": [f"the verification process crashed: {last}"]}


def which_uv() -> str | None:
    """uv on PATH, or installed beside the interpreter running envkit (`pip install uv` into
    envkit's own venv puts it there, without that venv being active)."""
    import shutil

    found = shutil.which("uv")
    if found:
        return found
    beside = Path(sys.executable).parent / ("uv.exe" if os.name == "nt" else "uv")
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None


def arch_problems(arch_list: list[str] | None, gpus: list[dict]) -> list[str]:
    """A GPU whose architecture the installed build holds no kernels (nor PTX) for: "no kernel
    image is available for execution on the device" at the first operation."""
    if arch_list is None:
        return []
    sm, ptx = builds.parse_arch_list(arch_list)
    out = []
    for g in gpus:
        if builds.arch_list_runs(sm, ptx, g.get("capability")) is False:
            out.append(f"{g.get('name')} ({builds.sm_name(g.get('capability'))}) is not in this build's "
                       f"torch.cuda.get_arch_list() ({', '.join(arch_list)}): every CUDA operation would fail with "
                       "'no kernel image is available'")
    return out
