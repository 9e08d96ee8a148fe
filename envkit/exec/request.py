"""What `envkit exec` was asked, as one typed record (the command line parsed once, at the edge), and
the small judgements made on it: is the command a Python interpreter, how long is a duration."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.exec.supervise import Options
from envkit.plan.model import Nodes
from envkit.resources import load_toml

# A command that starts with a Python interpreter: torchrun runs its script itself (no --no-python),
# and its interpreter is the one whose torch the record names
PYTHON = re.compile(r"^python[\d.]*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600}


def is_python(program: str) -> bool:
    return bool(PYTHON.match(Path(program).name))


def parse_duration(text: str | None, where: str) -> float | None:
    """'15m' -> 900.0, '90s' / '90' -> 90.0, '2h' -> 7200.0."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not m or float(m.group(1)) <= 0:
        raise EnvkitError(f"{text!r} is not a duration", where=where, fix="e.g. 15m, 90s or 2h")
    return float(m.group(1)) * _UNITS[m.group(2)]


def metrics_pattern(text: str | None, where: str = "--metrics-pattern") -> str | None:
    """--metrics-pattern checked before anything starts: a regex that compiles (one line naming it,
    exit 2, where it does not); "off" kept as is; None: the default reading of printed lines."""
    if text is None or text == "off":
        return text
    try:
        re.compile(text)
    except re.error as exc:
        raise EnvkitError(f"not a regular expression: {exc}", where=where,
                          fix="a Python regex with named groups, e.g. 'it (?P<step>\\d+) loss (?P<loss>[\\d.]+)'; 'off' records none") from None
    return text


def project_metrics_pattern(start: Path) -> str | None:
    """`metrics_pattern` under `[tool.envkit]` in the pyproject.toml of `start` or the nearest folder
    above it that has one (the project's own way of printing, kept with the project), checked."""
    for folder in (start, *start.parents):
        path = folder / "pyproject.toml"
        if path.is_file():
            try:
                value = load_toml(path).get("tool", {}).get("envkit", {}).get("metrics_pattern")
            except Exception as exc:  # noqa: BLE001 - tomllib.TOMLDecodeError and friends: one line
                raise EnvkitError(f"invalid TOML: {exc}", where=str(path)) from None
            if value is not None and not isinstance(value, str):
                raise EnvkitError("tool.envkit.metrics_pattern is not a string", where=str(path),
                                  fix='metrics_pattern = "it (?P<step>\\d+) loss (?P<loss>[\\d.]+)"')
            return metrics_pattern(value, where=f"{path}: tool.envkit.metrics_pattern")
        if (folder / ".git").exists():
            return None
    return None


@dataclass(frozen=True, kw_only=True)
class ExecRequest:
    """`envkit exec`'s options, one field per option (commands/exec.py's click parameters, by name)."""

    command: tuple[str, ...]
    profile_name: str | None = None
    name: str | None = None
    runs_dir: Path = Path("runs")
    detach: bool = False
    restarts: int = 0
    restart_delay: float = 10.0
    stall_timeout: str | None = None  # as typed ("15m"): passed on as is to a Slurm job's own exec
    grace: float = 30.0
    metrics_pattern: str | None = None  # --metrics-pattern: a regex of the user's, or "off"
    no_caffeinate: bool = False
    no_check: bool = False
    nproc_per_node: int = 1
    nodes: Nodes = Nodes()  # as asked (plan/refusals.py checks it)
    as_json: bool = False
    into: Path | None = None  # --run-dir: the folder `exec --slurm` made at submission

    def __post_init__(self) -> None:  # click gives strings for the path options
        object.__setattr__(self, "runs_dir", Path(self.runs_dir))
        object.__setattr__(self, "into", None if self.into is None else Path(self.into))

    @property
    def argv(self) -> list[str]:
        return list(self.command)

    def stall_seconds(self) -> float | None:
        return parse_duration(self.stall_timeout, "--stall-timeout")

    def supervise(self) -> Options:
        """How the supervisor watches the command."""
        return Options(restarts=self.restarts, restart_delay=self.restart_delay, stall_timeout=self.stall_seconds(),
                       grace=self.grace, caffeinate=not self.no_caffeinate, metrics_pattern=metrics_pattern(self.metrics_pattern))

    def recorded(self, nnodes: int, node_rank: int) -> dict:
        """config.json's "options": the supervisor's (a detached one reads them back: Options.from_record)
        and the process layout."""
        o = self.supervise()
        return {"restarts": o.restarts, "restart_delay": o.restart_delay, "stall_timeout": o.stall_timeout, "grace": o.grace,
                "caffeinate": o.caffeinate, "metrics_pattern": o.metrics_pattern, "nproc_per_node": self.nproc_per_node,
                "nnodes": nnodes, "node_rank": node_rank}

    def slurm_options(self) -> list[str]:
        """The options a Slurm job's own `envkit exec` is started with."""
        return [*(["--profile", self.profile_name] if self.profile_name else []), "--restart-on-failure", str(self.restarts),
                "--restart-delay", str(self.restart_delay), *(["--stall-timeout", self.stall_timeout] if self.stall_timeout else []),
                "--grace", str(self.grace), *(["--no-check"] if self.no_check else []),
                *(["--metrics-pattern", self.metrics_pattern] if self.metrics_pattern else [])]
