"""The sbatch script: templates/slurm/job.sbatch filled in. Values that reach the shell are quoted
(shlex.quote); values on #SBATCH lines are checked to be one line without quotes, since sbatch
reads those lines itself."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from envkit import __version__
from envkit.errors import EnvkitError
from envkit.resources import shipped_dir
from envkit.slurm.options import SlurmRequest


def _directive_value(value: str, where: str) -> str:
    if not re.fullmatch(r"[^\s'\"\\#]+", value):
        raise EnvkitError(f"{where} {value!r}: spaces, quotes, '#' and backslashes do not survive an #SBATCH line",
                          where=where, fix="a plain value (partition, account and QOS names are single words)")
    return value


def directives(req: SlurmRequest, gpus: int) -> list[str]:
    lines = []
    if gpus:
        lines.append(f"--gpus-per-node={gpus}")
    for flag, value in (("--cpus-per-task", req.cpus_per_task), ("--mem", req.mem), ("--time", req.time),
                        ("--partition", req.partition), ("--account", req.account), ("--qos", req.qos)):
        if value is not None:
            lines.append(f"{flag}={_directive_value(str(value), flag)}")
    for arg in req.sbatch_args:
        if not arg.startswith("-") or "\n" in arg:
            raise EnvkitError(f"--sbatch-arg {arg!r} is not an sbatch option", where="--sbatch-arg",
                              fix="e.g. --sbatch-arg=--constraint=h100 (one option each time)")
        lines.append(arg)
    return lines


def render(*, req: SlurmRequest, gpus: int, job_name: str, run_dir: Path, record: Path, script: Path, output: str,
           cwd: Path, python: str, command: list[str], array: str | None = None) -> str:
    text = (shipped_dir("templates") / "slurm" / "job.sbatch").read_text()
    extra = [*([f"--array={array}"] if array else []), *directives(req, gpus)]
    values = {
        "version": __version__, "command": " ".join(shlex.quote(a) for a in command).replace("\n", " "),
        "run_dir": str(run_dir), "script": shlex.quote(str(script)), "grace": str(req.grace),
        "job_name": _directive_value(re.sub(r"[^\w.-]+", "-", job_name)[:64] or "envkit", "job name"),
        "nodes": str(req.nodes), "directives": "".join(f"#SBATCH {d}\n" for d in extra),
        "output": _directive_value(output, "the job's output file (the run folder's path)"),
        "requeue": "--requeue" if req.requeue else "--no-requeue",
        "cwd": shlex.quote(str(cwd)), "python": shlex.quote(python), "record": shlex.quote(str(record)),
    }
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    return text
