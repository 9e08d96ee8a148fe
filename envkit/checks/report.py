"""Doctor: facts -> checks -> one report (rich on a terminal, plain lines otherwise, JSON)."""

from __future__ import annotations

from dataclasses import dataclass

from envkit.checks.device import best_device
from envkit.checks.machine import exit_code, run_checks
from envkit.checks.verdict import Check
from envkit.console import MARKS, PLAIN
from envkit.facts import Facts, machine_label
from envkit.checks.recommend import recommend_profile

GROUP_ORDER = ("System", "Python", "PyTorch", "Devices", "Environment")


@dataclass
class Diagnosis:
    facts: Facts
    checks: list[Check]
    profile: str
    profile_warning: str | None

    @property
    def exit_code(self) -> int:
        return exit_code(self.checks)

    def to_dict(self) -> dict:
        f = self.facts
        facts = {
            "os": {"name": f.os.name, "version": f.os.version, "build": f.os.build, "system": f.os.system},
            "python": {"version": f.python.version, "machine": f.python.machine, "rosetta": f.python.rosetta,
                       "implementation": f.python.implementation, "executable": f.python.executable,
                       "in_venv": f.python.in_venv},
            "chip": {"vendor": f.chip.vendor, "name": f.chip.name, "family": f.chip.family, "tier": f.chip.tier,
                     "perf_cores": f.chip.perf_cores, "efficiency_cores": f.chip.efficiency_cores,
                     "cores": f.chip.cores, "gpu_cores": f.chip.gpu_cores, "arm64_hardware": f.chip.arm64_hardware},
            "memory_bytes": f.memory_bytes,
            "gpus": [{"vendor": g.vendor, "name": g.name, "arch": g.arch, "memory_bytes": g.memory_bytes,
                      "driver": g.driver, "compute_capability": g.compute_capability, "device_id": g.device_id}
                     for g in f.gpus],
            "gpu_count": len(f.gpus),
            "rocm_version": f.rocm_version,
            "torch": {"version": f.torch.version, "channel": f.torch.channel, "local": f.torch.local,
                      "cuda": f.torch.cuda},
            "packages": f.packages,
            "torch_bytecode": None if f.torch_bytecode is None else {
                "folder": f.torch_bytecode.folder, "compiled": f.torch_bytecode.compiled,
                "dont_write_bytecode": f.torch_bytecode.dont_write_bytecode, "writable": f.torch_bytecode.writable,
                "compile_compiled": f.torch_bytecode.compile_compiled, "envkit_cache": f.torch_bytecode.envkit_cache},
            "env": f.env,
            "runtime": f.runtime,
            "source": f.source,
        }
        out = {"facts": facts, "checks": [c.to_dict() for c in self.checks], "device": best_device(f),
               "profile": self.profile}
        if self.profile_warning:
            out["profile_warning"] = self.profile_warning
        return out


def diagnose(facts: Facts) -> Diagnosis:
    profile, warning = recommend_profile(facts)
    return Diagnosis(facts, run_checks(facts), profile, warning)


def _summary(d: Diagnosis) -> str:
    n = {s: sum(1 for c in d.checks if c.status == s) for s in ("pass", "warn", "fail", "skip")}
    verdict = "not ready: fix the failures above" if n["fail"] else "ready to train"
    return f"{n['pass']} passed, {n['warn']} warnings, {n['fail']} failures: {verdict}"


def render_plain(d: Diagnosis, echo) -> None:
    echo(f"envkit doctor: {machine_label(d.facts)}" + (f"  [replay of {d.facts.source}]" if d.facts.source != "live" else ""))
    for group in GROUP_ORDER:
        for c in (c for c in d.checks if c.group == group):
            echo(f"{PLAIN[c.status]} {c.id}: {c.message}")
            if c.fix and c.status in ("warn", "fail"):
                echo(f"       fix: {c.fix}")
    echo(f"profile: {d.profile}" + (f" (warning: {d.profile_warning})" if d.profile_warning else ""))
    echo(_summary(d))


def render_rich(d: Diagnosis, console) -> None:
    from rich.table import Table
    from rich.text import Text

    title = Text("envkit doctor  ", style="bold")
    title.append(machine_label(d.facts))
    if d.facts.source != "live":
        title.append(f"  (replay of {d.facts.source})", style="dim")
    console.print(title)
    for group in GROUP_ORDER:
        items = [c for c in d.checks if c.group == group]
        if not items:
            continue
        worst = "fail" if any(c.status == "fail" for c in items) else "warn" if any(c.status == "warn" for c in items) else "pass"
        mark, color = MARKS[worst]
        console.print(Text(f"[{mark}] {group}", style=f"bold {color}"))
        # a grid keeps wrapped lines under their text, not under the mark
        grid = Table.grid(padding=(0, 1))
        grid.add_column(width=5, justify="right")
        grid.add_column(ratio=1)
        for c in items:
            mark, color = MARKS[c.status]
            body = Text(f"{c.id}: ", style="bold")
            body.append(c.message, style="dim" if c.status == "skip" else "")
            if c.fix and c.status in ("warn", "fail"):
                body.append(f"\n→ {c.fix}", style="cyan")
            grid.add_row(Text(mark, style=color), body)
        console.print(grid)
    prof = Text("\nRecommended profile: ", style="bold")
    prof.append(d.profile, style="bold magenta")
    if d.profile_warning:
        prof.append(f"  ({d.profile_warning})", style="yellow")
    console.print(prof)
    color = "red" if d.exit_code else "green"
    console.print(Text(_summary(d), style=f"bold {color}"))
